//! The forward kernel: one block per `block_m` query rows of one (batch, head), looping over
//! the KV tiles with an online softmax (FlashAttention-2).

use super::loads::{copy_lane, load_kv_tile, load_query_slice};
use super::output::{accumulate_pv, store_output};
use super::plan::{
    allocate_shared, declare_block, declare_params, head_offsets, kv_tile_count, row_visible_end,
    thread_place, Plan, RowState,
};
use super::softmax::{online_softmax_update, score_tile};
use crate::builder::{Float, KernelBuilder, S32};
use crate::lint::address::declare_index_bound;
use crate::templates::attention::config::{AttentionConfig, INDEX_BOUND};

/// The entry name of the forward kernel in every attention module.
pub const ENTRY: &str = "attention_forward";

/// Builds `attention_forward` for storage type `T` and accumulator type `A` (f32 for the half
/// types and f32, f64 for f64):
///
/// ```text
/// q̃ = Q[row] · scale (· log2 e)                       load_query_slice
/// m = −∞, ℓ = 0, O = 0
/// for each KV tile visible to some row of the block:
///     Ks, Vs ← K, V tile                               load_kv_tile        bar
///     s = q̃·Ksᵀ, masked                               score_tile
///     m, ℓ, O rescaled; P = exp(s − m)                 online_softmax_update  bar
///     O += P·Vs                                         accumulate_pv       bar
/// O / ℓ, LSE                                            store_output
/// ```
///
/// Every thread runs every tile iteration (the tile count is uniform in the block), and rows
/// past `Sq` only skip their stores, so all barriers are reached by the whole block.
pub(super) fn forward_kernel<T: Float, A: Float>(cfg: &AttentionConfig) -> KernelBuilder {
    let plan = Plan::new(cfg);
    let mut k = KernelBuilder::new(ENTRY, cfg.arch);
    declare_index_bound(&mut k, &INDEX_BOUND);
    declare_block(&mut k, cfg.arch, plan.tiles.threads);
    let params = declare_params::<T, A>(&mut k);
    let smem = allocate_shared(&mut k, &plan);
    let place = thread_place(&mut k, &plan, params.seq_q);
    let heads = head_offsets(&mut k, &params);
    let q = load_query_slice::<T, A>(&mut k, &plan, &params, &place, &heads);
    let state = RowState::<A>::new(&mut k, &plan);

    k.comment("per-thread shared addresses: its columns of Ks/Vs, its row (and entries) of P");
    let first_col_bytes = k.mul_lo(place.lane_in_row, plan.shared_vector_bytes());
    let k_thread = k.add(smem.k, first_col_bytes);
    let v_thread = k.add(smem.v, first_col_bytes);
    let p_row = k.mad_lo(
        place.row_in_tile,
        plan.tiles.p_row_stride * plan.acc_bytes,
        smem.p,
    );
    let p_own = k.mad_lo(place.lane_in_row, plan.acc_bytes, p_row);
    let lane = copy_lane(&mut k, &plan, &place);
    // Own key `t·G + g` of the tile at `kv0` is visible iff `t·G < visible_end − g − kv0`.
    let seqs = (params.seq_q, params.seq_kv);
    let visible_end = row_visible_end(&mut k, plan.causal, place.row, seqs);
    let g_signed = k.cvt::<S32, _>(place.lane_in_row, None);
    let own_visible_end = k.sub(visible_end, g_signed);
    let tile_sizes = (plan.tiles.block_m, plan.tiles.block_n);
    let tiles = kv_tile_count(&mut k, plan.causal, tile_sizes, place.tile_start, seqs);

    let block_n = plan.tiles.block_n;
    k.for_range(0u32, tiles, 1u32, |k, tile| {
        let kv0 = k.mul_lo(tile, block_n);
        load_kv_tile::<T, A>(k, &plan, &lane, &params, &heads, &smem, kv0);
        k.bar_sync();
        let kv0_signed = k.cvt::<S32, _>(kv0, None);
        let visible_limit = k.sub(own_visible_end, kv0_signed);
        let scores = score_tile::<A>(k, &plan, &q, k_thread, &place, visible_limit);
        online_softmax_update(k, &plan, &state, &scores, p_own);
        k.bar_sync();
        accumulate_pv::<A>(k, &plan, &state, p_row, v_thread);
        k.bar_sync();
    });
    store_output(&mut k, &plan, &params, &place, &state);
    k
}
