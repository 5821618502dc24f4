#![cfg(feature = "sim")]
//! Where the expert GEMMs' instructions go: per-kind interpreter counts per output element of
//! the tensor-core entries (f16/bf16 `mma.m16n8k16`, f32 with `allow_tf32` on tf32
//! `mma.m16n8k8`) and shared-memory wavefronts ÷ their conflict-free minimum of the CUDA-core
//! entries (f32 on sm_80, bf16 on sm_70), on the shapes BENCHMARKS.md reports: the families table's SwiGLU layer (8
//! experts, top-2, H = 64, F = 96, 256 tokens) and the tf32 matmul row (one expert, top-1,
//! 128 tokens, H = 256, F = 128: a 128 × 128 × 256 GEMM). Numerics are checked elsewhere
//! (`moe_numerics`, `tf32_numerics`); these runs have every interpreter check on.

use half::bf16;
use ptxforge_runtime::arch::Arch;
use ptxforge_runtime::launch::{Backend, Element, LaunchRecord, SimBackend};
use ptxforge_runtime::templates::moe::kernels::{TILE_M, TILE_N};
use ptxforge_runtime::templates::moe::launch::{forward, ExpertWeights};
use ptxforge_runtime::templates::moe::{Ffn, MoeConfig};
use ptxforge_runtime::templates::testing::SplitMix64;
use ptxforge_runtime::templates::KernelFamily;
use ptxforge_runtime::DType;

/// Runs the layer on random data and returns the expert launches with their output counts.
fn expert_launches<T: Element>(
    cfg: &MoeConfig,
    tokens: u32,
    cast: fn(f32) -> T,
) -> Vec<(LaunchRecord, u64)> {
    let ptx = cfg.compile().expect("compiles").ptx;
    let dev = SimBackend::new();
    let mut rng = SplitMix64::new(31);
    let mut up = |n: u32, r: f32| {
        let v: Vec<T> = rng
            .vec_f32(n as usize, -r, r)
            .into_iter()
            .map(cast)
            .collect();
        dev.upload(&v).expect("upload")
    };
    let (e, h, f) = (cfg.experts, cfg.hidden, cfg.expert_dim);
    let x = up(tokens * h, 1.0);
    let logits = up(tokens * e, 2.0);
    let out = dev
        .alloc::<T>((tokens * cfg.out_width()) as usize)
        .expect("alloc");
    let (w1, w3, w2);
    let weights = match cfg.ffn {
        Ffn::Linear => {
            w1 = up(e * f * h, 0.1);
            ExpertWeights::Linear { w: &w1 }
        }
        Ffn::Swiglu => {
            (w1, w3, w2) = (up(e * f * h, 0.1), up(e * f * h, 0.1), up(e * h * f, 0.1));
            ExpertWeights::Swiglu {
                w1: &w1,
                w3: &w3,
                w2: &w2,
            }
        }
    };
    forward(cfg, &dev, &ptx, tokens, &x, &logits, weights, &out).expect("forward");
    let pairs = u64::from(tokens * cfg.top_k);
    dev.take_launch_log()
        .into_iter()
        .filter(|r| r.entry.starts_with("moe_expert"))
        .map(|r| {
            let width = if r.entry == "moe_expert_swiglu_down" {
                h
            } else {
                f
            };
            (r, u64::from(width) * pairs)
        })
        .collect()
}

/// Prints instructions per output (total and by kind), load efficiency and shared wavefronts
/// per minimum; returns instructions per output.
fn report(what: &str, rec: &LaunchRecord, outputs: u64) -> f64 {
    let c = &rec.counters;
    let per_output = c.instructions.total() as f64 / outputs as f64;
    let kinds: Vec<String> = c
        .instructions
        .fields()
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(name, n)| format!("{name} {:.2}", *n as f64 / outputs as f64))
        .collect();
    eprintln!(
        "{what} {}: instructions/output {per_output:.2} [{}], load eff {:.3}, smem wf/min {:.3}",
        rec.entry,
        kinds.join(", "),
        c.global_load_efficiency(),
        c.shared_bank_conflict_factor(),
    );
    per_output
}

fn swiglu(dtype: DType, allow_tf32: bool) -> MoeConfig {
    MoeConfig {
        ffn: Ffn::Swiglu,
        dtype,
        allow_tf32,
        arch: Arch::Sm80,
        ..MoeConfig::new(8, 2, 64, 96)
    }
}

/// Asserts instructions per output of each entry ≤ its bound (`(entry, bound)` pairs).
fn assert_within(what: &str, launches: &[(LaunchRecord, u64)], bounds: &[(&str, f64)]) {
    for (rec, outputs) in launches {
        let per_output = report(what, rec, *outputs);
        let &(_, bound) = bounds
            .iter()
            .find(|(entry, _)| *entry == rec.entry)
            .unwrap_or_else(|| panic!("{what}: no bound for {}", rec.entry));
        assert!(
            per_output <= bound,
            "{what} {}: {per_output:.2} instructions/output, bound {bound}",
            rec.entry
        );
    }
}

/// tf32: every staged operand element is converted by `cvt.rna.tf32.f32` exactly once per
/// block (where it lands in shared memory), so on the full-tile 128 × 128 × 256 GEMM the
/// conversions are `(TILE_M + TILE_N) · K` per `TILE_M × TILE_N` outputs (8 per output; 16
/// when every warp rounds the fragment registers it loads), and the GEMM stays below 44
/// instructions per output (Triton 3.9's tf32 matmul, which skips the conversion, issues
/// 52.3 on it in BENCHMARKS.md). The SwiGLU layer's entries are held to their measured cost.
#[test]
fn tf32_gemm_cost() {
    let (k, n) = (256, 128);
    let cfg = MoeConfig {
        dtype: DType::F32,
        allow_tf32: true,
        arch: Arch::Sm80,
        ..MoeConfig::new(1, 1, k, n)
    };
    let launches = expert_launches::<f32>(&cfg, 128, |v| v);
    for (rec, outputs) in &launches {
        let staged = outputs * u64::from((TILE_M + TILE_N) * k) / u64::from(TILE_M * TILE_N);
        assert_eq!(
            rec.counters.instructions.conversion, staged,
            "{}",
            rec.entry
        );
    }
    assert_within(
        "tf32 128x128x256",
        &launches,
        &[("moe_expert_linear", 44.0)],
    );
    assert_rounding_conflict_free(&launches);
    let launches = expert_launches::<f32>(&swiglu(DType::F32, true), 256, |v| v);
    let bounds = [
        ("moe_expert_swiglu_up", 56.0),
        ("moe_expert_swiglu_down", 34.0),
    ];
    assert_within("swiglu tf32", &launches, &bounds);
    assert_rounding_conflict_free(&launches);
}

/// The in-place tf32 rounding's `ld`/`st.shared.v4` (each thread its own landed pieces) take
/// the fewest wavefronts their quarter-warps allow: each quarter-warp holds one chunk column
/// of 8 rows, whose padded rows start on distinct bank groups.
fn assert_rounding_conflict_free(launches: &[(LaunchRecord, u64)]) {
    for (rec, _) in launches {
        let factor = rec.counters.shared_bank_conflict_factor();
        assert!(
            (factor - 1.0).abs() < 1e-9,
            "{}: {factor:.3} × the fewest shared wavefronts",
            rec.entry
        );
    }
}

/// bf16 SwiGLU experts on `mma.m16n8k16`: held to their measured cost (56.1 / 26.0 before
/// the hoisted ring addressing, the epilogue's per-column tests and shared row address, and
/// the SwiGLU product formed only for stored outputs; 38.4 / 20.8 on the 64 × 64 tile with
/// 64-row items, 40.7 / 21.9 on the 128-row tiles (128 × 64 for both entries here), whose
/// items leave about half of each block's rows empty on these 64-row bins).
#[test]
fn half_gemm_cost() {
    let launches = expert_launches::<bf16>(&swiglu(DType::BF16, false), 256, bf16::from_f32);
    let bounds = [
        ("moe_expert_swiglu_up", 40.8),
        ("moe_expert_swiglu_down", 22.0),
    ];
    assert_within("swiglu bf16", &launches, &bounds);
}

/// f32 on CUDA cores (sm_80 without `allow_tf32`): the shared wavefronts per request above 1
/// are the `v4` requests' minimum, not bank conflicts: wavefronts ÷ the fewest the same
/// requests could take stay ≤ 1.05.
#[test]
fn cuda_core_f32_shared_wavefronts() {
    let launches = expert_launches::<f32>(&swiglu(DType::F32, false), 256, |v| v);
    assert_cuda_core_conflict_free("swiglu f32", &launches);
}

/// bf16 on CUDA cores (sm_70 has no bf16 `mma`): the loader covers whole 32-byte sectors, 4
/// quads of 4 elements in each of 8 rows per warp, whose transposing stores met 2 to a bank
/// (quads `q` and `q + 2`) until odd quad pairs' rows moved 8 rows along: 1.059 × the fewest
/// wavefronts before, 1.000 after. Instructions per output held to the measured 368.29 / 220.16
/// (368.73 / 220.48 before the staging slot was computed once per block and the work item
/// read as one vector).
#[test]
fn cuda_core_bf16_sm70_shared_wavefronts() {
    let cfg = MoeConfig {
        arch: Arch::Sm70,
        ..swiglu(DType::BF16, false)
    };
    let launches = expert_launches::<bf16>(&cfg, 256, bf16::from_f32);
    for (rec, _) in &launches {
        assert_eq!(rec.counters.instructions.tensor_core, 0, "{}", rec.entry);
    }
    assert_cuda_core_conflict_free("swiglu bf16 sm_70", &launches);
    let bounds = [
        ("moe_expert_swiglu_up", 368.5),
        ("moe_expert_swiglu_down", 220.3),
    ];
    assert_within("swiglu bf16 sm_70", &launches, &bounds);
}

/// Every CUDA-core expert launch: `v4` shared requests (more than one wavefront each at
/// least) and wavefronts ≤ 1.05 × the fewest the same requests could take.
fn assert_cuda_core_conflict_free(what: &str, launches: &[(LaunchRecord, u64)]) {
    for (rec, outputs) in launches {
        report(what, rec, *outputs);
        let c = &rec.counters;
        let factor = c.shared_bank_conflict_factor();
        assert!(
            c.shared_min_wavefronts > c.shared_requests,
            "{}: v4 requests",
            rec.entry
        );
        assert!(
            factor <= 1.05,
            "{}: {factor:.3} wavefronts/minimum",
            rec.entry
        );
    }
}
