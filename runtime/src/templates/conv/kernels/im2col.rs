//! `conv2d_im2col`: unfolds the input into the column matrix the GEMM entry multiplies.
//!
//! Layout (see [`crate::templates::conv::reference::im2col`]): `cols [C_in·KH·KW, N·OH·OW]`
//! row-major, i.e. `groups` blocks of `[Cg·KH·KW, N·OH·OW]`; row `r = (c·KH + kh)·KW + kw`,
//! column `col = (n·OH + oh)·OW + ow`. Block 256 threads along the columns, grid
//! `(ceil(N·OH·OW / 256), min(rows, 65535))`; each thread decomposes its column once and walks
//! rows `ctaid.y, ctaid.y + nctaid.y, …`. Consecutive threads read consecutive input columns
//! (for stride 1) and write consecutive `cols` elements.

use super::common::{
    both_below, conv_kernel, div_const, rem_const, window_origin, ConvElem, DimParams, Problem,
};
use crate::arch::Arch;
use crate::builder::KernelBuilder;
use crate::ir::SpecialReg;
use crate::templates::conv::Conv2dConfig;

/// The entry name.
pub const ENTRY: &str = "conv2d_im2col";
/// Threads per block.
pub const BLOCK: u32 = 256;

/// Builds the entry: `conv2d_im2col(x, cols, batch, height, width, out_height, out_width)`.
///
/// `cols[r, col] = x[n, c, oh·SH + kh·DH − PH, ow·SW + kw·DW − PW]`, 0 in the padding; the
/// values are copied bit-exactly (no conversion).
pub(crate) fn build<T: ConvElem>(cfg: &Conv2dConfig, arch: Arch) -> KernelBuilder {
    let p = Problem::new(cfg);
    let rows = p.c_in * p.taps;
    let mut k = conv_kernel(ENTRY, arch);
    k.require_block([BLOCK, 1, 1]);
    let x = k.param_ptr::<T>("x");
    let cols = k.param_ptr::<T>("cols");
    let dims = DimParams::declare(&mut k);
    let (x, cols) = (k.global_ptr(x), k.global_ptr(cols));
    let d = dims.load(&mut k);
    let ohw = d.ohw;
    let columns = k.mul_lo(d.batch, ohw);
    let hw = k.mul_lo(d.h, d.w);
    let col = k.global_index_x();
    let in_range = k.setp_lt(col, columns);
    k.if_then(in_range, |k| {
        k.comment("decompose the column: (n, oh, ow)");
        let (n, top, left) = window_origin(k, &p, &d, col);
        let image = k.mul_lo(n, p.c_in);
        let image = k.mul_lo(image, hw);
        let first_row = k.ctaid_y();
        let row_step = k.special(SpecialReg::NctaidY);
        k.comment("one cols element per row of the thread's column");
        k.for_range(first_row, rows, row_step, |k, r| {
            let c = div_const(k, r, p.taps);
            let t = rem_const(k, r, p.taps);
            let kh = div_const(k, t, p.kw);
            let kw = rem_const(k, t, p.kw);
            // Wrapping: taps in the padding give huge positions that fail `< H`/`< W`.
            let ih = k.mad_lo(kh, p.dh, top);
            let iw = k.mad_lo(kw, p.dw, left);
            let ok = both_below(k, ih, d.h, iw, d.w);
            let v = k.zero::<T>();
            k.if_then(ok, |k| {
                let plane = k.mad_lo(c, hw, image);
                let idx = k.mad_lo(ih, d.w, iw);
                let idx = k.add(idx, plane);
                let addr = k.elem_addr(x, idx);
                let loaded = k.ld_global_nc::<T>(addr, 0);
                k.assign(v, loaded);
            });
            let out = k.mad_lo(r, columns, col);
            let addr = k.elem_addr(cols, out);
            k.st_global(addr, 0, v);
        });
    });
    k
}
