//! The instruction-table arms for tensor-core and asynchronous-copy instructions: `mma.sync`,
//! `ldmatrix`, `cp.async` and its group instructions. Each accepted spelling is listed in the
//! crate docs; every other form of these opcodes is `Unsupported` with the exact form named.

use super::instr::{bad, unsupported, Ctx, Mods, R};
use super::{Class, CpAsync, MemSpace, Op, Src, SrcSize};
use crate::parse::ast::{Instr, Operand};
use crate::sem::mma::{tf32_fn, MmaInput, MmaSpec, Tf32Round};
use crate::types::Ty;

impl Ctx {
    /// `n` registers of a brace-enclosed vector operand (`{%r1, %r2}`), padded with the sink.
    fn reg_vector<const K: usize>(
        &self,
        ins: &Instr,
        op: &Operand,
        n: usize,
        what: &str,
        dest: bool,
    ) -> R<[u32; K]> {
        let items: Vec<&Operand> = match op {
            Operand::Vector(v) => v.iter().collect(),
            single if n == 1 => vec![single],
            _ => {
                return Err(bad(
                    ins,
                    format!("{what} must be a vector of {n} registers"),
                ))
            }
        };
        if items.len() != n {
            return Err(bad(
                ins,
                format!("{what} needs {n} registers, found {}", items.len()),
            ));
        }
        let mut out = [self.sink; K];
        for (slot, item) in out.iter_mut().zip(items) {
            *slot = if dest {
                self.dst(ins, item)?
            } else {
                match self.src(ins, item, Ty::B32)? {
                    Src::Reg(r) => r,
                    _ => return Err(bad(ins, format!("{what} must be registers"))),
                }
            };
        }
        Ok(out)
    }

    /// `mma.sync.aligned.{m16n8k8,m16n8k16}.row.col.{dtype}.{atype}.{btype}.{ctype} d, a, b, c`
    /// with f16 inputs (f16/f32 accumulators), bf16 inputs (f32), or tf32 inputs (m16n8k8, f32).
    pub(super) fn mma(&self, ins: &Instr, m: &mut Mods<'_>) -> R<(Op, Class)> {
        m.take_all();
        let mods: Vec<&str> = ins.mods.iter().map(String::as_str).collect();
        let form = "supported: mma.sync.aligned.m16n8k16.row.col.{f32,f16}.f16.f16.{f32,f16}, \
                    m16n8k8 of the same, m16n8k{8,16}.row.col.f32.bf16.bf16.f32, \
                    m16n8k8.row.col.f32.tf32.tf32.f32";
        let ["sync", "aligned", shape, "row", "col", dt, at, bt, ct] = mods.as_slice() else {
            return Err(unsupported(ins, form));
        };
        let k = match *shape {
            "m16n8k8" => 8,
            "m16n8k16" => 16,
            _ => return Err(unsupported(ins, form)),
        };
        let input = match (*at, *bt) {
            ("f16", "f16") => MmaInput::F16,
            ("bf16", "bf16") => MmaInput::Bf16,
            ("tf32", "tf32") if k == 8 => MmaInput::Tf32,
            _ => return Err(unsupported(ins, form)),
        };
        let acc = |t: &str| match t {
            "f32" => Some(false),
            "f16" if input == MmaInput::F16 => Some(true),
            _ => None,
        };
        let (Some(d_f16), Some(c_f16)) = (acc(dt), acc(ct)) else {
            return Err(unsupported(ins, form));
        };
        let spec = MmaSpec {
            k,
            input,
            c_f16,
            d_f16,
        };
        let o = self.operands(ins, 4)?;
        let op = Op::Mma {
            spec,
            d: self.reg_vector(ins, &o[0], spec.acc_regs(true), "d", true)?,
            a: self.reg_vector(ins, &o[1], spec.a_regs(), "a", false)?,
            b: self.reg_vector(ins, &o[2], spec.b_regs(), "b", false)?,
            c: self.reg_vector(ins, &o[3], spec.acc_regs(false), "c", false)?,
        };
        Ok((op, Class::TensorCore))
    }

    /// `ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{.trans}{.shared{::cta}}.b16 d, [p]`.
    pub(super) fn ldmatrix(&self, ins: &Instr, m: &mut Mods<'_>) -> R<(Op, Class)> {
        if !(m.take("sync") && m.take("aligned")) {
            return Err(bad(ins, "ldmatrix requires .sync.aligned"));
        }
        if !m.take("m8n8") {
            return Err(unsupported(ins, "only the .m8n8 shape with .b16 elements"));
        }
        let num = match m.take_any(&["x1", "x2", "x4"]) {
            Some("x1") => 1,
            Some("x2") => 2,
            Some(_) => 4,
            None => return Err(bad(ins, "missing .x1/.x2/.x4")),
        };
        let trans = m.take("trans");
        let space = if m.take("shared") || m.take("shared::cta") {
            MemSpace::Shared
        } else {
            MemSpace::Generic
        };
        if !m.take("b16") {
            return Err(unsupported(ins, "only the .m8n8 shape with .b16 elements"));
        }
        let o = self.operands(ins, 2)?;
        let d = self.reg_vector(ins, &o[0], num, "d", true)?;
        let (addr, sym) = self.addr(ins, &o[1])?;
        let space = Self::space_for(space, sym);
        Ok((
            Op::Ldmatrix {
                num: num as u8,
                trans,
                d,
                space,
                addr,
            },
            Class::MemShared,
        ))
    }

    /// `cp.async.{ca,cg}.shared{::cta}.global{.L2::…} [dst], [src], cp-size{, src-size |
    /// ignore-src}{, cache-policy}`, `cp.async.commit_group`, `cp.async.wait_group N`,
    /// `cp.async.wait_all`.
    pub(super) fn cp_async(&self, ins: &Instr, m: &mut Mods<'_>) -> R<(Op, Class)> {
        if !m.take("async") {
            return Err(unsupported(ins, "only cp.async"));
        }
        if m.take("commit_group") {
            self.operands(ins, 0)?;
            return Ok((Op::CpAsyncCommit, Class::AsyncCopy));
        }
        if m.take("wait_all") {
            self.operands(ins, 0)?;
            return Ok((Op::CpAsyncWait { keep: 0, all: true }, Class::AsyncCopy));
        }
        if m.take("wait_group") {
            let o = self.operands(ins, 1)?;
            let Operand::Int(n) = o[0] else {
                return Err(bad(ins, "wait_group needs an integer constant"));
            };
            let keep = u32::try_from(n).map_err(|_| bad(ins, "group count out of range"))?;
            return Ok((Op::CpAsyncWait { keep, all: false }, Class::AsyncCopy));
        }
        let cache = m.take_any(&["ca", "cg"]).ok_or_else(|| {
            unsupported(
                ins,
                "only cp.async.{ca,cg}.shared{::cta}.global and the group instructions",
            )
        })?;
        if !(m.take("shared") || m.take("shared::cta")) || !m.take("global") {
            return Err(unsupported(ins, "only .shared{::cta}.global copies"));
        }
        let hint = m.take("L2::cache_hint");
        for p in ["L2::64B", "L2::128B", "L2::256B"] {
            m.take(p);
        }
        let o = &ins.operands;
        let extra = o.len().checked_sub(3 + usize::from(hint));
        let extra = match extra {
            Some(e @ (0 | 1)) => e,
            _ => {
                return Err(bad(
                    ins,
                    "expected `[dst], [src], cp-size{, src-size}{, cache-policy}`",
                ))
            }
        };
        let size = match o[2] {
            Operand::Int(s @ (4 | 8 | 16)) => s as u8,
            _ => return Err(bad(ins, "cp-size must be the constant 4, 8 or 16")),
        };
        if cache == "cg" && size != 16 {
            return Err(bad(ins, "cp.async.cg requires cp-size 16"));
        }
        let src_size = if extra == 1 {
            let is_pred = matches!(&o[3], Operand::Name(n) if self.regs.get(n).is_some_and(|r| r.1 == Ty::Pred));
            if is_pred {
                SrcSize::IgnoreIf(self.src(ins, &o[3], Ty::Pred)?)
            } else {
                SrcSize::Bytes(self.src(ins, &o[3], Ty::U32)?)
            }
        } else {
            SrcSize::Full
        };
        let (dst, dsym) = self.addr(ins, &o[0])?;
        let (src, _) = self.addr(ins, &o[1])?;
        let op = CpAsync {
            size,
            dst_space: Self::space_for(MemSpace::Shared, dsym),
            dst,
            src,
            src_size,
        };
        Ok((Op::CpAsync(Box::new(op)), Class::AsyncCopy))
    }

    /// `cvt.{rna,rn,rz}{.satfinite}.tf32.f32 d, a`: the f32 rounded to 10 fraction bits, in a
    /// `.b32` with the low 13 bits zero.
    pub(super) fn cvt_tf32(&self, ins: &Instr, m: &mut Mods<'_>) -> R<(Op, Class)> {
        let mode = match m.take_any(&["rna", "rn", "rz"]) {
            Some("rna") => Tf32Round::NearestAway,
            Some("rn") => Tf32Round::NearestEven,
            Some(_) => Tf32Round::Zero,
            None => return Err(unsupported(ins, "tf32 conversion needs .rna, .rn or .rz")),
        };
        let sat = m.take("satfinite");
        if !(m.take("tf32") && m.take("f32")) {
            return Err(unsupported(
                ins,
                "only cvt.{rna,rn,rz}{.satfinite}.tf32.f32",
            ));
        }
        let o = self.operands(ins, 2)?;
        Ok((
            Op::Alu1 {
                f: tf32_fn(mode, sat),
                d: self.dst(ins, &o[0])?,
                a: self.src(ins, &o[1], Ty::F32)?,
            },
            Class::Conversion,
        ))
    }
}
