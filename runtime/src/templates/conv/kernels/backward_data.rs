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
//! NHWC (`dx [N, H, W, C_in]`, `gy [N, OH, OW, C_out]`, `w [C_out, KH, KW, Cg]`): the same
//! threads and order with channels-last indices. Consecutive threads are then `C` elements
//! apart: the fallback for targets and dtypes without the tensor-core entry, not a tuned path.

use super::common::{
    bytes_of, channel_start, conv_kernel, div_const, output_coord, rem_const, ConvElem, DimParams,
    Dims, Problem,
};
use crate::arch::Arch;
use crate::builder::{GlobalPtr, KernelBuilder, Reg, Val, U32, U64};
use crate::ir::SpecialReg;
use crate::templates::conv::{Conv2dConfig, Layout};

/// The entry name.
pub const ENTRY: &str = "conv2d_bwd_data";
/// Threads per block.
pub const BLOCK: u32 = 256;

/// Builds `conv2d_bwd_data(gy, w, dx, batch, height, width, out_height, out_width)`.
pub(crate) fn build<T: ConvElem>(cfg: &Conv2dConfig, arch: Arch) -> KernelBuilder {
    let p = Problem::new(cfg);
    let mut k = conv_kernel(ENTRY, arch);
    k.require_block([BLOCK, 1, 1]);
    let gy = k.param_ptr::<T>("gy");
    let w = k.param_ptr::<T>("w");
    let dx = k.param_ptr::<T>("dx");
    let dims = DimParams::declare(&mut k);
    let (gy, w, dx) = (k.global_ptr(gy), k.global_ptr(w), k.global_ptr(dx));
    let d = dims.load(&mut k);
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
            let idx = match p.layout {
                Layout::Nchw => k.mad_lo(plane, hw, pixel),
                Layout::Nhwc => {
                    let position = k.mad_lo(n, hw, pixel);
                    k.mad_lo(position, p.c_in, c)
                }
            };
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
    let gy_first = channel_start(k, p.layout, n, p.c_out, oc0, ohw);
    let w_first = match p.layout {
        Layout::Nchw => {
            let filter = k.mad_lo(oc0, p.cg, ci);
            k.mul_lo(filter, p.taps)
        }
        Layout::Nhwc => k.mad_lo(oc0, p.filter_len(), ci),
    };
    k.for_range(0u32, p.kh, 1u32, |k, kh| {
        let (oh, oh_ok) = output_coord(k, ih, kh, p.ph, p.dh, p.sh, d.oh);
        k.if_then(oh_ok, |k| {
            // NCHW: the gy and filter rows' first elements; NHWC: the gy row's first position
            // and the filter row's first element (taps `Cg` apart).
            let (gy_row, w_row) = match p.layout {
                Layout::Nchw => (k.mad_lo(oh, d.ow, gy_first), k.mad_lo(kh, p.kw, w_first)),
                Layout::Nhwc => (k.mul_lo(oh, d.ow), k.mad_lo(kh, p.kw * p.cg, w_first)),
            };
            k.for_range(0u32, p.kw, 1u32, |k, kw| {
                let (ow, ow_ok) = output_coord(k, iw, kw, p.pw, p.dw, p.sw, d.ow);
                k.if_then(ow_ok, |k| {
                    // Next output channel: the next plane (NCHW) or element (NHWC) of `gy`.
                    let (gy_idx, w_idx, gy_step): (_, _, Val<U64>) = match p.layout {
                        Layout::Nchw => (
                            k.add(gy_row, ow),
                            k.add(w_row, kw),
                            k.mul_wide(ohw, bytes_of::<T>()).into(),
                        ),
                        Layout::Nhwc => {
                            let position = k.add(gy_row, ow);
                            (
                                k.mad_lo(position, p.c_out, gy_first),
                                k.mad_lo(kw, p.cg, w_row),
                                u64::from(bytes_of::<T>()).into(),
                            )
                        }
                    };
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
