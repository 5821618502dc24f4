//! A ResNet-style 3×3 convolution with bias on the CPU backend: forward through the direct and
//! the im2col + GEMM paths, then both backward passes (data and filter + bias), through the
//! wrappers `#[conv2d_kernel]` generated, each compared with the host reference (f64 on the
//! same f32 inputs). Then the same layer in f16 on sm_80, where `forward` runs the tensor-core
//! implicit GEMM, in the NCHW layout and in channels-last (`layout = nhwc`), and both
//! backward passes on tensor cores in each layout (NCHW through channels-last copies).
//!
//! Run: `cargo run --example conv2d`. Exits non-zero if any comparison fails.

mod common;

use std::process::ExitCode;

use ptxforge::conv::reference::{self, to_channels_last};
use ptxforge::prelude::*;

use common::{Report, Rng};
use half::f16;

/// 16 → 32 channels, 3×3, padding 1, stride 1, with bias, f32.
#[conv2d_kernel(in_channels = 16, out_channels = 32, kernel = 3, padding = 1, bias = true,
                dtype = f32, arch = sm_80)]
#[derive(Debug)]
pub struct ResNetConv;

/// The same layer in f16: `forward` copies `x` and `w` channels-last
/// (`conv2d_to_channels_last`, `conv2d_filter_to_channels_last`) and runs
/// `conv2d_implicit_gemm_channels_last` on tensor cores.
#[conv2d_kernel(in_channels = 16, out_channels = 32, kernel = 3, padding = 1, bias = true,
                dtype = f16, arch = sm_80)]
#[derive(Debug)]
pub struct ResNetConvF16;

/// The same layer in f16, channels-last: `x [N, H, W, C]`, `w [O, KH, KW, I]`, `y [N, OH, OW, O]`.
#[conv2d_kernel(in_channels = 16, out_channels = 32, kernel = 3, padding = 1, bias = true,
                dtype = f16, arch = sm_80, layout = nhwc)]
#[derive(Debug)]
pub struct ResNetConvNhwc;

/// f32 accumulation in a different order than the f64 reference.
const TOLERANCE: f64 = 1e-5;
/// f16 inputs, f32 accumulation, one rounding of the output to f16.
const TOLERANCE_F16: f64 = 2e-3;

fn main() -> Result<ExitCode, Box<dyn std::error::Error>> {
    let cfg = ResNetConv::CONFIG;
    let shape = ConvShape {
        batch: 2,
        height: 12,
        width: 12,
    };
    let dims = cfg.check_shape(&shape, true)?;
    println!(
        "conv2d: x [{}, {}, {}, {}], w [{}, {}, {}, {}], bias, y [{}, {}, {}, {}], {}; PTX {} \
         bytes, {} entries",
        shape.batch,
        cfg.in_channels,
        shape.height,
        shape.width,
        cfg.out_channels,
        cfg.in_channels / cfg.groups,
        cfg.kernel_h,
        cfg.kernel_w,
        dims.batch,
        cfg.out_channels,
        dims.out_h,
        dims.out_w,
        cfg.dtype,
        ResNetConv::PTX.len(),
        ResNetConv::PTX.matches(".entry ").count(),
    );

    let mut rng = Rng::new(3);
    let mut data = |len: usize| -> (Vec<f32>, Vec<f64>) {
        let stored: Vec<f32> = rng.vec(len, -1.0, 1.0).iter().map(|&v| v as f32).collect();
        let seen = stored.iter().map(|&v| f64::from(v)).collect();
        (stored, seen)
    };
    let (x, x_ref) = data(dims.input_len(&cfg));
    let (w, w_ref) = data(cfg.weight_elements() as usize);
    let (b, b_ref) = data(cfg.out_channels as usize);
    let (gy, gy_ref) = data(dims.output_len(&cfg));

    let dev = SimBackend::new();
    let (x, w, b, gy) = (
        dev.upload(&x)?,
        dev.upload(&w)?,
        dev.upload(&b)?,
        dev.upload(&gy)?,
    );
    let mut report = Report::default();
    let download = |buf: &DeviceBuffer<SimBackend, f32>| -> Result<Vec<f64>, LaunchError> {
        Ok(dev.download(buf)?.iter().map(|&v| f64::from(v)).collect())
    };

    let want_y = reference::forward(&cfg, &shape, &x_ref, &w_ref, Some(&b_ref))?;
    let mut y = dev.alloc::<f32>(dims.output_len(&cfg))?;
    ResNetConv.forward_direct(&dev, &shape, &x, &w, &b, &mut y)?;
    report.compare(
        "forward_direct y vs host reference",
        &download(&y)?,
        &want_y,
        TOLERANCE,
    );

    let mut cols = dev.alloc::<f32>(dims.im2col_len(&cfg))?;
    let mut y2 = dev.alloc::<f32>(dims.output_len(&cfg))?;
    ResNetConv.forward_im2col(&dev, &shape, &x, &w, &b, &mut cols, &mut y2)?;
    report.compare(
        "forward_im2col y vs host reference",
        &download(&y2)?,
        &want_y,
        TOLERANCE,
    );

    let want_dx = reference::backward_data(&cfg, &shape, &gy_ref, &w_ref)?;
    let mut dx = dev.alloc::<f32>(dims.input_len(&cfg))?;
    ResNetConv.backward_data(&dev, &shape, &gy, &w, &mut dx)?;
    report.compare(
        "backward_data dx vs host reference",
        &download(&dx)?,
        &want_dx,
        TOLERANCE,
    );

    let (want_dw, want_db) = reference::backward_filter(&cfg, &shape, &x_ref, &gy_ref)?;
    let mut dw = dev.alloc::<f32>(cfg.weight_elements() as usize)?;
    let mut db = dev.alloc::<f32>(cfg.out_channels as usize)?;
    ResNetConv.backward_filter(&dev, &shape, &x, &gy, &mut dw, &mut db)?;
    report.compare(
        "backward_filter dw vs host reference",
        &download(&dw)?,
        &want_dw,
        TOLERANCE,
    );
    report.compare(
        "backward_filter db vs host reference",
        &download(&db)?,
        &want_db.unwrap_or_default(),
        TOLERANCE,
    );
    half_precision_forward(&dev, &shape, &mut rng, &mut report)?;
    Ok(report.exit_code())
}

/// The f16 layer through `forward` (tensor cores) in NCHW and NHWC, and the backward passes
/// in both layouts, against the reference on the same f16-rounded inputs.
fn half_precision_forward(
    dev: &SimBackend,
    shape: &ConvShape,
    rng: &mut Rng,
    report: &mut Report,
) -> Result<(), Box<dyn std::error::Error>> {
    let cfg = ResNetConvF16::CONFIG;
    let dims = cfg.check_shape(shape, false)?;
    let mut data = |len: usize| -> Vec<f64> {
        rng.vec(len, -1.0, 1.0)
            .iter()
            .map(|&v| f16::from_f64(v).to_f64())
            .collect()
    };
    let (x, w, b) = (
        data(dims.input_len(&cfg)),
        data(cfg.weight_elements() as usize),
        data(cfg.out_channels as usize),
    );
    let want = reference::forward(&cfg, shape, &x, &w, Some(&b))?;
    let upload = |v: &[f64]| dev.upload(&v.iter().map(|&e| f16::from_f64(e)).collect::<Vec<_>>());
    let download = |buf: &DeviceBuffer<SimBackend, f16>| -> Result<Vec<f64>, LaunchError> {
        Ok(dev.download(buf)?.iter().map(|v| v.to_f64()).collect())
    };
    let bias = upload(&b)?;

    let mut y = dev.alloc::<f16>(dims.output_len(&cfg))?;
    ResNetConvF16.forward(dev, shape, &upload(&x)?, &upload(&w)?, &bias, &mut y)?;
    report.compare(
        "f16 forward (tensor-core implicit GEMM, NCHW) y vs host reference",
        &download(&y)?,
        &want,
        TOLERANCE_F16,
    );

    let (n, c, o) = (shape.batch as usize, 16, 32);
    let (h, wd) = (shape.height as usize, shape.width as usize);
    let x_last = upload(&to_channels_last(&x, [n, c, h, wd]))?;
    let w_last = upload(&to_channels_last(&w, [o, c, 3, 3]))?;
    let want_last = to_channels_last(&want, [n, o, dims.out_h as usize, dims.out_w as usize]);
    let mut y_last = dev.alloc::<f16>(dims.output_len(&cfg))?;
    ResNetConvNhwc.forward(dev, shape, &x_last, &w_last, &bias, &mut y_last)?;
    report.compare(
        "f16 forward (tensor-core implicit GEMM, NHWC) y vs host reference",
        &download(&y_last)?,
        &want_last,
        TOLERANCE_F16,
    );

    let (oh, ow) = (dims.out_h as usize, dims.out_w as usize);
    let gy = data(dims.output_len(&cfg));
    let gy_last = upload(&to_channels_last(&gy, [n, o, oh, ow]))?;
    let mut dx = dev.alloc::<f16>(dims.input_len(&cfg))?;
    ResNetConvNhwc.backward_data(dev, shape, &gy_last, &w_last, &mut dx)?;
    let want_dx = reference::backward_data(&cfg, shape, &gy, &w)?;
    report.compare(
        "f16 backward_data (tensor-core implicit GEMM, NHWC) dx vs host reference",
        &download(&dx)?,
        &to_channels_last(&want_dx, [n, c, h, wd]),
        TOLERANCE_F16,
    );
    let (want_dw, want_db) = reference::backward_filter(&cfg, shape, &x, &gy)?;
    let mut dw = dev.alloc::<f16>(cfg.weight_elements() as usize)?;
    let mut db = dev.alloc::<f16>(o)?;
    ResNetConvNhwc.backward_filter(dev, shape, &x_last, &gy_last, &mut dw, &mut db)?;
    report.compare(
        "f16 backward_filter (tensor-core implicit GEMM, NHWC) dw vs host reference",
        &download(&dw)?,
        &to_channels_last(&want_dw, [o, c, 3, 3]),
        TOLERANCE_F16,
    );
    report.compare(
        "f16 backward_filter (NHWC) db vs host reference",
        &download(&db)?,
        &want_db.unwrap_or_default(),
        TOLERANCE_F16,
    );

    // The NCHW backward passes of halves go through channels-last copies of their operands.
    let mut dx = dev.alloc::<f16>(dims.input_len(&cfg))?;
    let (gy_nchw, w_nchw) = (upload(&gy)?, upload(&w)?);
    ResNetConvF16.backward_data(dev, shape, &gy_nchw, &w_nchw, &mut dx)?;
    report.compare(
        "f16 backward_data (channels-last copies + tensor-core implicit GEMM, NCHW) dx vs host \
         reference",
        &download(&dx)?,
        &want_dx,
        TOLERANCE_F16,
    );
    let mut dw = dev.alloc::<f16>(cfg.weight_elements() as usize)?;
    ResNetConvF16.backward_filter(dev, shape, &upload(&x)?, &gy_nchw, &mut dw, &mut db)?;
    report.compare(
        "f16 backward_filter (channels-last copies + tensor-core implicit GEMM, NCHW) dw vs \
         host reference",
        &download(&dw)?,
        &want_dw,
        TOLERANCE_F16,
    );
    let log = dev.take_launch_log();
    let on_tensor_cores = |entry: &str| {
        log.iter()
            .filter(|r| r.entry == entry && r.counters.mma_instructions > 0)
            .count()
    };
    report.check(
        "the f16 forwards ran on tensor cores (NCHW: conv2d_implicit_gemm_channels_last after \
         the layout pre-passes, NHWC: conv2d_implicit_gemm)",
        on_tensor_cores("conv2d_implicit_gemm_channels_last") == 1
            && on_tensor_cores("conv2d_implicit_gemm") == 1,
    );
    report.check(
        "the NHWC backward passes ran their implicit GEMMs on tensor cores",
        on_tensor_cores("conv2d_bwd_data_implicit_gemm") == 1
            && on_tensor_cores("conv2d_bwd_filter_implicit_gemm") == 1,
    );
    report.check(
        "the NCHW backward passes ran their channels-last implicit GEMMs on tensor cores",
        on_tensor_cores("conv2d_bwd_data_implicit_gemm_channels_last") == 1
            && on_tensor_cores("conv2d_bwd_filter_implicit_gemm_channels_last") == 1,
    );
    Ok(())
}
