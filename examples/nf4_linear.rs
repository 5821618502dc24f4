//! A QLoRA-style frozen linear layer with NF4 weights on the CPU backend: a random weight is
//! quantised with the host NF4 helpers (bitsandbytes-compatible, double-quantised absmax),
//! uploaded, and run forward (the GEMV path for a few rows, the tiled path for a batch) and
//! backward (gradient with respect to the input) through the wrappers `#[nf4_gemm]` generated.
//! Every result is compared with the host reference on the same dequantised weight.
//!
//! Run: `cargo run --example nf4_linear`. Exits non-zero if any comparison fails.

mod common;

use std::process::ExitCode;

use half::bf16;
use ptxforge::nf4::{quantize, reference, DeviceWeights, Nf4DoubleQuant};
use ptxforge::prelude::*;

use common::{Report, Rng};

/// A 256 → 128 projection, 64-value quantisation blocks with double quantisation, bf16
/// activations.
#[nf4_gemm(n = 128, k = 256, block = 64, double_quant = true, dtype = bf16, arch = sm_80)]
#[derive(Debug)]
pub struct Proj;

/// Outputs rounded to bf16 (8-bit mantissa); the kernels accumulate in f32.
const TOLERANCE: f64 = 1e-2;

fn main() -> Result<ExitCode, Box<dyn std::error::Error>> {
    let cfg = Proj::CONFIG;
    let (n, k) = (cfg.n as usize, cfg.k as usize);
    println!(
        "nf4_linear: W [{n}, {k}] in NF4, block {}, double_quant {}, activations {}; PTX {} \
         bytes, entries {}, {}, {}",
        cfg.block,
        cfg.double_quant,
        cfg.dtype,
        Proj::PTX.len(),
        Proj::GEMV.name,
        Proj::GEMM.name,
        Proj::BACKWARD_INPUT.name,
    );

    // Quantise a random weight on the host; the reference uses the weight the kernel sees.
    let mut rng = Rng::new(7);
    let w: Vec<f32> = rng
        .vec(n * k, -1.0, 1.0)
        .into_iter()
        .map(|v| v as f32)
        .collect();
    let single = quantize(&w, cfg.block as usize)?;
    let double = Nf4DoubleQuant::new(&single);
    let seen_by_kernel = double.to_weights()?;

    let dev = SimBackend::new();
    let weights = DeviceWeights::upload_double_quant(&dev, &double)?;
    let mut report = Report::default();

    // Forward, for a decode step (m = 4: GEMV) and a prefill batch (m = 32: tiled).
    for m in [4usize, 32] {
        let (a, a_ref) = activations(&mut rng, m * k);
        let a = dev.upload(&a)?;
        let mut c = dev.alloc::<bf16>(m * n)?;
        Proj.forward(&dev, m as u32, &a, &weights, &mut c)?;
        let want = reference::forward(&a_ref, m, &seen_by_kernel, n, k)?;
        let path = if m <= 8 {
            Proj::GEMV.name
        } else {
            Proj::GEMM.name
        };
        report.compare(
            &format!("forward c [{m}, {n}] ({path}) vs host reference"),
            &widen(&dev.download(&c)?),
            &want.iter().map(|&v| f64::from(v)).collect::<Vec<_>>(),
            TOLERANCE,
        );
    }

    // Backward with respect to the input.
    let m = 32usize;
    let (g_c, g_c_ref) = activations(&mut rng, m * n);
    let g_c = dev.upload(&g_c)?;
    let mut g_a = dev.alloc::<bf16>(m * k)?;
    Proj.backward_input(&dev, m as u32, &g_c, &weights, &mut g_a)?;
    let want = reference::backward_input(&g_c_ref, m, &seen_by_kernel, n, k)?;
    report.compare(
        &format!("backward_input g_a [{m}, {k}] vs host reference"),
        &widen(&dev.download(&g_a)?),
        &want.iter().map(|&v| f64::from(v)).collect::<Vec<_>>(),
        TOLERANCE,
    );
    Ok(report.exit_code())
}

/// Random bf16 activations and the f32 values the reference multiplies.
fn activations(rng: &mut Rng, len: usize) -> (Vec<bf16>, Vec<f32>) {
    let stored: Vec<bf16> = rng
        .vec(len, -1.0, 1.0)
        .iter()
        .map(|&v| bf16::from_f64(v))
        .collect();
    let seen = stored.iter().map(|v| v.to_f32()).collect();
    (stored, seen)
}

fn widen(values: &[bf16]) -> Vec<f64> {
    values.iter().map(|v| v.to_f64()).collect()
}
