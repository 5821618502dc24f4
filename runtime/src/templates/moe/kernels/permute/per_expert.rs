//! `moe_permute` with one block per expert (`E >` [`ONE_BLOCK_MAX_EXPERTS`](super::ONE_BLOCK_MAX_EXPERTS)).
//!
//! Block `e` (grid `E`, [`PERMUTE_BLOCK`] threads) scans the routed pairs `p = t·K + k` in
//! order, [`PERMUTE_BLOCK`] at a time: a pair routed to `e` gets slot
//! `s = #{earlier pairs routed to e}`, computed without atomics as
//! `running + Σ_{earlier warps} popc(ballot) + popc(ballot & lanes_below)`. So the result does not
//! depend on scheduling. Pairs with `s < C` are stored (`token_ids[e·C + s] = t`,
//! `slot_of[p] = s`); the others are dropped (`slot_of[p] = u32::MAX`). Afterwards the block
//! writes `counts[e] = min(routed, C)`, `routed[e]`, and `u32::MAX` into its empty slots, so
//! every element of `token_ids` is written. Block 0 also marks pairs whose index is not an
//! expert (`≥ E`, e.g. from NaN logits) as dropped; those are not counted anywhere.
//!
//! Every block reads all the pairs (coalesced), and writes `slot_of` only at its own pairs: a
//! `1/E`-dense scatter, the price of a block per expert (the one-block mapping writes it
//! whole).

use crate::builder::{KernelBuilder, Reg, SharedArr, U32};
use crate::ir::CmpOp;

use super::super::MoeShape;
use super::{
    chunk_pair, fill_empty_slots, lanes_below, PermuteParams, DROPPED, PERMUTE_BLOCK, WARPS,
};

/// Builds the permute entry: `indices [T, K] → token_ids [E, C], counts [E], routed [E],
/// slot_of [T, K]`.
pub(super) fn build(shape: &MoeShape, k: &mut KernelBuilder) {
    k.require_block([PERMUTE_BLOCK, 1, 1]);
    let PermuteParams {
        indices,
        token_ids,
        counts,
        routed,
        slot_of,
        tokens,
        capacity,
    } = PermuteParams::declare(k);
    let warp_counts = k.shared_array::<U32>("warp_counts", WARPS);
    let tid = k.tid_x();
    let lane = k.and(tid, 31u32);
    let warp = k.shr(tid, 5u32);
    let expert = k.ctaid_x();
    let bin_start = k.mul_lo(expert, capacity);
    let bin = k.offset_ptr(token_ids, bin_start);
    let pairs = k.mul_lo(tokens, shape.top_k);
    let lanes_below = lanes_below(k, lane);
    let running = k.var::<U32>(0u32);
    k.comment("scan the pairs in order, a block-width chunk per step");
    k.for_range(0u32, pairs, PERMUTE_BLOCK, |k, chunk| {
        let (pair, in_range, routed_expert) = chunk_pair(k, indices, chunk, tid, pairs);
        let hit = k.setp(CmpOp::Eq, routed_expert, expert);
        let ballot = k.ballot(hit);
        let (before, chunk_total) = chunk_prefix(k, warp_counts, ballot, lane, warp, lanes_below);
        k.if_then(hit, |k| {
            let slot = k.add(running, before);
            let kept = k.setp_lt(slot, capacity);
            let stored = k.selp(slot, DROPPED, kept);
            let slot_addr = k.elem_addr(slot_of, pair);
            k.st_global(slot_addr, 0, stored);
            k.if_then(kept, |k| {
                let token = k.div_int(pair, shape.top_k);
                let addr = k.elem_addr(bin, slot);
                k.st_global(addr, 0, token);
            });
        });
        mark_invalid_pairs(shape, k, slot_of, expert, pair, in_range, routed_expert);
        k.add_into(running, running, chunk_total);
    });
    finish_bin(k, counts, routed, bin, expert, capacity, running, tid);
}

/// Prefix counts of one chunk: `before` = hits in earlier warps plus earlier lanes of this warp,
/// `total` = hits in the chunk. Per-warp `popc(ballot)` goes through shared memory; the two
/// barriers keep the next chunk from overwriting counts still being read.
fn chunk_prefix(
    k: &mut KernelBuilder,
    warp_counts: SharedArr<U32>,
    ballot: Reg<U32>,
    lane: Reg<U32>,
    warp: Reg<U32>,
    lanes_below: Reg<U32>,
) -> (Reg<U32>, Reg<U32>) {
    let lane_zero = k.setp(CmpOp::Eq, lane, 0u32);
    k.if_then(lane_zero, |k| {
        let count = k.popc(ballot);
        let slot = k.shared_elem(warp_counts, warp);
        k.st_shared(slot, 0, count);
    });
    k.bar_sync();
    let below = k.and(ballot, lanes_below);
    let before = k.popc(below);
    let total = k.var::<U32>(0u32);
    let base = k.shared_base(warp_counts);
    for w in 0..WARPS {
        let count = k.ld_shared::<U32>(base, (w * 4) as i32);
        let earlier = k.setp(CmpOp::Gt, warp, w);
        let add = k.selp(count, 0u32, earlier);
        k.add_into(before, before, add);
        k.add_into(total, total, count);
    }
    k.bar_sync();
    (before, total)
}

/// Block 0 marks pairs routed to a non-expert (`index ≥ E`) as dropped so `slot_of` is fully
/// written even for such input.
fn mark_invalid_pairs(
    shape: &MoeShape,
    k: &mut KernelBuilder,
    slot_of: crate::builder::GlobalPtr<U32>,
    expert: Reg<U32>,
    pair: Reg<U32>,
    in_range: crate::builder::Pred,
    routed_expert: Reg<U32>,
) {
    let block_zero = k.setp(CmpOp::Eq, expert, 0u32);
    let invalid = k.setp_ge(routed_expert, shape.experts);
    let marks = k.and_pred(block_zero, invalid);
    let marks = k.and_pred(marks, in_range);
    k.if_then(marks, |k| {
        let addr = k.elem_addr(slot_of, pair);
        k.st_global(addr, 0, DROPPED);
    });
}

/// `counts[e] = min(routed, C)`, `routed[e] = routed`, and `token_ids[e·C + s] = u32::MAX` for
/// the empty slots `s ∈ [counts[e], C)`.
#[allow(clippy::too_many_arguments)]
fn finish_bin(
    k: &mut KernelBuilder,
    counts: crate::builder::GlobalPtr<U32>,
    routed: crate::builder::GlobalPtr<U32>,
    bin: crate::builder::GlobalPtr<U32>,
    expert: Reg<U32>,
    capacity: Reg<U32>,
    running: Reg<U32>,
    tid: Reg<U32>,
) {
    k.comment("bin totals and empty slots");
    let kept = k.min(running, capacity);
    let first = k.setp(CmpOp::Eq, tid, 0u32);
    k.if_then(first, |k| {
        let addr = k.elem_addr(counts, expert);
        k.st_global(addr, 0, kept);
        let addr = k.elem_addr(routed, expert);
        k.st_global(addr, 0, running);
    });
    fill_empty_slots(k, bin, kept, capacity, tid);
}
