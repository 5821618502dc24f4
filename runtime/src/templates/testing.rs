//! Seeded random inputs for tests of the host references and, later, of the kernels.
//!
//! A tiny SplitMix64 (Steele, Lea, Flood 2014): deterministic across platforms, no dependency.
//! Also the one-line summary of a launch's interpreter counters the kernel tests print.

/// A SplitMix64 generator.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub const fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)` with 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.next_f64()
    }

    /// Uniform in `[0, n)` (`n ≥ 1`; slightly biased for huge `n`, fine for tests).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// `len` values uniform in `[lo, hi)`, as f32.
    pub fn vec_f32(&mut self, len: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..len)
            .map(|_| self.uniform(f64::from(lo), f64::from(hi)) as f32)
            .collect()
    }

    /// `len` values uniform in `[lo, hi)`, as f64.
    pub fn vec_f64(&mut self, len: usize, lo: f64, hi: f64) -> Vec<f64> {
        (0..len).map(|_| self.uniform(lo, hi)).collect()
    }
}

/// A host float type kernels store (f16, bf16, f32, f64), for converting test data to and from
/// the `f64` the references compute in.
pub trait HostFloat: Copy {
    fn to_f64(self) -> f64;
    /// Rounds to nearest even.
    fn from_f64(x: f64) -> Self;
}

impl HostFloat for f64 {
    fn to_f64(self) -> f64 {
        self
    }
    fn from_f64(x: f64) -> Self {
        x
    }
}

impl HostFloat for f32 {
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
    fn from_f64(x: f64) -> Self {
        x as f32
    }
}

impl HostFloat for half::f16 {
    fn to_f64(self) -> f64 {
        half::f16::to_f64(self)
    }
    fn from_f64(x: f64) -> Self {
        half::f16::from_f64(x)
    }
}

impl HostFloat for half::bf16 {
    fn to_f64(self) -> f64 {
        half::bf16::to_f64(self)
    }
    fn from_f64(x: f64) -> Self {
        half::bf16::from_f64(x)
    }
}

/// Widens a slice to f64.
pub fn to_f64<T: HostFloat>(xs: &[T]) -> Vec<f64> {
    xs.iter().map(|x| x.to_f64()).collect()
}

/// Rounds a slice of f64 to `T`.
pub fn from_f64<T: HostFloat>(xs: &[f64]) -> Vec<T> {
    xs.iter().map(|&x| T::from_f64(x)).collect()
}

/// Largest `|a − b| / (atol + rtol · |b|)`; ≤ 1 means every element is within tolerance.
pub fn max_scaled_error(a: &[f64], b: &[f64], atol: f64, rtol: f64) -> f64 {
    assert_eq!(a.len(), b.len(), "length mismatch");
    a.iter()
        .zip(b)
        .map(|(x, y)| {
            let e = (x - y).abs() / (atol + rtol * y.abs());
            if e.is_nan() {
                f64::INFINITY
            } else {
                e
            }
        })
        .fold(0.0, f64::max)
}

/// Largest `|got − want|` over the largest `|want|` (at least 1e-30); NaN counts as infinite.
pub fn error_relative_to_max(got: &[f64], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len(), "length mismatch");
    let scale = want.iter().fold(1e-30f64, |m, v| m.max(v.abs()));
    got.iter()
        .zip(want)
        .map(|(a, b)| {
            let e = (a - b).abs();
            if e.is_nan() {
                f64::INFINITY
            } else {
                e
            }
        })
        .fold(0.0, f64::max)
        / scale
}

/// One launch's interpreter counters on one line, per output of the layer (`outputs`):
/// instructions per output, tensor-core share, mma count, global load efficiency, cp.async
/// bytes, ldmatrix wavefronts per request (and per 8×8 matrix), shared wavefronts per request
/// and the shared bank-conflict factors (wavefronts ÷ the fewest possible) of ordinary shared
/// requests and of `cp.async` writes.
#[cfg(feature = "sim")]
pub fn counters_summary(record: &crate::launch::LaunchRecord, outputs: f64) -> String {
    let c = &record.counters;
    let total = c.instructions.total();
    format!(
        "{:<30} instructions/output {:.1}, tensor-core share {:.4}, mma {}, global load \
         efficiency {:.3} ({} load requests), cp.async bytes {}, ldmatrix wavefronts/request \
         {:.3} ({:.3} per 8x8 matrix), shared wavefronts/request {:.3} (bank-conflict factor \
         {:.3}), cp.async bank-conflict factor {:.3}",
        record.entry,
        total as f64 / outputs,
        c.instructions.tensor_core as f64 / total as f64,
        c.mma_instructions,
        c.global_load_efficiency(),
        c.global_load_requests,
        c.cp_async_bytes,
        c.ldmatrix_wavefronts_per_request(),
        c.ldmatrix_wavefronts_per_request() / 4.0,
        c.shared_wavefronts_per_request(),
        c.shared_bank_conflict_factor(),
        c.cp_async_bank_conflict_factor(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_in_range() {
        let mut a = SplitMix64::new(7);
        let mut b = SplitMix64::new(7);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        // Reference value of SplitMix64 with seed 0.
        assert_eq!(SplitMix64::new(0).next_u64(), 0xE220_A839_7B1D_CDAF);
        let v = a.vec_f32(1000, -2.0, 3.0);
        assert!(v.iter().all(|x| (-2.0..3.0).contains(x)));
        assert!((0..1000).all(|_| a.below(5) < 5));
    }
}
