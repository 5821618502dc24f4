//! 32-bit address arithmetic: an offset computed in 32 bits and then widened to 64 wraps
//! silently once a tensor passes 4 GiB, which no CPU test can reach. This lint finds every
//! **widening** (`cvt.u64.u32`, `cvt.s64.s32`, `mul.wide.{u,s}32`, `mad.wide.{u,s}32`) of a
//! 32-bit value that was produced by a 32-bit **product** (`mul.lo`, `mad.lo`, `shl`, through any
//! chain of 32-bit `add`/`sub`/`mov`/`min`/`max`/`selp`) and that **feeds an address** (the
//! 64-bit result reaches the `[...]` of a load, store or atomic through 64-bit arithmetic).
//!
//! Such a site is sound only when the template relies on a bound it declared: a
//! [`IndexBound`], printed into the entry as a structured comment by [`declare_index_bound`],
//! says that every such 32-bit value is an *element index* at most `limit` (≤ `u32::MAX`), and the
//! config's `validate()` (with the run-time shape checks) proves the bound from its shape limits.
//! What the lint cannot tell apart (syntax alone does not say whether `x · 128` is a row stride
//! or a byte scaling): a declared element bound is trusted for every product in the kernel, so
//! templates scale indices to bytes *after* widening (`mul.wide.u32 idx, size`).

use std::collections::{HashMap, HashSet};
use std::fmt;

use crate::builder::KernelBuilder;

/// The comment prefix of a declaration (one line in the entry body).
const DECLARATION: &str = "ptxforge index-bound <= ";

/// A bound a template relies on: every 32-bit product widened into an address in the kernel is
/// an element index at most `limit`, proven by `proof` (the config check that enforces it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexBound {
    pub limit: u64,
    pub proof: &'static str,
}

/// Prints `bound` into the kernel being built, where [`check_module`] finds it.
pub fn declare_index_bound(k: &mut KernelBuilder, bound: &IndexBound) {
    k.comment(format!("{DECLARATION}{}: {}", bound.limit, bound.proof));
}

/// One rejected widening.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddressFinding {
    pub entry: String,
    /// 1-based line in the module text.
    pub line: usize,
    pub instruction: String,
    pub reason: String,
}

impl fmt::Display for AddressFinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} line {}: `{}`: {}",
            self.entry, self.line, self.instruction, self.reason
        )
    }
}

/// One instruction of an entry: opcode with modifiers, destination and source operands.
#[derive(Debug)]
struct Inst {
    line: usize,
    text: String,
    opcode: String,
    dst: Option<String>,
    srcs: Vec<String>,
    addr_regs: Vec<String>,
}

fn parse_inst(line: usize, raw: &str) -> Option<Inst> {
    let text = raw.trim().trim_end_matches(';').trim();
    let body = match text.strip_prefix('@') {
        Some(rest) => rest.split_once(char::is_whitespace)?.1.trim(),
        None => text,
    };
    let (opcode, rest) = body.split_once(char::is_whitespace).unwrap_or((body, ""));
    let mut addr_regs = Vec::new();
    let mut operands = Vec::new();
    for part in split_operands(rest) {
        if let Some(inner) = part.strip_prefix('[') {
            let inner = inner.trim_end_matches(']');
            let base = inner.split(['+', '-']).next().unwrap_or("").trim();
            if base.starts_with('%') {
                addr_regs.push(base.to_string());
            }
        }
        operands.push(part);
    }
    let stores = opcode.starts_with("st.") || opcode.starts_with("red.");
    let (dst, srcs) = if stores || operands.is_empty() {
        (None, operands)
    } else {
        let mut it = operands.into_iter();
        (it.next(), it.collect())
    };
    Some(Inst {
        line,
        text: text.to_string(),
        opcode: opcode.to_string(),
        dst,
        srcs,
        addr_regs,
    })
}

/// Splits operands at top-level commas (not inside `[...]` or `{...}`).
fn split_operands(s: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth) = (Vec::new(), String::new(), 0i32);
    for c in s.chars() {
        match c {
            '[' | '{' => depth += 1,
            ']' | '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(cur.trim().to_string());
                cur.clear();
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_string());
    }
    out
}

fn is_reg(s: &str) -> bool {
    s.starts_with('%') && !s.contains('.')
}

fn has_mod(opcode: &str, m: &str) -> bool {
    opcode.split('.').any(|p| p == m)
}

fn is32(opcode: &str) -> bool {
    ["u32", "s32", "b32"].iter().any(|t| has_mod(opcode, t))
}

fn is64(opcode: &str) -> bool {
    ["u64", "s64", "b64"].iter().any(|t| has_mod(opcode, t))
}

fn head(opcode: &str) -> &str {
    opcode.split('.').next().unwrap_or("")
}

/// What a 32-bit register's value is, following its definitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// No 32-bit product on any definition chain.
    Plain,
    /// A product (`row · k + col`) somewhere on a chain: it wraps unless something bounds it.
    Product,
}

struct Entry<'a> {
    defs: HashMap<&'a str, Vec<&'a Inst>>,
    memo: HashMap<&'a str, Origin>,
}

impl<'a> Entry<'a> {
    fn origin(&mut self, reg: &'a str) -> Origin {
        if let Some(&o) = self.memo.get(reg) {
            return o;
        }
        // Loop-carried registers: assume plain while on the stack, then settle.
        self.memo.insert(reg, Origin::Plain);
        let defs = self.defs.get(reg).cloned().unwrap_or_default();
        let mut o = Origin::Plain;
        for d in defs {
            let op = d.opcode.as_str();
            if !is32(op) {
                continue;
            }
            let here = match head(op) {
                "mul" | "mad" if has_mod(op, "lo") => Origin::Product,
                "shl" => Origin::Product,
                "add" | "sub" | "mov" | "min" | "max" | "selp" => {
                    let srcs: Vec<&'a str> = d
                        .srcs
                        .iter()
                        .filter(|s| is_reg(s))
                        .map(String::as_str)
                        .collect();
                    srcs.into_iter()
                        .map(|s| self.origin(s))
                        .fold(Origin::Plain, worse)
                }
                _ => Origin::Plain,
            };
            o = worse(o, here);
        }
        self.memo.insert(reg, o);
        o
    }
}

fn worse(a: Origin, b: Origin) -> Origin {
    match (a, b) {
        (Origin::Product, _) | (_, Origin::Product) => Origin::Product,
        _ => Origin::Plain,
    }
}

/// The 64-bit registers whose value reaches an address, through 64-bit arithmetic.
fn address_feeders<'a>(
    insts: &'a [Inst],
    defs: &HashMap<&'a str, Vec<&'a Inst>>,
) -> HashSet<&'a str> {
    let mut seen: HashSet<&'a str> = HashSet::new();
    let mut work: Vec<&'a str> = insts
        .iter()
        .flat_map(|i| i.addr_regs.iter().map(String::as_str))
        .collect();
    while let Some(r) = work.pop() {
        if !seen.insert(r) {
            continue;
        }
        for d in defs.get(r).into_iter().flatten() {
            let op = d.opcode.as_str();
            let arith = matches!(
                head(op),
                "add" | "sub" | "mov" | "mad" | "mul" | "shl" | "cvta"
            ) && is64(op)
                && !has_mod(op, "wide");
            if arith {
                work.extend(d.srcs.iter().filter(|s| is_reg(s)).map(String::as_str));
            }
        }
    }
    seen
}

/// Is `inst` a widening of a 32-bit register into 64 bits? Returns the widened sources.
fn widened(inst: &Inst) -> Vec<&str> {
    let op = inst.opcode.as_str();
    let wide32 = matches!(head(op), "mul" | "mad")
        && has_mod(op, "wide")
        && (has_mod(op, "u32") || has_mod(op, "s32"));
    let cvt = head(op) == "cvt"
        && (op.ends_with(".u64.u32") || op.ends_with(".s64.s32") || op.ends_with(".s64.u32"));
    if !(wide32 || cvt) {
        return Vec::new();
    }
    let n = if cvt { 1 } else { 2 };
    inst.srcs
        .iter()
        .take(n)
        .filter(|s| is_reg(s))
        .map(String::as_str)
        .collect()
}

/// Checks every `.entry` of a PTX module (see the module docs for the rule).
pub fn check_module(ptx: &str) -> Vec<AddressFinding> {
    let mut findings = Vec::new();
    let mut entry: Option<String> = None;
    let mut insts: Vec<Inst> = Vec::new();
    let mut bound: Option<u64> = None;
    let lines: Vec<&str> = ptx.lines().collect();
    for (i, raw) in lines.iter().enumerate() {
        let t = raw.trim();
        if let Some(rest) = t.split(".entry ").nth(1).filter(|_| t.contains(".entry ")) {
            let name = rest.split(['(', ' ']).next().unwrap_or("").to_string();
            entry = Some(name);
            insts.clear();
            bound = None;
            continue;
        }
        if t == "}" {
            if let Some(name) = entry.take() {
                check_entry(&name, &insts, bound, &mut findings);
            }
            continue;
        }
        if entry.is_none() || t.is_empty() || t.starts_with('.') || t.ends_with(':') {
            continue;
        }
        if let Some(c) = t.strip_prefix("//") {
            if let Some(decl) = c.trim().strip_prefix(DECLARATION) {
                let limit = decl
                    .split(':')
                    .next()
                    .and_then(|v| v.trim().parse::<u64>().ok());
                bound = limit.or(bound);
            }
            continue;
        }
        if t == "{" {
            continue;
        }
        if let Some(inst) = parse_inst(i + 1, t) {
            insts.push(inst);
        }
    }
    findings
}

fn check_entry(name: &str, insts: &[Inst], bound: Option<u64>, out: &mut Vec<AddressFinding>) {
    let mut defs: HashMap<&str, Vec<&Inst>> = HashMap::new();
    for inst in insts {
        if let Some(d) = &inst.dst {
            defs.entry(d.as_str()).or_default().push(inst);
        }
    }
    let feeders = address_feeders(insts, &defs);
    let mut e = Entry {
        defs,
        memo: HashMap::new(),
    };
    for inst in insts {
        let Some(dst) = &inst.dst else { continue };
        if !feeders.contains(dst.as_str()) {
            continue;
        }
        for src in widened(inst) {
            let reason = match (e.origin(src), bound) {
                (Origin::Plain, _) => continue,
                (Origin::Product, Some(limit)) if limit <= u64::from(u32::MAX) => continue,
                (Origin::Product, Some(limit)) => format!(
                    "`{src}` is a 32-bit product widened into an address, and the declared bound \
                     {limit} does not fit 32 bits"
                ),
                (Origin::Product, None) => format!(
                    "`{src}` is a 32-bit product widened into an address, and the kernel declares \
                     no index bound that keeps it below 2^32"
                ),
            };
            out.push(AddressFinding {
                entry: name.to_string(),
                line: inst.line,
                instruction: inst.text.clone(),
                reason,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `out[row · k + col] = 0` with the index computed in 32 bits, then scaled in 64.
    fn kernel(declaration: &str, widen: &str) -> String {
        format!(
            ".visible .entry k(.param .u64 p, .param .u32 pk)\n{{\n\t.reg .b32 %r<6>;\n\
             \t.reg .b64 %rd<4>;\n{declaration}\tld.param.u64 %rd1, [p];\n\
             \tld.param.u32 %r1, [pk];\n\tmov.u32 %r2, %ctaid.x;\n\tmov.u32 %r3, %tid.x;\n\
             \tmad.lo.u32 %r4, %r2, %r1, %r3;\n\tadd.u32 %r5, %r4, 1;\n\t{widen}\n\
             \tadd.s64 %rd3, %rd1, %rd2;\n\tst.global.u32 [%rd3], 0;\n\tret;\n}}\n"
        )
    }

    #[test]
    fn undeclared_widened_product_is_rejected() {
        for widen in ["mul.wide.u32 %rd2, %r5, 4;", "cvt.u64.u32 %rd2, %r5;"] {
            let f = check_module(&kernel("", widen));
            assert_eq!(f.len(), 1, "{widen}: {f:?}");
            assert_eq!(f[0].line, 11);
            assert!(f[0].reason.contains("declares no index bound"), "{}", f[0]);
        }
    }

    #[test]
    fn declared_bound_accepts_and_must_fit_32_bits() {
        let ok = format!("\t// {DECLARATION}4294967295: test\n");
        assert!(check_module(&kernel(&ok, "mul.wide.u32 %rd2, %r5, 4;")).is_empty());
        let too_big = format!("\t// {DECLARATION}4294967296: test\n");
        let f = check_module(&kernel(&too_big, "mul.wide.u32 %rd2, %r5, 4;"));
        assert_eq!(f.len(), 1, "{f:?}");
    }

    #[test]
    fn plain_indices_and_non_address_widenings_pass() {
        // A widened thread index (no product) is fine; so is a product that never reaches an
        // address (here it is only stored as data).
        let plain = kernel("", "mul.wide.u32 %rd2, %r3, 4;");
        assert!(check_module(&plain).is_empty());
        let data = kernel("", "mul.wide.u32 %rd2, %r5, 4;")
            .replace("st.global.u32 [%rd3], 0;", "st.global.u64 [%rd1], %rd2;");
        assert!(check_module(&data).is_empty(), "{:?}", check_module(&data));
    }
}
