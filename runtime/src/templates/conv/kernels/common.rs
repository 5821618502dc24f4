//! Pieces every conv kernel shares: the storage ↔ accumulation element types, the run-time
//! shape parameters every entry takes, the compile-time problem constants, and a few builder
//! helpers (predicated loads, warp sums in the accumulation type).

use super::implicit_gemm::{self, Pass};
use crate::arch::Arch;
use crate::builder::{
    Float, GlobalPtr, KernelBuilder, ParamHandle, Pred, Reg, Scalar, Val, BF16, F16, F32, F64, U32,
};
use crate::ir::{CmpOp, Op, Operand, Type};
use crate::lint::address::declare_index_bound;
use crate::templates::conv::{Conv2dConfig, Layout, INDEX_BOUND};

/// A conv entry named `name`: a builder with the family's [`INDEX_BOUND`] declared (every
/// entry indexes in `u32` within that bound).
pub(crate) fn conv_kernel(name: &str, arch: Arch) -> KernelBuilder {
    let mut k = KernelBuilder::new(name, arch);
    declare_index_bound(&mut k, &INDEX_BOUND);
    k
}

/// A tensor element type of the family and the type it is computed in: f16 and bf16 are
/// widened to f32 on load and rounded to nearest even on store; f32 and f64 compute natively.
pub(crate) trait ConvElem: Float {
    /// The accumulation (and shared-memory staging) type.
    type Acc: Float;
    /// Widens a loaded element exactly.
    fn widen(k: &mut KernelBuilder, v: Reg<Self>) -> Reg<Self::Acc>;
    /// Rounds an accumulated value to the storage type (nearest even).
    fn narrow(k: &mut KernelBuilder, v: Reg<Self::Acc>) -> Reg<Self>;
    /// The tensor-core implicit-GEMM entry of `pass` where this type and `cfg` have one
    /// (f16/bf16 on `mma.m16n8k16` targets), else `None`.
    fn implicit_gemm(_cfg: &Conv2dConfig, _arch: Arch, _pass: Pass) -> Option<KernelBuilder> {
        None
    }
    /// The NCHW 1 × 1 forward with A in chunks of pixels (`conv2d_implicit_gemm_pointwise`)
    /// where this type and `cfg` have it (halves), else `None`.
    fn pointwise(_cfg: &Conv2dConfig, _arch: Arch) -> Option<KernelBuilder> {
        None
    }
    /// The split backward-filter's two entries where this type and `cfg` have the
    /// tensor-core backward-filter, else `None`.
    fn split_filter(_cfg: &Conv2dConfig, _arch: Arch) -> Option<[KernelBuilder; 2]> {
        None
    }
    /// The NCHW channels-last forward's entries (the activation and, for filters of more
    /// than one tap, filter pre-passes and the implicit GEMM over their output) where this
    /// type and `cfg` have them, else `None`.
    fn channels_last(_cfg: &Conv2dConfig, _arch: Arch) -> Option<Vec<KernelBuilder>> {
        None
    }
    /// The NCHW channels-last backward's entries (the pre-passes the forward does not bring,
    /// backward-data, backward-filter and its split) where this type and `cfg` have them,
    /// else `None`.
    fn channels_last_backward(_cfg: &Conv2dConfig, _arch: Arch) -> Option<Vec<KernelBuilder>> {
        None
    }
}

impl ConvElem for F16 {
    type Acc = F32;
    fn widen(k: &mut KernelBuilder, v: Reg<F16>) -> Reg<F32> {
        k.to_f32(v)
    }
    fn narrow(k: &mut KernelBuilder, v: Reg<F32>) -> Reg<F16> {
        k.from_f32(v)
    }
    fn implicit_gemm(cfg: &Conv2dConfig, arch: Arch, pass: Pass) -> Option<KernelBuilder> {
        implicit_gemm::available(cfg).then(|| implicit_gemm::build::<F16>(cfg, arch, pass))
    }
    fn pointwise(cfg: &Conv2dConfig, arch: Arch) -> Option<KernelBuilder> {
        implicit_gemm::pointwise_available(cfg)
            .then(|| implicit_gemm::build_pointwise::<F16>(cfg, arch))
    }
    fn split_filter(cfg: &Conv2dConfig, arch: Arch) -> Option<[KernelBuilder; 2]> {
        implicit_gemm::available(cfg).then(|| implicit_gemm::build_split::<F16>(cfg, arch))
    }
    fn channels_last(cfg: &Conv2dConfig, arch: Arch) -> Option<Vec<KernelBuilder>> {
        implicit_gemm::channels_last_available(cfg)
            .then(|| implicit_gemm::build_channels_last_forward::<F16>(cfg, arch))
    }
    fn channels_last_backward(cfg: &Conv2dConfig, arch: Arch) -> Option<Vec<KernelBuilder>> {
        implicit_gemm::channels_last_backward_available(cfg)
            .then(|| implicit_gemm::build_channels_last_backward::<F16>(cfg, arch))
    }
}

impl ConvElem for BF16 {
    type Acc = F32;
    fn widen(k: &mut KernelBuilder, v: Reg<BF16>) -> Reg<F32> {
        k.to_f32(v)
    }
    fn narrow(k: &mut KernelBuilder, v: Reg<F32>) -> Reg<BF16> {
        k.from_f32(v)
    }
    fn implicit_gemm(cfg: &Conv2dConfig, arch: Arch, pass: Pass) -> Option<KernelBuilder> {
        implicit_gemm::available(cfg).then(|| implicit_gemm::build::<BF16>(cfg, arch, pass))
    }
    fn pointwise(cfg: &Conv2dConfig, arch: Arch) -> Option<KernelBuilder> {
        implicit_gemm::pointwise_available(cfg)
            .then(|| implicit_gemm::build_pointwise::<BF16>(cfg, arch))
    }
    fn split_filter(cfg: &Conv2dConfig, arch: Arch) -> Option<[KernelBuilder; 2]> {
        implicit_gemm::available(cfg).then(|| implicit_gemm::build_split::<BF16>(cfg, arch))
    }
    fn channels_last(cfg: &Conv2dConfig, arch: Arch) -> Option<Vec<KernelBuilder>> {
        implicit_gemm::channels_last_available(cfg)
            .then(|| implicit_gemm::build_channels_last_forward::<BF16>(cfg, arch))
    }
    fn channels_last_backward(cfg: &Conv2dConfig, arch: Arch) -> Option<Vec<KernelBuilder>> {
        implicit_gemm::channels_last_backward_available(cfg)
            .then(|| implicit_gemm::build_channels_last_backward::<BF16>(cfg, arch))
    }
}

impl ConvElem for F32 {
    type Acc = F32;
    fn widen(_: &mut KernelBuilder, v: Reg<F32>) -> Reg<F32> {
        v
    }
    fn narrow(_: &mut KernelBuilder, v: Reg<F32>) -> Reg<F32> {
        v
    }
    /// With `allow_tf32`: tf32 `mma.m16n8k8` ([`crate::templates::warp_mma`]'s f32 tile).
    fn implicit_gemm(cfg: &Conv2dConfig, arch: Arch, pass: Pass) -> Option<KernelBuilder> {
        implicit_gemm::available(cfg).then(|| implicit_gemm::build::<F32>(cfg, arch, pass))
    }
    fn split_filter(cfg: &Conv2dConfig, arch: Arch) -> Option<[KernelBuilder; 2]> {
        implicit_gemm::available(cfg).then(|| implicit_gemm::build_split::<F32>(cfg, arch))
    }
}

impl ConvElem for F64 {
    type Acc = F64;
    fn widen(_: &mut KernelBuilder, v: Reg<F64>) -> Reg<F64> {
        v
    }
    fn narrow(_: &mut KernelBuilder, v: Reg<F64>) -> Reg<F64> {
        v
    }
}

/// Bytes of one `T`.
pub(crate) fn bytes_of<T: Scalar>() -> u32 {
    T::TYPE.bytes()
}

/// The compile-time constants of one configuration, as `u32`s for immediates.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Problem {
    pub c_in: u32,
    pub c_out: u32,
    pub kh: u32,
    pub kw: u32,
    pub sh: u32,
    pub sw: u32,
    pub ph: u32,
    pub pw: u32,
    pub dh: u32,
    pub dw: u32,
    /// Input channels per group.
    pub cg: u32,
    /// Output channels per group.
    pub og: u32,
    /// Taps per channel, `kh · kw`.
    pub taps: u32,
    pub bias: bool,
    pub layout: Layout,
}

impl Problem {
    pub fn new(cfg: &Conv2dConfig) -> Self {
        Self {
            c_in: cfg.in_channels,
            c_out: cfg.out_channels,
            kh: cfg.kernel_h,
            kw: cfg.kernel_w,
            sh: cfg.stride_h,
            sw: cfg.stride_w,
            ph: cfg.padding_h,
            pw: cfg.padding_w,
            dh: cfg.dilation_h,
            dw: cfg.dilation_w,
            cg: cfg.in_per_group(),
            og: cfg.out_per_group(),
            taps: cfg.kernel_h * cfg.kernel_w,
            bias: cfg.bias,
            layout: cfg.layout,
        }
    }

    /// Elements of one filter row `[Cg, KH, KW]` (the GEMM reduction depth).
    pub const fn filter_len(&self) -> u32 {
        self.cg * self.taps
    }
}

/// The run-time shape every entry takes after its buffers: `batch, height, width,
/// out_height, out_width` (u32 each; the launch functions check that every index fits), then
/// the division constants of `out_width`, `out_height · out_width` and `width` (see
/// [`FastDiv`]): no entry divides by a run-time value with `div.u32`, which ptxas lowers to a
/// subroutine call that spills on sm_70.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DimParams {
    dims: [ParamHandle<U32>; 5],
    divisors: [ParamHandle<U32>; 6],
}

/// The loaded run-time shape.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Dims {
    pub batch: Reg<U32>,
    pub h: Reg<U32>,
    pub w: Reg<U32>,
    pub oh: Reg<U32>,
    pub ow: Reg<U32>,
    /// `out_height · out_width`.
    pub ohw: Reg<U32>,
    /// Division by `out_width`.
    pub ow_div: FastDiv,
    /// Division by `out_height · out_width`.
    pub ohw_div: FastDiv,
    /// Division by `width`.
    pub w_div: FastDiv,
}

/// The shape parameter names, in order (launch code passes them in this order).
pub const DIM_PARAMS: [&str; 5] = ["batch", "height", "width", "out_height", "out_width"];

/// The division-constant parameter names, in order, after [`DIM_PARAMS`]: `(magic, shift)`
/// of `out_width`, `out_height · out_width` and `width` from [`fast_div_constants`].
pub const DIVISOR_PARAMS: [&str; 6] = [
    "out_width_magic",
    "out_width_shift",
    "out_pixels_magic",
    "out_pixels_shift",
    "width_magic",
    "width_shift",
];

impl DimParams {
    pub fn declare(k: &mut KernelBuilder) -> Self {
        Self {
            dims: DIM_PARAMS.map(|name| k.param::<U32>(name)),
            divisors: DIVISOR_PARAMS.map(|name| k.param::<U32>(name)),
        }
    }

    pub fn load(self, k: &mut KernelBuilder) -> Dims {
        let [batch, h, w, oh, ow] = self.dims.map(|p| k.load_param(p));
        let [owm, ows, ohwm, ohws, wm, ws] = self.divisors;
        let ohw = k.mul_lo(oh, ow);
        let ow_div = FastDiv::load(k, ow, owm, ows);
        let ohw_div = FastDiv::load(k, ohw, ohwm, ohws);
        let w_div = FastDiv::load(k, w, wm, ws);
        Dims {
            batch,
            h,
            w,
            oh,
            ow,
            ohw,
            ow_div,
            ohw_div,
            w_div,
        }
    }
}

/// Unsigned division by a launch-invariant `d ≥ 1` without `div.u32` (Granlund & Montgomery,
/// "Division by invariant integers using multiplication", 1994, fig. 4.1): with
/// `l = ⌈log2 d⌉` and `magic = ⌊2^32 · (2^l − d) / d⌋ + 1`,
/// `t = mulhi(magic, n)`, `n / d = (t + ((n − t) >> min(l, 1))) >> max(l − 1, 0)`, exact for
/// every 32-bit `n`. The host computes `(magic, l)` with [`fast_div_constants`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct FastDiv {
    divisor: Reg<U32>,
    magic: Reg<U32>,
    first_shift: Reg<U32>,
    second_shift: Reg<U32>,
}

impl FastDiv {
    fn load(
        k: &mut KernelBuilder,
        divisor: Reg<U32>,
        magic: ParamHandle<U32>,
        shift: ParamHandle<U32>,
    ) -> Self {
        let magic = k.load_param(magic);
        let l = k.load_param(shift);
        let first_shift = k.min(l, 1u32);
        let second_shift = k.sub(l, first_shift);
        Self {
            divisor,
            magic,
            first_shift,
            second_shift,
        }
    }

    /// `n / d`.
    pub fn div(&self, k: &mut KernelBuilder, n: impl Into<Val<U32>>) -> Reg<U32> {
        let n = match n.into() {
            Val::Reg(r) => r,
            imm => k.var::<U32>(imm),
        };
        let t = k.mul_hi(n, self.magic);
        let rest = k.sub(n, t);
        let rest = k.shr(rest, self.first_shift);
        let sum = k.add(t, rest);
        k.shr(sum, self.second_shift)
    }

    /// `(n / d, n mod d)`.
    pub fn divmod(&self, k: &mut KernelBuilder, n: impl Into<Val<U32>>) -> (Reg<U32>, Reg<U32>) {
        let n = match n.into() {
            Val::Reg(r) => r,
            imm => k.var::<U32>(imm),
        };
        let q = self.div(k, n);
        let whole = k.mul_lo(q, self.divisor);
        (q, k.sub(n, whole))
    }
}

/// The `(magic, shift)` pair `FastDiv` divides by `d` with (`d = 0` is treated as 1; the
/// launch functions reject zero-sized dimensions before computing these).
pub fn fast_div_constants(d: u32) -> (u32, u32) {
    let d = u64::from(d.max(1));
    let l = 64 - (d - 1).leading_zeros();
    let magic = ((1u64 << 32) * ((1u64 << l) - d)) / d + 1;
    (magic as u32, l)
}

/// `a / d` for a compile-time `d ≥ 1`: a shift for powers of two (ptxas sm_70 was seen to
/// spill around `div.u32` by 2 in a long-lived loop), `div.u32` by an immediate otherwise.
pub(crate) fn div_const(k: &mut KernelBuilder, a: Reg<U32>, d: u32) -> Reg<U32> {
    if d.is_power_of_two() {
        k.shr(a, d.trailing_zeros())
    } else {
        k.div_int(a, d)
    }
}

/// `a mod d` for a compile-time `d ≥ 1` (a mask for powers of two).
pub(crate) fn rem_const(k: &mut KernelBuilder, a: Reg<U32>, d: u32) -> Reg<U32> {
    if d.is_power_of_two() {
        k.and(a, d - 1)
    } else {
        k.rem(a, d)
    }
}

/// Output pixel `m = (n·OH + oh)·OW + ow` as `(n, oh·SH − PH, ow·SW − PW)`: its image and
/// the input position its window's first tap reads (wrapping: above / left of the image is
/// huge, so one `< H` / `< W` test per tap rejects the padding).
pub(crate) fn window_origin(
    k: &mut KernelBuilder,
    p: &Problem,
    d: &Dims,
    m: Reg<U32>,
) -> (Reg<U32>, Reg<U32>, Reg<U32>) {
    let (n, pix) = d.ohw_div.divmod(k, m);
    let (oh, ow) = d.ow_div.divmod(k, pix);
    let ih = k.mul_lo(oh, p.sh);
    let ih = k.sub(ih, p.ph);
    let iw = k.mul_lo(ow, p.sw);
    let iw = k.sub(iw, p.pw);
    (n, ih, iw)
}

/// The output coordinate tap `t` of one axis reads, if any: `o = (i + pad − t·dil) / stride`
/// when `i + pad ≥ t·dil`, the division is exact and `o < out_len`.
pub(crate) fn output_coord(
    k: &mut KernelBuilder,
    i: Reg<U32>,
    t: Reg<U32>,
    pad: u32,
    dil: u32,
    stride: u32,
    out_len: Reg<U32>,
) -> (Reg<U32>, Pred) {
    let shifted = k.add(i, pad);
    let reach = k.mul_lo(t, dil);
    let not_before = k.setp_ge(shifted, reach);
    let num = k.sub(shifted, reach);
    let o = div_const(k, num, stride);
    let inside = k.setp_lt(o, out_len);
    let ok = k.and_pred(not_before, inside);
    if stride == 1 {
        return (o, ok);
    }
    let rest = rem_const(k, num, stride);
    let exact = k.setp(CmpOp::Eq, rest, 0u32);
    let ok = k.and_pred(ok, exact);
    (o, ok)
}

/// `a < b && c < d` (unsigned).
pub(crate) fn both_below(
    k: &mut KernelBuilder,
    a: Reg<U32>,
    b: Reg<U32>,
    c: Reg<U32>,
    d: Reg<U32>,
) -> Pred {
    let first = k.setp_lt(a, b);
    let second = k.setp_lt(c, d);
    k.and_pred(first, second)
}

/// `ok ? widen(ptr[index]) : 0`: the load happens only where `ok` holds.
pub(crate) fn load_or_zero<T: ConvElem>(
    k: &mut KernelBuilder,
    ptr: GlobalPtr<T>,
    index: Reg<U32>,
    ok: Pred,
) -> Reg<T::Acc> {
    let v = k.zero::<T::Acc>();
    k.if_then(ok, |k| {
        let addr = k.elem_addr(ptr, index);
        let raw = k.ld_global_nc::<T>(addr, 0);
        let wide = T::widen(k, raw);
        k.assign(v, wide);
    });
    v
}

/// Butterfly sum across the full warp in the accumulation type (f64 moves as two 32-bit
/// halves). Every lane ends with the total; lane 0's value is independent of scheduling.
pub(crate) fn warp_sum<A: Float>(k: &mut KernelBuilder, v: Reg<A>) -> Reg<A> {
    match A::TYPE {
        Type::F32 => k.warp_sum_f32(v.retype::<F32>()).retype(),
        Type::F64 => {
            let mut acc = v.retype::<F64>();
            for shift in [16, 8, 4, 2, 1] {
                let (lo, hi) = (k.reg::<U32>(), k.reg::<U32>());
                k.push(
                    Op::Unpack(Type::B64),
                    vec![Operand::Vec(vec![lo.id(), hi.id()]), Operand::Reg(acc.id())],
                );
                let lo_other = k.shfl_xor(lo, shift);
                let hi_other = k.shfl_xor(hi, shift);
                let other = k.reg::<F64>();
                k.push(
                    Op::Pack(Type::B64),
                    vec![
                        Operand::Reg(other.id()),
                        Operand::Vec(vec![lo_other.id(), hi_other.id()]),
                    ],
                );
                acc = k.add(acc, other);
            }
            acc.retype()
        }
        other => panic!("warp_sum accumulates in f32 or f64, not {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::templates::testing::SplitMix64;

    /// The host model of [`FastDiv::div`].
    fn model(n: u32, d: u32) -> u32 {
        let (magic, l) = fast_div_constants(d);
        let t = ((u64::from(magic) * u64::from(n)) >> 32) as u32;
        let s1 = l.min(1);
        (t + ((n - t) >> s1)) >> (l - s1)
    }

    #[test]
    fn fast_division_is_exact() {
        let mut rng = SplitMix64::new(3);
        let mut divisors: Vec<u32> = (1..=300).collect();
        divisors.extend([
            u32::MAX,
            u32::MAX - 1,
            1 << 31,
            (1 << 31) + 1,
            65535,
            65536,
            641,
        ]);
        divisors.extend((0..200).map(|_| rng.next_u64() as u32 | 1));
        for d in divisors {
            let mut ns = vec![0, 1, d - 1, d, d.wrapping_add(1), u32::MAX, u32::MAX - 1];
            ns.extend((0..200).map(|_| rng.next_u64() as u32));
            ns.extend((0..50).map(|i| d.wrapping_mul(i + 1)));
            for n in ns {
                assert_eq!(model(n, d), n / d, "{n} / {d}");
            }
        }
    }
}
