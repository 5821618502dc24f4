//! `#[conv2d_kernel(..)]` arguments. `kernel`, `stride`, `padding` and `dilation` take a pair
//! `(height, width)` or one number for both, and set the config's `_h`/`_w` fields.

use ptxforge_runtime::templates::conv::{Conv2dConfig, Layout};
use ptxforge_runtime::{Arch, DType};

use super::value::Size2;
use super::{family_args, required, set};

family_args! {
    /// The arguments of `#[conv2d_kernel(in_channels = 64, out_channels = 128, kernel = 3,
    /// stride = 1, padding = 1, dilation = 1, groups = 1, bias = true, dtype = f16,
    /// arch = sm_80, layout = nhwc, allow_tf32 = false)]`.
    ConvArgs {
        in_channels: u32,
        out_channels: u32,
        kernel: Size2,
        stride: Size2,
        padding: Size2,
        dilation: Size2,
        groups: u32,
        bias: bool,
        dtype: DType,
        arch: Arch,
        layout: Layout,
        allow_tf32: bool,
    }
}

impl ConvArgs {
    /// The configuration, defaults filling what is not given; `None` if a required argument is
    /// missing.
    pub(crate) fn config(&self) -> Option<Conv2dConfig> {
        let kernel = required(&self.kernel)?;
        let mut config = Conv2dConfig::new(
            required(&self.in_channels)?,
            required(&self.out_channels)?,
            0,
        )
        .with_kernel(kernel.h, kernel.w);
        if let Some(stride) = required(&self.stride) {
            config = config.with_stride(stride.h, stride.w);
        }
        if let Some(padding) = required(&self.padding) {
            config = config.with_padding(padding.h, padding.w);
        }
        if let Some(dilation) = required(&self.dilation) {
            config = config.with_dilation(dilation.h, dilation.w);
        }
        set(&mut config.groups, &self.groups);
        set(&mut config.bias, &self.bias);
        set(&mut config.dtype, &self.dtype);
        set(&mut config.arch, &self.arch);
        set(&mut config.layout, &self.layout);
        set(&mut config.allow_tf32, &self.allow_tf32);
        Some(config)
    }
}
