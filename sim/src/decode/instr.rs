//! The instruction table: one arm per PTX opcode, turning `opcode.mods operands` into an [`Op`]
//! with its semantic function, or an `Unsupported` error naming the line and opcode.

use std::collections::HashMap;

use super::{
    Addr, AtomFn, BarRed, BarRedOp, Class, Inst, MemSpace, Op, ShflMode, Special, Src, Sym,
    VoteMode,
};
use crate::error::SimError;
use crate::memory::{LOCAL_WINDOW, SHARED_WINDOW};
use crate::parse::ast::{Instr, Operand, Space};
use crate::sem::cvt::CvtSpec;
use crate::sem::float::{self, FFlags};
use crate::sem::{bits, half, int, round_to, Rnd, BF16, F16, F2, F3};
use crate::types::Ty;

#[derive(Default)]
pub(super) struct Ctx {
    pub regs: HashMap<String, (u32, Ty)>,
    pub labels: HashMap<String, u32>,
    pub syms: HashMap<String, Sym>,
    /// Module-scope `.global` variables: name → index into the launch's address table.
    pub globals: HashMap<String, u32>,
    /// Functions this one may call, by name.
    pub callees: HashMap<String, super::call::Callee>,
    pub sink: u32,
    /// The carry-flag register (`CC`) of the carry-chain instructions.
    pub cc: u32,
}

pub(super) type R<T> = Result<T, SimError>;

/// Modifier list with use tracking: whatever is left unused at the end is unsupported.
pub(super) struct Mods<'a> {
    items: Vec<(&'a str, bool)>,
}

impl<'a> Mods<'a> {
    pub(super) fn new(list: &'a [String]) -> Self {
        Mods {
            items: list.iter().map(|s| (s.as_str(), false)).collect(),
        }
    }

    pub(super) fn take(&mut self, m: &str) -> bool {
        for it in &mut self.items {
            if !it.1 && it.0 == m {
                it.1 = true;
                return true;
            }
        }
        false
    }

    pub(super) fn take_any(&mut self, ms: &[&'static str]) -> Option<&'static str> {
        ms.iter().copied().find(|m| self.take(m))
    }

    fn types(&mut self) -> Vec<Ty> {
        let mut out = Vec::new();
        for it in &mut self.items {
            if !it.1 {
                if let Some(t) = Ty::parse(it.0) {
                    it.1 = true;
                    out.push(t);
                }
            }
        }
        out
    }

    fn rnd(&mut self) -> Option<Rnd> {
        Some(match self.take_any(&["rn", "rz", "rm", "rp"])? {
            "rz" => Rnd::Rz,
            "rm" => Rnd::Rm,
            "rp" => Rnd::Rp,
            _ => Rnd::Rn,
        })
    }

    fn irnd(&mut self) -> Option<Rnd> {
        Some(match self.take_any(&["rni", "rzi", "rmi", "rpi"])? {
            "rzi" => Rnd::Rz,
            "rmi" => Rnd::Rm,
            "rpi" => Rnd::Rp,
            _ => Rnd::Rn,
        })
    }

    /// Memory-model, cache and eviction qualifiers: no effect in a sequential interpreter.
    fn ignore_memory_hints(&mut self) {
        for it in &mut self.items {
            if !it.1
                && (matches!(
                    it.0,
                    "ca" | "cg"
                        | "cs"
                        | "lu"
                        | "cv"
                        | "wb"
                        | "wt"
                        | "nc"
                        | "volatile"
                        | "relaxed"
                        | "acquire"
                        | "release"
                        | "acq_rel"
                        | "sc"
                        | "weak"
                        | "mmio"
                        | "cta"
                        | "gpu"
                        | "sys"
                        | "cluster"
                ) || it.0.starts_with("L1::")
                    || it.0.starts_with("L2::"))
            {
                it.1 = true;
            }
        }
    }

    /// Marks every modifier used (the caller has matched the whole list itself).
    pub(super) fn take_all(&mut self) {
        for it in &mut self.items {
            it.1 = true;
        }
    }

    pub(super) fn finish(self, ins: &Instr) -> R<()> {
        let left: Vec<&str> = self.items.iter().filter(|i| !i.1).map(|i| i.0).collect();
        if left.is_empty() {
            Ok(())
        } else {
            Err(unsupported(
                ins,
                format!("modifier(s) .{} not supported here", left.join(" .")),
            ))
        }
    }
}

pub(super) fn unsupported(ins: &Instr, detail: impl Into<String>) -> SimError {
    SimError::Unsupported {
        line: ins.line,
        opcode: ins.full_opcode(),
        detail: detail.into(),
    }
}

pub(super) fn bad(ins: &Instr, message: impl Into<String>) -> SimError {
    SimError::Parse {
        line: ins.line,
        message: format!("`{}`: {}", ins.full_opcode(), message.into()),
    }
}

/// Raw bits of a literal used with an instruction of type `ty`.
pub(super) fn imm_bits(lit: &Operand, ty: Ty) -> Option<u64> {
    let mask = ty.mask();
    Some(match (lit, ty) {
        (Operand::Int(v), Ty::F32) => u64::from((*v as i64 as f32).to_bits()),
        (Operand::Int(v), Ty::F64) => (*v as i64 as f64).to_bits(),
        (Operand::Int(v), _) => v & mask,
        (Operand::Float(f), Ty::F32) => u64::from((*f as f32).to_bits()),
        (Operand::Float(f), Ty::F64) => f.to_bits(),
        (Operand::Float(f), Ty::F16) => round_to(*f, 0, F16, Rnd::Rn),
        (Operand::Float(f), Ty::Bf16) => round_to(*f, 0, BF16, Rnd::Rn),
        (Operand::Float(f), _) => (*f as i64 as u64) & mask,
        (Operand::F32Bits(b), Ty::F64) => f64::from(f32::from_bits(*b)).to_bits(),
        (Operand::F32Bits(b), _) => u64::from(*b) & mask,
        (Operand::F64Bits(b), Ty::F32) => u64::from((f64::from_bits(*b) as f32).to_bits()),
        (Operand::F64Bits(b), _) => b & mask,
        _ => return None,
    })
}

fn special(name: &str) -> Option<Special> {
    let comp = |s: &str| match s {
        "x" => Some(0u8),
        "y" => Some(1),
        "z" => Some(2),
        _ => None,
    };
    if let Some((base, c)) = name.split_once('.') {
        let c = comp(c)?;
        return Some(match base {
            "%tid" => Special::Tid(c),
            "%ntid" => Special::Ntid(c),
            "%ctaid" => Special::Ctaid(c),
            "%nctaid" => Special::Nctaid(c),
            _ => return None,
        });
    }
    Some(match name {
        "%laneid" => Special::LaneId,
        "%warpid" => Special::WarpId,
        "%nwarpid" => Special::NWarpId,
        "%smid" => Special::SmId,
        "%nsmid" => Special::NSmId,
        "%gridid" => Special::GridId,
        "%clock" | "%clock64" | "%globaltimer" | "%globaltimer_lo" => Special::Clock,
        "%lanemask_eq" => Special::LanemaskEq,
        "%lanemask_le" => Special::LanemaskLe,
        "%lanemask_lt" => Special::LanemaskLt,
        "%lanemask_ge" => Special::LanemaskGe,
        "%lanemask_gt" => Special::LanemaskGt,
        "%dynamic_smem_size" => Special::DynamicSmemSize,
        "%reserved_smem_offset_begin"
        | "%reserved_smem_offset_end"
        | "%reserved_smem_offset_cap" => Special::ReservedSmem,
        "%reserved_smem_offset_0" | "%reserved_smem_offset_1" => Special::ReservedSmem,
        "%total_smem_size" => Special::TotalSmemSize,
        _ => return None,
    })
}

fn arr4<T: Copy>(v: &[T], fill: T) -> [T; 4] {
    let mut a = [fill; 4];
    for (i, x) in v.iter().take(4).enumerate() {
        a[i] = *x;
    }
    a
}

fn to_shared64(a: u64) -> u64 {
    a.wrapping_sub(SHARED_WINDOW)
}
fn to_shared32(a: u64) -> u64 {
    a.wrapping_sub(SHARED_WINDOW) & 0xffff_ffff
}
fn from_shared(a: u64) -> u64 {
    (a & 0xffff_ffff).wrapping_add(SHARED_WINDOW)
}
fn to_local64(a: u64) -> u64 {
    a.wrapping_sub(LOCAL_WINDOW)
}
fn to_local32(a: u64) -> u64 {
    a.wrapping_sub(LOCAL_WINDOW) & 0xffff_ffff
}
fn from_local(a: u64) -> u64 {
    (a & 0xffff_ffff).wrapping_add(LOCAL_WINDOW)
}
fn identity64(a: u64) -> u64 {
    a
}
fn identity32(a: u64) -> u64 {
    a & 0xffff_ffff
}

fn exch(_old: u64, b: u64) -> u64 {
    b
}
fn cas32(old: u64, b: u64, c: u64) -> u64 {
    if old & 0xffff_ffff == b & 0xffff_ffff {
        c & 0xffff_ffff
    } else {
        old
    }
}
fn cas64(old: u64, b: u64, c: u64) -> u64 {
    if old == b {
        c
    } else {
        old
    }
}
fn inc32(old: u64, b: u64) -> u64 {
    let (o, b) = (old as u32, b as u32);
    u64::from(if o >= b { 0 } else { o + 1 })
}
fn dec32(old: u64, b: u64) -> u64 {
    let (o, b) = (old as u32, b as u32);
    u64::from(if o == 0 || o > b { b } else { o - 1 })
}

impl Ctx {
    /// Declares a register; its slot is `first` (the function's first slot) plus its index.
    pub fn add_reg(&mut self, name: String, ty: Ty, first: u32) {
        let idx = first + self.regs.len() as u32;
        self.regs.entry(name).or_insert((idx, ty));
    }

    pub(super) fn src(&self, ins: &Instr, op: &Operand, ty: Ty) -> R<Src> {
        match op {
            Operand::Name(n) => {
                if let Some(&(r, _)) = self.regs.get(n) {
                    return Ok(Src::Reg(r));
                }
                if let Some(s) = special(n) {
                    return Ok(Src::Special(s));
                }
                if let Some(s) = self.syms.get(n) {
                    return Ok(Src::Imm(s.addr));
                }
                if let Some(&g) = self.globals.get(n) {
                    return Ok(Src::Special(Special::GlobalAddr(g)));
                }
                if n == "WARP_SZ" {
                    return Ok(Src::Imm(32));
                }
                Err(bad(ins, format!("unknown register or symbol `{n}`")))
            }
            Operand::Sink => Err(bad(ins, "`_` used as a source")),
            lit => imm_bits(lit, ty)
                .map(Src::Imm)
                .ok_or_else(|| bad(ins, "expected a register or immediate operand")),
        }
    }

    pub(super) fn dst(&self, ins: &Instr, op: &Operand) -> R<u32> {
        match op {
            Operand::Name(n) => match self.regs.get(n) {
                Some(&(r, _)) => Ok(r),
                None if special(n).is_some() => {
                    Err(bad(ins, format!("special register `{n}` is read-only")))
                }
                None => Err(bad(ins, format!("unknown register `{n}`"))),
            },
            Operand::Sink => Ok(self.sink),
            _ => Err(bad(ins, "expected a destination register")),
        }
    }

    fn reg_ty(&self, op: &Operand) -> Option<Ty> {
        match op {
            Operand::Name(n) => self.regs.get(n).map(|r| r.1),
            _ => None,
        }
    }

    pub(super) fn addr(&self, ins: &Instr, op: &Operand) -> R<(Addr, Option<Space>)> {
        let Operand::Addr { base, offset } = op else {
            return Err(bad(ins, "expected an address operand `[..]`"));
        };
        match base {
            None => Ok((
                Addr {
                    base: Src::Imm(0),
                    offset: *offset,
                },
                None,
            )),
            Some(n) => {
                if let Some(&(r, _)) = self.regs.get(n) {
                    return Ok((
                        Addr {
                            base: Src::Reg(r),
                            offset: *offset,
                        },
                        None,
                    ));
                }
                if let Some(s) = self.syms.get(n) {
                    return Ok((
                        Addr {
                            base: Src::Imm(s.addr),
                            offset: *offset,
                        },
                        Some(s.space),
                    ));
                }
                if let Some(&g) = self.globals.get(n) {
                    return Ok((
                        Addr {
                            base: Src::Special(Special::GlobalAddr(g)),
                            offset: *offset,
                        },
                        Some(Space::Global),
                    ));
                }
                Err(bad(
                    ins,
                    format!("unknown register or symbol `{n}` in address"),
                ))
            }
        }
    }

    pub(super) fn operands<'b>(&self, ins: &'b Instr, n: usize) -> R<&'b [Operand]> {
        if ins.operands.len() != n {
            return Err(bad(
                ins,
                format!("expected {n} operands, found {}", ins.operands.len()),
            ));
        }
        Ok(&ins.operands)
    }

    fn one_type(&self, ins: &Instr, m: &mut Mods<'_>) -> R<Ty> {
        let t = m.types();
        match t.as_slice() {
            [t] => Ok(*t),
            [] => Err(bad(ins, "missing type modifier")),
            _ => Err(bad(ins, "too many type modifiers")),
        }
    }

    pub fn decode(&self, ins: &Instr) -> R<Inst> {
        let guard = match &ins.pred {
            None => None,
            Some((p, neg)) => match self.regs.get(p) {
                Some(&(r, _)) => Some((r, *neg)),
                None => return Err(bad(ins, format!("unknown guard predicate `{p}`"))),
            },
        };
        let (op, class) = self.decode_op(ins)?;
        Ok(Inst {
            op,
            guard,
            class,
            line: ins.line as u32,
        })
    }

    fn decode_op(&self, ins: &Instr) -> R<(Op, Class)> {
        let mut m = Mods::new(&ins.mods);
        let o = &ins.operands;
        let res = match ins.opcode.as_str() {
            "mov" => {
                let ty = self.one_type(ins, &mut m)?;
                let o = self.operands(ins, 2)?;
                (self.mov(ins, ty, &o[0], &o[1])?, Class::Movement)
            }
            "add" | "sub" | "mad" if ins.mods.iter().any(|x| x == "cc") => {
                self.carry(ins, &mut m)?
            }
            "addc" | "subc" | "madc" => self.carry(ins, &mut m)?,
            "shf" => {
                let left = match m.take_any(&["l", "r"]) {
                    Some(dir) => dir == "l",
                    None => return Err(bad(ins, "missing shift direction .l/.r")),
                };
                let clamp = match m.take_any(&["wrap", "clamp"]) {
                    Some(mode) => mode == "clamp",
                    None => return Err(bad(ins, "missing .wrap/.clamp")),
                };
                if self.one_type(ins, &mut m)? != Ty::B32 {
                    return Err(unsupported(ins, "type"));
                }
                let o = self.operands(ins, 4)?;
                let op = Op::Alu3 {
                    f: bits::shf(left, clamp),
                    d: self.dst(ins, &o[0])?,
                    a: self.src(ins, &o[1], Ty::B32)?,
                    b: self.src(ins, &o[2], Ty::B32)?,
                    c: self.src(ins, &o[3], Ty::U32)?,
                };
                (op, Class::IntArith)
            }
            "lop3" => {
                if self.one_type(ins, &mut m)? != Ty::B32 {
                    return Err(unsupported(ins, "type"));
                }
                let o = self.operands(ins, 5)?;
                let op = Op::Alu4 {
                    f: bits::lop3,
                    d: self.dst(ins, &o[0])?,
                    a: self.src(ins, &o[1], Ty::B32)?,
                    b: self.src(ins, &o[2], Ty::B32)?,
                    c: self.src(ins, &o[3], Ty::B32)?,
                    e: self.src(ins, &o[4], Ty::B32)?,
                };
                (op, Class::IntArith)
            }
            "mul24" | "mad24" => {
                let hi = m.take_any(&["lo", "hi"]) == Some("hi");
                let ty = self.one_type(ins, &mut m)?;
                let d = ins.operands.first().map(|x| self.dst(ins, x)).transpose()?;
                let op = if ins.opcode == "mul24" {
                    let o = self.operands(ins, 3)?;
                    Op::Alu2 {
                        f: bits::mul24(hi, ty).ok_or_else(|| unsupported(ins, "type"))?,
                        d: d.unwrap_or(self.sink),
                        a: self.src(ins, &o[1], ty)?,
                        b: self.src(ins, &o[2], ty)?,
                    }
                } else {
                    let o = self.operands(ins, 4)?;
                    Op::Alu3 {
                        f: bits::mad24(hi, ty).ok_or_else(|| unsupported(ins, "type"))?,
                        d: d.unwrap_or(self.sink),
                        a: self.src(ins, &o[1], ty)?,
                        b: self.src(ins, &o[2], ty)?,
                        c: self.src(ins, &o[3], ty)?,
                    }
                };
                (op, Class::IntArith)
            }
            "sad" => {
                let ty = self.one_type(ins, &mut m)?;
                let o = self.operands(ins, 4)?;
                let op = Op::Alu3 {
                    f: bits::sad(ty).ok_or_else(|| unsupported(ins, "type"))?,
                    d: self.dst(ins, &o[0])?,
                    a: self.src(ins, &o[1], ty)?,
                    b: self.src(ins, &o[2], ty)?,
                    c: self.src(ins, &o[3], ty)?,
                };
                (op, Class::IntArith)
            }
            "testp" => {
                let test = m
                    .take_any(&[
                        "finite",
                        "infinite",
                        "number",
                        "notanumber",
                        "normal",
                        "subnormal",
                    ])
                    .ok_or_else(|| bad(ins, "missing test"))?;
                let ty = self.one_type(ins, &mut m)?;
                let o = self.operands(ins, 2)?;
                let op = Op::Alu1 {
                    f: bits::testp(test, ty).ok_or_else(|| unsupported(ins, "type"))?,
                    d: self.dst(ins, &o[0])?,
                    a: self.src(ins, &o[1], ty)?,
                };
                (op, Class::FloatArith)
            }
            "add" | "sub" | "mul" | "div" | "rem" | "min" | "max" | "copysign" => {
                self.arith2(ins, &mut m)?
            }
            "mad" | "fma" => self.arith3(ins, &mut m)?,
            "abs" | "neg" => self.unary_arith(ins, &mut m)?,
            "sqrt" | "rcp" | "rsqrt" | "ex2" | "lg2" | "sin" | "cos" | "tanh" => {
                self.special_fn(ins, &mut m)?
            }
            "and" | "or" | "xor" | "shl" | "shr" => {
                let ty = self.one_type(ins, &mut m)?;
                let o = self.operands(ins, 3)?;
                let name = ins.opcode.as_str();
                let strip = |op: &Operand| match op {
                    Operand::Not(inner) if ty == Ty::Pred => (inner.as_ref().clone(), true),
                    other => (other.clone(), false),
                };
                let ((a, neg_a), (b, neg_b)) = (strip(&o[1]), strip(&o[2]));
                let f = if ty == Ty::Pred {
                    int::pred_binary(name, neg_a, neg_b)
                } else {
                    int::binary(name, ty)
                };
                let f = f.ok_or_else(|| unsupported(ins, "type"))?;
                let bty = if matches!(name, "shl" | "shr") {
                    Ty::U32
                } else {
                    ty
                };
                let op = Op::Alu2 {
                    f,
                    d: self.dst(ins, &o[0])?,
                    a: self.src(ins, &a, ty)?,
                    b: self.src(ins, &b, bty)?,
                };
                (op, Class::IntArith)
            }
            "not" | "cnot" | "popc" | "clz" | "brev" | "bfind" => {
                let ty = self.one_type(ins, &mut m)?;
                let o = self.operands(ins, 2)?;
                let name = ins.opcode.as_str();
                let f = if ty == Ty::Pred {
                    int::pred_unary(name)
                } else if name == "bfind" && m.take("shiftamt") {
                    bits::bfind_shiftamt(ty)
                } else {
                    int::unary(name, ty)
                };
                let f = f.ok_or_else(|| unsupported(ins, "type"))?;
                (
                    Op::Alu1 {
                        f,
                        d: self.dst(ins, &o[0])?,
                        a: self.src(ins, &o[1], ty)?,
                    },
                    Class::IntArith,
                )
            }
            "bfe" => {
                let ty = self.one_type(ins, &mut m)?;
                let o = self.operands(ins, 4)?;
                let f = int::ternary("bfe", ty).ok_or_else(|| unsupported(ins, "type"))?;
                let op = Op::Alu3 {
                    f,
                    d: self.dst(ins, &o[0])?,
                    a: self.src(ins, &o[1], ty)?,
                    b: self.src(ins, &o[2], Ty::U32)?,
                    c: self.src(ins, &o[3], Ty::U32)?,
                };
                (op, Class::IntArith)
            }
            "bfi" => {
                let ty = self.one_type(ins, &mut m)?;
                let o = self.operands(ins, 5)?;
                let f = int::bfi_fn(ty).ok_or_else(|| unsupported(ins, "type"))?;
                let op = Op::Alu4 {
                    f,
                    d: self.dst(ins, &o[0])?,
                    a: self.src(ins, &o[1], ty)?,
                    b: self.src(ins, &o[2], ty)?,
                    c: self.src(ins, &o[3], Ty::U32)?,
                    e: self.src(ins, &o[4], Ty::U32)?,
                };
                (op, Class::IntArith)
            }
            "prmt" => {
                let mode = m.take_any(&["f4e", "b4e", "rc8", "ecl", "ecr", "rc16"]);
                let _ = self.one_type(ins, &mut m)?;
                let o = self.operands(ins, 4)?;
                let f = int::prmt_fn(mode).ok_or_else(|| unsupported(ins, "mode"))?;
                let op = Op::Alu3 {
                    f,
                    d: self.dst(ins, &o[0])?,
                    a: self.src(ins, &o[1], Ty::B32)?,
                    b: self.src(ins, &o[2], Ty::B32)?,
                    c: self.src(ins, &o[3], Ty::B32)?,
                };
                (op, Class::IntArith)
            }
            "setp" => self.setp(ins, &mut m)?,
            "selp" => {
                let ty = self.one_type(ins, &mut m)?;
                let o = self.operands(ins, 4)?;
                let op = Op::Selp {
                    d: self.dst(ins, &o[0])?,
                    a: self.src(ins, &o[1], ty)?,
                    b: self.src(ins, &o[2], ty)?,
                    p: self.src(ins, &o[3], Ty::Pred)?,
                };
                (op, Class::Movement)
            }
            "cvt" => self.cvt(ins, &mut m)?,
            "cvta" => {
                let to = m.take("to");
                let space = m.take_any(&["global", "shared", "local", "const", "param"]);
                let ty = self.one_type(ins, &mut m)?;
                let o = self.operands(ins, 2)?;
                let wide = ty.bits() == 64;
                let f: crate::sem::F1 = match (space, to, wide) {
                    (Some("global"), _, true) => identity64,
                    (Some("global"), _, false) => identity32,
                    (Some("shared"), true, true) => to_shared64,
                    (Some("shared"), true, false) => to_shared32,
                    (Some("shared"), false, _) => from_shared,
                    (Some("local"), true, true) => to_local64,
                    (Some("local"), true, false) => to_local32,
                    (Some("local"), false, _) => from_local,
                    _ => return Err(unsupported(ins, "cvta for this state space")),
                };
                (
                    Op::Alu1 {
                        f,
                        d: self.dst(ins, &o[0])?,
                        a: self.src(ins, &o[1], ty)?,
                    },
                    Class::IntArith,
                )
            }
            "ld" | "ldu" => self.ld(ins, &mut m)?,
            "mma" => self.mma(ins, &mut m)?,
            "ldmatrix" => self.ldmatrix(ins, &mut m)?,
            "cp" => self.cp_async(ins, &mut m)?,
            "st" => self.st(ins, &mut m)?,
            "atom" | "red" => self.atom(ins, &mut m)?,
            "bra" => {
                m.take("uni");
                let o = self.operands(ins, 1)?;
                let Operand::Name(l) = &o[0] else {
                    return Err(bad(ins, "expected a label"));
                };
                let target = *self
                    .labels
                    .get(l)
                    .ok_or_else(|| bad(ins, format!("unknown label `{l}`")))?;
                (Op::Bra { target }, Class::Control)
            }
            "bar" | "barrier" => self.barrier(ins, &mut m)?,
            "shfl" => {
                m.take("sync");
                let mode = match m.take_any(&["up", "down", "bfly", "idx"]) {
                    Some("up") => ShflMode::Up,
                    Some("down") => ShflMode::Down,
                    Some("bfly") => ShflMode::Bfly,
                    Some(_) => ShflMode::Idx,
                    None => return Err(bad(ins, "missing shuffle mode")),
                };
                let _ = self.one_type(ins, &mut m)?;
                let (dop, mask) = match o.len() {
                    5 => (&o[0], self.src(ins, &o[4], Ty::B32)?),
                    4 => (&o[0], Src::Imm(0xffff_ffff)),
                    _ => return Err(bad(ins, "expected 5 operands")),
                };
                let (d, p) = match dop {
                    Operand::Pair(d, p) => (self.dst(ins, d)?, self.dst(ins, p)?),
                    d => (self.dst(ins, d)?, self.sink),
                };
                let op = Op::Shfl {
                    mode,
                    d,
                    p,
                    a: self.src(ins, &o[1], Ty::B32)?,
                    b: self.src(ins, &o[2], Ty::B32)?,
                    c: self.src(ins, &o[3], Ty::B32)?,
                    mask,
                };
                (op, Class::WarpCollective)
            }
            "vote" => {
                m.take("sync");
                let mode = match m.take_any(&["all", "any", "uni", "ballot"]) {
                    Some("all") => VoteMode::All,
                    Some("any") => VoteMode::Any,
                    Some("uni") => VoteMode::Uni,
                    Some(_) => VoteMode::Ballot,
                    None => return Err(bad(ins, "missing vote mode")),
                };
                let _ = self.one_type(ins, &mut m)?;
                let mask = match o.len() {
                    3 => self.src(ins, &o[2], Ty::B32)?,
                    2 => Src::Imm(0xffff_ffff),
                    _ => return Err(bad(ins, "expected 3 operands")),
                };
                let (a, neg) = match &o[1] {
                    Operand::Not(p) => (self.src(ins, p, Ty::Pred)?, true),
                    p => (self.src(ins, p, Ty::Pred)?, false),
                };
                (
                    Op::Vote {
                        mode,
                        d: self.dst(ins, &o[0])?,
                        a,
                        neg,
                        mask,
                    },
                    Class::WarpCollective,
                )
            }
            "redux" => {
                m.take("sync");
                let op = m
                    .take_any(&["add", "min", "max", "and", "or", "xor"])
                    .ok_or_else(|| bad(ins, "missing reduction operation"))?;
                let ty = self.one_type(ins, &mut m)?;
                let o = self.operands(ins, 3)?;
                let ok = match op {
                    "add" | "min" | "max" => matches!(ty, Ty::U32 | Ty::S32),
                    _ => ty == Ty::B32,
                };
                let f = int::binary(op, ty)
                    .filter(|_| ok)
                    .ok_or_else(|| unsupported(ins, "operation on this type"))?;
                let op = Op::Redux {
                    f,
                    d: self.dst(ins, &o[0])?,
                    a: self.src(ins, &o[1], ty)?,
                    mask: self.src(ins, &o[2], Ty::B32)?,
                };
                (op, Class::WarpCollective)
            }
            "match" => {
                m.take("sync");
                let all = match m.take_any(&["any", "all"]) {
                    Some(mode) => mode == "all",
                    None => return Err(bad(ins, "missing match mode")),
                };
                let ty = self.one_type(ins, &mut m)?;
                if !matches!(ty, Ty::B32 | Ty::B64) {
                    return Err(unsupported(ins, "type"));
                }
                let o = self.operands(ins, 3)?;
                let (d, p) = match &o[0] {
                    Operand::Pair(d, p) if all => (self.dst(ins, d)?, self.dst(ins, p)?),
                    Operand::Pair(..) => return Err(bad(ins, "only match.all has a predicate")),
                    d => (self.dst(ins, d)?, self.sink),
                };
                let op = Op::Match {
                    all,
                    d,
                    p,
                    a: self.src(ins, &o[1], ty)?,
                    mask: self.src(ins, &o[2], Ty::B32)?,
                };
                (op, Class::WarpCollective)
            }
            "activemask" => {
                let _ = self.one_type(ins, &mut m)?;
                let o = self.operands(ins, 1)?;
                (
                    Op::ActiveMask {
                        d: self.dst(ins, &o[0])?,
                    },
                    Class::WarpCollective,
                )
            }
            "membar" | "fence" => {
                for it in &mut m.items {
                    it.1 = true;
                }
                (Op::Nop, Class::Other)
            }
            "nanosleep" | "prefetch" | "prefetchu" | "pmevent" => {
                for it in &mut m.items {
                    it.1 = true;
                }
                (Op::Nop, Class::Other)
            }
            "ret" => {
                m.take("uni");
                (Op::Ret, Class::Control)
            }
            "exit" => (Op::Exit, Class::Control),
            "call" => self.call(ins, &mut m)?,
            "trap" => (Op::Trap, Class::Control),
            _ => return Err(unsupported(ins, "")),
        };
        m.finish(ins)?;
        Ok(res)
    }

    fn mov(&self, ins: &Instr, ty: Ty, d: &Operand, a: &Operand) -> R<Op> {
        if let Operand::Vector(ds) = d {
            let n = ds.len();
            if !(n == 2 || n == 4) || !ty.bits().is_multiple_of(n as u32) {
                return Err(bad(ins, "unpack needs 2 or 4 destinations"));
            }
            let regs = ds.iter().map(|x| self.dst(ins, x)).collect::<R<Vec<_>>>()?;
            return Ok(Op::Unpack {
                ds: arr4(&regs, self.sink),
                n: n as u8,
                ew: (ty.bits() / n as u32) as u8,
                a: self.src(ins, a, ty)?,
            });
        }
        if let Operand::Vector(parts) = a {
            let n = parts.len();
            if !(n == 2 || n == 4) || !ty.bits().is_multiple_of(n as u32) {
                return Err(bad(ins, "pack needs 2 or 4 sources"));
            }
            let ew = ty.bits() / n as u32;
            let ety = match ew {
                8 => Ty::B8,
                16 => Ty::B16,
                32 => Ty::B32,
                _ => Ty::B64,
            };
            let srcs = parts
                .iter()
                .map(|x| self.src(ins, x, ety))
                .collect::<R<Vec<_>>>()?;
            return Ok(Op::Pack {
                d: self.dst(ins, d)?,
                parts: arr4(&srcs, Src::Imm(0)),
                n: n as u8,
                ew: ew as u8,
            });
        }
        Ok(Op::Mov {
            d: self.dst(ins, d)?,
            a: self.src(ins, a, ty)?,
        })
    }

    fn fflags(m: &mut Mods<'_>) -> FFlags {
        FFlags {
            rnd: m.rnd().map_or(0, Rnd::code),
            ftz: m.take("ftz"),
            sat: m.take("sat"),
            nan: m.take("NaN"),
        }
    }

    fn arith2(&self, ins: &Instr, m: &mut Mods<'_>) -> R<(Op, Class)> {
        let name = ins.opcode.as_str();
        let mode = m.take_any(&["lo", "hi", "wide"]);
        let approx = m.take_any(&["approx", "full"]).is_some();
        let ty = self.one_type(ins, m)?;
        let o = self.operands(ins, 3)?;
        let (f, class): (F2, Class) = if ty.is_int() {
            let sat = m.take("sat");
            let key = match (name, mode, sat) {
                ("mul", Some(md), _) => format!("mul.{md}"),
                ("mul", None, _) => "mul.lo".to_string(),
                (n, _, true) => format!("{n}.sat"),
                (n, _, false) => n.to_string(),
            };
            (
                int::binary(&key, ty).ok_or_else(|| unsupported(ins, "type"))?,
                Class::IntArith,
            )
        } else {
            let fl = Self::fflags(m);
            let _ = approx;
            let f = match ty {
                Ty::F32 => float::binary32(name, fl),
                Ty::F64 => float::binary64(name, fl),
                Ty::F16 | Ty::Bf16 | Ty::F16x2 | Ty::Bf16x2 => {
                    let bf = matches!(ty, Ty::Bf16 | Ty::Bf16x2);
                    let packed = matches!(ty, Ty::F16x2 | Ty::Bf16x2);
                    half::binary(name, bf, packed, fl.ftz, fl.sat || fl.nan)
                }
                _ => None,
            };
            let class = if ty.bits() == 16 || matches!(ty, Ty::F16x2 | Ty::Bf16x2) {
                Class::HalfArith
            } else {
                Class::FloatArith
            };
            let class = if name == "div" && ty == Ty::F32 && approx {
                Class::Special
            } else {
                class
            };
            (f.ok_or_else(|| unsupported(ins, "type"))?, class)
        };
        let (aty, bty) = match (name, mode) {
            ("mul", Some("wide")) => (ty, ty),
            _ => (ty, ty),
        };
        Ok((
            Op::Alu2 {
                f,
                d: self.dst(ins, &o[0])?,
                a: self.src(ins, &o[1], aty)?,
                b: self.src(ins, &o[2], bty)?,
            },
            class,
        ))
    }

    fn arith3(&self, ins: &Instr, m: &mut Mods<'_>) -> R<(Op, Class)> {
        let mode = m.take_any(&["lo", "hi", "wide"]);
        let ty = self.one_type(ins, m)?;
        let o = self.operands(ins, 4)?;
        let mut cty = ty;
        let (f, class): (F3, Class) = if ty.is_int() {
            let key = format!("mad.{}", mode.unwrap_or("lo"));
            if mode == Some("wide") {
                cty = match ty {
                    Ty::U16 => Ty::U32,
                    Ty::S16 => Ty::S32,
                    Ty::U32 => Ty::U64,
                    _ => Ty::S64,
                };
            }
            (
                int::ternary(&key, ty).ok_or_else(|| unsupported(ins, "type"))?,
                Class::IntArith,
            )
        } else {
            let fl = Self::fflags(m);
            m.take("relu")
                .then_some(())
                .map_or(Ok(()), |_| Err(unsupported(ins, ".relu")))?;
            match ty {
                Ty::F32 => (float::fma32_fn(fl), Class::FloatArith),
                Ty::F64 => (float::fma64_fn(fl), Class::FloatArith),
                Ty::F16 | Ty::Bf16 | Ty::F16x2 | Ty::Bf16x2 => {
                    let bf = matches!(ty, Ty::Bf16 | Ty::Bf16x2);
                    let packed = matches!(ty, Ty::F16x2 | Ty::Bf16x2);
                    (half::fma_fn(bf, packed, fl.ftz, fl.sat), Class::HalfArith)
                }
                _ => return Err(unsupported(ins, "type")),
            }
        };
        let op = Op::Alu3 {
            f,
            d: self.dst(ins, &o[0])?,
            a: self.src(ins, &o[1], ty)?,
            b: self.src(ins, &o[2], ty)?,
            c: self.src(ins, &o[3], cty)?,
        };
        Ok((op, class))
    }

    fn unary_arith(&self, ins: &Instr, m: &mut Mods<'_>) -> R<(Op, Class)> {
        let name = ins.opcode.as_str();
        let ty = self.one_type(ins, m)?;
        let o = self.operands(ins, 2)?;
        let (f, class) = if ty.is_int() {
            (int::unary(name, ty), Class::IntArith)
        } else {
            let fl = Self::fflags(m);
            match ty {
                Ty::F32 => (float::unary32(name, fl), Class::FloatArith),
                Ty::F64 => (float::unary64(name, fl), Class::FloatArith),
                _ => {
                    let bf = matches!(ty, Ty::Bf16 | Ty::Bf16x2);
                    let packed = matches!(ty, Ty::F16x2 | Ty::Bf16x2);
                    (half::unary(name, bf, packed), Class::HalfArith)
                }
            }
        };
        let f = f.ok_or_else(|| unsupported(ins, "type"))?;
        Ok((
            Op::Alu1 {
                f,
                d: self.dst(ins, &o[0])?,
                a: self.src(ins, &o[1], ty)?,
            },
            class,
        ))
    }

    fn special_fn(&self, ins: &Instr, m: &mut Mods<'_>) -> R<(Op, Class)> {
        let name = ins.opcode.as_str();
        let approx = m.take("approx");
        m.take("full");
        let ty = self.one_type(ins, m)?;
        let o = self.operands(ins, 2)?;
        let fl = Self::fflags(m);
        let needs_approx = !matches!(name, "sqrt" | "rcp");
        if needs_approx && !approx {
            return Err(bad(ins, format!("`{name}` requires .approx")));
        }
        let f = match ty {
            Ty::F32 => float::unary32(name, fl),
            Ty::F64 => float::unary64(name, fl),
            _ => None,
        };
        let f = f.ok_or_else(|| unsupported(ins, "type"))?;
        let class = if approx {
            Class::Special
        } else {
            Class::FloatArith
        };
        Ok((
            Op::Alu1 {
                f,
                d: self.dst(ins, &o[0])?,
                a: self.src(ins, &o[1], ty)?,
            },
            class,
        ))
    }

    fn setp(&self, ins: &Instr, m: &mut Mods<'_>) -> R<(Op, Class)> {
        let cmp = m
            .take_any(&[
                "eq", "ne", "lt", "le", "gt", "ge", "lo", "ls", "hi", "hs", "equ", "neu", "ltu",
                "leu", "gtu", "geu", "num", "nan",
            ])
            .ok_or_else(|| bad(ins, "missing comparison operator"))?;
        let comb = match m.take_any(&["and", "or", "xor"]) {
            None => 0,
            Some("and") => 1,
            Some("or") => 2,
            Some(_) => 3,
        };
        let ftz = m.take("ftz");
        let ty = self.one_type(ins, m)?;
        let f = match ty {
            Ty::F32 => float::compare32(cmp, ftz),
            Ty::F64 => float::compare64(cmp),
            Ty::F16 => half::compare(cmp, false),
            Ty::Bf16 => half::compare(cmp, true),
            t if t.is_int() => int::compare(cmp, t),
            _ => None,
        };
        let f = f.ok_or_else(|| unsupported(ins, format!("comparison .{cmp} on this type")))?;
        let o = &ins.operands;
        if !(o.len() == 3 || (o.len() == 4 && comb != 0)) {
            return Err(bad(ins, "expected `p[|q], a, b[, c]`"));
        }
        let (d, q) = match &o[0] {
            Operand::Pair(d, q) => (self.dst(ins, d)?, self.dst(ins, q)?),
            d => (self.dst(ins, d)?, self.sink),
        };
        let (c, c_neg) = if o.len() == 4 {
            match &o[3] {
                Operand::Not(p) => (self.src(ins, p, Ty::Pred)?, true),
                p => (self.src(ins, p, Ty::Pred)?, false),
            }
        } else {
            (Src::Imm(0), false)
        };
        let op = Op::Setp {
            f,
            comb,
            d,
            q,
            a: self.src(ins, &o[1], ty)?,
            b: self.src(ins, &o[2], ty)?,
            c,
            c_neg,
        };
        let class = if ty.is_float() {
            Class::FloatArith
        } else {
            Class::IntArith
        };
        Ok((op, class))
    }

    fn cvt(&self, ins: &Instr, m: &mut Mods<'_>) -> R<(Op, Class)> {
        if ins.mods.iter().any(|x| x == "tf32") {
            return self.cvt_tf32(ins, m);
        }
        let irnd = m.irnd();
        let frnd = m.rnd();
        let ftz = m.take("ftz");
        let sat = m.take("sat");
        let relu = m.take("relu");
        let types = m.types();
        let [dst, src] = types.as_slice() else {
            return Err(bad(ins, "cvt needs a destination and a source type"));
        };
        let (dst, src) = (*dst, *src);
        if irnd.is_some() && frnd.is_some() {
            return Err(bad(ins, "both integer and float rounding given"));
        }
        let spec = |dst: Ty| CvtSpec {
            dst,
            src,
            rnd: irnd.or(frnd).unwrap_or(if dst.is_int() && src.is_float() {
                Rnd::Rz
            } else {
                Rnd::Rn
            }),
            integral: irnd.is_some(),
            sat,
            ftz,
            relu,
        };
        if matches!(dst, Ty::F16x2 | Ty::Bf16x2) {
            let o = self.operands(ins, 3)?;
            let s = spec(if dst == Ty::F16x2 { Ty::F16 } else { Ty::Bf16 });
            let op = Op::CvtPack {
                spec: s,
                d: self.dst(ins, &o[0])?,
                a: self.src(ins, &o[1], src)?,
                b: self.src(ins, &o[2], src)?,
            };
            return Ok((op, Class::Conversion));
        }
        let ok = |t: Ty| {
            !matches!(t, Ty::Pred | Ty::B128 | Ty::F16x2 | Ty::Bf16x2)
                && !matches!(t, Ty::B8 | Ty::B16 | Ty::B32 | Ty::B64)
        };
        if !ok(dst) || !ok(src) {
            return Err(unsupported(ins, "conversion between these types"));
        }
        let o = self.operands(ins, 2)?;
        Ok((
            Op::Cvt {
                spec: spec(dst),
                d: self.dst(ins, &o[0])?,
                a: self.src(ins, &o[1], src)?,
            },
            Class::Conversion,
        ))
    }

    fn mem_space(&self, m: &mut Mods<'_>) -> Option<MemSpace> {
        Some(
            match m.take_any(&["global", "shared", "local", "param", "const"]) {
                Some("global") => MemSpace::Global,
                Some("shared") => {
                    m.take("cta");
                    MemSpace::Shared
                }
                Some("local") => MemSpace::Local,
                Some("param") => MemSpace::Param,
                Some("const") => MemSpace::Const,
                _ => MemSpace::Generic,
            },
        )
    }

    fn class_of(space: MemSpace) -> Class {
        match space {
            MemSpace::Global | MemSpace::Generic => Class::MemGlobal,
            MemSpace::Shared => Class::MemShared,
            MemSpace::Local => Class::MemLocal,
            MemSpace::Param => Class::MemParam,
            MemSpace::Const => Class::MemConst,
        }
    }

    /// A symbol's own space overrides generic addressing of `[sym]` operands.
    pub(super) fn space_for(space: MemSpace, sym: Option<Space>) -> MemSpace {
        match (space, sym) {
            (MemSpace::Generic, Some(Space::Shared)) => MemSpace::Shared,
            (MemSpace::Generic, Some(Space::Local)) => MemSpace::Local,
            (MemSpace::Generic, Some(Space::Param)) => MemSpace::Param,
            (MemSpace::Generic, Some(Space::Const)) => MemSpace::Const,
            // `.param` of a `.func` (and `.param` declared in a body) live in the thread's
            // local frame.
            (MemSpace::Param, Some(Space::Local)) => MemSpace::Local,
            (s, _) => s,
        }
    }

    fn vec_width(m: &mut Mods<'_>) -> u8 {
        match m.take_any(&["v2", "v4"]) {
            Some("v2") => 2,
            Some("v4") => 4,
            _ => 1,
        }
    }

    fn ld(&self, ins: &Instr, m: &mut Mods<'_>) -> R<(Op, Class)> {
        let space = self.mem_space(m).unwrap_or(MemSpace::Generic);
        m.ignore_memory_hints();
        let n = Self::vec_width(m);
        let ty = self.one_type(ins, m)?;
        if ty == Ty::B128 || ty == Ty::Pred {
            return Err(unsupported(ins, "type"));
        }
        let o = self.operands(ins, 2)?;
        let ds: Vec<&Operand> = match &o[0] {
            Operand::Vector(v) => v.iter().collect(),
            d => vec![d],
        };
        if ds.len() != n as usize {
            return Err(bad(ins, format!("expected {n} destination(s)")));
        }
        let regs = ds.iter().map(|x| self.dst(ins, x)).collect::<R<Vec<_>>>()?;
        let dbits = ds
            .iter()
            .find_map(|x| self.reg_ty(x))
            .map_or(64, Ty::bits)
            .max(ty.bits());
        let dmask = if dbits >= 64 {
            u64::MAX
        } else {
            (1u64 << dbits) - 1
        };
        let (addr, sym) = self.addr(ins, &o[1])?;
        let space = Self::space_for(space, sym);
        let op = Op::Ld {
            space,
            d: arr4(&regs, self.sink),
            n,
            size: ty.bytes() as u8,
            sign: ty.is_signed(),
            dmask,
            addr,
        };
        Ok((op, Self::class_of(space)))
    }

    fn st(&self, ins: &Instr, m: &mut Mods<'_>) -> R<(Op, Class)> {
        let space = self.mem_space(m).unwrap_or(MemSpace::Generic);
        m.ignore_memory_hints();
        let n = Self::vec_width(m);
        let ty = self.one_type(ins, m)?;
        if ty == Ty::B128 || ty == Ty::Pred {
            return Err(unsupported(ins, "type"));
        }
        let o = self.operands(ins, 2)?;
        let ss: Vec<&Operand> = match &o[1] {
            Operand::Vector(v) => v.iter().collect(),
            s => vec![s],
        };
        if ss.len() != n as usize {
            return Err(bad(ins, format!("expected {n} source(s)")));
        }
        let srcs = ss
            .iter()
            .map(|x| self.src(ins, x, ty))
            .collect::<R<Vec<_>>>()?;
        let (addr, sym) = self.addr(ins, &o[0])?;
        let space = Self::space_for(space, sym);
        if space == MemSpace::Param || space == MemSpace::Const {
            return Err(unsupported(ins, "stores to .param/.const space"));
        }
        let op = Op::St {
            space,
            s: arr4(&srcs, Src::Imm(0)),
            n,
            size: ty.bytes() as u8,
            addr,
        };
        Ok((op, Self::class_of(space)))
    }

    fn atom(&self, ins: &Instr, m: &mut Mods<'_>) -> R<(Op, Class)> {
        let is_red = ins.opcode == "red";
        let space = self.mem_space(m).unwrap_or(MemSpace::Generic);
        m.ignore_memory_hints();
        let opname = m
            .take_any(&[
                "add", "min", "max", "inc", "dec", "cas", "exch", "and", "or", "xor",
            ])
            .ok_or_else(|| bad(ins, "missing atomic operation"))?;
        m.take("noftz");
        let ty = self.one_type(ins, m)?;
        if !matches!(
            space,
            MemSpace::Global | MemSpace::Shared | MemSpace::Generic
        ) {
            return Err(unsupported(ins, "atomics outside global/shared memory"));
        }
        let f = match (opname, ty) {
            ("add", Ty::F32) => AtomFn::Bin(
                float::binary32(
                    "add",
                    FFlags {
                        ftz: true,
                        ..FFlags::default()
                    },
                )
                .unwrap_or(exch),
            ),
            ("add", Ty::F64) => {
                AtomFn::Bin(float::binary64("add", FFlags::default()).unwrap_or(exch))
            }
            ("add", Ty::F16 | Ty::Bf16 | Ty::F16x2 | Ty::Bf16x2) => {
                let bf = matches!(ty, Ty::Bf16 | Ty::Bf16x2);
                let packed = matches!(ty, Ty::F16x2 | Ty::Bf16x2);
                AtomFn::Bin(half::binary("add", bf, packed, false, false).unwrap_or(exch))
            }
            ("min" | "max", Ty::F32) => {
                AtomFn::Bin(float::binary32(opname, FFlags::default()).unwrap_or(exch))
            }
            ("exch", t) if t.bits() == 32 || t.bits() == 64 => AtomFn::Bin(exch),
            ("cas", t) if t.bits() == 32 => AtomFn::Tern(cas32),
            ("cas", t) if t.bits() == 64 => AtomFn::Tern(cas64),
            ("inc", Ty::U32) => AtomFn::Bin(inc32),
            ("dec", Ty::U32) => AtomFn::Bin(dec32),
            ("add" | "min" | "max" | "and" | "or" | "xor", t) if t.is_int() => {
                let t = match t {
                    Ty::B32 => Ty::U32,
                    Ty::B64 => Ty::U64,
                    t => t,
                };
                AtomFn::Bin(int::binary(opname, t).ok_or_else(|| unsupported(ins, "type"))?)
            }
            _ => return Err(unsupported(ins, "atomic operation on this type")),
        };
        let o = &ins.operands;
        let (d, rest) = if is_red {
            (self.sink, &o[..])
        } else {
            (
                self.dst(ins, o.first().ok_or_else(|| bad(ins, "missing operands"))?)?,
                o.get(1..).unwrap_or(&[]),
            )
        };
        let need = if opname == "cas" { 3 } else { 2 };
        if rest.len() != need {
            return Err(bad(
                ins,
                format!("expected {} operands", need + usize::from(!is_red)),
            ));
        }
        let (addr, sym) = self.addr(ins, &rest[0])?;
        let space = Self::space_for(space, sym);
        let b = self.src(ins, &rest[1], ty)?;
        let c = if need == 3 {
            self.src(ins, &rest[2], ty)?
        } else {
            Src::Imm(0)
        };
        Ok((
            Op::Atom {
                space,
                f,
                size: ty.bytes() as u8,
                d,
                addr,
                b,
                c,
            },
            Class::Atomic,
        ))
    }

    /// `add.cc`, `addc{.cc}`, `sub.cc`, `subc{.cc}`, `mad{.lo,.hi}.cc`, `madc{.lo,.hi}{.cc}`.
    fn carry(&self, ins: &Instr, m: &mut Mods<'_>) -> R<(Op, Class)> {
        let cout = m.take("cc");
        let base = ins.opcode.trim_end_matches('c');
        let cin = base != ins.opcode;
        let hi = m.take_any(&["lo", "hi"]) == Some("hi");
        let ty = self.one_type(ins, m)?;
        let f = bits::carry_fn(base, hi, ty).ok_or_else(|| unsupported(ins, "type"))?;
        let o = self.operands(ins, if base == "mad" { 4 } else { 3 })?;
        let op = Op::Carry {
            f,
            d: self.dst(ins, &o[0])?,
            a: self.src(ins, &o[1], ty)?,
            b: self.src(ins, &o[2], ty)?,
            c: match o.get(3) {
                Some(c) => self.src(ins, c, ty)?,
                None => Src::Imm(0),
            },
            cc: self.cc,
            cin,
            cout,
        };
        Ok((op, Class::IntArith))
    }

    fn barrier(&self, ins: &Instr, m: &mut Mods<'_>) -> R<(Op, Class)> {
        if m.take("warp") {
            m.take("sync");
            let o = self.operands(ins, 1)?;
            return Ok((
                Op::WarpSync {
                    mask: self.src(ins, &o[0], Ty::B32)?,
                },
                Class::WarpCollective,
            ));
        }
        m.take("cta");
        m.take("aligned");
        if m.take("red") {
            return self.barrier_red(ins, m);
        }
        let arrive = match m.take_any(&["sync", "arrive"]) {
            Some("arrive") => true,
            Some(_) => false,
            None if ins.mods.is_empty() => false,
            None => return Err(unsupported(ins, "barrier variant")),
        };
        m.take("aligned");
        let o = &ins.operands;
        if o.is_empty() || o.len() > 2 {
            return Err(bad(ins, "expected `a[, b]`"));
        }
        if arrive && o.len() != 2 {
            return Err(bad(ins, "bar.arrive requires a thread count"));
        }
        let id = self.src(ins, &o[0], Ty::U32)?;
        let count = if o.len() == 2 {
            Some(self.src(ins, &o[1], Ty::U32)?)
        } else {
            None
        };
        Ok((
            Op::Bar {
                arrive,
                id,
                count,
                red: None,
            },
            Class::Barrier,
        ))
    }

    /// `bar{.cta}.red.popc{.aligned}.u32 d, a{, b}, {!}c` and
    /// `bar{.cta}.red.{and,or}{.aligned}.pred d, a{, b}, {!}c` (also spelled `barrier`).
    fn barrier_red(&self, ins: &Instr, m: &mut Mods<'_>) -> R<(Op, Class)> {
        let op = match m.take_any(&["popc", "and", "or"]) {
            Some("popc") => BarRedOp::Popc,
            Some("and") => BarRedOp::And,
            Some("or") => BarRedOp::Or,
            _ => return Err(bad(ins, "bar.red needs .popc, .and or .or")),
        };
        m.take("aligned");
        let want = if op == BarRedOp::Popc { "u32" } else { "pred" };
        if !m.take(want) {
            return Err(bad(
                ins,
                format!("this bar.red form needs the type .{want}"),
            ));
        }
        let o = &ins.operands;
        if o.len() != 3 && o.len() != 4 {
            return Err(bad(ins, "expected `d, a{, b}, {!}c`"));
        }
        let id = self.src(ins, &o[1], Ty::U32)?;
        let count = if o.len() == 4 {
            Some(self.src(ins, &o[2], Ty::U32)?)
        } else {
            None
        };
        let (c, neg) = match &o[o.len() - 1] {
            Operand::Not(p) => (self.src(ins, p, Ty::Pred)?, true),
            p => (self.src(ins, p, Ty::Pred)?, false),
        };
        let red = BarRed {
            op,
            d: self.dst(ins, &o[0])?,
            c,
            neg,
        };
        Ok((
            Op::Bar {
                arrive: false,
                id,
                count,
                red: Some(red),
            },
            Class::Barrier,
        ))
    }
}
