//! The final normalisation and the stores of O and LSE from the O fragments.

use super::super::ext::AttentionBuilderExt;
use super::super::output::log_sum_exp;
use super::super::plan::{HeadOffsets, Params};
use super::plan::LanePlace;
use super::scores::{row_sum, FragState};
use crate::builder::{Float, KernelBuilder, PackedHalf, F32};
use crate::ir::CmpOp;

/// Normalises and stores this lane's two rows, per row half `h`:
///
/// ```text
/// ℓ        = Σ over the row's 4 lanes of their shares
/// O[row]   = ℓ > 0 ? O / ℓ : 0        (each column pair rounded to T and stored as one word)
/// LSE[row] = ℓ > 0 ? (m + log2 ℓ) · ln 2 : −∞
/// ```
///
/// Rows past `Sq` store nothing; the lane with `quad = 0` stores the row's LSE.
pub(super) fn store_output<T: PackedHalf + Float>(
    k: &mut KernelBuilder,
    p: &Params<T, F32>,
    lane: &LanePlace,
    heads: &HeadOffsets,
    state: &FragState,
) {
    k.comment("normalise: O / l and LSE, store");
    for h in 0..2u32 {
        let l = row_sum(k, state.l[h as usize]);
        let has_mass = k.setp(CmpOp::Gt, l, 0.0f32);
        let inv = k.recip(l);
        let inv = k.selp(inv, 0.0f32, has_mass);
        let lse = log_sum_exp::<F32>(k, state.m[h as usize], l);
        let lse = k.selp(lse, f32::NEG_INFINITY, has_mass);
        let words: Vec<_> = state
            .o
            .iter()
            .map(|o| {
                let regs = o.f32_regs();
                let lo = k.mul(regs[2 * h as usize], inv);
                let hi = k.mul(regs[2 * h as usize + 1], inv);
                let pair = k.pack_f32_pair::<T>(lo, hi);
                k.pair_bits::<T>(pair)
            })
            .collect();
        let row = lane.row(k, h);
        let valid = k.setp_lt(row, p.seq_q);
        k.if_then(valid, |k| {
            let start = k.mad_lo(row, p.o_layout.seq, heads.o_start);
            let index = k.mad_lo(lane.quad, 2u32, start);
            let addr = k.elem_addr(p.o, index);
            for (j, w) in words.iter().enumerate() {
                k.st_global(addr, (j * 16) as i32, *w);
            }
            let first_in_row = k.setp(CmpOp::Eq, lane.quad, 0u32);
            k.if_then(first_in_row, |k| {
                let index = k.add(heads.lse_rows, row);
                let addr = k.elem_addr(p.lse, index);
                k.st_global(addr, 0, lse);
            });
        });
    }
}
