//! `moe_gating` with one thread per token, for `E <` [`GATING_WARP_MIN_EXPERTS`] experts.
//!
//! Block `b` handles tokens `[b·B, b·B + B)` (`B =` [`GATING_BLOCK`]), whose logits are one
//! contiguous run of `rows · E` elements: the block reads it with consecutive threads on
//! consecutive elements (coalesced) into a shared stage `[B][E]` in the compute type. One
//! barrier, reached by every thread; only then do threads past `T` sit out. Each thread then
//! holds its row of `E` logits in registers and runs the same selection as the warp mapping,
//! unrolled: `K` rounds, round `r` picks the best `(logit, expert)` strictly after round
//! `r − 1`'s pick in the order "larger logit first, then lower index" (scanning experts from
//! `E − 1` down and taking on `≥` keeps ties on the lower index; NaN never compares `≥`, so it
//! is never picked). Each thread writes its token's `K` indices and `K` weights with one vector
//! store each where `K` elements make an aligned vector (`K ∈ {2, 4}`, and 8 for 16-bit
//! weights), so a warp's stores cover whole sectors.
//!
//! The stage is swizzled so that both of its accesses are free of bank conflicts for every
//! `E`. A shared-memory phase serves `P` stage elements (`P = 32` for 4-byte compute values,
//! 16 for f64: a half-warp, 2 banks each). With `2^a` the largest power of two dividing `E`
//! and `f(r) = (r >> (log2 P − a)) mod 2^a`, logit `(r, c)` sits at element `r·E + (c ⊕ f(r))`.
//! The row reads (lane `r` of a phase reads `(r, c)`) hit `rE mod P`, a multiple of `2^a`
//! taking each value for `2^a` rows of the phase that `f(r)` tells apart in the low `a` bits;
//! the staging writes stay inside aligned `2^a`-element groups (`r·E` is a multiple of `2^a`),
//! so a phase's `P` consecutive elements land on the `P` elements of its own aligned window.
//! Odd `E` has `a = 0`: no swizzle.

use crate::builder::{GlobalPtr, KernelBuilder, Pred, Reg, SharedArr, U32};
use crate::ir::{CmpOp, Precision, Rounding};

use super::super::common::{constant, exp, narrow, st_row, widen, MoeElem};
use super::super::MoeShape;
use super::{Candidate, GATING_BLOCK, GATING_WARP_MIN_EXPERTS, NONE};

/// `2^a − 1` for the largest power of two `2^a` dividing `E` (`E < 32`): the column bits the
/// stage's swizzle flips.
const fn swizzle_mask(experts: u32) -> u32 {
    (experts & experts.wrapping_neg()) - 1
}

/// `log2 P`: a shared-memory phase serves `P = 128 / bytes` stage elements of compute type `A`.
fn phase_bits<A: crate::builder::Scalar>() -> u32 {
    (128 / A::TYPE.bytes()).trailing_zeros()
}

/// The stage's swizzle of row `row`: `f(r) = (r >> (log2 P − a)) mod 2^a` (module docs).
fn swizzle<A: crate::builder::Scalar>(
    k: &mut KernelBuilder,
    experts: u32,
    row: Reg<U32>,
) -> Reg<U32> {
    let mask = swizzle_mask(experts);
    let shifted = k.shr(row, phase_bits::<A>() - mask.count_ones());
    k.and(shifted, mask)
}

/// Builds the thread-per-token gating entry (same parameters as the warp mapping).
pub(super) fn build<T: MoeElem>(shape: &MoeShape, k: &mut KernelBuilder) {
    debug_assert!(shape.experts < GATING_WARP_MIN_EXPERTS);
    k.require_block([GATING_BLOCK, 1, 1]);
    let logits = k.param_ptr::<T>("logits");
    let indices = k.param_ptr::<U32>("indices");
    let weights = k.param_ptr::<T>("weights");
    let tokens = k.param::<U32>("tokens");
    let (logits, indices, weights) = (
        k.global_ptr(logits),
        k.global_ptr(indices),
        k.global_ptr(weights),
    );
    let tokens = k.load_param(tokens);
    let stage = k.shared_array::<T::Acc>("logit_stage", GATING_BLOCK * shape.experts);
    let tid = k.tid_x();
    let block = k.ctaid_x();
    let first_token = k.mul_lo(block, GATING_BLOCK);
    stage_logits::<T>(shape, k, logits, tokens, first_token, tid, stage);
    k.bar_sync();
    let token = k.add(first_token, tid);
    let active = k.setp_lt(token, tokens);
    k.if_then(active, |k| {
        let row = load_row::<T>(shape, k, stage, tid);
        let picks = select_top_k::<T>(shape, k, &row);
        let max = picks[0].value;
        let probs: Vec<Reg<T::Acc>> = picks
            .iter()
            .map(|pick| {
                let shifted = k.sub(pick.value, max);
                exp(k, shifted)
            })
            .collect();
        let denominator = if shape.normalize_topk {
            sum(k, &probs)
        } else {
            let all: Vec<Reg<T::Acc>> = row
                .iter()
                .map(|&v| {
                    let shifted = k.sub(v, max);
                    exp(k, shifted)
                })
                .collect();
            sum(k, &all)
        };
        let pair_row = k.mul_lo(token, shape.top_k);
        let indices = k.elem_addr(indices, pair_row);
        let weights = k.elem_addr(weights, pair_row);
        write_routing::<T>(k, [indices, weights], &picks, &probs, denominator);
    });
}

/// Coalesced staging: element `i < rows · E` of the block's logit run, logit `(r, c) = (i / E,
/// i mod E)`, goes to stage word `i ⊕ f(r)` (= `r·E + (c ⊕ f(r))`, as `r·E` is a multiple of
/// the swizzle's span); thread `tid` takes `i = tid + B·j`, `j < E`.
fn stage_logits<T: MoeElem>(
    shape: &MoeShape,
    k: &mut KernelBuilder,
    logits: GlobalPtr<T>,
    tokens: Reg<U32>,
    first_token: Reg<U32>,
    tid: Reg<U32>,
    stage: SharedArr<T::Acc>,
) {
    k.comment("stage the block's logits (coalesced) into shared memory, swizzled");
    let e = shape.experts;
    let left = k.sub(tokens, first_token);
    let rows = k.min(left, GATING_BLOCK);
    let count = k.mul_lo(rows, e);
    let run_start = k.mul_lo(first_token, e);
    let run = k.offset_ptr(logits, run_start);
    let base = k.shared_base(stage);
    let acc_bytes = <T::Acc as crate::builder::Scalar>::TYPE.bytes();
    for j in 0..e {
        let i = k.add(tid, GATING_BLOCK * j);
        let inside = k.setp_lt(i, count);
        k.if_then(inside, |k| {
            let addr = k.elem_addr(run, i);
            let raw = k.ld_global_nc::<T>(addr, 0);
            let v = widen(k, raw);
            let word = if swizzle_mask(e) == 0 {
                i
            } else {
                // `E = 2^a`: `f(i / E) = (i >> log2 P) mod 2^a`, one shift.
                let flip = if e.is_power_of_two() {
                    let window = k.shr(i, phase_bits::<T::Acc>());
                    k.and(window, swizzle_mask(e))
                } else {
                    let row = k.div_int(i, e);
                    swizzle::<T::Acc>(k, e, row)
                };
                k.xor(i, flip)
            };
            let at = k.mad_lo(word, acc_bytes, base);
            k.st_shared(at, 0, v);
        });
    }
}

/// The thread's row `l_0 … l_{E−1}` from the stage, in registers: `l_c` at word
/// `tid·E + (c ⊕ f(tid))`, addressed from one base per value of the low `a` bits of `c`.
fn load_row<T: MoeElem>(
    shape: &MoeShape,
    k: &mut KernelBuilder,
    stage: SharedArr<T::Acc>,
    tid: Reg<U32>,
) -> Vec<Reg<T::Acc>> {
    let e = shape.experts;
    let acc_bytes = <T::Acc as crate::builder::Scalar>::TYPE.bytes();
    let base = k.shared_base(stage);
    let row_at = k.mad_lo(tid, e * acc_bytes, base);
    let mask = swizzle_mask(e);
    let low_bases: Vec<Reg<U32>> = if mask == 0 {
        vec![row_at]
    } else {
        let flip = swizzle::<T::Acc>(k, e, tid);
        (0..=mask)
            .map(|low| {
                let column = k.xor(flip, low);
                k.mad_lo(column, acc_bytes, row_at)
            })
            .collect()
    };
    (0..e)
        .map(|c| {
            let at = low_bases[(c & mask) as usize];
            k.ld_shared::<T::Acc>(at, ((c & !mask) * acc_bytes) as i32)
        })
        .collect()
}

/// `K` rounds over the row; round `r` returns the best candidate after round `r − 1`'s pick
/// (expert [`NONE`] and value `−∞` when nothing qualifies, which only NaN logits cause).
fn select_top_k<T: MoeElem>(
    shape: &MoeShape,
    k: &mut KernelBuilder,
    row: &[Reg<T::Acc>],
) -> Vec<Candidate<T::Acc>> {
    k.comment("top-k selection: K unrolled rounds over the row in registers");
    let none_value = constant::<T::Acc>(k, f64::NEG_INFINITY);
    let none_expert = k.var::<U32>(NONE);
    let mut picks: Vec<Candidate<T::Acc>> = Vec::with_capacity(shape.top_k as usize);
    for _ in 0..shape.top_k {
        let prev = picks.last().copied();
        let mut best = Candidate {
            value: none_value,
            expert: none_expert,
        };
        for e in (0..shape.experts).rev() {
            let v = row[e as usize];
            let improves = k.setp(CmpOp::Ge, v, best.value);
            let take = match prev {
                None => improves,
                Some(prev) => {
                    let eligible = after(k, v, e, prev);
                    k.and_pred(eligible, improves)
                }
            };
            best = Candidate {
                value: k.selp(v, best.value, take),
                expert: k.selp(e, best.expert, take),
            };
        }
        picks.push(best);
    }
    picks
}

/// `(v, e)` comes strictly after `prev`: `v < prev.v ∨ (v = prev.v ∧ e > prev.e)`.
fn after<A: crate::builder::Float>(
    k: &mut KernelBuilder,
    v: Reg<A>,
    e: u32,
    prev: Candidate<A>,
) -> Pred {
    let smaller = k.setp(CmpOp::Lt, v, prev.value);
    let equal = k.setp(CmpOp::Eq, v, prev.value);
    let later = k.setp(CmpOp::Lt, prev.expert, e);
    let tie_after = k.and_pred(equal, later);
    k.or_pred(smaller, tie_after)
}

/// `Σ xs` left to right (`xs` non-empty).
fn sum<A: crate::builder::Float>(k: &mut KernelBuilder, xs: &[Reg<A>]) -> Reg<A> {
    xs[1..].iter().fold(xs[0], |acc, &x| k.add(acc, x))
}

/// `indices[t, r] = e_r`, `weights[t, r] = p_r / denominator` (0 when no expert was picked),
/// each row of `K` with one vector store where it makes one ([`st_row`]).
fn write_routing<T: MoeElem>(
    k: &mut KernelBuilder,
    [indices, weights]: [Reg<crate::builder::U64>; 2],
    picks: &[Candidate<T::Acc>],
    probs: &[Reg<T::Acc>],
    denominator: Reg<T::Acc>,
) {
    k.comment("routing");
    let zero = constant::<T::Acc>(k, 0.0);
    let experts: Vec<Reg<U32>> = picks.iter().map(|pick| pick.expert).collect();
    st_row(k, indices, &experts);
    let stored: Vec<Reg<T>> = picks
        .iter()
        .zip(probs)
        .map(|(pick, &p)| {
            let valid = k.setp(CmpOp::Ne, pick.expert, NONE);
            let w = k.div(p, denominator, Precision::Rounded(Rounding::Rn));
            let w = k.selp(w, zero, valid);
            narrow::<T>(k, w)
        })
        .collect();
    st_row(k, weights, &stored);
}
