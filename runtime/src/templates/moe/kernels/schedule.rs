//! `moe_schedule`: turns the per-expert counts written by permute into the expert GEMMs' work:
//! where each bin's rows start in the permuted outputs, and the list of `(expert, first slot)`
//! row tiles the grouped GEMM blocks walk.
//!
//! - `offsets[e]`: first permuted row of bin `e`. Dropless (`packed = 1`): the exclusive prefix
//!   sum of the counts, so bins are packed back to back and the outputs hold exactly the `T·K`
//!   routed rows. Capacity-limited (`packed = 0`): `e·C`, the Switch/GShard layout.
//! - `work_items [n_max][2]`: item `i` is `(e, m0)` at words `2i, 2i + 1` (one 8-byte
//!   vector), one per row tile of a non-empty bin ([`item_rows`](super::item_rows) rows: 128
//!   when the tensor-core entries take the 128-row tiles, else 64), experts ascending;
//!   the `n_max − n` items after the `n` real ones are [`NO_ITEM`] `(u32::MAX, 0)`. The GEMM
//!   grid is `n_max` ([`max_work_items`]) blocks wide; block `i` reads item `i` and exits on
//!   [`NO_ITEM`], so empty bins and unused capacity cost a block that reads one vector.
//!
//! One warp ([`SCHEDULE_BLOCK`] threads) walks the experts 32 at a time, lane `l` taking expert
//! `g + l`: the counts are read coalesced, an inclusive shuffle scan over the lanes gives each
//! expert's first row (dropless) and first work item, and the offsets are stored coalesced.
//! The group's items are then written by consecutive lanes on consecutive items: lane `j`
//! finds the expert of the group's item `j` by a binary search of the scan (5 shuffles), so
//! each store request is one run of whole 8-byte items (the last group's run goes on to
//! `n_max` with [`NO_ITEM`]); the group's totals carry to the next group. The order is fixed
//! (experts ascending, tiles ascending within a bin), so the list is deterministic.

use crate::builder::{GlobalPtr, KernelBuilder, Pred, Reg, U32};
use crate::ir::CmpOp;

use super::common::warp_inclusive_sum;

use super::MoeShape;

/// Threads of the schedule block (one warp).
pub const SCHEDULE_BLOCK: u32 = 32;

/// Upper bound on the work items of `rows` rows each for `experts` bins of at most `capacity`
/// rows holding at most `kept` rows in total: `Σ ceil(count_e / rows) ≤ min(E · ceil(C /
/// rows), (kept + (rows − 1) · E) / rows)`.
pub fn max_work_items(experts: u32, capacity: u32, kept: u32, rows: u32) -> u32 {
    let per_bin = u64::from(capacity.div_ceil(rows)) * u64::from(experts);
    let by_rows = (u64::from(kept) + u64::from(rows - 1) * u64::from(experts)) / u64::from(rows);
    u32::try_from(per_bin.min(by_rows)).unwrap_or(u32::MAX)
}

/// The filler item after the real ones: no expert.
pub const NO_ITEM: u32 = u32::MAX;

/// Builds the schedule entry: params `counts [E]`, `offsets [E]`, `work_items [2·n_max]`,
/// `capacity`, `packed`, `n_max`.
pub(crate) fn build(shape: &MoeShape, k: &mut KernelBuilder) {
    k.require_block([SCHEDULE_BLOCK, 1, 1]);
    let counts = k.param_ptr::<U32>("counts");
    let offsets = k.param_ptr::<U32>("offsets");
    let work_items = k.param_ptr::<U32>("work_items");
    let capacity = k.param::<U32>("capacity");
    let packed = k.param::<U32>("packed");
    let max_items = k.param::<U32>("max_items");
    let (counts, offsets, work_items) = (
        k.global_ptr(counts),
        k.global_ptr(offsets),
        k.global_ptr(work_items),
    );
    let capacity = k.load_param(capacity);
    let packed = k.load_param(packed);
    let packed = k.setp(CmpOp::Ne, packed, 0u32);
    let max_items = k.load_param(max_items);
    let lane = k.tid_x();
    let item_rows = shape.item_rows;
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
        let rounded = k.add(count, item_rows - 1);
        let tiles = k.div_int(rounded, item_rows);
        let rows_through = warp_inclusive_sum(k, lane, count);
        let items_through = warp_inclusive_sum(k, lane, tiles);
        k.if_then(valid, |k| {
            let rows_ahead = k.sub(rows_through, count);
            let packed_offset = k.add(rows_before, rows_ahead);
            let strided = k.mul_lo(expert, capacity);
            let offset = k.selp(packed_offset, strided, packed);
            let addr = k.elem_addr(offsets, expert);
            k.st_global(addr, 0, offset);
        });
        let group_items = k.shfl_idx(items_through, 31u32);
        let next_group = k.add(group, SCHEDULE_BLOCK);
        let last = k.setp_ge(next_group, shape.experts);
        let share = GroupItems {
            first: items_before,
            items: group_items,
            items_through,
            tiles,
            group,
        };
        write_items(k, &share, work_items, (lane, item_rows), last, max_items);
        let group_rows = k.shfl_idx(rows_through, 31u32);
        k.add_into(rows_before, rows_before, group_rows);
        k.add_into(items_before, items_before, group_items);
    });
}

/// One group of 32 experts' share of the work list.
struct GroupItems {
    /// Items of the groups before.
    first: Reg<U32>,
    /// The group's items.
    items: Reg<U32>,
    /// Lane `l`: items of the group's experts `0..=l` (inclusive scan).
    items_through: Reg<U32>,
    /// Lane `l`: items of expert `group + l`.
    tiles: Reg<U32>,
    /// The group's first expert.
    group: Reg<U32>,
}

/// Items `first + j` of the group, `j = lane, lane + 32, …`: the expert `group + l` whose items
/// hold `j` (`l` = lanes with `items_through ≤ j`, by binary search over the lanes) and
/// `m0 = (j − items ahead of l) · item_rows`, one `st.global.v2` per item. The last group
/// (`last` on its lanes; uniform) goes on to `max_items` with [`NO_ITEM`]. The loop is
/// warp-uniform, so every shuffle sees the whole warp.
fn write_items(
    k: &mut KernelBuilder,
    g: &GroupItems,
    work_items: GlobalPtr<U32>,
    (lane, item_rows): (Reg<U32>, u32),
    last: Pred,
    max_items: Reg<U32>,
) {
    let group_end = k.add(g.first, g.items);
    let end = k.selp(max_items, group_end, last);
    let items_ahead = k.sub(g.items_through, g.tiles);
    k.for_range(g.first, end, SCHEDULE_BLOCK, |k, base| {
        let item = k.add(base, lane);
        let j = k.sub(item, g.first);
        let owner = k.var::<U32>(0u32);
        for step in [16u32, 8, 4, 2, 1] {
            let probe = k.add(owner, step - 1);
            let through = k.shfl_idx(g.items_through, probe);
            let before = k.setp(CmpOp::Le, through, j);
            let further = k.add(owner, step);
            let next = k.selp(further, owner, before);
            k.assign(owner, next);
        }
        let owner = k.min(owner, SCHEDULE_BLOCK - 1);
        let ahead = k.shfl_idx(items_ahead, owner);
        let real = k.setp_lt(j, g.items);
        let e = k.add(g.group, owner);
        let expert = k.selp(e, NO_ITEM, real);
        let tile = k.sub(j, ahead);
        let m0 = k.mul_lo(tile, item_rows);
        let m0 = k.selp(m0, 0u32, real);
        let listed = k.setp_lt(item, end);
        k.if_then(listed, |k| {
            let at = k.mul_lo(item, 2u32);
            let addr = k.elem_addr(work_items, at);
            k.st_global_v2(addr, 0, [expert, m0]);
        });
    });
}
