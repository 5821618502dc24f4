//! Forward GEMV for few activation rows (`m ≤ GEMV_MAX_M`): `C[i, j] = Σ_l A[i, l] · Ŵ[j, l]`.
//!
//! Bandwidth-bound: every weight byte is read once. One warp per weight row `j` (8 rows per
//! block); each lane keeps one f32 accumulator per activation row and the warp sums them with
//! butterfly shuffles at the end (fixed order, so results are deterministic).
//!
//! The row's packed bytes `[j·k/2, (j+1)·k/2)` are split into a 16-byte aligned body and, when
//! `k % 32 ≠ 0`, a byte-wise head and tail. In the body each lane loads 16 bytes
//! (`ld.global.nc.v4.u32`, 32 codes; a warp reads 512 contiguous bytes per step) whose 32
//! elements start at an element index that is a multiple of 32, hence lie in one quantisation
//! block: one absmax per 16-byte chunk. Activations are read with 16-byte loads too when
//! `k % 32 = 0` (then every chunk's activation slice is 64/128-byte aligned), element-wise
//! otherwise.

use super::{
    absmax_at, dequant, entry_prologue, load_byte, nibble, store_output, unpack_halves, Entry,
    GEMV_ENTRY, GEMV_MAX_M, GEMV_ROWS_PER_BLOCK, THREADS,
};
use crate::builder::{Float, KernelBuilder, Pred, Reg, F32, U32};
use crate::ir::{CmpOp, Type};
use crate::templates::nf4::Nf4Config;

/// Packed bytes per lane per body step (one `v4.u32`).
const CHUNK_BYTES: u32 = 16;
/// Codes per lane per body step.
const CHUNK_CODES: usize = 32;

/// Per-row state shared by the phases.
struct Row {
    /// The weight row `j` of this warp.
    row: Reg<U32>,
    /// `j · k`: element index of the row's first weight.
    row_elem: Reg<U32>,
    lane: Reg<U32>,
    /// One accumulator per activation row `i < GEMV_MAX_M`.
    acc: [Reg<F32>; GEMV_MAX_M as usize],
}

/// Builds the `nf4_gemv` entry. Grid: `ceil(n / 8)` blocks of 256 threads; no dynamic shared
/// memory.
pub(super) fn build<T: Float>(cfg: &Nf4Config) -> KernelBuilder {
    let mut k = KernelBuilder::new(GEMV_ENTRY, cfg.arch);
    k.require_block([THREADS, 1, 1]);
    let e = entry_prologue::<T>(&mut k, cfg, "a", "c");
    let tid = k.tid_x();
    let warp = k.shr(tid, 5u32);
    let lane = k.and(tid, 31u32);
    let block = k.ctaid_x();
    let row = k.mad_lo(block, GEMV_ROWS_PER_BLOCK, warp);
    let row_elem = k.mul_lo(row, cfg.k);
    let acc = std::array::from_fn(|_| k.var::<F32>(0.0f32));
    let r = Row {
        row,
        row_elem,
        lane,
        acc,
    };
    // The row test is warp-uniform: whole warps skip, and every lane reaches the shuffles.
    let row_ok = k.setp_lt(row, cfg.n);
    k.if_then(row_ok, |k| accumulate_row::<T>(k, cfg, &e, &r));
    reduce_and_store::<T>(&mut k, cfg, &e, &r, row_ok);
    k
}

/// Splits the row's bytes into head / 16-byte body / tail and accumulates each part:
/// `head_end = min(align16(start), end)`, `body_end = max(floor16(end), head_end)`.
fn accumulate_row<T: Float>(k: &mut KernelBuilder, cfg: &Nf4Config, e: &Entry<T>, r: &Row) {
    let row_start = k.shr(r.row_elem, 1u32);
    let row_end = k.add(row_start, cfg.k / 2);
    if cfg.k % (2 * CHUNK_BYTES) == 0 {
        // Every row starts 16-byte aligned: the whole row is body.
        body_loop::<T>(k, cfg, e, r, row_start, row_end);
        return;
    }
    let rounded_up = k.add(row_start, CHUNK_BYTES - 1);
    let aligned_start = k.and(rounded_up, !(CHUNK_BYTES - 1));
    let head_end = k.min(aligned_start, row_end);
    let aligned_end = k.and(row_end, !(CHUNK_BYTES - 1));
    let body_end = k.max(aligned_end, head_end);
    k.comment("row head: bytes before the first 16-byte boundary");
    byte_loop::<T>(k, cfg, e, r, row_start, head_end);
    body_loop::<T>(k, cfg, e, r, head_end, body_end);
    k.comment("row tail: bytes after the last 16-byte boundary");
    byte_loop::<T>(k, cfg, e, r, body_end, row_end);
}

/// Body: lane `l` handles bytes `[start + 16l + 512s, +16)` for s = 0, 1, …:
/// `acc[i] += Σ_t A[i, col0 + t] · NF4_CODE[code_t] · absmax(col0 element block)`.
fn body_loop<T: Float>(
    k: &mut KernelBuilder,
    cfg: &Nf4Config,
    e: &Entry<T>,
    r: &Row,
    start: Reg<U32>,
    end: Reg<U32>,
) {
    k.comment("row body: 16-byte chunks of packed codes, one per lane");
    let first = k.mad_lo(r.lane, CHUNK_BYTES, start);
    k.for_range(first, end, 32 * CHUNK_BYTES, |k, byte| {
        let addr = k.elem_addr(e.weights.packed, byte);
        let words = k.ld_global_v4::<U32>(addr, 0, true);
        let elem0 = k.shl(byte, 1u32);
        let absmax = absmax_at(k, &e.weights, elem0);
        let col0 = k.sub(elem0, r.row_elem);
        // Byte q of a little-endian word holds element 2q in its high nibble.
        let mut w = Vec::with_capacity(CHUNK_CODES);
        for word in words {
            for q in 0..4 {
                for shift in [8 * q + 4, 8 * q] {
                    let code = nibble(k, word, shift);
                    w.push(dequant(k, &e.weights, code, absmax));
                }
            }
        }
        for_each_activation_row(k, cfg, e.m, |k, i, row_offset| {
            let index = k.add(col0, row_offset);
            let a = load_chunk_activations(k, e, index, cfg.k % 32 == 0);
            for (av, wv) in a.iter().zip(&w) {
                k.fma_into(r.acc[i], *av, *wv, r.acc[i]);
            }
        });
    });
}

/// Head or tail: lane `l` handles bytes `start + l + 32s < end`, two weights each (both in
/// one block because elements `2b`, `2b + 1` never straddle an even block boundary).
fn byte_loop<T: Float>(
    k: &mut KernelBuilder,
    cfg: &Nf4Config,
    e: &Entry<T>,
    r: &Row,
    start: Reg<U32>,
    end: Reg<U32>,
) {
    let first = k.add(start, r.lane);
    k.for_range(first, end, 32u32, |k, byte| {
        let addr = k.elem_addr(e.weights.packed, byte);
        let packed = load_byte(k, addr);
        let elem = k.shl(byte, 1u32);
        let absmax = absmax_at(k, &e.weights, elem);
        let col = k.sub(elem, r.row_elem);
        let hi = nibble(k, packed, 4);
        let lo = nibble(k, packed, 0);
        let w_even = dequant(k, &e.weights, hi, absmax);
        let w_odd = dequant(k, &e.weights, lo, absmax);
        for_each_activation_row(k, cfg, e.m, |k, i, row_offset| {
            let index = k.add(col, row_offset);
            let addr = k.elem_addr(e.input, index);
            let a0 = k.ld_global_nc::<T>(addr, 0);
            let a1 = k.ld_global_nc::<T>(addr, T::TYPE.bytes() as i32);
            let (a0, a1) = (k.to_f32(a0), k.to_f32(a1));
            k.fma_into(r.acc[i], a0, w_even, r.acc[i]);
            k.fma_into(r.acc[i], a1, w_odd, r.acc[i]);
        });
    });
}

/// Runs `body(i, i·k)` under `if m > i` for each activation row `i < GEMV_MAX_M` (the test is
/// uniform over the grid). Rows whose offset `i·k` does not fit u32 cannot be below a valid `m`
/// and are not generated.
fn for_each_activation_row(
    k: &mut KernelBuilder,
    cfg: &Nf4Config,
    m: Reg<U32>,
    mut body: impl FnMut(&mut KernelBuilder, usize, u32),
) {
    for i in 0..GEMV_MAX_M {
        let Some(row_offset) = i.checked_mul(cfg.k) else {
            break;
        };
        let present = k.setp(CmpOp::Gt, m, i);
        k.if_then(present, |k| body(k, i as usize, row_offset));
    }
}

/// The 32 activations `A[index .. index + 32]` of one chunk, widened to f32: 16-byte loads when
/// `aligned` (the slice starts on a 64-/128-byte boundary), element loads otherwise.
fn load_chunk_activations<T: Float>(
    k: &mut KernelBuilder,
    e: &Entry<T>,
    index: Reg<U32>,
    aligned: bool,
) -> Vec<Reg<F32>> {
    let addr = k.elem_addr(e.input, index);
    let mut out = Vec::with_capacity(CHUNK_CODES);
    if !aligned {
        for t in 0..CHUNK_CODES as i32 {
            let v = k.ld_global_nc::<T>(addr, t * T::TYPE.bytes() as i32);
            out.push(k.to_f32(v));
        }
        return out;
    }
    let loads = CHUNK_CODES as u32 * T::TYPE.bytes() / 16;
    for v in 0..loads as i32 {
        if T::TYPE == Type::F32 {
            out.extend(k.ld_global_v4::<F32>(addr, 16 * v, true));
        } else {
            for word in k.ld_global_v4::<U32>(addr, 16 * v, true) {
                out.extend(unpack_halves::<T>(k, word));
            }
        }
    }
    out
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
    for i in 0..GEMV_MAX_M {
        let Some(out_offset) = i.checked_mul(cfg.n) else {
            break;
        };
        let present = k.setp(CmpOp::Gt, e.m, i);
        k.if_then(present, |k| {
            let total = k.warp_sum_f32(r.acc[i as usize]);
            k.if_then(writer, |k| {
                let index = k.add(r.row, out_offset);
                store_output(k, e.output, index, total);
            });
        });
    }
}
