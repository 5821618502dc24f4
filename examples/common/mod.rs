//! Shared by the examples: deterministic random data and the comparison against the host
//! reference that every example prints (and exits non-zero on).

#![allow(dead_code)] // each example uses part of this

use std::process::ExitCode;

/// SplitMix64: deterministic data without a dependency.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// `len` values uniform in `[lo, hi)`.
    pub fn vec(&mut self, len: usize, lo: f64, hi: f64) -> Vec<f64> {
        (0..len)
            .map(|_| lo + (hi - lo) * (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64)
            .collect()
    }
}

/// The outcome of every comparison an example made.
#[derive(Default)]
pub struct Report {
    failed: bool,
}

impl Report {
    /// Compares `got` with the reference `want` and prints one line:
    /// `<what>: max abs error …, max rel error … (tolerance …) PASS|FAIL`, where the relative
    /// error is the largest absolute error over the largest reference magnitude and must not
    /// exceed `tolerance`.
    pub fn compare(&mut self, what: &str, got: &[f64], want: &[f64], tolerance: f64) {
        assert_eq!(got.len(), want.len(), "{what}: length mismatch");
        let max_abs = got
            .iter()
            .zip(want)
            .map(|(a, b)| {
                let e = (a - b).abs();
                if e.is_nan() {
                    f64::INFINITY
                } else {
                    e
                }
            })
            .fold(0.0, f64::max);
        let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let max_rel = if scale > 0.0 {
            max_abs / scale
        } else {
            max_abs
        };
        let pass = max_rel <= tolerance;
        self.failed |= !pass;
        println!(
            "{what}: max abs error {max_abs:.3e}, max rel error {max_rel:.3e} (tolerance \
             {tolerance:.0e}) {}",
            if pass { "PASS" } else { "FAIL" }
        );
    }

    /// Records a check that is not a numeric comparison.
    pub fn check(&mut self, what: &str, pass: bool) {
        self.failed |= !pass;
        println!("{what}: {}", if pass { "PASS" } else { "FAIL" });
    }

    pub fn exit_code(&self) -> ExitCode {
        if self.failed {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        }
    }
}
