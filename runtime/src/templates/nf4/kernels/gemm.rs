//! Tiled forward GEMM for any `m`: `C[i, j] = Σ_l A[i, l] · Ŵ[j, l]`.
//!
//! A block of 256 threads computes a `TILE_M × TILE_N` (64 × 64) tile of `C`, stepping over `k`
//! in slices of [`TILE_K`] = 32: it stages the activation slice `A[i0.., l0..]` (widened to f32)
//! and the *dequantised* weight slice `Ŵ[j0.., l0..]` in shared memory, both row-major along
//! `l` with a row stride of [`STRIDE`] = 36 words, synchronises, and multiplies.
//!
//! Register blocking: each thread owns a 4 × 4 micro-tile, rows `i = 16·wm + lm + 4a` and
//! columns `j = 32·wn + ln + 8b` (warp `w = 2·wm + wn`, lane `= 8·lm + ln`). Per step of 4
//! along `l` it reads four `A` and four `Ŵ` 16-byte vectors and does 64 FMAs.
//!
//! Bank conflicts (one wavefront per shared request everywhere):
//! - inner loop, `A`: a warp reads 4 rows `i..i+4` at one `l` → 4 distinct 16-byte vectors
//!   at word offsets `36·i + l ≡ 4·i + l (mod 32)`: 16 words in 16 banks;
//! - inner loop, `Ŵ`: 8 consecutive rows → `4·j + l` covers all 32 banks once;
//! - staging `A`: a warp writes one row, lane = `l`: 32 consecutive words;
//! - staging `Ŵ`: a warp writes two rows (16 bytes = 32 weights each); lanes 0–15 store their
//!   even element first and lanes 16–31 their odd one, so each store touches 16 even and 16 odd
//!   banks;
//! - code-table lookups touch at most 16 words in 16 banks.
//!
//! Partial tiles are handled by predication (out-of-range activations and weights stage as 0;
//! out-of-range outputs are not stored); every thread reaches every barrier.

use super::{
    absmax_at, both_below, dequant, entry_prologue, load_activation, load_byte, nibble,
    store_output, Entry, MapCopy, GEMM_ENTRY, THREADS, TILE_M, TILE_N, WARPS,
};
use crate::builder::{Float, KernelBuilder, Pred, Reg, SharedArr, F32, U32};
use crate::ir::CmpOp;
use crate::templates::nf4::Nf4Config;

/// The `k` slice staged per step.
pub const TILE_K: u32 = 32;
/// Row stride of both staged tiles in words (`TILE_K + 4`: keeps 16-byte alignment and puts
/// consecutive rows 4 banks apart).
pub const STRIDE: u32 = TILE_K + 4;
/// Bytes of one staged row.
const ROW_BYTES: i32 = (STRIDE * 4) as i32;

/// Thread coordinates used by the phases.
struct Coords {
    warp: Reg<U32>,
    lane: Reg<U32>,
    /// First `C` row / column of the block's tile.
    m_base: Reg<U32>,
    n_base: Reg<U32>,
    /// Micro-tile origin within the tile: rows `row0 + 4a`, columns `col0 + 8b`.
    row0: Reg<U32>,
    col0: Reg<U32>,
}

/// Builds the `nf4_gemm` entry. Grid: `(ceil(n / 64), ceil(m / 64))` blocks of 256 threads;
/// static shared memory only.
pub(super) fn build<T: Float>(cfg: &Nf4Config) -> KernelBuilder {
    let mut k = KernelBuilder::new(GEMM_ENTRY, cfg.arch);
    k.require_block([THREADS, 1, 1]);
    let e = entry_prologue::<T>(&mut k, cfg, ("a", "c"), MapCopy::Global);
    let a_tile = k.shared_array::<F32>("a_tile", TILE_M * STRIDE);
    let w_tile = k.shared_array::<F32>("w_tile", TILE_N * STRIDE);
    let c = coords(&mut k);
    let acc: [[Reg<F32>; 4]; 4] = std::array::from_fn(|_| std::array::from_fn(|_| k.var(0.0f32)));
    k.for_range(0u32, cfg.k, TILE_K, |k, l0| {
        stage_activations(k, cfg, &e, &c, a_tile, l0);
        stage_weights(k, cfg, &e, &c, w_tile, l0);
        k.bar_sync();
        multiply_tiles(k, &c, a_tile, w_tile, &acc);
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
    let n_base = k.mul_lo(bx, TILE_N);
    let wm = k.shr(warp, 1u32);
    let wn = k.and(warp, 1u32);
    let lm = k.shr(lane, 3u32);
    let ln = k.and(lane, 7u32);
    let row0 = k.mad_lo(wm, 16u32, lm);
    let col0 = k.mad_lo(wn, 32u32, ln);
    Coords {
        warp,
        lane,
        m_base,
        n_base,
        row0,
        col0,
    }
}

/// `a_tile[r][t] = A[m_base + r, l0 + t]` (0 outside `A`); warp `w` stages rows `8w .. 8w + 8`,
/// lane = `t`, so each global request reads one contiguous row segment.
fn stage_activations<T: Float>(
    k: &mut KernelBuilder,
    cfg: &Nf4Config,
    e: &Entry<T>,
    c: &Coords,
    a_tile: SharedArr<F32>,
    l0: Reg<U32>,
) {
    k.comment("stage A[m0.., l0..] as f32");
    let rows_per_warp = TILE_M / WARPS;
    let first_row = k.mul_lo(c.warp, rows_per_warp);
    let slot_index = k.mad_lo(first_row, STRIDE, c.lane);
    let slot = k.shared_elem(a_tile, slot_index);
    let m0 = k.add(c.m_base, first_row);
    let col = k.add(l0, c.lane);
    for r in 0..rows_per_warp {
        let m = k.add(m0, r);
        let inside = both_below(k, m, e.m, col, cfg.k);
        let value = k.var::<F32>(0.0f32);
        k.if_then(inside, |k| {
            let index = k.mad_lo(m, cfg.k, col);
            let v = load_activation(k, e.input, index);
            k.assign(value, v);
        });
        k.st_shared(slot, r as i32 * ROW_BYTES, value);
    }
}

/// `w_tile[r][t] = Ŵ[n_base + r, l0 + t]` (0 outside `W`); warp `w` stages rows `8w .. 8w + 8`,
/// two per step (lanes 0–15 and 16–31), one packed byte = two weights per lane.
fn stage_weights<T: Float>(
    k: &mut KernelBuilder,
    cfg: &Nf4Config,
    e: &Entry<T>,
    c: &Coords,
    w_tile: SharedArr<F32>,
    l0: Reg<U32>,
) {
    k.comment("stage dequantised W[n0.., l0..]");
    let rows_per_warp = TILE_N / WARPS;
    let upper = k.shr(c.lane, 4u32);
    let byte_in_row = k.and(c.lane, 15u32);
    let is_upper = k.setp(CmpOp::Ne, upper, 0u32);
    let row = k.mad_lo(c.warp, rows_per_warp, upper);
    let even_col = k.shl(byte_in_row, 1u32);
    // Lower half-warp stores (even, odd), upper half-warp (odd, even): no bank is hit twice.
    let first_col = k.add(even_col, upper);
    let odd_col = k.add(even_col, 1u32);
    let second_col = k.sub(odd_col, upper);
    let row_slot = k.mul_lo(row, STRIDE);
    let first_index = k.add(row_slot, first_col);
    let second_index = k.add(row_slot, second_col);
    let first_slot = k.shared_elem(w_tile, first_index);
    let second_slot = k.shared_elem(w_tile, second_index);
    let n0 = k.add(c.n_base, row);
    let col = k.add(l0, even_col);
    for step in 0..rows_per_warp / 2 {
        let n = k.add(n0, 2 * step);
        let inside = both_below(k, n, cfg.n, col, cfg.k);
        let [w_even, w_odd] = dequant_pair(k, cfg, e, inside, n, col);
        let first = k.selp(w_odd, w_even, is_upper);
        let second = k.selp(w_even, w_odd, is_upper);
        let offset = (2 * step) as i32 * ROW_BYTES;
        k.st_shared(first_slot, offset, first);
        k.st_shared(second_slot, offset, second);
    }
}

/// `[Ŵ[n, col], Ŵ[n, col + 1]]` from one packed byte when `inside`, else `[0, 0]` (code 7 with
/// absmax 0, so every lane does the same shared-memory lookups).
pub(super) fn dequant_pair<T: Float>(
    k: &mut KernelBuilder,
    cfg: &Nf4Config,
    e: &Entry<T>,
    inside: Pred,
    n: Reg<U32>,
    col: Reg<U32>,
) -> [Reg<F32>; 2] {
    let packed = k.var::<U32>(0x77u32);
    let absmax = k.var::<F32>(0.0f32);
    k.if_then(inside, |k| {
        let elem = k.mad_lo(n, cfg.k, col);
        let byte = k.shr(elem, 1u32);
        let addr = k.elem_addr(e.weights.packed, byte);
        let b = load_byte(k, addr);
        k.assign(packed, b);
        let a = absmax_at(k, &e.weights, elem);
        k.assign(absmax, a);
    });
    let hi = nibble(k, packed, 4);
    let lo = nibble(k, packed, 0);
    [
        dequant(k, &e.weights, hi, absmax),
        dequant(k, &e.weights, lo, absmax),
    ]
}

/// `acc[a][b] += Σ_t a_tile[row0 + 4a][t] · w_tile[col0 + 8b][t]` over the staged slice, four
/// `t` at a time (t ascending).
fn multiply_tiles(
    k: &mut KernelBuilder,
    c: &Coords,
    a_tile: SharedArr<F32>,
    w_tile: SharedArr<F32>,
    acc: &[[Reg<F32>; 4]; 4],
) {
    k.comment("multiply the staged slices (4x4 register tile per thread)");
    let a_index = k.mul_lo(c.row0, STRIDE);
    let w_index = k.mul_lo(c.col0, STRIDE);
    let a_frag = k.shared_elem(a_tile, a_index);
    let w_frag = k.shared_elem(w_tile, w_index);
    for quad in 0..(TILE_K / 4) as i32 {
        let a: [[Reg<F32>; 4]; 4] = std::array::from_fn(|i| {
            k.ld_shared_v4::<F32>(a_frag, 4 * i as i32 * ROW_BYTES + 16 * quad)
        });
        let w: [[Reg<F32>; 4]; 4] = std::array::from_fn(|j| {
            k.ld_shared_v4::<F32>(w_frag, 8 * j as i32 * ROW_BYTES + 16 * quad)
        });
        for t in 0..4 {
            for (i, row) in acc.iter().enumerate() {
                for (j, &cell) in row.iter().enumerate() {
                    k.fma_into(cell, a[i][t], w[j][t], cell);
                }
            }
        }
    }
}

/// `C[m_base + row0 + 4a, n_base + col0 + 8b] = acc[a][b]` where inside `C`.
fn store_tile<T: Float>(
    k: &mut KernelBuilder,
    cfg: &Nf4Config,
    e: &Entry<T>,
    c: &Coords,
    acc: &[[Reg<F32>; 4]; 4],
) {
    k.comment("store the C tile");
    let m0 = k.add(c.m_base, c.row0);
    let n0 = k.add(c.n_base, c.col0);
    for (i, row) in acc.iter().enumerate() {
        let m = k.add(m0, 4 * i as u32);
        for (j, &cell) in row.iter().enumerate() {
            let n = k.add(n0, 8 * j as u32);
            let inside = both_below(k, m, e.m, n, cfg.n);
            k.if_then(inside, |k| {
                let index = k.mad_lo(m, cfg.n, n);
                store_output(k, e.output, index, cell);
            });
        }
    }
}
