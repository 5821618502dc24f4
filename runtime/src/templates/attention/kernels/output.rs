//! `O += P·V` per tile and the final normalisation and stores of O and LSE.

use super::ext::{acc_imm, AttentionBuilderExt};
use super::loads::row_address;
use super::plan::{Params, Plan, RowState, ThreadPlace};
use super::softmax::row_allreduce;
use crate::builder::{Float, KernelBuilder, Reg, F32, F64, U32};
use crate::ir::{CmpOp, CvtRounding, MathFn, Precision, Rounding, SpecialReg, Type};

/// `O[row, col(c)] += Σ_j P[row, j] · Vs[j, col(c)]` over the tile's `block_n` keys.
///
/// `P[row, j]` is one address per row (a broadcast to the row's threads; rows of a warp sit
/// `p_row_stride ≡ G (mod 32)` words apart, so distinct banks); `Vs[j, col(c)]` is read like
/// `Ks` in the score phase (the row's threads read consecutive words, the warp's rows the same
/// ones). Keys past `Skv` or masked have `P = 0` and zero-filled `V`.
pub(super) fn accumulate_pv<A: Float>(
    k: &mut KernelBuilder,
    plan: &Plan,
    state: &RowState<A>,
    p_row: Reg<U32>,
    v_thread: Reg<U32>,
) {
    k.comment("O += P * V for this tile");
    let vector = plan.tiles.vector;
    for j in 0..plan.tiles.block_n {
        let p = k.ld_shared_n::<A>(p_row, (j * plan.acc_bytes) as i32, 1)[0];
        for c in 0..plan.chunks() {
            let offset = (j * plan.shared_row_bytes() + plan.chunk_col(c) * plan.acc_bytes) as i32;
            let vs = k.ld_shared_n::<A>(v_thread, offset, vector as usize);
            for (e, vx) in vs.into_iter().enumerate() {
                let o = state.acc[(c * vector) as usize + e];
                k.fma_into(o, p, vx, o);
            }
        }
    }
}

/// Normalises and stores the row:
///
/// ```text
/// ℓ        = Σ over the row's threads of their shares
/// O[row]   = ℓ > 0 ? O / ℓ : 0                       (rounded to the storage type)
/// LSE[row] = ℓ > 0 ? ln ℓ + m · (ln 2 | 1) : −∞      (f32; m is in log2 units for f32
///                                                      accumulators, natural units for f64)
/// ```
///
/// Fully masked rows (causal with `Sq > Skv`) keep `ℓ = 0` and get `O = 0`, `LSE = −∞`. Rows
/// past `Sq` store nothing; thread `g = 0` of each row stores LSE.
pub(super) fn store_output<T: Float, A: Float>(
    k: &mut KernelBuilder,
    plan: &Plan,
    p: &Params<T, A>,
    place: &ThreadPlace,
    state: &RowState<A>,
) {
    k.comment("normalise: O / l and LSE, store");
    let l = row_allreduce(k, plan, state.l, false);
    let has_mass = k.setp(CmpOp::Gt, l, acc_imm::<A>(0.0));
    let inv = k.recip(l);
    let inv = k.selp(inv, acc_imm::<A>(0.0), has_mass);
    let lse = log_sum_exp::<A>(k, state.m, l);
    let lse = k.selp(lse, f32::NEG_INFINITY, has_mass);
    let vector = plan.tiles.vector as usize;
    k.if_then(place.row_valid, |k| {
        // O's head start and LSE's row are computed here, not kept live through the tile loop.
        let (h, b) = (k.ctaid_y(), k.ctaid_z());
        let o_start = p.o_layout.head_start(k, b, h);
        let seq_stride = p.o_layout.seq(k);
        let o = k.global_ptr(p.o);
        let row_addr = row_address(k, plan, o, o_start, seq_stride, place);
        for c in 0..plan.chunks() {
            let values: Vec<Reg<T>> = (0..vector)
                .map(|e| {
                    let o = state.acc[c as usize * vector + e];
                    let scaled = k.mul(o, inv);
                    k.narrow::<A, T>(scaled)
                })
                .collect();
            let offset = (plan.chunk_col(c) * plan.elem_bytes) as i32;
            k.st_global_n(row_addr, offset, &values);
        }
        let first_in_row = k.setp(CmpOp::Eq, place.lane_in_row, 0u32);
        k.if_then(first_in_row, |k| {
            // `(b · Hq + h) · Sq + row` with `Hq = nctaid.y` (the grid has one block row per
            // query head), so `heads_q` need not stay live through the tile loop.
            let heads_q = k.special(SpecialReg::NctaidY);
            let bh = k.mad_lo(b, heads_q, h);
            let index = k.mad_lo(bh, p.seq_q, place.row);
            let lse_ptr = k.global_ptr(p.lse);
            let addr = k.elem_addr(lse_ptr, index);
            k.st_global(addr, 0, lse);
        });
    });
}

/// `ln ℓ + m` in f32 from the running max `m` and sum `ℓ` (`lg2.approx` is within 2⁻²² of
/// `log2`, far below the f32 LSE tolerance).
pub(super) fn log_sum_exp<A: Float>(k: &mut KernelBuilder, m: Reg<A>, l: Reg<A>) -> Reg<F32> {
    let ln2 = std::f32::consts::LN_2;
    match A::TYPE {
        Type::F64 => {
            let m32 = k.cvt::<F32, F64>(m.retype(), Some(CvtRounding::Float(Rounding::Rn)));
            let l32 = k.cvt::<F32, F64>(l.retype(), Some(CvtRounding::Float(Rounding::Rn)));
            let log2_l = k.math(MathFn::Lg2, l32, Precision::Approx);
            k.fma(log2_l, ln2, m32)
        }
        _ => {
            let (m, l) = (m.retype::<F32>(), l.retype::<F32>());
            let log2_l = k.math(MathFn::Lg2, l, Precision::Approx);
            let log2_sum = k.add(m, log2_l);
            k.mul(log2_sum, ln2)
        }
    }
}
