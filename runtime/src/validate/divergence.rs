//! Which statements may run in a diverged warp, as far as the validator can see (invariant 10).
//!
//! A register is **divergent** when its value may differ between the lanes of one warp: it is
//! written from `%tid`, `%laneid` or `%warpid`, from memory other than the parameter space (a
//! load, atomic, `shfl`, `ldmatrix` or `mma` result is per-lane data), from a divergent
//! register, under a divergent guard, or anywhere inside a divergent region. Parameters,
//! `%ctaid`/`%ntid`/`%nctaid`, immediates, shared-array addresses and `vote` results are
//! uniform. The analysis is flow-insensitive (a register written once divergently is divergent
//! everywhere), which can only over-report.
//!
//! A **divergent region** is what a branch on a divergent predicate can make lanes skip or
//! repeat: the statements strictly between a forward `@p bra` and its label (an `if_then` body,
//! a loop whose exit test is per-lane), the statements from the label to a backward `@p bra`,
//! and everything after a divergent `@p ret`. Branches on uniform predicates (a loop over `K`
//! read from a parameter, `if k_tiles > 0`) keep the warp converged and open no region.

use crate::ir::{Inst, Kernel, Op, Operand, RegId, SpecialReg, Stmt};

use super::RegUses;

/// Per statement: `Some(i)` when it lies in the region opened by the divergent branch or return
/// at statement `i`.
pub(super) fn divergent_regions(
    kernel: &Kernel,
    placed: &[Option<usize>],
    uses: &RegUses,
) -> Vec<Option<usize>> {
    let body: &[Stmt] = &kernel.body;
    let mut divergent = vec![false; kernel.regs.len()];
    loop {
        let regions = regions(body, placed, &divergent);
        let mut changed = false;
        // Indexed (see the note above `any_divergent`).
        let mut i = 0;
        while i < body.len() {
            if let Stmt::Inst(inst) = &body[i] {
                changed |= spread(inst, i, uses, regions[i].is_some(), &mut divergent);
            }
            i += 1;
        }
        if !changed {
            return regions;
        }
    }
}

/// Marks what statement `i` (`inst`) writes divergent when its result is per-lane or it lies in
/// a divergent region; whether that marked a register for the first time.
fn spread(inst: &Inst, i: usize, uses: &RegUses, in_region: bool, divergent: &mut [bool]) -> bool {
    let writes = uses.writes(i);
    // Nothing left to learn from a statement whose results are all divergent already (or that
    // writes nothing): most of them, after the first round.
    if all_divergent(divergent, writes) {
        return false;
    }
    if !in_region && !writes_divergent(inst, uses.reads(i), divergent) {
        return false;
    }
    let mut changed = false;
    for r in writes {
        if let Some(d) = divergent.get_mut(r.0 as usize) {
            changed |= !*d;
            *d = true;
        }
    }
    changed
}

/// Whether the instruction's result differs per lane given the divergent registers so far
/// (`reads`: the registers it reads).
fn writes_divergent(inst: &Inst, reads: &[RegId], divergent: &[bool]) -> bool {
    let is_div = |r: RegId| is_divergent(divergent, r);
    let per_lane_source = match &inst.op {
        Op::Mov(_) => inst.args.iter().any(|a| {
            matches!(
                a,
                Operand::Special(
                    SpecialReg::TidX
                        | SpecialReg::TidY
                        | SpecialReg::TidZ
                        | SpecialReg::LaneId
                        | SpecialReg::WarpId
                )
            )
        }),
        Op::Ld { space, .. } => *space != crate::ir::Space::Param,
        Op::Atom { .. } | Op::Shfl(_) | Op::Ldmatrix { .. } | Op::Mma(_) => true,
        Op::Vote(_) => return inst.guard.is_some_and(|g| is_div(g.pred)),
        _ => false,
    };
    per_lane_source || any_divergent(divergent, reads)
}

// The helpers below run per statement per round: plain loops over slices, because the macro's
// dependencies build unoptimised by default, where each iterator adapter step is a call.

/// Whether some register of `regs` is known divergent.
fn any_divergent(divergent: &[bool], regs: &[RegId]) -> bool {
    let mut i = 0;
    while i < regs.len() {
        if is_divergent(divergent, regs[i]) {
            return true;
        }
        i += 1;
    }
    false
}

/// Whether every register of `regs` is known divergent.
fn all_divergent(divergent: &[bool], regs: &[RegId]) -> bool {
    let mut i = 0;
    while i < regs.len() {
        if !is_divergent(divergent, regs[i]) {
            return false;
        }
        i += 1;
    }
    true
}

/// Whether `r` is known divergent (an id outside the arena is not).
fn is_divergent(divergent: &[bool], r: RegId) -> bool {
    let id = r.0 as usize;
    id < divergent.len() && divergent[id]
}

fn regions(body: &[Stmt], placed: &[Option<usize>], divergent: &[bool]) -> Vec<Option<usize>> {
    let mut out = vec![None; body.len()];
    let mut mark = |range: std::ops::Range<usize>, by: usize| {
        for slot in &mut out[range] {
            slot.get_or_insert(by);
        }
    };
    for (i, stmt) in body.iter().enumerate() {
        let Stmt::Inst(inst) = stmt else { continue };
        let Some(g) = inst.guard else { continue };
        if !divergent.get(g.pred.0 as usize).copied().unwrap_or(false) {
            continue;
        }
        match (&inst.op, inst.args.first()) {
            (Op::Bra { .. }, Some(Operand::Label(l))) => match placed.get(l.0 as usize) {
                Some(Some(at)) if *at > i => mark(i + 1..*at, i),
                Some(Some(at)) => mark(*at..i + 1, i),
                _ => {}
            },
            (Op::Ret, _) => mark(i + 1..body.len(), i),
            _ => {}
        }
    }
    out
}
