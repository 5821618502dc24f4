//! `conv2d_gemm` and `conv2d_1x1`: the per-group GEMM `Y_g = W_g · B_g (+ bias)` stored NCHW.
//!
//! `W_g [Og, K]` is the weight in its natural layout (`K = Cg·KH·KW`); `B_g [K, N·OH·OW]` is
//! either the im2col matrix (`conv2d_gemm`) or, for a 1×1 kernel, gathered straight from the
//! input (`conv2d_1x1`, an implicit GEMM: `B[ci, (n, oh, ow)] = x[n, g·Cg + ci, oh·SH − PH,
//! ow·SW − PW]`, 0 in the padding). See [`GemmTile`] for the tiling; grid `(ceil(N·OH·OW /
//! 64), ceil(Og / block_m), groups)`, block `(16, 16)`.
//!
//! Loads: the A tile is read 16 consecutive weights per half-warp; the B tile 64 consecutive
//! columns per row (consecutive threads, consecutive `cols` elements or input pixels). Shared
//! reads in the inner loop: A is warp-broadcast (two distinct addresses per warp, adjacent
//! banks), B is 16 consecutive elements per half-warp.

use super::common::{
    both_below, bytes_of, conv_kernel, div_const, load_or_zero, rem_const, window_origin, ConvElem,
    DimParams, Dims, Problem,
};
use crate::arch::Arch;
use crate::builder::{Float, GlobalPtr, KernelBuilder, Pred, Reg, SharedArr, U32};
use crate::templates::conv::{Conv2dConfig, GemmTile};

/// The im2col GEMM's entry name.
pub const ENTRY_GEMM: &str = "conv2d_gemm";
/// The 1×1 implicit GEMM's entry name.
pub const ENTRY_1X1: &str = "conv2d_1x1";

/// Where the B operand comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Operand {
    /// The im2col matrix `cols [C_in·KH·KW, N·OH·OW]`.
    Im2col,
    /// The input itself, for a 1×1 kernel.
    Pointwise,
}

/// The B operand's per-thread state.
enum BSource<T: ConvElem> {
    Im2col {
        cols: GlobalPtr<T>,
        /// `col0 + tid mod 64`, the thread's staging column.
        col: Reg<U32>,
        col_ok: Pred,
    },
    Pointwise {
        x: GlobalPtr<T>,
        /// `x` index of the thread's staging column at channel 0 of the group.
        pixel: Reg<U32>,
        pixel_ok: Pred,
        hw: Reg<U32>,
    },
}

/// Builds `conv2d_gemm(w, cols, [bias,] y, dims…)` or `conv2d_1x1(w, x, [bias,] y, dims…)`.
pub(crate) fn build<T: ConvElem>(
    cfg: &Conv2dConfig,
    arch: Arch,
    operand: Operand,
) -> KernelBuilder {
    let p = Problem::new(cfg);
    let tile = cfg.gemm_tile();
    let name = match operand {
        Operand::Im2col => ENTRY_GEMM,
        Operand::Pointwise => ENTRY_1X1,
    };
    let mut k = conv_kernel(name, arch);
    k.require_block([16, 16, 1]);
    let w = k.param_ptr::<T>("w");
    let b_param = k.param_ptr::<T>(match operand {
        Operand::Im2col => "cols",
        Operand::Pointwise => "x",
    });
    let bias = p.bias.then(|| k.param_ptr::<T>("bias"));
    let y = k.param_ptr::<T>("y");
    let dims = DimParams::declare(&mut k);
    let (w, b_ptr, y) = (k.global_ptr(w), k.global_ptr(b_param), k.global_ptr(y));
    let bias = bias.map(|b| k.global_ptr(b));
    let d = dims.load(&mut k);
    let a_tile = k.shared_array::<T::Acc>("a_tile", tile.block_k * tile.a_pitch);
    let b_tile = k.shared_array::<T::Acc>("b_tile", tile.block_k * tile.block_n);
    let (tx, ty) = (k.tid_x(), k.tid_y());
    let tid = k.mad_lo(ty, 16u32, tx);
    let ohw = d.ohw;
    let columns = k.mul_lo(d.batch, ohw);
    let bx = k.ctaid_x();
    let col0 = k.mul_lo(bx, tile.block_n);
    let by = k.ctaid_y();
    let m0 = k.mul_lo(by, tile.block_m);
    let g = k.ctaid_z();
    let source = locate_b_column::<T>(&mut k, &p, &tile, &d, operand, b_ptr, tid, col0, columns);
    let acc: Vec<Vec<Reg<T::Acc>>> = (0..tile.rows_per_thread)
        .map(|_| (0..4).map(|_| k.zero()).collect())
        .collect();
    k.comment("k-loop: stage A and B slices, sync, multiply, sync");
    let depth = p.filter_len();
    k.for_range(0u32, depth, tile.block_k, |k, k0| {
        stage_a::<T>(k, &p, &tile, w, a_tile, g, m0, k0, tx, ty);
        stage_b::<T>(k, &p, &tile, &source, b_tile, g, k0, tid, columns);
        k.bar_sync();
        multiply(k, &tile, a_tile, b_tile, tx, ty, &acc);
        k.bar_sync();
    });
    store_tile::<T>(
        &mut k, &p, &d, &acc, bias, y, g, m0, col0, tx, ty, ohw, columns,
    );
    k
}

/// The staging column of thread `tid` is `col0 + tid mod 64` in every k-step; for the
/// pointwise operand decompose it once: `col = (n·OH + oh)·OW + ow` → the input pixel
/// `(oh·SH − PH, ow·SW − PW)` of image `n`, or "padding".
#[allow(clippy::too_many_arguments)]
fn locate_b_column<T: ConvElem>(
    k: &mut KernelBuilder,
    p: &Problem,
    tile: &GemmTile,
    d: &Dims,
    operand: Operand,
    ptr: GlobalPtr<T>,
    tid: Reg<U32>,
    col0: Reg<U32>,
    columns: Reg<U32>,
) -> BSource<T> {
    let lane_col = rem_const(k, tid, tile.block_n);
    let col = k.add(col0, lane_col);
    let col_ok = k.setp_lt(col, columns);
    match operand {
        Operand::Im2col => BSource::Im2col {
            cols: ptr,
            col,
            col_ok,
        },
        Operand::Pointwise => {
            k.comment("decompose the staging column into its input pixel");
            let (n, ih, iw) = window_origin(k, p, d, col);
            let inside = both_below(k, ih, d.h, iw, d.w);
            let pixel_ok = k.and_pred(col_ok, inside);
            let hw = k.mul_lo(d.h, d.w);
            let image = k.mul_lo(n, p.c_in);
            let image = k.mul_lo(image, hw);
            let pixel = k.mad_lo(ih, d.w, iw);
            let pixel = k.add(pixel, image);
            BSource::Pointwise {
                x: ptr,
                pixel,
                pixel_ok,
                hw,
            }
        }
    }
}

/// `a_tile[kk, m] = W[g·Og + m0 + m, k0 + kk]` (0 outside `Og × K`), stored transposed with
/// pitch `block_m + 2`; thread `(tx, ty)` loads `kk = tx`, `m = ty + 16 i`.
#[allow(clippy::too_many_arguments)]
fn stage_a<T: ConvElem>(
    k: &mut KernelBuilder,
    p: &Problem,
    tile: &GemmTile,
    w: GlobalPtr<T>,
    a_tile: SharedArr<T::Acc>,
    g: Reg<U32>,
    m0: Reg<U32>,
    k0: Reg<U32>,
    tx: Reg<U32>,
    ty: Reg<U32>,
) {
    k.comment("stage A: a_tile[kk, m] = W_g[m0 + m, k0 + kk]");
    let kk = k.add(k0, tx);
    let k_ok = k.setp_lt(kk, p.filter_len());
    let group_row = k.mad_lo(g, p.og, m0);
    let slot0 = k.mad_lo(tx, tile.a_pitch, ty);
    let slot_addr = k.shared_elem(a_tile, slot0);
    for i in 0..tile.rows_per_thread {
        let m_local = k.add(ty, 16 * i);
        let m = k.add(m0, m_local);
        let m_ok = k.setp_lt(m, p.og);
        let ok = k.and_pred(m_ok, k_ok);
        let row = k.add(group_row, m_local);
        let idx = k.mad_lo(row, p.filter_len(), kk);
        let v = load_or_zero::<T>(k, w, idx, ok);
        k.st_shared(slot_addr, (16 * i * bytes_of::<T::Acc>()) as i32, v);
    }
}

/// `b_tile[kk, c] = B_g[k0 + kk, col0 + c]` (0 outside `K × N·OH·OW`); thread `tid` loads
/// `c = tid mod 64`, `kk = tid / 64 + 4 i`.
#[allow(clippy::too_many_arguments)]
fn stage_b<T: ConvElem>(
    k: &mut KernelBuilder,
    p: &Problem,
    tile: &GemmTile,
    source: &BSource<T>,
    b_tile: SharedArr<T::Acc>,
    g: Reg<U32>,
    k0: Reg<U32>,
    tid: Reg<U32>,
    columns: Reg<U32>,
) {
    k.comment("stage B: b_tile[kk, c] = B_g[k0 + kk, col0 + c]");
    let slot_addr = k.shared_elem(b_tile, tid);
    let rows_per_pass = 256 / tile.block_n;
    let first = div_const(k, tid, tile.block_n);
    let group_k = k.mad_lo(g, p.filter_len(), k0);
    for i in 0..tile.block_k / rows_per_pass {
        let kk = k.add(first, rows_per_pass * i);
        let kabs = k.add(k0, kk);
        let k_ok = k.setp_lt(kabs, p.filter_len());
        let v = match source {
            BSource::Im2col { cols, col, col_ok } => {
                let ok = k.and_pred(*col_ok, k_ok);
                let row = k.add(group_k, kk);
                let idx = k.mad_lo(row, columns, *col);
                load_or_zero::<T>(k, *cols, idx, ok)
            }
            BSource::Pointwise {
                x,
                pixel,
                pixel_ok,
                hw,
            } => {
                let ok = k.and_pred(*pixel_ok, k_ok);
                // Channel g·Cg + k0 + kk of the image: `group_k + kk` (K = Cg for 1×1).
                let channel = k.add(group_k, kk);
                let idx = k.mad_lo(channel, *hw, *pixel);
                load_or_zero::<T>(k, *x, idx, ok)
            }
        };
        let offset = rows_per_pass * i * tile.block_n * bytes_of::<T::Acc>();
        k.st_shared(slot_addr, offset as i32, v);
    }
}

/// `acc[i][j] += Σ_kk a_tile[kk, ty + 16 i] · b_tile[kk, tx + 16 j]` over the staged slice.
fn multiply<A: Float>(
    k: &mut KernelBuilder,
    tile: &GemmTile,
    a_tile: SharedArr<A>,
    b_tile: SharedArr<A>,
    tx: Reg<U32>,
    ty: Reg<U32>,
    acc: &[Vec<Reg<A>>],
) {
    k.comment("multiply the staged slices");
    let esz = bytes_of::<A>();
    let a_addr = k.shared_elem(a_tile, ty);
    let b_addr = k.shared_elem(b_tile, tx);
    for kk in 0..tile.block_k {
        let a: Vec<Reg<A>> = (0..tile.rows_per_thread)
            .map(|i| k.ld_shared::<A>(a_addr, ((kk * tile.a_pitch + 16 * i) * esz) as i32))
            .collect();
        let b: Vec<Reg<A>> = (0..4u32)
            .map(|j| k.ld_shared::<A>(b_addr, ((kk * tile.block_n + 16 * j) * esz) as i32))
            .collect();
        for (row, av) in acc.iter().zip(&a) {
            for (c, bv) in row.iter().zip(&b) {
                k.fma_into(*c, *av, *bv, *c);
            }
        }
    }
}

/// `y[n, g·Og + m, oh, ow] = acc (+ bias)` for output `(m0 + ty + 16 i, col0 + tx + 16 j)`
/// inside `Og × N·OH·OW`, with `col = n·OH·OW + (oh·OW + ow)`.
#[allow(clippy::too_many_arguments)]
fn store_tile<T: ConvElem>(
    k: &mut KernelBuilder,
    p: &Problem,
    d: &Dims,
    acc: &[Vec<Reg<T::Acc>>],
    bias: Option<GlobalPtr<T>>,
    y: GlobalPtr<T>,
    g: Reg<U32>,
    m0: Reg<U32>,
    col0: Reg<U32>,
    tx: Reg<U32>,
    ty: Reg<U32>,
    ohw: Reg<U32>,
    columns: Reg<U32>,
) {
    k.comment("store the tile (plus bias) in NCHW");
    let group_row = k.mad_lo(g, p.og, m0);
    for j in 0..4u32 {
        let c = k.add(col0, tx);
        let col = k.add(c, 16 * j);
        let col_ok = k.setp_lt(col, columns);
        let (n, pix) = d.ohw_div.divmod(k, col);
        let image_out = k.mul_lo(n, p.c_out);
        for (i, row) in acc.iter().enumerate() {
            let m_local = k.add(ty, 16 * i as u32);
            let m = k.add(m0, m_local);
            let m_ok = k.setp_lt(m, p.og);
            let ok = k.and_pred(col_ok, m_ok);
            let value = row[j as usize];
            k.if_then(ok, |k| {
                let oc = k.add(group_row, m_local);
                let value = match bias {
                    Some(b) => {
                        let addr = k.elem_addr(b, oc);
                        let raw = k.ld_global_nc::<T>(addr, 0);
                        let wide = T::widen(k, raw);
                        k.add(value, wide)
                    }
                    None => value,
                };
                let plane = k.add(image_out, oc);
                let idx = k.mad_lo(plane, ohw, pix);
                let out = T::narrow(k, value);
                let addr = k.elem_addr(y, idx);
                k.st_global(addr, 0, out);
            });
        }
    }
}
