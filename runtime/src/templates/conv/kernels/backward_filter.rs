//! `conv2d_bwd_filter` (and `conv2d_bwd_bias`): weight and bias gradients, deterministically.
//!
//! `dw[oc, ci, kh, kw] = Σ_{n, oh, ow} gy[n, oc, oh, ow] · x[n, g·Cg + ci, oh·SH + kh·DH − PH,
//! ow·SW + kw·DW − PW]` (padding taps contribute 0) and `db[oc] = Σ_{n, oh, ow} gy[n, oc, oh,
//! ow]`. One warp per output element, 8 warps (256 threads) per block, grid `ceil(elements /
//! 8)`: lane `l` sums positions `l, l + 32, …` of each image in order, then a butterfly
//! shuffle adds the 32 partial sums; lane 0 stores. The order is fixed, so the result is the
//! same on every run (no float atomics). Consecutive lanes read consecutive `ow` of `gy` and
//! (stride 1) consecutive `iw` of `x`.
//!
//! NHWC (`x [N, H, W, C_in]`, `gy [N, OH, OW, C_out]`, `dw [C_out, KH, KW, Cg]`): weight
//! element `e = ((oc·KH + kh)·KW + kw)·Cg + ci`, the same lanes and order with channels-last
//! indices (lanes then `C` elements apart: the fallback for targets and dtypes without the
//! tensor-core entry).

use super::common::{
    at_position, both_below, channel_start, conv_kernel, div_const, rem_const, warp_sum, ConvElem,
    DimParams, Dims, Problem,
};
use crate::arch::Arch;
use crate::builder::{GlobalPtr, KernelBuilder, Reg, U32};
use crate::ir::CmpOp;
use crate::templates::conv::{Conv2dConfig, Layout};

/// The weight-gradient entry name.
pub const ENTRY_FILTER: &str = "conv2d_bwd_filter";
/// The bias-gradient entry name (only in modules of configurations with a bias).
pub const ENTRY_BIAS: &str = "conv2d_bwd_bias";
/// Warps per block (one output element each).
pub const WARPS: u32 = 8;

/// A reduction over the output positions of one `gy` channel.
#[derive(Clone, Copy)]
enum Reduction {
    /// `dw` element: multiply by the input at the tap's position.
    Filter,
    /// `db` element: sum `gy` alone.
    Bias,
}

/// Builds `conv2d_bwd_filter(x, gy, dw, dims…)`.
pub(crate) fn build_filter<T: ConvElem>(cfg: &Conv2dConfig, arch: Arch) -> KernelBuilder {
    let mut k = conv_kernel(ENTRY_FILTER, arch);
    k.require_block([32 * WARPS, 1, 1]);
    let x = k.param_ptr::<T>("x");
    let gy = k.param_ptr::<T>("gy");
    let dw = k.param_ptr::<T>("dw");
    let dims = DimParams::declare(&mut k);
    let (x, gy, dw) = (k.global_ptr(x), k.global_ptr(gy), k.global_ptr(dw));
    let d = dims.load(&mut k);
    let p = Problem::new(cfg);
    let elements = p.c_out * p.filter_len();
    reduce_per_warp::<T>(&mut k, &p, &d, Reduction::Filter, Some(x), gy, dw, elements);
    k
}

/// Builds `conv2d_bwd_bias(gy, db, dims…)`.
pub(crate) fn build_bias<T: ConvElem>(cfg: &Conv2dConfig, arch: Arch) -> KernelBuilder {
    let mut k = conv_kernel(ENTRY_BIAS, arch);
    k.require_block([32 * WARPS, 1, 1]);
    let gy = k.param_ptr::<T>("gy");
    let db = k.param_ptr::<T>("db");
    let dims = DimParams::declare(&mut k);
    let (gy, db) = (k.global_ptr(gy), k.global_ptr(db));
    let d = dims.load(&mut k);
    let p = Problem::new(cfg);
    reduce_per_warp::<T>(&mut k, &p, &d, Reduction::Bias, None, gy, db, p.c_out);
    k
}

/// Warp `ctaid.x · 8 + warp` reduces output element `e < elements` (warp-uniform, so the
/// full-warp shuffles run with every lane present).
#[allow(clippy::too_many_arguments)]
fn reduce_per_warp<T: ConvElem>(
    k: &mut KernelBuilder,
    p: &Problem,
    d: &Dims,
    kind: Reduction,
    x: Option<GlobalPtr<T>>,
    gy: GlobalPtr<T>,
    out: GlobalPtr<T>,
    elements: u32,
) {
    let tid = k.tid_x();
    let lane = rem_const(k, tid, 32u32);
    let warp = div_const(k, tid, 32u32);
    let block = k.ctaid_x();
    let e = k.mad_lo(block, WARPS, warp);
    let valid = k.setp_lt(e, elements);
    k.if_then(valid, |k| {
        let sum = match (kind, x) {
            (Reduction::Filter, Some(x)) => lane_sum_filter::<T>(k, p, d, x, gy, e, lane),
            _ => lane_sum_bias::<T>(k, p, d, gy, e, lane),
        };
        k.comment("butterfly sum of the 32 lane partials");
        let total = warp_sum(k, sum);
        let first = k.setp(CmpOp::Eq, lane, 0u32);
        k.if_then(first, |k| {
            let value = T::narrow(k, total);
            let addr = k.elem_addr(out, e);
            k.st_global(addr, 0, value);
        });
    });
}

/// Lane `lane`'s partial `Σ_n Σ_{p ≡ lane (mod 32)} gy[n, oc, p] · x[n, c, ih(p), iw(p)]` for
/// weight element `e = ((oc·Cg + ci)·KH + kh)·KW + kw`. Positions advance by 32 with an
/// incremental `(oh, ow)` (no division in the loop).
#[allow(clippy::too_many_arguments)]
fn lane_sum_filter<T: ConvElem>(
    k: &mut KernelBuilder,
    p: &Problem,
    d: &Dims,
    x: GlobalPtr<T>,
    gy: GlobalPtr<T>,
    e: Reg<U32>,
    lane: Reg<U32>,
) -> Reg<T::Acc> {
    k.comment("locate the weight element: (oc, ci, kh, kw)");
    let oc = div_const(k, e, p.filter_len());
    let rest = rem_const(k, e, p.filter_len());
    let (ci, t) = match p.layout {
        Layout::Nchw => (div_const(k, rest, p.taps), rem_const(k, rest, p.taps)),
        Layout::Nhwc => (rem_const(k, rest, p.cg), div_const(k, rest, p.cg)),
    };
    let kh = div_const(k, t, p.kw);
    let kw = rem_const(k, t, p.kw);
    let g = div_const(k, oc, p.og);
    let c = k.mad_lo(g, p.cg, ci);
    // Tap offsets `kh·DH − PH`, `kw·DW − PW` (wrapping: padding positions fail `< H`/`< W`).
    let tap_h = k.mul_lo(kh, p.dh);
    let tap_h = k.sub(tap_h, p.ph);
    let tap_w = k.mul_lo(kw, p.dw);
    let tap_w = k.sub(tap_w, p.pw);
    let acc = k.zero::<T::Acc>();
    let ohw = d.ohw;
    let hw = k.mul_lo(d.h, d.w);
    let step = Step::new(k, d, lane);
    k.for_range(0u32, d.batch, 1u32, |k, n| {
        let gy_plane = channel_start(k, p.layout, n, p.c_out, oc, ohw);
        let x_plane = channel_start(k, p.layout, n, p.c_in, c, hw);
        let (oh, ow) = step.start(k);
        k.for_range(lane, ohw, 32u32, |k, pos| {
            let ih = k.mad_lo(oh, p.sh, tap_h);
            let iw = k.mad_lo(ow, p.sw, tap_w);
            let ok = both_below(k, ih, d.h, iw, d.w);
            k.if_then(ok, |k| {
                let gy_idx = at_position(k, p.layout, gy_plane, pos, p.c_out);
                let x_pos = k.mad_lo(ih, d.w, iw);
                let x_idx = at_position(k, p.layout, x_plane, x_pos, p.c_in);
                let gy_at = k.elem_addr(gy, gy_idx);
                let x_at = k.elem_addr(x, x_idx);
                let g_raw = k.ld_global_nc::<T>(gy_at, 0);
                let x_raw = k.ld_global_nc::<T>(x_at, 0);
                let gv = T::widen(k, g_raw);
                let xv = T::widen(k, x_raw);
                k.fma_into(acc, gv, xv, acc);
            });
            step.advance(k, oh, ow, d.ow);
        });
    });
    acc
}

/// Lane `lane`'s partial `Σ_n Σ_{p ≡ lane (mod 32)} gy[n, oc, p]` for `oc = e`.
fn lane_sum_bias<T: ConvElem>(
    k: &mut KernelBuilder,
    p: &Problem,
    d: &Dims,
    gy: GlobalPtr<T>,
    oc: Reg<U32>,
    lane: Reg<U32>,
) -> Reg<T::Acc> {
    let acc = k.zero::<T::Acc>();
    let ohw = d.ohw;
    k.for_range(0u32, d.batch, 1u32, |k, n| {
        let plane = channel_start(k, p.layout, n, p.c_out, oc, ohw);
        k.for_range(lane, ohw, 32u32, |k, pos| {
            let idx = at_position(k, p.layout, plane, pos, p.c_out);
            let addr = k.elem_addr(gy, idx);
            let raw = k.ld_global_nc::<T>(addr, 0);
            let v = T::widen(k, raw);
            k.add_into(acc, acc, v);
        });
    });
    acc
}

/// Incremental `(oh, ow)` of positions `lane, lane + 32, …` of an `OH × OW` plane.
#[derive(Clone, Copy)]
struct Step {
    /// `(oh, ow)` of position `lane`.
    first_oh: Reg<U32>,
    first_ow: Reg<U32>,
    /// `32 / OW` and `32 mod OW`.
    rows: Reg<U32>,
    cols: Reg<U32>,
}

impl Step {
    fn new(k: &mut KernelBuilder, d: &Dims, lane: Reg<U32>) -> Self {
        let (first_oh, first_ow) = d.ow_div.divmod(k, lane);
        let (rows, cols) = d.ow_div.divmod(k, 32u32);
        Self {
            first_oh,
            first_ow,
            rows,
            cols,
        }
    }

    /// Fresh `(oh, ow)` variables at position `lane`.
    fn start(&self, k: &mut KernelBuilder) -> (Reg<U32>, Reg<U32>) {
        (k.var(self.first_oh), k.var(self.first_ow))
    }

    /// `(oh, ow) ← position + 32`: add `(32 / OW, 32 mod OW)` and carry one column overflow.
    fn advance(&self, k: &mut KernelBuilder, oh: Reg<U32>, ow: Reg<U32>, width: Reg<U32>) {
        k.add_into(ow, ow, self.cols);
        k.add_into(oh, oh, self.rows);
        let carry = k.setp_ge(ow, width);
        let wrapped = k.sub(ow, width);
        let next_ow = k.selp(wrapped, ow, carry);
        k.assign(ow, next_ow);
        let bump = k.selp(1u32, 0u32, carry);
        k.add_into(oh, oh, bump);
    }
}
