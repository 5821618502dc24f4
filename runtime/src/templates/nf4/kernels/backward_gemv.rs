//! Backward with respect to the input for few rows (`m ≤ GEMV_MAX_M`):
//! `G_A[i, l] = Σ_j G_C[i, j] · Ŵ[j, l]`.
//!
//! Bandwidth-bound, like the forward GEMV: every weight byte is read once. `W [n, k]` is
//! row-major, so the sum walks *down* columns of `W`; a block owns [`COLS`] = 64 consecutive
//! columns `l0 .. l0 + 64` and lane `t` of every warp owns the packed byte holding columns
//! `l0 + 2t` and `l0 + 2t + 1`. A warp therefore reads 32 consecutive bytes of one `W` row per
//! request (one 32-byte sector when `k % 64 = 0`). The 8 warps split the reduction index:
//! warp `w` takes rows `j ≡ w (mod 8)`, ascending.
//!
//! 1. **stage** (whole block, per window of [`ROW_WINDOW`] = 256 rows of `W`):
//!    `g_window[i][jj] = G_C[i, j0 + jj]` as f32 for `i < m` (0 past `n`), coalesced;
//! 2. **accumulate** (each warp, its rows of the window, [`UNROLL`] per loop trip): load the byte
//!    `(j·k + l) / 2`, the absmax of block `(j·k + l) / block` (blocks may span rows; both
//!    weights of a byte share a block), dequantise `ŵ = NF4_CODE[code] · absmax` and
//!    `acc[i][e] += g_window[i][jj] · ŵ_e` (a broadcast shared read per `i`);
//! 3. **combine**: each warp writes its partial sums to shared memory, then thread `(i, c)` adds
//!    the 8 warps' partials in warp order and stores `G_A[i, l0 + c]` (coalesced).
//!
//! Fixed summation order everywhere (deterministic, no atomics). Columns past `k` (ragged last
//! block) are predicated off; every barrier is reached by every thread.

use super::{
    absmax_of, dequant, entry_prologue, load_activation, load_byte, nibble, store_output, Entry,
    MapCopy, Weights, BACKWARD_GEMV_ENTRY, GEMV_MAX_M, THREADS, WARPS,
};
use crate::builder::{Float, KernelBuilder, Pred, Reg, SharedArr, F32, U32};
use crate::ir::CmpOp;
use crate::templates::nf4::Nf4Config;

/// Columns of `G_A` (and of `W`) per block: one packed byte per lane.
pub const COLS: u32 = 64;
/// Rows of `W` (columns of `G_C`) staged per window: one per thread.
pub const ROW_WINDOW: u32 = THREADS;
/// Rows each warp handles per loop trip.
pub const UNROLL: u32 = 4;
/// Words per warp in the partial-sum array: `GEMV_MAX_M` rows of `COLS`.
const PARTIAL_WARP_WORDS: u32 = GEMV_MAX_M * COLS;

/// Per-thread state shared by the phases.
struct Lane {
    tid: Reg<U32>,
    warp: Reg<U32>,
    lane: Reg<U32>,
    /// First column of the block.
    l_base: Reg<U32>,
    /// `(l_base + 2·lane) / 2`: this lane's byte within a row of packed codes.
    col_byte: Reg<U32>,
    /// Whether this lane's columns exist (`l_base + 2·lane < k`).
    col_ok: Pred,
    /// `m > i` for each generated activation row.
    present: Vec<Pred>,
    g_window: SharedArr<F32>,
    /// `acc[i][e]`: row `i`, column `l_base + 2·lane + e`.
    acc: Vec<[Reg<F32>; 2]>,
}

/// Builds the `nf4_backward_gemv` entry. Grid: `ceil(k / 64)` blocks of 256 threads; 24 KiB (25
/// under double quantisation, with the map copy) of static shared memory, no dynamic shared
/// memory.
pub(super) fn build<T: Float>(cfg: &Nf4Config) -> KernelBuilder {
    let mut k = KernelBuilder::new(BACKWARD_GEMV_ENTRY, cfg.arch);
    k.require_block([THREADS, 1, 1]);
    let e = entry_prologue::<T>(
        &mut k,
        cfg,
        ("g_c", "g_a"),
        MapCopy::Shared { threads: THREADS },
    );
    let g_window = k.shared_array::<F32>("g_window", GEMV_MAX_M * ROW_WINDOW);
    let partial = k.shared_array::<F32>("partial", WARPS * PARTIAL_WARP_WORDS);
    let s = lane_state(&mut k, cfg, &e, g_window);
    k.for_range(0u32, cfg.n, ROW_WINDOW, |k, j0| {
        stage_output_grads(k, cfg, &e, &s, j0);
        k.bar_sync();
        accumulate_window(k, cfg, &e, &s, j0);
        k.bar_sync();
    });
    write_partials(&mut k, &s, partial);
    k.bar_sync();
    combine_and_store(&mut k, cfg, &e, &s, partial);
    k
}

/// Rows `i` whose offsets `i·n` and `i·k` fit u32 (a valid `m` cannot exceed them).
fn generated_rows(cfg: &Nf4Config) -> u32 {
    (0..GEMV_MAX_M)
        .take_while(|i| i.checked_mul(cfg.n.max(cfg.k)).is_some())
        .count() as u32
}

fn lane_state<T: Float>(
    k: &mut KernelBuilder,
    cfg: &Nf4Config,
    e: &Entry<T>,
    g_window: SharedArr<F32>,
) -> Lane {
    let tid = k.tid_x();
    let warp = k.shr(tid, 5u32);
    let lane = k.and(tid, 31u32);
    let block = k.ctaid_x();
    let l_base = k.mul_lo(block, COLS);
    let half_base = k.shr(l_base, 1u32);
    let col_byte = k.add(half_base, lane);
    let col = k.shl(col_byte, 1u32);
    let col_ok = k.setp_lt(col, cfg.k);
    let present = (0..generated_rows(cfg))
        .map(|i| k.setp(CmpOp::Gt, e.m, i))
        .collect();
    let acc = (0..generated_rows(cfg))
        .map(|_| [k.var::<F32>(0.0f32), k.var::<F32>(0.0f32)])
        .collect();
    Lane {
        tid,
        warp,
        lane,
        l_base,
        col_byte,
        col_ok,
        present,
        g_window,
        acc,
    }
}

/// `g_window[i][t] = G_C[i, j0 + t]` for `i < m` (0 for `j0 + t ≥ n`): thread `t` loads one
/// element per row, a warp 32 consecutive ones.
fn stage_output_grads<T: Float>(
    k: &mut KernelBuilder,
    cfg: &Nf4Config,
    e: &Entry<T>,
    s: &Lane,
    j0: Reg<U32>,
) {
    k.comment("stage G_C[0..m, j0 .. j0 + 256] as f32");
    let j = k.add(j0, s.tid);
    let inside = k.setp_lt(j, cfg.n);
    let slot = k.shared_elem(s.g_window, s.tid);
    for (i, &present) in s.present.iter().enumerate() {
        let i = i as u32;
        k.if_then(present, |k| {
            let value = k.var::<F32>(0.0f32);
            k.if_then(inside, |k| {
                let index = k.add(j, i * cfg.n);
                let v = load_activation(k, e.input, index);
                k.assign(value, v);
            });
            k.st_shared(slot, 4 * (i * ROW_WINDOW) as i32, value);
        });
    }
}

/// Warp `w` takes window rows `jj = w + 8·r` (ascending), [`UNROLL`] per trip.
fn accumulate_window<T: Float>(
    k: &mut KernelBuilder,
    cfg: &Nf4Config,
    e: &Entry<T>,
    s: &Lane,
    j0: Reg<U32>,
) {
    k.comment("accumulate this warp's rows of the window");
    let g_base = k.shared_base(s.g_window);
    k.for_range(s.warp, ROW_WINDOW, WARPS * UNROLL, |k, first| {
        for u in 0..UNROLL {
            let jj = k.add(first, u * WARPS);
            let j = k.add(j0, jj);
            let row_ok = k.setp_lt(j, cfg.n);
            let inside = k.and_pred(row_ok, s.col_ok);
            k.if_then(inside, |k| {
                let w = dequant_byte(k, cfg, &e.weights, s, j);
                let g_slot = k.mad_lo(jj, 4u32, g_base);
                accumulate_rows(k, s, 0, &mut |k, i| {
                    let g = k.ld_shared::<F32>(g_slot, 4 * (i * ROW_WINDOW) as i32);
                    let [acc_even, acc_odd] = s.acc[i as usize];
                    k.fma_into(acc_even, g, w[0], acc_even);
                    k.fma_into(acc_odd, g, w[1], acc_odd);
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

/// The two weights of this lane's byte in row `j`: byte `b = j·k/2 + col_byte`, block
/// `2b / block`, `ŵ = NF4_CODE[code] · absmax` (high nibble first).
fn dequant_byte(
    k: &mut KernelBuilder,
    cfg: &Nf4Config,
    w: &Weights,
    s: &Lane,
    j: Reg<U32>,
) -> [Reg<F32>; 2] {
    let byte = k.mad_lo(j, cfg.k / 2, s.col_byte);
    let addr = k.elem_addr(w.packed, byte);
    let packed = load_byte(k, addr);
    let block_index = k.shr(byte, w.block_shift - 1);
    let absmax = absmax_of(k, w, block_index);
    [4, 0].map(|shift| {
        let code = nibble(k, packed, shift);
        dequant(k, w, code, absmax)
    })
}

/// `partial[w][i][2t + e] = acc[i][e]`; the upper half-warp stores (odd, even) instead of
/// (even, odd), so each store instruction hits 32 distinct banks.
fn write_partials(k: &mut KernelBuilder, s: &Lane, partial: SharedArr<F32>) {
    k.comment("each warp's partial sums -> shared memory");
    let upper = k.shr(s.lane, 4u32);
    let is_upper = k.setp(CmpOp::Ne, upper, 0u32);
    let even = k.shl(s.lane, 1u32);
    let warp_words = k.mul_lo(s.warp, PARTIAL_WARP_WORDS);
    let row_words = k.add(warp_words, even);
    let first_index = k.add(row_words, upper);
    let first_slot = k.shared_elem(partial, first_index);
    let odd = k.add(row_words, 1u32);
    let second_index = k.sub(odd, upper);
    let second_slot = k.shared_elem(partial, second_index);
    for (i, &present) in s.present.iter().enumerate() {
        let [acc_even, acc_odd] = s.acc[i];
        k.if_then(present, |k| {
            let first = k.selp(acc_odd, acc_even, is_upper);
            let second = k.selp(acc_even, acc_odd, is_upper);
            let offset = 4 * (i as u32 * COLS) as i32;
            k.st_shared(first_slot, offset, first);
            k.st_shared(second_slot, offset, second);
        });
    }
}

/// `G_A[i, l_base + c] = Σ_w partial[w][i][c]` (warps in order), thread `tid` taking
/// `(i, c) = ((tid + 256·q) / 64, tid mod 64)` for `q < m·64 / 256`, where `l_base + c < k`.
fn combine_and_store<T: Float>(
    k: &mut KernelBuilder,
    cfg: &Nf4Config,
    e: &Entry<T>,
    s: &Lane,
    partial: SharedArr<F32>,
) {
    k.comment("sum the warps' partials in order and store G_A");
    let c = k.and(s.tid, COLS - 1);
    let first_row = k.shr(s.tid, COLS.trailing_zeros());
    let col = k.add(s.l_base, c);
    let col_ok = k.setp_lt(col, cfg.k);
    let slot_index = k.mad_lo(first_row, COLS, c);
    let slot = k.shared_elem(partial, slot_index);
    let rows_per_pass = THREADS / COLS;
    for q in 0..(s.present.len() as u32).div_ceil(rows_per_pass) {
        let i = k.add(first_row, q * rows_per_pass);
        let row_ok = k.setp_lt(i, e.m);
        let inside = k.and_pred(row_ok, col_ok);
        k.if_then(inside, |k| {
            let row_offset = 4 * (q * rows_per_pass * COLS) as i32;
            let total = k.ld_shared::<F32>(slot, row_offset);
            for w in 1..WARPS {
                let p = k.ld_shared::<F32>(slot, row_offset + 4 * (w * PARTIAL_WARP_WORDS) as i32);
                k.add_into(total, total, p);
            }
            let index = k.mad_lo(i, cfg.k, col);
            store_output(k, e.output, index, total);
        });
    }
}
