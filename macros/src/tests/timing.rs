//! Expansion time per family on representative configurations: `cargo xtask bench` runs
//! `cargo test -p ptxforge-macros --release -- --ignored expansion_time --nocapture` and parses
//! the `expansion_ms <family> <median_ms>` lines (goal: ≤ 50 ms per invocation).

use std::time::Instant;

use proc_macro2::TokenStream;
use quote::quote;

use crate::expand::expand;
use crate::family::{Attention, Conv2d, Family, Moe, Nf4};

/// Timed runs per family (after one warm-up run).
const RUNS: usize = 9;

/// The median wall time of [`RUNS`] expansions of `#[<family>(attr)] pub struct Kernel;`, in ms.
fn median_ms<F: Family>(attr: &TokenStream) -> f64 {
    let item = quote!(
        pub struct Kernel;
    );
    let once = || {
        let start = Instant::now();
        let out = expand::<F>(attr.clone(), item.clone());
        let elapsed = start.elapsed().as_secs_f64() * 1e3;
        let text = out.to_string();
        assert!(!text.contains("compile_error"), "{text}");
        elapsed
    };
    once();
    let mut times: Vec<f64> = (0..RUNS).map(|_| once()).collect();
    times.sort_by(f64::total_cmp);
    times[RUNS / 2]
}

#[test]
#[ignore = "timing; run by `cargo xtask bench` in release"]
fn expansion_time() {
    let cases = [
        (
            "moe",
            median_ms::<Moe>(&quote!(
                experts = 8,
                top_k = 2,
                hidden = 4096,
                expert_dim = 14336,
                capacity_factor = 1.25,
                dtype = bf16,
                ffn = swiglu,
                arch = sm_80
            )),
        ),
        (
            "nf4",
            median_ms::<Nf4>(&quote!(
                n = 4096,
                k = 4096,
                block = 64,
                double_quant = true,
                dtype = bf16,
                arch = sm_80
            )),
        ),
        (
            "attention",
            median_ms::<Attention>(&quote!(
                head_dim = 128,
                causal = true,
                dtype = bf16,
                arch = sm_80
            )),
        ),
        (
            "conv",
            median_ms::<Conv2d>(&quote!(
                in_channels = 64,
                out_channels = 128,
                kernel = 3,
                padding = 1,
                bias = true,
                dtype = f16,
                arch = sm_80
            )),
        ),
    ];
    for (family, ms) in cases {
        println!("expansion_ms {family} {ms:.2}");
    }
}
