//! The tensor-core forward kernel (f16/bf16 on sm_80+, FlashAttention-2 on `mma.m16n8k16`;
//! f32 with `allow_tf32` on tf32 `mma.m16n8k8`, [`tf32`]).
//!
//! Each warp owns one or two m16 tiles of query rows (16 or 32 rows,
//! `AttentionConfig::tc_warp_rows`): with two, every K and V fragment the warp loads serves
//! both tiles' mmas, halving the `ldmatrix` traffic per mma. The block's Q tile goes to shared
//! memory once by `cp.async` and into registers as `ldmatrix` A fragments (or is re-read per KV
//! tile where they would not fit); K and V tiles stream through a two- or three-stage
//! (`TcPlan::kv_stages`, `R` below) `cp.async` ring of padded rows (conflict-free
//! `ldmatrix`). Per KV tile a warp computes
//! `S = Q·Kᵀ` on the tensor cores, runs the online softmax on the S fragments, packs P into
//! A fragments in registers and accumulates `O += P·V`. Phases: [`plan`] (geometry, lane
//! addresses), [`copy`] (the asynchronous tile copies), [`scores`] (the tile arithmetic),
//! [`output`] (normalise and store); [`elem`] holds what differs per storage type.

mod copy;
mod elem;
mod output;
mod plan;
mod scores;
mod tf32;

use super::forward::ENTRY;
use super::plan::{declare_block, declare_params, head_offsets, kv_tile_count, row_visible_end};
use crate::builder::{KernelBuilder, Reg, F32, S32, U32};
use crate::ir::CmpOp;
use crate::lint::address::declare_index_bound;
use crate::templates::attention::config::{AttentionConfig, INDEX_BOUND};
use copy::{chunk_places, copy_kv_tile_fast, copy_q_tile, negate_q_tile, KvStreams};
use elem::TcElem;
use output::store_output;
use plan::{allocate_shared, LanePlace, TcPlan};
use scores::{accumulate_pv, mask_scores, online_softmax_update, raw_scores, score_tile};
use scores::{FragState, QFragments};

/// Builds `attention_forward` on tensor cores for storage type `T` (f16 or bf16 on
/// `mma.m16n8k16`, f32 on tf32 `mma.m16n8k8`; see [`elem`]):
///
/// ```text
/// Qs ← Q tile; Ks[0], Vs[0] ← KV tile 0            cp.async, one group
/// Ks, Vs[i] ← KV tile i, 0 < i < R − 1             one group each (empty past the last)
/// wait_group R − 2                                  Q and tile 0 landed (this thread's)
/// Qs ← −Qs if scale < 0 (this thread's chunks); bar so the softmax scales by f = |scale|·log2 e
/// Qa ← ldmatrix(Qs)                                 registers for the whole kernel (if they fit)
/// m = −∞, ℓ = 0, O = 0
/// for each KV tile t visible to some row of the block (unmasked tiles first, then masked):
///     wait_group R − 2; bar                         tile t landed; slot (t−1) mod R free
///     Ks, Vs[(t+R−1) mod R] ← KV tile t + R − 1      cp.async (if any); commit
///     S = Qa·Ks[t mod R]ᵀ                             mma, the first step from a zero C
///     masked tiles only: hidden scores → −∞         past Skv, the causal diagonal
///     online softmax, p = 2^fma(S, f, −μ); P         fragments
///     O += P·Vs[t mod R]                              mma, P from registers
/// O / ℓ, LSE; O staged in shared, 16-byte stores    store_output
/// ```
///
/// A tile is unmasked when every row of the block sees all its keys (tiles below the first
/// row's visible end, [`unmasked_tile_count`]); those run a loop without any mask, the rest
/// (at most the diagonal tiles and the one across `Skv`) a loop with it. KV tiles below `Skv`
/// are copied from precomputed per-thread streams ([`copy::KvStreams`]), the last ragged one
/// by the zero-filling copy.
///
/// S, the mask, the online softmax and O are per m16 tile of the warp; the K and V fragments
/// are loaded once for all of them.
///
/// Both tile counts are uniform in the block and every lane runs every iteration, so all
/// barriers are reached by the whole block; rows past `Sq` only skip their stores.
pub(super) fn forward_kernel<T: TcElem>(cfg: &AttentionConfig) -> KernelBuilder {
    let plan = TcPlan::new(cfg);
    let mut k = KernelBuilder::new(ENTRY, cfg.arch);
    declare_index_bound(&mut k, &INDEX_BOUND);
    declare_block(&mut k, cfg.arch, plan.threads);
    let params = declare_params::<T, F32>(&mut k);
    let shared = allocate_shared(&mut k, &plan);
    let lane = LanePlace::new::<T>(&mut k, &plan);
    let heads = head_offsets(&mut k, &params);
    let seqs = (params.seq_q, params.seq_kv);
    let tile_sizes = (plan.block_m, plan.block_n);
    let tiles = kv_tile_count(&mut k, plan.causal, tile_sizes, lane.tile_start, seqs);
    let q_chunks = chunk_places(&mut k, &plan, lane.tid, plan.block_m);
    let kv_chunks = chunk_places(&mut k, &plan, lane.tid, plan.block_n);
    let streams = KvStreams::new(&mut k, &plan, &kv_chunks, &params, &heads);

    k.comment("prologue: the Q tile with KV tile 0, then KV tiles 1 .. R - 1, a group each");
    copy_q_tile(&mut k, &q_chunks, &params, &heads, lane.tile_start, shared);
    let ahead = plan.kv_stages - 1;
    for i in 0..ahead {
        let tile = k.var::<U32>(i);
        let present = k.setp_lt(tile, tiles);
        k.if_then(present, |k| {
            copy_kv_tile_fast(
                k, &plan, &kv_chunks, &streams, &params, &heads, shared, tile,
            );
        });
        k.cp_async_commit();
    }
    k.cp_async_wait_group(ahead - 1);
    // f = |scale| · log2 e ≥ 0 lets the softmax take its maximum over raw scores; a negative
    // scale flips the sign bits of this thread's own (landed) Q chunks instead.
    let negative = k.setp(CmpOp::Lt, params.scale, 0.0f32);
    k.if_then(negative, |k| negate_q_tile::<T>(k, &q_chunks, shared));
    k.bar_sync();
    let q_lane = k.add(shared, lane.q_ldm);
    let q = QFragments::<T>::new(&mut k, &plan, q_lane);
    let states: Vec<FragState<T>> = (0..plan.row_tiles)
        .map(|_| FragState::<T>::new(&mut k, &plan))
        .collect();
    let zero = T::zero_acc(&mut k);
    let magnitude = k.abs(params.scale);
    let factor = k.mul(magnitude, std::f32::consts::LOG2_E);
    // Key `8j + e` of the tile at `kv0` is visible to row half `h` of m16 tile `i` iff
    // `8j + e < visible_end(row_ih) − kv0 − 2·quad`.
    let quad_keys = k.shl(lane.quad, 1u32);
    let quad_keys = k.cvt::<S32, _>(quad_keys, None);
    let own_end: Vec<[_; 2]> = (0..plan.row_tiles)
        .map(|tile| {
            std::array::from_fn(|h| {
                let row = lane.row(&mut k, tile, h as u32);
                let end = row_visible_end(&mut k, plan.causal, row, seqs);
                k.sub(end, quad_keys)
            })
        })
        .collect();
    let unmasked = unmasked_tile_count(&mut k, &plan, lane.tile_start, seqs);
    let k_lane = k.add(shared, lane.k_ldm);
    let k_lane = k.add(k_lane, plan.k_ring());
    let v_lane = k.add(shared, lane.v_ldm);
    let v_lane = k.add(v_lane, plan.v_ring());

    let tile_body = |k: &mut KernelBuilder, tile: Reg<U32>, masked: bool| {
        k.comment("tile t has landed and every warp is done with the slot of tile t - 1");
        k.cp_async_wait_group(ahead - 1);
        k.bar_sync();
        let next = k.add(tile, ahead);
        let more = k.setp_lt(next, tiles);
        k.if_then(more, |k| {
            copy_kv_tile_fast(
                k, &plan, &kv_chunks, &streams, &params, &heads, shared, next,
            );
        });
        k.cp_async_commit();
        let slot = plan.kv_slot(k, tile);
        let slot_bytes = k.mul_lo(slot, plan.kv_tile_bytes());
        let k_stage = k.add(k_lane, slot_bytes);
        let v_stage = k.add(v_lane, slot_bytes);
        let s = score_tile::<T>(k, &plan, &q, k_stage, &zero);
        let kv0 = masked.then(|| {
            let kv0 = k.mul_lo(tile, plan.block_n);
            k.cvt::<S32, _>(kv0, None)
        });
        let p: Vec<_> = (s.iter().zip(&states).zip(&own_end))
            .map(|((s, state), own_end)| match kv0 {
                Some(kv0) => {
                    let limit = own_end.map(|end| k.sub(end, kv0));
                    let m = mask_scores(k, s, limit);
                    online_softmax_update::<T>(k, state, &m.scores, Some(&m.visible), factor)
                }
                None => online_softmax_update::<T>(k, state, &raw_scores(s), None, factor),
            })
            .collect();
        accumulate_pv::<T>(k, &plan, &states, &p, v_stage);
    };
    k.comment("KV tiles every row of the block sees whole: no mask");
    k.for_range(0u32, unmasked, 1u32, |k, tile| tile_body(k, tile, false));
    k.comment("the rest (past Skv, the causal diagonal): masked");
    k.for_range(unmasked, tiles, 1u32, |k, tile| tile_body(k, tile, true));
    k.cp_async_wait_all();
    store_output(&mut k, &plan, &params, &lane, &states, shared);
    k
}

/// KV tiles every key of which every row of the block sees: `⌊max(visible_end(tile_start), 0)
/// / block_n⌋` (the first row sees the fewest keys; `Skv` without the causal mask). The same in
/// every thread of the block, so both tile loops may hold barriers.
fn unmasked_tile_count(
    k: &mut KernelBuilder,
    plan: &TcPlan,
    tile_start: Reg<U32>,
    seqs: (Reg<U32>, Reg<U32>),
) -> Reg<U32> {
    let end = row_visible_end(k, plan.causal, tile_start, seqs);
    let end = k.max(end, 0i32);
    let end = k.cvt::<U32, S32>(end, None);
    k.shr(end, plan.block_n.trailing_zeros())
}
