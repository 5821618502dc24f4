//! The layout pre-pass of the NCHW tensor-core forward (`conv2d_implicit_gemm_channels_last`,
//! as cuDNN runs NCHW tensor-core convolutions), bit-exact copies:
//! - `conv2d_to_channels_last` transposes every plane of a `[P][R][C]` tensor to
//!   `[P][C][R]`: `x [N, C_in, H·W]` → `[N, H·W, C_in]` (NHWC), so the implicit GEMM's A
//!   windows are 16-byte `cp.async` chunks of 8 consecutive channels instead of per-tap
//!   element gathers;
//! - `conv2d_filter_to_channels_last` writes `w [C_out, Cg, KH·KW]` as `[C_out, KH·KW, Cg]`
//!   (few taps per row: the square tile would leave most lanes idle, see [`build_filter`]).
//!
//! `conv2d_to_channels_last`:
//! Block `(32, 8)` moves one 32 × 32 tile of one plane through shared memory; grid
//! `(⌈C / 32⌉, ⌈R / 32⌉, P)`. Loads: a warp reads 32 consecutive elements of one row
//! (64 bytes, whole sectors); stores: a warp writes 32 consecutive elements of one column of
//! the source, a row of the destination. The tile's rows are [`TILE_STRIDE`] halves (17
//! words, odd) apart, so the column reads of 32 lanes fall in 32 different banks and the row
//! writes of a warp (16 consecutive words) in 16: one wavefront each. Only elements inside
//! `R × C` are loaded, staged, read back and stored.

use super::common::{conv_kernel, div_const, rem_const, Problem};
use crate::arch::Arch;
use crate::builder::{KernelBuilder, Scalar, U32};
use crate::templates::conv::Conv2dConfig;

/// The activation transpose's entry name.
pub const ENTRY: &str = "conv2d_to_channels_last";
/// The filter transpose's entry name.
pub const ENTRY_FILTER: &str = "conv2d_filter_to_channels_last";
/// Threads per block of the filter transpose.
pub const FILTER_THREADS: u32 = 256;
/// Tile edge (rows and columns of one block's tile).
pub const TILE: u32 = 32;
/// Block rows: each thread moves `TILE / BLOCK_ROWS` elements per phase.
pub const BLOCK_ROWS: u32 = 8;
/// Elements between the tile's rows in shared memory: 34 halves = 17 words, odd, so the 32
/// rows of one column start in 32 different banks.
const TILE_STRIDE: u32 = TILE + 2;

/// Builds `conv2d_to_channels_last(src, dst, rows, cols)`:
/// `dst[p][c][r] = src[p][r][c]` for `p = ctaid.z`, `r < rows`, `c < cols`.
pub(crate) fn build<T: Scalar>(arch: Arch) -> KernelBuilder {
    assert_eq!(
        T::TYPE.bytes(),
        2,
        "the tile's bank layout assumes 2-byte elements"
    );
    let mut k = conv_kernel(ENTRY, arch);
    k.require_block([TILE, BLOCK_ROWS, 1]);
    let src = k.param_ptr::<T>("src");
    let dst = k.param_ptr::<T>("dst");
    let rows = k.param::<U32>("rows");
    let cols = k.param::<U32>("cols");
    let (src, dst) = (k.global_ptr(src), k.global_ptr(dst));
    let (rows, cols) = (k.load_param(rows), k.load_param(cols));
    let tile = k.shared_array::<T>("tile", TILE * TILE_STRIDE);
    let (tx, ty) = (k.tid_x(), k.tid_y());
    let bx = k.ctaid_x();
    let col0 = k.mul_lo(bx, TILE);
    let by = k.ctaid_y();
    let row0 = k.mul_lo(by, TILE);
    let plane = k.ctaid_z();
    let plane_len = k.mul_lo(rows, cols);
    let plane_base = k.mul_lo(plane, plane_len);

    k.comment("load: a warp reads 32 consecutive elements of source row row0 + ty + 8i");
    let col = k.add(col0, tx);
    let col_ok = k.setp_lt(col, cols);
    let src_col = k.add(plane_base, col);
    let staged = k.mad_lo(ty, TILE_STRIDE, tx);
    let staged = k.shared_elem(tile, staged);
    for i in 0..TILE / BLOCK_ROWS {
        let r = k.add(row0, ty);
        let r = k.add(r, i * BLOCK_ROWS);
        let r_ok = k.setp_lt(r, rows);
        let ok = k.and_pred(r_ok, col_ok);
        k.if_then(ok, |k| {
            let index = k.mad_lo(r, cols, src_col);
            let addr = k.elem_addr(src, index);
            let v = k.ld_global_nc::<T>(addr, 0);
            let offset = (i * BLOCK_ROWS * TILE_STRIDE * T::TYPE.bytes()) as i32;
            k.st_shared(staged, offset, v);
        });
    }
    k.bar_sync();

    k.comment("store: a warp writes 32 consecutive elements of destination row col0 + ty + 8i");
    let row = k.add(row0, tx);
    let row_ok = k.setp_lt(row, rows);
    let dst_row = k.add(plane_base, row);
    let read = k.mad_lo(tx, TILE_STRIDE, ty);
    let read = k.shared_elem(tile, read);
    for i in 0..TILE / BLOCK_ROWS {
        let c = k.add(col0, ty);
        let c = k.add(c, i * BLOCK_ROWS);
        let c_ok = k.setp_lt(c, cols);
        let ok = k.and_pred(c_ok, row_ok);
        k.if_then(ok, |k| {
            let v = k.ld_shared::<T>(read, (i * BLOCK_ROWS * T::TYPE.bytes()) as i32);
            let index = k.mad_lo(c, rows, dst_row);
            let addr = k.elem_addr(dst, index);
            k.st_global(addr, 0, v);
        });
    }
    k
}

/// Builds `conv2d_filter_to_channels_last(w, dst)`: `dst[o][t][c] = w[o][c][t]` for the
/// `KH·KW = T` taps. Block [`FILTER_THREADS`] moves channels `32·ctaid.y ..` (at most 32) of
/// filter `o = ctaid.x`; grid `(C_out, ⌈Cg / 32⌉)`. Their `32·T` source elements are
/// contiguous: consecutive threads load consecutive elements (whole sectors) and stage
/// element `(c, t)` at `c·S + t` ([`filter_row`]: `S` halves an odd number of words), then
/// write each tap's run of up to 32 channels (64 bytes) with consecutive threads on
/// consecutive channels, whose reads `S` apart fall in 32 different banks.
pub(crate) fn build_filter<T: Scalar>(cfg: &Conv2dConfig, arch: Arch) -> KernelBuilder {
    assert_eq!(
        T::TYPE.bytes(),
        2,
        "the tile's bank layout assumes 2-byte elements"
    );
    let p = Problem::new(cfg);
    let taps = p.taps;
    let mut k = conv_kernel(ENTRY_FILTER, arch);
    k.require_block([FILTER_THREADS, 1, 1]);
    let src = k.param_ptr::<T>("w");
    let dst = k.param_ptr::<T>("dst");
    let (src, dst) = (k.global_ptr(src), k.global_ptr(dst));
    let row = filter_row(taps);
    let tile = k.shared_array::<T>("tile", TILE * row);
    let tid = k.tid_x();
    let o = k.ctaid_x();
    let by = k.ctaid_y();
    let c0 = k.mul_lo(by, TILE);
    let left = k.sub(p.cg, c0);
    let channels = k.min(left, TILE);
    let first = k.mad_lo(o, p.cg, c0);
    let first = k.mul_lo(first, taps);
    let len = k.mul_lo(channels, taps);

    k.comment("load: the block's channels x taps are contiguous; stage (c, t) at c*S + t");
    k.for_range(tid, len, FILTER_THREADS, |k, f| {
        let index = k.add(first, f);
        let addr = k.elem_addr(src, index);
        let v = k.ld_global_nc::<T>(addr, 0);
        let c = div_const(k, f, taps);
        let t = rem_const(k, f, taps);
        let at = k.mad_lo(c, row, t);
        let at = k.shared_elem(tile, at);
        k.st_shared(at, 0, v);
    });
    k.bar_sync();

    k.comment("store: each tap's run of channels, consecutive threads on consecutive channels");
    let out_len = k.mul_lo(taps, TILE);
    let plane = k.mul_lo(o, p.filter_len());
    k.for_range(tid, out_len, FILTER_THREADS, |k, g| {
        let t = k.shr(g, TILE.trailing_zeros());
        let c = k.and(g, TILE - 1);
        let ok = k.setp_lt(c, channels);
        k.if_then(ok, |k| {
            let at = k.mad_lo(c, row, t);
            let at = k.shared_elem(tile, at);
            let v = k.ld_shared::<T>(at, 0);
            let row = k.mad_lo(t, p.cg, plane);
            let index = k.add(row, c0);
            let index = k.add(index, c);
            let addr = k.elem_addr(dst, index);
            k.st_global(addr, 0, v);
        });
    });
    k
}

/// Halves per staged filter channel: `taps` rounded up to an even count whose words are odd,
/// so the same tap of 32 consecutive channels lies in 32 different banks.
const fn filter_row(taps: u32) -> u32 {
    let even = taps.next_multiple_of(2);
    if (even / 2) % 2 == 1 {
        even
    } else {
        even + 2
    }
}
