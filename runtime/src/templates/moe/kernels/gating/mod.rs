//! `moe_gating`: softmax over the experts, top-k by probability, (re)normalised weights.
//!
//! Two mappings, chosen by the expert count at build time:
//!
//! - `E ≥` [`GATING_WARP_MIN_EXPERTS`] (32): one warp per token, lane `l` owns experts
//!   `l, l + 32, …`. Blocks of [`GATING_WARPS`] warps, grid `ceil(T / GATING_WARPS)`; no
//!   barriers and no shared memory.
//! - `E < 32`: a warp per token would leave `32 − E` lanes idle and pay a warp arg-max per
//!   round, so each thread handles one token instead (see [`thread`]): blocks of
//!   [`GATING_BLOCK`] tokens, grid `ceil(T / GATING_BLOCK)`, the block's logits staged through
//!   shared memory with coalesced loads.
//!
//! The logits are only read, each once: in the warp mapping a lane holds its experts' logits
//! in registers for every selection round and the softmax sum (only the `K` picked logits are
//! read again, by the lanes writing their weights).
//!
//! Selection compares logits (the softmax is strictly increasing, so this is the probability
//! order without rounding collisions) in the total order "larger logit first, then lower
//! index". Round `r` picks the largest pair strictly after round `r − 1`'s pick in that order,
//! so no per-expert "taken" state is needed: `K` rounds of a lane scan plus a warp arg-max.
//! NaN logits are never selected (and make the weights unspecified).

use crate::builder::{GlobalPtr, KernelBuilder, Pred, Reg, U32};
use crate::ir::{CmpOp, Precision, Rounding};

use super::common::{constant, exp, narrow, shfl_xor_acc, shfl_xor_u32, warp_sum, widen, MoeElem};
use super::MoeShape;

mod thread;

/// Warps (tokens) per gating block.
pub const GATING_WARPS: u32 = 4;
/// Threads per gating block.
pub const GATING_BLOCK: u32 = GATING_WARPS * 32;
/// Expert counts from this on get a warp per token; below it a thread per token.
pub const GATING_WARP_MIN_EXPERTS: u32 = 32;

/// Tokens one gating block handles: a warp each from [`GATING_WARP_MIN_EXPERTS`] experts on,
/// a thread each below.
pub const fn gating_tokens_per_block(experts: u32) -> u32 {
    if experts >= GATING_WARP_MIN_EXPERTS {
        GATING_WARPS
    } else {
        GATING_BLOCK
    }
}

/// No expert chosen yet (also the index written when fewer than `K` experts are selectable,
/// which only NaN logits cause).
pub(super) const NONE: u32 = u32::MAX;

/// One token's logits row and where its routing goes.
struct TokenRow<T: MoeElem> {
    logits: GlobalPtr<T>,
    indices: GlobalPtr<U32>,
    weights: GlobalPtr<T>,
    lane: Reg<U32>,
    /// The lane's experts `lane + 32·s` and their logits, read once.
    held: Vec<Candidate<T::Acc>>,
    /// Whether the last slot's expert exists (`None`: every slot does, `E` a multiple of 32).
    last_valid: Option<Pred>,
}

impl<T: MoeElem> TokenRow<T> {
    /// Reads the lane's logits `l_{lane + 32·s}`, `s < ceil(E / 32)`, into registers.
    fn read(
        shape: &MoeShape,
        k: &mut KernelBuilder,
        logits: GlobalPtr<T>,
        lane: Reg<U32>,
    ) -> (Vec<Candidate<T::Acc>>, Option<Pred>) {
        let slots = shape.experts.div_ceil(32);
        let lane_logits = k.offset_ptr(logits, lane);
        let last_valid = (!shape.experts.is_multiple_of(32)).then(|| {
            let last = k.add(lane, 32 * (slots - 1));
            k.setp_lt(last, shape.experts)
        });
        let held = (0..slots)
            .map(|s| {
                let expert = k.add(lane, 32 * s);
                let value = constant::<T::Acc>(k, f64::NEG_INFINITY);
                let offset = (32 * s * T::TYPE.bytes()) as i32;
                let load = |k: &mut KernelBuilder| {
                    let raw = k.ld_global_nc::<T>(lane_logits.addr, offset);
                    let v = widen(k, raw);
                    k.assign(value, v);
                };
                match last_valid {
                    Some(valid) if s == slots - 1 => k.if_then(valid, load),
                    _ => load(k),
                }
                Candidate { value, expert }
            })
            .collect();
        (held, last_valid)
    }

    /// Runs `body` on every held `(logit, expert)` that exists.
    fn for_each_held(
        &self,
        k: &mut KernelBuilder,
        mut body: impl FnMut(&mut KernelBuilder, Candidate<T::Acc>),
    ) {
        let last = self.held.len() - 1;
        for (s, &c) in self.held.iter().enumerate() {
            match self.last_valid {
                Some(valid) if s == last => k.if_then(valid, |k| body(k, c)),
                _ => body(k, c),
            }
        }
    }
}

/// A candidate `(logit, expert)` in the selection order.
#[derive(Clone, Copy)]
pub(super) struct Candidate<A> {
    pub value: Reg<A>,
    pub expert: Reg<U32>,
}

/// Builds the gating entry: `logits [T, E] → indices [T, K] (u32), weights [T, K] (dtype)`.
pub(crate) fn build<T: MoeElem>(shape: &MoeShape, k: &mut KernelBuilder) {
    if shape.experts < GATING_WARP_MIN_EXPERTS {
        thread::build::<T>(shape, k);
    } else {
        build_warp_per_token::<T>(shape, k);
    }
}

/// The warp-per-token entry (`E ≥ 32`).
fn build_warp_per_token<T: MoeElem>(shape: &MoeShape, k: &mut KernelBuilder) {
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
    let tid = k.tid_x();
    let lane = k.and(tid, 31u32);
    let warp = k.shr(tid, 5u32);
    let block = k.ctaid_x();
    let token = k.mad_lo(block, GATING_WARPS, warp);
    // Warp-uniform: whole warps skip, so the shuffles below always see a full warp.
    let active = k.setp_lt(token, tokens);
    k.if_then(active, |k| {
        let logit_row = k.mul_lo(token, shape.experts);
        let pair_row = k.mul_lo(token, shape.top_k);
        let logits = k.offset_ptr(logits, logit_row);
        let (held, last_valid) = TokenRow::<T>::read(shape, k, logits, lane);
        let row = TokenRow::<T> {
            logits,
            indices: k.offset_ptr(indices, pair_row),
            weights: k.offset_ptr(weights, pair_row),
            lane,
            held,
            last_valid,
        };
        let (max, selected_sum) = select_top_k(shape, k, &row);
        let denominator = if shape.normalize_topk {
            selected_sum
        } else {
            softmax_denominator(k, &row, max)
        };
        write_weights(shape, k, &row, max, denominator);
    });
}

/// Selection, `K` rounds: each lane scans its experts for the best candidate strictly after the
/// previous pick, then a warp arg-max agrees on the pick; lane `r mod 32` stores `indices[t, r]`.
///
/// Round 0's pick is the row maximum `m`; returns `m` and `Σ_{picked} exp(l_e − m)`.
fn select_top_k<T: MoeElem>(
    shape: &MoeShape,
    k: &mut KernelBuilder,
    row: &TokenRow<T>,
) -> (Reg<T::Acc>, Reg<T::Acc>) {
    k.comment("top-k selection: K rounds of lane scan + warp arg-max");
    let max = constant::<T::Acc>(k, 0.0);
    let selected_sum = constant::<T::Acc>(k, 0.0);
    let prev = Candidate {
        value: constant::<T::Acc>(k, 0.0),
        expert: k.var::<U32>(NONE),
    };
    k.for_range(0u32, shape.top_k, 1u32, |k, round| {
        let first = k.setp(CmpOp::Eq, round, 0u32);
        let best = lane_best_after(k, row, prev, first);
        let best = warp_arg_max::<T>(k, best);
        k.if_then(first, |k| k.assign(max, best.value));
        let shifted = k.sub(best.value, max);
        let p = exp(k, shifted);
        k.add_into(selected_sum, selected_sum, p);
        let writer = k.and(round, 31u32);
        let mine = k.setp(CmpOp::Eq, writer, row.lane);
        k.if_then(mine, |k| {
            let addr = k.elem_addr(row.indices, round);
            k.st_global(addr, 0, best.expert);
        });
        k.assign(prev.value, best.value);
        k.assign(prev.expert, best.expert);
    });
    (max, selected_sum)
}

/// `(v, e)` comes strictly after `prev` in the order "larger logit first, then lower index":
/// `v < prev.v ∨ (v = prev.v ∧ e > prev.e)`; everything qualifies in round 0.
pub(super) fn after_prev<A: crate::builder::Float>(
    k: &mut KernelBuilder,
    v: Reg<A>,
    e: Reg<U32>,
    prev: Candidate<A>,
    first: Pred,
) -> Pred {
    let smaller = k.setp(CmpOp::Lt, v, prev.value);
    let equal = k.setp(CmpOp::Eq, v, prev.value);
    let later = k.setp(CmpOp::Gt, e, prev.expert);
    let tie_after = k.and_pred(equal, later);
    let after = k.or_pred(smaller, tie_after);
    k.or_pred(after, first)
}

/// The lane's best candidate after `prev` among its held experts `lane, lane + 32, …`
/// (ascending, so a strictly larger logit is needed to replace the current best: ties keep the
/// lower index).
fn lane_best_after<T: MoeElem>(
    k: &mut KernelBuilder,
    row: &TokenRow<T>,
    prev: Candidate<T::Acc>,
    first: Pred,
) -> Candidate<T::Acc> {
    let best = Candidate {
        value: constant::<T::Acc>(k, f64::NEG_INFINITY),
        expert: k.var::<U32>(NONE),
    };
    row.for_each_held(
        k,
        |k,
         Candidate {
             value: v,
             expert: e,
         }| {
            let eligible = after_prev(k, v, e, prev, first);
            let none_yet = k.setp(CmpOp::Eq, best.expert, NONE);
            let larger = k.setp(CmpOp::Gt, v, best.value);
            let improves = k.or_pred(none_yet, larger);
            let take = k.and_pred(eligible, improves);
            k.if_then(take, |k| {
                k.assign(best.value, v);
                k.assign(best.expert, e);
            });
        },
    );
    best
}

/// Butterfly arg-max over the warp in the selection order (a candidate without an expert
/// loses); every lane ends with the same winner.
fn warp_arg_max<T: MoeElem>(k: &mut KernelBuilder, mine: Candidate<T::Acc>) -> Candidate<T::Acc> {
    let best = Candidate {
        value: k.var::<T::Acc>(mine.value),
        expert: k.var::<U32>(mine.expert),
    };
    for shift in [16, 8, 4, 2, 1] {
        let other_v = shfl_xor_acc(k, best.value, shift);
        let other_e = shfl_xor_u32(k, best.expert, shift);
        let other_some = k.setp(CmpOp::Ne, other_e, NONE);
        let mine_none = k.setp(CmpOp::Eq, best.expert, NONE);
        let larger = k.setp(CmpOp::Gt, other_v, best.value);
        let equal = k.setp(CmpOp::Eq, other_v, best.value);
        let lower = k.setp(CmpOp::Lt, other_e, best.expert);
        let tie_lower = k.and_pred(equal, lower);
        let better = k.or_pred(larger, tie_lower);
        let better = k.or_pred(better, mine_none);
        let take = k.and_pred(other_some, better);
        k.if_then(take, |k| {
            k.assign(best.value, other_v);
            k.assign(best.expert, other_e);
        });
    }
    best
}

/// Softmax denominator `Σ_e exp(l_e − m)` over all experts (lane partial sums, then a fixed
/// butterfly order).
fn softmax_denominator<T: MoeElem>(
    k: &mut KernelBuilder,
    row: &TokenRow<T>,
    max: Reg<T::Acc>,
) -> Reg<T::Acc> {
    k.comment("softmax denominator");
    let partial = constant::<T::Acc>(k, 0.0);
    row.for_each_held(k, |k, c| {
        let shifted = k.sub(c.value, max);
        let p = exp(k, shifted);
        k.add_into(partial, partial, p);
    });
    warp_sum(k, partial)
}

/// `weights[t, r] = exp(l_{e_r} − m) / denominator` (denominator: the selected sum when
/// renormalising, the softmax sum otherwise). Lane `r mod 32` handles pick `r`, reading back the
/// index it stored itself.
fn write_weights<T: MoeElem>(
    shape: &MoeShape,
    k: &mut KernelBuilder,
    row: &TokenRow<T>,
    max: Reg<T::Acc>,
    denominator: Reg<T::Acc>,
) {
    k.comment("weights");
    k.for_range(row.lane, shape.top_k, 32u32, |k, r| {
        let index_addr = k.elem_addr(row.indices, r);
        let expert = k.ld_global::<U32>(index_addr, 0);
        let weight = constant::<T::Acc>(k, 0.0);
        let valid = k.setp_lt(expert, shape.experts);
        k.if_then(valid, |k| {
            let addr = k.elem_addr(row.logits, expert);
            let raw = k.ld_global_nc::<T>(addr, 0);
            let v = widen(k, raw);
            let shifted = k.sub(v, max);
            let p = exp(k, shifted);
            let w = k.div(p, denominator, Precision::Rounded(Rounding::Rn));
            k.assign(weight, w);
        });
        let stored = narrow::<T>(k, weight);
        let addr = k.elem_addr(row.weights, r);
        k.st_global(addr, 0, stored);
    });
}
