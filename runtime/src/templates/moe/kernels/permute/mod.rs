//! `moe_permute`: deterministic slot assignment, token-major, matching the host reference: pair
//! `p = t·K + k` routed to expert `e` gets slot `s = #{earlier pairs routed to e}` (no atomics,
//! so the result does not depend on scheduling). Pairs with `s < C` are stored
//! (`token_ids[e·C + s] = t`, `slot_of[p] = s`); the others are dropped (`slot_of[p] =
//! u32::MAX`), and so are pairs whose index is not an expert (`≥ E`, e.g. from NaN logits),
//! which are not counted anywhere. Afterwards `counts[e] = min(routed, C)`, `routed[e]`, and
//! `u32::MAX` in every empty slot, so every element of `token_ids` is written.
//!
//! A block routes a group of up to [`EXPERTS_PER_BLOCK`] (32) experts ([`expert_groups`]), so
//! `E ≤ 32` takes one block, which writes `slot_of` whole and coalesced, and `token_ids` in bin
//! order, each warp ranking the experts it owns by ballots, without a bank conflict. With more
//! experts ([`permute_blocks`]: `⌈E / 32⌉`), each block scans every pair and writes the slots
//! of its group's pairs.

use crate::builder::{GlobalPtr, KernelBuilder, Pred, Reg, U32};

use super::MoeShape;

mod expert_groups;

/// Threads per permute block (pairs scanned per step).
pub const PERMUTE_BLOCK: u32 = 256;
/// Experts per permute block (each of its 8 warps owns up to 4, and thread `j` stores expert
/// `32·b + j`'s totals); a power of two.
pub const EXPERTS_PER_BLOCK: u32 = 32;
const WARPS: u32 = PERMUTE_BLOCK / 32;
const DROPPED: u32 = u32::MAX;

/// The permute entry's parameters, declared in order.
struct PermuteParams {
    indices: GlobalPtr<U32>,
    token_ids: GlobalPtr<U32>,
    counts: GlobalPtr<U32>,
    routed: GlobalPtr<U32>,
    slot_of: GlobalPtr<U32>,
    tokens: Reg<U32>,
    capacity: Reg<U32>,
}

impl PermuteParams {
    /// Declares `indices, token_ids, counts, routed, slot_of, tokens, capacity` and loads them.
    fn declare(k: &mut KernelBuilder) -> Self {
        let indices = k.param_ptr::<U32>("indices");
        let token_ids = k.param_ptr::<U32>("token_ids");
        let counts = k.param_ptr::<U32>("counts");
        let routed = k.param_ptr::<U32>("routed");
        let slot_of = k.param_ptr::<U32>("slot_of");
        let tokens = k.param::<U32>("tokens");
        let capacity = k.param::<U32>("capacity");
        Self {
            indices: k.global_ptr(indices),
            token_ids: k.global_ptr(token_ids),
            counts: k.global_ptr(counts),
            routed: k.global_ptr(routed),
            slot_of: k.global_ptr(slot_of),
            tokens: k.load_param(tokens),
            capacity: k.load_param(capacity),
        }
    }
}

/// Blocks of the permute grid: one per group of [`EXPERTS_PER_BLOCK`] experts.
pub const fn permute_blocks(experts: u32) -> u32 {
    experts.div_ceil(EXPERTS_PER_BLOCK)
}

/// Builds the permute entry: `indices [T, K] → token_ids [E, C], counts [E], routed [E],
/// slot_of [T, K]`.
pub(crate) fn build(shape: &MoeShape, k: &mut KernelBuilder) {
    expert_groups::build(shape, k);
}

/// `(1 << lane) − 1`: the lanes below `lane` in a ballot.
fn lanes_below(k: &mut KernelBuilder, lane: Reg<U32>) -> Reg<U32> {
    let one = k.var::<U32>(1u32);
    let bit = k.shl(one, lane);
    k.sub(bit, 1u32)
}

/// Pair `chunk + tid` of the scan, whether it exists (`< pairs`) and its expert (`indices[p]`,
/// or [`DROPPED`] past the end, which no expert matches).
fn chunk_pair(
    k: &mut KernelBuilder,
    indices: GlobalPtr<U32>,
    chunk: Reg<U32>,
    tid: Reg<U32>,
    pairs: Reg<U32>,
) -> (Reg<U32>, Pred, Reg<U32>) {
    let pair = k.add(chunk, tid);
    let in_range = k.setp_lt(pair, pairs);
    let expert = k.var::<U32>(DROPPED);
    k.if_then(in_range, |k| {
        let addr = k.elem_addr(indices, pair);
        let e = k.ld_global_nc::<U32>(addr, 0);
        k.assign(expert, e);
    });
    (pair, in_range, expert)
}
