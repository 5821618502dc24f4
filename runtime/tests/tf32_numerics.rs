#![cfg(feature = "sim")]
//! The `allow_tf32` paths in the interpreter (every check on: a finding fails the launch)
//! against the f64 host references, over fixed and fuzzed shapes.
//!
//! Tolerance ([`tf32::tolerance`], documented in `templates/tf32.rs`): tf32 keeps 10 fraction
//! bits, so each operand errs by ≤ 2⁻¹¹ relative and a length-K reduction of random-sign data
//! by about `2⁻¹¹·√K` of its scale; the tests require `max|got − exact| ≤ 2⁻¹⁰ · √K ·
//! max|exact|`.
//!
//! Each case also proves tf32 really ran: the interpreter's mma count equals the count the
//! tile schedule predicts for `m16n8k8` (so a path that silently stayed on CUDA cores fails),
//! the error against the exact reference is at least [`TF32_FLOOR`] (exact f32 stays near
//! 2⁻²⁴), and where the reference can model the tensor-core inputs exactly (linear experts:
//! operands rounded with `cvt.rna` semantics) the kernel matches that model to f32 accuracy.
//! Before sm_80 `allow_tf32` must silently give the CUDA-core f32 result.

use ptxforge_runtime::arch::Arch;
use ptxforge_runtime::launch::{Backend, LaunchRecord, SimBackend};
use ptxforge_runtime::templates::moe::kernels::{EXPERT_SWIGLU_DOWN, TILE_M, TILE_N};
use ptxforge_runtime::templates::moe::launch::{ExpertWeights, MoeLaunch};
use ptxforge_runtime::templates::moe::{reference, Ffn, MoeConfig};
use ptxforge_runtime::templates::testing::{error_relative_to_max, to_f64, SplitMix64};
use ptxforge_runtime::templates::tf32::{self, round_tf32};
use ptxforge_runtime::templates::KernelFamily;
use ptxforge_runtime::DType;

/// Least error (relative to max) a tf32 result shows against the exact reference on random
/// data: 2⁻¹⁶, 32× below tf32's 2⁻¹¹ and 256× above exact f32's 2⁻²⁴.
const TF32_FLOOR: f64 = 1.0 / 65536.0;
/// Error of f32 accumulation (the kernel against a reference of the same rounded operands).
const F32_TOL: f64 = 1e-5;

/// Reduction depth of one tf32 pipeline stage (64 bytes of f32) and mma per 16 × 8 output
/// block per stage: two `m16n8k8`.
const TF32_TILE_K: u32 = 16;
const MMA_PER_STAGE: u64 = 2;

/// What one MoE case produced: routed rows of the expert outputs (kernel, exact reference,
/// reference of tf32-rounded inputs), the launch log and the per-expert counts.
struct MoeRun {
    got: Vec<f64>,
    exact: Vec<f64>,
    tf32_model: Vec<f64>,
    log: Vec<LaunchRecord>,
    counts: Vec<u32>,
}

fn run_moe(cfg: &MoeConfig, tokens: u32, seed: u64) -> MoeRun {
    let (e, h, f) = (
        cfg.experts as usize,
        cfg.hidden as usize,
        cfg.expert_dim as usize,
    );
    let t = tokens as usize;
    let mut rng = SplitMix64::new(seed);
    let x = rng.vec_f32(t * h, -1.0, 1.0);
    let logits = rng.vec_f32(t * e, -4.0, 4.0);
    let (sh, sf) = (1.0 / (h as f32).sqrt(), 1.0 / (f as f32).sqrt());
    let w1 = rng.vec_f32(e * f * h, -sh, sh);
    let w3 = rng.vec_f32(e * f * h, -sh, sh);
    let w2 = rng.vec_f32(e * h * f, -2.0 * sf, 2.0 * sf);

    let dev = SimBackend::new();
    let ptx = cfg.compile().expect("compiles").ptx;
    let up = |v: &[f32]| dev.upload(v).expect("upload");
    let (x_dev, logits_dev) = (up(&x), up(&logits));
    let (w1_dev, w3_dev, w2_dev) = (up(&w1), up(&w3), up(&w2));
    let weights = match cfg.ffn {
        Ffn::Linear => ExpertWeights::Linear { w: &w1_dev },
        Ffn::Swiglu => ExpertWeights::Swiglu {
            w1: &w1_dev,
            w3: &w3_dev,
            w2: &w2_dev,
        },
    };
    let launch = MoeLaunch::new(cfg, &dev, &ptx, tokens).expect("valid launch");
    let ws = launch.workspace::<f32>().expect("workspace");
    let out = dev
        .alloc::<f32>(t * cfg.out_width() as usize)
        .expect("alloc");
    launch
        .forward_with(&ws, &x_dev, &logits_dev, weights, &out)
        .unwrap_or_else(|err| panic!("{cfg:?}: {err}"));
    let counts = ws.stats(&dev).expect("stats").counts;
    let got = to_f64(&dev.download(&ws.expert_out).expect("download"));

    let reference = |round: fn(f32) -> f32| {
        let r = |v: &[f32]| -> Vec<f64> { v.iter().map(|&a| f64::from(round(a))).collect() };
        let (w1, w3, w2) = (r(&w1), r(&w3), r(&w2));
        let weights = match cfg.ffn {
            Ffn::Linear => reference::ExpertWeights::Linear { w: &w1 },
            Ffn::Swiglu => reference::ExpertWeights::Swiglu {
                w1: &w1,
                w3: &w3,
                w2: &w2,
            },
        };
        let logits = to_f64(&logits);
        reference::forward(cfg, &r(&x), &logits, weights, t).expect("reference")
    };
    let exact = reference(|a| a);
    let modelled = reference(round_tf32);
    let filled = exact.permutation.filled_rows();
    let width = cfg.out_width() as usize;
    let routed = |rows: &[f64]| -> Vec<f64> {
        rows.chunks(width)
            .zip(&filled)
            .filter(|(_, &keep)| keep)
            .flat_map(|(row, _)| row.iter().copied())
            .collect()
    };
    MoeRun {
        got: routed(&got),
        exact: routed(&exact.expert_out),
        tf32_model: routed(&modelled.expert_out),
        log: dev.take_launch_log(),
        counts,
    }
}

/// The `m16n8k8` count of one expert launch: per routed row tile of every expert and per
/// 64-wide column tile, 4 warps × 8 accumulators × 2 mma per 16-deep stage, per weight.
fn expected_mma(counts: &[u32], n: u32, len: u32, weights: u64) -> u64 {
    let row_tiles: u64 = counts.iter().map(|&c| u64::from(c.div_ceil(TILE_M))).sum();
    let per_tile = 4 * 8 * MMA_PER_STAGE * u64::from(len.div_ceil(TF32_TILE_K));
    row_tiles * u64::from(n.div_ceil(TILE_N)) * per_tile * weights
}

/// Checks a tf32 MoE case; returns `(instructions per output, mma)` per expert entry.
fn check_moe_tf32(cfg: MoeConfig, tokens: u32, seed: u64) {
    let what = format!("{cfg:?}, tokens = {tokens}, seed {seed}");
    let run = run_moe(&cfg, tokens, seed);
    let k = match cfg.ffn {
        Ffn::Linear => cfg.hidden,
        Ffn::Swiglu => cfg.hidden + cfg.expert_dim,
    };
    let err = error_relative_to_max(&run.got, &run.exact);
    let tol = tf32::tolerance(k);
    eprintln!("{what}: error {err:.3e} (relative to max), tolerance {tol:.3e}");
    assert!(err <= tol, "{what}: error {err:e} > tf32 tolerance {tol:e}");
    assert!(
        err >= TF32_FLOOR,
        "{what}: error {err:e} is below tf32's: did the GEMM stay in f32?"
    );
    if cfg.ffn == Ffn::Linear {
        let model = error_relative_to_max(&run.got, &run.tf32_model);
        assert!(
            model <= F32_TOL,
            "{what}: off the tf32-rounded-operand reference by {model:e}"
        );
    }
    for rec in run.log.iter().filter(|r| r.entry.starts_with("moe_expert")) {
        let (n, len, weights) = match rec.entry.as_str() {
            EXPERT_SWIGLU_DOWN => (cfg.hidden, cfg.expert_dim, 1),
            "moe_expert_swiglu_up" => (cfg.expert_dim, cfg.hidden, 2),
            _ => (cfg.expert_dim, cfg.hidden, 1),
        };
        let c = &rec.counters;
        assert_eq!(
            c.mma_instructions,
            expected_mma(&run.counts, n, len, weights),
            "{what}: {} mma count",
            rec.entry
        );
        assert_eq!(
            c.mma_flops,
            c.mma_instructions * 2 * 16 * 8 * 8,
            "{what}: m16n8k8"
        );
    }
}

fn linear() -> MoeConfig {
    MoeConfig {
        allow_tf32: true,
        ..MoeConfig::new(4, 2, 72, 100)
    }
}

fn swiglu() -> MoeConfig {
    MoeConfig {
        ffn: Ffn::Swiglu,
        allow_tf32: true,
        capacity_factor: Some(1.25),
        ..MoeConfig::new(8, 2, 64, 96)
    }
}

#[test]
fn moe_linear_tf32() {
    check_moe_tf32(linear(), 100, 1);
}

#[test]
fn moe_swiglu_tf32() {
    check_moe_tf32(swiglu(), 128, 2);
}

/// Random experts, top-k, widths (reductions a multiple of 4 f32, outputs any width, odd ones
/// taking the single-element stores) and token counts.
#[test]
fn moe_tf32_fuzzed() {
    let mut rng = SplitMix64::new(77);
    for case in 0..4 {
        let experts = 1 + rng.below(6) as u32;
        let top_k = 1 + rng.below(u64::from(experts)) as u32;
        let hidden = 4 * (1 + rng.below(40) as u32);
        let ffn = if case % 2 == 0 {
            Ffn::Linear
        } else {
            Ffn::Swiglu
        };
        let expert_dim = match ffn {
            Ffn::Linear => 1 + rng.below(150) as u32,
            Ffn::Swiglu => 4 * (1 + rng.below(30) as u32),
        };
        let cfg = MoeConfig {
            ffn,
            allow_tf32: true,
            ..MoeConfig::new(experts, top_k, hidden, expert_dim)
        };
        let tokens = 1 + rng.below(90) as u32;
        check_moe_tf32(cfg, tokens, 100 + case);
    }
}

/// Before sm_80 `allow_tf32` is accepted and silently keeps the exact CUDA-core f32 GEMMs.
#[test]
fn moe_tf32_before_sm80_is_f32() {
    for ffn in Ffn::ALL {
        let cfg = MoeConfig {
            arch: Arch::Sm75,
            ffn,
            ..linear()
        };
        assert!(cfg.validate().is_ok());
        let run = run_moe(&cfg, 60, 3);
        let err = error_relative_to_max(&run.got, &run.exact);
        assert!(err <= F32_TOL, "{ffn}: {err:e}");
        assert!(run.log.iter().all(|r| r.counters.mma_instructions == 0));
    }
}

/// `allow_tf32` with another dtype is a configuration error naming `allow_tf32`.
#[test]
fn moe_tf32_needs_f32() {
    for dtype in [DType::F16, DType::BF16, DType::F64] {
        let cfg = MoeConfig { dtype, ..linear() };
        let errs = cfg.validate().expect_err("allow_tf32 with a non-f32 dtype");
        assert_eq!(errs.0[0].fields[0], "allow_tf32", "{dtype}");
    }
}

/// Interpreter counters of the expert GEMMs, f32 on sm_80, CUDA cores (`allow_tf32 = false`)
/// against tf32 tensor cores: instructions per output (thread-instructions, a warp's mma
/// counts 32, as BENCHMARKS.md), mma, `ldmatrix` wavefronts per x4 request (4.00 =
/// conflict-free, required), `cp.async` bytes per sector byte, global load efficiency. Shapes:
/// the Mixtral-like layer (8 experts, top-2, swiglu, H = 64, F = 96, 256 tokens, capacity
/// factor 1.25) and one expert over 128 tokens with H = 256, F = 128 — the 128 × 128 × 256
/// GEMM BENCHMARKS.md measures Triton's tf32 matmul on; every tile there is full, so its copies
/// must use every sector byte they fetch.
#[test]
fn moe_tf32_counters() {
    let square = MoeConfig {
        allow_tf32: true,
        ..MoeConfig::new(1, 1, 256, 128)
    };
    for (shape, tokens) in [(swiglu(), 256), (square, 128)] {
        for allow_tf32 in [false, true] {
            let cfg = MoeConfig {
                allow_tf32,
                ..shape
            };
            let run = run_moe(&cfg, tokens, 300);
            for rec in run.log.iter().filter(|r| r.entry.starts_with("moe_expert")) {
                let c = &rec.counters;
                let width = if rec.entry == EXPERT_SWIGLU_DOWN {
                    cfg.hidden
                } else {
                    cfg.expert_dim
                };
                let rows: u64 = run.counts.iter().map(|&n| u64::from(n)).sum();
                let outputs = u64::from(width) * rows;
                let copy = c.cp_async_bytes as f64 / (c.cp_async_sectors.max(1) * 32) as f64;
                eprintln!(
                    "e{} h{} f{} allow_tf32 = {allow_tf32} {}: block {} instructions/output \
                     {:.2}, tensor-core share {:.3}, mma {}, ldmatrix wavefronts/request {:.3}, \
                     cp.async bytes/sector-byte {:.3}, global load efficiency {:.3}",
                    cfg.experts,
                    cfg.hidden,
                    cfg.expert_dim,
                    rec.entry,
                    rec.config.block.x,
                    c.instructions.total() as f64 / outputs as f64,
                    c.instructions.tensor_core as f64 / c.instructions.total() as f64,
                    c.mma_instructions,
                    c.ldmatrix_wavefronts_per_request(),
                    copy,
                    c.global_load_efficiency(),
                );
                if allow_tf32 {
                    let w = c.ldmatrix_wavefronts_per_request();
                    assert!(
                        (w - 4.0).abs() < 1e-9,
                        "{}: {w} wavefronts per x4",
                        rec.entry
                    );
                    if cfg.experts == 1 {
                        assert!((copy - 1.0).abs() < 1e-9, "{}: cp.async {copy}", rec.entry);
                    }
                } else {
                    assert_eq!(c.mma_instructions, 0, "{}", rec.entry);
                }
            }
        }
    }
}
