//! `call` to a `.func` of the module: arguments and return values move through `.param`
//! variables, which (for `.func` parameters and `.param` declared in a body) live in the calling
//! thread's local frame. `call __assertfail` becomes an [`Op::AssertFail`]; a call to any other
//! function without a body is unsupported, naming it.

use super::instr::{bad, unsupported, Ctx, Mods, R};
use super::{Class, Op, Src};
use crate::parse::ast::{Instr, Operand, Space};
use crate::types::Ty;

/// A callable `.func`: where its code starts and where its parameters live in the frame.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Callee {
    /// Index into [`super::Program::funcs`].
    pub func: u32,
    pub pc: u32,
    /// Local-frame offset and size of each parameter, in order.
    pub params: Vec<(u64, u64)>,
    /// Local-frame offset and size of each return parameter.
    pub rets: Vec<(u64, u64)>,
}

/// Where an argument's bytes come from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ArgSrc {
    /// A `.param` variable of the caller (local-frame offset).
    Local(u64),
    /// A register or immediate, written as the parameter's bytes.
    Value(Src),
}

/// Where a return value goes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RetDst {
    Local(u64),
    Reg(u32),
}

/// A decoded `call` of a `.func`.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub func: u32,
    pub target: u32,
    /// (source, callee parameter offset, size).
    pub args: Vec<(ArgSrc, u64, u64)>,
    /// (callee return offset, destination, size).
    pub rets: Vec<(u64, RetDst, u64)>,
}

/// The operands of `__assertfail(message, file, line, function, char_size)`.
#[derive(Debug, Clone, PartialEq)]
pub struct AssertFail {
    pub message: ArgSrc,
    pub file: ArgSrc,
    pub line: ArgSrc,
    pub function: ArgSrc,
}

/// External functions with a body the interpreter provides.
const ASSERT_FAIL: &str = "__assertfail";

impl Ctx {
    pub(super) fn call(&self, ins: &Instr, m: &mut Mods<'_>) -> R<(Op, Class)> {
        m.take("uni");
        let o = &ins.operands;
        let mut i = 0;
        let rets: &[Operand] = match o.first() {
            Some(Operand::Vector(v)) => {
                i = 1;
                v
            }
            _ => &[],
        };
        let name = match o.get(i) {
            Some(Operand::Name(n)) => n,
            _ => return Err(bad(ins, "expected the called function's name")),
        };
        i += 1;
        let args: &[Operand] = match o.get(i) {
            Some(Operand::Vector(v)) => {
                i += 1;
                v
            }
            _ => &[],
        };
        if i != o.len() {
            return Err(unsupported(
                ins,
                "indirect call through a prototype or jump table",
            ));
        }
        if self.regs.contains_key(name) {
            return Err(unsupported(ins, "indirect call through a register"));
        }
        if name == ASSERT_FAIL {
            let [message, file, line, function, ..] = args else {
                return Err(bad(ins, "`__assertfail` takes five arguments"));
            };
            let op = AssertFail {
                message: self.arg_src(ins, message, Ty::B64)?,
                file: self.arg_src(ins, file, Ty::B64)?,
                line: self.arg_src(ins, line, Ty::B32)?,
                function: self.arg_src(ins, function, Ty::B64)?,
            };
            return Ok((Op::AssertFail(Box::new(op)), Class::Control));
        }
        let Some(callee) = self.callees.get(name) else {
            return Err(unsupported(
                ins,
                format!("call to `{name}`, which has no body in this module"),
            ));
        };
        if args.len() != callee.params.len() || rets.len() != callee.rets.len() {
            return Err(bad(
                ins,
                format!(
                    "`{name}` takes {} argument(s) and {} return value(s), the call passes {} and {}",
                    callee.params.len(),
                    callee.rets.len(),
                    args.len(),
                    rets.len()
                ),
            ));
        }
        let args = args
            .iter()
            .zip(&callee.params)
            .map(|(a, &(off, size))| Ok((self.arg_src(ins, a, size_ty(size))?, off, size)))
            .collect::<R<Vec<_>>>()?;
        let rets = rets
            .iter()
            .zip(&callee.rets)
            .map(|(r, &(off, size))| Ok((off, self.ret_dst(ins, r)?, size)))
            .collect::<R<Vec<_>>>()?;
        let op = Call {
            func: callee.func,
            target: callee.pc,
            args,
            rets,
        };
        Ok((Op::Call(Box::new(op)), Class::Control))
    }

    fn arg_src(&self, ins: &Instr, op: &Operand, ty: Ty) -> R<ArgSrc> {
        if let Operand::Name(n) = op {
            if let Some(s) = self.syms.get(n) {
                return match s.space {
                    Space::Local => Ok(ArgSrc::Local(s.addr)),
                    _ => Err(unsupported(
                        ins,
                        format!("argument `{n}` is not a `.param` variable or register"),
                    )),
                };
            }
        }
        Ok(ArgSrc::Value(self.src(ins, op, ty)?))
    }

    fn ret_dst(&self, ins: &Instr, op: &Operand) -> R<RetDst> {
        if let Operand::Name(n) = op {
            if let Some(s) = self.syms.get(n) {
                return match s.space {
                    Space::Local => Ok(RetDst::Local(s.addr)),
                    _ => Err(bad(ins, format!("return value `{n}` is not a `.param`"))),
                };
            }
        }
        Ok(RetDst::Reg(self.dst(ins, op)?))
    }
}

/// The integer type of a `size`-byte register argument.
fn size_ty(size: u64) -> Ty {
    match size {
        1 => Ty::B8,
        2 => Ty::B16,
        4 => Ty::B32,
        _ => Ty::B64,
    }
}

/// The name a `call` instruction calls (its first plain name operand).
pub(super) fn callee_name(ins: &Instr) -> Option<&str> {
    if ins.opcode != "call" {
        return None;
    }
    ins.operands.iter().find_map(|o| match o {
        Operand::Name(n) => Some(n.as_str()),
        _ => None,
    })
}
