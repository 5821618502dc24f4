//! Host launch functions of the conv2d family, generic over the [`Backend`].
//!
//! Each function takes the configuration the module was compiled from, the device, the
//! module's PTX text (the macro's `const PTX`; nothing is generated at launch time), the
//! run-time shape and typed buffers, and launches the entries in order. Before anything runs
//! it checks, returning typed [`LaunchError`]s:
//!
//! - the buffers' element type `T` against the config's dtype (`half::f16`, `half::bf16`,
//!   `f32`, `f64`): [`LaunchError::ArgumentType`] naming the entry and parameter index;
//! - the shape: zero-sized dimensions, an input smaller than the dilated kernel, tensors past
//!   the index limit, positions past the index range ([`LaunchError::InvalidDim`]; see
//!   [`Conv2dConfig::check_index_range`]);
//! - every buffer length ([`LaunchError::BufferLength`]); a bias passed to a config without
//!   bias is reported as `bias` expected 0 elements, a missing one as 0 elements given;
//! - the grid limits ([`LaunchError::InvalidDim`]).
//!
//! Layouts: `x [N, C_in, H, W]`, `w [C_out, C_in/groups, KH, KW]`, `bias [C_out]`,
//! `y [N, C_out, OH, OW]`, `cols [C_in·KH·KW, N·OH·OW]`; in the NHWC layout (forward, both
//! backward passes) `x [N, H, W, C_in]`, `w [C_out, KH, KW, C_in/groups]`, `y [N, OH, OW,
//! C_out]`, and the gradients `dx`, `dw`, `gy` like `x`, `w`, `y`; all row-major. Outputs are
//! written completely (every element), inputs never.

use super::config::{Conv2dConfig, Layout};
use super::geometry::{slice_tiles, INDEX_LIMIT, MAX_GRID_YZ, POINTWISE_PIXEL_RUN};
use super::kernels::{
    bias_block_pixels, fast_div_constants, ENTRY_1X1, ENTRY_BWD_BIAS, ENTRY_BWD_BIAS_REDUCE,
    ENTRY_BWD_BIAS_SPLIT, ENTRY_BWD_DATA, ENTRY_BWD_DATA_CHANNELS_LAST,
    ENTRY_BWD_DATA_IMPLICIT_GEMM, ENTRY_BWD_FILTER, ENTRY_BWD_FILTER_CHANNELS_LAST,
    ENTRY_BWD_FILTER_CHANNELS_LAST_SPLIT, ENTRY_BWD_FILTER_CUDA_SPLIT,
    ENTRY_BWD_FILTER_IMPLICIT_GEMM, ENTRY_BWD_FILTER_REDUCE, ENTRY_BWD_FILTER_SPLIT, ENTRY_DIRECT,
    ENTRY_FILTER_TO_CHANNELS_LAST, ENTRY_GEMM, ENTRY_GRADIENT_TO_CHANNELS_LAST, ENTRY_IM2COL,
    ENTRY_IMPLICIT_GEMM, ENTRY_IMPLICIT_GEMM_CHANNELS_LAST, ENTRY_IMPLICIT_GEMM_POINTWISE,
    ENTRY_NHWC, ENTRY_TO_CHANNELS_LAST,
};
use super::shapes::{ConvDims, ConvError, ConvShape};
use crate::dtype::DType;
use crate::launch::{
    Backend, DeviceBuffer, Element, KernelArg, LaunchConfig, LaunchError, ParamKind, ScalarKind,
};

/// The scalar kind of a dtype's host element.
const fn kind_of(dtype: DType) -> ScalarKind {
    match dtype {
        DType::F16 => ScalarKind::F16,
        DType::BF16 => ScalarKind::BF16,
        DType::F32 => ScalarKind::F32,
        DType::F64 => ScalarKind::F64,
    }
}

/// A [`ConvError`] as a launch error (`InvalidDim` naming the dimension or tensor).
fn shape_error(e: ConvError) -> LaunchError {
    let reason = e.to_string();
    match e {
        ConvError::ZeroDim { name } => LaunchError::InvalidDim {
            name,
            value: 0,
            reason,
        },
        ConvError::InputTooSmall { axis, input, .. } => LaunchError::InvalidDim {
            name: axis,
            value: u64::from(input),
            reason,
        },
        ConvError::TooLarge { tensor, elements } => LaunchError::InvalidDim {
            name: tensor,
            value: u64::try_from(elements).unwrap_or(u64::MAX),
            reason,
        },
    }
}

/// The checked shape of one call and the scalar arguments every entry ends with.
struct Prepared {
    dims: ConvDims,
    scalars: [u32; 11],
}

impl Prepared {
    /// Validates the config, the element type (`entry`'s first parameter) and the shape.
    fn new<T: Element>(
        cfg: &Conv2dConfig,
        entry: &'static str,
        shape: &ConvShape,
        im2col: bool,
    ) -> Result<Self, LaunchError> {
        if let Err(errors) = cfg.validate() {
            return Err(LaunchError::InvalidDim {
                name: errors.0.first().map_or("config", |e| e.fields[0]),
                value: 0,
                reason: format!("invalid configuration: {errors}"),
            });
        }
        if !cfg.entry_names().contains(&entry) {
            return Err(LaunchError::InvalidDim {
                name: "layout",
                value: 0,
                reason: format!(
                    "entry {entry} is not in the module of this configuration (layout {}, {} on \
                     {}); its entries are {}",
                    cfg.layout,
                    cfg.dtype,
                    cfg.arch,
                    cfg.entry_names().join(", ")
                ),
            });
        }
        let kind = kind_of(cfg.dtype);
        if T::KIND != kind {
            return Err(LaunchError::ArgumentType {
                entry: entry.to_string(),
                index: 0,
                expected: ParamKind::Pointer(kind),
            });
        }
        let dims = cfg.check_shape(shape, im2col).map_err(shape_error)?;
        cfg.check_index_range(&dims, im2col)?;
        let (ow_magic, ow_shift) = fast_div_constants(dims.out_w);
        let (ohw_magic, ohw_shift) = fast_div_constants(dims.out_h * dims.out_w);
        let (w_magic, w_shift) = fast_div_constants(dims.in_w);
        Ok(Self {
            dims,
            scalars: [
                dims.batch, dims.in_h, dims.in_w, dims.out_h, dims.out_w, ow_magic, ow_shift,
                ohw_magic, ohw_shift, w_magic, w_shift,
            ],
        })
    }

    /// Launches `entry` with `buffers` followed by the shape scalars.
    fn launch<B: Backend>(
        &self,
        dev: &B,
        ptx: &str,
        entry: &str,
        config: LaunchConfig,
        buffers: Vec<KernelArg<'_, B>>,
    ) -> Result<(), LaunchError> {
        dev.launch(ptx, entry, config, &self.args(buffers))
    }

    /// `buffers` followed by the shape scalars.
    fn args<'a, B: Backend>(&self, buffers: Vec<KernelArg<'a, B>>) -> Vec<KernelArg<'a, B>> {
        let mut args = buffers;
        args.extend(self.scalars.iter().map(|&v| KernelArg::U32(v)));
        args
    }
}

fn check_len<B: Backend, T: Element>(
    name: &'static str,
    expected: usize,
    buf: &DeviceBuffer<B, T>,
) -> Result<(), LaunchError> {
    if buf.len() == expected {
        Ok(())
    } else {
        Err(LaunchError::BufferLength {
            name,
            expected,
            actual: buf.len(),
        })
    }
}

/// A bias buffer must be given exactly when the config has a bias, with `C_out` elements.
fn check_bias<B: Backend, T: Element>(
    cfg: &Conv2dConfig,
    name: &'static str,
    bias: Option<&DeviceBuffer<B, T>>,
) -> Result<(), LaunchError> {
    let expected = if cfg.bias {
        cfg.out_channels as usize
    } else {
        0
    };
    let actual = bias.map_or(0, DeviceBuffer::len);
    if cfg.bias != bias.is_some() || actual != expected {
        return Err(LaunchError::BufferLength {
            name,
            expected,
            actual,
        });
    }
    Ok(())
}

/// Which tensor a buffer holds, for its expected length.
#[derive(Clone, Copy)]
enum Tensor {
    /// `x` or `dx`.
    Input,
    /// `y` or `gy`.
    Output,
    /// `w` or `dw`.
    Weight,
}

impl Tensor {
    fn len(self, cfg: &Conv2dConfig, dims: &ConvDims) -> usize {
        match self {
            Tensor::Input => dims.input_len(cfg),
            Tensor::Output => dims.output_len(cfg),
            Tensor::Weight => ConvDims::weight_len(cfg),
        }
    }
}

/// One buffer of a launch and the length it must have.
enum Buffer<'a, B: Backend, T: Element> {
    /// A tensor: its parameter name, which tensor, the buffer.
    Tensor(&'static str, Tensor, &'a DeviceBuffer<B, T>),
    /// The optional bias (or bias gradient) [`check_bias`] checks; passed only when given.
    Bias(&'static str, Option<&'a DeviceBuffer<B, T>>),
}

impl<'a, B: Backend, T: Element> Buffer<'a, B, T> {
    fn check(&self, cfg: &Conv2dConfig, dims: &ConvDims) -> Result<(), LaunchError> {
        match *self {
            Buffer::Tensor(name, tensor, buf) => check_len(name, tensor.len(cfg, dims), buf),
            Buffer::Bias(name, bias) => check_bias(cfg, name, bias),
        }
    }

    fn arg(&self) -> Option<KernelArg<'a, B>> {
        match *self {
            Buffer::Tensor(_, _, buf) | Buffer::Bias(_, Some(buf)) => Some(KernelArg::buffer(buf)),
            Buffer::Bias(_, None) => None,
        }
    }
}

/// What every launch of one call shares: the config, the device, the module and the shape.
struct Call<'a, B: Backend> {
    cfg: &'a Conv2dConfig,
    dev: &'a B,
    ptx: &'a str,
    shape: &'a ConvShape,
}

/// The grid of an entry from the config and the checked dimensions.
type Geometry = fn(&Conv2dConfig, &ConvDims) -> Result<LaunchConfig, LaunchError>;

/// `(x, w, bias, y)` of a forward entry.
type ForwardBuffers<'a, B, T> = (
    &'a DeviceBuffer<B, T>,
    &'a DeviceBuffer<B, T>,
    Option<&'a DeviceBuffer<B, T>>,
    &'a DeviceBuffer<B, T>,
);

/// `(gy, w, dx)` of a backward-data entry.
type BackwardDataBuffers<'a, B, T> = (
    &'a DeviceBuffer<B, T>,
    &'a DeviceBuffer<B, T>,
    &'a DeviceBuffer<B, T>,
);

impl<B: Backend> Call<'_, B> {
    /// Checks the call ([`Prepared::new`]) and every buffer of `args` and of `later` (the
    /// buffers of a launch that follows in the same call, so that nothing runs when any of
    /// them is wrong), then launches `entry` with `args` on the grid `geometry` gives.
    fn launch<T: Element>(
        &self,
        entry: &'static str,
        geometry: Geometry,
        args: &[Buffer<'_, B, T>],
        later: &[Buffer<'_, B, T>],
    ) -> Result<Prepared, LaunchError> {
        let cfg = self.cfg;
        let prep = self.prepare(entry, args.iter().chain(later))?;
        let config = geometry(cfg, &prep.dims)?;
        let args = args.iter().filter_map(Buffer::arg).collect();
        prep.launch(self.dev, self.ptx, entry, config, args)?;
        Ok(prep)
    }

    /// Checks the call ([`Prepared::new`]) and every buffer of `buffers`.
    fn prepare<'b, T: Element + 'b>(
        &self,
        entry: &'static str,
        buffers: impl IntoIterator<Item = &'b Buffer<'b, B, T>>,
    ) -> Result<Prepared, LaunchError>
    where
        B: 'b,
    {
        let prep = Prepared::new::<T>(self.cfg, entry, self.shape, false)?;
        for buffer in buffers {
            buffer.check(self.cfg, &prep.dims)?;
        }
        Ok(prep)
    }

    /// [`Self::launch`] of a forward entry with parameters `(x, w, [bias,] y, dims…)`.
    fn forward<T: Element>(
        &self,
        entry: &'static str,
        geometry: Geometry,
        (x, w, bias, y): ForwardBuffers<'_, B, T>,
    ) -> Result<ConvDims, LaunchError> {
        let args = [
            Buffer::Tensor("x", Tensor::Input, x),
            Buffer::Tensor("w", Tensor::Weight, w),
            Buffer::Bias("bias", bias),
            Buffer::Tensor("y", Tensor::Output, y),
        ];
        Ok(self.launch(entry, geometry, &args, &[])?.dims)
    }
}

/// Forward with the direct kernel (`conv2d_direct`): `y = conv(x, w) (+ bias)`.
/// `bias` must be `Some` exactly when `cfg.bias`. Returns the checked dimensions.
#[allow(clippy::too_many_arguments)]
pub fn forward_direct<B: Backend, T: Element>(
    cfg: &Conv2dConfig,
    dev: &B,
    ptx: &str,
    shape: &ConvShape,
    x: &DeviceBuffer<B, T>,
    w: &DeviceBuffer<B, T>,
    bias: Option<&DeviceBuffer<B, T>>,
    y: &mut DeviceBuffer<B, T>,
) -> Result<ConvDims, LaunchError> {
    let call = Call {
        cfg,
        dev,
        ptx,
        shape,
    };
    call.forward(
        ENTRY_DIRECT,
        Conv2dConfig::direct_launch_config,
        (x, w, bias, y),
    )
}

/// Forward as an implicit GEMM on tensor cores (`conv2d_implicit_gemm`; f16/bf16 on sm_80+,
/// NCHW or NHWC per `cfg.layout`): `y = conv(x, w) (+ bias)`. A config without that entry
/// (other dtypes, older targets) is [`LaunchError::InvalidDim`] `dtype`; [`forward`] picks the
/// entry automatically.
#[allow(clippy::too_many_arguments)]
pub fn forward_implicit_gemm<B: Backend, T: Element>(
    cfg: &Conv2dConfig,
    dev: &B,
    ptx: &str,
    shape: &ConvShape,
    x: &DeviceBuffer<B, T>,
    w: &DeviceBuffer<B, T>,
    bias: Option<&DeviceBuffer<B, T>>,
    y: &mut DeviceBuffer<B, T>,
) -> Result<ConvDims, LaunchError> {
    if !cfg.has_tensor_core_forward() {
        return Err(LaunchError::InvalidDim {
            name: "dtype",
            value: 0,
            reason: format!(
                "conv2d_implicit_gemm needs f16 or bf16 (or f32 with allow_tf32) on a target \
                 with mma.m16n8k16, the config has {} on {}",
                cfg.dtype, cfg.arch
            ),
        });
    }
    let call = Call {
        cfg,
        dev,
        ptx,
        shape,
    };
    call.forward(
        ENTRY_IMPLICIT_GEMM,
        Conv2dConfig::implicit_gemm_launch_config,
        (x, w, bias, y),
    )
}

/// The NCHW tensor-core forward of a 1 × 1 filter at stride 1 without padding
/// (`conv2d_implicit_gemm_pointwise`; f16/bf16 on sm_80+ with `C_in/groups` a multiple of 8,
/// [`Conv2dConfig::has_pointwise_implicit_gemm`]): `y = conv(x, w) (+ bias)`, reading `x` in
/// 16-byte `cp.async` chunks of 8 pixels of one channel, no copy. A config without the entry
/// is [`LaunchError::InvalidDim`] `layout`, `OH·OW` not a multiple of 8
/// [`LaunchError::InvalidDim`] `out_pixels`; [`forward`] picks the entry where it can.
#[allow(clippy::too_many_arguments)]
pub fn forward_implicit_gemm_pointwise<B: Backend, T: Element>(
    cfg: &Conv2dConfig,
    dev: &B,
    ptx: &str,
    shape: &ConvShape,
    x: &DeviceBuffer<B, T>,
    w: &DeviceBuffer<B, T>,
    bias: Option<&DeviceBuffer<B, T>>,
    y: &mut DeviceBuffer<B, T>,
) -> Result<ConvDims, LaunchError> {
    let call = Call {
        cfg,
        dev,
        ptx,
        shape,
    };
    call.forward(
        ENTRY_IMPLICIT_GEMM_POINTWISE,
        Conv2dConfig::implicit_gemm_pointwise_launch_config,
        (x, w, bias, y),
    )
}

/// Whether [`forward`] takes `conv2d_implicit_gemm_pointwise` for `shape`: the config has it
/// and `OH·OW` is a multiple of 8.
fn pointwise_fits(cfg: &Conv2dConfig, shape: &ConvShape) -> bool {
    let whole_runs =
        |(h, w): (u32, u32)| (h as usize * w as usize).is_multiple_of(POINTWISE_PIXEL_RUN);
    cfg.has_pointwise_implicit_gemm() && cfg.output_size(shape).is_ok_and(whole_runs)
}

/// The NCHW tensor-core forward through channels-last copies (f16/bf16 on sm_80+ with `C_in`
/// and `C_in/groups` multiples of 8, [`Conv2dConfig::has_channels_last_forward`]; [`forward`]
/// picks it there but for the 1 × 1 filters [`forward_implicit_gemm_pointwise`] takes):
/// `conv2d_filter_to_channels_last` writes `w` as `[C_out, KH, KW, Cg]` (not for a 1 × 1
/// filter, channels-last already) and `conv2d_to_channels_last` `x` as `[N, H, W, C_in]` into
/// workspaces the backend allocates (`C_out·Cg·KH·KW` and `N·C_in·H·W` elements),
/// then `conv2d_implicit_gemm_channels_last` computes `y = conv(x, w) (+ bias)` in NCHW from
/// them, reading A in 16-byte `cp.async` chunks. A config without those entries is
/// [`LaunchError::InvalidDim`] `layout`; `N` or `C_out` past 65535 (the pre-pass's grid `z`)
/// is [`LaunchError::InvalidDim`].
#[allow(clippy::too_many_arguments)]
pub fn forward_channels_last<B: Backend, T: Element>(
    cfg: &Conv2dConfig,
    dev: &B,
    ptx: &str,
    shape: &ConvShape,
    x: &DeviceBuffer<B, T>,
    w: &DeviceBuffer<B, T>,
    bias: Option<&DeviceBuffer<B, T>>,
    y: &mut DeviceBuffer<B, T>,
) -> Result<ConvDims, LaunchError> {
    let call = Call {
        cfg,
        dev,
        ptx,
        shape,
    };
    call.forward_channels_last((x, w, bias, y))
}

impl<B: Backend> Call<'_, B> {
    /// The NCHW forward through channels-last copies ([`forward_channels_last`]): the
    /// pre-passes into workspaces the backend allocates, then
    /// `conv2d_implicit_gemm_channels_last` computes NCHW `y` from them.
    fn forward_channels_last<T: Element>(
        &self,
        (x, w, bias, y): ForwardBuffers<'_, B, T>,
    ) -> Result<ConvDims, LaunchError> {
        let cfg = self.cfg;
        let args = [
            Buffer::Tensor("x", Tensor::Input, x),
            Buffer::Tensor("w", Tensor::Weight, w),
            Buffer::Bias("bias", bias),
            Buffer::Tensor("y", Tensor::Output, y),
        ];
        let prep = self.prepare(ENTRY_IMPLICIT_GEMM_CHANNELS_LAST, &args)?;
        let d = prep.dims;
        let filter_copy = self.filter_copy()?;
        let input_copy = LayoutCopy::input(cfg, &d)?;
        let gemm = cfg.implicit_gemm_channels_last_launch_config(&d)?;
        let filter = filter_copy.map(|copy| self.copy(&copy, w)).transpose()?;
        let input = self.copy(&input_copy, x)?;
        let mut buffers = vec![
            KernelArg::buffer(&input),
            KernelArg::buffer(filter.as_ref().unwrap_or(w)),
        ];
        buffers.extend(bias.map(KernelArg::buffer));
        buffers.push(KernelArg::buffer(y));
        prep.launch(
            self.dev,
            self.ptx,
            ENTRY_IMPLICIT_GEMM_CHANNELS_LAST,
            gemm,
            buffers,
        )?;
        Ok(d)
    }
}

/// One channels-last layout copy ahead of a `…_channels_last` GEMM: its entry, grid,
/// destination length and trailing pixel count (`None`: the filter copy, which takes none).
struct LayoutCopy {
    entry: &'static str,
    grid: LaunchConfig,
    len: usize,
    pixels: Option<u32>,
}

impl LayoutCopy {
    /// `conv2d_filter_to_channels_last`: `w` → `[C_out, KH, KW, Cg]`.
    fn filter(cfg: &Conv2dConfig) -> Result<Self, LaunchError> {
        Ok(Self {
            entry: ENTRY_FILTER_TO_CHANNELS_LAST,
            grid: cfg.filter_to_channels_last_launch_config()?,
            len: ConvDims::weight_len(cfg),
            pixels: None,
        })
    }

    /// `conv2d_to_channels_last`: `x` → `[N, H, W, C_in]`.
    fn input(cfg: &Conv2dConfig, d: &ConvDims) -> Result<Self, LaunchError> {
        let pixels = d.in_h * d.in_w;
        Ok(Self {
            entry: ENTRY_TO_CHANNELS_LAST,
            grid: cfg.to_channels_last_launch_config(d.batch, pixels)?,
            len: d.input_len(cfg),
            pixels: Some(pixels),
        })
    }

    /// `conv2d_gradient_to_channels_last`: `gy` → `[N, OH, OW, C_out]`.
    fn gradient(cfg: &Conv2dConfig, d: &ConvDims) -> Result<Self, LaunchError> {
        let pixels = d.out_h * d.out_w;
        Ok(Self {
            entry: ENTRY_GRADIENT_TO_CHANNELS_LAST,
            grid: cfg.gradient_to_channels_last_launch_config(d.batch, pixels)?,
            len: d.output_len(cfg),
            pixels: Some(pixels),
        })
    }
}

impl<B: Backend> Call<'_, B> {
    /// The filter copy ahead of a channels-last GEMM, `None` for a 1 × 1 filter: `[C_out, Cg,
    /// 1, 1]` is channels-last already.
    fn filter_copy(&self) -> Result<Option<LayoutCopy>, LaunchError> {
        let cfg = self.cfg;
        (!cfg.has_pointwise())
            .then(|| LayoutCopy::filter(cfg))
            .transpose()
    }

    /// Runs `copy` of `src` into a workspace the backend allocates, and returns it.
    fn copy<T: Element>(
        &self,
        copy: &LayoutCopy,
        src: &DeviceBuffer<B, T>,
    ) -> Result<DeviceBuffer<B, T>, LaunchError> {
        let dst = self.dev.alloc::<T>(copy.len)?;
        let mut args = vec![KernelArg::buffer(src), KernelArg::buffer(&dst)];
        args.extend(copy.pixels.map(KernelArg::U32));
        self.dev.launch(self.ptx, copy.entry, copy.grid, &args)?;
        Ok(dst)
    }
}

/// Whether the channels-last copies' grids fit the shape: `N` and `C_out` at most 65535.
fn channels_last_fits(cfg: &Conv2dConfig, shape: &ConvShape) -> bool {
    shape.batch <= MAX_GRID_YZ && cfg.out_channels <= MAX_GRID_YZ
}

/// Forward on CUDA cores in the NHWC layout (`conv2d_nhwc`): `y = conv(x, w) (+ bias)` with
/// `x [N, H, W, C_in]`, `w [C_out, KH, KW, C_in/g]`, `y [N, OH, OW, C_out]`. An NCHW config is
/// [`LaunchError::InvalidDim`] `layout`.
#[allow(clippy::too_many_arguments)]
pub fn forward_nhwc<B: Backend, T: Element>(
    cfg: &Conv2dConfig,
    dev: &B,
    ptx: &str,
    shape: &ConvShape,
    x: &DeviceBuffer<B, T>,
    w: &DeviceBuffer<B, T>,
    bias: Option<&DeviceBuffer<B, T>>,
    y: &mut DeviceBuffer<B, T>,
) -> Result<ConvDims, LaunchError> {
    let call = Call {
        cfg,
        dev,
        ptx,
        shape,
    };
    call.forward(
        ENTRY_NHWC,
        Conv2dConfig::nhwc_launch_config,
        (x, w, bias, y),
    )
}

/// Forward with the fastest entry the module has: in NCHW the 1 × 1 tensor-core GEMM over
/// chunks of pixels where the config has it and `OH·OW` is a multiple of 8
/// ([`forward_implicit_gemm_pointwise`]), the channels-last pre-pass and tensor-core
/// implicit GEMM where the config has them ([`forward_channels_last`]; `N` and `C_out` at
/// most 65535), the tensor-core implicit GEMM where the config has it and its tiles are not
/// mostly padding ([`Conv2dConfig::prefers_tensor_core_forward`]: depthwise and other NCHW
/// layers of few output channels per group stay on CUDA cores), else (also silently: f32
/// without `allow_tf32`, f64 and pre-sm_80 targets) the CUDA-core path: `conv2d_1x1` for a 1 × 1
/// kernel, `conv2d_direct` otherwise, `conv2d_nhwc` in the NHWC layout.
#[allow(clippy::too_many_arguments)]
pub fn forward<B: Backend, T: Element>(
    cfg: &Conv2dConfig,
    dev: &B,
    ptx: &str,
    shape: &ConvShape,
    x: &DeviceBuffer<B, T>,
    w: &DeviceBuffer<B, T>,
    bias: Option<&DeviceBuffer<B, T>>,
    y: &mut DeviceBuffer<B, T>,
) -> Result<ConvDims, LaunchError> {
    if pointwise_fits(cfg, shape) {
        forward_implicit_gemm_pointwise(cfg, dev, ptx, shape, x, w, bias, y)
    } else if cfg.has_channels_last_forward() && channels_last_fits(cfg, shape) {
        forward_channels_last(cfg, dev, ptx, shape, x, w, bias, y)
    } else if cfg.prefers_tensor_core_forward() {
        forward_implicit_gemm(cfg, dev, ptx, shape, x, w, bias, y)
    } else if cfg.layout == Layout::Nhwc {
        forward_nhwc(cfg, dev, ptx, shape, x, w, bias, y)
    } else if cfg.has_pointwise() {
        forward_1x1(cfg, dev, ptx, shape, x, w, bias, y)
    } else {
        forward_direct(cfg, dev, ptx, shape, x, w, bias, y)
    }
}

/// Forward through im2col + GEMM: `conv2d_im2col` fills `cols [C_in·KH·KW, N·OH·OW]` (every
/// element), then `conv2d_gemm` computes `y = W_g · cols_g (+ bias)` per group.
#[allow(clippy::too_many_arguments)]
pub fn forward_im2col<B: Backend, T: Element>(
    cfg: &Conv2dConfig,
    dev: &B,
    ptx: &str,
    shape: &ConvShape,
    x: &DeviceBuffer<B, T>,
    w: &DeviceBuffer<B, T>,
    bias: Option<&DeviceBuffer<B, T>>,
    cols: &mut DeviceBuffer<B, T>,
    y: &mut DeviceBuffer<B, T>,
) -> Result<ConvDims, LaunchError> {
    let prep = Prepared::new::<T>(cfg, ENTRY_IM2COL, shape, true)?;
    let d = prep.dims;
    check_len("x", d.input_len(cfg), x)?;
    check_len("w", ConvDims::weight_len(cfg), w)?;
    check_bias(cfg, "bias", bias)?;
    check_len("cols", d.im2col_len(cfg), cols)?;
    check_len("y", d.output_len(cfg), y)?;
    let unfold = cfg.im2col_launch_config(&d)?;
    let multiply = cfg.gemm_launch_config(&d)?;
    prep.launch(
        dev,
        ptx,
        ENTRY_IM2COL,
        unfold,
        vec![KernelArg::buffer(x), KernelArg::buffer(&*cols)],
    )?;
    let mut args = vec![KernelArg::buffer(w), KernelArg::buffer(&*cols)];
    args.extend(bias.map(KernelArg::buffer));
    args.push(KernelArg::buffer(&*y));
    prep.launch(dev, ptx, ENTRY_GEMM, multiply, args)?;
    Ok(d)
}

/// Forward of a 1 × 1 kernel (any stride, padding, groups) as an implicit GEMM
/// (`conv2d_1x1`). A config whose kernel is not 1 × 1 is [`LaunchError::InvalidDim`] `kernel`
/// (its module has no `conv2d_1x1` entry).
#[allow(clippy::too_many_arguments)]
pub fn forward_1x1<B: Backend, T: Element>(
    cfg: &Conv2dConfig,
    dev: &B,
    ptx: &str,
    shape: &ConvShape,
    x: &DeviceBuffer<B, T>,
    w: &DeviceBuffer<B, T>,
    bias: Option<&DeviceBuffer<B, T>>,
    y: &mut DeviceBuffer<B, T>,
) -> Result<ConvDims, LaunchError> {
    if !cfg.has_pointwise() {
        return Err(LaunchError::InvalidDim {
            name: "kernel",
            value: u64::from(cfg.kernel_h.max(cfg.kernel_w)),
            reason: format!(
                "conv2d_1x1 needs a 1 × 1 kernel, the config has {} × {}",
                cfg.kernel_h, cfg.kernel_w
            ),
        });
    }
    let call = Call {
        cfg,
        dev,
        ptx,
        shape,
    };
    // The 1×1 entry is the GEMM with `x` as its column operand: `(w, x, [bias,] y)`.
    let args = [
        Buffer::Tensor("w", Tensor::Weight, w),
        Buffer::Tensor("x", Tensor::Input, x),
        Buffer::Bias("bias", bias),
        Buffer::Tensor("y", Tensor::Output, y),
    ];
    let geometry: Geometry = Conv2dConfig::gemm_launch_config;
    Ok(call.launch(ENTRY_1X1, geometry, &args, &[])?.dims)
}

/// Backward-data: `dx = conv_transpose(gy, w)`, the adjoint of the bias-free forward, with the
/// fastest entry the module has: in NCHW the channels-last copies and
/// `conv2d_bwd_data_implicit_gemm_channels_last` where the config has them
/// ([`Conv2dConfig::has_channels_last_backward`]; `N` and `C_out` at most 65535), the
/// tensor-core `conv2d_bwd_data_implicit_gemm` where the config has it and its tiles are not
/// mostly padding ([`Conv2dConfig::prefers_tensor_core_backward_data`]), else (also
/// silently: f32 without `allow_tf32`, f64 and pre-sm_80 targets) the CUDA-core
/// `conv2d_bwd_data`, in the config's layout. `shape` is the *input* shape.
pub fn backward_data<B: Backend, T: Element>(
    cfg: &Conv2dConfig,
    dev: &B,
    ptx: &str,
    shape: &ConvShape,
    gy: &DeviceBuffer<B, T>,
    w: &DeviceBuffer<B, T>,
    dx: &mut DeviceBuffer<B, T>,
) -> Result<ConvDims, LaunchError> {
    let entry = if cfg.has_channels_last_backward() && channels_last_fits(cfg, shape) {
        ENTRY_BWD_DATA_CHANNELS_LAST
    } else if cfg.prefers_tensor_core_backward_data() {
        ENTRY_BWD_DATA_IMPLICIT_GEMM
    } else {
        ENTRY_BWD_DATA
    };
    backward_data_with(cfg, dev, ptx, shape, entry, gy, w, dx)
}

/// Backward-data with a named entry: `conv2d_bwd_data` (CUDA cores, every config),
/// `conv2d_bwd_data_implicit_gemm` (tensor cores) or
/// `conv2d_bwd_data_implicit_gemm_channels_last` (NCHW on tensor cores: first
/// `conv2d_filter_to_channels_last` writes `w` as `[C_out, KH, KW, Cg]` and
/// `conv2d_gradient_to_channels_last` `gy` as `[N, OH, OW, C_out]` into workspaces the
/// backend allocates; a 1 × 1 `w` is read as it is); an entry the module lacks is [`LaunchError::InvalidDim`] `layout`,
/// listing the entries it has. [`backward_data`] picks the fastest automatically; this one
/// lets a caller compare them.
#[allow(clippy::too_many_arguments)]
pub fn backward_data_with<B: Backend, T: Element>(
    cfg: &Conv2dConfig,
    dev: &B,
    ptx: &str,
    shape: &ConvShape,
    entry: &'static str,
    gy: &DeviceBuffer<B, T>,
    w: &DeviceBuffer<B, T>,
    dx: &mut DeviceBuffer<B, T>,
) -> Result<ConvDims, LaunchError> {
    let call = Call {
        cfg,
        dev,
        ptx,
        shape,
    };
    let args = [
        Buffer::Tensor("gy", Tensor::Output, gy),
        Buffer::Tensor("w", Tensor::Weight, w),
        Buffer::Tensor("dx", Tensor::Input, dx),
    ];
    if entry == ENTRY_BWD_DATA_CHANNELS_LAST {
        return call.backward_data_channels_last(&args, (gy, w, dx));
    }
    let geometry: Geometry = if entry == ENTRY_BWD_DATA_IMPLICIT_GEMM {
        Conv2dConfig::backward_data_implicit_gemm_launch_config
    } else {
        Conv2dConfig::backward_data_launch_config
    };
    Ok(call.launch(entry, geometry, &args, &[])?.dims)
}

impl<B: Backend> Call<'_, B> {
    /// `conv2d_bwd_data_implicit_gemm_channels_last` after the copies of `w` and `gy`
    /// ([`backward_data_with`]); `args` are the checked buffers.
    fn backward_data_channels_last<T: Element>(
        &self,
        args: &[Buffer<'_, B, T>],
        (gy, w, dx): BackwardDataBuffers<'_, B, T>,
    ) -> Result<ConvDims, LaunchError> {
        let cfg = self.cfg;
        let prep = self.prepare(ENTRY_BWD_DATA_CHANNELS_LAST, args)?;
        let d = prep.dims;
        let filter_copy = self.filter_copy()?;
        let gradient_copy = LayoutCopy::gradient(cfg, &d)?;
        let gemm = cfg.backward_data_implicit_gemm_channels_last_launch_config(&d)?;
        let filter = filter_copy.map(|copy| self.copy(&copy, w)).transpose()?;
        let gradient = self.copy(&gradient_copy, gy)?;
        let buffers = vec![
            KernelArg::buffer(&gradient),
            KernelArg::buffer(filter.as_ref().unwrap_or(w)),
            KernelArg::buffer(dx),
        ];
        let entry = ENTRY_BWD_DATA_CHANNELS_LAST;
        prep.launch(self.dev, self.ptx, entry, gemm, buffers)?;
        Ok(d)
    }
}

/// Backward-filter: `dw[oc, ci, kh, kw] = Σ_{n, oh, ow} gy · x`, then (`conv2d_bwd_bias`, or
/// its split pair where the grid is small: [`backward_bias_sliced`] with [`Slices::Auto`],
/// when the config has a bias) `db[oc] = Σ_{n, oh, ow} gy`, each summed in a fixed order
/// (deterministic), with the fastest weight-gradient entry the module has: in NCHW the
/// channels-last copies of `x` and `gy` and `conv2d_bwd_filter_implicit_gemm_channels_last`
/// where the config has them ([`Conv2dConfig::has_channels_last_backward`]; `N` and `C_out`
/// at most 65535), the tensor-core `conv2d_bwd_filter_implicit_gemm` where the config has it
/// ([`Conv2dConfig::has_tensor_core_backward_filter`]), else (silently: f32 without
/// `allow_tf32`, f64 and pre-sm_80 targets) the CUDA-core `conv2d_bwd_filter`, in the
/// config's layout. `db` must be `Some` exactly when `cfg.bias`.
#[allow(clippy::too_many_arguments)]
pub fn backward_filter<B: Backend, T: Element>(
    cfg: &Conv2dConfig,
    dev: &B,
    ptx: &str,
    shape: &ConvShape,
    x: &DeviceBuffer<B, T>,
    gy: &DeviceBuffer<B, T>,
    dw: &mut DeviceBuffer<B, T>,
    db: Option<&mut DeviceBuffer<B, T>>,
) -> Result<ConvDims, LaunchError> {
    let entry = if cfg.has_channels_last_backward() && channels_last_fits(cfg, shape) {
        ENTRY_BWD_FILTER_CHANNELS_LAST
    } else if cfg.has_tensor_core_backward_filter() {
        ENTRY_BWD_FILTER_IMPLICIT_GEMM
    } else {
        ENTRY_BWD_FILTER
    };
    backward_filter_with(cfg, dev, ptx, shape, entry, x, gy, dw, db)
}

/// Backward-filter with a named weight-gradient entry: `conv2d_bwd_filter` (CUDA cores, every
/// config), `conv2d_bwd_filter_implicit_gemm` (tensor cores) or
/// `conv2d_bwd_filter_implicit_gemm_channels_last` (NCHW on tensor cores, after the
/// channels-last copies of `x` and `gy`: [`backward_filter_channels_last_sliced`]); an entry
/// the module lacks is [`LaunchError::InvalidDim`] `layout`, listing the entries it has; each
/// split by [`Slices::Auto`], then `conv2d_bwd_bias`
/// when the config has a bias. [`backward_filter`] picks the fastest automatically; this one
/// lets a caller compare them.
#[allow(clippy::too_many_arguments)]
pub fn backward_filter_with<B: Backend, T: Element>(
    cfg: &Conv2dConfig,
    dev: &B,
    ptx: &str,
    shape: &ConvShape,
    entry: &'static str,
    x: &DeviceBuffer<B, T>,
    gy: &DeviceBuffer<B, T>,
    dw: &mut DeviceBuffer<B, T>,
    db: Option<&mut DeviceBuffer<B, T>>,
) -> Result<ConvDims, LaunchError> {
    let reduction = if entry == ENTRY_BWD_FILTER_IMPLICIT_GEMM {
        Reduction::TENSOR_CORE
    } else if entry == ENTRY_BWD_FILTER_CHANNELS_LAST {
        Reduction::CHANNELS_LAST
    } else if entry == ENTRY_BWD_FILTER {
        Reduction::CUDA_CORE
    } else {
        // Not a weight-gradient entry: the module check names the entries it has.
        let call = Call {
            cfg,
            dev,
            ptx,
            shape,
        };
        call.prepare::<T>(entry, [])?;
        return Err(LaunchError::InvalidDim {
            name: "entry",
            value: 0,
            reason: format!("{entry} is not a backward-filter entry"),
        });
    };
    backward_filter_split(cfg, dev, ptx, shape, reduction, Slices::Auto, x, gy, dw, db)
}

/// How many slices of the pixels a backward-filter splits its reduction into (`Auto`:
/// [`Conv2dConfig::backward_filter_slices`]' rule for the shape, or
/// [`Conv2dConfig::backward_filter_cuda_core_slices`]' on CUDA cores).
pub use crate::templates::split::Slices;

/// Backward-filter on tensor cores with a chosen split of the reduction over the `N·OH·OW`
/// pixels ([`Slices`]; [`backward_filter`] and [`backward_filter_with`] use
/// [`Slices::Auto`]), then `conv2d_bwd_bias` when the config has a bias. One slice runs
/// `conv2d_bwd_filter_implicit_gemm` alone; `S > 1` allocates an f32 workspace of
/// `S·C_out·Cg·KH·KW` elements through the backend, runs `conv2d_bwd_filter_implicit_gemm_split`
/// (each slice's sums into its part of the workspace) and `conv2d_bwd_filter_reduce` (the
/// slices added in order, rounded once): the same bits every run. A config without the
/// tensor-core entries is [`LaunchError::InvalidDim`] `layout`; `S = 0`, `S·G` past the grid
/// limit or a workspace past the index limit is [`LaunchError::InvalidDim`].
#[allow(clippy::too_many_arguments)]
pub fn backward_filter_sliced<B: Backend, T: Element>(
    cfg: &Conv2dConfig,
    dev: &B,
    ptx: &str,
    shape: &ConvShape,
    slices: Slices,
    x: &DeviceBuffer<B, T>,
    gy: &DeviceBuffer<B, T>,
    dw: &mut DeviceBuffer<B, T>,
    db: Option<&mut DeviceBuffer<B, T>>,
) -> Result<ConvDims, LaunchError> {
    let reduction = Reduction::TENSOR_CORE;
    backward_filter_split(cfg, dev, ptx, shape, reduction, slices, x, gy, dw, db)
}

/// Backward-filter of an NCHW config on tensor cores through channels-last copies, with a
/// chosen split of the reduction over the `N·OH·OW` pixels ([`Slices`]; [`backward_filter`]
/// uses [`Slices::Auto`] where the config has these entries,
/// [`Conv2dConfig::has_channels_last_backward`]): `conv2d_to_channels_last` writes `x` as
/// `[N, H, W, C_in]` and `conv2d_gradient_to_channels_last` `gy` as `[N, OH, OW, C_out]` into
/// two workspaces the backend allocates, then one slice runs
/// `conv2d_bwd_filter_implicit_gemm_channels_last`, `S > 1` its split form and
/// `conv2d_bwd_filter_reduce` as [`backward_filter_sliced`] does, `dw` in NCHW; then
/// `conv2d_bwd_bias` (on the NCHW `gy`) when the config has a bias. A config without the
/// entries is [`LaunchError::InvalidDim`] `layout`; `S = 0`, `S·G` past the grid limit, `N` or
/// `C_out` past 65535 or a workspace past the index limit is [`LaunchError::InvalidDim`].
#[allow(clippy::too_many_arguments)]
pub fn backward_filter_channels_last_sliced<B: Backend, T: Element>(
    cfg: &Conv2dConfig,
    dev: &B,
    ptx: &str,
    shape: &ConvShape,
    slices: Slices,
    x: &DeviceBuffer<B, T>,
    gy: &DeviceBuffer<B, T>,
    dw: &mut DeviceBuffer<B, T>,
    db: Option<&mut DeviceBuffer<B, T>>,
) -> Result<ConvDims, LaunchError> {
    let reduction = Reduction::CHANNELS_LAST;
    backward_filter_split(cfg, dev, ptx, shape, reduction, slices, x, gy, dw, db)
}

/// Backward-filter on CUDA cores (`conv2d_bwd_filter`, every config) with a chosen split of
/// the reduction over the `N·OH·OW` pixels ([`Slices`]; [`backward_filter_with`] naming
/// `conv2d_bwd_filter` uses [`Slices::Auto`]), then `conv2d_bwd_bias` when the config has a
/// bias. One slice runs `conv2d_bwd_filter` alone; `S > 1` allocates a workspace of
/// `S·C_out·Cg·KH·KW` elements of the accumulation type (f32; f64 for f64), runs
/// `conv2d_bwd_filter_split` (each slice's sums, in pixel order, into its part) and
/// `conv2d_bwd_filter_reduce` (the slices added in order, rounded once): the same bits every
/// run for a given `S`. `S = 0`, `S·G` past the grid limit or a workspace past the index
/// limit is [`LaunchError::InvalidDim`].
#[allow(clippy::too_many_arguments)]
pub fn backward_filter_cuda_core_sliced<B: Backend, T: Element>(
    cfg: &Conv2dConfig,
    dev: &B,
    ptx: &str,
    shape: &ConvShape,
    slices: Slices,
    x: &DeviceBuffer<B, T>,
    gy: &DeviceBuffer<B, T>,
    dw: &mut DeviceBuffer<B, T>,
    db: Option<&mut DeviceBuffer<B, T>>,
) -> Result<ConvDims, LaunchError> {
    let reduction = Reduction::CUDA_CORE;
    backward_filter_split(cfg, dev, ptx, shape, reduction, slices, x, gy, dw, db)
}

/// One backward-filter's entries and its split's geometry.
struct Reduction {
    /// The whole reduction per block.
    whole: &'static str,
    whole_grid: fn(&Conv2dConfig) -> Result<LaunchConfig, LaunchError>,
    /// One slice per block, into the workspace.
    split: &'static str,
    split_grid: fn(&Conv2dConfig, u32) -> Result<LaunchConfig, LaunchError>,
    /// `Slices::Auto`'s rule.
    auto: fn(&Conv2dConfig, &ConvDims) -> u32,
    /// The entry's reduction tiles, `⌈N·OH·OW / K⌉`.
    tiles: fn(&Conv2dConfig, &ConvDims) -> u64,
    /// Whether both entries read channels-last copies of `x` and `gy`.
    channels_last: bool,
}

impl Reduction {
    const TENSOR_CORE: Self = Self {
        whole: ENTRY_BWD_FILTER_IMPLICIT_GEMM,
        whole_grid: Conv2dConfig::backward_filter_implicit_gemm_launch_config,
        split: ENTRY_BWD_FILTER_SPLIT,
        split_grid: Conv2dConfig::backward_filter_split_launch_config,
        auto: Conv2dConfig::backward_filter_slices,
        tiles: Conv2dConfig::backward_filter_tiles,
        channels_last: false,
    };

    /// The tensor-core pair over channels-last copies: the same split rule over its own
    /// tile's grid.
    const CHANNELS_LAST: Self = Self {
        whole: ENTRY_BWD_FILTER_CHANNELS_LAST,
        whole_grid: Conv2dConfig::backward_filter_implicit_gemm_channels_last_launch_config,
        split: ENTRY_BWD_FILTER_CHANNELS_LAST_SPLIT,
        split_grid: Conv2dConfig::backward_filter_channels_last_split_launch_config,
        auto: Conv2dConfig::backward_filter_channels_last_slices,
        channels_last: true,
        ..Self::TENSOR_CORE
    };

    const CUDA_CORE: Self = Self {
        whole: ENTRY_BWD_FILTER,
        whole_grid: Conv2dConfig::backward_filter_launch_config,
        split: ENTRY_BWD_FILTER_CUDA_SPLIT,
        split_grid: Conv2dConfig::backward_filter_cuda_core_split_launch_config,
        auto: Conv2dConfig::backward_filter_cuda_core_slices,
        tiles: Conv2dConfig::backward_filter_cuda_core_tiles,
        channels_last: false,
    };
}

/// [`backward_filter_sliced`] and [`backward_filter_cuda_core_sliced`]: `reduction`'s entries.
#[allow(clippy::too_many_arguments)]
fn backward_filter_split<B: Backend, T: Element>(
    cfg: &Conv2dConfig,
    dev: &B,
    ptx: &str,
    shape: &ConvShape,
    reduction: Reduction,
    slices: Slices,
    x: &DeviceBuffer<B, T>,
    gy: &DeviceBuffer<B, T>,
    dw: &mut DeviceBuffer<B, T>,
    db: Option<&mut DeviceBuffer<B, T>>,
) -> Result<ConvDims, LaunchError> {
    let call = Call {
        cfg,
        dev,
        ptx,
        shape,
    };
    let db = db.map(|db| &*db);
    let buffers = [
        Buffer::Tensor("x", Tensor::Input, x),
        Buffer::Tensor("gy", Tensor::Output, gy),
        Buffer::Tensor("dw", Tensor::Weight, dw),
        Buffer::Bias("db", db),
    ];
    let prep = call.prepare(reduction.whole, &buffers)?;
    let slices = match slices {
        Slices::Auto => (reduction.auto)(cfg, &prep.dims),
        Slices::Exactly(s) => s,
    };
    let workspace = workspace_len(slices, cfg.weight_elements())?;
    let grid = if slices == 1 {
        (reduction.whole_grid)(cfg)?
    } else {
        (reduction.split_grid)(cfg, slices)?
    };
    let reduce_grid = cfg.backward_filter_reduce_launch_config()?;
    // The GEMM's operands: `x` and `gy`, or their channels-last copies.
    let copies = if reduction.channels_last {
        let d = &prep.dims;
        let copies = [LayoutCopy::input(cfg, d)?, LayoutCopy::gradient(cfg, d)?];
        Some((call.copy(&copies[0], x)?, call.copy(&copies[1], gy)?))
    } else {
        None
    };
    let operands = copies.as_ref().map_or((x, gy), |(x, gy)| (x, gy));
    if slices == 1 {
        let args = vec![operands.0, operands.1, &*dw]
            .into_iter()
            .map(KernelArg::buffer)
            .collect();
        prep.launch(dev, ptx, reduction.whole, grid, args)?;
    } else {
        let tiles = (reduction.tiles)(cfg, &prep.dims);
        let split = SplitLaunch {
            prep: &prep,
            entry: reduction.split,
            grid,
            inputs: vec![operands.0, operands.1],
            slice_len: slice_tiles(tiles, slices),
            reduce: ENTRY_BWD_FILTER_REDUCE,
            reduce_grid,
            slices,
            workspace,
        };
        split.run(&call, dw)?;
    }
    backward_bias(&call, &prep, Slices::Auto, gy, db)?;
    Ok(prep.dims)
}

/// Elements of a split's workspace, `S·len` for `S` slices of `len` partial sums; `S = 0` or
/// a workspace past the index limit is [`LaunchError::InvalidDim`] `slices`.
fn workspace_len(slices: u32, len: u64) -> Result<usize, LaunchError> {
    let workspace = u64::from(slices) * len;
    if slices == 0 || workspace > INDEX_LIMIT {
        return Err(LaunchError::InvalidDim {
            name: "slices",
            value: u64::from(slices),
            reason: format!(
                "needs at least 1 slice and a workspace of at most {INDEX_LIMIT} elements \
                 ({workspace} asked)"
            ),
        });
    }
    Ok(workspace as usize)
}

/// One split reduction's two launches ([`backward_filter_split`], [`backward_bias`]): `entry`
/// on `grid` with `(inputs…, partials, dims…, slice_len)`, each slice's sums into its part of
/// a workspace of `workspace` elements of the accumulation type (f64 for f64, f32 otherwise),
/// then `reduce(partials, out, slices)` adding the `slices` parts in order.
struct SplitLaunch<'a, B: Backend, T: Element> {
    prep: &'a Prepared,
    entry: &'static str,
    grid: LaunchConfig,
    inputs: Vec<&'a DeviceBuffer<B, T>>,
    slice_len: u32,
    reduce: &'static str,
    reduce_grid: LaunchConfig,
    slices: u32,
    workspace: usize,
}

impl<B: Backend, T: Element> SplitLaunch<'_, B, T> {
    /// Both launches, the workspace allocated through the backend.
    fn run(&self, call: &Call<'_, B>, out: &DeviceBuffer<B, T>) -> Result<(), LaunchError> {
        if call.cfg.dtype == DType::F64 {
            self.run_with::<f64>(call, out)
        } else {
            self.run_with::<f32>(call, out)
        }
    }

    /// [`Self::run`] with partials of `P`.
    fn run_with<P: Element>(
        &self,
        call: &Call<'_, B>,
        out: &DeviceBuffer<B, T>,
    ) -> Result<(), LaunchError> {
        let (dev, ptx) = (call.dev, call.ptx);
        let partials = dev.alloc::<P>(self.workspace)?;
        let mut buffers: Vec<_> = self.inputs.iter().map(|&b| KernelArg::buffer(b)).collect();
        buffers.push(KernelArg::buffer(&partials));
        let mut args = self.prep.args(buffers);
        args.push(KernelArg::U32(self.slice_len));
        dev.launch(ptx, self.entry, self.grid, &args)?;
        let args = [
            KernelArg::buffer(&partials),
            KernelArg::buffer(out),
            KernelArg::U32(self.slices),
        ];
        dev.launch(ptx, self.reduce, self.reduce_grid, &args)
    }
}

/// The bias gradient alone: `db[c] = Σ_{n, oh, ow} gy[n, c, oh, ow]` (`gy` in the config's
/// layout), summed in a fixed order, with a chosen split of the `N·OH·OW` pixels ([`Slices`];
/// the backward-filter launches run it after `dw` with [`Slices::Auto`],
/// [`Conv2dConfig::backward_bias_slices`]). One slice runs `conv2d_bwd_bias` alone; `S > 1`
/// allocates a workspace of `S·C_out` elements of the accumulation type (f32; f64 for f64),
/// runs `conv2d_bwd_bias_split` (each slice's sums into its part) and `conv2d_bwd_bias_reduce`
/// (the slices added in order, rounded once): the same bits every run for a given `S`. A
/// config without a bias is [`LaunchError::BufferLength`] `db` (0 expected); `S = 0` or `S`
/// past the grid limit is [`LaunchError::InvalidDim`].
#[allow(clippy::too_many_arguments)]
pub fn backward_bias_sliced<B: Backend, T: Element>(
    cfg: &Conv2dConfig,
    dev: &B,
    ptx: &str,
    shape: &ConvShape,
    slices: Slices,
    gy: &DeviceBuffer<B, T>,
    db: &mut DeviceBuffer<B, T>,
) -> Result<ConvDims, LaunchError> {
    let call = Call {
        cfg,
        dev,
        ptx,
        shape,
    };
    check_bias(cfg, "db", Some(&*db))?;
    let buffers = [
        Buffer::Tensor("gy", Tensor::Output, gy),
        Buffer::Bias("db", Some(&*db)),
    ];
    let prep = call.prepare(ENTRY_BWD_BIAS, &buffers)?;
    backward_bias(&call, &prep, slices, gy, Some(db))?;
    Ok(prep.dims)
}

/// The bias gradient into `db` when given (the config has a bias), split into `slices`
/// ([`backward_bias_sliced`]).
fn backward_bias<B: Backend, T: Element>(
    call: &Call<'_, B>,
    prep: &Prepared,
    slices: Slices,
    gy: &DeviceBuffer<B, T>,
    db: Option<&DeviceBuffer<B, T>>,
) -> Result<(), LaunchError> {
    let Some(db) = db else {
        return Ok(());
    };
    let cfg = call.cfg;
    let slices = match slices {
        Slices::Auto => cfg.backward_bias_slices(&prep.dims),
        Slices::Exactly(s) => s,
    };
    let workspace = workspace_len(slices, u64::from(cfg.out_channels))?;
    if slices == 1 {
        let args = vec![KernelArg::buffer(gy), KernelArg::buffer(db)];
        let bias = cfg.backward_bias_launch_config();
        return prep.launch(call.dev, call.ptx, ENTRY_BWD_BIAS, bias, args);
    }
    let rounds = cfg.backward_bias_rounds(&prep.dims);
    let split = SplitLaunch {
        prep,
        entry: ENTRY_BWD_BIAS_SPLIT,
        grid: cfg.backward_bias_split_launch_config(slices)?,
        inputs: vec![gy],
        slice_len: slice_tiles(rounds, slices) * bias_block_pixels(cfg.layout),
        reduce: ENTRY_BWD_BIAS_REDUCE,
        reduce_grid: cfg.backward_bias_reduce_launch_config()?,
        slices,
        workspace,
    };
    split.run(call, db)
}
