//! The tensor-core arithmetic of one KV tile: `S = Q·Kᵀ` on `mma`, masking and scaling, the
//! online softmax on the S fragments, and `O += P·V` with P reused from registers.

use super::elem::TcElem;
use super::plan::TcPlan;
use crate::builder::{FragC, KernelBuilder, Pred, Reg, F32, S32, U32};
use crate::ir::{CmpOp, VoteMode};

/// The warp's Q rows as A fragments, per m16 tile one per 32-byte step of the head dimension.
#[derive(Debug, Clone)]
pub(super) enum QFragments<T: TcElem> {
    /// Loaded once from the Q tile (`ldmatrix.x4`) and kept for every KV tile, `[tile][step]`.
    Registers(Vec<Vec<T::QFrag>>),
    /// Re-read from the Q tile (this lane's `ldmatrix` row address) when needed.
    Shared(Reg<U32>),
}

impl<T: TcElem> QFragments<T> {
    /// Loads the fragments into registers when the plan keeps them there.
    pub fn new(k: &mut KernelBuilder, plan: &TcPlan, q_lane: Reg<U32>) -> Self {
        if !plan.q_in_registers {
            return Self::Shared(q_lane);
        }
        k.comment("Q fragments: ldmatrix.x4 once, kept in registers");
        Self::Registers(
            (0..plan.row_tiles)
                .map(|tile| {
                    (0..plan.d_steps())
                        .map(|kk| T::load_q(k, q_lane, q_offset(plan, tile, kk)))
                        .collect()
                })
                .collect(),
        )
    }

    /// The A fragments of step `kk`, one per m16 tile of the warp.
    fn step(&self, k: &mut KernelBuilder, plan: &TcPlan, kk: u32) -> Vec<T::QFrag> {
        match self {
            Self::Registers(frags) => frags.iter().map(|t| t[kk as usize].clone()).collect(),
            Self::Shared(q_lane) => (0..plan.row_tiles)
                .map(|tile| T::load_q(k, *q_lane, q_offset(plan, tile, kk)))
                .collect(),
        }
    }
}

/// Byte offset from this lane's Q `ldmatrix` address of m16 tile `tile`, step `kk`.
fn q_offset(plan: &TcPlan, tile: u32, kk: u32) -> i32 {
    (plan.tile_offset(tile) + kk * 32) as i32
}

/// `S = Q·Kᵀ` for each of the warp's m16 tiles of rows and the tile's `block_n` keys, as
/// `block_n / 8` accumulators of 16 × 8 per m16 tile `i`, per 32-byte step `kk` of the head
/// dimension (16 halves or 8 f32):
///
/// ```text
/// S_i[:, 16j .. 16j + 16] = zero + Qa_i[0] · Ks[16j .. 16j + 16, step 0]ᵀ
/// S_i[:, 16j .. 16j + 16] += Qa_i[kk] · Ks[16j .. 16j + 16, step kk]ᵀ     kk > 0
/// ```
///
/// Each K fragment is loaded once and serves every m16 tile of the warp.
///
/// `zero` is one zeroed accumulator made once per kernel: the first step's mma reads it as C,
/// so S needs no zeroing moves per tile.
///
/// Key rows of the K stage are the columns of the B operand, so one `ldmatrix.x4` without
/// `.trans` gives the B fragments of 16 keys ([`TcElem::score_pair`]).
pub(super) fn score_tile<T: TcElem>(
    k: &mut KernelBuilder,
    plan: &TcPlan,
    q: &QFragments<T>,
    k_lane: Reg<U32>,
    zero: &FragC<T::Shape, F32>,
) -> Vec<Vec<FragC<T::Shape, F32>>> {
    k.comment("S = Q * K^T on the tensor cores");
    let s: Vec<Vec<FragC<T::Shape, F32>>> = (0..plan.row_tiles)
        .map(|_| (0..2 * plan.key_steps()).map(|_| T::new_acc(k)).collect())
        .collect();
    let zeros = [zero.clone(), zero.clone()];
    for kk in 0..plan.d_steps() {
        let a = q.step(k, plan, kk);
        for j in 0..plan.key_steps() as usize {
            let offset = j as u32 * 16 * plan.row_bytes() + kk * 32;
            let pairs: Vec<&[FragC<T::Shape, F32>]> =
                s.iter().map(|t| &t[2 * j..2 * j + 2]).collect();
            let c: Vec<&[FragC<T::Shape, F32>]> = if kk == 0 {
                pairs.iter().map(|_| &zeros[..]).collect()
            } else {
                pairs.clone()
            };
            T::score_pair(k, &pairs, &c, &a, k_lane, offset as i32);
        }
    }
    s
}

/// The raw scores of a tile every key of which every row of the block sees: the S
/// accumulators as they are (scaling is folded into the exponent, [`online_softmax_update`]).
pub(super) fn raw_scores<S>(s: &[FragC<S, F32>]) -> Vec<[Reg<F32>; 4]> {
    s.iter()
        .map(|frag| {
            let regs = frag.f32_regs();
            std::array::from_fn(|e| regs[e])
        })
        .collect()
}

/// The raw scores of a tile some key of which some row does not see: element `e` of
/// accumulator `j` (row half `h = e / 2`, key `8j + 2·quad + e mod 2` of the tile) is visible iff
///
/// ```text
/// 8j + e mod 2 < limit[h]
/// ```
///
/// with `limit[h] = visible_end(row_h) − kv0 − 2·quad`: keys past `Skv` (zero-filled) and, with
/// the causal mask, keys after the row's diagonal. Returns the scores with hidden ones set to
/// −∞ (for the row maximum) and the visibility of each (to mask the exponent as well, which
/// stays −∞ even when the scale is 0).
pub(super) fn mask_scores<S>(
    k: &mut KernelBuilder,
    s: &[FragC<S, F32>],
    limit: [Reg<S32>; 2],
) -> Masked {
    k.comment("mask (past Skv, causal)");
    let mut visible = Vec::with_capacity(s.len());
    let scores = s
        .iter()
        .enumerate()
        .map(|(j, frag)| {
            let regs = frag.f32_regs();
            let vis: [Pred; 4] = std::array::from_fn(|e| {
                let key = (8 * j + e % 2) as i32;
                k.setp(CmpOp::Gt, limit[e / 2], key)
            });
            visible.push(vis);
            std::array::from_fn(|e| k.selp(regs[e], f32::NEG_INFINITY, vis[e]))
        })
        .collect();
    Masked { scores, visible }
}

/// The scores of a masked tile ([`mask_scores`]).
#[derive(Debug, Clone)]
pub(super) struct Masked {
    /// Raw scores, −∞ where hidden.
    pub scores: Vec<[Reg<F32>; 4]>,
    /// Whether each score is visible.
    pub visible: Vec<[Pred; 4]>,
}

/// The running softmax state of this lane's two rows of one m16 tile (`lane / 4` and `+ 8`): the running
/// maximum `m` (log2 units, equal in the row's four lanes), this lane's share `ℓ` of the
/// running sum, and the O accumulators, `D / 8` tiles of 16 × 8.
#[derive(Debug, Clone)]
pub(super) struct FragState<T: TcElem> {
    pub m: [Reg<F32>; 2],
    pub l: [Reg<F32>; 2],
    pub o: Vec<FragC<T::Shape, F32>>,
}

impl<T: TcElem> FragState<T> {
    /// `m = −∞`, `ℓ = 0`, `O = 0`.
    pub fn new(k: &mut KernelBuilder, plan: &TcPlan) -> Self {
        let m = std::array::from_fn(|_| k.var::<F32>(f32::NEG_INFINITY));
        let l = std::array::from_fn(|_| k.var::<F32>(0.0f32));
        let o = (0..plan.head_dim / 8).map(|_| T::zero_acc(k)).collect();
        Self { m, l, o }
    }
}

/// The online-softmax update on the fragments (FlashAttention-2), per row half `h`, from the
/// raw scores `s` (`f = |scale| · log2 e`, the sign of the scale already folded into Q):
///
/// ```text
/// m_tile = f · max over the row's 4 lanes (shfl.bfly 1, 2) of the lane's raw scores
/// m'     = max(m, m_tile);   μ = (m' = −∞) ? 0 : m'     (β^(−∞ − μ) = 0 for masked rows)
/// α      = 2^(m − μ);        ℓ ← α·ℓ;  O ← α·O;  m ← m'
/// p      = 2^(fma(s, f, −μ)) (−∞ where `visible` says hidden);   ℓ ← ℓ + Σ p
/// ```
///
/// The maximum of `f · s` is `f · max(s)` because `f ≥ 0`, so scaling costs one `fma` per
/// score. `O ← α·O` is skipped, by a branch the whole warp takes together (`vote.any`), when no
/// row of the warp changed its maximum: then every `α` is `2^0 = 1` (or `2^−∞ = 0` on a row
/// whose O is still all zeros), so the product would not change a bit of O. Returns P as the A
/// fragments of `P·V` ([`TcElem::p_fragments`]): P never leaves the registers.
pub(super) fn online_softmax_update<T: TcElem>(
    k: &mut KernelBuilder,
    state: &FragState<T>,
    s: &[[Reg<F32>; 4]],
    visible: Option<&[[Pred; 4]]>,
    factor: Reg<F32>,
) -> Vec<T::PFrag> {
    k.comment("online softmax on the fragments; P packed into A fragments");
    let m_new: [Reg<F32>; 2] = std::array::from_fn(|h| {
        let mut tile_max = s[0][2 * h];
        for e in s.iter().flat_map(|x| [x[2 * h], x[2 * h + 1]]).skip(1) {
            tile_max = k.max(tile_max, e);
        }
        for mask in [1, 2] {
            let other = k.shfl_xor(tile_max, mask);
            tile_max = k.max(tile_max, other);
        }
        // −∞ · 0 is NaN when the scale is 0; `max` then keeps `m` (PTX max ignores a NaN).
        let tile_max = k.mul(tile_max, factor);
        k.max(state.m[h], tile_max)
    });
    let changed: [Pred; 2] = std::array::from_fn(|h| k.setp(CmpOp::Ne, m_new[h], state.m[h]));
    let changed = k.or_pred(changed[0], changed[1]);
    let warp_changed = k.vote(VoteMode::Any, changed);
    let mut alpha = [None; 2];
    let mut neg_mu = [None; 2];
    for h in 0..2 {
        let none_visible = k.setp(CmpOp::Eq, m_new[h], f32::NEG_INFINITY);
        let mu = k.selp(0.0f32, m_new[h], none_visible);
        let shift = k.sub(state.m[h], mu);
        let a = k.ex2_approx(shift);
        neg_mu[h] = Some(k.neg(mu));
        k.assign(state.m[h], m_new[h]);
        k.mul_into(state.l[h], state.l[h], a);
        alpha[h] = Some(a);
    }
    let alpha = alpha.map(|a| a.expect("both row halves"));
    k.if_then(warp_changed, |k| {
        k.comment("some row of the warp has a new maximum: O <- alpha * O");
        for o in &state.o {
            for (e, r) in o.f32_regs().into_iter().enumerate() {
                k.mul_into(r, r, alpha[e / 2]);
            }
        }
    });
    let mut p: Vec<[Option<Reg<F32>>; 4]> = vec![[None; 4]; s.len()];
    for (h, neg_mu) in neg_mu.into_iter().enumerate() {
        let neg_mu = neg_mu.expect("both row halves");
        for (j, row) in s.iter().enumerate() {
            for e in 2 * h..2 * h + 2 {
                let x = k.fma(row[e], factor, neg_mu);
                let x = match visible {
                    Some(v) => k.selp(x, f32::NEG_INFINITY, v[j][e]),
                    None => x,
                };
                let pe = k.ex2_approx(x);
                k.add_into(state.l[h], state.l[h], pe);
                p[j][e] = Some(pe);
            }
        }
    }
    let p: Vec<[Reg<F32>; 4]> = p
        .into_iter()
        .map(|x| x.map(|r| r.expect("both row halves are filled")))
        .collect();
    T::p_fragments(k, &p)
}

/// `O += P·V` for the tile and each m16 tile of the warp (`states[i]`, `p[i]`), on the tensor
/// cores with P from registers ([`TcElem::accumulate_pv`]).
pub(super) fn accumulate_pv<T: TcElem>(
    k: &mut KernelBuilder,
    plan: &TcPlan,
    states: &[FragState<T>],
    p: &[Vec<T::PFrag>],
    v_lane: Reg<U32>,
) {
    k.comment("O += P * V on the tensor cores (P from registers)");
    let o: Vec<_> = states.iter().map(|s| &s.o[..]).collect();
    let p: Vec<_> = p.iter().map(|p| &p[..]).collect();
    T::accumulate_pv(k, plan, &o, &p, v_lane);
}

/// `ℓ` of row half `h`: the sum of the four lanes' shares (`shfl.bfly` 1, 2).
pub(super) fn row_sum(k: &mut KernelBuilder, l: Reg<F32>) -> Reg<F32> {
    let mut acc = l;
    for mask in [1, 2] {
        let other = k.shfl_xor(acc, mask);
        acc = k.add(acc, other);
    }
    acc
}
