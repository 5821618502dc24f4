//! `moe_gating` with one thread per token, for `E <` [`GATING_WARP_MIN_EXPERTS`] experts.
//!
//! Block `b` handles tokens `[b·B, b·B + B)` (`B =` [`GATING_BLOCK`]), whose logits are one
//! contiguous run of `rows · E` elements: the block reads it with consecutive threads on
//! consecutive elements (coalesced) into a shared stage `[B][S]` in the compute type, row
//! stride `S = E | 1` (odd, so the row reads below are free of bank conflicts). One barrier,
//! reached by every thread; only then do threads past `T` sit out. Each thread then holds its
//! row of `E` logits in registers and runs the same selection as the warp mapping, unrolled:
//! `K` rounds, round `r` picks the best `(logit, expert)` strictly after round `r − 1`'s pick
//! in the order "larger logit first, then lower index" (scanning experts from `E − 1` down and
//! taking on `≥` keeps ties on the lower index; NaN never compares `≥`, so it is never picked).

use crate::builder::{GlobalPtr, KernelBuilder, Pred, Reg, SharedArr, U32};
use crate::ir::{CmpOp, Precision, Rounding};

use super::super::common::{constant, exp, narrow, widen, MoeElem};
use super::super::MoeShape;
use super::{Candidate, GATING_BLOCK, GATING_WARP_MIN_EXPERTS, NONE};

/// Shared row stride of the stage: `E` rounded up to odd.
const fn row_stride(experts: u32) -> u32 {
    experts | 1
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
    let stage = k.shared_array::<T::Acc>("logit_stage", GATING_BLOCK * row_stride(shape.experts));
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

/// Coalesced staging: element `i < rows · E` of the block's logit run goes to stage slot
/// `(i / E) · S + i mod E`; thread `tid` takes `i = tid + B·j`, `j < E`.
fn stage_logits<T: MoeElem>(
    shape: &MoeShape,
    k: &mut KernelBuilder,
    logits: GlobalPtr<T>,
    tokens: Reg<U32>,
    first_token: Reg<U32>,
    tid: Reg<U32>,
    stage: SharedArr<T::Acc>,
) {
    k.comment("stage the block's logits (coalesced) into shared memory");
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
            // Slot `(i / E)·S + i mod E = i + (i / E)·(S − E)`.
            let slot = if row_stride(e) == e {
                i
            } else {
                let row = if e.is_power_of_two() {
                    k.shr(i, e.trailing_zeros())
                } else {
                    k.div_int(i, e)
                };
                k.add(i, row)
            };
            let at = k.mad_lo(slot, acc_bytes, base);
            k.st_shared(at, 0, v);
        });
    }
}

/// The thread's row `l_0 … l_{E−1}` from the stage, in registers.
fn load_row<T: MoeElem>(
    shape: &MoeShape,
    k: &mut KernelBuilder,
    stage: SharedArr<T::Acc>,
    tid: Reg<U32>,
) -> Vec<Reg<T::Acc>> {
    let acc_bytes = <T::Acc as crate::builder::Scalar>::TYPE.bytes();
    let base = k.shared_base(stage);
    let at = k.mad_lo(tid, row_stride(shape.experts) * acc_bytes, base);
    (0..shape.experts)
        .map(|e| k.ld_shared::<T::Acc>(at, (e * acc_bytes) as i32))
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

/// `indices[t, r] = e_r`, `weights[t, r] = p_r / denominator` (0 when no expert was picked).
fn write_routing<T: MoeElem>(
    k: &mut KernelBuilder,
    [indices, weights]: [Reg<crate::builder::U64>; 2],
    picks: &[Candidate<T::Acc>],
    probs: &[Reg<T::Acc>],
    denominator: Reg<T::Acc>,
) {
    k.comment("routing");
    let zero = constant::<T::Acc>(k, 0.0);
    let elem_bytes = T::TYPE.bytes();
    for (r, (pick, &p)) in (0u32..).zip(picks.iter().zip(probs)) {
        k.st_global(indices, (r * 4) as i32, pick.expert);
        let valid = k.setp(CmpOp::Ne, pick.expert, NONE);
        let w = k.div(p, denominator, Precision::Rounded(Rounding::Rn));
        let w = k.selp(w, zero, valid);
        let stored = narrow::<T>(k, w);
        k.st_global(weights, (r * elem_bytes) as i32, stored);
    }
}
