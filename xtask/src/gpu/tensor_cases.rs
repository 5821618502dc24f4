//! The GPU suite's tensor-core cases: each family in f16 or bf16 on the `mma.sync` /
//! `ldmatrix` / `cp.async` paths the run-time handles choose on sm_80+ (conv's NCHW forward
//! through channels-last copies and on chunks of pixels, its NHWC forward, its NCHW backward
//! passes; attention's tensor-core forward; MoE's SwiGLU experts; NF4's tiled GEMM). Inputs
//! are rounded to the element type once, so the device, the interpreter and the f64 host
//! reference all see the same values.

use super::cases::{attention_case, err, on, rounded, values, Case, CaseElem, Outputs, Size};
use half::{bf16, f16};
use ptxforge_runtime::launch::{Backend, SimBackend};
use ptxforge_runtime::templates::conv::reference::to_channels_last;
use ptxforge_runtime::templates::conv::{self, Conv2dConfig, ConvDims, ConvShape, Layout};
use ptxforge_runtime::templates::moe::launch::ExpertWeights;
use ptxforge_runtime::templates::moe::{self, Ffn, MoeConfig};
use ptxforge_runtime::templates::nf4::{self, Nf4Config};
use ptxforge_runtime::templates::testing::to_f64;
use ptxforge_runtime::templates::CompileCached;
use ptxforge_runtime::DType;

/// Every tensor-core case, by name.
pub fn all<B: Backend>() -> Vec<(&'static str, Case<B>)> {
    vec![
        (
            "conv2d f16 nchw 3x3 forward (tensor cores)",
            conv_nchw_forward::<B>,
        ),
        (
            "conv2d f16 nchw 1x1 forward (tensor cores)",
            conv_nchw_pointwise::<B>,
        ),
        (
            "conv2d bf16 nhwc 3x3 forward (tensor cores)",
            conv_nhwc_forward::<B>,
        ),
        (
            "conv2d f16 nchw 3x3 backward-data (tensor cores)",
            conv_backward_data::<B>,
        ),
        (
            "conv2d f16 nchw 3x3 backward-filter (tensor cores)",
            conv_backward_filter::<B>,
        ),
        (
            "attention f16 causal forward (tensor cores)",
            attention_forward::<B>,
        ),
        ("moe bf16 swiglu forward (tensor cores)", moe_swiglu::<B>),
        ("nf4 f16 tiled m=33 (tensor cores)", nf4_tiled::<B>),
    ]
}

const fn shape(batch: u32, height: u32, width: u32) -> ConvShape {
    ConvShape {
        batch,
        height,
        width,
    }
}

/// Which conv pass a case runs.
#[derive(Clone, Copy)]
enum Pass {
    Forward,
    BackwardData,
    BackwardFilter,
}

/// One conv pass of `cfg` (its layout: the device tensors; NHWC is transposed from the NCHW
/// reference) through the run-time handle's `forward`, `backward_data` or `backward_filter`.
fn conv_case<B: Backend, T: CaseElem>(
    (dev, sim): (&B, &SimBackend),
    cfg: Conv2dConfig,
    shape: ConvShape,
    pass: Pass,
) -> Result<Outputs, String> {
    let cfg = Conv2dConfig {
        dtype: T::DTYPE,
        ..cfg
    };
    let handle = cfg.compile_cached().map_err(err)?;
    let dims = cfg.check_shape(&shape, false).map_err(err)?;
    let [n, h, w] = [shape.batch, shape.height, shape.width].map(|v| v as usize);
    let [oh, ow] = [dims.out_h, dims.out_w].map(|v| v as usize);
    let (c_in, c_out) = (cfg.in_channels as usize, cfg.out_channels as usize);
    let filter = [
        c_out,
        cfg.in_per_group() as usize,
        cfg.kernel_h as usize,
        cfg.kernel_w as usize,
    ];
    // The device's layout of an NCHW tensor of dimensions `d`.
    let device = |v: &[f64], d: [usize; 4]| match cfg.layout {
        Layout::Nchw => v.to_vec(),
        Layout::Nhwc => to_channels_last(v, d),
    };
    let narrow = |v: Vec<f64>| -> Vec<T> { v.into_iter().map(T::from_f64).collect() };
    let (x, x_ref) = rounded::<T>(dims.input_len(&cfg), 21, 1.0);
    let (wt, w_ref) = rounded::<T>(ConvDims::weight_len(&cfg), 22, 0.5);
    let (gy, gy_ref) = rounded::<T>(dims.output_len(&cfg), 23, 1.0);
    let (x, wt, gy) = (
        narrow(device(&to_f64(&x), [n, c_in, h, w])),
        narrow(device(&to_f64(&wt), filter)),
        narrow(device(&to_f64(&gy), [n, c_out, oh, ow])),
    );
    let (want, dims_of_want) = match pass {
        Pass::Forward => (
            conv::reference::forward(&cfg, &shape, &x_ref, &w_ref, None),
            [n, c_out, oh, ow],
        ),
        Pass::BackwardData => (
            conv::reference::backward_data(&cfg, &shape, &gy_ref, &w_ref),
            [n, c_in, h, w],
        ),
        Pass::BackwardFilter => (
            conv::reference::backward_filter(&cfg, &shape, &x_ref, &gy_ref).map(|(dw, _)| dw),
            filter,
        ),
    };
    let want = device(&want.map_err(err)?, dims_of_want);
    macro_rules! run_on {
        ($d:expr) => {
            on($d, |d| {
                let (xb, wb, gyb) = (d.upload(&x)?, d.upload(&wt)?, d.upload(&gy)?);
                let mut out = d.alloc::<T>(want.len())?;
                match pass {
                    Pass::Forward => handle.forward(d, &shape, &xb, &wb, None, &mut out)?,
                    Pass::BackwardData => handle.backward_data(d, &shape, &gyb, &wb, &mut out)?,
                    Pass::BackwardFilter => {
                        handle.backward_filter(d, &shape, &xb, &gyb, &mut out, None)?
                    }
                };
                d.download(&out)
            })
        };
    }
    Ok(Outputs {
        device: run_on!(dev)?,
        interpreter: run_on!(sim)?,
        reference: want,
        tolerance: T::TOLERANCE,
    })
}

/// The tiny conv layer (16 → 24 channels, batch 2, 6 × 5) or, on a GPU, `channels` at
/// `side × side`, batch 4 (the interpreter runs it too), with a `kernel × kernel` filter (padding 1 for a 3 × 3).
fn layer(size: Size, kernel: u32, channels: (u32, u32), side: u32) -> (Conv2dConfig, ConvShape) {
    let ((c_in, c_out), shape) = match size {
        Size::Tiny => ((16, 24), shape(2, 6, 5)),
        Size::Full => (channels, shape(4, side, side)),
    };
    let pad = kernel / 2;
    let cfg = Conv2dConfig::new(c_in, c_out, kernel).with_padding(pad, pad);
    (cfg, shape)
}

/// Conv's NCHW 3 × 3: the forward through the channels-last copies and the chunked GEMM on
/// 128-pixel tiles.
fn conv_nchw_forward<B: Backend>(dev: &B, sim: &SimBackend, size: Size) -> Result<Outputs, String> {
    let (cfg, shape) = layer(size, 3, (64, 128), 56);
    conv_case::<B, f16>((dev, sim), cfg, shape, Pass::Forward)
}

/// Conv's NCHW 1 × 1: `conv2d_implicit_gemm_pointwise` (`x` in chunks of 8 pixels, so the
/// tiny image is 4 × 6).
fn conv_nchw_pointwise<B: Backend>(
    dev: &B,
    sim: &SimBackend,
    size: Size,
) -> Result<Outputs, String> {
    let (cfg, full) = layer(size, 1, (256, 64), 56);
    let shape = match size {
        Size::Tiny => shape(2, 4, 6),
        Size::Full => full,
    };
    conv_case::<B, f16>((dev, sim), cfg, shape, Pass::Forward)
}

/// Conv's NHWC 3 × 3 forward in bf16 (16-byte `cp.async` chunks of both operands).
fn conv_nhwc_forward<B: Backend>(dev: &B, sim: &SimBackend, size: Size) -> Result<Outputs, String> {
    let (cfg, shape) = layer(size, 3, (128, 128), 28);
    let cfg = cfg.with_layout(Layout::Nhwc);
    conv_case::<B, bf16>((dev, sim), cfg, shape, Pass::Forward)
}

/// Conv's NCHW 3 × 3 backward-data through the channels-last copies.
fn conv_backward_data<B: Backend>(
    dev: &B,
    sim: &SimBackend,
    size: Size,
) -> Result<Outputs, String> {
    let (cfg, shape) = layer(size, 3, (128, 128), 28);
    conv_case::<B, f16>((dev, sim), cfg, shape, Pass::BackwardData)
}

/// Conv's NCHW 3 × 3 backward-filter through the channels-last copies (split over the pixels
/// where the grid is small).
fn conv_backward_filter<B: Backend>(
    dev: &B,
    sim: &SimBackend,
    size: Size,
) -> Result<Outputs, String> {
    let (cfg, shape) = layer(size, 3, (64, 64), 28);
    conv_case::<B, f16>((dev, sim), cfg, shape, Pass::BackwardFilter)
}

/// Attention's f16 causal forward on tensor cores.
fn attention_forward<B: Backend>(dev: &B, sim: &SimBackend, size: Size) -> Result<Outputs, String> {
    attention_case::<B, f16>(dev, sim, size)
}

/// MoE's bf16 SwiGLU layer (tensor-core expert GEMMs), through the caller-workspace path on
/// the device and the allocating one on the interpreter.
fn moe_swiglu<B: Backend>(dev: &B, sim: &SimBackend, size: Size) -> Result<Outputs, String> {
    let (experts, hidden, expert_dim, tokens) = match size {
        Size::Tiny => (4, 32, 64, 5u32),
        Size::Full => (8, 512, 1024, 128),
    };
    let mut cfg = MoeConfig::new(experts, 2, hidden, expert_dim);
    cfg.dtype = DType::BF16;
    cfg.ffn = Ffn::Swiglu;
    let handle = cfg.compile_cached().map_err(err)?;
    let (e, h, f) = (experts as usize, hidden as usize, expert_dim as usize);
    let t = tokens as usize;
    // Weights scaled by 1/√fan-in keep every activation near 1.
    let (x, x_ref) = rounded::<bf16>(t * h, 41, 1.0);
    let (logits, logits_ref) = rounded::<bf16>(t * e, 42, 1.0);
    let (w1, w1_ref) = rounded::<bf16>(e * f * h, 43, 1.0 / (h as f64).sqrt());
    let (w3, w3_ref) = rounded::<bf16>(e * f * h, 44, 1.0 / (h as f64).sqrt());
    let (w2, w2_ref) = rounded::<bf16>(e * h * f, 45, 1.0 / (f as f64).sqrt());
    let weights = moe::reference::ExpertWeights::Swiglu {
        w1: &w1_ref,
        w3: &w3_ref,
        w2: &w2_ref,
    };
    let want = moe::reference::forward(&cfg, &x_ref, &logits_ref, weights, t).map_err(err)?;
    macro_rules! run_on {
        ($d:expr, $with_workspace:expr) => {
            on($d, |d| {
                let (xb, lb) = (d.upload(&x)?, d.upload(&logits)?);
                let (w1b, w3b, w2b) = (d.upload(&w1)?, d.upload(&w3)?, d.upload(&w2)?);
                let mut out = d.alloc::<bf16>(t * h)?;
                let weights = ExpertWeights::Swiglu {
                    w1: &w1b,
                    w3: &w3b,
                    w2: &w2b,
                };
                if $with_workspace {
                    let mut ws = handle.workspace(d, tokens)?;
                    handle.forward_with(d, tokens, &mut ws, &xb, &lb, weights, &mut out)?;
                } else {
                    handle.forward(d, tokens, &xb, &lb, weights, &mut out)?;
                }
                d.download(&out)
            })
        };
    }
    Ok(Outputs {
        device: run_on!(dev, true)?,
        interpreter: run_on!(sim, false)?,
        reference: want.out,
        tolerance: <bf16 as CaseElem>::TOLERANCE,
    })
}

/// NF4's tiled GEMM with f16 activations (tensor cores), 33 rows.
fn nf4_tiled<B: Backend>(dev: &B, sim: &SimBackend, size: Size) -> Result<Outputs, String> {
    let (m, n, k) = match size {
        Size::Tiny => (33u32, 64u32, 128u32),
        Size::Full => (33, 1024, 1024),
    };
    let mut cfg = Nf4Config::new(n, k);
    cfg.dtype = DType::F16;
    let handle = cfg.compile_cached().map_err(err)?;
    let w = values((n * k) as usize, 51);
    let (a, a_ref) = rounded::<f16>((m * k) as usize, 52, 1.0);
    let quantized = nf4::quantize(&w, 64).map_err(err)?;
    let a32: Vec<f32> = a_ref.iter().map(|&v| v as f32).collect();
    let (m, n, k) = (m as usize, n as usize, k as usize);
    let want = nf4::reference::forward(&a32, m, &quantized, n, k).map_err(err)?;
    macro_rules! run_on {
        ($d:expr) => {
            on($d, |d| {
                let weights = handle.upload_weights(d, &w)?;
                let ab = d.upload(&a)?;
                let mut c = d.alloc::<f16>(m * n)?;
                handle.forward(d, m as u32, &ab, &weights, &mut c)?;
                d.download(&c)
            })
        };
    }
    Ok(Outputs {
        device: run_on!(dev)?,
        interpreter: run_on!(sim)?,
        reference: want.into_iter().map(f64::from).collect(),
        // The dequantised weights enter the f16 `mma` rounded to f16, an error that grows
        // with √K (3.6e-3 at K = 128 in the dry run against the exact f32 weights).
        tolerance: 1e-2 * (k as f64 / 128.0).sqrt(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each case runs the tensor-core path it names on the interpreter: its launches issue
    /// `mma`, and its tiny shape's outputs are not all zero.
    #[test]
    fn every_case_runs_on_tensor_cores() {
        for (name, case) in all::<SimBackend>() {
            let (stand_in, sim) = (SimBackend::new(), SimBackend::new());
            let out = case(&stand_in, &sim, Size::Tiny).unwrap_or_else(|e| panic!("{name}: {e}"));
            let mma: u64 = stand_in
                .take_launch_log()
                .iter()
                .map(|r| r.counters.mma_instructions)
                .sum();
            assert!(mma > 0, "{name}: no mma");
            assert!(out.device.iter().any(|&v| v != 0.0), "{name}: all zero");
        }
    }
}
