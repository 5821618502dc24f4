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
//! One block of [`SCHEDULE_BLOCK`] threads; thread 0 walks the `E` counts in order (`E ≤ 1024`
//! and the tile count is `≤ T·K / TILE_M + E`: a few microseconds of serial work, which keeps the
//! order fixed and the kernel trivially deterministic).

use crate::builder::{KernelBuilder, U32};
use crate::ir::CmpOp;

use super::gemm::TILE_M;
use super::MoeShape;

/// Threads of the schedule block (one warp; only lane 0 works).
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
    let tid = k.tid_x();
    let first = k.setp(CmpOp::Eq, tid, 0u32);
    k.if_then(first, |k| {
        let next_row = k.var::<U32>(0u32);
        let items = k.var::<U32>(0u32);
        k.comment("bin offsets and row tiles, experts in order");
        k.for_range(0u32, shape.experts, 1u32, |k, expert| {
            let count_addr = k.elem_addr(counts, expert);
            let count = k.ld_global::<U32>(count_addr, 0);
            let strided = k.mul_lo(expert, capacity);
            let offset = k.selp(next_row, strided, packed);
            let offset_addr = k.elem_addr(offsets, expert);
            k.st_global(offset_addr, 0, offset);
            k.add_into(next_row, next_row, count);
            k.for_range(0u32, count, TILE_M, |k, m0| {
                let slot = k.mad_lo(items, 2u32, 1u32);
                let addr = k.elem_addr(work_items, slot);
                k.st_global(addr, 0, expert);
                k.st_global(addr, 4, m0);
                k.add_into(items, items, 1u32);
            });
        });
        k.st_global(work_items.addr, 0, items);
    });
}
