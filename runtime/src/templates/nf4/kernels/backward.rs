//! Backward with respect to the input on CUDA cores: `G_A[i, l] = Σ_j G_C[i, j] · Ŵ[j, l]`
//! (any `m`).
//!
//! A block of 256 threads computes a 64 × [`COLS`] = 64 × 256 tile of `G_A` (rows `i`, columns
//! `l`), stepping over the reduction index `j` in slices of [`TILE_R`] = 32. Per slice it
//! stages the slice's absmax of the block's columns (`absmax_stage`: a weight row's 256
//! columns reach `256 / block` absmax, 16 bytes of one sector at block 64, read by consecutive
//! threads; under double quantisation decoded from the shared map copy and the slice's nested
//! absmax), synchronises, stages `G_C[i0.., j0..]` as it lies (`g_tile[i][j]`, row stride
//! [`G_STRIDE`] = 36 words: a warp reads 32 consecutive `j` of one row per request, whole
//! sectors) and the dequantised `Ŵ[j0.., l0..]` (`w_tile[j][l]`, stride 256: a warp reads 32
//! packed bytes of a row per request), synchronises, and multiplies: each thread owns rows
//! `i = 16·wm + 4·lm + a` and columns `l = 128·wn + 32·q + 4·ln + b` (`a, b, q < 4`), and per
//! four `j` reads four 16-byte vectors of `g_tile` (its rows, four `j` each) and sixteen of
//! `w_tile` (its columns, per `j`) for 256 FMAs.
//!
//! Bank conflicts (one wavefront per shared request, wide accesses per phase):
//! - inner loop: a phase's 8 lanes (one `lm`) read one row of `g_tile` (a broadcast) and 32
//!   consecutive words of a `w_tile` row;
//! - staging `G_C`: a warp writes 32 consecutive words of one row;
//! - staging `Ŵ`: one row of 64 weights per request, even/odd store order swapped between the
//!   half-warps (as in the forward GEMM); staged absmax: consecutive words.
//!
//! The sum over `j` runs in ascending order (deterministic; no atomics).

use super::absmax_stage::{AbsmaxStage, NestedWindow};
use super::code_stage::CodeWindow;
use super::gemm::stage_weight_rows;
use super::{
    activation_or_zero, both_below, entry_prologue, store_output, Entry, BACKWARD_INPUT_ENTRY,
    THREADS, TILE_M, WARPS,
};
use crate::builder::{Float, KernelBuilder, Reg, SharedArr, F32, U32};
use crate::templates::nf4::Nf4Config;

/// Columns of `G_A` per block: a weight row's 128 packed bytes (four sectors) and its absmax
/// of them (one sector up to 8 values) per slice.
pub const COLS: u32 = 256;
/// The reduction (`n`) slice staged per step.
pub const TILE_R: u32 = 32;
/// Row stride of the `G_C` tile in words (`≡ 4 mod 32`, a multiple of 4).
pub const G_STRIDE: u32 = TILE_R + 4;
/// Row stride of the weight tile in words.
pub const W_STRIDE: u32 = COLS;
/// Column vectors (4 wide, 32 apart) per thread.
const COL_VECTORS: u32 = 4;

/// A thread's accumulators: `acc[a][q][b]` for row `row0 + a`, column `col0 + 32q + b`.
type Accumulators = [[[Reg<F32>; 4]; COL_VECTORS as usize]; 4];

struct Coords {
    tid: Reg<U32>,
    warp: Reg<U32>,
    lane: Reg<U32>,
    /// First `G_A` row / column of the block's tile.
    m_base: Reg<U32>,
    l_base: Reg<U32>,
    /// Micro-tile origin within the tile: rows `row0 .. row0 + 4`, columns `col0 + 32q ..`.
    row0: Reg<U32>,
    col0: Reg<U32>,
}

/// Builds the `nf4_backward_input` entry. Grid: `(ceil(k / 256), ceil(m / 64))` blocks of 256
/// threads; static shared memory only.
pub(super) fn build<T: Float>(cfg: &Nf4Config) -> KernelBuilder {
    let mut k = KernelBuilder::new(BACKWARD_INPUT_ENTRY, cfg.arch);
    k.require_block([THREADS, 1, 1]);
    let e = entry_prologue::<T>(&mut k, cfg, ("g_c", "g_a"), THREADS);
    let g_tile = k.shared_array::<F32>("g_tile", TILE_M * G_STRIDE);
    let w_tile = k.shared_array::<F32>("w_tile", TILE_R * W_STRIDE);
    let c = coords(&mut k);
    let per_row = AbsmaxStage::per_row(cfg, COLS);
    let absmax = AbsmaxStage::new(
        &mut k,
        (cfg, &e, COLS),
        (1, TILE_R, per_row),
        (c.tid, THREADS),
    )
    .loaded();
    let nested = NestedWindow::new(&mut k, cfg, TILE_R.min(cfg.n), COLS);
    let slot = k.var::<U32>(0u32);
    let acc: Accumulators =
        std::array::from_fn(|_| std::array::from_fn(|_| std::array::from_fn(|_| k.var(0.0f32))));
    let byte0 = k.shr(c.l_base, 1u32);
    k.for_range(0u32, cfg.n, TILE_R, |k, j0| {
        let window = CodeWindow { row0: j0, byte0 };
        let weights = match &nested {
            Some(nested) => {
                let weights = nested.fill(k, &e.weights, &window, (c.tid, THREADS));
                k.bar_sync();
                weights
            }
            None => e.weights,
        };
        absmax.fill(k, &weights, &window, slot);
        k.bar_sync();
        stage_output_grads(k, cfg, &e, &c, g_tile, j0);
        stage_weights(k, (cfg, &e), &c, w_tile, (j0, &absmax, slot));
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
    let l_base = k.mul_lo(bx, COLS);
    let wm = k.shr(warp, 1u32);
    let wn = k.and(warp, 1u32);
    let lm = k.shr(lane, 3u32);
    let ln = k.and(lane, 7u32);
    let lm4 = k.shl(lm, 2u32);
    let ln4 = k.shl(ln, 2u32);
    let row0 = k.mad_lo(wm, 16u32, lm4);
    let col0 = k.mad_lo(wn, COLS / 2, ln4);
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

/// `g_tile[ii][jj] = G_C[m_base + ii, j0 + jj]` (0 outside `G_C`): warp `w` stages rows
/// `8w .. 8w + 8`, lane = `jj`, so each request reads 32 consecutive elements of a row.
fn stage_output_grads<T: Float>(
    k: &mut KernelBuilder,
    cfg: &Nf4Config,
    e: &Entry<T>,
    c: &Coords,
    g_tile: SharedArr<F32>,
    j0: Reg<U32>,
) {
    k.comment("stage G_C[m0.., j0..] as f32");
    let rows_per_warp = TILE_M / WARPS;
    let first_row = k.mul_lo(c.warp, rows_per_warp);
    let slot_index = k.mad_lo(first_row, G_STRIDE, c.lane);
    let slot = k.shared_elem(g_tile, slot_index);
    let m0 = k.add(c.m_base, first_row);
    let j = k.add(j0, c.lane);
    for r in 0..rows_per_warp {
        let m = k.add(m0, r);
        let inside = both_below(k, m, e.m, j, cfg.n);
        let value = activation_or_zero(k, e.input, inside, |k| k.mad_lo(m, cfg.n, j));
        k.st_shared(slot, 4 * (r * G_STRIDE) as i32, value);
    }
}

/// `w_tile[jj][t] = Ŵ[j0 + jj, l_base + t]` (0 outside `W`), each byte's absmax from the
/// slice's staged absmax ([`stage_weight_rows`]).
fn stage_weights<T: Float>(
    k: &mut KernelBuilder,
    (cfg, e): (&Nf4Config, &Entry<T>),
    c: &Coords,
    w_tile: SharedArr<F32>,
    (j0, absmax, slot): (Reg<U32>, &AbsmaxStage, Reg<U32>),
) {
    k.comment("stage dequantised W[j0.., l0..]");
    let rows_per_warp = TILE_R / WARPS;
    let warp_row = k.mul_lo(c.warp, rows_per_warp);
    let even_col = k.shl(c.lane, 1u32);
    let col = k.add(c.l_base, even_col);
    let reader = absmax.reader(k, c.l_base, col, warp_row);
    let base = absmax.slot(k, slot);
    let lane_j = k.add(j0, warp_row);
    let lane = absmax.lane_tile(k, &reader, base, lane_j);
    stage_weight_rows(
        k,
        (cfg, e),
        (c.warp, c.lane),
        (w_tile, W_STRIDE, rows_per_warp, COLS),
        (j0, c.l_base),
        &|k, step, group, _| absmax.read_offset(k, &lane, step, group),
    );
}

/// `acc[a][q][b] += g_tile[row0 + a][jj] · w_tile[jj][col0 + 32q + b]` for `jj` ascending.
fn outer_products(
    k: &mut KernelBuilder,
    c: &Coords,
    g_tile: SharedArr<F32>,
    w_tile: SharedArr<F32>,
    acc: &Accumulators,
) {
    k.comment("outer products over the staged slice (4 x 16 register tile per thread)");
    let g_index = k.mul_lo(c.row0, G_STRIDE);
    let g_frag = k.shared_elem(g_tile, g_index);
    let w_frag = k.shared_elem(w_tile, c.col0);
    for quad in 0..TILE_R / 4 {
        let g: [[Reg<F32>; 4]; 4] = std::array::from_fn(|a| {
            let offset = 4 * (a as u32 * G_STRIDE + 4 * quad);
            k.ld_shared_v4::<F32>(g_frag, offset as i32)
        });
        for t in 0..4 {
            let jj = 4 * quad + t;
            for q in 0..COL_VECTORS {
                let offset = 4 * (jj * W_STRIDE + 32 * q);
                let w = k.ld_shared_v4::<F32>(w_frag, offset as i32);
                for (a, row) in acc.iter().enumerate() {
                    for (b, &cell) in row[q as usize].iter().enumerate() {
                        k.fma_into(cell, g[a][t as usize], w[b], cell);
                    }
                }
            }
        }
    }
}

/// `G_A[m_base + row0 + a, l_base + col0 + 32q + b] = acc[a][q][b]` where inside `G_A`.
fn store_tile<T: Float>(
    k: &mut KernelBuilder,
    cfg: &Nf4Config,
    e: &Entry<T>,
    c: &Coords,
    acc: &Accumulators,
) {
    k.comment("store the G_A tile");
    let m0 = k.add(c.m_base, c.row0);
    let l0 = k.add(c.l_base, c.col0);
    for (a, row) in acc.iter().enumerate() {
        let m = k.add(m0, a as u32);
        for (q, vector) in row.iter().enumerate() {
            for (b, &cell) in vector.iter().enumerate() {
                let l = k.add(l0, 32 * q as u32 + b as u32);
                let inside = both_below(k, m, e.m, l, cfg.k);
                k.if_then(inside, |k| {
                    let index = k.mad_lo(m, cfg.k, l);
                    store_output(k, e.output, index, cell);
                });
            }
        }
    }
}
