//! Backward with respect to the input for few rows (`m ≤ GEMV_MAX_M`):
//! `G_A[i, l] = Σ_j G_C[i, j] · Ŵ[j, l]`.
//!
//! Bandwidth-bound, like the forward GEMV: every weight byte is read once. `W [n, k]` is
//! row-major, so the sum walks *down* columns of `W`; a block owns [`cols`] consecutive columns
//! `l0 ..` (512 at block 64: a weight row's absmax of them fill a 32-byte sector). Its 8 warps
//! form `cols / 64` column groups of 64 columns by `8 / (cols / 64)` row groups: lane `t` of a
//! warp owns the packed byte holding columns `l0 + 64·g + 2t` and `+ 1` of its column group
//! `g`, so a warp reads 32 consecutive bytes of one `W` row per request (one 32-byte sector
//! when `k % 64 = 0`), and row group `r` of `R` takes rows `j ≡ r (mod R)`, ascending.
//!
//! 1. **stage** (whole block, per window of [`ROW_WINDOW`] = 256 rows of `W`):
//!    `g_window[i][jj] = G_C[i, j0 + jj]` as f32 for `i < m` (0 past the rows' end), coalesced,
//!    and each window row's absmax of the block's columns (`absmax_stage`: a row's 8 absmax
//!    are one sector, read by 8 consecutive threads; under double quantisation decoded there,
//!    the window's nested absmax first copied to shared memory, [`NestedWindow`]);
//! 2. **accumulate** (each warp, its rows of the window, [`UNROLL`] per loop trip): load the byte
//!    `(j·k + l) / 2`, read its block's staged absmax (blocks may span rows; both weights of a
//!    byte share a block), dequantise `ŵ = NF4_CODE[code] · absmax` and
//!    `acc[i][e] += g_window[i][jj] · ŵ_e` (a broadcast shared read per `i`);
//! 3. **combine**: each warp writes its partial sums to shared memory, then thread `(i, c)` adds
//!    the row groups' partials in order and stores `G_A[i, l0 + c]` (coalesced).
//!
//! At `m = 1` (decode's backward, a run-time branch that every thread of the block takes
//! alike) with `k % block = 0` and 256 or 512 columns per block, phase 2 and 3 take a packed
//! word per lane and row instead (`super::backward_gemv_words`: 8 columns, `prmt` code
//! lookups, the absmax and `G_C` value once per row, no row checks in full trips): 5.2
//! instructions per weight instead of 14.9 (`runtime/tests/nf4_counters.rs`). Every other
//! case keeps the byte layout above. The absmax of rows past the rows' end are not staged
//! (neither layout reads them).
//!
//! Fixed summation order everywhere (deterministic, no atomics). Columns past `k` (ragged last
//! block) are predicated off; every barrier is reached by every thread.
//!
//! The grid is `⌈k / cols⌉` blocks: wide blocks trade parallelism over `k` for whole sectors
//! of absmax. To fill a GPU anyway the host may split the rows `n` into `S` slices
//! ([`build_split`], `nf4_backward_gemv_split`): grid `(⌈k / cols⌉, S)`, block `y = s` walking
//! rows `s·slice_rows .. min((s + 1)·slice_rows, n)` (`slice_rows` a launch parameter) exactly
//! as above, and storing its f32 sums unrounded to its part of the workspace (every element of
//! the part, zeros for an empty slice); `super::slice_reduce` then adds the slices in
//! order and rounds once.

use super::absmax_stage::{AbsmaxStage, NestedWindow};
use super::backward_gemv_words as words;
use super::code_stage::CodeWindow;
use super::slice_reduce::SumRange;
use super::{
    activation_or_zero, both_below, dequant, load_byte, nibble, prologue, store_output, CodeTable,
    Entry, Weights, BACKWARD_GEMV_ENTRY, BACKWARD_GEMV_SPLIT_ENTRY, GEMV_MAX_M, THREADS, WARPS,
};
use crate::builder::{Float, KernelBuilder, Pred, Reg, SharedArr, F32, U32};
use crate::ir::CmpOp;
use crate::templates::nf4::Nf4Config;

/// Columns a warp owns: one packed byte per lane.
const WARP_COLS: u32 = 64;
/// The widest block: every warp its own 64 columns.
const MAX_COLS: u32 = WARPS * WARP_COLS;
/// Rows of `W` (columns of `G_C`) staged per window: one per thread.
pub const ROW_WINDOW: u32 = THREADS;
/// Rows each warp handles per loop trip.
pub const UNROLL: u32 = 4;
/// Registers per thread ptxas may use (`.maxnreg`).
const MAX_REGISTERS: u32 = 64;
/// Words of the partial-sum array: per row group, `GEMV_MAX_M` rows of the block's columns
/// (`R` row groups of `8 / R` column groups of 64: the same size for every width).
const PARTIAL_WORDS: u32 = GEMV_MAX_M * MAX_COLS;

/// Columns of `G_A` per block: `8 · block` (a weight row's absmax of them fill a 32-byte
/// sector) within 64 ..= 512, and no more than `k` reaches (rounded up to 64 times a power of
/// two): 256 at block 32, 512 at blocks 64 to 256 (their 8, 4 or 2 absmax per row are 32, 16
/// or 8 bytes of a sector beside 256 packed bytes).
pub fn cols(cfg: &Nf4Config) -> u32 {
    let absmax_sector = (8 * cfg.block).clamp(WARP_COLS, MAX_COLS);
    let reached = cfg.k.div_ceil(WARP_COLS).next_power_of_two() * WARP_COLS;
    absmax_sector.min(reached)
}

/// Per-thread state shared by the phases.
struct Lane {
    tid: Reg<U32>,
    lane: Reg<U32>,
    /// The warp's row group (its first row of a window) and the block's row groups.
    row_group: Reg<U32>,
    row_groups: u32,
    /// Shared byte offset of the warp's row group and column group in `partial`.
    partial_at: Reg<U32>,
    /// Columns per block ([`cols`]) and the block's first column.
    cols: u32,
    l_base: Reg<U32>,
    /// `(l_base + 64·g + 2·lane) / 2`: this lane's byte within a row of packed codes.
    col_byte: Reg<U32>,
    /// Whether this lane's columns exist (`l_base + 64·g + 2·lane < k`).
    col_ok: Pred,
    /// `m > i` for each generated activation row.
    present: Vec<Pred>,
    rows: SumRange,
    g_window: SharedArr<F32>,
    /// `acc[i][e]`: row `i`, column `2·col_byte + e`.
    acc: Vec<[Reg<F32>; 2]>,
}

/// Builds the `nf4_backward_gemv` entry. Grid: `⌈k / cols⌉` blocks of 256 threads; static
/// shared memory only (up to 43 KiB: partial sums 16 KiB, the `G_C` window 8 KiB, the absmax
/// window 8 KiB at block 64 and 16 when `k % block ≠ 0`, the map copy and nested window under
/// double quantisation).
pub(super) fn build<T: Float>(cfg: &Nf4Config) -> KernelBuilder {
    let mut k = new_kernel(BACKWARD_GEMV_ENTRY, cfg);
    let e = prologue::<T, T>(&mut k, cfg, ("g_c", "g_a"), THREADS, CodeTable::Aligned256);
    reduce_rows(&mut k, cfg, &e, SumRange::all(cfg.n));
    k
}

/// Builds `nf4_backward_gemv_split(g_c, packed, <absmax>, partials, m, slice_rows)`: grid
/// `(⌈k / cols⌉, S)`, block `y = s` summing slice `s`'s rows into `partials[s][i][l]` (f32,
/// parts `slice_len(k, m)` elements apart; module docs). Same shared memory as [`build`].
pub(super) fn build_split<T: Float>(cfg: &Nf4Config) -> KernelBuilder {
    let mut k = new_kernel(BACKWARD_GEMV_SPLIT_ENTRY, cfg);
    let e = prologue::<T, F32>(
        &mut k,
        cfg,
        ("g_c", "partials"),
        THREADS,
        CodeTable::Aligned256,
    );
    let slice_rows = k.param::<U32>("slice_rows");
    let slice_rows = k.load_param(slice_rows);
    let s = k.ctaid_y();
    let rows = SumRange::slice(&mut k, (s, slice_rows, cfg.n), (e.m, cfg.k));
    reduce_rows(&mut k, cfg, &e, rows);
    k
}

fn new_kernel(entry: &str, cfg: &Nf4Config) -> KernelBuilder {
    let mut k = KernelBuilder::new(entry, cfg.arch);
    k.require_block([THREADS, 1, 1]);
    // ptxas's own target for 256 threads on sm_90 (40) spills 4 bytes here; 64 still fits
    // four blocks per SM's registers (up to 43 KiB of shared memory each).
    k.max_registers(MAX_REGISTERS);
    k
}

/// The three phases (module docs) over `rows`, after the entry's prologue: at `m = 1`, where
/// [`super::backward_gemv_words`] applies, with a packed word per lane and row, else a byte.
fn reduce_rows<T: Float, O: Float>(
    k: &mut KernelBuilder,
    cfg: &Nf4Config,
    e: &Entry<T, O>,
    rows: SumRange,
) {
    let cols = cols(cfg);
    let g_window = k.shared_array::<F32>("g_window", GEMV_MAX_M * ROW_WINDOW);
    let partial = k.shared_array::<F32>("partial", PARTIAL_WORDS);
    let tid = k.tid_x();
    let per_row = AbsmaxStage::per_row(cfg, cols);
    let absmax = AbsmaxStage::new(k, (cfg, e, cols), (1, ROW_WINDOW, per_row), (tid, THREADS))
        .loaded()
        .ending_at(rows.end);
    // A window's rows past `n` decode nothing: the nested window spans the rows that exist.
    let nested = NestedWindow::new(k, cfg, ROW_WINDOW.min(cfg.n), cols);
    let block = k.ctaid_x();
    let l_base = k.mul_lo(block, cols);
    let walk = Walk {
        cfg,
        e,
        rows,
        absmax: &absmax,
        nested: nested.as_ref(),
        tid,
        g_window,
        l_base,
    };
    if words::applies(cfg, cols) {
        let single = k.setp(CmpOp::Eq, e.m, 1u32);
        k.if_else(
            single,
            |k| words::reduce(k, &walk, partial, single),
            |k| reduce_bytes(k, &walk, partial),
        );
    } else {
        reduce_bytes(k, &walk, partial);
    }
}

/// A window's accumulation, given its first row `j0` and the staged absmax's shared address.
pub(super) type WindowBody<'a> = dyn FnMut(&mut KernelBuilder, Reg<U32>, Reg<U32>) + 'a;

/// What both accumulations share: the entry, the rows summed, the staged absmax and `G_C`
/// window, and the block's first column.
pub(super) struct Walk<'a, T: Float, O: Float> {
    pub cfg: &'a Nf4Config,
    pub e: &'a Entry<T, O>,
    pub rows: SumRange,
    pub absmax: &'a AbsmaxStage,
    pub nested: Option<&'a NestedWindow>,
    pub tid: Reg<U32>,
    pub g_window: SharedArr<F32>,
    pub l_base: Reg<U32>,
}

impl<T: Float, O: Float> Walk<'_, T, O> {
    /// Per window of [`ROW_WINDOW`] rows from `j0`: stage `G_C`'s rows `i` where `present[i]`
    /// and the window's absmax, synchronise, `accumulate(j0, slot)` (`slot`: the staged
    /// absmax's shared address), synchronise.
    pub fn windows(
        &self,
        k: &mut KernelBuilder,
        present: &[Pred],
        accumulate: &mut WindowBody<'_>,
    ) {
        let slot = k.var::<U32>(0u32);
        let absmax_base = self.absmax.slot(k, slot);
        let byte0 = k.shr(self.l_base, 1u32);
        k.for_range(self.rows.start, self.rows.end, ROW_WINDOW, |k, j0| {
            let window = CodeWindow { row0: j0, byte0 };
            let weights = match self.nested {
                Some(nested) => {
                    let weights = nested.fill(k, &self.e.weights, &window, (self.tid, THREADS));
                    k.bar_sync();
                    weights
                }
                None => self.e.weights,
            };
            self.stage_output_grads(k, present, j0);
            self.absmax.fill(k, &weights, &window, slot);
            k.bar_sync();
            accumulate(k, j0, absmax_base);
            k.bar_sync();
        });
    }

    /// `g_window[i][t] = G_C[i, j0 + t]` for each `i` with `present[i]` (0 for `j0 + t` at or
    /// past the rows' end): thread `t` loads one element per row, a warp 32 consecutive ones.
    fn stage_output_grads(&self, k: &mut KernelBuilder, present: &[Pred], j0: Reg<U32>) {
        k.comment("stage G_C[0..m, j0 .. j0 + 256] as f32");
        let j = k.add(j0, self.tid);
        let inside = k.setp_lt(j, self.rows.end);
        let slot = k.shared_elem(self.g_window, self.tid);
        for (i, &present) in present.iter().enumerate() {
            let i = i as u32;
            k.if_then(present, |k| {
                let value =
                    activation_or_zero(k, self.e.input, inside, |k| k.add(j, i * self.cfg.n));
                k.st_shared(slot, 4 * (i * ROW_WINDOW) as i32, value);
            });
        }
    }
}

/// The phases with one packed byte (two columns) per lane and row, for every `m`.
fn reduce_bytes<T: Float, O: Float>(
    k: &mut KernelBuilder,
    walk: &Walk<'_, T, O>,
    partial: SharedArr<F32>,
) {
    let (cfg, e, absmax) = (walk.cfg, walk.e, walk.absmax);
    let s = lane_state(k, walk, partial);
    let no_row = k.var::<U32>(0u32);
    let col = k.shl(s.col_byte, 1u32);
    let reader = absmax.reader(k, s.l_base, col, no_row);
    walk.windows(k, &s.present, &mut |k, j0, absmax_base| {
        accumulate_window(k, cfg, &e.weights, &s, j0, &|k, jj, j| {
            let row = absmax.row_at(k, absmax_base, jj);
            let lane = absmax.lane_tile(k, &reader, row, j);
            absmax.read(k, &lane, 0)
        });
    });
    write_partials(k, &s);
    k.bar_sync();
    combine_and_store(k, cfg, e, &s, partial);
}

/// Rows `i` whose offsets `i·n` and `i·k` fit u32 (a valid `m` cannot exceed them).
fn generated_rows(cfg: &Nf4Config) -> u32 {
    (0..GEMV_MAX_M)
        .take_while(|i| i.checked_mul(cfg.n.max(cfg.k)).is_some())
        .count() as u32
}

fn lane_state<T: Float, O: Float>(
    k: &mut KernelBuilder,
    walk: &Walk<'_, T, O>,
    partial: SharedArr<F32>,
) -> Lane {
    let (cfg, e, tid, l_base) = (walk.cfg, walk.e, walk.tid, walk.l_base);
    let cols = cols(cfg);
    let col_groups = cols / WARP_COLS;
    let warp = k.shr(tid, 5u32);
    let lane = k.and(tid, 31u32);
    let col_group = k.and(warp, col_groups - 1);
    let row_group = k.shr(warp, col_groups.trailing_zeros());
    let half_base = k.shr(l_base, 1u32);
    let group_byte = k.mad_lo(col_group, WARP_COLS / 2, half_base);
    let col_byte = k.add(group_byte, lane);
    let col = k.shl(col_byte, 1u32);
    let col_ok = k.setp_lt(col, cfg.k);
    // partial[row group][i][c]: row groups `GEMV_MAX_M · cols` words apart.
    let group_words = k.mul_lo(row_group, GEMV_MAX_M * cols);
    let word = k.mad_lo(col_group, WARP_COLS, group_words);
    let partial_at = k.shared_elem(partial, word);
    let present = (0..generated_rows(cfg))
        .map(|i| k.setp(CmpOp::Gt, e.m, i))
        .collect();
    let acc = (0..generated_rows(cfg))
        .map(|_| [k.var::<F32>(0.0f32), k.var::<F32>(0.0f32)])
        .collect();
    Lane {
        tid,
        lane,
        row_group,
        row_groups: WARPS / col_groups,
        partial_at,
        cols,
        l_base,
        col_byte,
        col_ok,
        present,
        rows: walk.rows,
        g_window: walk.g_window,
        acc,
    }
}

/// The staged absmax of this lane's byte in window row `jj` (weight row `j`).
type StagedAbsmax<'a> = dyn Fn(&mut KernelBuilder, Reg<U32>, Reg<U32>) -> Reg<F32> + 'a;

/// Row group `r` of `R` takes window rows `jj = r + R·i` (ascending) below the rows' end,
/// [`UNROLL`] per trip.
fn accumulate_window(
    k: &mut KernelBuilder,
    cfg: &Nf4Config,
    w: &Weights,
    s: &Lane,
    j0: Reg<U32>,
    absmax: &StagedAbsmax<'_>,
) {
    k.comment("accumulate this warp's rows of the window");
    let g_base = k.shared_base(s.g_window);
    let step = s.row_groups;
    // The window's rows before the end (fewer in the last window of `W` or of a slice): trips
    // past them would only test rows that do not exist.
    let remaining = k.sub(s.rows.end, j0);
    let window_rows = k.min(remaining, ROW_WINDOW);
    k.for_range(s.row_group, window_rows, step * UNROLL, |k, first| {
        for u in 0..UNROLL {
            let jj = k.add(first, u * step);
            let j = k.add(j0, jj);
            let row_ok = k.setp_lt(j, s.rows.end);
            let inside = k.and_pred(row_ok, s.col_ok);
            k.if_then(inside, |k| {
                let byte = k.mad_lo(j, cfg.k / 2, s.col_byte);
                let addr = k.elem_addr(w.packed, byte);
                let packed = load_byte(k, addr);
                let scale = absmax(k, jj, j);
                let weight = [4, 0].map(|shift| {
                    let code = nibble(k, packed, shift);
                    dequant(k, w, code, scale)
                });
                let g_slot = k.mad_lo(jj, 4u32, g_base);
                accumulate_rows(k, s, 0, &mut |k, i| {
                    let g = k.ld_shared::<F32>(g_slot, 4 * (i * ROW_WINDOW) as i32);
                    let [acc_even, acc_odd] = s.acc[i as usize];
                    k.fma_into(acc_even, g, weight[0], acc_even);
                    k.fma_into(acc_odd, g, weight[1], acc_odd);
                });
            });
        }
    });
}

/// `body(i)` for row `i`, then (under `m > i + 1`) for the next rows: nested, so `m = 1` costs a
/// single branch.
fn accumulate_rows(
    k: &mut KernelBuilder,
    s: &Lane,
    i: u32,
    body: &mut dyn FnMut(&mut KernelBuilder, u32),
) {
    body(k, i);
    if let Some(&next) = s.present.get(i as usize + 1) {
        k.if_then(next, |k| accumulate_rows(k, s, i + 1, body));
    }
}

/// `partial[r][i][64·g + 2t + e] = acc[i][e]` for the warp's row group `r` and column group
/// `g`; the upper half-warp stores (odd, even) instead of (even, odd), so each store
/// instruction hits 32 distinct banks.
fn write_partials(k: &mut KernelBuilder, s: &Lane) {
    k.comment("each warp's partial sums -> shared memory");
    let upper = k.shr(s.lane, 4u32);
    let is_upper = k.setp(CmpOp::Ne, upper, 0u32);
    let even = k.shl(s.lane, 1u32);
    let first_word = k.add(even, upper);
    let first_slot = k.mad_lo(first_word, 4u32, s.partial_at);
    let odd = k.add(even, 1u32);
    let second_word = k.sub(odd, upper);
    let second_slot = k.mad_lo(second_word, 4u32, s.partial_at);
    for (i, &present) in s.present.iter().enumerate() {
        let [acc_even, acc_odd] = s.acc[i];
        k.if_then(present, |k| {
            let first = k.selp(acc_odd, acc_even, is_upper);
            let second = k.selp(acc_even, acc_odd, is_upper);
            let offset = 4 * (i as u32 * s.cols) as i32;
            k.st_shared(first_slot, offset, first);
            k.st_shared(second_slot, offset, second);
        });
    }
}

/// `out[i, l_base + c] = Σ_r partial[r][i][c]` (row groups in order; `out` is `G_A`, or the
/// slice's part of the workspace), thread `tid` taking `(i, c) = ((tid + 256·q) / cols,
/// (tid + 256·q) mod cols)` for the passes `q` that reach the generated rows, where `i < m`
/// and `l_base + c < k`.
fn combine_and_store<T: Float, O: Float>(
    k: &mut KernelBuilder,
    cfg: &Nf4Config,
    e: &Entry<T, O>,
    s: &Lane,
    partial: SharedArr<F32>,
) {
    k.comment("sum the row groups' partials in order and store G_A");
    let slot = k.shared_elem(partial, s.tid);
    let group_bytes = 4 * GEMV_MAX_M * s.cols;
    for q in 0..(s.present.len() as u32 * s.cols).div_ceil(THREADS) {
        let v = k.add(s.tid, q * THREADS);
        let i = k.shr(v, s.cols.trailing_zeros());
        let c = k.and(v, s.cols - 1);
        let col = k.add(s.l_base, c);
        let inside = both_below(k, i, e.m, col, cfg.k);
        k.if_then(inside, |k| {
            let pass_offset = 4 * (q * THREADS) as i32;
            let total = k.ld_shared::<F32>(slot, pass_offset);
            for r in 1..s.row_groups {
                let p = k.ld_shared::<F32>(slot, pass_offset + (r * group_bytes) as i32);
                k.add_into(total, total, p);
            }
            let index = k.mad_lo(i, cfg.k, col);
            let index = s.rows.output_index(k, index);
            store_output(k, e.output, index, total);
        });
    }
}
