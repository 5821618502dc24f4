//! `moe_permute`: block `b` routes the experts of group `b`, `[32·b, 32·b + 32) ∩ [0, E)`
//! (grid `⌈E / 32⌉`, [`EXPERTS_PER_BLOCK`](super::EXPERTS_PER_BLOCK) = 32, so one block up to
//! 32 experts).
//!
//! Expert `x = 32·b + j` is owned by warp `j mod 8` of block `b` for the whole launch; the owner
//! keeps `routed[x]` so far (pairs of `x` before the chunk) in a warp-uniform register. The block
//! scans the pairs in order, a chunk of [`PERMUTE_BLOCK`] per step (thread `i` loads pair
//! `chunk + i`), in three phases split by two barriers:
//!
//! 1. **Experts**: thread `i` puts its pair's expert at `chunk_experts[i]` and `u32::MAX` at
//!    `chunk_slots[i]`.
//! 2. **Ranks**: each lane reads the chunk's experts 32 at a time (`chunk_experts[32·s +
//!    lane]`, 8 steps) once; then each warp, for each expert `x` it owns, ballots `= x` over
//!    the 8 steps: a hit's rank among the chunk's pairs of `x` is the hits of the steps before
//!    plus `popc(ballot & lanes_below)`, its slot `routed[x] + rank`. A hit stores its slot at
//!    `chunk_slots[32·s + lane]` (`u32::MAX` past `C`) and its pair at `run[warp][first +
//!    rank]`, where `first` counts the warp's earlier experts' hits in this chunk: each warp
//!    gathers its experts' pairs, in order, into runs.
//! 3. **Stores**: thread `i` stores `slot_of[chunk + i] = chunk_slots[i]` if its pair's
//!    expert is in the block's group (block 0 also takes the pairs naming a non-expert, which
//!    stay `u32::MAX`), so one block writes `slot_of` whole and coalesced; each warp writes its
//!    experts' kept runs, lane `j` writing `token_ids[x·C + routed[x] + j] = pair / K`, so
//!    consecutive lanes write consecutive slots of a bin; then `routed[x]` grows by the
//!    chunk's hits.
//!
//! Every shared access is conflict-free: the chunk's experts and slots are read and written by
//! their own lane's bank (`32·s + lane`), and a step's hits store consecutive run entries. The
//! values a lane reads from another lane or warp cross a block barrier. Afterwards the owners
//! put `routed[x]` in shared memory, thread `j` stores `counts[32·b + j] = min(routed, C)` and
//! `routed[32·b + j]`, and the block fills its bins' empty slots (one loop over the group's
//! slots, which are consecutive).
//!
//! Each block reads every pair, so the reads grow as `⌈E / 32⌉ · T·K`, and the ballots as
//! `E · T·K / 32` per warp-lane.

use crate::builder::{KernelBuilder, Pred, Reg, SharedArr, U32};
use crate::ir::CmpOp;

use super::super::MoeShape;
use super::{
    chunk_pair, lanes_below, PermuteParams, DROPPED, EXPERTS_PER_BLOCK, PERMUTE_BLOCK, WARPS,
};

/// The block's shared arrays.
struct Books {
    /// `[PERMUTE_BLOCK]`: the chunk's experts, pair order.
    chunk_experts: SharedArr<U32>,
    /// `[PERMUTE_BLOCK]`: the chunk's slots, pair order (`u32::MAX` dropped or not routed).
    chunk_slots: SharedArr<U32>,
    /// `[WARPS][PERMUTE_BLOCK]`: each warp's runs of its experts' pairs in this chunk.
    runs: SharedArr<U32>,
    /// `[EXPERTS_PER_BLOCK]`: `routed[32·b + j]` after the scan, at `j`.
    routed: SharedArr<U32>,
}

/// The thread's place in the block.
struct Lanes {
    tid: Reg<U32>,
    lane: Reg<U32>,
    warp: Reg<U32>,
    /// `(1 << lane) − 1`.
    below: Reg<U32>,
    /// Element index of the warp's run buffer.
    run_base: Reg<U32>,
    /// `32·b`: the block's first expert.
    group_base: Reg<U32>,
}

/// One expert the warp owns: `x = 32·b + warp + WARPS·i`, its index `j` in the group, whether
/// it exists (`x < E`, warp-uniform), its pairs before the chunk, and this chunk's hits and
/// first run entry.
struct Owned {
    expert: Reg<U32>,
    in_group: Reg<U32>,
    exists: Pred,
    routed: Reg<U32>,
    hits: Reg<U32>,
    first: Reg<U32>,
}

pub(super) fn build(shape: &MoeShape, k: &mut KernelBuilder) {
    k.require_block([PERMUTE_BLOCK, 1, 1]);
    let params = PermuteParams::declare(k);
    let e = shape.experts;
    let group = e.min(EXPERTS_PER_BLOCK);
    let books = Books {
        chunk_experts: k.shared_array::<U32>("chunk_experts", PERMUTE_BLOCK),
        chunk_slots: k.shared_array::<U32>("chunk_slots", PERMUTE_BLOCK),
        runs: k.shared_array::<U32>("runs", WARPS * PERMUTE_BLOCK),
        routed: k.shared_array::<U32>("routed_total", group),
    };
    let tid = k.tid_x();
    let lane = k.and(tid, 31u32);
    let warp = k.shr(tid, 5u32);
    let block = k.ctaid_x();
    let lanes = Lanes {
        tid,
        lane,
        warp,
        below: lanes_below(k, lane),
        run_base: k.mul_lo(warp, PERMUTE_BLOCK),
        group_base: k.mul_lo(block, EXPERTS_PER_BLOCK),
    };
    let owned: Vec<Owned> = (0..group.div_ceil(WARPS))
        .map(|i| {
            let in_group = k.add(lanes.warp, i * WARPS);
            let expert = k.add(lanes.group_base, in_group);
            Owned {
                expert,
                in_group,
                exists: k.setp_lt(expert, e),
                routed: k.var::<U32>(0u32),
                hits: k.var::<U32>(0u32),
                first: k.var::<U32>(0u32),
            }
        })
        .collect();
    let pairs = k.mul_lo(params.tokens, shape.top_k);
    k.comment("scan the pairs in order, a block-width chunk per step");
    k.for_range(0u32, pairs, PERMUTE_BLOCK, |k, chunk| {
        let (pair, in_range, expert) = chunk_pair(k, params.indices, chunk, tid, pairs);
        let at = k.shared_elem(books.chunk_experts, tid);
        k.st_shared(at, 0, expert);
        let at = k.shared_elem(books.chunk_slots, tid);
        k.st_shared(at, 0, DROPPED);
        k.bar_sync();
        let steps = chunk_steps(k, &books, &lanes);
        let first = k.var::<U32>(0u32);
        for o in &owned {
            k.assign(o.first, first);
            k.assign(o.hits, 0u32);
            k.if_then(o.exists, |k| {
                rank_expert(k, &books, &lanes, o, &steps, chunk, params.capacity);
            });
            k.add_into(first, first, o.hits);
        }
        k.bar_sync();
        k.comment("slots in pair order, bins in slot order");
        let stores_slot = writes_slot_of(shape, k, &lanes, expert, in_range);
        k.if_then(stores_slot, |k| {
            let at = k.shared_elem(books.chunk_slots, tid);
            let slot = k.ld_shared::<U32>(at, 0);
            let addr = k.elem_addr(params.slot_of, pair);
            k.st_global(addr, 0, slot);
        });
        for o in &owned {
            k.if_then(o.exists, |k| {
                write_run(shape, k, &params, &books, &lanes, o);
            });
            k.add_into(o.routed, o.routed, o.hits);
        }
    });
    for o in &owned {
        let owner = k.setp(CmpOp::Eq, lanes.lane, 0u32);
        let stores = k.and_pred(o.exists, owner);
        k.if_then(stores, |k| {
            let at = k.shared_elem(books.routed, o.in_group);
            k.st_shared(at, 0, o.routed);
        });
    }
    k.bar_sync();
    finish_bins(k, &params, &books, e, &lanes);
}

/// The chunk's experts as this lane sees them in phase 2: `chunk_experts[32·s + lane]` for
/// the 8 steps `s`, read once and shared by every expert the warp owns.
fn chunk_steps(k: &mut KernelBuilder, books: &Books, lanes: &Lanes) -> Vec<Reg<U32>> {
    let experts_at = k.shared_elem(books.chunk_experts, lanes.lane);
    (0..WARPS)
        .map(|step| k.ld_shared::<U32>(experts_at, (step * 32 * 4) as i32))
        .collect()
}

/// Whether this thread stores `slot_of` for its pair: the pair exists and its expert is in the
/// block's group, or (block 0) names no expert. With one block every existing pair.
fn writes_slot_of(
    shape: &MoeShape,
    k: &mut KernelBuilder,
    lanes: &Lanes,
    expert: Reg<U32>,
    in_range: Pred,
) -> Pred {
    if shape.experts <= EXPERTS_PER_BLOCK {
        return in_range;
    }
    let valid = k.setp_lt(expert, shape.experts);
    let own_group = k.shr(expert, EXPERTS_PER_BLOCK.trailing_zeros());
    let group = k.selp(own_group, 0u32, valid);
    let block = k.shr(lanes.group_base, EXPERTS_PER_BLOCK.trailing_zeros());
    let mine = k.setp(CmpOp::Eq, group, block);
    k.and_pred(mine, in_range)
}

/// Phase 2 for owned expert `o.expert`: ballots over the chunk's 8 `steps` of 32 pairs; a hit
/// stores its slot and its pair (at `o.first + rank` of the warp's run); `o.hits` ends as
/// the chunk's pairs of the expert. Warp-uniform (every lane runs every ballot); only the
/// hits work out their rank.
fn rank_expert(
    k: &mut KernelBuilder,
    books: &Books,
    lanes: &Lanes,
    o: &Owned,
    steps: &[Reg<U32>],
    chunk: Reg<U32>,
    capacity: Reg<U32>,
) {
    let slots_at = k.shared_elem(books.chunk_slots, lanes.lane);
    let run_start = k.add(lanes.run_base, o.first);
    for (step, &expert) in (0u32..).zip(steps) {
        let offset = (step * 32 * 4) as i32;
        let hit = k.setp(CmpOp::Eq, expert, o.expert);
        let ballot = k.ballot(hit);
        k.if_then(hit, |k| {
            let earlier = k.and(ballot, lanes.below);
            let ahead = k.popc(earlier);
            let rank = k.add(o.hits, ahead);
            let slot = k.add(o.routed, rank);
            let kept = k.setp_lt(slot, capacity);
            let stored = k.selp(slot, DROPPED, kept);
            k.st_shared(slots_at, offset, stored);
            let entry = k.add(run_start, rank);
            let at = k.shared_elem(books.runs, entry);
            let pair = k.add(chunk, lanes.lane);
            let p = k.add(pair, step * 32);
            k.st_shared(at, 0, p);
        });
        let count = k.popc(ballot);
        k.add_into(o.hits, o.hits, count);
    }
}

/// Phase 3 for owned expert `o.expert`: its kept run entries `j < min(hits, C − routed)`
/// (none once the bin is full), `token_ids[x·C + routed + j] = run[first + j] / K`.
fn write_run(
    shape: &MoeShape,
    k: &mut KernelBuilder,
    params: &PermuteParams,
    books: &Books,
    lanes: &Lanes,
    o: &Owned,
) {
    let room = k.var::<U32>(0u32);
    let open = k.setp_lt(o.routed, params.capacity);
    k.if_then(open, |k| {
        let left = k.sub(params.capacity, o.routed);
        let r = k.min(left, o.hits);
        k.assign(room, r);
    });
    let bin_start = k.mad_lo(o.expert, params.capacity, o.routed);
    let run_start = k.add(lanes.run_base, o.first);
    k.for_range(lanes.lane, room, 32u32, |k, j| {
        let entry = k.add(run_start, j);
        let at = k.shared_elem(books.runs, entry);
        let pair = k.ld_shared::<U32>(at, 0);
        let token = k.div_int(pair, shape.top_k);
        let index = k.add(bin_start, j);
        let addr = k.elem_addr(params.token_ids, index);
        k.st_global(addr, 0, token);
    });
}

/// `counts[x] = min(routed[x], C)` and `routed[x]` for the group's experts (thread `j` for
/// expert `32·b + j`, one coalesced store each), then `u32::MAX` in their bins' empty slots
/// `s ≥ routed[x]`, the group's `[E_b·C]` slots in one coalesced loop (expert `j = i / C`).
fn finish_bins(
    k: &mut KernelBuilder,
    params: &PermuteParams,
    books: &Books,
    experts: u32,
    lanes: &Lanes,
) {
    k.comment("bin totals and empty slots");
    let group = experts.min(EXPERTS_PER_BLOCK);
    let expert = k.add(lanes.group_base, lanes.tid);
    let in_group = k.setp_lt(lanes.tid, group);
    let exists = k.setp_lt(expert, experts);
    let expert_thread = k.and_pred(in_group, exists);
    k.if_then(expert_thread, |k| {
        let at = k.shared_elem(books.routed, lanes.tid);
        let routed = k.ld_shared::<U32>(at, 0);
        let kept = k.min(routed, params.capacity);
        let addr = k.elem_addr(params.counts, expert);
        k.st_global(addr, 0, kept);
        let addr = k.elem_addr(params.routed, expert);
        k.st_global(addr, 0, routed);
    });
    let group_end = k.add(lanes.group_base, group);
    let end = k.min(group_end, experts);
    let group_experts = k.sub(end, lanes.group_base);
    let group_slots = k.mul_lo(group_experts, params.capacity);
    let first_slot = k.mul_lo(lanes.group_base, params.capacity);
    let bins = k.offset_ptr(params.token_ids, first_slot);
    k.comment("the group's bins as one run of slots: thread i on slot i, 256 apart");
    k.for_range(lanes.tid, group_slots, PERMUTE_BLOCK, |k, i| {
        let j = k.div_int(i, params.capacity);
        let slot = k.rem(i, params.capacity);
        let at = k.shared_elem(books.routed, j);
        let routed = k.ld_shared::<U32>(at, 0);
        let empty = k.setp_ge(slot, routed);
        k.if_then(empty, |k| {
            let addr = k.elem_addr(bins, i);
            k.st_global(addr, 0, DROPPED);
        });
    });
}
