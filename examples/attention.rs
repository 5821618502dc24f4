//! Causal grouped-query attention (FlashAttention-2-style forward) on the CPU backend: 8 query
//! heads sharing 2 key/value heads, head_dim 64, f16, through the wrapper `#[attention_kernel]`
//! generated, compared with the naive host reference (f64 softmax on the same f16 inputs).
//!
//! Run: `cargo run --example attention`. Exits non-zero if any comparison fails.

mod common;

use std::process::ExitCode;

use half::f16;
use ptxforge::attention::reference;
use ptxforge::prelude::*;

use common::{Report, Rng};

/// Llama-style causal attention, f16 storage, f32 scores and accumulators.
#[attention_kernel(head_dim = 64, causal = true, dtype = f16, arch = sm_80)]
#[derive(Debug)]
pub struct CausalGqa;

/// O is rounded to f16 (11-bit mantissa).
const O_TOLERANCE: f64 = 1e-2;
/// LSE is stored as f32 for every dtype.
const LSE_TOLERANCE: f64 = 1e-5;

fn main() -> Result<ExitCode, Box<dyn std::error::Error>> {
    let cfg = CausalGqa::CONFIG;
    let shape = AttentionShape {
        batch: 1,
        heads_q: 8,
        heads_kv: 2,
        seq_q: 48,
        seq_kv: 48,
    };
    let d = cfg.head_dim;
    println!(
        "attention: batch {}, {} query heads / {} kv heads, seq {} × {}, head_dim {d}, causal {}, \
         {}; PTX {} bytes, entry {} (block {:?}, {} bytes of static shared memory)",
        shape.batch,
        shape.heads_q,
        shape.heads_kv,
        shape.seq_q,
        shape.seq_kv,
        cfg.causal,
        cfg.dtype,
        CausalGqa::PTX.len(),
        CausalGqa::FORWARD.name,
        CausalGqa::FORWARD.required_block.map(|b| (b.x, b.y, b.z)),
        CausalGqa::FORWARD.static_shared_bytes,
    );

    let mut rng = Rng::new(11);
    let mut half = |len: usize| -> (Vec<f16>, Vec<f64>) {
        let stored: Vec<f16> = rng
            .vec(len, -1.0, 1.0)
            .iter()
            .map(|&v| f16::from_f64(v))
            .collect();
        let seen = stored.iter().map(|v| v.to_f64()).collect();
        (stored, seen)
    };
    let (q, q_ref) = half(shape.q_len(d));
    let (k, k_ref) = half(shape.kv_len(d));
    let (v, v_ref) = half(shape.kv_len(d));

    let dev = SimBackend::new();
    let (q, k, v) = (dev.upload(&q)?, dev.upload(&k)?, dev.upload(&v)?);
    let mut o = dev.alloc::<f16>(shape.q_len(d))?;
    let mut lse = dev.alloc::<f32>(shape.lse_len())?;
    CausalGqa.forward(&dev, &shape, &q, &k, &v, &mut o, &mut lse, None)?;

    let scale = 1.0 / f64::from(d).sqrt();
    let want = reference::forward(&shape, d, &q_ref, &k_ref, &v_ref, cfg.causal, scale)?;
    let mut report = Report::default();
    let got_o: Vec<f64> = dev.download(&o)?.iter().map(|x| x.to_f64()).collect();
    report.compare(
        &format!("attention o [1, 8, 48, {d}] f16 vs host reference"),
        &got_o,
        &want.o,
        O_TOLERANCE,
    );
    let got_lse: Vec<f64> = dev.download(&lse)?.iter().map(|&x| f64::from(x)).collect();
    let want_lse: Vec<f64> = want.lse.iter().map(|&x| f64::from(x)).collect();
    report.compare(
        "attention lse [1, 8, 48] f32 vs host reference",
        &got_lse,
        &want_lse,
        LSE_TOLERANCE,
    );
    Ok(report.exit_code())
}
