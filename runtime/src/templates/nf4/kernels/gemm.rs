//! Tiled forward GEMM for any `m`: `C[i, j] = Σ_l A[i, l] · Ŵ[j, l]`.
//!
//! A block of 256 threads computes a `TILE_M × TILE_N` (64 × 64) tile of `C`, stepping over `k`
//! in slices of [`TILE_K`] = 64: it stages the activation slice `A[i0.., l0..]` (widened to f32)
//! and the *dequantised* weight slice `Ŵ[j0.., l0..]` in shared memory, both row-major along
//! `l` with a row stride of [`STRIDE`] = 68 words, synchronises, and multiplies.
//!
//! Loads: a weight row's 64 columns of a slice are 32 packed bytes, one request of a warp (a
//! whole sector when `k % 64 = 0`); each row's absmax are staged [`absmax_span`] = `8 · block`
//! columns at a time (`AbsmaxWindowStage`: a row's absmax of a span fill a sector, read by
//! consecutive threads; under double quantisation decoded from the shared map copy and the
//! span's nested absmax), instead of one 4-byte load per row and slice; activations 32
//! consecutive elements per request.
//!
//! Register blocking: each thread owns a 4 × 4 micro-tile, rows `i = 16·wm + lm + 4a` and
//! columns `j = 32·wn + ln + 8b` (warp `w = 2·wm + wn`, lane `= 8·lm + ln`). Per step of 4
//! along `l` it reads four `A` and four `Ŵ` 16-byte vectors and does 64 FMAs.
//!
//! Bank conflicts (one wavefront per shared request everywhere):
//! - inner loop, `A`: a warp reads 4 rows `i..i+4` at one `l` → 4 distinct 16-byte vectors
//!   at word offsets `68·i + l ≡ 4·i + l (mod 32)`: 16 words in 16 banks;
//! - inner loop, `Ŵ`: 8 consecutive rows → `4·j + l` covers all 32 banks once;
//! - staging `A`: a warp writes 32 consecutive words of one row;
//! - staging `Ŵ`: a warp writes one row (32 bytes = 64 weights); lanes 0–15 store their even
//!   element first and lanes 16–31 their odd one, so each store touches 16 even and 16 odd
//!   banks;
//! - staged absmax: consecutive words; code-table lookups touch at most 16 words in 16 banks.
//!
//! Partial tiles are handled by predication (out-of-range activations and weights stage as 0;
//! out-of-range outputs are not stored); every thread reaches every barrier.

use super::absmax_stage::{AbsmaxStage, NestedWindow};
use super::code_stage::CodeWindow;
use super::slice_reduce::SumRange;
use super::{
    activation_or_zero, both_below, dequant, entry_prologue, gemm_split_prologue, load_byte,
    nibble, store_output, CodeTable, Entry, GEMM_ENTRY, GEMM_SPLIT_ENTRY, THREADS, TILE_M, TILE_N,
    WARPS,
};
use crate::builder::{Float, KernelBuilder, Pred, Reg, SharedArr, F32, U32};
use crate::ir::CmpOp;
use crate::templates::nf4::Nf4Config;

/// The `k` slice staged per step: 32 packed bytes (a sector when `k % 64 = 0`) of each weight
/// row.
pub const TILE_K: u32 = 64;
/// Row stride of both staged tiles in words (`TILE_K + 4`: keeps 16-byte alignment and puts
/// consecutive rows 4 banks apart).
pub const STRIDE: u32 = TILE_K + 4;
/// Bytes of one staged row.
const ROW_BYTES: i32 = (STRIDE * 4) as i32;

/// Columns whose absmax the forward stages at once: `8 · block` (a weight row's absmax of them
/// fill a 32-byte sector) within [`TILE_K`] ..= 512.
fn absmax_span(cfg: &Nf4Config) -> u32 {
    (8 * cfg.block).clamp(TILE_K, 512)
}

/// The absmax of the block's 64 weight rows for [`absmax_span`] columns from `l0` (a multiple
/// of the span), staged when the K loop reaches `l0` (`absmax_stage`, plain loads on every
/// target; under double quantisation decoded there from the shared map and the window's
/// nested absmax), so each weight row's absmax cost one sector per span, not one per row and
/// K tile.
struct AbsmaxWindowStage {
    stage: AbsmaxStage,
    nested: Option<NestedWindow>,
    span: u32,
    /// The stage's one slot, and the first column of the staged window.
    slot: Reg<U32>,
    l0: Reg<U32>,
}

impl AbsmaxWindowStage {
    fn new<T: Float, O: Float>(k: &mut KernelBuilder, cfg: &Nf4Config, e: &Entry<T, O>) -> Self {
        let span = absmax_span(cfg);
        let tid = k.tid_x();
        let per_row = AbsmaxStage::per_row(cfg, span);
        let stage = AbsmaxStage::new(k, (cfg, e, span), (1, TILE_N, per_row), (tid, THREADS));
        Self {
            stage: stage.loaded(),
            nested: NestedWindow::new(k, cfg, TILE_N.min(cfg.n), span),
            span,
            slot: k.var::<U32>(0u32),
            l0: k.var::<U32>(0u32),
        }
    }

    /// At a K tile whose first column `l0` starts a span (block-uniform): stages that span's
    /// absmax of weight rows `n_base ..` and synchronises.
    fn refill<T: Float, O: Float>(
        &self,
        k: &mut KernelBuilder,
        e: &Entry<T, O>,
        n_base: Reg<U32>,
        l0: Reg<U32>,
    ) {
        let phase = k.and(l0, self.span - 1);
        let starts = k.setp(CmpOp::Eq, phase, 0u32);
        k.if_then(starts, |k| {
            k.comment("stage the next span's absmax");
            k.assign(self.l0, l0);
            let tid = k.tid_x();
            let window = CodeWindow {
                row0: n_base,
                byte0: k.shr(l0, 1u32),
            };
            let weights = match &self.nested {
                Some(nested) => {
                    let weights = nested.fill(k, &e.weights, &window, (tid, THREADS));
                    k.bar_sync();
                    weights
                }
                None => e.weights,
            };
            self.stage.fill(k, &weights, &window, self.slot);
            k.bar_sync();
        });
    }
}

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
    let mut k = new_kernel(GEMM_ENTRY, cfg);
    let e = entry_prologue::<T>(&mut k, cfg, ("a", "c"), THREADS);
    multiply_range(&mut k, cfg, &e, SumRange::all(cfg.k));
    k
}

/// Builds `nf4_gemm_split` (`super::gemm_split_prologue`): grid `(ceil(n / 64), ceil(m / 64),
/// S)`, block `z = s` multiplying K slice `s` (its first column a multiple of
/// [`absmax_span`], so the slice's first tile stages its absmax) into its f32 partial tile.
pub(super) fn build_split<T: Float>(cfg: &Nf4Config) -> KernelBuilder {
    let mut k = new_kernel(GEMM_SPLIT_ENTRY, cfg);
    let (e, range) = gemm_split_prologue::<T>(&mut k, cfg, THREADS, CodeTable::Shared);
    multiply_range(&mut k, cfg, &e, range);
    k
}

/// The K split alignment of this path: [`absmax_span`] (a multiple of [`TILE_K`] and of the
/// block).
pub(super) fn split_align(cfg: &Nf4Config) -> u32 {
    absmax_span(cfg)
}

fn new_kernel(name: &str, cfg: &Nf4Config) -> KernelBuilder {
    let mut k = KernelBuilder::new(name, cfg.arch);
    k.require_block([THREADS, 1, 1]);
    k
}

/// The block's tile over the columns of `range`, stored to the output (rounded to `O`) or the
/// slice's part of the workspace.
fn multiply_range<T: Float, O: Float>(
    k: &mut KernelBuilder,
    cfg: &Nf4Config,
    e: &Entry<T, O>,
    range: SumRange,
) {
    let a_tile = k.shared_array::<F32>("a_tile", TILE_M * STRIDE);
    let w_tile = k.shared_array::<F32>("w_tile", TILE_N * STRIDE);
    let c = coords(k);
    let window = AbsmaxWindowStage::new(k, cfg, e);
    let acc: [[Reg<F32>; 4]; 4] = std::array::from_fn(|_| std::array::from_fn(|_| k.var(0.0f32)));
    k.for_range(range.start, range.end, TILE_K, |k, l0| {
        window.refill(k, e, c.n_base, l0);
        stage_activations(k, cfg, e, &c, a_tile, l0);
        stage_weights(k, (cfg, e), &c, w_tile, (l0, &window));
        k.bar_sync();
        multiply_tiles(k, &c, a_tile, w_tile, &acc);
        k.bar_sync();
    });
    store_tile(k, cfg, e, (&c, &range), &acc);
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
fn stage_activations<T: Float, O: Float>(
    k: &mut KernelBuilder,
    cfg: &Nf4Config,
    e: &Entry<T, O>,
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
    for half in 0..TILE_K / 32 {
        let col = k.add(l0, c.lane);
        let col = k.add(col, 32 * half);
        for r in 0..rows_per_warp {
            let m = k.add(m0, r);
            let inside = both_below(k, m, e.m, col, cfg.k);
            let value = activation_or_zero(k, e.input, inside, |k| k.mad_lo(m, cfg.k, col));
            k.st_shared(slot, r as i32 * ROW_BYTES + 128 * half as i32, value);
        }
    }
}

/// `w_tile[r][t] = Ŵ[n_base + r, l0 + t]` (0 outside `W`), each row's absmax from the staged
/// window ([`stage_weight_rows`]).
fn stage_weights<T: Float, O: Float>(
    k: &mut KernelBuilder,
    (cfg, e): (&Nf4Config, &Entry<T, O>),
    c: &Coords,
    w_tile: SharedArr<F32>,
    (l0, window): (Reg<U32>, &AbsmaxWindowStage),
) {
    k.comment("stage dequantised W[n0.., l0..]");
    let rows_per_warp = TILE_N / WARPS;
    let warp_row = k.mul_lo(c.warp, rows_per_warp);
    let col = k.shl(c.lane, 1u32);
    let col = k.add(l0, col);
    let reader = window.stage.reader(k, window.l0, col, warp_row);
    let base = window.stage.slot(k, window.slot);
    let lane_j = k.add(c.n_base, warp_row);
    let lane = window.stage.lane_tile(k, &reader, base, lane_j);
    stage_weight_rows(
        k,
        (cfg, e),
        (c.warp, c.lane),
        (w_tile, STRIDE, rows_per_warp, TILE_K),
        (c.n_base, l0),
        &|k, step, _, _| window.stage.read(k, &lane, step),
    );
}

/// The absmax at column `col` of the `step`-th of the warp's rows, `col` in the 64-column
/// group `group` columns into the tile.
pub(super) type RowAbsmax<'a> = dyn Fn(&mut KernelBuilder, u32, u32, Reg<U32>) -> Reg<F32> + 'a;

/// `w_tile[r][t] = Ŵ[row_base + r, col_base + t]` for `t < cols` (0 outside `W`), rows
/// `stride` words apart: warp `w` stages rows `rows_per_warp · w ..`, one per step, each in
/// groups of 64 columns, one packed byte (two weights) per lane, so each request reads 32
/// consecutive bytes of a row; the lower half-warp stores (even, odd), the upper (odd, even):
/// no bank is hit twice. `absmax` gives each byte's block absmax (read only inside `W`).
pub(super) fn stage_weight_rows<T: Float, O: Float>(
    k: &mut KernelBuilder,
    (cfg, e): (&Nf4Config, &Entry<T, O>),
    (warp, lane): (Reg<U32>, Reg<U32>),
    (w_tile, stride, rows_per_warp, cols): (SharedArr<F32>, u32, u32, u32),
    (row_base, col_base): (Reg<U32>, Reg<U32>),
    absmax: &RowAbsmax<'_>,
) {
    let upper = k.shr(lane, 4u32);
    let is_upper = k.setp(CmpOp::Ne, upper, 0u32);
    let even_col = k.shl(lane, 1u32);
    let first_col = k.add(even_col, upper);
    let odd_col = k.add(even_col, 1u32);
    let second_col = k.sub(odd_col, upper);
    let first_row = k.mul_lo(warp, rows_per_warp);
    let row_slot = k.mul_lo(first_row, stride);
    let first_index = k.add(row_slot, first_col);
    let second_index = k.add(row_slot, second_col);
    let first_slot = k.shared_elem(w_tile, first_index);
    let second_slot = k.shared_elem(w_tile, second_index);
    let row_first = k.add(row_base, first_row);
    let lane_col = k.add(col_base, even_col);
    for step in 0..rows_per_warp {
        let row = k.add(row_first, step);
        for group in (0..cols).step_by(64) {
            let col = k.add(lane_col, group);
            let inside = both_below(k, row, cfg.n, col, cfg.k);
            let [w_even, w_odd] = dequant_pair(k, e, inside, (row, col, cfg.k), &|k| {
                absmax(k, step, group, col)
            });
            let first = k.selp(w_odd, w_even, is_upper);
            let second = k.selp(w_even, w_odd, is_upper);
            let offset = 4 * (step * stride + group) as i32;
            k.st_shared(first_slot, offset, first);
            k.st_shared(second_slot, offset, second);
        }
    }
}

/// `[Ŵ[row, col], Ŵ[row, col + 1]]` from one packed byte (rows of `len` weights) when `inside`,
/// else `[0, 0]` (code 7 with absmax 0, so every lane does the same shared-memory lookups).
fn dequant_pair<T: Float, O: Float>(
    k: &mut KernelBuilder,
    e: &Entry<T, O>,
    inside: Pred,
    (row, col, len): (Reg<U32>, Reg<U32>, u32),
    absmax: &dyn Fn(&mut KernelBuilder) -> Reg<F32>,
) -> [Reg<F32>; 2] {
    let packed = k.var::<U32>(0x77u32);
    let scale = k.var::<F32>(0.0f32);
    k.if_then(inside, |k| {
        let elem = k.mad_lo(row, len, col);
        let byte = k.shr(elem, 1u32);
        let addr = k.elem_addr(e.weights.packed, byte);
        let b = load_byte(k, addr);
        k.assign(packed, b);
        let a = absmax(k);
        k.assign(scale, a);
    });
    let hi = nibble(k, packed, 4);
    let lo = nibble(k, packed, 0);
    [
        dequant(k, &e.weights, hi, scale),
        dequant(k, &e.weights, lo, scale),
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

/// `C[m_base + row0 + 4a, n_base + col0 + 8b] = acc[a][b]` where inside `C` (into the
/// slice's part of the workspace when `range` is a slice).
fn store_tile<T: Float, O: Float>(
    k: &mut KernelBuilder,
    cfg: &Nf4Config,
    e: &Entry<T, O>,
    (c, range): (&Coords, &SumRange),
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
                let index = range.output_index(k, index);
                store_output(k, e.output, index, cell);
            });
        }
    }
}
