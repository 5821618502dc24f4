//! `conv2d_bwd_data`: the input gradient in gather form, one thread per `dx` element.
//!
//! `dx[n, c, ih, iw] = Σ_{kh, kw} Σ_{oc ∈ group(c)} gy[n, oc, oh, ow] · w[oc, c − g·Cg, kh, kw]`
//! over the taps whose output position exists: `oh·SH = ih + PH − kh·DH` exactly, `0 ≤ oh < OH`
//! (likewise `ow`). Each thread sums in a fixed order (kh, kw, oc), so the result is
//! deterministic and no atomics are needed. Block 256 threads along the pixels of one plane,
//! grid `(ceil(H·W / 256), min(N·C_in, 65535))`; each thread decomposes its pixel once and walks
//! planes `ctaid.y, ctaid.y + nctaid.y, …`. Consecutive threads are consecutive `iw`, so they
//! read consecutive `ow` of `gy` (stride 1) and write consecutive `dx`.
//!
//! NCHW only: the NHWC module's `conv2d_bwd_data` is the tiled GEMM of [`super::nhwc`]
//! (its parameters are the same, [`declare_params`]).

use super::common::{
    bytes_of, channel_start, conv_kernel, div_const, output_coord, rem_const, ConvElem, DimParams,
    Dims, Problem,
};
use crate::arch::Arch;
use crate::builder::{GlobalPtr, KernelBuilder, Reg, U32};
use crate::ir::SpecialReg;
use crate::templates::conv::{Conv2dConfig, Layout};

/// The entry name.
pub const ENTRY: &str = "conv2d_bwd_data";
/// Threads per block.
pub const BLOCK: u32 = 256;

/// The entry's parameters `(gy, w, dx, dims…)`, loaded (the NHWC tiled entry of the same
/// name takes the same ones).
#[allow(clippy::type_complexity)]
pub(crate) fn declare_params<T: ConvElem>(
    k: &mut KernelBuilder,
) -> (GlobalPtr<T>, GlobalPtr<T>, GlobalPtr<T>, Dims) {
    let gy = k.param_ptr::<T>("gy");
    let w = k.param_ptr::<T>("w");
    let dx = k.param_ptr::<T>("dx");
    let dims = DimParams::declare(k);
    let (gy, w, dx) = (k.global_ptr(gy), k.global_ptr(w), k.global_ptr(dx));
    (gy, w, dx, dims.load(k))
}

/// Builds `conv2d_bwd_data(gy, w, dx, batch, height, width, out_height, out_width)`.
pub(crate) fn build<T: ConvElem>(cfg: &Conv2dConfig, arch: Arch) -> KernelBuilder {
    let p = Problem::new(cfg);
    debug_assert_eq!(p.layout, Layout::Nchw);
    let mut k = conv_kernel(ENTRY, arch);
    k.require_block([BLOCK, 1, 1]);
    let (gy, w, dx, d) = declare_params::<T>(&mut k);
    let hw = k.mul_lo(d.h, d.w);
    let pixel = k.global_index_x();
    let in_range = k.setp_lt(pixel, hw);
    k.if_then(in_range, |k| {
        let (ih, iw) = d.w_div.divmod(k, pixel);
        let planes = k.mul_lo(d.batch, p.c_in);
        let first = k.ctaid_y();
        let step = k.special(SpecialReg::NctaidY);
        k.for_range(first, planes, step, |k, plane| {
            let n = div_const(k, plane, p.c_in);
            let c = rem_const(k, plane, p.c_in);
            let sum = gather_plane::<T>(k, &p, &d, gy, w, n, c, ih, iw);
            let out = T::narrow(k, sum);
            let idx = k.mad_lo(plane, hw, pixel);
            let addr = k.elem_addr(dx, idx);
            k.st_global(addr, 0, out);
        });
    });
    k
}

/// `Σ_{kh, kw, oc} gy[n, oc, oh, ow] · w[oc, ci, kh, kw]` for input pixel `(ih, iw)` of
/// channel `c` (see the module doc), in the accumulation type.
#[allow(clippy::too_many_arguments)]
fn gather_plane<T: ConvElem>(
    k: &mut KernelBuilder,
    p: &Problem,
    d: &Dims,
    gy: GlobalPtr<T>,
    w: GlobalPtr<T>,
    n: Reg<U32>,
    c: Reg<U32>,
    ih: Reg<U32>,
    iw: Reg<U32>,
) -> Reg<T::Acc> {
    let acc = k.zero::<T::Acc>();
    let g = div_const(k, c, p.cg);
    let ci = rem_const(k, c, p.cg);
    let oc0 = k.mul_lo(g, p.og);
    let ohw = d.ohw;
    // The gy element of (n, oc0) at output position 0 and the filter element of (oc0, ci)
    // at tap 0.
    let gy_first = channel_start(k, Layout::Nchw, n, p.c_out, oc0, ohw);
    let filter = k.mad_lo(oc0, p.cg, ci);
    let w_first = k.mul_lo(filter, p.taps);
    k.for_range(0u32, p.kh, 1u32, |k, kh| {
        let (oh, oh_ok) = output_coord(k, ih, kh, p.ph, p.dh, p.sh, d.oh);
        k.if_then(oh_ok, |k| {
            // The gy and filter rows' first elements.
            let gy_row = k.mad_lo(oh, d.ow, gy_first);
            let w_row = k.mad_lo(kh, p.kw, w_first);
            k.for_range(0u32, p.kw, 1u32, |k, kw| {
                let (ow, ow_ok) = output_coord(k, iw, kw, p.pw, p.dw, p.sw, d.ow);
                k.if_then(ow_ok, |k| {
                    // Next output channel: the next plane of `gy`.
                    let gy_idx = k.add(gy_row, ow);
                    let w_idx = k.add(w_row, kw);
                    let gy_step = k.mul_wide(ohw, bytes_of::<T>());
                    let gy_at = k.elem_addr(gy, gy_idx);
                    let w_at = k.elem_addr(w, w_idx);
                    let w_step = u64::from(p.filter_len() * bytes_of::<T>());
                    k.comment("sum over the group's output channels");
                    k.for_range(0u32, p.og, 1u32, |k, _| {
                        let g_raw = k.ld_global_nc::<T>(gy_at, 0);
                        let w_raw = k.ld_global_nc::<T>(w_at, 0);
                        let gv = T::widen(k, g_raw);
                        let wv = T::widen(k, w_raw);
                        k.fma_into(acc, gv, wv, acc);
                        k.add_into(gy_at, gy_at, gy_step);
                        k.add_into(w_at, w_at, w_step);
                    });
                });
            });
        });
    });
    acc
}
