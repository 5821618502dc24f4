//! The registers each statement reads and writes, gathered once per kernel: the data-flow
//! passes (defined-before-use, divergence) walk them many times, and working them out from the
//! instruction table's signature each time was most of the validator's cost.

use crate::ir::{AddrBase, Inst, Kernel, Operand, RegId, Slot, Stmt};

/// Per statement of a kernel body: the registers it reads (sources, address bases, guard) and
/// writes (destinations). Labels read and write nothing.
pub(crate) struct RegUses {
    regs: Vec<RegId>,
    /// Per statement `i`: its reads are `regs[starts[2i]..starts[2i + 1]]`, its writes
    /// `regs[starts[2i + 1]..starts[2i + 2]]`.
    starts: Vec<usize>,
}

impl RegUses {
    pub(crate) fn new(kernel: &Kernel) -> Self {
        let mut regs = Vec::new();
        let mut starts = Vec::with_capacity(2 * kernel.body.len() + 1);
        starts.push(0);
        for stmt in &kernel.body {
            if let Stmt::Inst(inst) = stmt {
                let slots = inst.op.signature();
                collect(inst, &slots, &mut regs, Use::Read);
                starts.push(regs.len());
                collect(inst, &slots, &mut regs, Use::Write);
            } else {
                starts.push(regs.len());
            }
            starts.push(regs.len());
        }
        Self { regs, starts }
    }

    /// Registers statement `stmt` reads.
    pub(crate) fn reads(&self, stmt: usize) -> &[RegId] {
        &self.regs[self.starts[2 * stmt]..self.starts[2 * stmt + 1]]
    }

    /// Registers statement `stmt` writes.
    pub(crate) fn writes(&self, stmt: usize) -> &[RegId] {
        &self.regs[self.starts[2 * stmt + 1]..self.starts[2 * stmt + 2]]
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Use {
    Read,
    Write,
}

/// Appends the registers `inst` (whose signature is `slots`) reads or writes to `out`.
fn collect(inst: &Inst, slots: &[Slot], out: &mut Vec<RegId>, which: Use) {
    if which == Use::Read {
        out.extend(inst.guard.map(|g| g.pred));
    }
    for (slot, arg) in slots.iter().zip(&inst.args) {
        match (which, slot, arg) {
            (Use::Write, Slot::Dst(_), Operand::Reg(r))
            | (Use::Read, Slot::Src(_) | Slot::SrcReg(_) | Slot::MovSrc(_), Operand::Reg(r)) => {
                out.push(*r)
            }
            (Use::Write, Slot::DstVec(..), Operand::Vec(rs))
            | (Use::Read, Slot::SrcVec(..), Operand::Vec(rs)) => out.extend(rs),
            (
                Use::Read,
                _,
                Operand::Addr(crate::ir::Address {
                    base: AddrBase::Reg(r),
                    ..
                }),
            ) => out.push(*r),
            _ => {}
        }
    }
}
