use ptxforge::prelude::*;

#[conv2d_kernel(in_channels = 64, out_channels = 128, kernel = 3, padding = 1,
                groups = 1, bias = true, dtype = f16, arch = sm_80)]
pub struct ResNetBlock;

/// Depthwise, rectangular kernel, per-axis stride and dilation.
#[conv2d_kernel(in_channels = 32, out_channels = 64, kernel = (1, 7), stride = [2, 1],
                padding = (0, 3), dilation = (1, 2), groups = 32)]
pub struct Depthwise;

fn main() {
    let c = ResNetBlock::CONFIG;
    assert_eq!((c.kernel_h, c.kernel_w, c.padding_h, c.padding_w), (3, 3, 1, 1));
    assert!(c.bias);
    let d = Depthwise::CONFIG;
    assert_eq!((d.kernel_h, d.kernel_w), (1, 7));
    assert_eq!((d.stride_h, d.stride_w), (2, 1));
    assert_eq!((d.dilation_h, d.dilation_w), (1, 2));
    assert_eq!(d.groups, 32);
    assert_eq!(d.dtype, DType::F32);
}
