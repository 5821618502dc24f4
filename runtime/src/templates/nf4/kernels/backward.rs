//! Backward with respect to the input: `G_A[i, l] = Σ_j G_C[i, j] · Ŵ[j, l]` (any `m`).
//!
//! A block of 256 threads computes a 64 × 64 tile of `G_A` (rows `i`, columns `l`), stepping
//! over the reduction index `j` in slices of [`TILE_R`] = 32. Per slice it stages
//! `G_C[i0.., j0..]` *transposed* (`g_tile[j][i]`, row stride [`G_STRIDE`] = 68 words) and the
//! dequantised `Ŵ[j0.., l0..]` as it lies (`w_tile[j][l]`, stride 64), then takes one outer
//! product per `j`: each thread owns rows `i = 16·wm + 4·lm + a` and columns
//! `l = 32·wn + 4·ln + b` (`a, b < 4`) and reads one 16-byte vector from each tile per `j`.
//!
//! Bank conflicts (one wavefront per shared request):
//! - inner loop: a warp reads 16 consecutive words of `g_tile` and 32 of `w_tile`;
//! - staging `G_C`: a warp request covers 8 consecutive `j` × 4 consecutive `i`; with
//!   `G_STRIDE ≡ 4 (mod 32)` the words `68·j + i ≡ 4·j + i` hit 32 distinct banks, and the global
//!   reads are 32-byte row segments;
//! - staging `Ŵ`: one row of 64 weights per request, even/odd store order swapped between the
//!   half-warps (as in the forward GEMM).
//!
//! The sum over `j` runs in ascending order (deterministic; no atomics).

use super::gemm::stage_weight_rows;
use super::{
    absmax_at, activation_or_zero, both_below, entry_prologue, store_output, Entry, MapCopy,
    BACKWARD_INPUT_ENTRY, THREADS, TILE_M, TILE_N, WARPS,
};
use crate::builder::{Float, KernelBuilder, Reg, SharedArr, F32, U32};
use crate::templates::nf4::Nf4Config;

/// The reduction (`n`) slice staged per step.
pub const TILE_R: u32 = 32;
/// Row stride of the transposed `G_C` tile in words (`≡ 4 mod 32`, a multiple of 4).
pub const G_STRIDE: u32 = TILE_M + 4;
/// Row stride of the weight tile in words.
pub const W_STRIDE: u32 = TILE_N;

struct Coords {
    tid: Reg<U32>,
    warp: Reg<U32>,
    lane: Reg<U32>,
    /// First `G_A` row / column of the block's tile.
    m_base: Reg<U32>,
    l_base: Reg<U32>,
    /// Micro-tile origin within the tile: rows `row0 .. row0 + 4`, columns `col0 .. col0 + 4`.
    row0: Reg<U32>,
    col0: Reg<U32>,
}

/// Builds the `nf4_backward_input` entry. Grid: `(ceil(k / 64), ceil(m / 64))` blocks of 256
/// threads; static shared memory only.
pub(super) fn build<T: Float>(cfg: &Nf4Config) -> KernelBuilder {
    let mut k = KernelBuilder::new(BACKWARD_INPUT_ENTRY, cfg.arch);
    k.require_block([THREADS, 1, 1]);
    let e = entry_prologue::<T>(&mut k, cfg, ("g_c", "g_a"), MapCopy::Global);
    let g_tile = k.shared_array::<F32>("g_tile", TILE_R * G_STRIDE);
    let w_tile = k.shared_array::<F32>("w_tile", TILE_R * W_STRIDE);
    let c = coords(&mut k);
    let acc: [[Reg<F32>; 4]; 4] = std::array::from_fn(|_| std::array::from_fn(|_| k.var(0.0f32)));
    k.for_range(0u32, cfg.n, TILE_R, |k, j0| {
        stage_output_grads(k, cfg, &e, &c, g_tile, j0);
        stage_weights(k, cfg, &e, &c, w_tile, j0);
        k.bar_sync();
        outer_products(k, &c, g_tile, w_tile, &acc);
        k.bar_sync();
    });
    store_tile(&mut k, cfg, &e, &c, &acc);
    k
}

fn coords(k: &mut KernelBuilder) -> Coords {
    let tid = k.tid_x();
    let warp = k.shr(tid, 5u32);
    let lane = k.and(tid, 31u32);
    let (bx, by) = (k.ctaid_x(), k.ctaid_y());
    let m_base = k.mul_lo(by, TILE_M);
    let l_base = k.mul_lo(bx, TILE_N);
    let wm = k.shr(warp, 1u32);
    let wn = k.and(warp, 1u32);
    let lm = k.shr(lane, 3u32);
    let ln = k.and(lane, 7u32);
    let lm4 = k.shl(lm, 2u32);
    let ln4 = k.shl(ln, 2u32);
    let row0 = k.mad_lo(wm, 16u32, lm4);
    let col0 = k.mad_lo(wn, 32u32, ln4);
    Coords {
        tid,
        warp,
        lane,
        m_base,
        l_base,
        row0,
        col0,
    }
}

/// `g_tile[jj][ii] = G_C[m_base + ii, j0 + jj]` (0 outside `G_C`). Element `p = 256·s + tid` of
/// the slice is `jj = 8·(s / 2) + p mod 8`, `ii = 32·(s mod 2) + tid / 8`.
fn stage_output_grads<T: Float>(
    k: &mut KernelBuilder,
    cfg: &Nf4Config,
    e: &Entry<T>,
    c: &Coords,
    g_tile: SharedArr<F32>,
    j0: Reg<U32>,
) {
    k.comment("stage G_C[m0.., j0..] transposed, as f32");
    let jj = k.and(c.tid, 7u32);
    let ii = k.shr(c.tid, 3u32);
    let slot_index = k.mad_lo(jj, G_STRIDE, ii);
    let slot = k.shared_elem(g_tile, slot_index);
    let m_lo = k.add(c.m_base, ii);
    let j_lo = k.add(j0, jj);
    for s in 0..TILE_R * TILE_M / THREADS {
        let (j_step, i_step) = (8 * (s / 2), 32 * (s % 2));
        let m = k.add(m_lo, i_step);
        let j = k.add(j_lo, j_step);
        let inside = both_below(k, m, e.m, j, cfg.n);
        let value = activation_or_zero(k, e.input, inside, |k| k.mad_lo(m, cfg.n, j));
        let offset = 4 * (j_step * G_STRIDE + i_step) as i32;
        k.st_shared(slot, offset, value);
    }
}

/// `w_tile[jj][t] = Ŵ[j0 + jj, l_base + t]` (0 outside `W`), each byte's absmax from global
/// memory ([`stage_weight_rows`]).
fn stage_weights<T: Float>(
    k: &mut KernelBuilder,
    cfg: &Nf4Config,
    e: &Entry<T>,
    c: &Coords,
    w_tile: SharedArr<F32>,
    j0: Reg<U32>,
) {
    k.comment("stage dequantised W[j0.., l0..]");
    stage_weight_rows(
        k,
        (cfg, e),
        (c.warp, c.lane),
        (w_tile, W_STRIDE, TILE_R / WARPS),
        (j0, c.l_base),
        &|k, _, row, col| {
            let element = k.mad_lo(row, cfg.k, col);
            absmax_at(k, &e.weights, element)
        },
    );
}

/// `acc[a][b] += g_tile[jj][row0 + a] · w_tile[jj][col0 + b]` for `jj` ascending.
fn outer_products(
    k: &mut KernelBuilder,
    c: &Coords,
    g_tile: SharedArr<F32>,
    w_tile: SharedArr<F32>,
    acc: &[[Reg<F32>; 4]; 4],
) {
    k.comment("outer products over the staged slice (4x4 register tile per thread)");
    let g_frag = k.shared_elem(g_tile, c.row0);
    let w_frag = k.shared_elem(w_tile, c.col0);
    for jj in 0..TILE_R as i32 {
        let g = k.ld_shared_v4::<F32>(g_frag, 4 * jj * G_STRIDE as i32);
        let w = k.ld_shared_v4::<F32>(w_frag, 4 * jj * W_STRIDE as i32);
        for (a, row) in acc.iter().enumerate() {
            for (b, &cell) in row.iter().enumerate() {
                k.fma_into(cell, g[a], w[b], cell);
            }
        }
    }
}

/// `G_A[m_base + row0 + a, l_base + col0 + b] = acc[a][b]` where inside `G_A`.
fn store_tile<T: Float>(
    k: &mut KernelBuilder,
    cfg: &Nf4Config,
    e: &Entry<T>,
    c: &Coords,
    acc: &[[Reg<F32>; 4]; 4],
) {
    k.comment("store the G_A tile");
    let m0 = k.add(c.m_base, c.row0);
    let l0 = k.add(c.l_base, c.col0);
    for (a, row) in acc.iter().enumerate() {
        let m = k.add(m0, a as u32);
        for (b, &cell) in row.iter().enumerate() {
            let l = k.add(l0, b as u32);
            let inside = both_below(k, m, e.m, l, cfg.k);
            k.if_then(inside, |k| {
                let index = k.mad_lo(m, cfg.k, l);
                store_output(k, e.output, index, cell);
            });
        }
    }
}
