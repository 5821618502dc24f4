//! The backward GEMV's accumulation at `m = 1` with one packed word (8 columns) per lane and
//! row, where [`applies`]: `k % block = 0`, blocks of at least 8, and 256 or 512 columns per
//! block (`super::backward_gemv::cols`).
//!
//! Lane `t` of a warp owns columns `l0 + 256·g + 8t .. + 8` of its column group `g` (a warp
//! reads 128 consecutive bytes of a `W` row per request), so the block's 8 warps form
//! `cols / 256` column groups by `R = 8 / (cols / 256)` row groups; row group `r` takes the
//! window rows `jj ≡ r (mod R)`, ascending, [`UNROLL`] per trip. Per row a lane issues one
//! `ld.global.nc.u32` (the 8 codes), the row's `G_C` value and the block's staged absmax (one
//! `ld.shared.f32` each: the 8 columns lie in one quantisation block, `k % block = 0`), their
//! product `s = g · absmax`, then per code a `prmt` address and an `ld.shared.f32` in the
//! 256-byte aligned f32 code table (four instructions form the 8 addresses,
//! `gemv::word_codes`) and one `fma` `acc_c += NF4_CODE[code_c] · s`. Full trips check no row
//! (a tail loop takes the window's last `< UNROLL · R` rows one at a time); addresses are formed
//! once per trip, rows reached by immediate offsets.
//!
//! Rounding: `NF4_CODE · (g · absmax)` instead of `g · (NF4_CODE · absmax)`: one f32 rounding
//! moved, at most `2⁻²⁴` relative per product (the forward GEMV applies the absmax once per
//! chunk likewise); the sums stay in f32 and in a fixed order (rows ascending per row group,
//! row groups in order), so results are deterministic.
//!
//! The row groups' partial sums meet in shared memory (`partial[r][c]`), and thread `tid` adds
//! columns `tid + 256·q` over `r` in order and stores `G_A[0, l0 + c]` (or the slice's f32
//! partial) under `l0 + c < k`.

use super::backward_gemv::{Walk, ROW_WINDOW};
use super::gemv::word_codes;
use super::{store_output, THREADS, WARPS};
use crate::builder::{Float, KernelBuilder, Pred, Reg, SharedArr, F32, U32};
use crate::ir::CmpOp;
use crate::templates::nf4::Nf4Config;

/// Columns a lane owns: one packed `u32` per row.
const LANE_COLS: u32 = 8;
/// Columns a warp owns.
const WARP_COLS: u32 = 32 * LANE_COLS;
/// Rows each warp handles per full loop trip: 8 (5.21 instructions per weight, 64 registers
/// at most, no spills) rather than 4 (5.39): half the trip's address set-up per row.
pub const UNROLL: u32 = 8;

/// Whether the word layout serves `cfg` with `cols` columns per block: rows start on block
/// boundaries and blocks hold whole words (`k % block = 0`, `block ≥ 8`, so a lane's 8
/// columns share one absmax and its word is 4-byte aligned), whole warps of columns
/// (`cols % 256 = 0`), and a trip's furthest row offset fits an immediate.
pub fn applies(cfg: &Nf4Config, cols: u32) -> bool {
    let row_groups = WARPS / (cols / WARP_COLS).max(1);
    let furthest = u64::from((UNROLL - 1) * row_groups) * u64::from(cfg.k / 2);
    cfg.k.is_multiple_of(cfg.block)
        && cfg.block >= LANE_COLS
        && cols.is_multiple_of(WARP_COLS)
        && furthest <= i32::MAX as u64
}

/// Per-lane state of the word layout.
struct WordLane {
    /// The warp's row group and the block's row groups.
    row_group: Reg<U32>,
    row_groups: u32,
    /// The lane's first column within the block, and whether its columns exist (`< k`).
    col_in_block: Reg<U32>,
    col_ok: Pred,
    /// `(l0 + col_in_block) / 2`: the lane's byte within a row of packed codes.
    col_byte: Reg<U32>,
    /// `acc[c]`: column `l0 + col_in_block + c`.
    acc: [Reg<F32>; LANE_COLS as usize],
}

/// The phases at `m = 1` (module docs); `single` is `m = 1` (true here), the one staged row.
pub(super) fn reduce<T: Float, O: Float>(
    k: &mut KernelBuilder,
    walk: &Walk<'_, T, O>,
    partial: SharedArr<F32>,
    single: Pred,
) {
    let cols = super::backward_gemv::cols(walk.cfg);
    let col_groups = cols / WARP_COLS;
    let warp = k.shr(walk.tid, 5u32);
    let lane = k.and(walk.tid, 31u32);
    let col_group = k.and(warp, col_groups - 1);
    let row_group = k.shr(warp, col_groups.trailing_zeros());
    let lane_col = k.shl(lane, LANE_COLS.trailing_zeros());
    let col_in_block = k.mad_lo(col_group, WARP_COLS, lane_col);
    let col = k.add(walk.l_base, col_in_block);
    let col_ok = k.setp_lt(col, walk.cfg.k);
    let col_byte = k.shr(col, 1u32);
    let s = WordLane {
        row_group,
        row_groups: WARPS / col_groups,
        col_in_block,
        col_ok,
        col_byte,
        acc: std::array::from_fn(|_| k.var::<F32>(0.0f32)),
    };
    let no_row = k.var::<U32>(0u32);
    let reader = walk.absmax.reader(k, walk.l_base, col, no_row);
    walk.windows(k, &[single], &mut |k, j0, absmax_base| {
        k.if_then(s.col_ok, |k| {
            accumulate_window(k, walk, &s, j0, &mut |k, first, j| {
                let row = walk.absmax.row_at(k, absmax_base, first);
                walk.absmax.lane_tile(k, &reader, row, j)
            });
        });
    });
    write_partials(k, &s, partial, lane);
    k.bar_sync();
    combine_and_store(k, walk, &s, partial);
}

/// The lane's staged absmax for rows from window row `first` (weight row `j`).
type LaneAbsmax<'a> =
    dyn FnMut(&mut KernelBuilder, Reg<U32>, Reg<U32>) -> super::absmax_stage::LaneTile + 'a;

/// Row group `r` of `R` takes window rows `jj = r + R·i` below the rows' end: full trips of
/// [`UNROLL`] rows unchecked, then the rest one row per trip.
fn accumulate_window<T: Float, O: Float>(
    k: &mut KernelBuilder,
    walk: &Walk<'_, T, O>,
    s: &WordLane,
    j0: Reg<U32>,
    absmax: &mut LaneAbsmax<'_>,
) {
    k.comment("accumulate this warp's rows of the window, a packed word per lane and row");
    let g_base = k.shared_base(walk.g_window);
    let remaining = k.sub(walk.rows.end, j0);
    let window_rows = k.min(remaining, ROW_WINDOW);
    let step = s.row_groups;
    let first = k.var::<U32>(s.row_group);
    let mut trip = |k: &mut KernelBuilder, rows: u32| {
        let j = k.add(j0, first);
        let byte = k.mad_lo(j, walk.cfg.k / 2, s.col_byte);
        let addr = k.elem_addr(walk.e.weights.packed, byte);
        let g_at = k.mad_lo(first, 4u32, g_base);
        let lane = absmax(k, first, j);
        let table = walk
            .e
            .weights
            .codebook
            .expect("the backward GEMV declares the aligned code table");
        for u in 0..rows {
            let r = u * step;
            let word = k.ld_global_nc::<U32>(addr, (r * (walk.cfg.k / 2)) as i32);
            let g = k.ld_shared::<F32>(g_at, (4 * r) as i32);
            let scale = walk.absmax.read(k, &lane, r);
            let gs = k.mul(g, scale);
            let codes = word_codes(k, table, word);
            for (acc, code) in s.acc.iter().zip(codes) {
                k.fma_into(*acc, code, gs, *acc);
            }
        }
        k.add_into(first, first, rows * step);
    };
    k.while_loop(
        |k| {
            let last = k.add(first, (UNROLL - 1) * step);
            k.setp_lt(last, window_rows)
        },
        |k| trip(k, UNROLL),
    );
    k.while_loop(|k| k.setp_lt(first, window_rows), |k| trip(k, 1));
}

/// `partial[r][c + e] = acc[e]` for the warp's row group `r` and the lane's columns `c ..
/// c + 8`, two `st.shared.v4`: lanes with bit 2 set store their upper half first, so the
/// 8 lanes of each 16-byte phase cover 32 distinct banks.
fn write_partials(k: &mut KernelBuilder, s: &WordLane, partial: SharedArr<F32>, lane: Reg<U32>) {
    k.comment("each warp's partial sums -> shared memory");
    let block_cols = WARPS / s.row_groups * WARP_COLS;
    let word = k.mad_lo(s.row_group, block_cols, s.col_in_block);
    let at = k.shared_elem(partial, word);
    let quarter = k.and(lane, 4u32);
    let swapped = k.setp(CmpOp::Ne, quarter, 0u32);
    let half_bytes = k.shl(quarter, 2u32);
    let first_at = k.add(at, half_bytes);
    let other = k.xor(half_bytes, 16u32);
    let second_at = k.add(at, other);
    let [lo, hi] = [0usize, 4].map(|h| -> [Reg<F32>; 4] { std::array::from_fn(|e| s.acc[h + e]) });
    let first: [Reg<F32>; 4] = std::array::from_fn(|e| k.selp(hi[e], lo[e], swapped));
    let second: [Reg<F32>; 4] = std::array::from_fn(|e| k.selp(lo[e], hi[e], swapped));
    k.st_shared_v4(first_at, 0, first);
    k.st_shared_v4(second_at, 0, second);
}

/// `out[l0 + c] = Σ_r partial[r][c]` (row groups in order; `out` is `G_A`'s row 0, or the
/// slice's part of the workspace), thread `tid` taking `c = tid + 256·q` where `l0 + c < k`.
fn combine_and_store<T: Float, O: Float>(
    k: &mut KernelBuilder,
    walk: &Walk<'_, T, O>,
    s: &WordLane,
    partial: SharedArr<F32>,
) {
    k.comment("sum the row groups' partials in order and store G_A");
    let block_cols = WARPS / s.row_groups * WARP_COLS;
    let slot = k.shared_elem(partial, walk.tid);
    for q in 0..block_cols / THREADS {
        let c = k.add(walk.tid, q * THREADS);
        let col = k.add(walk.l_base, c);
        let inside = k.setp_lt(col, walk.cfg.k);
        k.if_then(inside, |k| {
            let offset = 4 * (q * THREADS) as i32;
            let total = k.ld_shared::<F32>(slot, offset);
            for r in 1..s.row_groups {
                let p = k.ld_shared::<F32>(slot, offset + (4 * r * block_cols) as i32);
                k.add_into(total, total, p);
            }
            let index = walk.rows.output_index(k, col);
            store_output(k, walk.e.output, index, total);
        });
    }
}
