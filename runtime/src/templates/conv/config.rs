//! The 2-D convolution configuration (`#[conv2d_kernel(..)]` arguments) and its validation.
//!
//! Argument names vs fields: the macro takes `kernel`, `stride`, `padding` and `dilation` either
//! as one value (`kernel = 3`, both axes) or a pair (`kernel = (3, 5)`, height then width) and
//! fills the `_h`/`_w` fields. Errors are therefore tagged with the *argument* names (`"kernel"`,
//! not `"kernel_h"`), so the macro can point at the token; [`Conv2dConfig::argument_of`] maps a
//! field name to its argument.
//!
//! Index width: the kernels compute element indices in `u32` (byte addresses in `u64`), so each
//! tensor's element count must be at most `u32::MAX`; the weight is checked here, the run-time
//! tensors by [`Conv2dConfig::output_size`] and [`Conv2dConfig::check_shape`].

use crate::arch::Arch;
use crate::dtype::DType;
use crate::templates::attention::SharedMemoryKind;
use crate::templates::ConfigErrors;

/// Configuration of one NCHW 2-D convolution: `#[conv2d_kernel(in_channels = 64, out_channels =
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
}

/// The direct kernel's block tiling: each block computes an `out_h × out_w` tile of one output
/// channel plane, one thread per output, staging the input patch it needs (one input channel at
/// a time) in shared memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DirectTile {
    /// Output rows per block tile ([`Conv2dConfig::DIRECT_TILE`]).
    pub out_h: u32,
    /// Output columns per block tile.
    pub out_w: u32,
    /// Input rows staged: `(out_h − 1) · stride_h + dilation_h · (kernel_h − 1) + 1`.
    pub in_h: u32,
    /// Input columns staged: `(out_w − 1) · stride_w + dilation_w · (kernel_w − 1) + 1`.
    pub in_w: u32,
    /// Threads per block, `out_h · out_w`.
    pub threads: u32,
    /// `in_h · in_w · size(dtype)` bytes (saturating at `u32::MAX`).
    pub shared_bytes: u32,
    /// Static when ≤ 48 KiB, dynamic otherwise.
    pub shared_kind: SharedMemoryKind,
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
    ];
    /// Arguments without a default.
    pub const REQUIRED: &'static [&'static str] = &["in_channels", "out_channels", "kernel"];
    /// Output tile edge of the direct kernel (16 × 16 outputs, 256 threads per block).
    pub const DIRECT_TILE: u32 = 16;

    pub const DEFAULT_DTYPE: DType = DType::F32;
    pub const DEFAULT_ARCH: Arch = Arch::Sm80;

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

    /// Sets the bias flag.
    pub const fn with_bias(mut self, bias: bool) -> Self {
        self.bias = bias;
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

    /// Input channels per group.
    pub const fn in_per_group(&self) -> u32 {
        self.in_channels / self.groups
    }

    /// Output channels per group.
    pub const fn out_per_group(&self) -> u32 {
        self.out_channels / self.groups
    }

    /// Weight elements `out_channels · in_channels/groups · kernel_h · kernel_w` (u64).
    pub const fn weight_elements(&self) -> u64 {
        self.out_channels as u64
            * (self.in_channels / if self.groups == 0 { 1 } else { self.groups }) as u64
            * self.kernel_h as u64
            * self.kernel_w as u64
    }

    /// Dilated kernel extent `dilation · (kernel − 1) + 1` per axis (height, width), in u64.
    pub const fn dilated_extent(&self) -> (u64, u64) {
        (
            extent(self.kernel_h, self.dilation_h),
            extent(self.kernel_w, self.dilation_w),
        )
    }

    /// The direct kernel's tiling (see [`DirectTile`]).
    pub fn direct_tile(&self) -> DirectTile {
        let t = Self::DIRECT_TILE;
        let (eh, ew) = self.dilated_extent();
        let in_h = u64::from(t - 1) * u64::from(self.stride_h) + eh;
        let in_w = u64::from(t - 1) * u64::from(self.stride_w) + ew;
        let bytes = in_h * in_w * u64::from(self.dtype.size_bytes());
        let shared_bytes = u32::try_from(bytes).unwrap_or(u32::MAX);
        DirectTile {
            out_h: t,
            out_w: t,
            in_h: u32::try_from(in_h).unwrap_or(u32::MAX),
            in_w: u32::try_from(in_w).unwrap_or(u32::MAX),
            threads: t * t,
            shared_bytes,
            shared_kind: if shared_bytes <= self.arch.max_static_shared_bytes() {
                SharedMemoryKind::Static
            } else {
                SharedMemoryKind::Dynamic
            },
        }
    }

    /// Checks every rule; returns all violations, each tagged with the argument(s) at fault
    /// (argument names, see the module doc).
    pub fn validate(&self) -> Result<(), ConfigErrors> {
        let mut errs = ConfigErrors::default();
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
        if weight > u64::from(u32::MAX) {
            errs.push(
                &["kernel", "in_channels", "out_channels"],
                format!(
                    "the weight has {weight} elements (out_channels · in_channels/groups · \
                     kernel_h · kernel_w), more than the u32 index limit {}",
                    u32::MAX
                ),
            );
        }
        // dtype: every dtype is supported on every arch; no rule.
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
            } else {
                let tile = self.direct_tile();
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
                            "the direct kernel's input tile {} × {} of {} needs {} bytes of shared \
                             memory, more than {}'s dynamic maximum {max_dyn}",
                            tile.in_h, tile.in_w, self.dtype, tile.shared_bytes, self.arch
                        ),
                    );
                }
            }
        }
        errs.into_result()
    }
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
        assert_eq!((t.in_h, t.in_w, t.threads), (18, 18, 256));
        assert_eq!(t.shared_bytes, 18 * 18 * 4);
        assert_eq!(t.shared_kind, SharedMemoryKind::Static);
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
    fn weight_must_fit_u32() {
        let cfg = Conv2dConfig::new(4096, 4096, 64);
        assert_eq!(
            fields_of(&cfg)[0],
            vec!["kernel", "in_channels", "out_channels"]
        );
    }
}
