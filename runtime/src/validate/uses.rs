//! The registers each statement reads and writes, gathered once per kernel: the data-flow
//! passes (defined-before-use, divergence) walk them many times, and working them out from the
//! instruction table's signature each time was most of the validator's cost.

use crate::ir::{AddrBase, Inst, Operand, RegId, Slot};

/// Per statement of a kernel body: the registers it reads (sources, address bases, guard) and
/// writes (destinations). Labels read and write nothing.
pub(crate) struct RegUses {
    regs: Vec<RegId>,
    /// Per statement `i`: its reads are `regs[starts[2i]..starts[2i + 1]]`, its writes
    /// `regs[starts[2i + 1]..starts[2i + 2]]`.
    starts: Vec<usize>,
    /// Scratch for the statement being pushed.
    writes: Vec<RegId>,
}

impl RegUses {
    /// Empty, with room for a body of `statements` statements; the validator pushes each
    /// statement in order while it checks the operands ([`Self::push_inst`], [`Self::push_label`]),
    /// so the instruction table's signature is looked up once per instruction for both.
    pub(crate) fn with_capacity(statements: usize) -> Self {
        let mut starts = Vec::with_capacity(2 * statements + 1);
        starts.push(0);
        Self {
            regs: Vec::with_capacity(3 * statements),
            starts,
            writes: Vec::new(),
        }
    }

    /// The next statement is `inst`, whose operand slots are `slots`.
    pub(crate) fn push_inst(&mut self, inst: &Inst, slots: &[Slot]) {
        // One walk over the operands: reads go straight into `regs`, writes wait in
        // `self.writes` until the reads are all in.
        collect(inst, slots, &mut self.regs, &mut self.writes);
        self.starts.push(self.regs.len());
        self.regs.append(&mut self.writes);
        self.starts.push(self.regs.len());
    }

    /// The next statement is a label (it reads and writes nothing).
    pub(crate) fn push_label(&mut self) {
        self.starts.push(self.regs.len());
        self.starts.push(self.regs.len());
    }

    /// Registers statement `stmt` reads.
    pub(crate) fn reads(&self, stmt: usize) -> &[RegId] {
        let starts: &[usize] = &self.starts;
        &self.regs[starts[2 * stmt]..starts[2 * stmt + 1]]
    }

    /// Registers statement `stmt` writes.
    pub(crate) fn writes(&self, stmt: usize) -> &[RegId] {
        let starts: &[usize] = &self.starts;
        &self.regs[starts[2 * stmt + 1]..starts[2 * stmt + 2]]
    }
}

/// Appends the registers `inst` (whose signature is `slots`) reads to `reads` and those it
/// writes to `writes`.
///
/// An indexed loop over slices rather than `zip`: this runs for every instruction of every
/// kernel at expansion time, where the macro's dependencies build unoptimised by default and
/// each iterator adapter step is a call.
fn collect(inst: &Inst, slots: &[Slot], reads: &mut Vec<RegId>, writes: &mut Vec<RegId>) {
    if let Some(g) = inst.guard {
        reads.push(g.pred);
    }
    let args: &[Operand] = &inst.args;
    let mut i = 0;
    while i < slots.len() && i < args.len() {
        match (slots[i], &args[i]) {
            (Slot::Dst(_), Operand::Reg(r)) => writes.push(*r),
            (Slot::Src(_) | Slot::SrcReg(_) | Slot::MovSrc(_), Operand::Reg(r)) => reads.push(*r),
            (Slot::DstVec(..), Operand::Vec(rs)) => writes.extend_from_slice(rs),
            (Slot::SrcVec(..), Operand::Vec(rs)) => reads.extend_from_slice(rs),
            (
                _,
                Operand::Addr(crate::ir::Address {
                    base: AddrBase::Reg(r),
                    ..
                }),
            ) => reads.push(*r),
            _ => {}
        }
        i += 1;
    }
}
