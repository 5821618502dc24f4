//! `moe_permute` with one block for every expert (`E ≤`
//! [`ONE_BLOCK_MAX_EXPERTS`](super::ONE_BLOCK_MAX_EXPERTS)).
//!
//! The block scans the pairs in order, a chunk of [`PERMUTE_BLOCK`] per step (thread `i` takes
//! pair `chunk + i`), in four phases split by three barriers:
//!
//! 1. **Ballots**: each warp takes `ballot(e_p = x)` for every expert `x`; a lane keeps the
//!    ballot of its own pair's expert, and lane `x` stores the warp's count of `x`,
//!    `warp_counts[w][x]`.
//! 2. **Slots**: a pair's rank in the chunk among pairs of its expert is
//!    `r = Σ_{w' < w} warp_counts[w'][e] + popc(ballot & lanes_below)`, its slot
//!    `s = running[e] + r`; `slot_of[p]` is stored (all lanes: coalesced). Meanwhile lane `x`
//!    of warp 0 sums expert `x`'s chunk count and, by an inclusive shuffle scan over the lanes,
//!    where `x`'s pairs start in the chunk's expert-major order (`chunk_start[x]`).
//! 3. **Order**: each routed pair puts its `token_ids` index `e·C + s` (`u32::MAX` when
//!    dropped) and token at `chunk_start[e] + r` of the chunk's expert-major list; lane `x` of
//!    warp 0 advances `running[x]`.
//! 4. **Bins**: thread `i` below the chunk's routed count writes entry `i` of the list, so
//!    consecutive threads write consecutive slots of a bin.
//!
//! Afterwards lane `x` stores `counts[x] = min(running[x], C)` and `routed[x]`, and the block
//! fills every bin's empty slots. Phase 3's list stores are a scatter inside 256 words (one
//! run per expert and warp), the only shared accesses that can share a bank.

use crate::builder::{KernelBuilder, Reg, SharedArr, U32};
use crate::ir::CmpOp;

use super::super::common::warp_inclusive_sum;
use super::super::MoeShape;
use super::{
    chunk_pair, fill_empty_slots, lanes_below, PermuteParams, DROPPED, PERMUTE_BLOCK, WARPS,
};

/// The block's shared bookkeeping.
struct Books {
    /// `[WARPS][E]`: the chunk's pairs of each expert per warp.
    warp_counts: SharedArr<U32>,
    /// `[E]`: pairs of each expert before the chunk.
    running: SharedArr<U32>,
    /// `[E + 1]`: where each expert's pairs start in the chunk's expert-major list; the last
    /// entry is the chunk's routed count.
    chunk_start: SharedArr<U32>,
    /// `[PERMUTE_BLOCK]`: the chunk's `token_ids` indices in expert-major order.
    list_index: SharedArr<U32>,
    /// `[PERMUTE_BLOCK]`: their tokens.
    list_token: SharedArr<U32>,
}

/// The thread's place in the block.
struct Lanes {
    lane: Reg<U32>,
    warp: Reg<U32>,
}

pub(super) fn build(shape: &MoeShape, k: &mut KernelBuilder) {
    debug_assert!(shape.experts <= super::ONE_BLOCK_MAX_EXPERTS);
    k.require_block([PERMUTE_BLOCK, 1, 1]);
    let params = PermuteParams::declare(k);
    let e = shape.experts;
    let books = Books {
        warp_counts: k.shared_array::<U32>("warp_counts", WARPS * e),
        running: k.shared_array::<U32>("running", e),
        chunk_start: k.shared_array::<U32>("chunk_start", e + 1),
        list_index: k.shared_array::<U32>("list_index", PERMUTE_BLOCK),
        list_token: k.shared_array::<U32>("list_token", PERMUTE_BLOCK),
    };
    let tid = k.tid_x();
    let lanes = Lanes {
        lane: k.and(tid, 31u32),
        warp: k.shr(tid, 5u32),
    };
    let expert_lane = k.setp_lt(tid, e);
    // Read first after phase 1's barrier.
    k.if_then(expert_lane, |k| {
        let at = k.shared_elem(books.running, tid);
        k.st_shared(at, 0, 0u32);
    });
    let pairs = k.mul_lo(params.tokens, shape.top_k);
    k.comment("scan the pairs in order, a block-width chunk per step");
    k.for_range(0u32, pairs, PERMUTE_BLOCK, |k, chunk| {
        let (pair, in_range, expert) = chunk_pair(k, params.indices, chunk, tid, pairs);
        let mine = ballots(shape, k, &books, &lanes, expert);
        k.bar_sync();
        let chunk_total = chunk_starts(shape, k, &books, &lanes);
        let rank = rank_in_chunk(shape, k, &books, &lanes, expert, mine);
        let routed = k.setp_lt(expert, e);
        let index = k.var::<U32>(DROPPED);
        let slot = k.var::<U32>(DROPPED);
        k.if_then(routed, |k| {
            let at = k.shared_elem(books.running, expert);
            let before = k.ld_shared::<U32>(at, 0);
            let s = k.add(before, rank);
            let kept = k.setp_lt(s, params.capacity);
            k.if_then(kept, |k| {
                k.assign(slot, s);
                let i = k.mad_lo(expert, params.capacity, s);
                k.assign(index, i);
            });
        });
        k.if_then(in_range, |k| {
            let addr = k.elem_addr(params.slot_of, pair);
            k.st_global(addr, 0, slot);
        });
        k.bar_sync();
        k.comment("the chunk's bin entries in expert-major order");
        k.if_then(routed, |k| {
            let at = k.shared_elem(books.chunk_start, expert);
            let start = k.ld_shared::<U32>(at, 0);
            let position = k.add(start, rank);
            let at = k.shared_elem(books.list_index, position);
            k.st_shared(at, 0, index);
            let token = k.div_int(pair, shape.top_k);
            let at = k.shared_elem(books.list_token, position);
            k.st_shared(at, 0, token);
        });
        k.if_then(expert_lane, |k| {
            let at = k.shared_elem(books.running, tid);
            let before = k.ld_shared::<U32>(at, 0);
            let after = k.add(before, chunk_total);
            k.st_shared(at, 0, after);
        });
        k.bar_sync();
        write_bins(k, &params, &books, e, tid);
    });
    finish_bins(k, &params, &books, e, tid);
}

/// Phase 1: `ballot(e_p = x)` for every expert `x`. Returns the ballot of the thread's own
/// expert (0 for a pair that is not routed); lane `x` stores `popc` of expert `x`'s.
fn ballots(
    shape: &MoeShape,
    k: &mut KernelBuilder,
    books: &Books,
    lanes: &Lanes,
    expert: Reg<U32>,
) -> Reg<U32> {
    k.comment("per-expert ballots");
    let mut mine = k.var::<U32>(0u32);
    let mut lanes_expert = mine;
    for x in 0..shape.experts {
        let hit = k.setp(CmpOp::Eq, expert, x);
        let ballot = k.ballot(hit);
        mine = k.selp(ballot, mine, hit);
        let is_lane = k.setp(CmpOp::Eq, lanes.lane, x);
        lanes_expert = k.selp(ballot, lanes_expert, is_lane);
    }
    let expert_lane = k.setp_lt(lanes.lane, shape.experts);
    k.if_then(expert_lane, |k| {
        let count = k.popc(lanes_expert);
        let row = k.mul_lo(lanes.warp, shape.experts);
        let at = k.add(row, lanes.lane);
        let at = k.shared_elem(books.warp_counts, at);
        k.st_shared(at, 0, count);
    });
    mine
}

/// Phase 2, warp 0: lane `x < E` sums expert `x`'s chunk count over the warps and stores
/// `chunk_start[x]` (exclusive scan over the lanes); lane 31 stores the chunk's routed count
/// at `chunk_start[E]`. Returns the lane's expert count (0 elsewhere).
fn chunk_starts(shape: &MoeShape, k: &mut KernelBuilder, books: &Books, lanes: &Lanes) -> Reg<U32> {
    let e = shape.experts;
    let total = k.var::<U32>(0u32);
    let warp_zero = k.setp(CmpOp::Eq, lanes.warp, 0u32);
    // Warp-uniform: the shuffles below see the whole of warp 0.
    k.if_then(warp_zero, |k| {
        k.comment("chunk counts per expert and their exclusive scan");
        let expert_lane = k.setp_lt(lanes.lane, e);
        k.if_then(expert_lane, |k| {
            let base = k.shared_elem(books.warp_counts, lanes.lane);
            for w in 0..WARPS {
                let count = k.ld_shared::<U32>(base, (w * e * 4) as i32);
                k.add_into(total, total, count);
            }
        });
        let inclusive = warp_inclusive_sum(k, lanes.lane, total);
        k.if_then(expert_lane, |k| {
            let start = k.sub(inclusive, total);
            let at = k.shared_elem(books.chunk_start, lanes.lane);
            k.st_shared(at, 0, start);
        });
        let last = k.setp(CmpOp::Eq, lanes.lane, 31u32);
        k.if_then(last, |k| {
            let at = k.shared_base(books.chunk_start);
            k.st_shared(at, (e * 4) as i32, inclusive);
        });
    });
    total
}

/// Phase 2: the pair's rank among the chunk's pairs of its expert, `Σ_{w' < w}
/// warp_counts[w'][e] + popc(ballot & lanes_below)` (meaningless for a pair not routed).
fn rank_in_chunk(
    shape: &MoeShape,
    k: &mut KernelBuilder,
    books: &Books,
    lanes: &Lanes,
    expert: Reg<U32>,
    mine: Reg<U32>,
) -> Reg<U32> {
    let below = lanes_below(k, lanes.lane);
    let earlier = k.and(mine, below);
    let rank = k.popc(earlier);
    // A pair that is not routed reads expert E − 1's counts and ignores them.
    let column = k.min(expert, shape.experts - 1);
    let base = k.shared_elem(books.warp_counts, column);
    for w in 0..WARPS {
        let count = k.ld_shared::<U32>(base, (w * shape.experts * 4) as i32);
        let before = k.setp(CmpOp::Gt, lanes.warp, w);
        let add = k.selp(count, 0u32, before);
        k.add_into(rank, rank, add);
    }
    rank
}

/// Phase 4: `token_ids[list_index[i]] = list_token[i]` for `i <` the chunk's routed count
/// (kept pairs only).
fn write_bins(
    k: &mut KernelBuilder,
    params: &PermuteParams,
    books: &Books,
    experts: u32,
    tid: Reg<U32>,
) {
    let at = k.shared_base(books.chunk_start);
    let routed = k.ld_shared::<U32>(at, (experts * 4) as i32);
    let listed = k.setp_lt(tid, routed);
    k.if_then(listed, |k| {
        let at = k.shared_elem(books.list_index, tid);
        let index = k.ld_shared::<U32>(at, 0);
        let kept = k.setp(CmpOp::Ne, index, DROPPED);
        k.if_then(kept, |k| {
            let at = k.shared_elem(books.list_token, tid);
            let token = k.ld_shared::<U32>(at, 0);
            let addr = k.elem_addr(params.token_ids, index);
            k.st_global(addr, 0, token);
        });
    });
}

/// `counts[x] = min(running[x], C)` and `routed[x]` (lane `x`, one coalesced store each), then
/// every bin's empty slots.
fn finish_bins(
    k: &mut KernelBuilder,
    params: &PermuteParams,
    books: &Books,
    experts: u32,
    tid: Reg<U32>,
) {
    k.comment("bin totals and empty slots");
    let expert_lane = k.setp_lt(tid, experts);
    k.if_then(expert_lane, |k| {
        let at = k.shared_elem(books.running, tid);
        let routed = k.ld_shared::<U32>(at, 0);
        let kept = k.min(routed, params.capacity);
        let addr = k.elem_addr(params.counts, tid);
        k.st_global(addr, 0, kept);
        let addr = k.elem_addr(params.routed, tid);
        k.st_global(addr, 0, routed);
    });
    k.for_range(0u32, experts, 1u32, |k, x| {
        let at = k.shared_elem(books.running, x);
        let routed = k.ld_shared::<U32>(at, 0);
        let kept = k.min(routed, params.capacity);
        let bin_start = k.mul_lo(x, params.capacity);
        let bin = k.offset_ptr(params.token_ids, bin_start);
        fill_empty_slots(k, bin, kept, params.capacity, tid);
    });
}
