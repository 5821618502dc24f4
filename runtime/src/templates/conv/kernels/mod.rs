//! The conv2d kernels, built with the typed builder into one module per configuration.
//!
//! Entries (all prefixed `conv2d_`; every one honours groups, stride, padding and dilation):
//!
//! | entry | computes | block | grid |
//! |---|---|---|---|
//! | `im2col` | `cols` from `x` | 256 | `(⌈N·OH·OW/256⌉, min(C_in·KH·KW, 65535))` |
//! | `gemm` | `y = W_g · cols_g (+ b)` | (16, 16) | `(⌈N·OH·OW/64⌉, ⌈Og/block_m⌉, G)` |
//! | `1x1` (1×1 kernels only) | `y` from `x` (implicit GEMM) | (16, 16) | as `gemm` |
//! | `implicit_gemm` (f16/bf16, sm_80+) | `y` from `x` on tensor cores, NCHW or NHWC | 128 | `(⌈N·OH·OW/64⌉, ⌈Og/64⌉, G)` |
//! | `implicit_gemm_pointwise` (NCHW f16/bf16, sm_80+, 1 × 1 at stride 1 without padding, `Cg` a multiple of 8) | `y` from `x` on tensor cores, `x` in 16-byte `cp.async` chunks of 8 pixels (`OH·OW` a multiple of 8) | 128 | as `implicit_gemm` |
//! | `to_channels_last` (with the next two) | NCHW `x` → NHWC, 8 × 8 blocks per thread through registers | 128 | `(⌈H·W/Pb⌉, ⌈C_in/Cb⌉, N)`, `Pb × Cb` from `C_in` (`ChannelsLastTiling`) |
//! | `filter_to_channels_last` (filters of more than one tap) | `w` → `[C_out, KH, KW, Cg]` | 256 | `(C_out, ⌈Cg/32⌉)` |
//! | `implicit_gemm_channels_last` (NCHW f16/bf16, sm_80+, `Cg` and `C_in` multiples of 8) | NCHW `y` from the channels-last copies on tensor cores (16-byte `cp.async` A chunks) | 128 | as `implicit_gemm` |
//! | `nhwc` (NHWC only) | `y` from `x` on CUDA cores (tiled implicit GEMM, 16-byte loads and stores) | 128 | `(⌈N·OH·OW/64⌉, ⌈Og/64⌉, G)` |
//! | `direct` | `y` from `x` via shared tiles | (16, 16) | `(⌈OW/32⌉, min(N·⌈OH/32⌉·G·⌈Og/OCB⌉, 65535))`, blocks walking the rest |
//! | `bwd_data` | `dx` from `gy`: NCHW the `direct` tiling of the flipped problem (shared `gy` window and taps; one stride phase of `dx` per block at strides above 1); NHWC the `nhwc` tiling | (16, 16); NHWC 128 | as `direct` with `G·⌈Cg/CB⌉·SH·SW` and `⌈H/SH⌉ × ⌈W/SW⌉` tiles; NHWC `(⌈H·W/64⌉, ⌈Cg/64⌉, N·G)` |
//! | `bwd_data_implicit_gemm` (f16/bf16, sm_80+) | `dx` from `gy` on tensor cores | 128 | `(⌈H·W/64⌉, ⌈Cg/64⌉, N·G)` |
//! | `bwd_filter` | `dw` from `x`, `gy` on CUDA cores (tiled GEMM per group, NCHW or NHWC) | 128 | `(⌈Og/64⌉, ⌈Cg·KH·KW/64⌉, G)` |
//! | `bwd_filter_split` | partials of `dw` (accumulation type) over `S` pixel slices, on CUDA cores | 128 | `(⌈Og/64⌉, ⌈Cg·KH·KW/64⌉, S·G)` |
//! | `bwd_filter_implicit_gemm` (f16/bf16, sm_80+) | `dw` from `x`, `gy` on tensor cores | 128 | `(⌈Og/64⌉, ⌈Cg·KH·KW/64⌉, G)` |
//! | `bwd_filter_implicit_gemm_split` (with the above) | f32 partials of `dw` over `S` pixel slices | 128 | `(⌈Og/64⌉, ⌈Cg·KH·KW/64⌉, S·G)` |
//! | `bwd_filter_reduce` | `dw` = the partials summed in slice order (f32 partials; f64 for f64) | 256 | `⌈C_out·Cg·KH·KW/256⌉` |
//! | `gradient_to_channels_last` (NCHW f16/bf16, sm_80+, `Cg`, `C_in`, `Og`, `C_out` multiples of 8; with the next three, and for 1 × 1 filters the two copies above) | NCHW `gy` → NHWC, as `to_channels_last` | 128 | `(⌈OH·OW/Pb⌉, ⌈C_out/Cb⌉, N)` |
//! | `bwd_data_implicit_gemm_channels_last` | NCHW `dx` from the channels-last `gy` and `w` copies on tensor cores (16-byte `cp.async` chunks of both operands) | 128 | as `bwd_data_implicit_gemm` |
//! | `bwd_filter_implicit_gemm_channels_last` | NCHW `dw` from the channels-last `x` and `gy` copies on tensor cores (both operands staged by pixel in 16-byte `cp.async` chunks) | 128 | as `bwd_filter_implicit_gemm` |
//! | `bwd_filter_implicit_gemm_channels_last_split` (with `bwd_filter_reduce`) | its f32 partials over `S` pixel slices, in the NCHW weight's order | 128 | as `bwd_filter_implicit_gemm_split` |
//! | `bwd_bias` (with bias) | `db` from `gy` (NCHW or NHWC), channel tiles of 1 (NCHW) or 32 (NHWC) | 256 | `⌈C_out / tile⌉` |
//! | `bwd_bias_split` (with bias) | partials of `db` (accumulation type) over `S` pixel slices | 256 | `(⌈C_out / tile⌉, S)` |
//! | `bwd_bias_reduce` (with bias) | `db` = the partials summed in slice order | 256 | `⌈C_out/256⌉` |
//!
//! The NHWC module's forward entries are `implicit_gemm` (where available) and `nhwc`; its
//! backward entries have NCHW's names (the tensor-core ones where available; its CUDA-core
//! `bwd_data` is the tiled GEMM of `nhwc`, its `bwd_filter` and `bwd_bias` NCHW's kernels),
//! indexing
//! `x`/`dx [N, H, W, C_in]`, `gy [N, OH, OW, C_out]` and `w`/`dw [C_out, KH, KW, Cg]`. Every
//! entry takes its buffers, then `batch, height, width, out_height, out_width` (u32).
//! f16/bf16 are computed in f32, f64 in f64; nothing writes its inputs; no float atomics.

mod backward_data;
mod backward_filter;
mod channels_last;
mod common;
mod direct;
mod gemm;
mod im2col;
mod implicit_gemm;
mod nhwc;
mod vector;

pub use backward_data::ENTRY as ENTRY_BWD_DATA;
pub use backward_filter::{
    bias_block_channels, bias_block_pixels, BIAS_THREADS as BWD_BIAS_THREADS,
    ENTRY_BIAS as ENTRY_BWD_BIAS, ENTRY_BIAS_REDUCE as ENTRY_BWD_BIAS_REDUCE,
    ENTRY_BIAS_SPLIT as ENTRY_BWD_BIAS_SPLIT, ENTRY_FILTER as ENTRY_BWD_FILTER,
    ENTRY_SPLIT as ENTRY_BWD_FILTER_CUDA_SPLIT,
};
pub use channels_last::{
    InputTiling as ChannelsLastTiling, ENTRY as ENTRY_TO_CHANNELS_LAST,
    ENTRY_FILTER as ENTRY_FILTER_TO_CHANNELS_LAST,
    ENTRY_GRADIENT as ENTRY_GRADIENT_TO_CHANNELS_LAST,
    FILTER_THREADS as FILTER_TO_CHANNELS_LAST_THREADS, INPUT_THREADS as CHANNELS_LAST_THREADS,
    TILE as CHANNELS_LAST_TILE,
};
pub use common::{fast_div_constants, DIM_PARAMS, DIVISOR_PARAMS};
pub use direct::ENTRY as ENTRY_DIRECT;
pub use gemm::{ENTRY_1X1, ENTRY_GEMM};
pub use im2col::ENTRY as ENTRY_IM2COL;
pub use implicit_gemm::{
    ENTRY as ENTRY_IMPLICIT_GEMM, ENTRY_BWD_DATA as ENTRY_BWD_DATA_IMPLICIT_GEMM,
    ENTRY_BWD_DATA_CHANNELS_LAST, ENTRY_BWD_FILTER as ENTRY_BWD_FILTER_IMPLICIT_GEMM,
    ENTRY_BWD_FILTER_CHANNELS_LAST, ENTRY_CHANNELS_LAST as ENTRY_IMPLICIT_GEMM_CHANNELS_LAST,
    ENTRY_POINTWISE as ENTRY_IMPLICIT_GEMM_POINTWISE, ENTRY_REDUCE as ENTRY_BWD_FILTER_REDUCE,
    ENTRY_SPLIT as ENTRY_BWD_FILTER_SPLIT,
    ENTRY_SPLIT_CHANNELS_LAST as ENTRY_BWD_FILTER_CHANNELS_LAST_SPLIT,
    REDUCE_THREADS as BWD_FILTER_REDUCE_THREADS,
};
pub use nhwc::{
    ENTRY as ENTRY_NHWC, THREADS as NHWC_THREADS, TILE_M as NHWC_TILE_M, TILE_N as NHWC_TILE_N,
};

/// The fewest GEMM columns per group (forward: `C_out/groups`, backward-data:
/// `C_in/groups`) at which the NCHW tensor-core GEMMs over element gathers beat the CUDA-core
/// entries ([`Conv2dConfig::prefers_tensor_core_forward`],
/// [`Conv2dConfig::prefers_tensor_core_backward_data`]): below, most of each 64-column tile
/// is padding.
pub const MIN_GATHER_GEMM_COLUMNS: (u32, u32) = (24, 32);

/// Threads per block of the 1-D entries (im2col).
pub const BLOCK_1D: u32 = 256;

use gemm::Operand;
use implicit_gemm::Pass;

use crate::arch::Arch;
use crate::builder::{ModuleBuilder, BF16, F16, F32, F64};
use crate::dtype::DType;
use crate::templates::conv::{Conv2dConfig, Layout};
use crate::templates::warp_mma::Geometry;
use crate::templates::{CompiledFamily, KernelFamily, TemplateError};

impl Conv2dConfig {
    /// Whether the module has the `conv2d_1x1` entry (a 1 × 1 kernel).
    pub const fn has_pointwise(&self) -> bool {
        self.kernel_h == 1 && self.kernel_w == 1
    }

    /// Whether the module has the tensor-core forward `conv2d_implicit_gemm` (f16/bf16, or f32
    /// with `allow_tf32` on tf32 `mma.m16n8k8`, on targets with `mma.m16n8k16`; other dtypes
    /// and older targets silently keep the CUDA-core entries only).
    pub fn has_tensor_core_forward(&self) -> bool {
        implicit_gemm::available(self)
    }

    /// Whether [`forward`](super::launch::forward) takes the tensor-core
    /// `conv2d_implicit_gemm` where no chunked route applies: the module has it and, in NCHW,
    /// the GEMM's columns (`C_out/groups`) fill at least [`MIN_GATHER_GEMM_COLUMNS`]`.0` of
    /// the tile's 64 (else `conv2d_direct` or `conv2d_1x1`). A depthwise 3 × 3 on 28 × 28
    /// (f16, sm_80) issued 1978.6 instructions per output on the tensor-core GEMM against
    /// 147.3 on `conv2d_direct`; 8, 16 and 24 columns: 3.1×, 1.3–1.5× and 0.64× the direct
    /// kernel's. NHWC keeps the GEMM: `conv2d_nhwc` tiles the same 64 columns.
    pub fn prefers_tensor_core_forward(&self) -> bool {
        let fills = self.out_per_group() >= MIN_GATHER_GEMM_COLUMNS.0;
        self.has_tensor_core_forward() && (self.layout == Layout::Nhwc || fills)
    }

    /// Whether [`backward_data`](super::launch::backward_data) takes the tensor-core
    /// `conv2d_bwd_data_implicit_gemm` where the channels-last route does not apply: the
    /// module has it and, in NCHW, its columns (`C_in/groups`) number at least
    /// [`MIN_GATHER_GEMM_COLUMNS`]`.1` (else `conv2d_bwd_data`: 8 and 16 columns issued 3.3×
    /// and 2.0–2.2× its instructions per output, 32 the same).
    pub fn prefers_tensor_core_backward_data(&self) -> bool {
        let fills = self.in_per_group() >= MIN_GATHER_GEMM_COLUMNS.1;
        self.has_tensor_core_backward_data() && (self.layout == Layout::Nhwc || fills)
    }

    /// Whether the NCHW module has the tensor-core 1 × 1 forward
    /// `conv2d_implicit_gemm_pointwise`, which reads `x` in 16-byte `cp.async` chunks of 8
    /// pixels of one channel without a copy: f16/bf16 on targets with `mma.m16n8k16`, a 1 × 1
    /// filter at stride 1 without padding, `C_in/groups` a multiple of 8. A launch needs
    /// `OH·OW` a multiple of 8.
    pub fn has_pointwise_implicit_gemm(&self) -> bool {
        implicit_gemm::pointwise_available(self)
    }

    /// Whether the NCHW module has the channels-last tensor-core forward
    /// (`conv2d_to_channels_last`, `conv2d_filter_to_channels_last` for filters of more than
    /// one tap, and `conv2d_implicit_gemm_channels_last`: f16/bf16 on targets with
    /// `mma.m16n8k16`, `C_in` and `C_in/groups` multiples of 8, a 1 × 1 filter only at
    /// stride 1).
    pub fn has_channels_last_forward(&self) -> bool {
        implicit_gemm::channels_last_available(self)
    }

    /// Whether the NCHW module has the channels-last tensor-core backward passes
    /// (`conv2d_gradient_to_channels_last`, `conv2d_bwd_data_implicit_gemm_channels_last`,
    /// `conv2d_bwd_filter_implicit_gemm_channels_last` and its split, beside the forward's
    /// copies of `x` and `w`, or with its own copy of `x` for a 1 × 1 at a stride above 1):
    /// f16/bf16 on targets with `mma.m16n8k16`, `C_in`, `C_out` and both per-group counts
    /// multiples of 8.
    pub fn has_channels_last_backward(&self) -> bool {
        implicit_gemm::channels_last_backward_available(self)
    }

    /// The block tile `[rows, columns]` of the GEMM that tensor-core entry `entry` computes
    /// (`None` for any other entry): its grid is `(⌈M / rows⌉, ⌈N / columns⌉, …)` blocks of
    /// [`Self::implicit_gemm_threads`]. `[128, 64]` where the GEMM moves both operands in
    /// 16-byte `cp.async` chunks (halves: NHWC with the channel counts multiples of 8, and
    /// the `…_channels_last` entries), else `[64, 64]` (tf32, element gathers).
    pub fn implicit_gemm_tile(&self, entry: &str) -> Option<[u32; 2]> {
        let g = self.implicit_gemm_geometry(entry)?;
        Some([g.block_m(), g.block_n()])
    }

    /// Threads per block of tensor-core entry `entry` (128 for every tile).
    pub fn implicit_gemm_threads(&self, entry: &str) -> Option<u32> {
        Some(self.implicit_gemm_geometry(entry)?.threads())
    }

    /// The dynamic shared memory a launch of tensor-core entry `entry` passes: its rings'
    /// bytes where they exceed the target's static limit (the 128 × 128 tile's 60 KiB),
    /// else 0.
    pub(crate) fn implicit_gemm_dynamic_shared_bytes(&self, entry: &str) -> Option<u32> {
        let g = self.implicit_gemm_geometry(entry)?;
        Some(implicit_gemm::dynamic_shared_bytes(g, self.arch))
    }

    /// The [`implicit_gemm`] entry's block tile.
    pub(crate) fn implicit_gemm_geometry(&self, entry: &str) -> Option<Geometry> {
        use implicit_gemm::{channels_last_tile_geometry as channels_last, tile_geometry};
        let g = match entry {
            ENTRY_IMPLICIT_GEMM => tile_geometry(self, Pass::Forward),
            ENTRY_BWD_DATA_IMPLICIT_GEMM => tile_geometry(self, Pass::BackwardData),
            ENTRY_IMPLICIT_GEMM_CHANNELS_LAST => channels_last(self, Pass::Forward),
            ENTRY_IMPLICIT_GEMM_POINTWISE if self.has_pointwise_implicit_gemm() => {
                implicit_gemm::pointwise_tile_geometry(self)
            }
            ENTRY_BWD_DATA_CHANNELS_LAST => channels_last(self, Pass::BackwardData),
            ENTRY_BWD_FILTER_IMPLICIT_GEMM | ENTRY_BWD_FILTER_SPLIT => {
                tile_geometry(self, Pass::BackwardFilter)
            }
            ENTRY_BWD_FILTER_CHANNELS_LAST | ENTRY_BWD_FILTER_CHANNELS_LAST_SPLIT => {
                channels_last(self, Pass::BackwardFilter)
            }
            _ => return None,
        };
        Some(g)
    }

    /// Whether the module has the tensor-core backward-data `conv2d_bwd_data_implicit_gemm`
    /// (f16/bf16, or f32 with `allow_tf32`, on targets with `mma.m16n8k16`, either layout;
    /// otherwise silently only the CUDA-core `conv2d_bwd_data`).
    pub fn has_tensor_core_backward_data(&self) -> bool {
        implicit_gemm::available(self)
    }

    /// Whether the module has the tensor-core backward-filter
    /// `conv2d_bwd_filter_implicit_gemm`, with its split pair `conv2d_bwd_filter_implicit_gemm_split`
    /// and `conv2d_bwd_filter_reduce` (f16/bf16, or f32 with `allow_tf32`, on targets with
    /// `mma.m16n8k16`, either layout; otherwise silently only the CUDA-core
    /// `conv2d_bwd_filter`).
    pub fn has_tensor_core_backward_filter(&self) -> bool {
        implicit_gemm::available(self)
    }

    /// The entries of this configuration's module, in module order: the forward entries (NHWC:
    /// the tensor-core implicit GEMM where available and the CUDA-core `conv2d_nhwc`; NCHW:
    /// im2col + GEMM, the implicit GEMM, 1×1, direct), then the backward entries of both
    /// layouts.
    pub fn entry_names(&self) -> Vec<&'static str> {
        let mut names = Vec::new();
        if self.layout == Layout::Nchw {
            names.extend([ENTRY_IM2COL, ENTRY_GEMM]);
        }
        if self.has_tensor_core_forward() {
            names.push(ENTRY_IMPLICIT_GEMM);
        }
        if self.has_pointwise_implicit_gemm() {
            names.push(ENTRY_IMPLICIT_GEMM_POINTWISE);
        }
        if self.has_channels_last_forward() {
            names.push(ENTRY_TO_CHANNELS_LAST);
            // A filter of one tap is channels-last already.
            if !self.has_pointwise() {
                names.push(ENTRY_FILTER_TO_CHANNELS_LAST);
            }
            names.push(ENTRY_IMPLICIT_GEMM_CHANNELS_LAST);
        }
        match self.layout {
            Layout::Nhwc => names.push(ENTRY_NHWC),
            Layout::Nchw if self.has_pointwise() => names.extend([ENTRY_1X1, ENTRY_DIRECT]),
            Layout::Nchw => names.push(ENTRY_DIRECT),
        }
        names.push(ENTRY_BWD_DATA);
        if self.has_tensor_core_backward_data() {
            names.push(ENTRY_BWD_DATA_IMPLICIT_GEMM);
        }
        names.extend([ENTRY_BWD_FILTER, ENTRY_BWD_FILTER_CUDA_SPLIT]);
        if self.has_tensor_core_backward_filter() {
            names.extend([
                ENTRY_BWD_FILTER_IMPLICIT_GEMM,
                ENTRY_BWD_FILTER_SPLIT,
                ENTRY_BWD_FILTER_REDUCE,
            ]);
        } else {
            names.push(ENTRY_BWD_FILTER_REDUCE);
        }
        if self.has_channels_last_backward() {
            if !self.has_channels_last_forward() {
                names.push(ENTRY_TO_CHANNELS_LAST);
            }
            names.extend([
                ENTRY_GRADIENT_TO_CHANNELS_LAST,
                ENTRY_BWD_DATA_CHANNELS_LAST,
                ENTRY_BWD_FILTER_CHANNELS_LAST,
                ENTRY_BWD_FILTER_CHANNELS_LAST_SPLIT,
            ]);
        }
        if self.bias {
            names.extend([ENTRY_BWD_BIAS, ENTRY_BWD_BIAS_SPLIT, ENTRY_BWD_BIAS_REDUCE]);
        }
        names
    }
}

fn build_module<T: backward_filter::FilterElem>(cfg: &Conv2dConfig, arch: Arch) -> ModuleBuilder {
    let mut m = ModuleBuilder::new(arch);
    let nchw = cfg.layout == Layout::Nchw;
    if nchw {
        m.push(im2col::build::<T>(cfg, arch));
        m.push(gemm::build::<T>(cfg, arch, Operand::Im2col));
    }
    if let Some(tc) = T::implicit_gemm(cfg, arch, Pass::Forward) {
        m.push(tc);
    }
    if let Some(pointwise) = T::pointwise(cfg, arch) {
        m.push(pointwise);
    }
    for entry in T::channels_last(cfg, arch).into_iter().flatten() {
        m.push(entry);
    }
    if !nchw {
        m.push(nhwc::build::<T>(cfg, arch));
    } else {
        if cfg.has_pointwise() {
            m.push(gemm::build::<T>(cfg, arch, Operand::Pointwise));
        }
        m.push(direct::build::<T>(cfg, arch));
    }
    m.push(if nchw {
        backward_data::build::<T>(cfg, arch)
    } else {
        nhwc::build_backward_data::<T>(cfg, arch)
    });
    if let Some(tc) = T::implicit_gemm(cfg, arch, Pass::BackwardData) {
        m.push(tc);
    }
    m.push(backward_filter::build_filter::<T>(cfg, arch));
    // The CUDA-core split, and its reduce where the tensor-core pair below does not bring it.
    let (split, reduce) = backward_filter::build_split::<T>(cfg, arch);
    m.push(split);
    if let Some(tc) = T::implicit_gemm(cfg, arch, Pass::BackwardFilter) {
        m.push(tc);
    }
    for split in T::split_filter(cfg, arch).into_iter().flatten() {
        m.push(split);
    }
    for entry in T::channels_last_backward(cfg, arch).into_iter().flatten() {
        m.push(entry);
    }
    if let Some(reduce) = reduce {
        m.push(reduce);
    }
    if cfg.bias {
        for bias in backward_filter::build_bias::<T>(cfg, arch) {
            m.push(bias);
        }
    }
    m
}

impl KernelFamily for Conv2dConfig {
    const FAMILY: &'static str = "conv2d";

    fn compile(&self) -> Result<CompiledFamily, TemplateError> {
        self.validate()?;
        let m = match self.dtype {
            DType::F16 => build_module::<F16>(self, self.arch),
            DType::BF16 => build_module::<BF16>(self, self.arch),
            DType::F32 => build_module::<F32>(self, self.arch),
            DType::F64 => build_module::<F64>(self, self.arch),
        };
        Ok(CompiledFamily::from_module(&m.build()?))
    }

    /// `k{KH}x{KW}_s{SH}x{SW}_p{PH}x{PW}_d{DH}x{DW}_c{C_in}x{C_out}_g{G}[_bias][_nhwc]_{dtype}`.
    fn matrix_name(&self) -> String {
        format!(
            "k{}x{}_s{}x{}_p{}x{}_d{}x{}_c{}x{}_g{}{}{}_{}",
            self.kernel_h,
            self.kernel_w,
            self.stride_h,
            self.stride_w,
            self.padding_h,
            self.padding_w,
            self.dilation_h,
            self.dilation_w,
            self.in_channels,
            self.out_channels,
            self.groups,
            if self.bias { "_bias" } else { "" },
            if self.layout == Layout::Nhwc {
                "_nhwc"
            } else {
                ""
            },
            self.dtype
        ) + if self.allow_tf32 { "_tf32" } else { "" }
    }

    fn arch(&self) -> Arch {
        self.arch
    }
}

/// The emit-matrix configurations: every dtype × six representative NCHW shapes (ResNet 3×3
/// 128 → 128 with bias: for halves the channels-last entries on every tile shape but the
/// 64 × 64 one; the 7×7 stride-2 stem, a strided grouped 1×1 with bias, ResNet's
/// bottleneck 1×1s 64 → 256 with bias and 256 → 64: for halves the pointwise GEMM on its
/// 128 × 128 and 128 × 64 tiles; a dilated depthwise 3×3) and four NHWC ones (ResNet 3×3 128 → 128 and 64 → 64 with bias: 16-byte forward A
/// and backward-data `gy` chunks, on 128 × 128, 64 × 128 and 128 × 64 tiles and on 128 × 64
/// and 64 × 64 ones; the stem: element-wise forward A, `gy` chunks; the dilated depthwise
/// 3×3: element-wise everywhere) ×
/// every target (every dtype is supported on every arch; f16/bf16 on sm_80+ add the
/// tensor-core entry), plus f32 with `allow_tf32` for every shape on every target (tf32
/// tensor-core entries on sm_80+, the CUDA-core module before).
pub fn matrix_configs() -> Vec<Conv2dConfig> {
    let shapes = [
        Conv2dConfig::new(128, 128, 3)
            .with_padding(1, 1)
            .with_bias(true),
        Conv2dConfig::new(3, 64, 7)
            .with_stride(2, 2)
            .with_padding(3, 3),
        Conv2dConfig::new(64, 128, 1)
            .with_stride(2, 2)
            .with_groups(4)
            .with_bias(true),
        Conv2dConfig::new(64, 256, 1).with_bias(true),
        Conv2dConfig::new(256, 64, 1),
        Conv2dConfig::new(32, 32, 3)
            .with_groups(32)
            .with_padding(2, 2)
            .with_dilation(2, 2),
        Conv2dConfig::new(128, 128, 3)
            .with_padding(1, 1)
            .with_bias(true)
            .with_layout(Layout::Nhwc),
        Conv2dConfig::new(64, 64, 3)
            .with_padding(1, 1)
            .with_bias(true)
            .with_layout(Layout::Nhwc),
        Conv2dConfig::new(3, 64, 7)
            .with_stride(2, 2)
            .with_padding(3, 3)
            .with_layout(Layout::Nhwc),
        Conv2dConfig::new(32, 32, 3)
            .with_groups(32)
            .with_padding(2, 2)
            .with_dilation(2, 2)
            .with_layout(Layout::Nhwc),
    ];
    let mut out = Vec::new();
    for arch in Arch::ALL {
        for dtype in DType::ALL {
            for shape in shapes {
                out.push(Conv2dConfig {
                    dtype,
                    arch,
                    ..shape
                });
            }
        }
        for shape in shapes {
            out.push(Conv2dConfig {
                dtype: DType::F32,
                arch,
                ..shape.with_allow_tf32(true)
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_matrix_config_compiles() {
        for cfg in matrix_configs() {
            let compiled = cfg
                .compile()
                .unwrap_or_else(|e| panic!("{}: {e}", cfg.matrix_name()));
            let names: Vec<&str> = compiled.entries.iter().map(|e| e.name.as_str()).collect();
            assert_eq!(names, cfg.entry_names());
        }
    }

    #[test]
    fn compilation_is_deterministic() {
        let cfg = matrix_configs()[0];
        assert_eq!(cfg.compile().unwrap().ptx, cfg.compile().unwrap().ptx);
    }

    #[test]
    fn unusual_windows_compile() {
        // Large kernels take the looped window path; rectangular kernels, strides, dilations.
        for cfg in [
            Conv2dConfig::new(2, 4, 9).with_dilation(1, 2),
            Conv2dConfig::new(2, 2, 1).with_kernel(1, 80),
            Conv2dConfig::new(4, 6, 2)
                .with_kernel(2, 5)
                .with_stride(3, 2)
                .with_groups(2),
        ] {
            for dtype in DType::ALL {
                Conv2dConfig { dtype, ..cfg }
                    .compile()
                    .unwrap_or_else(|e| panic!("{cfg:?}: {e}"));
            }
        }
    }
}
