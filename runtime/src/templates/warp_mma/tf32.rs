//! f32 operands on tf32 tensor cores (`allow_tf32`): the same 64 × 64 tile, ring and byte
//! layout as f16/bf16, with 16 f32 of K per stage row (64 bytes) and `mma.m16n8k8` with tf32
//! inputs. Per 8-deep K slice the warp loads two A fragments (`ldmatrix.x4` each, an 8 × 4 f32
//! block per matrix) and four B fragments (two untransposed `ldmatrix.x4`), rounds every
//! loaded register with `cvt.rna.tf32.f32`, and issues eight `mma.m16n8k8` (f32 accumulators).
//!
//! Numerics: each operand is rounded to 10 fraction bits (relative error ≤ 2⁻¹¹), products are
//! exact and accumulated in f32, so an output of a length-K dot product errs by about
//! `2⁻¹¹ · √K · max|a|·max|b|` for random-signed data (≤ `2⁻¹⁰ · K · …` in the worst case)
//! instead of f32's `2⁻²⁴`-scale error.

use super::{
    Accumulators, TileElem, CHUNK_BYTES, ROW_BYTES, TILE_K_BYTES, WARP_M_TILES, WARP_N_TILES,
};
use crate::builder::{FragA, FragB, GlobalPtr, KernelBuilder, Reg, F32, M16N8K8, TF32, U32};

/// Bytes of K one `m16n8k8` tf32 mma consumes (8 f32).
const SLICE_BYTES: u32 = 8 * 4;

impl TileElem for F32 {
    type Shape = M16N8K8;
    type Bits = U32;

    fn zero_acc(k: &mut KernelBuilder) -> Accumulators<M16N8K8> {
        (0..WARP_M_TILES)
            .map(|_| {
                (0..WARP_N_TILES)
                    .map(|_| k.frag_c_zero::<M16N8K8, TF32, F32>())
                    .collect()
            })
            .collect()
    }

    fn multiply_tile(
        k: &mut KernelBuilder,
        acc: &mut [Accumulators<M16N8K8>],
        a_at: Reg<U32>,
        b_at: &[Reg<U32>],
    ) {
        for ks in 0..TILE_K_BYTES / SLICE_BYTES {
            let a: Vec<FragA<M16N8K8, TF32>> = (0..WARP_M_TILES)
                .map(|mi| {
                    let off = mi * 16 * ROW_BYTES + ks * SLICE_BYTES;
                    k.ldmatrix_tf32_a(a_at, off as i32)
                })
                .collect();
            for (&b_at, acc) in b_at.iter().zip(acc.iter_mut()) {
                let b: Vec<FragB<M16N8K8, TF32>> = (0..WARP_N_TILES / 2)
                    .flat_map(|pair| {
                        let off = pair * 16 * ROW_BYTES + ks * SLICE_BYTES;
                        let (lo, hi) = k.ldmatrix_tf32_b_pair(b_at, off as i32);
                        [lo, hi]
                    })
                    .collect();
                for (mi, row) in acc.iter_mut().enumerate() {
                    for (ni, c) in row.iter_mut().enumerate() {
                        k.mma_into(c, &a[mi], &b[ni], c);
                    }
                }
            }
        }
    }

    /// Two `st.global.f32` (the outputs stay f32).
    fn store_pair(
        k: &mut KernelBuilder,
        out: GlobalPtr<F32>,
        index: Reg<U32>,
        lo: Reg<F32>,
        hi: Reg<F32>,
    ) {
        let addr = k.elem_addr(out, index);
        k.st_global(addr, 0, lo);
        k.st_global(addr, 4, hi);
    }
}

// A 16-byte chunk is four f32: one `ldmatrix` row is one chunk for every element width.
const _: () = assert!(CHUNK_BYTES == 4 * 4 && TILE_K_BYTES.is_multiple_of(SLICE_BYTES));
