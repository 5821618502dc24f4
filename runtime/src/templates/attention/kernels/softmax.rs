//! Scores of one KV tile and the online-softmax update.

use super::ext::{acc_imm, AttentionBuilderExt};
use super::plan::{Plan, RowState, ThreadPlace};
use crate::builder::{Float, KernelBuilder, Pred, Reg, S32, U32};
use crate::ir::CmpOp;

/// The scores this thread owns in the current tile, masked:
///
/// ```text
/// s[t] = Σ_d q̃[d] · Ks[t·G + g, d]    if kv0 + t·G + g < visible_end(row)
/// s[t] = −∞                            otherwise
/// ```
///
/// Keys are taken `G` at a time. Each of the row's `G` threads forms the partial dot products
/// of its column slice with the `G` keys of the group (reading `Ks[key, col(c)]`: the row's
/// threads read consecutive words, the warp's rows read the same words, so each shared request
/// is conflict-free), and [`reduce_scatter`] adds the partials across the row's threads so that
/// thread `g` ends with the full score of key `t·G + g`.
/// `visible_limit = visible_end(row) − kv0 − g`.
pub(super) fn score_tile<A: Float>(
    k: &mut KernelBuilder,
    plan: &Plan,
    q: &[Reg<A>],
    k_thread: Reg<U32>,
    place: &ThreadPlace,
    visible_limit: Reg<S32>,
) -> Vec<Reg<A>> {
    k.comment("S = Q * K^T for this tile: partial dots per key group, reduce-scatter, mask");
    let g = plan.group();
    (0..plan.tiles.block_n / g)
        .map(|t| {
            let score = reduce_scatter(k, plan, &place.keeps_upper, 1, 0, &mut |k, j| {
                dot_slice::<A>(k, plan, q, k_thread, t * g + j)
            });
            let visible = k.setp(CmpOp::Gt, visible_limit, (t * g) as i32);
            k.selp(score, acc_imm::<A>(f64::NEG_INFINITY), visible)
        })
        .collect()
}

/// `Σ_{d ∈ this thread's columns} q̃[d] · Ks[key, d]`.
fn dot_slice<A: Float>(
    k: &mut KernelBuilder,
    plan: &Plan,
    q: &[Reg<A>],
    k_thread: Reg<U32>,
    key: u32,
) -> Reg<A> {
    let vector = plan.tiles.vector;
    let mut sum: Option<Reg<A>> = None;
    for c in 0..plan.chunks() {
        let offset = (key * plan.shared_row_bytes() + plan.chunk_col(c) * plan.acc_bytes) as i32;
        let kv = k.ld_shared_n::<A>(k_thread, offset, vector as usize);
        for (e, kx) in kv.into_iter().enumerate() {
            let qx = q[(c * vector) as usize + e];
            sum = Some(match sum {
                None => k.mul(qx, kx),
                Some(s) => k.fma(qx, kx, s),
            });
        }
    }
    sum.expect("every thread owns at least one column")
}

/// Recursive-halving reduce-scatter over the `G` threads of a row: thread `g` holds partial
/// values `v[0..G]` (one per key, made by `partial(j)`) and ends with `Σ_{threads} v[g]`.
///
/// At the step for bit `h` (`G/2, …, 1`) a thread with `g & h` set keeps the upper value of
/// each pair `(v[i], v[i + h])` and sends the lower one to its partner `g ^ h`, which does the
/// opposite; each adds what it receives to what it keeps:
///
/// ```text
/// F(G, i) = v[i];   F(h, i) = keep_h(F(2h, i), F(2h, i+h)) + shfl_xor(send_h(…), h)
/// result  = F(1, 0)
/// ```
///
/// `G − 1` shuffles per `G` keys instead of `log2 G` per key for a butterfly all-reduce. `F` is
/// evaluated depth first, so at most `log2 G + 1` partial values are live at a time (not
/// `G`). The order of additions is fixed, so results are deterministic.
fn reduce_scatter<A: Float>(
    k: &mut KernelBuilder,
    plan: &Plan,
    keeps_upper: &[(u32, Pred)],
    h: u32,
    i: u32,
    partial: &mut dyn FnMut(&mut KernelBuilder, u32) -> Reg<A>,
) -> Reg<A> {
    if h == plan.group() {
        return partial(k, i);
    }
    let low = reduce_scatter(k, plan, keeps_upper, 2 * h, i, partial);
    let high = reduce_scatter(k, plan, keeps_upper, 2 * h, i + h, partial);
    let upper = keeps_upper
        .iter()
        .find(|(bit, _)| *bit == h)
        .map(|&(_, p)| p)
        .expect("a predicate per bit of G");
    let send = k.selp(low, high, upper);
    let keep = k.selp(high, low, upper);
    let received = k.shfl_xor_wide(send, h);
    k.add(keep, received)
}

/// `op` over the `G` threads of a row (butterfly: every thread gets the result, bitwise equal
/// in all of them because each step combines the same two values).
pub(super) fn row_allreduce<A: Float>(
    k: &mut KernelBuilder,
    plan: &Plan,
    v: Reg<A>,
    max: bool,
) -> Reg<A> {
    let mut acc = v;
    let mut h = 1;
    while h < plan.group() {
        let other = k.shfl_xor_wide(acc, h);
        acc = if max {
            k.max(acc, other)
        } else {
            k.add(acc, other)
        };
        h *= 2;
    }
    acc
}

/// The online-softmax update for one tile (FlashAttention-2), for exponent base `β` (2 for
/// f32 accumulators, whose scores carry `log2 e`; e for f64):
///
/// ```text
/// m_tile = max over the row's tile scores          (own scores, then a row all-reduce)
/// m'     = max(m, m_tile);   μ = (m' = −∞) ? 0 : m'  (keeps β^(−∞ − μ) = 0 for masked rows)
/// α      = β^(m − μ);        ℓ ← α·ℓ;  O ← α·O;  m ← m'
/// p_t    = β^(s_t − μ);      ℓ ← ℓ + Σ_t p_t;    P[row, t·G + g] = p_t
/// ```
///
/// `ℓ` is this thread's share of the row sum; shares are added once at the end. The row's
/// threads write interleaved P entries, and the P row stride is `≡ G (mod 32)`, so a warp's
/// writes hit 32 distinct banks.
pub(super) fn online_softmax_update<A: Float>(
    k: &mut KernelBuilder,
    plan: &Plan,
    state: &RowState<A>,
    scores: &[Reg<A>],
    p_own: Reg<U32>,
) {
    k.comment("online softmax: new running max, rescale l and O, P = exp(S - m)");
    let mut tile_max = scores[0];
    for &s in &scores[1..] {
        tile_max = k.max(tile_max, s);
    }
    let tile_max = row_allreduce(k, plan, tile_max, true);
    let m_new = k.max(state.m, tile_max);
    let none_visible = k.setp(CmpOp::Eq, m_new, acc_imm::<A>(f64::NEG_INFINITY));
    let mu = k.selp(acc_imm::<A>(0.0), m_new, none_visible);
    let shift = k.sub(state.m, mu);
    let alpha = k.score_exp(shift);
    k.assign(state.m, m_new);
    k.mul_into(state.l, state.l, alpha);
    for &o in &state.acc {
        k.mul_into(o, o, alpha);
    }
    let g = plan.group();
    for (t, &s) in scores.iter().enumerate() {
        let x = k.sub(s, mu);
        let p = k.score_exp(x);
        k.add_into(state.l, state.l, p);
        let offset = (t as u32 * g * plan.acc_bytes) as i32;
        k.st_shared_n(p_own, offset, &[p]);
    }
}
