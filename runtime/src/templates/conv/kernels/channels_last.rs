//! `conv2d_to_channels_last`: the layout pre-pass of the NCHW tensor-core forward
//! (`conv2d_implicit_gemm_channels_last`, as cuDNN runs NCHW tensor-core convolutions). It
//! transposes every plane of a `[P][R][C]` tensor to `[P][C][R]`, bit-exactly:
//! `x [N, C_in, H·W]` → `[N, H·W, C_in]` (NHWC) and `w [C_out, Cg, KH·KW]` →
//! `[C_out, KH·KW, Cg]`, so the implicit GEMM's A windows are 16-byte `cp.async` chunks of 8
//! consecutive channels instead of per-tap element gathers.
//!
//! Block `(32, 8)` moves one 32 × 32 tile of one plane through shared memory; grid
//! `(⌈C / 32⌉, ⌈R / 32⌉, P)`. Loads: a warp reads 32 consecutive elements of one row
//! (64 bytes, whole sectors); stores: a warp writes 32 consecutive elements of one column of
//! the source, a row of the destination. The tile's rows are [`TILE_STRIDE`] halves (17
//! words, odd) apart, so the column reads of 32 lanes fall in 32 different banks and the row
//! writes of a warp (16 consecutive words) in 16: one wavefront each. Only elements inside
//! `R × C` are loaded, staged, read back and stored.

use super::common::conv_kernel;
use crate::arch::Arch;
use crate::builder::{KernelBuilder, Scalar};

/// The entry name.
pub const ENTRY: &str = "conv2d_to_channels_last";
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
    let rows = k.param::<crate::builder::U32>("rows");
    let cols = k.param::<crate::builder::U32>("cols");
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
