//! The tiled NF4 GEMMs for f32 activations on tf32 tensor cores (`allow_tf32`, sm_80+), on the
//! shared 64 × 64 block tile of [`crate::templates::warp_mma`] (4 warps, 3-stage ring, 16 f32
//! of reduction per stage, `ldmatrix` + `cvt.rna.tf32.f32`, `mma.m16n8k8`, f32 accumulators):
//!
//! - forward `nf4_gemm`: `C [m, n] = A · Ŵᵀ`; A tile `A[m_base.., k0..]`, B tile `Ŵ[n_base + r,
//!   k0 + c]` (Ŵ rows are the mma's columns and contiguous along the reduction);
//! - backward `nf4_backward_input`: `G_A [m, k] = G_C · Ŵ`; A tile `G_C[m_base.., j0..]`, B tile
//!   `Ŵ[j0 + c, l_base + r]` (the transpose, written so by the fill).
//!
//! Same entry names, parameters and grid as the CUDA-core GEMMs; blocks of
//! [`tile::THREADS`] threads ([`super::gemm_threads`]). The activation rows go by 16-byte
//! `cp.async` (zero-filled past the edge), so their length (`k` forward, `n` backward) must be a
//! multiple of 4 ([`takes`]). The weight tile is dequantised by the fill itself: each thread
//! decodes two 4-element chunks (`NF4_CODE[code] · absmax`, exactly the host's `mul.rn.f32`;
//! zero outside the weight) and stores each with one `st.shared.v4` into the ring slot being
//! refilled. The ring's barrier discipline already orders those plain stores: a slot is
//! refilled only after the barrier that follows its last reader, and read only after the
//! barrier that follows its fill.

use super::{absmax_at, both_below, dequant, entry_prologue, load_byte, nibble, Entry};
use super::{BACKWARD_INPUT_ENTRY, GEMM_ENTRY, TILE_M, TILE_N};
use crate::builder::{KernelBuilder, Reg, F32, U16, U32};
use crate::ir::CacheLevel;
use crate::templates::nf4::Nf4Config;
use crate::templates::warp_mma::{self as tile, TileElem, WarpPos, CHUNK_BYTES};

/// f32 per 16-byte chunk.
const CHUNK: u32 = CHUNK_BYTES / 4;

/// Whether the tiled GEMMs of `cfg` run on tf32 tensor cores: f32 activations with
/// `allow_tf32`, a target with tf32 `mma`, `cp.async`, `ldmatrix` and `cvt.rna.tf32` (sm_80+),
/// and both reduction lengths (`k` forward, `n` backward) multiples of 4 (whole 16-byte
/// copies). Otherwise the CUDA-core GEMMs run, silently.
pub fn takes(cfg: &Nf4Config) -> bool {
    cfg.allow_tf32
        && cfg.dtype == crate::dtype::DType::F32
        && super::tc::tensor_cores(cfg)
        && cfg.k.is_multiple_of(CHUNK)
        && cfg.n.is_multiple_of(CHUNK)
}

/// Which GEMM: where the weight tile comes from.
#[derive(Clone, Copy)]
enum Gemm {
    /// B tile `[r][c] = Ŵ[n_base + r, k0 + c]`.
    Forward,
    /// B tile `[r][c] = Ŵ[j0 + c, l_base + r]`.
    BackwardInput,
}

/// Builds the tf32 `nf4_gemm` entry (grid `(ceil(n / 64), ceil(m / 64))`).
pub(super) fn build_gemm(cfg: &Nf4Config) -> KernelBuilder {
    build(cfg, Gemm::Forward)
}

/// Builds the tf32 `nf4_backward_input` entry (grid `(ceil(k / 64), ceil(m / 64))`).
pub(super) fn build_backward(cfg: &Nf4Config) -> KernelBuilder {
    build(cfg, Gemm::BackwardInput)
}

fn build(cfg: &Nf4Config, gemm: Gemm) -> KernelBuilder {
    let (name, input, output, len, cols) = match gemm {
        Gemm::Forward => (GEMM_ENTRY, "a", "c", cfg.k, cfg.n),
        Gemm::BackwardInput => (BACKWARD_INPUT_ENTRY, "g_c", "g_a", cfg.n, cfg.k),
    };
    let mut k = KernelBuilder::new(name, cfg.arch);
    k.require_block([tile::THREADS, 1, 1]);
    let e = entry_prologue::<F32>(&mut k, cfg, input, output);
    let (tid, pos) = WarpPos::of_thread(&mut k);
    let bx = k.ctaid_x();
    let by = k.ctaid_y();
    let col_base = k.mul_lo(bx, TILE_N);
    let m_base = k.mul_lo(by, TILE_M);
    let a_ring = tile::ring::<F32>(&mut k, "a_ring");
    let b_ring = tile::ring::<F32>(&mut k, "b_ring");
    let chunks: Vec<_> = (0..tile::CHUNKS_PER_THREAD)
        .map(|i| tile::chunk_slot_bytes(&mut k, tid, i, 4))
        .collect();
    let fill = |k: &mut KernelBuilder, k_tile: Reg<U32>, slot: Reg<U32>| {
        let k0 = k.mul_lo(k_tile, F32::TILE_K);
        let a_stage = tile::stage_base(k, a_ring, slot);
        let b_stage = tile::stage_base(k, b_ring, slot);
        for &(row, col, at) in &chunks {
            k.comment("cp.async four activations");
            let grow = k.add(m_base, row);
            let gcol = k.add(k0, col);
            let inside = both_below(k, grow, e.m, gcol, len);
            let index = k.mad_lo(grow, len, gcol);
            let index = k.selp(index, 0u32, inside);
            let src = k.elem_addr(e.input, index);
            let dst = k.add(a_stage, at);
            let src_bytes = k.selp(CHUNK_BYTES, 0u32, inside);
            k.cp_async_zfill(CacheLevel::Cg, dst, src, CHUNK_BYTES, src_bytes);
            k.comment("dequantise four weights into the B tile");
            let out_col = k.add(col_base, row);
            let values: Vec<Reg<F32>> = match gemm {
                Gemm::Forward => weights_or_zero(k, cfg, &e, (out_col, gcol), CHUNK),
                Gemm::BackwardInput => (0..CHUNK)
                    .flat_map(|i| {
                        let red = k.add(gcol, i);
                        weights_or_zero(k, cfg, &e, (red, out_col), 1)
                    })
                    .collect(),
            };
            let dst = k.add(b_stage, at);
            k.st_shared_v4(dst, 0, [values[0], values[1], values[2], values[3]]);
        }
    };
    let mut acc = vec![F32::zero_acc(&mut k)];
    let (a_lane, b_lane) = pos.fragment_offsets(&mut k, 4);
    tile::run_ring(&mut k, len.div_ceil(F32::TILE_K), &fill, &mut |k, slot| {
        let a_stage = tile::stage_base(k, a_ring, slot);
        let a_at = k.add(a_stage, a_lane);
        let b_stage = tile::stage_base(k, b_ring, slot);
        let b_at = k.add(b_stage, b_lane);
        F32::multiply_tile(k, &mut acc, a_at, &[b_at]);
    });
    store(&mut k, &pos, &e, m_base, col_base, cols, &acc[0]);
    k
}

/// `Ŵ[row, col .. col + count]` (`NF4_CODE[code] · absmax`), zeros outside the `n × k`
/// weight; `count` is 1, or 4 with `col` and `k` multiples of 4: then the four codes are the
/// two bytes at an even byte index (one `u16` load, little-endian: elements 0, 1 are the high
/// and low nibble of the first byte) and share one quantisation block (blocks are ≥ 32
/// elements and the chunk starts at a multiple of 4).
fn weights_or_zero(
    k: &mut KernelBuilder,
    cfg: &Nf4Config,
    e: &Entry<F32>,
    (row, col): (Reg<U32>, Reg<U32>),
    count: u32,
) -> Vec<Reg<F32>> {
    let values: Vec<Reg<F32>> = (0..count).map(|_| k.var::<F32>(0.0f32)).collect();
    let inside = both_below(k, row, cfg.n, col, cfg.k);
    k.if_then(inside, |k| {
        let element = k.mad_lo(row, cfg.k, col);
        let byte_index = k.shr(element, 1u32);
        let addr = k.elem_addr(e.weights.packed, byte_index);
        let codes: Vec<Reg<U32>> = if count == 1 {
            // Element 2j is the high nibble of byte j.
            let byte = load_byte(k, addr);
            let odd = k.and(element, 1u32);
            let low_bits = k.shl(odd, 2u32);
            let shift = k.sub(4u32, low_bits);
            let shifted = k.shr(byte, shift);
            vec![nibble(k, shifted, 0)]
        } else {
            let pair = k.ld_global_nc::<U16>(addr, 0);
            let bits = k.cvt::<U32, U16>(pair, None);
            [4, 0, 12, 8].map(|shift| nibble(k, bits, shift)).to_vec()
        };
        let absmax = absmax_at(k, &e.weights, element);
        for (&value, code) in values.iter().zip(codes) {
            let w = dequant(k, &e.weights, code, absmax);
            k.assign(value, w);
        }
    });
    values
}

/// `out[m_base + r, col_base + c] = acc` inside `m × cols` (f32, one store per element).
fn store(
    k: &mut KernelBuilder,
    pos: &WarpPos,
    e: &Entry<F32>,
    m_base: Reg<U32>,
    col_base: Reg<U32>,
    cols: u32,
    acc: &tile::Accumulators<<F32 as TileElem>::Shape>,
) {
    k.comment("store the output tile");
    let (row0, col0) = pos.output_origin(k);
    let row0 = k.add(m_base, row0);
    let col0 = k.add(col_base, col0);
    for (mi, frags) in acc.iter().enumerate() {
        for (ni, frag) in frags.iter().enumerate() {
            for (i, v) in frag.f32_regs().into_iter().enumerate() {
                let i = i as u32;
                let row = k.add(row0, 16 * mi as u32 + 8 * (i / 2));
                let col = k.add(col0, 8 * ni as u32 + i % 2);
                let inside = both_below(k, row, e.m, col, cols);
                k.if_then(inside, |k| {
                    let index = k.mad_lo(row, cols, col);
                    super::store_output(k, e.output, index, v);
                });
            }
        }
    }
}
