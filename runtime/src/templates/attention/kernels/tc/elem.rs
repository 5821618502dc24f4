//! What the tensor-core forward kernel does differently per storage type: the mma shape, how
//! Q, K and V fragments come out of the shared tiles, how P becomes A fragments, and how an O
//! pair is staged. f16/bf16 use `mma.m16n8k16` (here); f32 with `allow_tf32` uses tf32
//! `mma.m16n8k8` ([`super::tf32`]). Everything else (plan, copies, masking, online softmax,
//! output) is shared.
//!
//! Both shapes consume 32 bytes of K per mma (16 halves or 8 f32), so a "step" of the head
//! dimension is 32 bytes of a shared row in either case, and an `ldmatrix.x4` of 16 K rows
//! gives the B fragments of two 8-key S tiles in either case.

use super::plan::TcPlan;
use crate::builder::{
    Float, FragA, FragC, KernelBuilder, MmaInput, MmaShapeKind, PackedHalf, Reg, BF16, F16, F32,
    M16N8K16, U32,
};

/// A storage type the tensor-core forward kernel runs on.
pub(in crate::templates::attention::kernels) trait TcElem:
    Float
{
    /// Bytes of one element in global and shared memory.
    const BYTES: u32;
    /// The sign bits of the elements in one 32-bit word (negation by `xor`).
    const SIGN_BITS: u32;
    /// Padding after the `D` elements of a row of the staged O tile ([`super::output`]),
    /// chosen so that [`Self::stage_pair`] is conflict-free in every phase.
    const STAGE_PAD_BYTES: u32;
    /// The mma shape (f32 accumulators).
    type Shape: MmaShapeKind;
    /// The warp's Q rows of one 32-byte step of the head dimension, as an A fragment.
    type QFrag: Clone;
    /// P of the tile as A fragments of `P·V`.
    type PFrag;

    /// A zero 16 × 8 f32 accumulator.
    fn zero_acc(k: &mut KernelBuilder) -> FragC<Self::Shape, F32>;

    /// A 16 × 8 f32 accumulator with no value yet (the `d` of an mma from a zero `c`).
    fn new_acc(k: &mut KernelBuilder) -> FragC<Self::Shape, F32>;

    /// The A fragment of Q at this lane's `ldmatrix.x4` row address plus `offset` bytes.
    fn load_q(k: &mut KernelBuilder, q_lane: Reg<U32>, offset: i32) -> Self::QFrag;

    /// For each m16 tile `i` of the warp, `s[i][0] = c[i][0] + Q_i·K[16j .. 16j + 8]ᵀ` and
    /// `s[i][1] = c[i][1] + Q_i·K[16j + 8 .. 16j + 16]ᵀ` for one step: one untransposed
    /// `ldmatrix.x4` of 16 key rows at `k_lane + offset`, shared by every tile, and two mmas
    /// per tile.
    fn score_pair(
        k: &mut KernelBuilder,
        s: &[&[FragC<Self::Shape, F32>]],
        c: &[&[FragC<Self::Shape, F32>]],
        q: &[Self::QFrag],
        k_lane: Reg<U32>,
        offset: i32,
    );

    /// This lane's byte offset in a V stage for the B fragments of `P·V` (`lane16 = lane % 16`,
    /// `half_bytes = 16 · (lane / 16)`).
    fn v_lane(
        k: &mut KernelBuilder,
        plan: &TcPlan,
        lane: Reg<U32>,
        lane16: Reg<U32>,
        half_bytes: Reg<U32>,
    ) -> Reg<U32>;

    /// P (the softmax numerators in the layout of the S accumulators, one `[Reg; 4]` per 8-key
    /// tile) as A fragments.
    fn p_fragments(k: &mut KernelBuilder, p: &[[Reg<F32>; 4]]) -> Vec<Self::PFrag>;

    /// `O_i += P_i·V` for each m16 tile `i` of the warp (`o[i]`, `p[i]`) from the V stage at
    /// this lane's `v_lane`, each V fragment loaded once for every tile.
    fn accumulate_pv(
        k: &mut KernelBuilder,
        plan: &TcPlan,
        o: &[&[FragC<Self::Shape, F32>]],
        p: &[&[Self::PFrag]],
        v_lane: Reg<U32>,
    );

    /// Stores a normalised O pair (two adjacent columns) to the shared staging tile (rows of
    /// `D · BYTES + STAGE_PAD_BYTES`).
    fn stage_pair(k: &mut KernelBuilder, at: Reg<U32>, offset: i32, lo: Reg<F32>, hi: Reg<F32>);
}

/// The f16/bf16 parts, shared by both half types.
macro_rules! half_elem {
    ($($t:ident),*) => {$(
        impl TcElem for $t {
            const BYTES: u32 = 2;
            const SIGN_BITS: u32 = 0x8000_8000;
            /// Rows of `D / 2 + 4` words (`≡ 4` or `20 mod 32` for every head_dim): lane
            /// `(g, t)` stores word `g · (D / 2 + 4) + t` of a column tile, 32 distinct banks.
            const STAGE_PAD_BYTES: u32 = 16;
            type Shape = M16N8K16;
            type QFrag = FragA<M16N8K16, $t>;
            type PFrag = FragA<M16N8K16, $t>;

            fn zero_acc(k: &mut KernelBuilder) -> FragC<M16N8K16, F32> {
                k.frag_c_zero::<M16N8K16, $t, F32>()
            }

            fn new_acc(k: &mut KernelBuilder) -> FragC<M16N8K16, F32> {
                k.frag_c_uninit::<M16N8K16, $t, F32>()
            }

            fn load_q(k: &mut KernelBuilder, q_lane: Reg<U32>, offset: i32) -> Self::QFrag {
                k.ldmatrix(q_lane, offset)
            }

            fn score_pair(
                k: &mut KernelBuilder,
                s: &[&[FragC<M16N8K16, F32>]],
                c: &[&[FragC<M16N8K16, F32>]],
                q: &[Self::QFrag],
                k_lane: Reg<U32>,
                offset: i32,
            ) {
                let (b0, b1) = k.ldmatrix_b_pair::<$t>(k_lane, offset);
                for ((s, c), q) in s.iter().zip(c).zip(q) {
                    k.mma_into(&s[0], q, &b0, &c[0]);
                    k.mma_into(&s[1], q, &b1, &c[1]);
                }
            }

            /// Key `lane % 16`, byte `16 · (lane / 16)`: the row of an `ldmatrix.x4.trans`.
            fn v_lane(
                k: &mut KernelBuilder,
                plan: &TcPlan,
                _lane: Reg<U32>,
                lane16: Reg<U32>,
                half_bytes: Reg<U32>,
            ) -> Reg<U32> {
                k.mad_lo(lane16, plan.row_bytes(), half_bytes)
            }

            fn p_fragments(k: &mut KernelBuilder, p: &[[Reg<F32>; 4]]) -> Vec<Self::PFrag> {
                half_p_fragments::<$t>(k, p)
            }

            fn accumulate_pv(
                k: &mut KernelBuilder,
                plan: &TcPlan,
                o: &[&[FragC<M16N8K16, F32>]],
                p: &[&[Self::PFrag]],
                v_lane: Reg<U32>,
            ) {
                half_accumulate_pv::<$t>(k, plan, o, p, v_lane)
            }

            fn stage_pair(
                k: &mut KernelBuilder,
                at: Reg<U32>,
                offset: i32,
                lo: Reg<F32>,
                hi: Reg<F32>,
            ) {
                let pair = k.pack_f32_pair::<$t>(lo, hi);
                let word = k.pair_bits::<$t>(pair);
                k.st_shared(at, offset, word);
            }
        }
    )*};
}

half_elem!(F16, BF16);

/// The C fragments of key tiles `2i` and `2i + 1` hold exactly the A fragment of the `k16`
/// step `i` (rows `lane / 4`, `+ 8`; columns `2·quad, +1` and `+ 8`): P is packed, never moved.
fn half_p_fragments<T: PackedHalf>(
    k: &mut KernelBuilder,
    p: &[[Reg<F32>; 4]],
) -> Vec<FragA<M16N8K16, T>>
where
    M16N8K16: MmaInput<T, Packed = T::Pair>,
{
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

/// For each `k16` step `i` of the keys and each pair of O column tiles, one
/// `ldmatrix.x4.trans` of V (rows are keys, so `.trans` gives the column-major B) and two mmas
/// per m16 tile of the warp.
fn half_accumulate_pv<T: PackedHalf>(
    k: &mut KernelBuilder,
    plan: &TcPlan,
    o: &[&[FragC<M16N8K16, F32>]],
    p: &[&[FragA<M16N8K16, T>]],
    v_lane: Reg<U32>,
) where
    M16N8K16: MmaInput<T>,
{
    for i in 0..plan.key_steps() as usize {
        for dp in 0..plan.d_steps() {
            let offset = i as u32 * 16 * plan.row_bytes() + dp * 32;
            let (b0, b1) = k.ldmatrix_b_pair_trans::<T>(v_lane, offset as i32);
            for (o, p) in o.iter().zip(p) {
                let (lo, hi) = (&o[2 * dp as usize], &o[2 * dp as usize + 1]);
                k.mma_into(lo, &p[i], &b0, lo);
                k.mma_into(hi, &p[i], &b1, hi);
            }
        }
    }
}
