//! `moe_schedule`: turns the per-expert counts written by permute into the expert GEMMs' work:
//! where each bin's rows start in the permuted outputs, and the list of `(expert, first slot)`
//! row tiles the grouped GEMM blocks walk.
//!
//! - `offsets[e]`: first permuted row of bin `e`. Dropless (`packed = 1`): the exclusive prefix
//!   sum of the counts, so bins are packed back to back and the outputs hold exactly the `T·K`
//!   routed rows. Capacity-limited (`packed = 0`): `e·C`, the Switch/GShard layout.
//! - `work_items[0]` = number of tiles `n`; item `i` is `work_items[1 + 2i] = e`,
//!   `work_items[2 + 2i] = m0`, one per [`TILE_M`](super::TILE_M)-row tile of a non-empty bin,
//!   experts ascending. The GEMM grid is sized for [`max_work_items`]; blocks past `n` exit, so
//!   empty bins and unused capacity cost a block that reads one word.
//!
//! One warp ([`SCHEDULE_BLOCK`] threads) walks the experts 32 at a time, lane `l` taking expert
//! `g + l`: the counts are read coalesced, an inclusive shuffle scan over the lanes gives each
//! expert's first row (dropless) and first work item, the offsets are stored coalesced, and each
//! lane then writes its expert's items; the group's totals carry to the next group. The order is
//! fixed (experts ascending, tiles ascending within a bin), so the list is deterministic.
//!
//! The items interleave `e` and `m0` at odd word offsets (`1 + 2i`), so a lane's pair is two
//! 4-byte stores, 8 bytes apart across lanes, and `work_items[0]` is a store of its own: the
//! list's stores use about a third of the sectors they touch (a layout with 8-byte aligned
//! pairs would change the buffer's documented length).

use crate::builder::{KernelBuilder, U32};
use crate::ir::CmpOp;

use super::common::warp_inclusive_sum;

use super::gemm::TILE_M;
use super::MoeShape;

/// Threads of the schedule block (one warp).
pub const SCHEDULE_BLOCK: u32 = 32;

/// Upper bound on the work items for `experts` bins of at most `capacity` rows holding at most
/// `kept` rows in total: `Σ ceil(count_e / TILE_M) ≤ min(E · ceil(C / TILE_M),
/// (kept + (TILE_M − 1) · E) / TILE_M)`.
pub fn max_work_items(experts: u32, capacity: u32, kept: u32) -> u32 {
    let per_bin = u64::from(capacity.div_ceil(TILE_M)) * u64::from(experts);
    let by_rows =
        (u64::from(kept) + u64::from(TILE_M - 1) * u64::from(experts)) / u64::from(TILE_M);
    u32::try_from(per_bin.min(by_rows)).unwrap_or(u32::MAX)
}

/// Builds the schedule entry: params `counts [E]`, `offsets [E]`, `work_items [1 + 2·n_max]`,
/// `capacity`, `packed`.
pub(crate) fn build(shape: &MoeShape, k: &mut KernelBuilder) {
    k.require_block([SCHEDULE_BLOCK, 1, 1]);
    let counts = k.param_ptr::<U32>("counts");
    let offsets = k.param_ptr::<U32>("offsets");
    let work_items = k.param_ptr::<U32>("work_items");
    let capacity = k.param::<U32>("capacity");
    let packed = k.param::<U32>("packed");
    let (counts, offsets, work_items) = (
        k.global_ptr(counts),
        k.global_ptr(offsets),
        k.global_ptr(work_items),
    );
    let capacity = k.load_param(capacity);
    let packed = k.load_param(packed);
    let packed = k.setp(CmpOp::Ne, packed, 0u32);
    let lane = k.tid_x();
    let rows_before = k.var::<U32>(0u32);
    let items_before = k.var::<U32>(0u32);
    k.comment("bin offsets and row tiles, 32 experts per step, experts in order");
    k.for_range(0u32, shape.experts, SCHEDULE_BLOCK, |k, group| {
        let expert = k.add(group, lane);
        let valid = k.setp_lt(expert, shape.experts);
        let count = k.var::<U32>(0u32);
        k.if_then(valid, |k| {
            let addr = k.elem_addr(counts, expert);
            let c = k.ld_global::<U32>(addr, 0);
            k.assign(count, c);
        });
        let rounded = k.add(count, TILE_M - 1);
        let tiles = k.div_int(rounded, TILE_M);
        let rows_through = warp_inclusive_sum(k, lane, count);
        let items_through = warp_inclusive_sum(k, lane, tiles);
        k.if_then(valid, |k| {
            let rows_ahead = k.sub(rows_through, count);
            let packed_offset = k.add(rows_before, rows_ahead);
            let strided = k.mul_lo(expert, capacity);
            let offset = k.selp(packed_offset, strided, packed);
            let addr = k.elem_addr(offsets, expert);
            k.st_global(addr, 0, offset);
            let items_ahead = k.sub(items_through, tiles);
            let first_item = k.add(items_before, items_ahead);
            let first_word = k.mad_lo(first_item, 2u32, 1u32);
            let item_addr = k.elem_addr(work_items, first_word);
            k.for_range(0u32, count, TILE_M, |k, m0| {
                k.st_global(item_addr, 0, expert);
                k.st_global(item_addr, 4, m0);
                k.add_into(item_addr, item_addr, 8u64);
            });
        });
        let group_rows = k.shfl_idx(rows_through, 31u32);
        k.add_into(rows_before, rows_before, group_rows);
        let group_items = k.shfl_idx(items_through, 31u32);
        k.add_into(items_before, items_before, group_items);
    });
    let first = k.setp(CmpOp::Eq, lane, 0u32);
    k.if_then(first, |k| {
        k.st_global(work_items.addr, 0, items_before);
    });
}
