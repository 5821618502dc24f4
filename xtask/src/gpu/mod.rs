//! The GPU suite (`cargo xtask test --gpu`): every case of [`cases`] on the device under test
//! and on the interpreter, the same inputs on both, each output compared with the host
//! reference and the two compared with each other. The plumbing is generic over the backend,
//! so `cargo xtask test` runs it on the CPU with a second interpreter standing in for the GPU at
//! tiny sizes (the `dry_run` test below); on a GPU it runs on `CudaBackend` at real sizes.

// Without the CUDA backend only the dry-run tests use (parts of) this module.
#![cfg_attr(not(feature = "cuda"), allow(dead_code))]

#[cfg(feature = "cuda")]
pub mod bench;
pub mod cases;
mod tensor_cases;
pub mod timing;

use ptxforge_runtime::launch::{Backend, SimBackend};
use ptxforge_sim::Options;

pub use cases::Size;

/// One case's result.
#[derive(Debug)]
pub struct CaseReport {
    pub name: &'static str,
    /// Worst `|a − b| / max(1, |b|)`: device vs reference, interpreter vs reference, device vs
    /// interpreter.
    pub device_vs_reference: f64,
    pub interpreter_vs_reference: f64,
    pub device_vs_interpreter: f64,
    pub tolerance: f64,
    pub elements: usize,
}

impl CaseReport {
    pub fn passed(&self) -> bool {
        [
            self.device_vs_reference,
            self.interpreter_vs_reference,
            self.device_vs_interpreter,
        ]
        .iter()
        .all(|&e| e <= self.tolerance)
    }
}

fn worst(a: &[f64], b: &[f64]) -> f64 {
    if a.len() != b.len() {
        return f64::INFINITY;
    }
    a.iter()
        .zip(b)
        .map(|(x, y)| {
            if x.is_nan() || y.is_nan() {
                f64::INFINITY
            } else if x == y {
                0.0
            } else {
                (x - y).abs() / y.abs().max(1.0)
            }
        })
        .fold(0.0, f64::max)
}

/// Runs every case on `dev` and on the interpreter (every check on at tiny sizes; checks off at
/// full sizes, where the interpreter only provides the second opinion).
pub fn run_suite<B: Backend>(dev: &B, size: Size) -> Result<Vec<CaseReport>, String> {
    let sim = match size {
        Size::Tiny => SimBackend::new(),
        Size::Full => SimBackend::with_options(Options::unchecked()),
    };
    cases::all::<B>()
        .into_iter()
        .map(|(name, case)| {
            let out = case(dev, &sim, size).map_err(|e| format!("{name}: {e}"))?;
            Ok(CaseReport {
                name,
                device_vs_reference: worst(&out.device, &out.reference),
                interpreter_vs_reference: worst(&out.interpreter, &out.reference),
                device_vs_interpreter: worst(&out.device, &out.interpreter),
                tolerance: out.tolerance,
                elements: out.reference.len(),
            })
        })
        .collect()
}

/// The suite's report as a table, and whether every case passed.
pub fn report(reports: &[CaseReport]) -> (String, bool) {
    let mut text = String::from(
        "| case | elements | device vs reference | interpreter vs reference | device vs interpreter | tolerance | |\n|---|---|---|---|---|---|---|\n",
    );
    for r in reports {
        text.push_str(&format!(
            "| {} | {} | {:.2e} | {:.2e} | {:.2e} | {:.0e} | {} |\n",
            r.name,
            r.elements,
            r.device_vs_reference,
            r.interpreter_vs_reference,
            r.device_vs_interpreter,
            r.tolerance,
            if r.passed() { "ok" } else { "FAILED" }
        ));
    }
    (text, reports.iter().all(CaseReport::passed))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The GPU suite's plumbing on the CPU: a second interpreter stands in for the device.
    #[test]
    fn dry_run() {
        let stand_in = SimBackend::new();
        let reports = run_suite(&stand_in, Size::Tiny).expect("suite runs");
        assert_eq!(reports.len(), cases::all::<SimBackend>().len());
        let (table, ok) = report(&reports);
        eprintln!("{table}");
        assert!(ok, "{table}");
        for r in &reports {
            assert!(r.elements > 0, "{}", r.name);
            // Two interpreters on the same inputs agree exactly.
            assert_eq!(r.device_vs_interpreter, 0.0, "{}", r.name);
        }
    }

    #[test]
    fn a_wrong_output_fails_the_comparison() {
        assert_eq!(worst(&[1.0, 2.0], &[1.0, 2.0]), 0.0);
        assert!(worst(&[1.0, 2.5], &[1.0, 2.0]) > 0.2);
        assert!(worst(&[f64::NAN], &[1.0]).is_infinite());
        assert!(worst(&[1.0], &[1.0, 2.0]).is_infinite());
    }
}
