//! `moe_unpermute`: `out[t, j] = Σ_k weights[t, k] · Y[offsets[e] + slot_of[t, k], j]` with
//! `e = indices[t, k]`
//! over the pairs that were kept, in ascending `k` (a fixed order: deterministic), accumulated
//! in the compute type. `O(K)` per element, no scan; dropped pairs (`slot_of = u32::MAX`) and
//! pairs routed to a non-expert contribute nothing, so a token whose pairs were all dropped gets
//! a zero row.
//!
//! Grid `(T, ceil(N / UNPERMUTE_BLOCK))`, [`UNPERMUTE_BLOCK`] threads along `j`: the routing
//! loads are the same address for the whole block (broadcast) and the `Y` loads and `out`
//! stores are consecutive along `j` (coalesced).

use crate::builder::{KernelBuilder, U32};

use super::common::{constant, narrow, widen, MoeElem};
use super::MoeShape;

/// Threads per unpermute block (output columns per block).
pub const UNPERMUTE_BLOCK: u32 = 256;

/// Builds the unpermute entry: params `y [rows, N]`, `indices [T, K]`, `weights [T, K]`,
/// `slot_of [T, K]`, `offsets [E]`, `out [T, N]`, `capacity`; `N = out_width`.
pub(crate) fn build<T: MoeElem>(shape: &MoeShape, k: &mut KernelBuilder) {
    k.require_block([UNPERMUTE_BLOCK, 1, 1]);
    let y = k.param_ptr::<T>("y");
    let indices = k.param_ptr::<U32>("indices");
    let weights = k.param_ptr::<T>("weights");
    let slot_of = k.param_ptr::<U32>("slot_of");
    let offsets = k.param_ptr::<U32>("offsets");
    let out = k.param_ptr::<T>("out");
    let capacity = k.param::<U32>("capacity");
    let (y, indices, weights, slot_of, offsets, out) = (
        k.global_ptr(y),
        k.global_ptr(indices),
        k.global_ptr(weights),
        k.global_ptr(slot_of),
        k.global_ptr(offsets),
        k.global_ptr(out),
    );
    let capacity = k.load_param(capacity);
    let width = shape.out_width;
    let token = k.ctaid_x();
    let tid = k.tid_x();
    let column_block = k.ctaid_y();
    let j = k.mad_lo(column_block, UNPERMUTE_BLOCK, tid);
    let in_row = k.setp_lt(j, width);
    k.if_then(in_row, |k| {
        let acc = constant::<T::Acc>(k, 0.0);
        let first_pair = k.mul_lo(token, shape.top_k);
        k.for_range(0u32, shape.top_k, 1u32, |k, choice| {
            let pair = k.add(first_pair, choice);
            let slot_addr = k.elem_addr(slot_of, pair);
            let slot = k.ld_global_nc::<U32>(slot_addr, 0);
            let expert_addr = k.elem_addr(indices, pair);
            let expert = k.ld_global_nc::<U32>(expert_addr, 0);
            let kept = k.setp_lt(slot, capacity);
            let is_expert = k.setp_lt(expert, shape.experts);
            let contributes = k.and_pred(kept, is_expert);
            k.if_then(contributes, |k| {
                let weight_addr = k.elem_addr(weights, pair);
                let w_raw = k.ld_global_nc::<T>(weight_addr, 0);
                let w = widen(k, w_raw);
                let offset_addr = k.elem_addr(offsets, expert);
                let bin_start = k.ld_global_nc::<U32>(offset_addr, 0);
                let row = k.add(bin_start, slot);
                let index = k.mad_lo(row, width, j);
                let y_addr = k.elem_addr(y, index);
                let y_raw = k.ld_global_nc::<T>(y_addr, 0);
                let yv = widen(k, y_raw);
                k.fma_into(acc, w, yv, acc);
            });
        });
        let stored = narrow::<T>(k, acc);
        let row_start = k.mul_lo(token, width);
        let index = k.add(row_start, j);
        let addr = k.elem_addr(out, index);
        k.st_global(addr, 0, stored);
    });
}
