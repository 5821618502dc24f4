//! The tensor-core arithmetic of one KV tile: `S = Q·Kᵀ` on `mma`, masking and scaling, the
//! online softmax on the S fragments, and `O += P·V` with P reused from registers.

use super::plan::TcPlan;
use crate::builder::{
    FragA, FragC, KernelBuilder, MmaInput, PackedHalf, Reg, F32, M16N8K16, S32, U32,
};
use crate::ir::CmpOp;

/// The warp's Q rows as A fragments, one per `k16` step of the head dimension.
#[derive(Debug, Clone)]
pub(super) enum QFragments<T> {
    /// Loaded once from the Q tile (`ldmatrix.x4`) and kept for every KV tile.
    Registers(Vec<FragA<M16N8K16, T>>),
    /// Re-read from the Q tile (this lane's `ldmatrix` row address) when needed.
    Shared(Reg<U32>),
}

impl<T: PackedHalf> QFragments<T>
where
    M16N8K16: MmaInput<T>,
{
    /// Loads the fragments into registers when the plan keeps them there.
    pub fn new(k: &mut KernelBuilder, plan: &TcPlan, q_lane: Reg<U32>) -> Self {
        if !plan.q_in_registers {
            return Self::Shared(q_lane);
        }
        k.comment("Q fragments: ldmatrix.x4 once, kept in registers");
        Self::Registers(
            (0..plan.d_steps())
                .map(|kk| k.ldmatrix(q_lane, (kk * 32) as i32))
                .collect(),
        )
    }

    /// The A fragment of `k16` step `kk`.
    fn step(&self, k: &mut KernelBuilder, kk: u32) -> FragA<M16N8K16, T> {
        match self {
            Self::Registers(frags) => frags[kk as usize].clone(),
            Self::Shared(q_lane) => k.ldmatrix(*q_lane, (kk * 32) as i32),
        }
    }
}

/// `S = Q·Kᵀ` for the warp's 16 rows and the tile's `block_n` keys, as `block_n / 8`
/// accumulators of 16 × 8:
///
/// ```text
/// S[:, 16j .. 16j + 16] = Σ_kk Qa[kk] · Ks[16j .. 16j + 16, 16kk .. 16kk + 16]ᵀ
/// ```
///
/// Key rows of the K stage are the columns of the B operand, so one `ldmatrix.x4` without
/// `.trans` gives the B fragments of 16 keys.
pub(super) fn score_tile<T: PackedHalf>(
    k: &mut KernelBuilder,
    plan: &TcPlan,
    q: &QFragments<T>,
    k_lane: Reg<U32>,
) -> Vec<FragC<M16N8K16, F32>>
where
    M16N8K16: MmaInput<T>,
{
    k.comment("S = Q * K^T on the tensor cores");
    let s: Vec<FragC<M16N8K16, F32>> = (0..2 * plan.key_steps())
        .map(|_| k.frag_c_zero::<M16N8K16, T, F32>())
        .collect();
    for kk in 0..plan.d_steps() {
        let a = &q.step(k, kk);
        for j in 0..plan.key_steps() {
            let offset = j * 16 * plan.row_bytes() + kk * 32;
            let (b0, b1) = k.ldmatrix_b_pair::<T>(k_lane, offset as i32);
            let (lo, hi) = (&s[2 * j as usize], &s[2 * j as usize + 1]);
            k.mma_into(lo, a, &b0, lo);
            k.mma_into(hi, a, &b1, hi);
        }
    }
    s
}

/// The scores in log2 units, masked: element `e` of accumulator `j` (row half `h = e / 2`, key
/// `8j + 2·quad + e mod 2` of the tile) becomes
///
/// ```text
/// s = S · scale · log2 e      if 8j + e mod 2 < limit[h]
/// s = −∞                      otherwise
/// ```
///
/// with `limit[h] = visible_end(row_h) − kv0 − 2·quad`: keys past `Skv` (zero-filled) and,
/// with the causal mask, keys after the row's diagonal.
pub(super) fn scale_and_mask(
    k: &mut KernelBuilder,
    s: &[FragC<M16N8K16, F32>],
    factor: Reg<F32>,
    limit: [Reg<S32>; 2],
) -> Vec<[Reg<F32>; 4]> {
    k.comment("scale to log2 units and mask (past Skv, causal)");
    s.iter()
        .enumerate()
        .map(|(j, frag)| {
            let regs = frag.f32_regs();
            std::array::from_fn(|e| {
                let x = k.mul(regs[e], factor);
                let key = (8 * j + e % 2) as i32;
                let visible = k.setp(CmpOp::Gt, limit[e / 2], key);
                k.selp(x, f32::NEG_INFINITY, visible)
            })
        })
        .collect()
}

/// The running softmax state of this lane's two rows (`lane / 4` and `+ 8`): the running
/// maximum `m` (log2 units, equal in the row's four lanes), this lane's share `ℓ` of the
/// running sum, and the O accumulators, `D / 8` tiles of 16 × 8.
#[derive(Debug, Clone)]
pub(super) struct FragState {
    pub m: [Reg<F32>; 2],
    pub l: [Reg<F32>; 2],
    pub o: Vec<FragC<M16N8K16, F32>>,
}

impl FragState {
    /// `m = −∞`, `ℓ = 0`, `O = 0`.
    pub fn new<T>(k: &mut KernelBuilder, plan: &TcPlan) -> Self
    where
        F32: crate::builder::MmaAccum<T>,
    {
        let m = std::array::from_fn(|_| k.var::<F32>(f32::NEG_INFINITY));
        let l = std::array::from_fn(|_| k.var::<F32>(0.0f32));
        let o = (0..plan.head_dim / 8)
            .map(|_| k.frag_c_zero::<M16N8K16, T, F32>())
            .collect();
        Self { m, l, o }
    }
}

/// The online-softmax update on the fragments (FlashAttention-2), per row half `h`:
///
/// ```text
/// m_tile = max over the row's 4 lanes (shfl.bfly 1, 2) of the lane's scores
/// m'     = max(m, m_tile);   μ = (m' = −∞) ? 0 : m'     (β^(−∞ − μ) = 0 for masked rows)
/// α      = 2^(m − μ);        ℓ ← α·ℓ;  O ← α·O;  m ← m'
/// p      = 2^(s − μ);        ℓ ← ℓ + Σ p
/// ```
///
/// and returns P rounded to `T` as the A fragments of `P·V`: the C fragments of key tiles `2i`
/// and `2i + 1` hold exactly the A fragment of the `k16` step `i` (rows `lane / 4`, `+ 8`;
/// columns `2·quad, +1` and `+ 8`), so P never leaves the registers.
pub(super) fn online_softmax_update<T: PackedHalf>(
    k: &mut KernelBuilder,
    state: &FragState,
    s: &[[Reg<F32>; 4]],
) -> Vec<FragA<M16N8K16, T>>
where
    M16N8K16: MmaInput<T, Packed = T::Pair>,
{
    k.comment("online softmax on the fragments; P packed into A fragments");
    let mut p: Vec<[Option<Reg<F32>>; 4]> = vec![[None; 4]; s.len()];
    for h in 0..2 {
        let mut tile_max = s[0][2 * h];
        for e in s.iter().flat_map(|x| [x[2 * h], x[2 * h + 1]]) {
            tile_max = k.max(tile_max, e);
        }
        for mask in [1, 2] {
            let other = k.shfl_xor(tile_max, mask);
            tile_max = k.max(tile_max, other);
        }
        let m_new = k.max(state.m[h], tile_max);
        let none_visible = k.setp(CmpOp::Eq, m_new, f32::NEG_INFINITY);
        let mu = k.selp(0.0f32, m_new, none_visible);
        let shift = k.sub(state.m[h], mu);
        let alpha = k.ex2_approx(shift);
        k.assign(state.m[h], m_new);
        k.mul_into(state.l[h], state.l[h], alpha);
        for o in &state.o {
            for r in &o.f32_regs()[2 * h..2 * h + 2] {
                k.mul_into(*r, *r, alpha);
            }
        }
        for (j, row) in s.iter().enumerate() {
            for e in 2 * h..2 * h + 2 {
                let x = k.sub(row[e], mu);
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
    p.chunks(2)
        .map(|pair| {
            let regs = [
                k.pack_f32_pair::<T>(pair[0][0], pair[0][1]),
                k.pack_f32_pair::<T>(pair[0][2], pair[0][3]),
                k.pack_f32_pair::<T>(pair[1][0], pair[1][1]),
                k.pack_f32_pair::<T>(pair[1][2], pair[1][3]),
            ];
            FragA::from_regs(&regs)
        })
        .collect()
}

/// `O += P·V` for the tile: for each `k16` step `i` of the keys and each pair of O column
/// tiles, one `ldmatrix.x4.trans` of V (rows are keys, so `.trans` gives the column-major B)
/// and two `mma`s.
pub(super) fn accumulate_pv<T: PackedHalf>(
    k: &mut KernelBuilder,
    plan: &TcPlan,
    state: &FragState,
    p: &[FragA<M16N8K16, T>],
    v_lane: Reg<U32>,
) where
    M16N8K16: MmaInput<T>,
{
    k.comment("O += P * V on the tensor cores (P from registers)");
    for (i, a) in p.iter().enumerate() {
        for dp in 0..plan.d_steps() {
            let offset = i as u32 * 16 * plan.row_bytes() + dp * 32;
            let (b0, b1) = k.ldmatrix_b_pair_trans::<T>(v_lane, offset as i32);
            let (lo, hi) = (&state.o[2 * dp as usize], &state.o[2 * dp as usize + 1]);
            k.mma_into(lo, a, &b0, lo);
            k.mma_into(hi, a, &b1, hi);
        }
    }
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
