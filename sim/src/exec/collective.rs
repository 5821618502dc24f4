//! Warp collectives (`shfl.sync`, `vote.sync`, `bar.warp.sync`, `redux.sync`, `match.sync`): lanes
//! wait (park) until every non-exited lane named in their member mask has arrived at the same
//! instruction, then the operation runs for all of them at once. Lanes that do not exist (partial
//! last warp) or have exited are not waited for, so a full mask `0xffffffff` is legal there, as
//! the PTX ISA and the CUDA programming guide specify. Synccheck reports a lane missing from its
//! own mask, and member lanes that can never arrive because they wait at a barrier or another
//! collective (forced when the warp can run nothing else).

use super::global::GlobalSpace;
use super::{lanes, BlockCtx, Engine, Flow, Warp, WARP};
use crate::decode::{Inst, Op, ShflMode, VoteMode};
use crate::findings::FindingKind;

impl<G: GlobalSpace> Engine<'_, G> {
    pub(super) fn collective(
        &mut self,
        bc: &mut BlockCtx,
        w: &mut Warp,
        inst: &Inst,
        pc: u32,
        group: u32,
        exec: u32,
    ) -> Flow {
        let mask_src = match inst.op {
            Op::Shfl { mask, .. }
            | Op::Vote { mask, .. }
            | Op::WarpSync { mask }
            | Op::Redux { mask, .. }
            | Op::Match { mask, .. } => mask,
            _ => return Flow::Next,
        };
        for l in lanes(exec) {
            w.coll_mask[l] = self.rd(bc, w, mask_src, l) as u32;
        }
        let parked_here = {
            let mut m = 0u32;
            for l in lanes(w.parked) {
                if w.pc[l] == pc {
                    m |= 1 << l;
                }
            }
            m
        };
        let arrived = exec | parked_here;
        let dead = !w.present | w.exited | w.faulted;
        let mut ready = 0u32;
        for l in lanes(arrived) {
            let m = w.coll_mask[l];
            if m & (1 << l) == 0 && self.spec.checks.synccheck {
                self.report(bc, w, l, pc, FindingKind::WarpSyncMask, format!("lane {l} executes a warp-synchronous instruction with member mask 0x{m:08x} that does not include itself"), None);
            }
            if m & !dead & !arrived == 0 {
                ready |= 1 << l;
            }
        }
        let wait = exec & !ready;
        if parked_here == 0 && wait == 0 {
            self.run_collective(bc, w, inst, ready);
            return Flow::Next;
        }
        // Park the lanes still waiting; run the ready ones (including earlier parked lanes).
        self.run_collective(bc, w, inst, ready);
        w.running &= !wait;
        w.parked |= wait;
        w.parked &= !ready;
        for l in lanes(wait) {
            w.pc[l] = pc;
        }
        for l in lanes(ready | (group & !exec)) {
            w.pc[l] = pc + 1;
        }
        w.running |= ready;
        Flow::Split
    }

    /// The warp can run nothing else: lanes parked at a collective wait for lanes that will never
    /// come. Report and run them with the lanes that did arrive.
    pub(super) fn force_collective(&mut self, bc: &mut BlockCtx, w: &mut Warp) {
        let Some(pc) = lanes(w.parked).map(|l| w.pc[l]).min() else {
            return;
        };
        let mut here = 0u32;
        for l in lanes(w.parked) {
            if w.pc[l] == pc {
                here |= 1 << l;
            }
        }
        let first = here.trailing_zeros() as usize;
        let m = w.coll_mask[first];
        // Lanes that exited (or never existed) release the waiters: the instruction waits only
        // for non-exited member lanes (PTX ISA, `shfl.sync`/`vote.sync`/`bar.warp.sync`).
        let missing = m & !here & w.present & !w.exited & !w.faulted;
        if missing != 0 && !bc.faulted {
            let where_ = lanes(missing)
                .next()
                .map(|l| {
                    if w.at_bar & (1 << l) != 0 {
                        format!(
                            "lane {l} waits at a barrier (line {})",
                            self.line_of(w.pc[l].saturating_sub(1))
                        )
                    } else if w.parked & (1 << l) != 0 {
                        format!(
                            "lane {l} waits at another warp-synchronous instruction (line {})",
                            self.line_of(w.pc[l])
                        )
                    } else {
                        format!("lane {l} exited")
                    }
                })
                .unwrap_or_default();
            let kind = if self.spec.checks.synccheck {
                FindingKind::WarpSyncMask
            } else {
                FindingKind::Deadlock
            };
            self.report(
                bc,
                w,
                first,
                pc,
                kind,
                format!("lanes 0x{missing:08x} named in member mask 0x{m:08x} never arrive at this instruction ({where_})"),
                None,
            );
        }
        if let Some(inst) = self.spec.prog.insts.get(pc as usize) {
            self.run_collective(bc, w, inst, here);
        }
        w.parked &= !here;
        w.running |= here;
        for l in lanes(here) {
            w.pc[l] = pc + 1;
        }
    }

    /// Performs the collective for `lanes_mask` (all at the same instruction).
    fn run_collective(&mut self, bc: &mut BlockCtx, w: &mut Warp, inst: &Inst, lanes_mask: u32) {
        if lanes_mask == 0 {
            return;
        }
        match inst.op {
            Op::Shfl {
                mode,
                d,
                p,
                a,
                b,
                c,
                ..
            } => {
                let mut src = [0u64; WARP];
                for (l, s) in src.iter_mut().enumerate() {
                    if w.present & (1 << l) != 0 {
                        *s = self.rd(bc, w, a, l);
                    }
                }
                let mut out = [(0u64, false); WARP];
                for l in lanes(lanes_mask) {
                    let bval = (self.rd(bc, w, b, l) & 31) as i32;
                    let cv = self.rd(bc, w, c, l);
                    let cval = (cv & 31) as i32;
                    let segmask = ((cv >> 8) & 31) as i32;
                    let lane = l as i32;
                    let max_lane = (lane & segmask) | (cval & !segmask);
                    let min_lane = lane & segmask;
                    let (j, ok) = match mode {
                        ShflMode::Up => (lane - bval, lane - bval >= max_lane),
                        ShflMode::Down => (lane + bval, lane + bval <= max_lane),
                        ShflMode::Bfly => (lane ^ bval, (lane ^ bval) <= max_lane),
                        ShflMode::Idx => {
                            let j = min_lane | (bval & !segmask);
                            (j, j <= max_lane)
                        }
                    };
                    let j = if ok { j } else { lane };
                    out[l] = (src[(j & 31) as usize], ok);
                }
                for l in lanes(lanes_mask) {
                    w.regs[d as usize * WARP + l] = out[l].0;
                    w.regs[p as usize * WARP + l] = u64::from(out[l].1);
                }
            }
            Op::Vote {
                mode, d, a, neg, ..
            } => {
                let mut ballot = 0u32;
                for l in lanes(lanes_mask) {
                    if (self.rd(bc, w, a, l) & 1 != 0) != neg {
                        ballot |= 1 << l;
                    }
                }
                for l in lanes(lanes_mask) {
                    let members = w.coll_mask[l] & lanes_mask;
                    let set = ballot & members;
                    let v = match mode {
                        VoteMode::Ballot => u64::from(set),
                        VoteMode::All => u64::from(set == members),
                        VoteMode::Any => u64::from(set != 0),
                        VoteMode::Uni => u64::from(set == 0 || set == members),
                    };
                    w.regs[d as usize * WARP + l] = v;
                }
            }
            Op::Redux { f, d, a, .. } => {
                let mut vals = [0u64; WARP];
                for l in lanes(lanes_mask) {
                    vals[l] = self.rd(bc, w, a, l);
                }
                for l in lanes(lanes_mask) {
                    let members = w.coll_mask[l] & lanes_mask;
                    let first = members.trailing_zeros() as usize;
                    let mut acc = vals[first];
                    for j in lanes(members & !(1 << first)) {
                        acc = f(acc, vals[j]);
                    }
                    w.regs[d as usize * WARP + l] = acc & 0xffff_ffff;
                }
            }
            Op::Match { all, d, p, a, .. } => {
                let mut vals = [0u64; WARP];
                for l in lanes(lanes_mask) {
                    vals[l] = self.rd(bc, w, a, l);
                }
                for l in lanes(lanes_mask) {
                    let members = w.coll_mask[l] & lanes_mask;
                    let mut same = 0u32;
                    for j in lanes(members) {
                        if vals[j] == vals[l] {
                            same |= 1 << j;
                        }
                    }
                    let (dv, pv) = match all {
                        false => (same, false),
                        true if same == members => (members, true),
                        true => (0, false),
                    };
                    w.regs[d as usize * WARP + l] = u64::from(dv);
                    w.regs[p as usize * WARP + l] = u64::from(pv);
                }
            }
            Op::WarpSync { .. } => {
                if let Some(r) = &mut self.race {
                    r.warp_sync(w.index as usize);
                }
            }
            _ => {}
        }
    }
}
