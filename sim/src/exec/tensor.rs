//! Warp-level matrix instructions: `mma.sync.aligned` and `ldmatrix.sync.aligned`. Each runs once
//! for the warp's group at that pc; with synccheck, a group that is not all 32 lanes of a full
//! warp (diverged, predicated off, exited, or a partial last warp) is an `UnconvergedWarp`
//! finding, and the instruction still runs with the registers the missing lanes hold (zero for
//! lanes that do not exist), writing results only to the executing lanes.
//!
//! `ldmatrix` (PTX ISA "ldmatrix"): for `.xN`, lanes `8i..8i+7` give the shared addresses of rows
//! 0..7 of matrix `i` (16 bytes each, 16-byte aligned); the other lanes' addresses are ignored.
//! Lane `l` receives in register `i` row `l/4`, columns `2(l%4)` (low half) and `2(l%4)+1` (high
//! half) of matrix `i`; with `.trans`, the transposed matrix: row `2(l%4)` and `2(l%4)+1` of
//! column `l/4` as stored.

use super::global::GlobalSpace;
use super::memops::Region;
use super::{lanes, BlockCtx, Engine, Warp, WARP};
use crate::counters::phase_wavefronts;
use crate::decode::{Inst, Op};
use crate::findings::{AccessKind, FindingKind};
use crate::sem::mma::Frag;

impl<G: GlobalSpace> Engine<'_, G> {
    /// Synccheck for `.aligned` warp instructions: every lane of a full warp must execute.
    fn check_converged(&mut self, bc: &BlockCtx, w: &Warp, pc: u32, exec: u32, what: &str) {
        if exec == u32::MAX || !self.spec.checks.synccheck || bc.faulted {
            return;
        }
        let first = exec.trailing_zeros() as usize;
        let message = if w.present != u32::MAX {
            format!("{what} executed by a partial warp (lanes 0x{:08x} exist); .aligned warp instructions need all 32 lanes", w.present)
        } else {
            format!("{what} executed by lanes 0x{exec:08x} only: .aligned warp instructions need all 32 lanes converged and unpredicated")
        };
        self.report(
            bc,
            w,
            first,
            pc,
            FindingKind::UnconvergedWarp,
            message,
            None,
        );
    }

    pub(super) fn mma(&mut self, bc: &mut BlockCtx, w: &mut Warp, inst: &Inst, pc: u32, exec: u32) {
        let Op::Mma { spec, d, a, b, c } = inst.op else {
            return;
        };
        if exec == 0 {
            return;
        }
        self.check_converged(bc, w, pc, exec, "mma");
        let gather = |regs: &[u32], n: usize| -> [Frag; WARP] {
            let mut out = [[0u32; 4]; WARP];
            for (lane, frag) in out.iter_mut().enumerate() {
                for (slot, &r) in frag.iter_mut().zip(regs).take(n) {
                    *slot = w.regs[r as usize * WARP + lane] as u32;
                }
            }
            out
        };
        let af = gather(&a, spec.a_regs());
        let bf = gather(&b, spec.b_regs());
        let cf = gather(&c, spec.acc_regs(false));
        let out = spec.compute(&af, &bf, &cf);
        for l in lanes(exec) {
            for (i, &r) in d.iter().enumerate().take(spec.acc_regs(true)) {
                w.regs[r as usize * WARP + l] = u64::from(out[l][i]);
            }
        }
        self.counters.mma_instructions += 1;
        self.counters.mma_flops += spec.flops();
    }

    pub(super) fn ldmatrix(
        &mut self,
        bc: &mut BlockCtx,
        w: &mut Warp,
        inst: &Inst,
        pc: u32,
        exec: u32,
    ) {
        let Op::Ldmatrix {
            num,
            trans,
            d,
            space,
            addr,
        } = inst.op
        else {
            return;
        };
        if exec == 0 {
            return;
        }
        self.check_converged(bc, w, pc, exec, "ldmatrix");
        let rows_n = 8 * usize::from(num);
        // rows[8i + r]: row r of matrix i, eight b16 elements.
        let mut rows = [[0u16; 8]; WARP];
        let mut offs = [[0u64; 8]; 4];
        let mut known = [0usize; 4];
        for src in lanes(exec).filter(|&l| l < rows_n) {
            let a = self.effective(bc, w, addr, src);
            let Some(region) = self.resolve(bc, w, src, pc, space, a, 16, 16, AccessKind::Read)
            else {
                continue;
            };
            for (j, e) in rows[src].iter_mut().enumerate() {
                *e = self.load(bc, w, src, region, 2 * j as u64, 2) as u16;
            }
            if let Region::Shared(off) = region {
                let m = src / 8;
                offs[m][known[m]] = off;
                known[m] += 1;
            }
        }
        for l in lanes(exec) {
            let (r, c) = (l / 4, 2 * (l % 4));
            for (i, &dr) in d.iter().enumerate().take(usize::from(num)) {
                let m = &rows[8 * i..8 * i + 8];
                let (lo, hi) = if trans {
                    (m[c][r], m[c + 1][r])
                } else {
                    (m[r][c], m[r][c + 1])
                };
                w.regs[dr as usize * WARP + l] = u64::from(lo) | (u64::from(hi) << 16);
            }
        }
        self.counters.ldmatrix_requests += 1;
        self.counters.ldmatrix_matrices += u64::from(num);
        for (m, &n) in known.iter().enumerate().take(usize::from(num)) {
            if n > 0 {
                self.counters.ldmatrix_wavefronts += phase_wavefronts(&offs[m][..n], 16);
            }
        }
    }
}
