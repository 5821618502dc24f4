//! The NF4 kernels' memory behaviour, from the interpreter's counters (checks on):
//!
//! - GEMV (`m ≤ 8`): global load efficiency (bytes requested ÷ 32-byte sectors moved) ≥ 0.9 for
//!   aligned and ragged `k`. The packed weights are read 16 bytes per lane, contiguous across
//!   the warp; activations 32 consecutive elements per request; broadcast absmax reads count
//!   each lane's bytes, which can lift the ratio above 1.
//! - Backward GEMV (`m ≤ 8`): packed bytes 32 consecutive per warp request, activations
//!   coalesced; the same ≥ 0.9 bound, with conflict-free shared memory.
//! - Tiled forward and backward: ≤ 1.1 shared-memory wavefronts per request over the whole
//!   launch (staging, code-table lookups and the inner loop are all designed for one; under
//!   double quantisation the tensor-core GEMMs' lookups of the shared absmax map take random
//!   codes, so those few requests may conflict).
//! - Tiled forward and backward on tensor cores (f16/bf16 and tf32), including packed rows that
//!   are not 4-byte multiples (`k % 8 ≠ 0`) and double-quantised absmax: global load efficiency
//!   ≥ 0.9 (packed codes staged by `cp.async`, absmax and their codes read a sector at a time).
#![cfg(feature = "sim")]

use half::{bf16, f16};
use ptxforge_runtime::arch::Arch;
use ptxforge_runtime::launch::{Backend, LaunchRecord, SimBackend};
use ptxforge_runtime::templates::nf4::launch::{self as nf4_launch, DeviceWeights, Nf4Activation};
use ptxforge_runtime::templates::nf4::{quantize, Nf4Config, Nf4DoubleQuant};
use ptxforge_runtime::templates::testing::{HostFloat, SplitMix64};
use ptxforge_runtime::templates::KernelFamily;
use ptxforge_runtime::DType;

/// Runs forward and backward once and returns the launch log.
fn launches<T: Nf4Activation + HostFloat>(cfg: &Nf4Config, m: u32) -> Vec<LaunchRecord> {
    let ptx = cfg.compile().unwrap().ptx;
    let dev = SimBackend::new();
    let mut rng = SplitMix64::new(u64::from(cfg.k));
    let q = quantize(
        &rng.vec_f32((cfg.n * cfg.k) as usize, -1.0, 1.0),
        cfg.block as usize,
    )
    .unwrap();
    let w = if cfg.double_quant {
        DeviceWeights::upload_double_quant(&dev, &Nf4DoubleQuant::new(&q)).unwrap()
    } else {
        DeviceWeights::upload(&dev, &q).unwrap()
    };
    let values = |len: u32, rng: &mut SplitMix64| -> Vec<T> {
        rng.vec_f64(len as usize, -1.0, 1.0)
            .into_iter()
            .map(T::from_f64)
            .collect()
    };
    let a = dev.upload(&values(m * cfg.k, &mut rng)).unwrap();
    let mut c = dev.upload(&values(m * cfg.n, &mut rng)).unwrap();
    nf4_launch::forward(cfg, &dev, &ptx, m, &a, &w, &mut c).unwrap();
    let mut g_a = dev.upload(&values(m * cfg.k, &mut rng)).unwrap();
    nf4_launch::backward_input(cfg, &dev, &ptx, m, &c, &w, &mut g_a).unwrap();
    dev.take_launch_log()
}

/// Prints the per-launch figures the benchmarks quote: thread instructions per output, global
/// load efficiency, shared bank-conflict factor and ldmatrix wavefronts per 8×8 matrix.
fn report_tiled(label: &str, r: &LaunchRecord, outputs: u32) {
    let c = &r.counters;
    eprintln!(
        "{label} {}: instr/output {:.1}, global load eff {:.3} ({} requests), shared conflict \
         factor {:.3}, ldmatrix wf/matrix {:.2}, cp.async requests {}",
        r.entry,
        c.instructions.total() as f64 / f64::from(outputs),
        c.global_load_efficiency(),
        c.global_load_requests,
        c.shared_bank_conflict_factor(),
        c.ldmatrix_wavefronts_per_matrix(),
        c.cp_async_requests,
    );
    eprintln!(
        "    ld eff {:.3} ({} req, {} sectors, {} bytes), cp.async eff {:.3} ({} req, {} sectors)",
        c.ld_global_efficiency(),
        c.global_load_requests,
        c.global_load_sectors,
        c.global_load_bytes,
        c.cp_async_load_efficiency(),
        c.cp_async_requests,
        c.cp_async_sectors,
    );
}

fn report(label: &str, r: &LaunchRecord) {
    let c = &r.counters;
    eprintln!(
        "{label} {}: global load requests {} efficiency {:.3}; shared requests {} wavefronts/request {:.3}",
        r.entry,
        c.global_load_requests,
        c.global_load_efficiency(),
        c.shared_requests,
        c.shared_wavefronts_per_request()
    );
}

#[test]
fn gemv_loads_are_coalesced() {
    for (m, k, dtype, double_quant) in [
        (1, 1024, DType::F16, false),
        (1, 1024, DType::F32, false),
        (8, 2048, DType::BF16, true),
        (1, 1002, DType::F16, false),
        (4, 1002, DType::F32, true),
    ] {
        let cfg = Nf4Config {
            dtype,
            double_quant,
            ..Nf4Config::new(32, k)
        };
        let log = match dtype {
            DType::F16 => launches::<f16>(&cfg, m),
            DType::BF16 => launches::<bf16>(&cfg, m),
            _ => launches::<f32>(&cfg, m),
        };
        assert_eq!(log[0].entry, "nf4_gemv");
        assert_eq!(log[1].entry, "nf4_backward_gemv");
        for gemv in &log {
            report(&format!("m={m} k={k} {dtype} dq={double_quant}"), gemv);
            let eff = gemv.counters.global_load_efficiency();
            assert!(
                eff >= 0.9,
                "{}: global load efficiency {eff:.3} < 0.9 for m={m} k={k}",
                gemv.entry
            );
            assert!(gemv.counters.shared_wavefronts_per_request() <= 1.1);
        }
    }
}

#[test]
fn tiled_shared_memory_is_conflict_free() {
    for (dtype, double_quant) in [(DType::F32, false), (DType::BF16, true)] {
        let cfg = Nf4Config {
            dtype,
            double_quant,
            ..Nf4Config::new(96, 160)
        };
        let log = match dtype {
            DType::BF16 => launches::<bf16>(&cfg, 80),
            _ => launches::<f32>(&cfg, 80),
        };
        assert_eq!(log[0].entry, "nf4_gemm");
        assert_eq!(log[1].entry, "nf4_backward_input");
        for r in &log {
            report(&format!("m=80 n=96 k=160 {dtype} dq={double_quant}"), r);
            let wf = r.counters.shared_wavefronts_per_request();
            assert!(
                wf <= 1.1,
                "{}: {wf:.3} shared wavefronts per request",
                r.entry
            );
        }
    }
}

#[test]
fn tensor_core_tiled_loads_read_whole_sectors() {
    let m = 80;
    let mut low: Vec<String> = Vec::new();
    for (n, k, block, double_quant, dtype, allow_tf32) in [
        (128, 512, 64, false, DType::F16, false),
        (128, 228, 64, false, DType::F16, false), // k / 2 = 114: rows 2-byte aligned
        (96, 230, 128, false, DType::BF16, false), // k / 2 = 115: rows byte aligned
        (128, 512, 64, true, DType::F16, false),
        (96, 230, 32, true, DType::BF16, false),
        (128, 512, 64, false, DType::F32, true),
        (128, 228, 64, false, DType::F32, true),
        (128, 512, 32, true, DType::F32, true),
    ] {
        let cfg = Nf4Config {
            block,
            double_quant,
            dtype,
            allow_tf32,
            arch: Arch::Sm80,
            ..Nf4Config::new(n, k)
        };
        let log = match dtype {
            DType::F16 => launches::<f16>(&cfg, m),
            DType::BF16 => launches::<bf16>(&cfg, m),
            _ => launches::<f32>(&cfg, m),
        };
        let label =
            format!("m={m} n={n} k={k} b={block} {dtype} dq={double_quant} tf32={allow_tf32}");
        for (r, outputs) in log.iter().zip([m * n, m * k]) {
            report_tiled(&label, r, outputs);
            assert!(
                r.counters.mma_instructions > 0,
                "{label} {}: no mma",
                r.entry
            );
        }
        for r in &log {
            let eff = r.counters.global_load_efficiency();
            if eff < 0.9 {
                low.push(format!(
                    "{label} {}: global load efficiency {eff:.3}",
                    r.entry
                ));
            }
        }
    }
    assert!(low.is_empty(), "{}", low.join("\n"));
}
