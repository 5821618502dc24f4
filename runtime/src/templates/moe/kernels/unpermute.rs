//! `moe_unpermute`: `out[t, j] = Σ_k weights[t, k] · Y[offsets[e] + slot_of[t, k], j]` with
//! `e = indices[t, k]`
//! over the pairs that were kept, in ascending `k` (a fixed order: deterministic), accumulated
//! in the compute type. `O(K)` per element, no scan; dropped pairs (`slot_of = u32::MAX`) and
//! pairs routed to a non-expert contribute nothing, so a token whose pairs were all dropped gets
//! a zero row.
//!
//! Grid `ceil(T / TB)` × [`UNPERMUTE_BLOCK`] threads, `TB =`
//! [`unpermute_tokens_per_block`]`(K)` tokens per block, in two phases:
//!
//! 1. **Routing**, once per block: thread `p < TB·K` reads pair `p` of the block's contiguous
//!    run of `indices`, `slot_of` and `weights` (consecutive threads on consecutive words:
//!    coalesced) and gathers its bin's start `offsets[e]`; it leaves the pair's `Y` row
//!    (`u32::MAX` when it contributes nothing) and its weight in the compute type in shared
//!    memory, `k`-major (`[K][TB]`, so the lanes of a warp reading one `k` for neighbouring
//!    tokens hit neighbouring banks). One barrier, reached by every thread.
//! 2. **Combine**: each row of `N` elements is cut into `N / v` vectors of `v =`
//!    `vector_elems(N)` elements (up to 16 bytes, aligned); consecutive threads take
//!    consecutive vectors of a row, then of the next row (`256 / (N / v)` rows per pass), so a
//!    warp reads whole `Y` rows with 16-byte loads and writes whole `out` rows with 16-byte
//!    stores. The routing comes from shared memory as broadcasts (the `K` choices unrolled
//!    up to [`UNROLLED_CHOICES`], so their shared offsets are immediates).

use crate::builder::{GlobalPtr, KernelBuilder, Reg, SharedArr, U32};

use super::common::{constant, ld_vector_nc, narrow, st_vector, vector_elems, widen, MoeElem};
use super::MoeShape;

/// Threads per unpermute block.
pub const UNPERMUTE_BLOCK: u32 = 256;
/// The most tokens an unpermute block combines.
const MAX_TOKENS_PER_BLOCK: u32 = 16;
/// A pair that contributes no row.
const NO_ROW: u32 = u32::MAX;

/// Tokens one unpermute block combines for top-`k` routing: 16, fewer when `16·k` pairs would
/// not fit one pass of the block's threads (`max(1, 256 / k)`).
pub const fn unpermute_tokens_per_block(top_k: u32) -> u32 {
    let fit = UNPERMUTE_BLOCK / top_k;
    if fit == 0 {
        1
    } else if fit < MAX_TOKENS_PER_BLOCK {
        fit
    } else {
        MAX_TOKENS_PER_BLOCK
    }
}

/// Builds the unpermute entry: params `y [rows, N]`, `indices [T, K]`, `weights [T, K]`,
/// `slot_of [T, K]`, `offsets [E]`, `out [T, N]`, `capacity`, `tokens`; `N = out_width`.
pub(crate) fn build<T: MoeElem>(shape: &MoeShape, k: &mut KernelBuilder) {
    k.require_block([UNPERMUTE_BLOCK, 1, 1]);
    let y = k.param_ptr::<T>("y");
    let indices = k.param_ptr::<U32>("indices");
    let weights = k.param_ptr::<T>("weights");
    let slot_of = k.param_ptr::<U32>("slot_of");
    let offsets = k.param_ptr::<U32>("offsets");
    let out = k.param_ptr::<T>("out");
    let capacity = k.param::<U32>("capacity");
    let tokens = k.param::<U32>("tokens");
    let (y, indices, weights, slot_of, offsets, out) = (
        k.global_ptr(y),
        k.global_ptr(indices),
        k.global_ptr(weights),
        k.global_ptr(slot_of),
        k.global_ptr(offsets),
        k.global_ptr(out),
    );
    let capacity = k.load_param(capacity);
    let tokens = k.load_param(tokens);
    let per_block = unpermute_tokens_per_block(shape.top_k);
    let stage = RoutingStage::<T> {
        rows: k.shared_array::<U32>("pair_rows", per_block * shape.top_k),
        weights: k.shared_array::<T::Acc>("pair_weights", per_block * shape.top_k),
        per_block,
    };
    let tid = k.tid_x();
    let block = k.ctaid_x();
    let first_token = k.mul_lo(block, per_block);
    let left = k.sub(tokens, first_token);
    let block_tokens = k.min(left, per_block);
    k.comment("stage the block's routing: each pair's Y row and weight");
    let block_pairs = k.mul_lo(block_tokens, shape.top_k);
    let first_pair = k.mul_lo(first_token, shape.top_k);
    k.for_range(tid, block_pairs, UNPERMUTE_BLOCK, |k, p| {
        let pair = k.add(first_pair, p);
        let slot_addr = k.elem_addr(slot_of, pair);
        let slot = k.ld_global_nc::<U32>(slot_addr, 0);
        let expert_addr = k.elem_addr(indices, pair);
        let expert = k.ld_global_nc::<U32>(expert_addr, 0);
        let weight_addr = k.elem_addr(weights, pair);
        let w_raw = k.ld_global_nc::<T>(weight_addr, 0);
        let w = widen(k, w_raw);
        let row = k.var::<U32>(NO_ROW);
        let kept = k.setp_lt(slot, capacity);
        let is_expert = k.setp_lt(expert, shape.experts);
        let contributes = k.and_pred(kept, is_expert);
        k.if_then(contributes, |k| {
            let offset_addr = k.elem_addr(offsets, expert);
            let bin_start = k.ld_global_nc::<U32>(offset_addr, 0);
            k.add_into(row, bin_start, slot);
        });
        let local_token = k.div_int(p, shape.top_k);
        let choice = k.rem(p, shape.top_k);
        let at = k.mad_lo(choice, per_block, local_token);
        let rows_at = k.shared_elem(stage.rows, at);
        k.st_shared(rows_at, 0, row);
        let weights_at = k.shared_elem(stage.weights, at);
        k.st_shared(weights_at, 0, w);
    });
    k.bar_sync();
    combine::<T>(shape, k, &stage, [y, out], first_token, block_tokens, tid);
}

/// The block's staged routing, `k`-major: pair `(token t, choice c)` at `c·TB + t`.
struct RoutingStage<T: MoeElem> {
    rows: SharedArr<U32>,
    weights: SharedArr<T::Acc>,
    per_block: u32,
}

/// The most choices the combine unrolls (their shared offsets become immediates); larger
/// `top_k` loops.
const UNROLLED_CHOICES: u32 = 8;

/// Bytes of a compute-type value.
fn acc_bytes<T: MoeElem>() -> u32 {
    <T::Acc as crate::builder::Scalar>::TYPE.bytes()
}

/// One output vector being accumulated: `acc[i]` for `out[t, col + i]`.
struct OutputVector<T: MoeElem> {
    y: GlobalPtr<T>,
    width: u32,
    col: Reg<U32>,
    acc: Vec<Reg<T::Acc>>,
}

impl<T: MoeElem> OutputVector<T> {
    /// `acc += w · Y[row, col..col + v]` for the staged pair `skip` entries after
    /// `[rows_at, weights_at]` (nothing when it contributes no row).
    fn add_choice(&self, k: &mut KernelBuilder, [rows_at, weights_at]: [Reg<U32>; 2], skip: u32) {
        let row = k.ld_shared::<U32>(rows_at, (skip * 4) as i32);
        let contributes = k.setp_lt(row, NO_ROW);
        k.if_then(contributes, |k| {
            let w = k.ld_shared::<T::Acc>(weights_at, (skip * acc_bytes::<T>()) as i32);
            let index = k.mad_lo(row, self.width, self.col);
            let y_addr = k.elem_addr(self.y, index);
            let elems = self.acc.len() as u32;
            for (&a, raw) in self.acc.iter().zip(ld_vector_nc::<T>(k, y_addr, elems)) {
                let v = widen(k, raw);
                k.fma_into(a, w, v, a);
            }
        });
    }
}

/// `out[t, col..col + v] = Σ_k w_k · Y[row_k, col..col + v]` for the block's tokens, a vector
/// per thread and pass (see the module docs for the mapping).
fn combine<T: MoeElem>(
    shape: &MoeShape,
    k: &mut KernelBuilder,
    stage: &RoutingStage<T>,
    [y, out]: [GlobalPtr<T>; 2],
    first_token: Reg<U32>,
    block_tokens: Reg<U32>,
    tid: Reg<U32>,
) {
    k.comment("combine: a vector of a row per thread, rows in order");
    let width = shape.out_width;
    let elems = vector_elems::<T>(width);
    let vectors = width / elems;
    let rows_per_pass = (UNPERMUTE_BLOCK / vectors).max(1);
    let first_row = k.div_int(tid, vectors);
    let first_vector = k.rem(tid, vectors);
    let busy = k.setp_lt(first_row, rows_per_pass);
    k.if_then(busy, |k| {
        k.for_range(first_row, block_tokens, rows_per_pass, |k, local_token| {
            let token = k.add(first_token, local_token);
            let out_row = k.mul_lo(token, width);
            let rows_at = k.shared_elem(stage.rows, local_token);
            let weights_at = k.shared_elem(stage.weights, local_token);
            k.for_range(first_vector, vectors, UNPERMUTE_BLOCK, |k, vector| {
                let col = k.mul_lo(vector, elems);
                let acc: Vec<Reg<T::Acc>> =
                    (0..elems).map(|_| constant::<T::Acc>(k, 0.0)).collect();
                let vector = OutputVector { y, width, col, acc };
                if shape.top_k <= UNROLLED_CHOICES {
                    for choice in 0..shape.top_k {
                        let skip = choice * stage.per_block;
                        vector.add_choice(k, [rows_at, weights_at], skip);
                    }
                } else {
                    k.for_range(0u32, shape.top_k, 1u32, |k, choice| {
                        let skip = k.mul_lo(choice, stage.per_block);
                        let rows_at = k.mad_lo(skip, 4u32, rows_at);
                        let weights_at = k.mad_lo(skip, acc_bytes::<T>(), weights_at);
                        vector.add_choice(k, [rows_at, weights_at], 0);
                    });
                }
                let acc = vector.acc;
                let stored: Vec<Reg<T>> = acc.iter().map(|&a| narrow::<T>(k, a)).collect();
                let index = k.add(out_row, col);
                let addr = k.elem_addr(out, index);
                st_vector(k, addr, &stored);
            });
        });
    });
}
