//! A Mixtral-style mixture-of-experts layer, scaled down (8 experts, top-2, SwiGLU experts,
//! bf16), on the CPU backend: the PTX was built at compile time by `#[moe_kernel]`; the
//! interpreter runs it with every sanitizer check on, and the output is compared with the
//! plain-Rust reference (computed in f64 on the same bf16-rounded inputs).
//!
//! Run: `cargo run --example moe_layer`. Exits non-zero if any comparison fails.

mod common;

use std::process::ExitCode;

use half::bf16;
use ptxforge::moe::reference::{self, ExpertWeights};
use ptxforge::prelude::*;

use common::{Report, Rng};

/// Mixtral 8×7B's routing (8 experts, top-2, SwiGLU) with hidden 4096 → 64 and expert_dim
/// 14336 → 96. Dropless, as Mixtral inference runs (no `capacity_factor`: every routed pair is
/// kept; `capacity_factor = 1.25` would opt into Switch/GShard-style capacity-limited routing).
#[moe_kernel(experts = 8, top_k = 2, hidden = 64, expert_dim = 96,
             dtype = bf16, ffn = swiglu, arch = sm_80)]
#[derive(Debug)]
pub struct Mixtral;

const TOKENS: u32 = 64;
/// bf16 storage (8-bit mantissa) of inputs, the SwiGLU intermediate and the output; the
/// kernels accumulate in f32.
const TOLERANCE: f64 = 2e-2;

fn main() -> Result<ExitCode, Box<dyn std::error::Error>> {
    let cfg = Mixtral::CONFIG;
    let (t, e, h, f) = (
        TOKENS as usize,
        cfg.experts as usize,
        cfg.hidden as usize,
        cfg.expert_dim as usize,
    );
    println!(
        "moe_layer: {} tokens, {} experts, top-{}, hidden {}, expert_dim {}, {}, {}; PTX {} bytes, \
         entries {}",
        t,
        e,
        cfg.top_k,
        h,
        f,
        cfg.ffn,
        cfg.dtype,
        Mixtral::PTX.len(),
        [
            Mixtral::GATING.name,
            Mixtral::PERMUTE.name,
            Mixtral::EXPERT_SWIGLU_UP.name,
            Mixtral::EXPERT_SWIGLU_DOWN.name,
            Mixtral::UNPERMUTE.name,
        ]
        .join(", ")
    );

    // Random inputs, rounded to bf16; the reference sees exactly the rounded values.
    let mut rng = Rng::new(2024);
    let round = |v: Vec<f64>| -> (Vec<bf16>, Vec<f64>) {
        let stored: Vec<bf16> = v.iter().map(|&x| bf16::from_f64(x)).collect();
        let seen = stored.iter().map(|x| x.to_f64()).collect();
        (stored, seen)
    };
    let scale = 1.0 / (h as f64).sqrt();
    let (x, x_ref) = round(rng.vec(t * h, -1.0, 1.0));
    let (logits, logits_ref) = round(rng.vec(t * e, -3.0, 3.0));
    let (w1, w1_ref) = round(rng.vec(e * f * h, -scale, scale));
    let (w3, w3_ref) = round(rng.vec(e * f * h, -scale, scale));
    let down = 1.0 / (f as f64).sqrt();
    let (w2, w2_ref) = round(rng.vec(e * h * f, -down, down));

    // The layer on the CPU backend, through the generated wrapper.
    let dev = SimBackend::new();
    let x = dev.upload(&x)?;
    let logits = dev.upload(&logits)?;
    let (w1, w3, w2) = (dev.upload(&w1)?, dev.upload(&w3)?, dev.upload(&w2)?);
    let mut out = dev.alloc::<bf16>(t * h)?;
    let stats = Mixtral.forward(&dev, TOKENS, &x, &logits, &w1, &w3, &w2, &mut out)?;
    let got: Vec<f64> = dev.download(&out)?.iter().map(|v| v.to_f64()).collect();

    // The host reference.
    let want = reference::forward(
        &cfg,
        &x_ref,
        &logits_ref,
        ExpertWeights::Swiglu {
            w1: &w1_ref,
            w3: &w3_ref,
            w2: &w2_ref,
        },
        t,
    )?;

    println!(
        "tokens per expert {:?}; dropped {}",
        stats.counts, stats.dropped
    );
    let mut report = Report::default();
    report.check(
        "routing (per-expert counts, no drops, expert indices) matches the reference",
        stats.counts == want.counts()
            && stats.dropped == 0
            && want.dropped() == 0
            && stats.indices == want.gating.indices,
    );
    report.compare(
        &format!("moe_layer out [{t}, {h}] bf16 vs host reference"),
        &got,
        &want.out,
        TOLERANCE,
    );
    Ok(report.exit_code())
}
