//! f32 operands on tf32 tensor cores (`allow_tf32`): the same 64 × 64 tile, ring and byte
//! layout as f16/bf16, with 16 f32 of K per stage row (64 bytes) and `mma.m16n8k8` with tf32
//! inputs. Per 8-deep K slice the warp loads two A fragments (`ldmatrix.x4` each, an 8 × 4 f32
//! block per matrix) and four B fragments (two untransposed `ldmatrix.x4`), rounds every
//! loaded register with `cvt.rna.tf32.f32`, and issues eight `mma.m16n8k8` (f32 accumulators).
//! A caller that owns its ring ([`super::run_ring_landing`], MoE's expert GEMMs) may instead
//! round each element once where it lands ([`TileElem::round_landed`]: every thread its own
//! copies, before the barrier that publishes the slot) and load the stored `cvt` results
//! unchanged ([`TileElem::multiply_landed_tile_in`]): each staged element is converted once per
//! block instead of once per warp that loads it.
//!
//! Numerics: each operand is rounded to 10 fraction bits (relative error ≤ 2⁻¹¹), products are
//! exact and accumulated in f32, so an output of a length-K dot product errs by about
//! `2⁻¹¹ · √K · max|a|·max|b|` for random-signed data (≤ `2⁻¹⁰ · K · …` in the worst case)
//! instead of f32's `2⁻²⁴`-scale error.

use super::{Accumulators, Geometry, TileElem, CHUNK_BYTES, ROW_BYTES, TILE_K_BYTES};
use crate::builder::{FragA, FragB, KernelBuilder, Reg, F32, M16N8K8, TF32, U32, U64};

/// Bytes of K one `m16n8k8` tf32 mma consumes (8 f32).
const SLICE_BYTES: u32 = 8 * 4;

impl TileElem for F32 {
    type Shape = M16N8K8;
    type Bits = U32;

    fn zero_acc_in(k: &mut KernelBuilder, g: Geometry) -> Accumulators<M16N8K8> {
        (0..g.warp_m_tiles)
            .map(|_| {
                (0..g.warp_n_tiles)
                    .map(|_| k.frag_c_zero::<M16N8K8, TF32, F32>())
                    .collect()
            })
            .collect()
    }

    fn multiply_tile_in(
        k: &mut KernelBuilder,
        g: Geometry,
        acc: &mut [Accumulators<M16N8K8>],
        a_at: Reg<U32>,
        b_at: &[Reg<U32>],
    ) {
        multiply(k, g, acc, a_at, b_at, &LOADS_ROUNDING);
    }

    const ROUNDS_ON_LANDING: bool = true;

    /// One `ld.shared` (`.v4` for a 16-byte piece), a `cvt.rna.tf32.f32` per element and one
    /// `st.shared` of the results' bits.
    fn round_landed(k: &mut KernelBuilder, addr: Reg<U32>, offset: i32, elems: u32) {
        if elems == 4 {
            let v = k.ld_shared_v4::<F32>(addr, offset);
            let t = v.map(|x| k.to_tf32(x));
            k.st_shared_v4::<TF32>(addr, offset, t);
        } else {
            for e in 0..elems as i32 {
                let x = k.ld_shared::<F32>(addr, offset + 4 * e);
                let t = k.to_tf32(x);
                k.st_shared::<TF32>(addr, offset + 4 * e, t);
            }
        }
    }

    fn multiply_landed_tile_in(
        k: &mut KernelBuilder,
        g: Geometry,
        acc: &mut [Accumulators<M16N8K8>],
        a_at: Reg<U32>,
        b_at: &[Reg<U32>],
    ) {
        multiply(k, g, acc, a_at, b_at, &LOADS_STORED);
    }

    /// Two `st.global.f32` (the outputs stay f32).
    fn store_pair(k: &mut KernelBuilder, addr: Reg<U64>, offset: i32, lo: Reg<F32>, hi: Reg<F32>) {
        k.st_global(addr, offset, lo);
        k.st_global(addr, offset + 4, hi);
    }
}

/// Two B fragments side by side.
type BPair = (FragB<M16N8K8, TF32>, FragB<M16N8K8, TF32>);

/// How a K slice's fragments come out of shared memory.
struct Loads {
    a: fn(&mut KernelBuilder, Reg<U32>, i32) -> FragA<M16N8K8, TF32>,
    b_pair: fn(&mut KernelBuilder, Reg<U32>, i32) -> BPair,
}

/// Raw f32 tiles: every loaded register rounded.
const LOADS_ROUNDING: Loads = Loads {
    a: KernelBuilder::ldmatrix_tf32_a,
    b_pair: KernelBuilder::ldmatrix_tf32_b_pair,
};

/// Tiles rounded where they landed ([`TileElem::round_landed`]).
const LOADS_STORED: Loads = Loads {
    a: KernelBuilder::ldmatrix_tf32_a_stored,
    b_pair: KernelBuilder::ldmatrix_tf32_b_pair_stored,
};

/// One K tile of the warp's quadrant in geometry `g` for every B operand: per 8-deep slice
/// `wm` A fragments, `wn` B fragments per operand (`loads`), `wm · wn` `mma.m16n8k8` per
/// operand (32 × 32, 2 × 4, for [`Geometry::SQUARE`]).
fn multiply(
    k: &mut KernelBuilder,
    g: Geometry,
    acc: &mut [Accumulators<M16N8K8>],
    a_at: Reg<U32>,
    b_at: &[Reg<U32>],
    loads: &Loads,
) {
    for ks in 0..TILE_K_BYTES / SLICE_BYTES {
        let a: Vec<FragA<M16N8K8, TF32>> = (0..g.warp_m_tiles)
            .map(|mi| (loads.a)(k, a_at, (mi * 16 * ROW_BYTES + ks * SLICE_BYTES) as i32))
            .collect();
        for (&b_at, acc) in b_at.iter().zip(acc.iter_mut()) {
            let b: Vec<FragB<M16N8K8, TF32>> = (0..g.warp_n_tiles / 2)
                .flat_map(|pair| {
                    let off = pair * 16 * ROW_BYTES + ks * SLICE_BYTES;
                    let (lo, hi) = (loads.b_pair)(k, b_at, off as i32);
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

// A 16-byte chunk is four f32: one `ldmatrix` row is one chunk for every element width.
const _: () = assert!(CHUNK_BYTES == 4 * 4 && TILE_K_BYTES.is_multiple_of(SLICE_BYTES));
