//! Timing for `cargo xtask bench --gpu`: warm-up runs, then the median of repeats, each run
//! timed by a [`Clock`] (CUDA events on the GPU's stream; the wall clock for the CPU dry run).

use ptxforge_runtime::launch::{Backend, LaunchError};
use ptxforge_runtime::templates::nf4::Nf4Config;
use ptxforge_runtime::templates::CompileCached;

/// Times one run of `f` in milliseconds.
pub trait Clock {
    fn time_ms(&self, f: &mut dyn FnMut() -> Result<(), String>) -> Result<f64, String>;
}

/// The host's wall clock (for backends that run launches to completion: the CPU dry run).
#[derive(Debug)]
#[cfg_attr(not(test), allow(dead_code))]
pub struct WallClock;

impl Clock for WallClock {
    fn time_ms(&self, f: &mut dyn FnMut() -> Result<(), String>) -> Result<f64, String> {
        let start = std::time::Instant::now();
        f()?;
        Ok(start.elapsed().as_secs_f64() * 1e3)
    }
}

/// Repetitions of one measurement.
#[derive(Debug, Clone, Copy)]
pub struct Repeats {
    pub warmup: usize,
    pub timed: usize,
}

/// The median of `repeats.timed` timings of `f`, after `repeats.warmup` untimed runs.
pub fn median_ms(
    clock: &dyn Clock,
    repeats: Repeats,
    f: &mut dyn FnMut() -> Result<(), String>,
) -> Result<f64, String> {
    for _ in 0..repeats.warmup {
        f()?;
    }
    let mut times = (0..repeats.timed.max(1))
        .map(|_| clock.time_ms(f))
        .collect::<Result<Vec<f64>, String>>()?;
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// One NF4 GEMV measurement at `m = 1`.
#[derive(Debug, Clone, Copy)]
pub struct GemvTiming {
    pub n: u32,
    pub k: u32,
    pub median_ms: f64,
    /// Bytes the kernel must move: packed codes, absmax, the activation row and the output.
    pub bytes: u64,
}

impl GemvTiming {
    /// Achieved bandwidth in GB/s.
    pub fn gb_per_s(&self) -> f64 {
        self.bytes as f64 / (self.median_ms * 1e-3) / 1e9
    }
}

/// Times the `m = 1` forward of an `n × k` NF4 weight (f32 activations) on `dev`.
pub fn nf4_gemv<B: Backend>(
    dev: &B,
    clock: &dyn Clock,
    repeats: Repeats,
    (n, k): (u32, u32),
) -> Result<GemvTiming, String> {
    let e = |e: LaunchError| e.to_string();
    let handle = Nf4Config::new(n, k)
        .compile_cached()
        .map_err(|e| e.to_string())?;
    let weight: Vec<f32> = (0..n as usize * k as usize)
        .map(|i| ((i % 31) as f32 - 15.0) / 16.0)
        .collect();
    let weights = handle.upload_weights(dev, &weight).map_err(e)?;
    let a = dev.upload(&vec![0.5f32; k as usize]).map_err(e)?;
    let mut c = dev.alloc::<f32>(n as usize).map_err(e)?;
    let median_ms = median_ms(clock, repeats, &mut || {
        handle.forward(dev, 1, &a, &weights, &mut c).map_err(e)
    })?;
    let elements = u64::from(n) * u64::from(k);
    let block = u64::from(handle.config().block);
    let bytes = elements / 2 + elements / block * 4 + u64::from(k) * 4 + u64::from(n) * 4;
    Ok(GemvTiming {
        n,
        k,
        median_ms,
        bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ptxforge_runtime::launch::SimBackend;

    /// The benchmark's plumbing on the CPU: the same timing path on the interpreter, tiny.
    #[test]
    fn gemv_timing_dry_run() {
        let dev = SimBackend::new();
        let t = nf4_gemv(
            &dev,
            &WallClock,
            Repeats {
                warmup: 1,
                timed: 3,
            },
            (64, 128),
        )
        .expect("times");
        assert!(t.median_ms > 0.0 && t.gb_per_s() > 0.0);
        assert_eq!(t.bytes, 64 * 128 / 2 + 64 * 128 / 64 * 4 + 128 * 4 + 64 * 4);
        // Warm-up plus timed runs, each one launch.
        assert_eq!(dev.take_launch_log().len(), 4);
    }

    #[test]
    fn median_of_repeats() {
        let mut calls = 0;
        let times = std::cell::RefCell::new(vec![5.0, 1.0, 3.0]);
        struct Fake<'a>(&'a std::cell::RefCell<Vec<f64>>);
        impl Clock for Fake<'_> {
            fn time_ms(&self, f: &mut dyn FnMut() -> Result<(), String>) -> Result<f64, String> {
                f()?;
                Ok(self.0.borrow_mut().pop().unwrap_or(0.0))
            }
        }
        let m = median_ms(
            &Fake(&times),
            Repeats {
                warmup: 2,
                timed: 3,
            },
            &mut || {
                calls += 1;
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(m, 3.0);
        assert_eq!(calls, 5);
    }
}
