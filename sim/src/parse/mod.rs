//! Parser: tokens to the [`ast`] of a PTX module. Accepts the subset of PTX that real kernels use
//! (see the crate docs); anything structurally malformed is a [`SimError::Parse`] with its line.
//! Instruction opcodes are not validated here; `decode` reports unknown ones as unsupported.

pub mod ast;
pub mod lexer;

use crate::error::SimError;
use crate::types::Ty;
use ast::*;
use lexer::{Tok, Token};

/// Parses PTX text into a module syntax tree.
pub fn parse(text: &str) -> Result<ast::Module, SimError> {
    let toks = lexer::lex(text)?;
    let mut p = Parser {
        toks,
        pos: 0,
        depth: 0,
        loc: None,
    };
    p.module()
}

struct Parser {
    toks: Vec<Token>,
    pos: usize,
    /// Nesting of `{}` scopes and vector operands, bounded so hostile input cannot overflow the stack.
    depth: u32,
    /// The last `.loc` seen in the current function body, given to the instructions after it.
    loc: Option<ast::SrcPos>,
}

const MAX_DEPTH: u32 = 64;

type PResult<T> = Result<T, SimError>;

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|t| &t.tok)
    }

    fn peek_at(&self, k: usize) -> Option<&Tok> {
        self.toks.get(self.pos + k).map(|t| &t.tok)
    }

    fn line(&self) -> usize {
        self.toks
            .get(self.pos)
            .or_else(|| self.toks.last())
            .map_or(1, |t| t.line)
    }

    fn err<T>(&self, message: impl Into<String>) -> PResult<T> {
        Err(SimError::Parse {
            line: self.line(),
            message: message.into(),
        })
    }

    fn next(&mut self) -> PResult<Tok> {
        match self.toks.get(self.pos) {
            Some(t) => {
                self.pos += 1;
                Ok(t.tok.clone())
            }
            None => self.err("unexpected end of input"),
        }
    }

    fn is_punct(&self, c: char) -> bool {
        self.peek() == Some(&Tok::Punct(c))
    }

    fn eat_punct(&mut self, c: char) -> bool {
        if self.is_punct(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect_punct(&mut self, c: char) -> PResult<()> {
        if self.eat_punct(c) {
            Ok(())
        } else {
            let found = self.describe();
            self.err(format!("expected `{c}`, found {found}"))
        }
    }

    fn describe(&self) -> String {
        match self.peek() {
            None => "end of input".into(),
            Some(Tok::Ident(s)) => format!("`{s}`"),
            Some(Tok::Dot(s)) => format!("`.{s}`"),
            Some(Tok::Punct(c)) => format!("`{c}`"),
            Some(Tok::Str(s)) => format!("\"{s}\""),
            Some(_) => "a number".into(),
        }
    }

    fn ident(&mut self) -> PResult<String> {
        match self.peek() {
            Some(Tok::Ident(s)) => {
                let s = s.clone();
                self.pos += 1;
                Ok(s)
            }
            _ => {
                let found = self.describe();
                self.err(format!("expected a name, found {found}"))
            }
        }
    }

    fn int(&mut self) -> PResult<u64> {
        let neg = self.eat_punct('-');
        match self.peek() {
            Some(Tok::Int(v)) => {
                let v = *v;
                self.pos += 1;
                Ok(if neg { v.wrapping_neg() } else { v })
            }
            _ => {
                let found = self.describe();
                self.err(format!("expected an integer, found {found}"))
            }
        }
    }

    fn small_int(&mut self) -> PResult<u32> {
        let v = self.int()?;
        u32::try_from(v).or_else(|_| self.err(format!("value {v} out of range")))
    }

    fn dot(&self) -> Option<&str> {
        match self.peek() {
            Some(Tok::Dot(s)) => Some(s.as_str()),
            _ => None,
        }
    }

    /// Skips the rest of the current source line (for `.file`/`.loc`, which have no `;`).
    fn skip_line(&mut self, line: usize) {
        while self.toks.get(self.pos).is_some_and(|t| t.line == line) {
            self.pos += 1;
        }
    }

    /// `.file N "name" [, timestamp, size]`: the number and name (`None` when written without a
    /// name, as some tools do).
    fn file_directive(&mut self, line: usize) -> PResult<Option<(u32, String)>> {
        let n = self.small_int()?;
        let name = match self.peek() {
            Some(Tok::Str(s)) if self.line() == line => Some(s.clone()),
            _ => None,
        };
        self.skip_line(line);
        Ok(name.map(|name| (n, name)))
    }

    /// `.loc FILE LINE COLUMN [, function_name ..., inlined_at ...]`: the position (line 0 means
    /// "no source line", as compilers emit for generated code).
    fn loc_directive(&mut self, line: usize) -> PResult<Option<ast::SrcPos>> {
        let int_at = |k: usize| {
            self.toks
                .get(self.pos + k)
                .is_some_and(|t| t.line == line && matches!(t.tok, Tok::Int(_)))
        };
        if !(int_at(0) && int_at(1)) {
            return Err(SimError::Parse {
                line,
                message: "`.loc` needs FILE LINE [COLUMN] integers on its line".into(),
            });
        }
        let file = self.small_int()?;
        let src_line = self.small_int()?;
        let column = match self.peek() {
            Some(Tok::Int(_)) if self.line() == line => self.small_int()?,
            _ => 0,
        };
        self.skip_line(line);
        Ok((src_line > 0).then_some(ast::SrcPos {
            file,
            line: src_line,
            column,
        }))
    }

    fn module(&mut self) -> PResult<Module> {
        let mut m = Module {
            address_size: 64,
            ..Module::default()
        };
        while self.peek().is_some() {
            let line = self.line();
            let Some(d) = self.dot().map(str::to_owned) else {
                let found = self.describe();
                return self.err(format!(
                    "expected a directive at module scope, found {found}"
                ));
            };
            self.pos += 1;
            match d.as_str() {
                "version" => {
                    let v = match self.next()? {
                        Tok::Float(f) => format!("{f:.1}"),
                        Tok::Int(i) => i.to_string(),
                        _ => return self.err("expected a version number"),
                    };
                    m.version = Some(v);
                }
                "target" => {
                    m.target.push(self.ident()?);
                    while self.eat_punct(',') {
                        m.target.push(self.ident()?);
                    }
                }
                "address_size" => m.address_size = self.small_int()?,
                "file" => {
                    if let Some(f) = self.file_directive(line)? {
                        m.files.push(f);
                    }
                }
                "loc" => self.skip_line(line),
                "visible" | "weak" | "common" => {}
                "extern" => {
                    if matches!(self.dot(), Some("shared" | "global" | "const")) {
                        let space = self.space_of_next()?;
                        let mut v = self.var_decl(space)?;
                        v.is_extern = true;
                        m.vars.push(v);
                    }
                }
                "entry" | "func" => {
                    let f = self.function(d == "entry", line)?;
                    m.functions.push(f);
                }
                "global" | "shared" | "const" | "local" => {
                    let space = space_of(&d);
                    m.vars.push(self.var_decl(space)?);
                }
                "pragma" => {
                    self.next()?;
                    self.expect_punct(';')?;
                }
                "section" => self.section()?,
                other => return self.err(format!("unsupported module directive `.{other}`")),
            }
        }
        Ok(m)
    }

    /// `.section .debug_* { .b8 1, 2; .b32 label; ... }` (DWARF data): skipped, braces matched.
    fn section(&mut self) -> PResult<()> {
        match self.next()? {
            Tok::Dot(_) | Tok::Ident(_) => {}
            _ => return self.err("expected a section name after `.section`"),
        }
        if !self.eat_punct('{') {
            return Ok(());
        }
        let mut depth = 1u32;
        loop {
            match self.next()? {
                Tok::Punct('{') => depth += 1,
                Tok::Punct('}') => {
                    depth -= 1;
                    if depth == 0 {
                        return Ok(());
                    }
                }
                _ => {}
            }
        }
    }

    fn space_of_next(&mut self) -> PResult<Space> {
        let d = self.dot().map(str::to_owned);
        match d {
            Some(s) => {
                self.pos += 1;
                Ok(space_of(&s))
            }
            None => self.err("expected a state space"),
        }
    }

    /// After the space token: `[.align N] [.vN] .type name[dims] [= init];`
    fn var_decl(&mut self, space: Space) -> PResult<VarDecl> {
        let line = self.line();
        let mut align = None;
        let mut vec = 1;
        let mut ty = None;
        while let Some(d) = self.dot().map(str::to_owned) {
            self.pos += 1;
            match d.as_str() {
                "align" => align = Some(self.small_int()?),
                "v2" => vec = 2,
                "v4" => vec = 4,
                "extern" | "visible" => {}
                t => match Ty::parse(t) {
                    Some(t) => ty = Some(t),
                    None => {
                        return self.err(format!("unknown type or qualifier `.{t}` in declaration"))
                    }
                },
            }
        }
        let Some(ty) = ty else {
            return self.err("declaration without a type");
        };
        let name = self.ident()?;
        let mut array = None;
        while self.eat_punct('[') {
            if self.eat_punct(']') {
                array = Some(None);
            } else {
                let n = self.int()?;
                self.expect_punct(']')?;
                array = Some(Some(match array {
                    Some(Some(prev)) => n.saturating_mul(prev),
                    _ => n,
                }));
            }
        }
        let mut init = Vec::new();
        if self.eat_punct('=') {
            if self.is_punct('{') {
                if let Operand::Vector(v) = self.operand()? {
                    init = flatten(v);
                }
            } else {
                init.push(self.operand()?);
            }
        }
        self.expect_punct(';')?;
        Ok(VarDecl {
            space,
            is_extern: false,
            align,
            ty,
            vec,
            name,
            array,
            init,
            line,
        })
    }

    fn function(&mut self, is_entry: bool, line: usize) -> PResult<Function> {
        self.loc = None;
        // `.func (.param .b32 ret) name (...)`: a return-parameter list before the name.
        let rets = if !is_entry && self.is_punct('(') {
            self.param_list()?
        } else {
            Vec::new()
        };
        let name = self.ident()?;
        let params = if self.is_punct('(') {
            self.param_list()?
        } else {
            Vec::new()
        };
        let mut perf = Perf::default();
        while let Some(d) = self.dot().map(str::to_owned) {
            self.pos += 1;
            match d.as_str() {
                "maxntid" => perf.maxntid = Some(self.dims()?),
                "reqntid" => perf.reqntid = Some(self.dims()?),
                "minnctapersm" => perf.minnctapersm = Some(self.small_int()?),
                "maxnreg" | "maxnctapersm" => {
                    self.small_int()?;
                }
                "noreturn" => {}
                "pragma" => {
                    self.next()?;
                    self.expect_punct(';')?;
                }
                other => {
                    return self.err(format!(
                        "unexpected directive `.{other}` before the function body"
                    ))
                }
            }
        }
        let mut body = Vec::new();
        if self.eat_punct(';') {
            // A prototype without a body.
            return Ok(Function {
                name,
                is_entry,
                rets,
                params,
                is_decl: true,
                perf,
                body,
                line,
            });
        }
        self.expect_punct('{')?;
        self.block(&mut body)?;
        Ok(Function {
            name,
            is_entry,
            rets,
            params,
            is_decl: false,
            perf,
            body,
            line,
        })
    }

    fn dims(&mut self) -> PResult<[u32; 3]> {
        let mut d = [1u32; 3];
        d[0] = self.small_int()?;
        for slot in d.iter_mut().skip(1) {
            if !self.eat_punct(',') {
                break;
            }
            *slot = self.small_int()?;
        }
        Ok(d)
    }

    fn param_list(&mut self) -> PResult<Vec<ParamDecl>> {
        self.expect_punct('(')?;
        let mut params = Vec::new();
        if self.eat_punct(')') {
            return Ok(params);
        }
        loop {
            let line = self.line();
            match self.dot() {
                Some("param") | Some("reg") => self.pos += 1,
                _ => return self.err("expected `.param` in the parameter list"),
            }
            let mut align = None;
            let mut ty = None;
            while let Some(d) = self.dot().map(str::to_owned) {
                self.pos += 1;
                match d.as_str() {
                    "align" => align = Some(self.small_int()?),
                    "ptr" | "global" | "shared" | "const" | "local" => {}
                    t => match Ty::parse(t) {
                        Some(t) => ty = Some(t),
                        None => return self.err(format!("unknown parameter qualifier `.{t}`")),
                    },
                }
            }
            let Some(ty) = ty else {
                return self.err("parameter without a type");
            };
            let name = self.ident()?;
            let mut array = None;
            if self.eat_punct('[') {
                array = Some(self.int()?);
                self.expect_punct(']')?;
            }
            params.push(ParamDecl {
                name,
                ty,
                align,
                array,
                line,
            });
            if self.eat_punct(')') {
                return Ok(params);
            }
            self.expect_punct(',')?;
        }
    }

    /// Statements up to the matching `}` (consumed). Nested `{}` scopes are flattened.
    fn block(&mut self, body: &mut Vec<Stmt>) -> PResult<()> {
        loop {
            let line = self.line();
            match self.peek() {
                None => return self.err("unterminated function body (missing `}`)"),
                Some(Tok::Punct('}')) => {
                    self.pos += 1;
                    return Ok(());
                }
                Some(Tok::Punct('{')) => {
                    self.pos += 1;
                    self.enter()?;
                    self.block(body)?;
                    self.depth -= 1;
                }
                Some(Tok::Punct(';')) => self.pos += 1,
                Some(Tok::Dot(d)) => {
                    let d = d.clone();
                    self.pos += 1;
                    match d.as_str() {
                        "reg" => body.push(self.reg_decl(line)?),
                        "shared" | "local" | "const" | "global" | "param" => {
                            let v = self.var_decl(space_of(&d))?;
                            body.push(Stmt::Var(v));
                        }
                        "extern" => {
                            let space = self.space_of_next()?;
                            let mut v = self.var_decl(space)?;
                            v.is_extern = true;
                            body.push(Stmt::Var(v));
                        }
                        "loc" => self.loc = self.loc_directive(line)?,
                        "file" => self.skip_line(line),
                        "pragma" => {
                            self.next()?;
                            self.expect_punct(';')?;
                        }
                        other => {
                            return self.err(format!(
                                "unsupported directive `.{other}` in a function body"
                            ))
                        }
                    }
                }
                Some(Tok::Ident(name)) if self.peek_at(1) == Some(&Tok::Punct(':')) => {
                    let name = name.clone();
                    self.pos += 2;
                    body.push(Stmt::Label { name, line });
                }
                Some(Tok::Ident(_)) | Some(Tok::Punct('@')) => {
                    body.push(Stmt::Instr(self.instr()?))
                }
                Some(_) => {
                    let found = self.describe();
                    return self.err(format!("expected an instruction, found {found}"));
                }
            }
        }
    }

    fn reg_decl(&mut self, line: usize) -> PResult<Stmt> {
        let mut ty = None;
        while let Some(d) = self.dot().map(str::to_owned) {
            self.pos += 1;
            match Ty::parse(&d) {
                Some(t) => ty = Some(t),
                None if d == "v2" || d == "v4" => {
                    return Err(SimError::Unsupported {
                        line,
                        opcode: ".reg".into(),
                        detail: "vector registers".into(),
                    })
                }
                None => return self.err(format!("unknown register type `.{d}`")),
            }
        }
        let Some(ty) = ty else {
            return self.err("`.reg` without a type");
        };
        let mut names = Vec::new();
        loop {
            let name = self.ident()?;
            let mut count = None;
            if self.eat_punct('<') {
                count = Some(self.small_int()?);
                self.expect_punct('>')?;
            }
            names.push((name, count));
            if self.eat_punct(';') {
                return Ok(Stmt::Reg { ty, names, line });
            }
            self.expect_punct(',')?;
        }
    }

    fn instr(&mut self) -> PResult<Instr> {
        let line = self.line();
        let mut pred = None;
        if self.eat_punct('@') {
            let neg = self.eat_punct('!');
            pred = Some((self.ident()?, neg));
        }
        let opcode = self.ident()?;
        let mut mods = Vec::new();
        while let Some(d) = self.dot() {
            mods.push(d.to_owned());
            self.pos += 1;
        }
        let mut operands = Vec::new();
        if !self.eat_punct(';') {
            loop {
                operands.push(self.operand()?);
                if self.eat_punct(';') {
                    break;
                }
                if !self.eat_punct(',') {
                    let found = self.describe();
                    return self.err(format!(
                        "expected `,` or `;` after an operand of `{opcode}`, found {found}"
                    ));
                }
            }
        }
        Ok(Instr {
            line,
            loc: self.loc,
            pred,
            opcode,
            mods,
            operands,
        })
    }

    fn operand(&mut self) -> PResult<Operand> {
        let first = self.simple_operand()?;
        if self.eat_punct('|') {
            let second = self.simple_operand()?;
            return Ok(Operand::Pair(Box::new(first), Box::new(second)));
        }
        Ok(first)
    }

    fn simple_operand(&mut self) -> PResult<Operand> {
        match self.peek().cloned() {
            Some(Tok::Punct('[')) => {
                self.pos += 1;
                let mut base = None;
                let mut offset: i64 = 0;
                if let Some(Tok::Ident(_)) = self.peek() {
                    base = Some(self.ident()?);
                    // `+imm`, `+-imm` and `-imm` (the sign is read by `int`).
                    if self.eat_punct('+') || self.is_punct('-') {
                        offset = self.int()? as i64;
                    }
                } else {
                    offset = self.int()? as i64;
                }
                self.expect_punct(']')?;
                Ok(Operand::Addr { base, offset })
            }
            Some(Tok::Punct(open @ ('{' | '('))) => {
                self.pos += 1;
                self.enter()?;
                let v = self.vector(if open == '{' { '}' } else { ')' });
                self.depth -= 1;
                v
            }
            Some(Tok::Punct('!')) => {
                self.pos += 1;
                self.enter()?;
                let v = self.simple_operand().map(|o| Operand::Not(Box::new(o)));
                self.depth -= 1;
                v
            }
            _ => self.scalar_operand(),
        }
    }

    fn enter(&mut self) -> PResult<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return self.err("nesting too deep");
        }
        Ok(())
    }

    fn vector(&mut self, close: char) -> PResult<Operand> {
        let mut items = Vec::new();
        if self.eat_punct(close) {
            return Ok(Operand::Vector(items));
        }
        loop {
            items.push(self.operand()?);
            if self.eat_punct(close) {
                return Ok(Operand::Vector(items));
            }
            self.expect_punct(',')?;
        }
    }

    fn scalar_operand(&mut self) -> PResult<Operand> {
        match self.peek().cloned() {
            Some(Tok::Punct('-')) => {
                self.pos += 1;
                match self.next()? {
                    Tok::Int(v) => Ok(Operand::Int(v.wrapping_neg())),
                    Tok::Float(f) => Ok(Operand::Float(-f)),
                    Tok::F32Bits(b) => Ok(Operand::F32Bits(b ^ 0x8000_0000)),
                    Tok::F64Bits(b) => Ok(Operand::F64Bits(b ^ (1 << 63))),
                    _ => self.err("expected a number after `-`"),
                }
            }
            Some(Tok::Int(v)) => {
                self.pos += 1;
                Ok(Operand::Int(v))
            }
            Some(Tok::Float(f)) => {
                self.pos += 1;
                Ok(Operand::Float(f))
            }
            Some(Tok::F32Bits(b)) => {
                self.pos += 1;
                Ok(Operand::F32Bits(b))
            }
            Some(Tok::F64Bits(b)) => {
                self.pos += 1;
                Ok(Operand::F64Bits(b))
            }
            Some(Tok::Ident(name)) => {
                self.pos += 1;
                if name == "_" {
                    return Ok(Operand::Sink);
                }
                let mut name = name;
                // Special-register components: `%tid.x`, `%ntid.y`.
                if name.starts_with('%') {
                    if let Some(Tok::Dot(c)) = self.peek() {
                        if matches!(c.as_str(), "x" | "y" | "z" | "w") {
                            name = format!("{name}.{c}");
                            self.pos += 1;
                        }
                    }
                }
                Ok(Operand::Name(name))
            }
            _ => {
                let found = self.describe();
                self.err(format!("expected an operand, found {found}"))
            }
        }
    }
}

fn space_of(d: &str) -> Space {
    match d {
        "global" => Space::Global,
        "shared" => Space::Shared,
        "local" => Space::Local,
        "const" => Space::Const,
        _ => Space::Param,
    }
}

fn flatten(v: Vec<Operand>) -> Vec<Operand> {
    let mut out = Vec::new();
    for o in v {
        match o {
            Operand::Vector(inner) => out.extend(flatten(inner)),
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"
.version 7.0
.target sm_80
.address_size 64
.shared .align 4 .b8 tile[1024];
.visible .entry k(.param .u64 out, .param .f32 s, .param .align 8 .b8 st[16])
.maxntid 256, 1, 1
{
  .reg .pred %p<2>;
  .reg .b32 %r<4>;
  .reg .b64 %rd1;
  mov.u32 %r1, %tid.x;
  @!%p1 bra $L__BB0_1;
  ld.param.u64 %rd1, [out];
  st.global.v2.f32 [%rd1+-8], {%r1, %r2};
  shfl.sync.down.b32 %r2|%p1, %r1, 1, 31, -1;
$L__BB0_1:
  ret;
}
"#;

    #[test]
    fn parses_sample() {
        let m = parse(SAMPLE).unwrap();
        assert_eq!(m.target, vec!["sm_80"]);
        assert_eq!(m.vars.len(), 1);
        let f = &m.functions[0];
        assert_eq!(f.params.len(), 3);
        assert_eq!(f.params[2].array, Some(16));
        assert_eq!(f.perf.maxntid, Some([256, 1, 1]));
        let instrs: Vec<_> = f
            .body
            .iter()
            .filter_map(|s| {
                if let Stmt::Instr(i) = s {
                    Some(i)
                } else {
                    None
                }
            })
            .collect();
        assert_eq!(instrs[0].operands[1], Operand::Name("%tid.x".into()));
        assert_eq!(instrs[1].pred, Some(("%p1".into(), true)));
        assert_eq!(
            instrs[3].operands[0],
            Operand::Addr {
                base: Some("%rd1".into()),
                offset: -8
            }
        );
        assert!(matches!(instrs[4].operands[0], Operand::Pair(..)));
        assert_eq!(instrs[4].operands[4], Operand::Int(u64::MAX));
    }

    #[test]
    fn errors_have_lines() {
        let e = parse(".version 7.0\n.target sm_80\n.entry k(\n{").unwrap_err();
        assert!(matches!(e, SimError::Parse { line: 4, .. }), "{e:?}");
    }
}
