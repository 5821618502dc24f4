//! Forward GEMV for few activation rows (`m ≤ GEMV_MAX_M`): `C[i, j] = Σ_l A[i, l] · Ŵ[j, l]`.
//!
//! Bandwidth-bound: every weight byte is read once, with 16-byte loads. A block of 8 warps owns
//! 8 weight rows (one per warp) and walks `k` in windows of [`WINDOW`] = 1024 columns:
//!
//! 1. **stage** (whole block): `A[0..m, window]` → shared memory as f32, stored padded by a
//!    few words per 32 columns ([`padded`]). With `k % 32 = 0`: [`VECTOR_PAD`], so a group of
//!    32 columns starts on a 16-byte boundary at bank `4g mod 32`, and thread `t` stages
//!    columns `4t .. 4t + 4` of each row with one 8-byte (halves) or 16-byte (f32) load and
//!    one `st.shared.v4` (a warp: 256 or 512 contiguous bytes of `A`). Otherwise:
//!    [`SCALAR_PAD`], one column per thread and step, each request starting on a 64-/128-byte
//!    boundary of `A`.
//! 2. **accumulate** (each warp, its row `j`): the row's packed bytes inside the window are split
//!    into a 16-byte aligned body and, when `k % 32 ≠ 0`, a head and a tail of at most 15 bytes.
//!    Body: lane `l` loads chunk `l` (`ld.global.nc.v4.u32`, 32 codes; the warp reads up to 512
//!    contiguous bytes in one request). A chunk's first element index is a multiple of 32, so
//!    its 32 weights lie in one quantisation block: one absmax per chunk, applied once per chunk
//!    and row to `Σ a · NF4_CODE[code]` (not to each weight). Each code is looked up once in the
//!    f32 code table and serves every activation row: the table sits on a 256-byte boundary,
//!    so a code's address is one `prmt` of its byte offset (`4 · code`, four instructions per
//!    word of 8 codes form them all) under the table address ([`chunk_codes`]), then one
//!    `ld.shared.f32` (the table's 16 words sit in 16 banks). With `k % 32 = 0` lane `l`'s 32
//!    activations are group `l` of the window, read by 8 `ld.shared.v4.f32` per row (8 lanes
//!    per 16-byte phase, at banks `4l mod 32`: conflict-free) from a lane constant address;
//!    otherwise one `ld.shared.f32` per weight. Head and tail: one byte (two weights, one
//!    block) per lane. Each lane keeps one f32 accumulator per activation row.
//!
//! Per weight at `m = 1` and `k % 32 = 0` the body issues 2.5 instructions for the code, one
//! `fma` and a quarter `ld.shared.v4` (then `+ 1.25` per further activation row); staging adds
//! 6–8 per 4 columns, row and thread (about a quarter per weight and row); the whole entry runs
//! under `m > 0` and the checks of further rows nest, so `m = 1` tests one; with `k` a whole
//! number of windows no column is tested against `k`. Measured (`runtime/tests/nf4_counters.rs`,
//! N 128, K 1024): 6.35 instructions per weight at `m = 1` (f16, bf16; 6.22 f32), 12.3 at
//! `m = 4`, 19.9 at `m = 8`, and 5.08 at `m = 1`, K 4096 (10.2, 21.9, 37.2 at K 1024 with a
//! `bfe`, `mad` and `ld.shared` per code and a scalar load per activation).
//!
//! Summation order: a chunk's 32 products in column order (the first a `mul.rn`), then
//! `acc += partial · absmax` (deterministic, the same sums as before this layout).
//!
//! Finally the warp sums each accumulator with butterfly shuffles (fixed order: deterministic) and
//! lane 0 rounds and stores `C[i, j]`. Barriers sit only in block-uniform code: warps without a
//! row (`j ≥ n`) still stage and synchronise.

use super::{
    absmax_at, dequant, entry_prologue_table, load_activation, load_byte, nibble, rounded,
    store_output, CodeTable, Entry, GEMV_ENTRY, GEMV_MAX_M, GEMV_ROWS_PER_BLOCK, THREADS,
};
use crate::builder::{Float, KernelBuilder, Pred, Reg, SharedArr, F16, F32, U32};
use crate::ir::{BinOp, CmpOp, Type};
use crate::templates::nf4::Nf4Config;

/// Columns of `A` staged per window.
pub const WINDOW: u32 = 1024;
/// Padding words after each group of 32 staged columns when `k % 32 = 0`: 4 keeps every group
/// 16-byte aligned and puts group `g` at bank `4g mod 32`, so 8 lanes reading 16 bytes of 8
/// consecutive groups (one `ld.shared.v4` phase) hit 32 distinct banks.
pub const VECTOR_PAD: u32 = 4;
/// Padding words per 32 staged columns otherwise: lanes read one word each, 33 words apart
/// (32 distinct banks).
pub const SCALAR_PAD: u32 = 1;

/// Words per staged activation row: the window plus `pad` words per 32 columns.
pub const fn row_words(pad: u32) -> u32 {
    WINDOW + WINDOW / 32 * pad
}
/// Packed bytes per lane per body chunk (one `v4.u32`).
const CHUNK_BYTES: u32 = 16;
/// Codes per body chunk.
const CHUNK_CODES: u32 = 32;
/// Columns one thread stages per row when `k % 32 = 0` (one vector load).
const STAGE_VECTOR: u32 = 4;

/// Per-warp state shared by the phases.
struct Row {
    /// The weight row `j` of this warp.
    row: Reg<U32>,
    /// `j · k`: element index of the row's first weight.
    row_elem: Reg<U32>,
    lane: Reg<U32>,
    a_tile: SharedArr<F32>,
    /// One accumulator per activation row `i < GEMV_MAX_M`.
    acc: [Reg<F32>; GEMV_MAX_M as usize],
}

/// Builds the `nf4_gemv` entry. Grid: `ceil(n / 8)` blocks of 256 threads; 36 KiB of static
/// shared memory when `k % 32 = 0`, else 33 KiB (1 KiB more under double quantisation, with
/// the map copy), no dynamic shared memory.
pub(super) fn build<T: Float>(cfg: &Nf4Config) -> KernelBuilder {
    let mut k = KernelBuilder::new(GEMV_ENTRY, cfg.arch);
    k.require_block([THREADS, 1, 1]);
    let e = entry_prologue_table::<T>(&mut k, cfg, ("a", "c"), THREADS, CodeTable::Aligned256);
    let aligned = cfg.k.is_multiple_of(CHUNK_CODES);
    let pad = if aligned { VECTOR_PAD } else { SCALAR_PAD };
    let a_tile = k.shared_array::<F32>("a_window", GEMV_MAX_M * row_words(pad));
    let tid = k.tid_x();
    let warp = k.shr(tid, 5u32);
    let lane = k.and(tid, 31u32);
    let block = k.ctaid_x();
    let row = k.mad_lo(block, GEMV_ROWS_PER_BLOCK, warp);
    let row_ok = k.setp_lt(row, cfg.n);
    // Only read under `row_ok`, where it cannot wrap.
    let row_elem = k.mul_lo(row, cfg.k);
    let acc = std::array::from_fn(|_| k.reg::<F32>());
    let r = Row {
        row,
        row_elem,
        lane,
        a_tile,
        acc,
    };
    // Loop-invariant pieces of `k % 32 = 0`: this thread's first staged column `4t` and its
    // shared slot, lane `l`'s first column `32l` and its group of the window (word `36l`).
    let vectors = aligned.then(|| {
        let first = k.shl(tid, STAGE_VECTOR.trailing_zeros());
        let slot = padded(&mut k, first, VECTOR_PAD);
        let stage_slot = k.shared_elem(a_tile, slot);
        let lane_col = k.shl(lane, CHUNK_CODES.trailing_zeros());
        let base = k.shared_base(a_tile);
        let group = k.mad_lo(lane, 4 * (CHUNK_CODES + VECTOR_PAD), base);
        Vectors {
            first,
            stage_slot,
            lane_col,
            group,
        }
    });
    // `m` is uniform over the grid, so the barriers inside stay block-uniform; with `m ≥ 1`
    // row 0 needs no further test ([`for_each_activation_row`]).
    let rows = k.setp(CmpOp::Gt, e.m, 0u32);
    k.if_then(rows, |k| {
        for_each_activation_row(k, cfg, e.m, |k, i, _| k.assign(r.acc[i], 0.0f32));
        k.for_range(0u32, cfg.k, WINDOW, |k, col0| {
            match &vectors {
                Some(v) => stage_vectors(k, cfg, &e, v, col0),
                None => stage_window(k, cfg, &e, a_tile, tid, col0),
            }
            k.bar_sync();
            // Warp-uniform: whole warps skip.
            k.if_then(row_ok, |k| match &vectors {
                Some(v) => aligned_window(k, cfg, &e, &r, col0, v),
                None => accumulate_window(k, cfg, &e, &r, col0),
            });
            k.bar_sync();
        });
        reduce_and_store(k, cfg, &e, &r, row_ok);
    });
    k
}

/// Registers formed once for `k % 32 = 0` (see [`build`]).
struct Vectors {
    /// `4t`: this thread's first staged column of a window, and its shared byte.
    first: Reg<U32>,
    stage_slot: Reg<U32>,
    /// `32l`: lane `l`'s first column of a window, and the shared byte of its group.
    lane_col: Reg<U32>,
    group: Reg<U32>,
}

/// The shared-memory word of window column `c`: `c + pad · (c / 32)`.
fn padded(k: &mut KernelBuilder, c: Reg<U32>, pad: u32) -> Reg<U32> {
    let group = k.shr(c, 5u32);
    k.mad_lo(group, pad, c)
}

/// `k % 32 = 0`: thread `t` stages `a_window[i][padded(c)] = A[i, col0 + c]` for the four
/// columns `c = 4t ..` and every `i < m`, when they lie before `k` (columns past `k` belong to
/// no chunk and are never read). Rows are `k` elements apart, a multiple of 32, so every
/// vector is aligned; row `i` is the same address plus `i · k` elements (an immediate).
fn stage_vectors<T: Float>(
    k: &mut KernelBuilder,
    cfg: &Nf4Config,
    e: &Entry<T>,
    v: &Vectors,
    col0: Reg<U32>,
) {
    k.comment("stage the activation window: 4 columns per thread and row, as f32");
    let slot = v.stage_slot;
    let col = k.add(col0, v.first);
    before_k(k, cfg, col, |k| {
        let addr = k.elem_addr(e.input, col);
        for_each_activation_row(k, cfg, e.m, |k, i, row_offset| {
            let from = (row_offset * T::TYPE.bytes()) as i32;
            let to = (4 * i as u32 * row_words(VECTOR_PAD)) as i32;
            match T::TYPE {
                Type::F32 => {
                    let v = k.ld_global_v4::<F32>(addr, from, true);
                    k.st_shared_v4(slot, to, v);
                }
                // A bf16 is the top half of its f32: move each half there (exact).
                Type::BF16 => {
                    let [lo, hi] = k.ld_global_v2::<U32>(addr, from, true);
                    let v = [lo, hi].map(|w| [k.shl(w, 16u32), k.and(w, 0xFFFF_0000u32)]);
                    k.st_shared_v4(slot, to, [v[0][0], v[0][1], v[1][0], v[1][1]]);
                }
                _ => {
                    let halves = k.ld_global_v4::<F16>(addr, from, true);
                    let v = halves.map(|h| k.to_f32(h));
                    k.st_shared_v4(slot, to, v);
                }
            }
        });
    });
}

/// Runs `body` when window column `col` (the `k % 32 = 0` path's columns come in whole groups
/// of 4 or 32) lies before `k`: always, without a test, when `k` is a whole number of windows.
fn before_k(
    k: &mut KernelBuilder,
    cfg: &Nf4Config,
    col: Reg<U32>,
    body: impl FnOnce(&mut KernelBuilder),
) {
    if cfg.k.is_multiple_of(WINDOW) {
        return body(k);
    }
    let inside = k.setp_lt(col, cfg.k);
    k.if_then(inside, body);
}

/// `a_window[i][padded(t)] = A[i, col0 + t]` for `i < m`, `t < WINDOW` (0 past `k`).
///
/// Thread `tid` loads element `tid + 256s − δ` of the window, where `δ = (i·k) mod 32` makes
/// every warp request start on a 128-byte (f32) / 64-byte (half) boundary of `A` (`col0` is a
/// multiple of 32, so `δ` is a compile-time constant per row); threads before the window start
/// skip. Aligned rows (`δ = 0`) use immediate shared offsets.
fn stage_window<T: Float>(
    k: &mut KernelBuilder,
    cfg: &Nf4Config,
    e: &Entry<T>,
    a_tile: SharedArr<F32>,
    tid: Reg<U32>,
    col0: Reg<U32>,
) {
    k.comment("stage the activation window A[0..m, col0 .. col0 + 1024] as f32");
    let slot_index = padded(k, tid, SCALAR_PAD);
    let slot = k.shared_elem(a_tile, slot_index);
    let first_col = k.add(col0, tid);
    let next = k.add(col0, WINDOW);
    let col_end = k.min(next, cfg.k);
    for_each_activation_row(k, cfg, e.m, |k, i, row_offset| {
        let delta = row_offset % 32;
        let row_words = i as u32 * row_words(SCALAR_PAD);
        if delta == 0 {
            for s in 0..WINDOW / THREADS {
                let col = k.add(first_col, s * THREADS);
                let inside = k.setp_lt(col, cfg.k);
                let value = k.var::<F32>(0.0f32);
                k.if_then(inside, |k| {
                    let index = k.add(col, row_offset);
                    let v = load_activation(k, e.input, index);
                    k.assign(value, v);
                });
                let word = row_words + s * (THREADS + THREADS / 32 * SCALAR_PAD);
                k.st_shared(slot, 4 * word as i32, value);
            }
            return;
        }
        for s in 0..=WINDOW / THREADS {
            let shifted = k.add(tid, s * THREADS);
            let after_start = k.setp_ge(shifted, delta);
            k.if_then(after_start, |k| {
                let rel = k.sub(shifted, delta);
                let col = k.add(col0, rel);
                let in_window = k.setp_lt(rel, WINDOW);
                let value = k.var::<F32>(0.0f32);
                let inside = k.setp_lt(col, col_end);
                k.if_then(inside, |k| {
                    let index = k.add(col, row_offset);
                    let v = load_activation(k, e.input, index);
                    k.assign(value, v);
                });
                k.if_then(in_window, |k| {
                    let word = padded(k, rel, SCALAR_PAD);
                    let slot = k.shared_elem(a_tile, word);
                    k.st_shared(slot, 4 * row_words as i32, value);
                });
            });
        }
    });
}

/// `k % 32 = 0`: every row, hence every window, starts 16-byte aligned, so the window is all
/// body and lane `l`'s chunk is columns `32l ..` of the window (group `l`, at shared byte
/// `group`): `acc[i] += (Σ_t A[i, c + t] · NF4_CODE[code_t]) · absmax` when `c < k`.
fn aligned_window<T: Float>(
    k: &mut KernelBuilder,
    cfg: &Nf4Config,
    e: &Entry<T>,
    r: &Row,
    col0: Reg<U32>,
    v: &Vectors,
) {
    k.comment("body: one 16-byte chunk of packed codes per lane, activations by ld.shared.v4");
    let group = v.group;
    let col = k.add(col0, v.lane_col);
    before_k(k, cfg, col, |k| {
        let elem0 = k.add(r.row_elem, col);
        let byte = k.shr(elem0, 1u32);
        let addr = k.elem_addr(e.weights.packed, byte);
        let words = k.ld_global_v4::<U32>(addr, 0, true);
        let absmax = absmax_at(k, &e.weights, elem0);
        let codes = chunk_codes(k, e, words);
        for_each_activation_row(k, cfg, e.m, |k, i, _| {
            let mut partial = None;
            for (q, w) in codes.chunks_exact(4).enumerate() {
                let offset = 4 * (i as u32 * row_words(VECTOR_PAD) + 4 * q as u32);
                let a = k.ld_shared_v4::<F32>(group, offset as i32);
                for (&a, &w) in a.iter().zip(w) {
                    partial = Some(match partial {
                        None => rounded(k, BinOp::Mul, a, w),
                        Some(p) => {
                            k.fma_into(p, a, w, p);
                            p
                        }
                    });
                }
            }
            let partial = partial.expect("a chunk has 32 codes");
            k.fma_into(r.acc[i], partial, absmax, r.acc[i]);
        });
    });
}

/// `NF4_CODE[code_t]` for the chunk's 32 codes in column order: byte `q` of a little-endian
/// word holds element `2q` in its high nibble, `2q + 1` in its low one.
///
/// Per word, `(w >> 2) & 0x3C3C3C3C` and `(w << 2) & 0x3C3C3C3C` hold each byte's high and low
/// code times 4 (a table offset) in that byte; the table sits on a 256-byte boundary
/// ([`CodeTable::Aligned256`]), so `prmt(offsets, table, 0x765q)` (byte `q` of the offsets
/// under the table address's upper three bytes) is the entry's address: per code one `prmt`
/// and one `ld.shared.f32`, and four instructions per 8 codes, instead of a `bfe` and a `mad`
/// per code.
fn chunk_codes<T: Float>(
    k: &mut KernelBuilder,
    e: &Entry<T>,
    words: [Reg<U32>; 4],
) -> Vec<Reg<F32>> {
    let table = e
        .weights
        .codebook
        .expect("the GEMV declares the aligned code table");
    words
        .into_iter()
        .flat_map(|word| word_codes(k, table, word))
        .collect()
}

/// `NF4_CODE[code]` for the 8 codes of one little-endian packed word, in column order, looked
/// up in the [`CodeTable::Aligned256`] table at `table` ([`chunk_codes`]: four instructions
/// form the 8 addresses, then one `prmt` and one `ld.shared.f32` per code).
pub(super) fn word_codes(k: &mut KernelBuilder, table: Reg<U32>, word: Reg<U32>) -> [Reg<F32>; 8] {
    const OFFSETS: u32 = 0x3C3C_3C3C;
    let down = k.shr(word, 2u32);
    let even = k.and(down, OFFSETS);
    let up = k.shl(word, 2u32);
    let odd = k.and(up, OFFSETS);
    std::array::from_fn(|c| {
        let (q, offsets) = (c as u32 / 2, if c % 2 == 0 { even } else { odd });
        let at = k.prmt(offsets, table, 0x7650 | q);
        k.ld_shared::<F32>(at, 0)
    })
}

/// Splits the row's bytes inside the window into head / 16-byte body / tail (`k % 32 ≠ 0`):
/// `start = (j·k + col0) / 2`, `end = (j·k + min(col0 + 1024, k)) / 2`,
/// `head_end = min(align16(start), end)`, `body_end = max(floor16(end), head_end)`.
fn accumulate_window<T: Float>(
    k: &mut KernelBuilder,
    cfg: &Nf4Config,
    e: &Entry<T>,
    r: &Row,
    col0: Reg<U32>,
) {
    let window_elem = k.add(r.row_elem, col0);
    let next = k.add(col0, WINDOW);
    let col_end = k.min(next, cfg.k);
    let end_elem = k.add(r.row_elem, col_end);
    let start = k.shr(window_elem, 1u32);
    let end = k.shr(end_elem, 1u32);
    let rounded_up = k.add(start, CHUNK_BYTES - 1);
    let aligned_start = k.and(rounded_up, !(CHUNK_BYTES - 1));
    let head_end = k.min(aligned_start, end);
    let aligned_end = k.and(end, !(CHUNK_BYTES - 1));
    let body_end = k.max(aligned_end, head_end);
    k.comment("head: bytes before the first 16-byte boundary");
    byte_pair(k, cfg, e, r, window_elem, start, head_end);
    body_chunk(k, cfg, e, r, window_elem, head_end, body_end);
    k.comment("tail: bytes after the last 16-byte boundary");
    byte_pair(k, cfg, e, r, window_elem, body_end, end);
}

/// Body (`k % 32 ≠ 0`): lane `l` takes the chunk at byte `b = start + 16l` when `b < end` (a
/// window holds at most 32 chunks): `acc[i] += Σ_t A[i, c + t] · NF4_CODE[code_t] · absmax`,
/// `c` its first column.
fn body_chunk<T: Float>(
    k: &mut KernelBuilder,
    cfg: &Nf4Config,
    e: &Entry<T>,
    r: &Row,
    window_elem: Reg<U32>,
    start: Reg<U32>,
    end: Reg<U32>,
) {
    k.comment("body: one 16-byte chunk of packed codes per lane");
    let byte = k.mad_lo(r.lane, CHUNK_BYTES, start);
    let has_chunk = k.setp_lt(byte, end);
    k.if_then(has_chunk, |k| {
        let addr = k.elem_addr(e.weights.packed, byte);
        let words = k.ld_global_v4::<U32>(addr, 0, true);
        let elem0 = k.shl(byte, 1u32);
        let absmax = absmax_at(k, &e.weights, elem0);
        let w = chunk_codes(k, e, words);
        let slots = chunk_slots(k, r, window_elem, elem0);
        // The chunk's 32 weights share one absmax: `Σ_t a_t · (code_t · absmax)` is taken as
        // `(Σ_t a_t · code_t) · absmax`, one multiply per chunk and row instead of one per
        // weight (with a one-hot row still exactly `code · absmax`, the host's `mul.rn`).
        for_each_activation_row(k, cfg, e.m, |k, i, _| {
            let partial = k.var::<F32>(0.0f32);
            for (t, (wv, slot)) in w.iter().zip(&slots).enumerate() {
                let word = i as u32 * row_words(SCALAR_PAD) + t as u32;
                let a = k.ld_shared::<F32>(*slot, 4 * word as i32);
                k.fma_into(partial, a, *wv, partial);
            }
            k.fma_into(r.acc[i], partial, absmax, r.acc[i]);
        });
    });
}

/// Shared addresses to read window columns `c .. c + 32` from (with immediate offset `t`):
/// `padded(c + t) = padded(c) + t + SCALAR_PAD · [t ≥ 32 − c mod 32]` (`c mod 32` is the same in every
/// lane of the warp).
fn chunk_slots(
    k: &mut KernelBuilder,
    r: &Row,
    window_elem: Reg<U32>,
    elem0: Reg<U32>,
) -> Vec<Reg<U32>> {
    let col = k.sub(elem0, window_elem);
    let index = padded(k, col, SCALAR_PAD);
    let base = k.shared_elem(r.a_tile, index);
    let next_group = k.add(base, 4 * SCALAR_PAD);
    let misalign = k.and(col, CHUNK_CODES - 1);
    let crossing = k.sub(CHUNK_CODES, misalign);
    (0..CHUNK_CODES)
        .map(|t| {
            let past = k.setp(CmpOp::Le, crossing, t);
            k.selp(next_group, base, past)
        })
        .collect()
}
/// Head or tail: lane `l` takes byte `b = start + l` when `b < end` (at most 15 bytes): two
/// weights, both in one block (elements `2b`, `2b + 1` never straddle an even boundary), whose
/// columns share a padding group.
fn byte_pair<T: Float>(
    k: &mut KernelBuilder,
    cfg: &Nf4Config,
    e: &Entry<T>,
    r: &Row,
    window_elem: Reg<U32>,
    start: Reg<U32>,
    end: Reg<U32>,
) {
    let byte = k.add(start, r.lane);
    let has_byte = k.setp_lt(byte, end);
    k.if_then(has_byte, |k| {
        let addr = k.elem_addr(e.weights.packed, byte);
        let packed = load_byte(k, addr);
        let elem = k.shl(byte, 1u32);
        let absmax = absmax_at(k, &e.weights, elem);
        let hi = nibble(k, packed, 4);
        let lo = nibble(k, packed, 0);
        let w_even = dequant(k, &e.weights, hi, absmax);
        let w_odd = dequant(k, &e.weights, lo, absmax);
        let col = k.sub(elem, window_elem);
        let index = padded(k, col, SCALAR_PAD);
        let slot = k.shared_elem(r.a_tile, index);
        for_each_activation_row(k, cfg, e.m, |k, i, _| {
            let word = (i as u32 * row_words(SCALAR_PAD)) as i32;
            let a0 = k.ld_shared::<F32>(slot, 4 * word);
            let a1 = k.ld_shared::<F32>(slot, 4 * word + 4);
            k.fma_into(r.acc[i], a0, w_even, r.acc[i]);
            k.fma_into(r.acc[i], a1, w_odd, r.acc[i]);
        });
    });
}

/// Runs `body(i, i·k)` for each activation row `i < m` (`m ≤ GEMV_MAX_M`): row 0 always (the
/// caller runs under `m > 0`), row `i > 0` under `if m > i` (uniform over the grid), the tests
/// nested ([`nested_rows`]). Rows whose offset `i·k` does not fit u32 cannot be below a valid `m`
/// and are not generated.
fn for_each_activation_row(
    k: &mut KernelBuilder,
    cfg: &Nf4Config,
    m: Reg<U32>,
    mut body: impl FnMut(&mut KernelBuilder, usize, u32),
) {
    body(k, 0, 0);
    nested_rows(k, m, cfg.k, 1, &mut body);
}

/// Row `i` and, inside its `if m > i`, the rows after it: with `m` rows present the checks
/// cost `m + 1` tests instead of [`GEMV_MAX_M`].
fn nested_rows(
    k: &mut KernelBuilder,
    m: Reg<U32>,
    stride: u32,
    i: u32,
    body: &mut impl FnMut(&mut KernelBuilder, usize, u32),
) {
    if i == GEMV_MAX_M {
        return;
    }
    let Some(offset) = i.checked_mul(stride) else {
        return;
    };
    let present = k.setp(CmpOp::Gt, m, i);
    k.if_then(present, |k| {
        body(k, i as usize, offset);
        nested_rows(k, m, stride, i + 1, body);
    });
}

/// `C[i, j] = warp_sum(acc[i])`, written by lane 0 for `i < m` (rounded to the output type).
fn reduce_and_store<T: Float>(
    k: &mut KernelBuilder,
    cfg: &Nf4Config,
    e: &Entry<T>,
    r: &Row,
    row_ok: Pred,
) {
    k.comment("warp reduction of each activation row's partial sums");
    let lane0 = k.setp(CmpOp::Eq, r.lane, 0u32);
    let writer = k.and_pred(lane0, row_ok);
    let mut store = |k: &mut KernelBuilder, i: usize, out_offset: u32| {
        let total = k.warp_sum_f32(r.acc[i]);
        k.if_then(writer, |k| {
            let index = k.add(r.row, out_offset);
            store_output(k, e.output, index, total);
        });
    };
    store(k, 0, 0);
    nested_rows(k, e.m, cfg.n, 1, &mut store);
}
