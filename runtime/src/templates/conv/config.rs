//! The 2-D convolution configuration (`#[conv2d_kernel(..)]` arguments) and its validation.
//!
//! Argument names vs fields: the macro takes `kernel`, `stride`, `padding` and `dilation` either
//! as one value (`kernel = 3`, both axes) or a pair (`kernel = (3, 5)`, height then width) and
//! fills the `_h`/`_w` fields. Errors are therefore tagged with the *argument* names (`"kernel"`,
//! not `"kernel_h"`), so the macro can point at the token; [`Conv2dConfig::argument_of`] maps a
//! field name to its argument.
//!
//! Index width: the kernels compute element indices in `u32` (byte addresses in `u64`) and keep
//! them below 2^31 ([`INDEX_BOUND`]); the weight is checked here, the run-time tensors and
//! padded positions by [`Conv2dConfig::check_index_range`] at launch.

use super::phases::PhaseAxis;
use crate::arch::Arch;
use crate::dtype::DType;
use crate::lint::address::IndexBound;
use crate::templates::attention::SharedMemoryKind;
use crate::templates::ConfigErrors;

/// The bound every conv entry declares for the 32-bit address lint ([`crate::lint::address`]):
/// each element index or padded position it computes in `u32` and widens into an address is at
/// most `i32::MAX` (below 2^31, leaving room for the last partial block and loop increments).
/// [`Conv2dConfig::validate`] proves it for the weight, [`Conv2dConfig::check_index_range`] for
/// the run-time tensors and positions, both by comparing against this `limit`, and
/// `launch::backward_filter_sliced` for the split backward-filter's `S·|dw|` f32 partials.
pub const INDEX_BOUND: IndexBound = IndexBound {
    limit: i32::MAX as u64,
    proof: "Conv2dConfig::validate (weight), Conv2dConfig::check_index_range (tensors, \
            positions) and launch::backward_filter_sliced (split partials)",
};

/// Configuration of one 2-D convolution (NCHW or NHWC, [`Layout`]): `#[conv2d_kernel(in_channels = 64, out_channels =
/// 128, kernel = 3, padding = 1, groups = 1, bias = true, dtype = f16, arch = sm_80)]`.
///
/// Weight layout `[out_channels, in_channels / groups, kernel_h, kernel_w]`, bias
/// `[out_channels]`; output channel `oc` belongs to group `oc / (out_channels / groups)` and
/// reads input channels `g · in_channels/groups ..` of that group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Conv2dConfig {
    /// Input channels, ≥ 1, a multiple of `groups`. Required.
    pub in_channels: u32,
    /// Output channels, ≥ 1, a multiple of `groups`. Required.
    pub out_channels: u32,
    /// Kernel height, ≥ 1 (argument `kernel`). Required.
    pub kernel_h: u32,
    /// Kernel width, ≥ 1 (argument `kernel`). Required.
    pub kernel_w: u32,
    /// Vertical stride, ≥ 1 (argument `stride`). Default 1.
    pub stride_h: u32,
    /// Horizontal stride, ≥ 1 (argument `stride`). Default 1.
    pub stride_w: u32,
    /// Zero padding on the top and bottom (argument `padding`). Default 0.
    pub padding_h: u32,
    /// Zero padding on the left and right (argument `padding`). Default 0.
    pub padding_w: u32,
    /// Vertical dilation, ≥ 1 (argument `dilation`). Default 1.
    pub dilation_h: u32,
    /// Horizontal dilation, ≥ 1 (argument `dilation`). Default 1.
    pub dilation_w: u32,
    /// Channel groups: 1, `in_channels` (depthwise when `out_channels` is a multiple) or any
    /// common divisor of both channel counts. Default 1.
    pub groups: u32,
    /// Whether a bias `[out_channels]` is added. Default false.
    pub bias: bool,
    /// Element type: f16, bf16, f32, f64 on every arch. Default f32.
    pub dtype: DType,
    /// Target architecture. Default sm_80.
    pub arch: Arch,
    /// Activation layout (argument `layout = nchw | nhwc`). Default NCHW.
    pub layout: Layout,
    /// Run the f32 implicit GEMMs (forward, backward-data, backward-filter) on tf32 tensor
    /// cores (`mma.m16n8k8`, operands rounded to 10 fraction bits; see
    /// [`crate::templates::tf32`] for the rule and tolerance). Default false. Only with
    /// `dtype = f32` (any other dtype with `allow_tf32 = true` is a configuration error);
    /// targets without tf32 tensor cores (pre-sm_80) silently keep the CUDA-core entries.
    pub allow_tf32: bool,
}

/// How activations (and the weight's reduction axis) are laid out in memory.
///
/// - [`Layout::Nchw`]: `x [N, C_in, H, W]`, `y [N, C_out, OH, OW]`, `w [C_out, C_in/g, KH, KW]`.
///   Every entry of the family supports it.
/// - [`Layout::Nhwc`] (PyTorch's `channels_last`): `x [N, H, W, C_in]`, `y [N, OH, OW, C_out]`,
///   `w [C_out, KH, KW, C_in/g]` (the memory order of a `channels_last` weight). Channels are
///   innermost, so the implicit GEMM's reduction chunks are contiguous 16-byte runs of one
///   pixel's channels. The module holds the forward entries `conv2d_implicit_gemm` (where
///   available) and `conv2d_nhwc`, and the backward entries (`conv2d_bwd_data`,
///   `conv2d_bwd_filter`, `conv2d_bwd_bias`, and their tensor-core implicit GEMMs where
///   available) in this layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Layout {
    #[default]
    Nchw,
    Nhwc,
}

impl Layout {
    /// Both layouts, in declaration order.
    pub const ALL: [Layout; 2] = [Layout::Nchw, Layout::Nhwc];

    /// The argument spelling, `nchw` or `nhwc`.
    pub const fn name(self) -> &'static str {
        match self {
            Layout::Nchw => "nchw",
            Layout::Nhwc => "nhwc",
        }
    }
}

impl std::str::FromStr for Layout {
    type Err = String;

    /// Parses the argument spelling (`nchw`, `nhwc`).
    fn from_str(name: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|l| l.name() == name)
            .ok_or_else(|| format!("unknown layout `{name}`: expected nchw or nhwc"))
    }
}

impl std::fmt::Display for Layout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The direct kernel's block tiling: a `(16, 16)` block computes an `out_h × out_w` tile of
/// `out_channels` output channels of one image. Thread `(tx, ty)` owns the `pixels × pixels`
/// outputs at rows `ty + 16·i` and columns `tx + 16·j` (`i, j < pixels`), for every one of the
/// `out_channels` channels (`pixels² · out_channels` accumulators: register blocking over
/// pixels and channels). Per input channel of the group it stages the input patch the tile
/// needs in shared memory, and every `weight_channels` input channels those output channels'
/// weights, so every staged input value is reused across the kernel window (by neighbouring
/// threads) and across the output channels, and every staged weight across the thread's pixels.
///
/// Shared layout (elements of the accumulation type: f32 for f16/bf16/f32, f64 for f64):
/// `in_h` rows of `pitch` elements, the weights, then (with `bias`) the block's bias values.
/// Within a row, input column `s` (`0 ≤ s < in_w`) is stored at `origin + s` for stride 1 and
/// *de-interleaved by the horizontal stride* at `(s mod stride_w) · segment + s / stride_w`
/// otherwise, so the 16 threads of a half-warp read 16 consecutive elements for every tap
/// whatever the stride; `pitch` is chosen so that the two
/// rows a warp reads (`tid.y` and `tid.y + 1`) fall into different banks. The weights are
/// `weight_channels · kernel_h · kernel_w` rows (input channel, tap) of `weight_pitch`
/// elements, output channel fastest (read as warp-uniform broadcasts); `weight_pitch`
/// (`≥ out_channels`, a multiple of 4, odd in units of 4) keeps the 16-byte staging stores of
/// consecutive rows conflict-free.
///
/// The patch rows are loaded from global memory in chunks of `vector` elements aligned to
/// `vector` elements of the image row (16 bytes for f32 and f64, 8 for f16/bf16), one vector
/// load per chunk when the image width is a multiple of `vector` and the input buffer is
/// aligned to a chunk, element by element otherwise. The first chunk starts `lead` columns left
/// of the patch, on a 32-byte sector (`ow0 · stride_w` is a multiple of a sector's elements,
/// so `lead = (−padding_w) mod sector`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DirectTile {
    /// Output rows per block tile, `16 · pixels`.
    pub out_h: u32,
    /// Output columns per block tile, `16 · pixels`.
    pub out_w: u32,
    /// Output rows, and columns, per thread ([`Conv2dConfig::DIRECT_PIXELS`], 1 when the
    /// larger tile would not fit the arch's shared memory).
    pub pixels: u32,
    /// Output channels per block, `min(out_channels / groups, DIRECT_MAX_OUT_CHANNELS)`.
    pub out_channels: u32,
    /// Input rows staged: `(out_h − 1) · stride_h + dilation_h · (kernel_h − 1) + 1`.
    pub in_h: u32,
    /// Input columns staged: `(out_w − 1) · stride_w + dilation_w · (kernel_w − 1) + 1`.
    pub in_w: u32,
    /// Distance of the de-interleaved column segments, `≥ ceil(in_w / stride_w)`, chosen so
    /// that a warp's staging stores of 32 consecutive columns (spread over the `stride_w`
    /// segments) fall into distinct banks where they can.
    pub segment: u32,
    /// Shared row pitch in elements (`≥ stride_w · segment`).
    pub pitch: u32,
    /// Elements per global vector load of the patch (16 bytes of f32/f64, 8 of f16/bf16; 1
    /// when the block has fewer than 4 output channels or `stride_w > 1`).
    pub vector: u32,
    /// Columns the first chunk of a patch row starts left of the patch, `(−padding_w) mod
    /// sector` with `sector` the elements of a 32-byte sector.
    pub lead: u32,
    /// Chunks per patch row, `ceil((lead + in_w) / vector)` rounded up to whole sectors (the
    /// chunks holding no patch column are skipped).
    pub chunks: u32,
    /// Shared position of patch column 0 within a row: `lead` for stride 1, where whole
    /// chunks are staged at `chunk · vector` (so a row piece is one 16-byte store), 0 for the
    /// de-interleaved layout of larger strides.
    pub origin: u32,
    /// Input channels whose weights are staged together (their filter runs are contiguous in
    /// global memory): `min(in_channels / groups, ceil(64 / (kernel_h · kernel_w)))`, 1 when
    /// the larger stage would not fit.
    pub weight_channels: u32,
    /// Shared pitch of one weight row (input channel, tap), in elements.
    pub weight_pitch: u32,
    /// Element offset of the staged weights, `in_h · pitch` rounded up to a multiple of 4.
    pub weight_offset: u32,
    /// Element offset of the block's `out_channels` bias values (with `bias`), after the
    /// weights: loaded once by consecutive threads rather than by every thread.
    pub bias_offset: u32,
    /// Threads per block, 16 × 16.
    pub threads: u32,
    /// Bytes of one shared element (4, or 8 for f64).
    pub elem_bytes: u32,
    /// `(bias_offset + out_channels if bias) · elem_bytes` with `bias_offset = weight_offset +
    /// weight_channels · kernel_h · kernel_w · weight_pitch` (saturating at `u32::MAX`).
    pub shared_bytes: u32,
    /// Static when ≤ 48 KiB, dynamic otherwise.
    pub shared_kind: SharedMemoryKind,
}

/// The tiling of the GEMM entries (`conv2d_gemm` over the im2col matrix, and the implicit
/// `conv2d_1x1`): per group, `Y_g [Og, N·OH·OW] = W_g [Og, K] · B_g [K, N·OH·OW]` with
/// `K = (in_channels / groups) · kernel_h · kernel_w`. A `(16, 16)` block computes a
/// `block_m × block_n` tile, each thread `rows_per_thread × 4` outputs at rows
/// `tid.y + 16 i` and columns `tid.x + 16 j`, staging `block_k`-deep slices of both operands in
/// shared memory (A transposed, pitch `block_m + 2`, so both the staging stores and the reads
/// are bank-conflict free).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GemmTile {
    /// Output channels per tile: 16, 32 or 64 (the smallest covering `out_channels / groups`).
    pub block_m: u32,
    /// Output columns (pixels over the batch) per tile.
    pub block_n: u32,
    /// Reduction depth per shared-memory stage.
    pub block_k: u32,
    /// `block_m / 16`.
    pub rows_per_thread: u32,
    /// Shared pitch of the transposed A tile, `block_m + 2`.
    pub a_pitch: u32,
    /// `block_k · (a_pitch + block_n) · elem_bytes`.
    pub shared_bytes: u32,
}

impl Conv2dConfig {
    /// Every macro argument name (`kernel` etc. set both `_h` and `_w` fields).
    pub const FIELDS: &'static [&'static str] = &[
        "in_channels",
        "out_channels",
        "kernel",
        "stride",
        "padding",
        "dilation",
        "groups",
        "bias",
        "dtype",
        "arch",
        "layout",
        "allow_tf32",
    ];
    /// Arguments without a default.
    pub const REQUIRED: &'static [&'static str] = &["in_channels", "out_channels", "kernel"];
    /// Thread-block edge of the direct kernel (16 × 16 threads, 16 output rows per tile).
    pub const DIRECT_TILE: u32 = 16;
    /// Output rows and columns per direct-kernel thread (the tile is `16 · DIRECT_PIXELS`
    /// square).
    pub const DIRECT_PIXELS: u32 = 2;
    /// Most output channels one direct-kernel block computes (accumulators per pixel).
    pub const DIRECT_MAX_OUT_CHANNELS: u32 = 16;
    /// Filter taps (input channels × kernel window) whose weights the direct kernel aims to
    /// stage at once: runs of at least this many contiguous weights per output channel.
    pub const DIRECT_WEIGHT_TAPS: u32 = 144;
    /// Output positions past the output the direct kernel's tiles reach (a 32 × 32 tile and
    /// its 4-element vector chunks), for the launch functions' index check.
    pub const DIRECT_REACH: u32 = 40;

    pub const DEFAULT_DTYPE: DType = DType::F32;
    pub const DEFAULT_ARCH: Arch = Arch::Sm80;
    pub const DEFAULT_ALLOW_TF32: bool = false;

    /// The required values (square kernel), every other field at its default.
    pub const fn new(in_channels: u32, out_channels: u32, kernel: u32) -> Self {
        Self {
            in_channels,
            out_channels,
            kernel_h: kernel,
            kernel_w: kernel,
            stride_h: 1,
            stride_w: 1,
            padding_h: 0,
            padding_w: 0,
            dilation_h: 1,
            dilation_w: 1,
            groups: 1,
            bias: false,
            dtype: Self::DEFAULT_DTYPE,
            arch: Self::DEFAULT_ARCH,
            layout: Layout::Nchw,
            allow_tf32: Self::DEFAULT_ALLOW_TF32,
        }
    }

    /// Sets both kernel sizes (builder style).
    pub const fn with_kernel(mut self, h: u32, w: u32) -> Self {
        self.kernel_h = h;
        self.kernel_w = w;
        self
    }

    /// Sets both strides.
    pub const fn with_stride(mut self, h: u32, w: u32) -> Self {
        self.stride_h = h;
        self.stride_w = w;
        self
    }

    /// Sets both paddings.
    pub const fn with_padding(mut self, h: u32, w: u32) -> Self {
        self.padding_h = h;
        self.padding_w = w;
        self
    }

    /// Sets both dilations.
    pub const fn with_dilation(mut self, h: u32, w: u32) -> Self {
        self.dilation_h = h;
        self.dilation_w = w;
        self
    }

    /// Sets the group count.
    pub const fn with_groups(mut self, groups: u32) -> Self {
        self.groups = groups;
        self
    }

    /// Sets the activation layout.
    pub const fn with_layout(mut self, layout: Layout) -> Self {
        self.layout = layout;
        self
    }

    /// Sets the bias flag.
    pub const fn with_bias(mut self, bias: bool) -> Self {
        self.bias = bias;
        self
    }

    /// Sets `allow_tf32`.
    pub const fn with_allow_tf32(mut self, allow_tf32: bool) -> Self {
        self.allow_tf32 = allow_tf32;
        self
    }

    /// The macro argument a struct field is set by: `kernel_h`/`kernel_w` → `kernel`, likewise
    /// `stride`, `padding`, `dilation`; every other field is its own argument. `None` for an
    /// unknown name.
    pub fn argument_of(field: &str) -> Option<&'static str> {
        let arg = match field {
            "kernel_h" | "kernel_w" => "kernel",
            "stride_h" | "stride_w" => "stride",
            "padding_h" | "padding_w" => "padding",
            "dilation_h" | "dilation_w" => "dilation",
            other => other,
        };
        Self::FIELDS.iter().copied().find(|f| *f == arg)
    }

    /// Input channels per group (0 when `groups = 0`, which `validate` rejects).
    pub const fn in_per_group(&self) -> u32 {
        match self.in_channels.checked_div(self.groups) {
            Some(v) => v,
            None => 0,
        }
    }

    /// Output channels per group (0 when `groups = 0`, which `validate` rejects).
    pub const fn out_per_group(&self) -> u32 {
        match self.out_channels.checked_div(self.groups) {
            Some(v) => v,
            None => 0,
        }
    }

    /// Weight elements `out_channels · in_channels/groups · kernel_h · kernel_w` (u64,
    /// saturating: any count that large fails validation).
    pub const fn weight_elements(&self) -> u64 {
        let w = self.out_channels as u128
            * self.in_per_group() as u128
            * self.kernel_h as u128
            * self.kernel_w as u128;
        if w > u64::MAX as u128 {
            u64::MAX
        } else {
            w as u64
        }
    }

    /// Dilated kernel extent `dilation · (kernel − 1) + 1` per axis (height, width), in u64.
    pub const fn dilated_extent(&self) -> (u64, u64) {
        (
            extent(self.kernel_h, self.dilation_h),
            extent(self.kernel_w, self.dilation_w),
        )
    }

    /// Bytes of the type the kernels accumulate (and stage in shared memory) in: f32 for the
    /// 16- and 32-bit types, f64 for f64.
    pub const fn accumulator_bytes(&self) -> u32 {
        if self.dtype.accumulates_in_f32() {
            4
        } else {
            8
        }
    }

    /// The direct kernel's tiling (see [`DirectTile`]): [`Conv2dConfig::DIRECT_PIXELS`]²
    /// pixels per thread with several input channels' weights staged together, or, when that
    /// needs more shared memory than the arch has, one pixel per thread and one channel's
    /// weights. Sizes saturate rather than wrap, so an absurd configuration shows up as too
    /// much shared memory.
    pub fn direct_tile(&self) -> DirectTile {
        self.tiling(self.dilated_extent())
    }

    /// The NCHW CUDA-core backward-data kernel's tiling: the direct tiling of
    /// [`Conv2dConfig::backward_data_window`] (a tile of one stride phase's `dx` pixels × `dx`
    /// channels, the dense `gy` window every phase's taps read, the weights of a chunk of
    /// output channels); at stride 1 that of [`Conv2dConfig::flipped_forward`].
    pub fn backward_data_tile(&self) -> DirectTile {
        let [rows, cols] = self.phase_axes();
        self.backward_data_window()
            .tiling((rows.extent(), cols.extent()))
    }

    /// Backward-data's phase decomposition along the rows and the columns (see
    /// [`PhaseAxis`]).
    pub(crate) fn phase_axes(&self) -> [PhaseAxis; 2] {
        [
            PhaseAxis {
                kernel: self.kernel_h,
                stride: self.stride_h,
                padding: self.padding_h,
                dilation: self.dilation_h,
            },
            PhaseAxis {
                kernel: self.kernel_w,
                stride: self.stride_w,
                padding: self.padding_w,
                dilation: self.dilation_w,
            },
        ]
    }

    /// [`Conv2dConfig::flipped_forward`] on the stride-phase grid of the NCHW CUDA-core
    /// backward-data: along an axis of stride `S`, dilation `D`, padding `P` and `K` taps, `dx`
    /// positions `a·S + ρ` (phase `ρ < S`) receive `gy` positions `a + ⌈(P − k·D) / S⌉`, so a
    /// window of `dx` positions `a0·S + ρ ..` starts at `gy` position `a0 + low`, `low = ⌈(P −
    /// (K − 1)·D) / S⌉`, for every phase, and the padding is `−low` (wrapping when negative).
    /// At stride 1 `−low = D·(K − 1) − P`, the flipped forward itself.
    pub fn backward_data_window(&self) -> Self {
        let [rows, cols] = self.phase_axes();
        Self {
            padding_h: rows.low().wrapping_neg() as u32,
            padding_w: cols.low().wrapping_neg() as u32,
            ..self.flipped_forward()
        }
    }

    /// Backward-data as a stride-1 forward convolution: `dx` is the forward of `gy`, spread by
    /// the stride (`stride − 1` zeros between its rows and columns), with the filter flipped
    /// and its channel axes swapped, `dilation` kept and padding `dilation · (kernel − 1) −
    /// padding`, wrapping modulo 2³² when negative (the kernels' wrapping position arithmetic
    /// handles it, and the tiling depends on it only modulo a sector). No bias. The kernel
    /// runs it as is at stride 1 only; above, by stride phases on the dense `gy`
    /// ([`Self::backward_data_window`]).
    pub fn flipped_forward(&self) -> Self {
        let flipped_padding = |kernel: u32, dilation: u32, padding: u32| {
            kernel
                .saturating_sub(1)
                .wrapping_mul(dilation)
                .wrapping_sub(padding)
        };
        Self {
            in_channels: self.out_channels,
            out_channels: self.in_channels,
            stride_h: 1,
            stride_w: 1,
            padding_h: flipped_padding(self.kernel_h, self.dilation_h, self.padding_h),
            padding_w: flipped_padding(self.kernel_w, self.dilation_w, self.padding_w),
            bias: false,
            ..*self
        }
    }

    /// [`Self::direct_tile`] for a kernel window spanning `extent` input rows × columns
    /// (the dilated kernel; backward-data's phase windows).
    fn tiling(&self, extent: (u64, u64)) -> DirectTile {
        let taps = self.kernel_h.max(1).saturating_mul(self.kernel_w.max(1));
        let weight_channels = self
            .in_per_group()
            .min(Self::DIRECT_WEIGHT_TAPS.div_ceil(taps))
            .max(1);
        let wide = self.direct_tile_with(Self::DIRECT_PIXELS, weight_channels, extent);
        if wide.shared_bytes <= self.arch.max_dynamic_shared_bytes() {
            wide
        } else {
            self.direct_tile_with(1, 1, extent)
        }
    }

    fn direct_tile_with(
        &self,
        pixels: u32,
        weight_channels: u32,
        extent: (u64, u64),
    ) -> DirectTile {
        let (out_h, out_w) = (Self::DIRECT_TILE * pixels, Self::DIRECT_TILE * pixels);
        let (eh, ew) = extent;
        let in_h = u64::from(out_h - 1)
            .saturating_mul(u64::from(self.stride_h))
            .saturating_add(eh);
        let in_w = u64::from(out_w - 1)
            .saturating_mul(u64::from(self.stride_w))
            .saturating_add(ew);
        let stride_w = u64::from(self.stride_w.max(1));
        let elem_bytes = self.accumulator_bytes();
        let out_channels = self.out_per_group().clamp(1, Self::DIRECT_MAX_OUT_CHANNELS);
        // `ld.global.v4` at most (16 bytes of f32, 8 of f16/bf16), `.v2` of f64. The patch
        // moves element by element (lanes on consecutive elements: whole sectors all the
        // same) with fewer than 4 output channels per block (depthwise: a tap is too few
        // shared reads to hide the 4 wavefronts of each 16-byte staging store) and with a
        // horizontal stride (a chunk's elements scatter to `stride_w` segments, and lanes
        // whose chunks are 4 columns apart would store 2 columns apart: bank conflicts).
        let vector = if out_channels < 4 || self.stride_w > 1 {
            1
        } else {
            (16 / self.dtype.size_bytes()).min(4)
        };
        // The chunk grid starts on a 32-byte sector and each row has whole sectors of chunks,
        // so a warp's requests split rows only at sector boundaries.
        let sector = 32 / self.dtype.size_bytes();
        // The padding as a signed value (backward-data's flipped padding wraps when negative).
        let lead = (-i64::from(self.padding_w as i32)).rem_euclid(i64::from(sector)) as u32;
        // Strided rows take whole warps (32 columns), so every warp stores columns from the
        // same phase of the stride and the segment distance can keep them conflict-free.
        let row_multiple = if self.stride_w > 1 {
            32
        } else {
            sector / vector
        };
        let chunks = (u64::from(lead) + in_w)
            .div_ceil(u64::from(vector))
            .checked_next_multiple_of(u64::from(row_multiple))
            .unwrap_or(u64::MAX);
        let segment = direct_segment(in_w.div_ceil(stride_w), self.stride_w, lead, elem_bytes / 4);
        // Stride 1 stages whole chunks (row pieces 16-byte aligned in shared memory); other
        // strides de-interleave the patch columns.
        let (min_pitch, origin) = if self.stride_w == 1 {
            (chunks.saturating_mul(u64::from(vector)), lead)
        } else {
            (segment.saturating_mul(stride_w), 0)
        };
        let pitch = direct_pitch(min_pitch, self.stride_h, elem_bytes / 4);
        let weight_offset = in_h
            .saturating_mul(pitch)
            .checked_next_multiple_of(4)
            .unwrap_or(u64::MAX);
        // Odd in units of 4: rows 4·(2j + 1) words apart keep 8 consecutive 16-byte stores
        // (a quarter-warp) in distinct banks.
        let quads = out_channels.div_ceil(4);
        let weight_pitch = 4 * (quads | 1);
        let weights = u64::from(weight_channels)
            .saturating_mul(u64::from(self.kernel_h))
            .saturating_mul(u64::from(self.kernel_w))
            .saturating_mul(u64::from(weight_pitch));
        let bias_offset = weight_offset.saturating_add(weights);
        let bias = if self.bias { out_channels } else { 0 };
        let bytes = bias_offset
            .saturating_add(u64::from(bias))
            .saturating_mul(u64::from(elem_bytes));
        let sat = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
        let shared_bytes = sat(bytes);
        DirectTile {
            out_h,
            out_w,
            pixels,
            out_channels,
            in_h: sat(in_h),
            in_w: sat(in_w),
            segment: sat(segment),
            pitch: sat(pitch),
            vector,
            lead,
            chunks: sat(chunks),
            origin,
            weight_channels,
            weight_pitch,
            weight_offset: sat(weight_offset),
            bias_offset: sat(bias_offset),
            threads: Self::DIRECT_TILE * Self::DIRECT_TILE,
            elem_bytes,
            shared_bytes,
            shared_kind: if shared_bytes <= self.arch.max_static_shared_bytes() {
                SharedMemoryKind::Static
            } else {
                SharedMemoryKind::Dynamic
            },
        }
    }

    /// The GEMM entries' tiling (see [`GemmTile`]).
    pub fn gemm_tile(&self) -> GemmTile {
        let block_m = match self.out_per_group() {
            0..=16 => 16,
            17..=32 => 32,
            _ => 64,
        };
        let (block_n, block_k) = (64, 16);
        let a_pitch = block_m + 2;
        GemmTile {
            block_m,
            block_n,
            block_k,
            rows_per_thread: block_m / 16,
            a_pitch,
            shared_bytes: block_k * (a_pitch + block_n) * self.accumulator_bytes(),
        }
    }

    /// Checks every rule; returns all violations, each tagged with the argument(s) at fault
    /// (argument names, see the module doc).
    pub fn validate(&self) -> Result<(), ConfigErrors> {
        let mut errs = ConfigErrors::default();
        if let Some(msg) = crate::templates::tf32::dtype_rule(self.allow_tf32, self.dtype) {
            errs.push(&["allow_tf32", "dtype"], msg);
        }
        if self.in_channels == 0 {
            errs.push(
                &["in_channels"],
                "in_channels = 0: need at least one channel",
            );
        }
        if self.out_channels == 0 {
            errs.push(
                &["out_channels"],
                "out_channels = 0: need at least one channel",
            );
        }
        let axes = [
            ("kernel", self.kernel_h, self.kernel_w),
            ("stride", self.stride_h, self.stride_w),
            ("dilation", self.dilation_h, self.dilation_w),
        ];
        let mut sizes_ok = true;
        for (arg, h, w) in axes {
            for (axis, v) in [("height", h), ("width", w)] {
                if v == 0 {
                    sizes_ok = false;
                    errs.push(&[arg], format!("{arg} {axis} = 0: must be at least 1"));
                }
            }
        }
        if self.groups == 0 {
            errs.push(&["groups"], "groups = 0: must be at least 1");
        } else {
            for (name, c) in [
                ("in_channels", self.in_channels),
                ("out_channels", self.out_channels),
            ] {
                if c != 0 && c % self.groups != 0 {
                    errs.push(
                        &["groups", name],
                        format!("groups = {} does not divide {name} = {c}", self.groups),
                    );
                }
            }
        }
        let weight = self.weight_elements();
        if weight > INDEX_BOUND.limit {
            errs.push(
                &["kernel", "in_channels", "out_channels"],
                format!(
                    "the weight has {weight} elements (out_channels · in_channels/groups · \
                     kernel_h · kernel_w), more than the kernels' index limit {}",
                    INDEX_BOUND.limit
                ),
            );
        }
        // dtype: every dtype is supported on every arch; no rule.
        // The direct kernel's tile limits bind only the NCHW module (the NHWC module has no
        // direct kernel); the extent limit binds every kernel's index arithmetic.
        if sizes_ok {
            let (eh, ew) = self.dilated_extent();
            if eh > u64::from(u32::MAX) || ew > u64::from(u32::MAX) {
                errs.push(
                    &["dilation", "kernel"],
                    format!(
                        "the dilated kernel extent {eh} × {ew} (dilation · (kernel − 1) + 1) \
                         exceeds {}",
                        u32::MAX
                    ),
                );
            } else if self.layout == Layout::Nchw {
                // The first tiling that does not fit (backward-data's only when the direct
                // one does, so one error per configuration).
                let (kernel, tile) = [
                    ("direct", self.direct_tile()),
                    ("backward-data", self.backward_data_tile()),
                ]
                .into_iter()
                .find(|(_, tile)| tile.shared_bytes > self.arch.max_dynamic_shared_bytes())
                .unwrap_or(("direct", self.direct_tile()));
                let max_threads = self.arch.max_threads_per_block();
                if tile.threads > max_threads {
                    errs.push(
                        &["arch"],
                        format!(
                            "the direct kernel needs {} threads per block, more than {}'s {max_threads}",
                            tile.threads, self.arch
                        ),
                    );
                }
                let max_dyn = self.arch.max_dynamic_shared_bytes();
                if tile.shared_bytes > max_dyn {
                    errs.push(
                        &["dilation", "kernel", "stride", "dtype", "arch"],
                        format!(
                            "the {kernel} kernel's input tile {} × {} and {} × {} × {} weights \
                             (staged in {}) need {} bytes of shared memory, more than {}'s \
                             dynamic maximum {max_dyn}",
                            tile.in_h,
                            tile.in_w,
                            tile.out_channels,
                            self.kernel_h,
                            self.kernel_w,
                            if self.accumulator_bytes() == 4 {
                                "f32"
                            } else {
                                "f64"
                            },
                            tile.shared_bytes,
                            self.arch
                        ),
                    );
                }
            }
        }
        errs.into_result()
    }
}

/// The shared row pitch (≥ `min_pitch`, a multiple of 4 so staged rows stay 16-byte aligned,
/// elements of `words` 4-byte words) of the direct kernel's input tile with the fewest
/// shared-memory wavefronts for its tap reads: a warp is two rows of 16 threads that read 16
/// consecutive elements each, `stride_h` staged rows apart. Ties go to the smallest pitch.
///
/// Banks depend on word indices modulo 32 only, so wrapping arithmetic gives exact banks even
/// for the absurd sizes `validate` is about to reject.
fn direct_pitch(min_pitch: u64, stride_h: u32, words: u32) -> u64 {
    let first = min_pitch.checked_next_multiple_of(4).unwrap_or(min_pitch);
    (first..first.saturating_add(32))
        .step_by(4)
        .min_by_key(|&pitch| {
            let elements = (0..32u64).map(|lane| {
                ((lane / 16) * u64::from(stride_h))
                    .wrapping_mul(pitch)
                    .wrapping_add(lane % 16)
            });
            (busiest_bank(elements, words), pitch)
        })
        .unwrap_or(min_pitch)
}

/// The segment distance (≥ `min_segment`) of the direct kernel's de-interleaved patch rows with
/// the fewest wavefronts for a warp storing the 32 consecutive patch columns `s = 32i − lead +
/// lane` at `(s mod stride_w) · segment + s / stride_w` (elements of `words` 4-byte words);
/// ties go to the smallest. Stride 1 has one segment.
fn direct_segment(min_segment: u64, stride_w: u32, lead: u32, words: u32) -> u64 {
    if stride_w <= 1 {
        return min_segment;
    }
    let stride = u64::from(stride_w);
    // Only `s mod stride_w` and the run of `s / stride_w` matter: start at the phase of `−lead`.
    let phase = (stride - u64::from(lead) % stride) % stride;
    (min_segment..min_segment.saturating_add(32))
        .min_by_key(|&segment| {
            let elements = (phase..phase + 32)
                .map(|s| (s % stride).wrapping_mul(segment).wrapping_add(s / stride));
            (busiest_bank(elements, words), segment)
        })
        .unwrap_or(min_segment)
}

/// The most distinct words of `elements` (of `words` 4-byte words each) that share one of the
/// 32 banks: the wavefronts of one warp-wide 4-byte-per-word access.
fn busiest_bank(elements: impl Iterator<Item = u64>, words: u32) -> usize {
    let mut per_bank: [Vec<u64>; 32] = Default::default();
    for element in elements {
        for w in 0..u64::from(words) {
            let word = element.wrapping_mul(u64::from(words)).wrapping_add(w);
            let bank = &mut per_bank[(word % 32) as usize];
            if !bank.contains(&word) {
                bank.push(word);
            }
        }
    }
    per_bank.iter().map(Vec::len).max().unwrap_or(0)
}

const fn extent(kernel: u32, dilation: u32) -> u64 {
    if kernel == 0 {
        0
    } else {
        dilation as u64 * (kernel as u64 - 1) + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields_of(cfg: &Conv2dConfig) -> Vec<Vec<&'static str>> {
        match cfg.validate() {
            Ok(()) => vec![],
            Err(e) => e.0.into_iter().map(|e| e.fields).collect(),
        }
    }

    #[test]
    fn common_configs_are_valid() {
        assert_eq!(
            Conv2dConfig::new(64, 128, 3).with_padding(1, 1).validate(),
            Ok(())
        );
        let depthwise = Conv2dConfig::new(32, 64, 3).with_groups(32);
        assert_eq!(depthwise.validate(), Ok(()));
        assert_eq!(depthwise.in_per_group(), 1);
        assert_eq!(depthwise.out_per_group(), 2);
    }

    #[test]
    fn groups_must_divide_channels() {
        let err = Conv2dConfig::new(64, 30, 3)
            .with_groups(3)
            .validate()
            .unwrap_err();
        assert_eq!(err.0.len(), 1);
        assert_eq!(err.0[0].fields, vec!["groups", "in_channels"]);
        assert_eq!(
            err.0[0].message,
            "groups = 3 does not divide in_channels = 64"
        );
    }

    #[test]
    fn errors_use_argument_names() {
        let cfg = Conv2dConfig::new(0, 0, 0)
            .with_kernel(3, 0)
            .with_stride(0, 1)
            .with_dilation(1, 0)
            .with_groups(0);
        assert_eq!(
            fields_of(&cfg),
            vec![
                vec!["in_channels"],
                vec!["out_channels"],
                vec!["kernel"],
                vec!["stride"],
                vec!["dilation"],
                vec!["groups"]
            ]
        );
        assert_eq!(Conv2dConfig::argument_of("kernel_w"), Some("kernel"));
        assert_eq!(Conv2dConfig::argument_of("padding_h"), Some("padding"));
        assert_eq!(Conv2dConfig::argument_of("groups"), Some("groups"));
        assert_eq!(Conv2dConfig::argument_of("nope"), None);
    }

    #[test]
    fn direct_tile_shared_memory() {
        let cfg = Conv2dConfig::new(8, 8, 3);
        let t = cfg.direct_tile();
        assert_eq!((t.out_h, t.out_w, t.pixels), (32, 32, 2));
        assert_eq!((t.in_h, t.in_w, t.threads), (34, 34, 256));
        // 34 columns from a sector boundary (lead 0): 9 chunks of 4, rounded up to whole
        // sectors (10); two rows a warp reads are 48 elements apart: 16 mod 32 banks.
        assert_eq!((t.vector, t.lead, t.chunks, t.origin), (4, 0, 10, 0));
        assert_eq!((t.pitch, t.out_channels), (48, 8));
        // 144 taps of weights at once: 16 input channels, capped at the group's 8; rows of
        // 8 channels padded to 12 (three 16-byte pieces).
        assert_eq!((t.weight_channels, t.weight_pitch), (8, 12));
        assert_eq!(t.shared_bytes, (34 * 48 + 8 * 9 * 12) * 4);
        assert_eq!(t.shared_kind, SharedMemoryKind::Static);
        // Padding 1 starts the chunk grid 7 columns left of the patch (a sector boundary).
        let padded = cfg.with_padding(1, 1).direct_tile();
        assert_eq!((padded.lead, padded.chunks, padded.origin), (7, 12, 7));
        // Stride 2: 65 columns in two segments 48 apart (≥ 33; ≡ 16 mod 32, so the even and
        // odd columns of a warp's staging store fill the two halves of the banks); rows 2
        // apart need pitch ≡ 8 (mod 16), ≥ 96.
        let strided = cfg.with_stride(2, 2).direct_tile();
        assert_eq!(
            (strided.in_w, strided.segment, strided.pitch),
            (65, 48, 104)
        );
        // Element by element (vector 1): 65 columns rounded up to whole warps, 96.
        assert_eq!((strided.vector, strided.chunks, strided.origin), (1, 96, 0));
        // f64 stages f64.
        let f64_tile = Conv2dConfig {
            dtype: DType::F64,
            ..cfg
        }
        .direct_tile();
        assert_eq!(f64_tile.elem_bytes, 8);
        let dilated = cfg.with_dilation(64, 64); // 15 + 129 = 144
        assert_eq!(dilated.direct_tile().shared_kind, SharedMemoryKind::Dynamic);
        assert_eq!(dilated.validate(), Ok(()));
        let huge = Conv2dConfig {
            dtype: DType::F64,
            ..cfg.with_dilation(200, 200)
        };
        assert_eq!(
            fields_of(&huge),
            vec![vec!["dilation", "kernel", "stride", "dtype", "arch"]]
        );
    }

    #[test]
    fn shared_memory_message_names_the_staged_tile() {
        let cfg = Conv2dConfig {
            arch: Arch::Sm75,
            ..Conv2dConfig::new(8, 8, 3).with_dilation(100, 100)
        };
        let err = cfg.validate().unwrap_err();
        assert_eq!(
            err.0[0].message,
            "the direct kernel's input tile 216 × 216 and 8 × 3 × 3 weights (staged in f32) \
             need 207792 bytes of shared memory, more than sm_75's dynamic maximum 65536"
        );
    }

    /// A tile that only backward-data cannot stage: 16 → 1 channels, 28 × 28 taps on sm_75.
    /// The direct tile's weight rows hold its one output channel (pitch 4); backward-data's
    /// flipped problem produces the 16 input channels (pitch 20), five times the weights. One
    /// error, naming the backward-data kernel (the direct tiling fits).
    #[test]
    fn shared_memory_message_names_the_backward_data_tile() {
        let cfg = Conv2dConfig {
            arch: Arch::Sm75,
            ..Conv2dConfig::new(16, 1, 28)
        };
        let max = cfg.arch.max_dynamic_shared_bytes();
        assert!(cfg.direct_tile().shared_bytes <= max);
        assert!(cfg.backward_data_tile().shared_bytes > max);
        let err = cfg.validate().unwrap_err();
        assert_eq!(err.0.len(), 1);
        assert_eq!(
            err.0[0].fields,
            vec!["dilation", "kernel", "stride", "dtype", "arch"]
        );
        // The one-pixel fallback: 16 + 27 = 43 rows of 48 (11 chunks of 4, whole sectors),
        // then 1 channel × 784 taps × pitch 20: (2064 + 15680) · 4 bytes.
        assert_eq!(
            err.0[0].message,
            "the backward-data kernel's input tile 43 × 43 and 16 × 28 × 28 weights (staged in \
             f32) need 70976 bytes of shared memory, more than sm_75's dynamic maximum 65536"
        );
    }

    #[test]
    fn gemm_tile_follows_the_group_width() {
        let t = Conv2dConfig::new(8, 8, 3).gemm_tile();
        assert_eq!((t.block_m, t.rows_per_thread, t.a_pitch), (16, 1, 18));
        let t = Conv2dConfig::new(64, 128, 1).with_groups(2).gemm_tile();
        assert_eq!((t.block_m, t.block_n, t.block_k), (64, 64, 16));
        assert_eq!(t.shared_bytes, 16 * (66 + 64) * 4);
    }

    #[test]
    fn weight_must_fit_u32() {
        let cfg = Conv2dConfig::new(4096, 4096, 64);
        assert_eq!(
            fields_of(&cfg)[0],
            vec!["kernel", "in_channels", "out_channels"]
        );
    }
}
