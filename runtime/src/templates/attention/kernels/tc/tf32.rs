//! f32 attention on tf32 tensor cores (`allow_tf32`): `mma.m16n8k8` with tf32 inputs and f32
//! accumulators. Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k8", `.tf32`;
//! `g = lane / 4`, `t = lane % 4`): A register `i` at row `g + 8·(i % 2)`, column
//! `t + 4·(i / 2)`; B register `i` at k-row `t + 4·i`, column `g`; C as for m16n8k16.
//!
//! - `S = Q·Kᵀ`: Q and K rows are read by untransposed `ldmatrix.x4` exactly as for halves
//!   (`builder/tensor/tf32.rs`), each register rounded by `cvt.rna.tf32.f32`.
//! - `O += P·V`: the reduction index of an mma may be permuted as long as A and B agree. Lane
//!   `(g, t)` holds P of keys `2t, 2t + 1` (its C registers), so the A fragment of an 8-key tile
//!   takes reduction index `t ↔ key 2t` and `t + 4 ↔ key 2t + 1`: `a = (p0, p2, p1, p3)`, no
//!   shuffle. B then needs `V[2t][g]` and `V[2t + 1][g]`: two scalar `ld.shared.f32`. With rows
//!   of `D + 4` words (`≡ 4 mod 32`) the 32 lanes hit rows `2t` (or `2t + 1`) at bank offsets
//!   `8t` and columns `g`: all 32 banks, conflict-free.
//! - O staging: lane `(g, t)` holds columns `2t, 2t + 1` of row `g`, stored as one 8-byte
//!   `st.shared.v2.f32` (served per half-warp: `g` in `0..4` or `4..8`). Staged rows of `D + 8`
//!   words (`≡ 8 mod 32`) put a half-warp's pairs at banks `8·(g mod 4) + 2t, +1`: all 32,
//!   conflict-free. (Rows of `D + 4` words would put two scalar stores per pair on banks
//!   `4g + 2t`, which rows `g` and `g + 1` share: 2 wavefronts each.)

use super::super::ext::AttentionBuilderExt;
use super::elem::TcElem;
use super::plan::TcPlan;
use crate::builder::{FragA, FragB, FragC, KernelBuilder, Reg, F32, M16N8K8, TF32, U32};

impl TcElem for F32 {
    const BYTES: u32 = 4;
    const SIGN_BITS: u32 = 0x8000_0000;
    const STAGE_PAD_BYTES: u32 = 32;
    type Shape = M16N8K8;
    type QFrag = FragA<M16N8K8, TF32>;
    type PFrag = FragA<M16N8K8, TF32>;

    fn zero_acc(k: &mut KernelBuilder) -> FragC<M16N8K8, F32> {
        k.frag_c_zero::<M16N8K8, TF32, F32>()
    }

    fn new_acc(k: &mut KernelBuilder) -> FragC<M16N8K8, F32> {
        k.frag_c_uninit::<M16N8K8, TF32, F32>()
    }

    fn load_q(k: &mut KernelBuilder, q_lane: Reg<U32>, offset: i32) -> Self::QFrag {
        k.ldmatrix_tf32_a(q_lane, offset)
    }

    fn score_pair(
        k: &mut KernelBuilder,
        s: &[&[FragC<M16N8K8, F32>]],
        c: &[&[FragC<M16N8K8, F32>]],
        q: &[Self::QFrag],
        k_lane: Reg<U32>,
        offset: i32,
    ) {
        let (b0, b1) = k.ldmatrix_tf32_b_pair(k_lane, offset);
        for ((s, c), q) in s.iter().zip(c).zip(q) {
            k.mma_into(&s[0], q, &b0, &c[0]);
            k.mma_into(&s[1], q, &b1, &c[1]);
        }
    }

    /// Key `2·quad`, column `group` (`quad = lane % 4`, `group = lane / 4`).
    fn v_lane(
        k: &mut KernelBuilder,
        plan: &TcPlan,
        lane: Reg<U32>,
        _lane16: Reg<U32>,
        _half_bytes: Reg<U32>,
    ) -> Reg<U32> {
        let quad = k.and(lane, 3u32);
        let key = k.shl(quad, 1u32);
        let group = k.shr(lane, 2u32);
        let col_bytes = k.shl(group, 2u32);
        k.mad_lo(key, plan.row_bytes(), col_bytes)
    }

    fn p_fragments(k: &mut KernelBuilder, p: &[[Reg<F32>; 4]]) -> Vec<Self::PFrag> {
        p.iter()
            .map(|tile| {
                let regs = [tile[0], tile[2], tile[1], tile[3]].map(|x| k.to_tf32(x));
                FragA::from_regs(&regs)
            })
            .collect()
    }

    /// Per 8-key tile `i` and 8-column O tile `n`: `b = (V[8i + 2t][8n + g], V[8i + 2t + 1][8n
    /// + g])` rounded to tf32, one mma per m16 tile of the warp.
    fn accumulate_pv(
        k: &mut KernelBuilder,
        plan: &TcPlan,
        o: &[&[FragC<M16N8K8, F32>]],
        p: &[&[Self::PFrag]],
        v_lane: Reg<U32>,
    ) {
        let row = plan.row_bytes();
        for i in 0..plan.block_n as usize / 8 {
            for n in 0..o.first().map_or(0, |o| o.len()) {
                let offset = i as u32 * 8 * row + n as u32 * 32;
                let regs = [0, row].map(|r| {
                    let x = k.ld_shared::<F32>(v_lane, (offset + r) as i32);
                    k.to_tf32(x)
                });
                let b = FragB::from_regs(&regs);
                for (o, p) in o.iter().zip(p) {
                    k.mma_into(&o[n], &p[i], &b, &o[n]);
                }
            }
        }
    }

    fn stage_pair(k: &mut KernelBuilder, at: Reg<U32>, offset: i32, lo: Reg<F32>, hi: Reg<F32>) {
        k.st_shared_n(at, offset, &[lo, hi]);
    }
}
