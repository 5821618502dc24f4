//! A ResNet-style 3×3 convolution with bias on the CPU backend: forward through the direct and
//! the im2col + GEMM paths, then both backward passes (data and filter + bias), through the
//! wrappers `#[conv2d_kernel]` generated, each compared with the host reference (f64 on the
//! same f32 inputs).
//!
//! Run: `cargo run --example conv2d`. Exits non-zero if any comparison fails.

mod common;

use std::process::ExitCode;

use ptxforge::conv::reference;
use ptxforge::prelude::*;

use common::{Report, Rng};

/// 16 → 32 channels, 3×3, padding 1, stride 1, with bias, f32.
#[conv2d_kernel(in_channels = 16, out_channels = 32, kernel = 3, padding = 1, bias = true,
                dtype = f32, arch = sm_80)]
#[derive(Debug)]
pub struct ResNetConv;

/// f32 accumulation in a different order than the f64 reference.
const TOLERANCE: f64 = 1e-5;

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
    Ok(report.exit_code())
}
