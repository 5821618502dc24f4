//! `conv2d_nhwc`: the CUDA-core forward of the NHWC layout (f32/f64, and f16/bf16 on targets
//! without `mma.m16n8k16`), one thread per output element.
//!
//! Thread `i = m·C_out + oc` (consecutive threads: consecutive channels of one pixel, so the
//! stores are contiguous) computes `y[m, oc] = Σ_{kh, kw, ci} x[n, ih, iw, g·Cg + ci] ·
//! w[oc, kh, kw, ci] (+ bias[oc])` with `m = (n·OH + oh)·OW + ow`, `(ih, iw) = (oh·SH − PH +
//! kh·DH, ow·SW − PW + kw·DW)`, taps in the padding skipped, accumulated in f32 (f64 for f64)
//! in the order `(kh, kw, ci)`. Grid `⌈N·OH·OW·C_out / 256⌉`, block 256.
//!
//! It is the reference-quality fallback, not a tuned kernel: the tensor-core
//! `conv2d_implicit_gemm` is the fast NHWC path.

use super::common::{conv_kernel, div_const, rem_const, ConvElem, DimParams, Problem};
use crate::arch::Arch;
use crate::builder::KernelBuilder;
use crate::templates::conv::Conv2dConfig;

/// The entry name.
pub const ENTRY: &str = "conv2d_nhwc";

/// Builds `conv2d_nhwc(x, w, [bias,] y, dims…)`.
pub(crate) fn build<T: ConvElem>(cfg: &Conv2dConfig, arch: Arch) -> KernelBuilder {
    let p = Problem::new(cfg);
    let mut k = conv_kernel(ENTRY, arch);
    let x = k.param_ptr::<T>("x");
    let w = k.param_ptr::<T>("w");
    let bias = p.bias.then(|| k.param_ptr::<T>("bias"));
    let y = k.param_ptr::<T>("y");
    let dims = DimParams::declare(&mut k);
    let (x, w, y) = (k.global_ptr(x), k.global_ptr(w), k.global_ptr(y));
    let bias = bias.map(|b| k.global_ptr(b));
    let d = dims.load(&mut k);
    let pixels = k.mul_lo(d.batch, d.ohw);
    let outputs = k.mul_lo(pixels, p.c_out);
    k.for_global_index(outputs, |k, i| {
        let m = div_const(k, i, p.c_out);
        let oc = rem_const(k, i, p.c_out);
        let group = div_const(k, oc, p.og);
        let (image, pix) = d.ohw_div.divmod(k, m);
        let (oh, ow) = d.ow_div.divmod(k, pix);
        let ih0 = k.mul_lo(oh, p.sh);
        let ih0 = k.sub(ih0, p.ph);
        let iw0 = k.mul_lo(ow, p.sw);
        let iw0 = k.sub(iw0, p.pw);
        let first_channel = k.mul_lo(group, p.cg);
        let image_row = k.mul_lo(image, d.h);
        let weight_row = k.mul_lo(oc, p.filter_len());
        let acc = k.zero::<T::Acc>();
        k.for_range(0u32, p.taps, 1u32, |k, tap| {
            let kh = div_const(k, tap, p.kw);
            let kw = rem_const(k, tap, p.kw);
            let ih = k.mad_lo(kh, p.dh, ih0);
            let iw = k.mad_lo(kw, p.dw, iw0);
            let h_ok = k.setp_lt(ih, d.h);
            let w_ok = k.setp_lt(iw, d.w);
            let inside = k.and_pred(h_ok, w_ok);
            k.if_then(inside, |k| {
                let row = k.add(image_row, ih);
                let position = k.mad_lo(row, d.w, iw);
                let x_start = k.mad_lo(position, p.c_in, first_channel);
                let w_start = k.mad_lo(tap, p.cg, weight_row);
                k.for_range(0u32, p.cg, 1u32, |k, ci| {
                    let xi = k.add(x_start, ci);
                    let xa = k.elem_addr(x, xi);
                    let xv = k.ld_global_nc::<T>(xa, 0);
                    let xv = T::widen(k, xv);
                    let wi = k.add(w_start, ci);
                    let wa = k.elem_addr(w, wi);
                    let wv = k.ld_global_nc::<T>(wa, 0);
                    let wv = T::widen(k, wv);
                    k.fma_into(acc, xv, wv, acc);
                });
            });
        });
        let value = match bias {
            Some(b) => {
                let addr = k.elem_addr(b, oc);
                let raw = k.ld_global_nc::<T>(addr, 0);
                let bv = T::widen(k, raw);
                k.add(acc, bv)
            }
            None => acc,
        };
        let out = T::narrow(k, value);
        let addr = k.elem_addr(y, i);
        k.st_global(addr, 0, out);
    });
    k
}
