//! The CUDA-core conv kernels' counter bars on one launch: instructions per output at most a
//! given bar, global load efficiency ≥ [`LOAD_FLOOR`], shared wavefronts ≤ [`SHARED_FACTOR`] ×
//! the fewest the requests could take; the figures are printed first.

// Each test binary uses its own subset.
#![allow(dead_code)]

use ptxforge_runtime::launch::LaunchRecord;

/// Lowest global load efficiency (bytes used / sectors moved).
pub const LOAD_FLOOR: f64 = 0.9;
/// Most shared wavefronts per the fewest possible.
pub const SHARED_FACTOR: f64 = 1.05;

/// Prints `r`'s figures over `outputs` elements and checks the bars (`instructions`: the most
/// instructions per output, when given).
pub fn check(label: &str, r: &LaunchRecord, outputs: u64, instructions: Option<f64>) {
    let c = &r.counters;
    let per_output = report(label, r, outputs);
    assert!(
        c.global_load_efficiency() >= LOAD_FLOOR,
        "{label}: load efficiency {:.3} < {LOAD_FLOOR}",
        c.global_load_efficiency()
    );
    assert!(
        c.shared_bank_conflict_factor() <= SHARED_FACTOR,
        "{label}: shared factor {:.3} > {SHARED_FACTOR}",
        c.shared_bank_conflict_factor()
    );
    if let Some(bar) = instructions {
        assert!(
            per_output <= bar,
            "{label}: {per_output:.1} instructions per output > {bar:.1}"
        );
    }
}

/// Prints `r`'s figures over `outputs` elements; returns the instructions per output.
pub fn report(label: &str, r: &LaunchRecord, outputs: u64) -> f64 {
    let c = &r.counters;
    let per_output = c.instructions.total() as f64 / outputs as f64;
    eprintln!(
        "{label}: instructions {} ({per_output:.1}/output), load eff {:.3} ({:.2} sectors/req), \
         store eff {:.3}, shared factor {:.3} ({:.3} wavefronts/req), barriers {}",
        c.instructions.total(),
        c.global_load_efficiency(),
        c.global_load_sectors as f64 / c.global_load_requests.max(1) as f64,
        c.global_store_efficiency(),
        c.shared_bank_conflict_factor(),
        c.shared_wavefronts_per_request(),
        c.barriers,
    );
    per_output
}
