//! The expert FFN entries, each one tiled GEMM (see [`super::gemm`]) over the permuted layout:
//!
//! - `moe_expert_linear`: `Y[e·C + s] = W[e] · X[token_ids[e·C + s]]`, `Y [E·C, F]`.
//! - `moe_expert_swiglu_up`: `G[e·C + s] = silu(W1[e] · x) ⊙ (W3[e] · x)` with
//!   `x = X[token_ids[e·C + s]]`, both products from the same staged `x` tile, `G [E·C, F]`
//!   stored in the dtype.
//! - `moe_expert_swiglu_down`: `Y[e·C + s] = W2[e] · G[e·C + s]`, `Y [E·C, H]`.
//!
//! Every row index `e·C + s` above is `offsets[e] + s` in the permuted outputs (packed bins when
//! dropless, `e·C` when capacity-limited; see [`super::schedule`]).
//!
//! Grid `(max work items, ceil(N / TILE_N))`, [`GEMM_THREADS`] threads, static shared memory
//! only. Only routed rows are computed and written: empty slots of a capacity-limited bin are
//! left as they were.

use crate::builder::{KernelBuilder, U32};

use super::common::MoeElem;
use super::gemm::{
    gathered_rows, permuted_rows, reduction_loop, silu_times, store_outputs, tile_coords,
    weight_rows, zero_accumulators, Schedule, GEMM_THREADS,
};
use super::MoeShape;

/// `moe_expert_linear`: params `x [T, H]`, `token_ids [E, C]`, `counts [E]`, `offsets [E]`,
/// `work_items`, `w [E, F, H]`, `y [rows, F]`, `tokens`, `capacity`.
pub(crate) fn build_linear<T: MoeElem>(shape: &MoeShape, k: &mut KernelBuilder) {
    k.require_block([GEMM_THREADS, 1, 1]);
    let x = k.param_ptr::<T>("x");
    let token_ids = k.param_ptr::<U32>("token_ids");
    let counts = k.param_ptr::<U32>("counts");
    let offsets = k.param_ptr::<U32>("offsets");
    let work_items = k.param_ptr::<U32>("work_items");
    let w = k.param_ptr::<T>("w");
    let y = k.param_ptr::<T>("y");
    let tokens = k.param::<U32>("tokens");
    let capacity = k.param::<U32>("capacity");
    let (x, token_ids, counts, offsets, work_items, w, y) = (
        k.global_ptr(x),
        k.global_ptr(token_ids),
        k.global_ptr(counts),
        k.global_ptr(offsets),
        k.global_ptr(work_items),
        k.global_ptr(w),
        k.global_ptr(y),
    );
    let tokens = k.load_param(tokens);
    let capacity = k.load_param(capacity);
    let schedule = Schedule {
        counts,
        offsets,
        work_items,
    };
    let tile = tile_coords::<T>(k, schedule, capacity);
    let a_rows = gathered_rows(k, &tile, token_ids, tokens, shape.hidden);
    let b_rows = weight_rows(k, &tile, shape.expert_dim, shape.hidden);
    let acc = zero_accumulators::<T::Acc>(k);
    let accs = [acc];
    reduction_loop(k, &tile, x, &a_rows, &[w], &b_rows, shape.hidden, &accs);
    let [acc] = accs;
    store_outputs(k, &tile, y, shape.expert_dim, |_, i, j| acc[i][j]);
}

/// `moe_expert_swiglu_up`: params `x [T, H]`, `token_ids [E, C]`, `counts [E]`, `offsets [E]`,
/// `work_items`, `w1 [E, F, H]`, `w3 [E, F, H]`, `gated [rows, F]`, `tokens`, `capacity`.
pub(crate) fn build_swiglu_up<T: MoeElem>(shape: &MoeShape, k: &mut KernelBuilder) {
    k.require_block([GEMM_THREADS, 1, 1]);
    let x = k.param_ptr::<T>("x");
    let token_ids = k.param_ptr::<U32>("token_ids");
    let counts = k.param_ptr::<U32>("counts");
    let offsets = k.param_ptr::<U32>("offsets");
    let work_items = k.param_ptr::<U32>("work_items");
    let w1 = k.param_ptr::<T>("w1");
    let w3 = k.param_ptr::<T>("w3");
    let gated = k.param_ptr::<T>("gated");
    let tokens = k.param::<U32>("tokens");
    let capacity = k.param::<U32>("capacity");
    let (x, token_ids, counts, offsets, work_items, w1, w3, gated) = (
        k.global_ptr(x),
        k.global_ptr(token_ids),
        k.global_ptr(counts),
        k.global_ptr(offsets),
        k.global_ptr(work_items),
        k.global_ptr(w1),
        k.global_ptr(w3),
        k.global_ptr(gated),
    );
    let tokens = k.load_param(tokens);
    let capacity = k.load_param(capacity);
    let schedule = Schedule {
        counts,
        offsets,
        work_items,
    };
    let tile = tile_coords::<T>(k, schedule, capacity);
    let a_rows = gathered_rows(k, &tile, token_ids, tokens, shape.hidden);
    let b_rows = weight_rows(k, &tile, shape.expert_dim, shape.hidden);
    let accs = [
        zero_accumulators::<T::Acc>(k),
        zero_accumulators::<T::Acc>(k),
    ];
    reduction_loop(
        k,
        &tile,
        x,
        &a_rows,
        &[w1, w3],
        &b_rows,
        shape.hidden,
        &accs,
    );
    let [gate, up] = accs;
    store_outputs(k, &tile, gated, shape.expert_dim, |k, i, j| {
        silu_times(k, gate[i][j], up[i][j])
    });
}

/// `moe_expert_swiglu_down`: params `gated [rows, F]`, `counts [E]`, `offsets [E]`,
/// `work_items`, `w2 [E, H, F]`, `y [rows, H]` (no `token_ids`: its rows are already permuted).
pub(crate) fn build_swiglu_down<T: MoeElem>(shape: &MoeShape, k: &mut KernelBuilder) {
    k.require_block([GEMM_THREADS, 1, 1]);
    let gated = k.param_ptr::<T>("gated");
    let counts = k.param_ptr::<U32>("counts");
    let offsets = k.param_ptr::<U32>("offsets");
    let work_items = k.param_ptr::<U32>("work_items");
    let w2 = k.param_ptr::<T>("w2");
    let y = k.param_ptr::<T>("y");
    let (gated, counts, offsets, work_items, w2, y) = (
        k.global_ptr(gated),
        k.global_ptr(counts),
        k.global_ptr(offsets),
        k.global_ptr(work_items),
        k.global_ptr(w2),
        k.global_ptr(y),
    );
    // Only the gathering kernels read `token_ids`, whose row stride this is.
    let capacity = k.var::<U32>(0u32);
    let schedule = Schedule {
        counts,
        offsets,
        work_items,
    };
    let tile = tile_coords::<T>(k, schedule, capacity);
    let a_rows = permuted_rows(k, &tile, shape.expert_dim);
    let b_rows = weight_rows(k, &tile, shape.hidden, shape.expert_dim);
    let accs = [zero_accumulators::<T::Acc>(k)];
    reduction_loop(
        k,
        &tile,
        gated,
        &a_rows,
        &[w2],
        &b_rows,
        shape.expert_dim,
        &accs,
    );
    let [acc] = accs;
    store_outputs(k, &tile, y, shape.hidden, |_, i, j| acc[i][j]);
}
