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
use ptxforge_runtime::templates::nf4::launch::{self as nf4_launch, DeviceWeights};
use ptxforge_runtime::templates::nf4::{dequantize, quantize, Nf4Config, Nf4DoubleQuant};
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

/// Random experts, top-k, widths (any reduction length: ragged ones stage with 8- or 4-byte
/// copies and zero fill; outputs any width, odd ones taking the single-element stores) and
/// token counts.
#[test]
fn moe_tf32_fuzzed() {
    let mut rng = SplitMix64::new(77);
    for case in 0..4 {
        let experts = 1 + rng.below(6) as u32;
        let top_k = 1 + rng.below(u64::from(experts)) as u32;
        let hidden = 1 + rng.below(160) as u32;
        let ffn = if case % 2 == 0 {
            Ffn::Linear
        } else {
            Ffn::Swiglu
        };
        let expert_dim = match ffn {
            Ffn::Linear => 1 + rng.below(150) as u32,
            Ffn::Swiglu => 1 + rng.below(120) as u32,
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
                let width = if rec.entry == EXPERT_SWIGLU_DOWN {
                    cfg.hidden
                } else {
                    cfg.expert_dim
                };
                let rows: u64 = run.counts.iter().map(|&n| u64::from(n)).sum();
                let what = format!("e{} h{} f{}", cfg.experts, cfg.hidden, cfg.expert_dim);
                let copy = report(&what, rec, u64::from(width) * rows, allow_tf32);
                if allow_tf32 && cfg.experts == 1 {
                    assert!((copy - 1.0).abs() < 1e-9, "{}: cp.async {copy}", rec.entry);
                }
            }
        }
    }
}

/// Prints one launch's counters (instructions per output, tensor-core share, mma, `ldmatrix`
/// wavefronts per x4 request, `cp.async` load efficiency, shared wavefronts per
/// request, global load efficiency) and checks the path: tf32 launches must run their
/// `ldmatrix` conflict-free (4 wavefronts per x4), CUDA-core launches issue no mma. Returns the
/// `cp.async` sector use.
fn report(what: &str, rec: &LaunchRecord, outputs: u64, tf32: bool) -> f64 {
    let c = &rec.counters;
    let copy = c.cp_async_load_efficiency();
    eprintln!(
        "{what} allow_tf32 = {tf32} {}: block {} instructions/output {:.2}, tensor-core share \
         {:.3}, mma {}, ldmatrix wavefronts/request {:.3}, cp.async load efficiency {:.3}, \
         shared wavefronts/request {:.3}, global load efficiency {:.3}",
        rec.entry,
        rec.config.block.x,
        c.instructions.total() as f64 / outputs as f64,
        c.instructions.tensor_core as f64 / c.instructions.total() as f64,
        c.mma_instructions,
        c.ldmatrix_wavefronts_per_request(),
        copy,
        c.shared_wavefronts_per_request(),
        c.global_load_efficiency(),
    );
    if tf32 {
        let w = c.ldmatrix_wavefronts_per_request();
        assert!(
            (w - 4.0).abs() < 1e-9,
            "{what} {}: {w} wavefronts per x4",
            rec.entry
        );
    } else {
        assert_eq!(c.mma_instructions, 0, "{what} {}", rec.entry);
    }
    copy
}

// ---- NF4 ---------------------------------------------------------------------------------

/// `out[i, j] = Σ_l a[i, l] · b(j, l)` in f64 over `len`, `a` row-major `rows × len`.
fn matmul(
    a: &[f64],
    rows: usize,
    cols: usize,
    len: usize,
    b: impl Fn(usize, usize) -> f64,
) -> Vec<f64> {
    let mut out = vec![0.0; rows * cols];
    for i in 0..rows {
        for j in 0..cols {
            out[i * cols + j] = (0..len).map(|l| a[i * len + l] * b(j, l)).sum();
        }
    }
    out
}

/// One NF4 case's outputs: kernel, exact reference and tf32-operand model, forward then
/// backward-input, and the launch log.
struct Nf4Run {
    got: [Vec<f64>; 2],
    exact: [Vec<f64>; 2],
    model: [Vec<f64>; 2],
    log: Vec<LaunchRecord>,
}

/// Quantises a random weight, runs the tiled forward (`A [m, k]`) and backward-input
/// (`G_C [m, n]`) on f32 data, and computes both references from the host's dequantised `Ŵ`.
fn run_nf4(cfg: &Nf4Config, m: u32, seed: u64) -> Nf4Run {
    let (n, k, rows) = (cfg.n as usize, cfg.k as usize, m as usize);
    let mut rng = SplitMix64::new(seed);
    let w = rng.vec_f32(n * k, -1.0, 1.0);
    let a = rng.vec_f32(rows * k, -1.0, 1.0);
    let g = rng.vec_f32(rows * n, -1.0, 1.0);
    let q = quantize(&w, cfg.block as usize).expect("quantize");
    let dev = SimBackend::new();
    let (w_dev, host) = if cfg.double_quant {
        let dq = Nf4DoubleQuant::new(&q);
        (
            DeviceWeights::upload_double_quant(&dev, &dq).expect("upload"),
            dq.to_weights().expect("weights"),
        )
    } else {
        (DeviceWeights::upload(&dev, &q).expect("upload"), q)
    };
    let w_hat = dequantize(&host).expect("dequantize");
    let ptx = cfg.compile().expect("compiles").ptx;
    let (a_dev, g_dev) = (
        dev.upload(&a).expect("upload"),
        dev.upload(&g).expect("upload"),
    );
    let mut c = dev.upload(&vec![1e4f32; rows * n]).expect("upload");
    let mut g_a = dev.upload(&vec![1e4f32; rows * k]).expect("upload");
    nf4_launch::forward_tiled(cfg, &dev, &ptx, m, &a_dev, &w_dev, &mut c).expect("forward");
    nf4_launch::backward_input_tiled(cfg, &dev, &ptx, m, &g_dev, &w_dev, &mut g_a)
        .expect("backward");
    let references = |round: fn(f32) -> f32| {
        let r = |v: &[f32]| -> Vec<f64> { v.iter().map(|&x| f64::from(round(x))).collect() };
        let (a, g, w) = (r(&a), r(&g), r(&w_hat));
        [
            matmul(&a, rows, n, k, |j, l| w[j * k + l]),
            matmul(&g, rows, k, n, |l, j| w[j * k + l]),
        ]
    };
    Nf4Run {
        got: [
            to_f64(&dev.download(&c).expect("download")),
            to_f64(&dev.download(&g_a).expect("download")),
        ],
        exact: references(|x| x),
        model: references(round_tf32),
        log: dev.take_launch_log(),
    }
}

/// Checks a tf32 NF4 case: both GEMMs within the tf32 tolerance of the exact reference, at
/// least [`TF32_FLOOR`] away from it, within f32 accumulation of the tf32-operand model, and
/// with exactly the `m16n8k8` count of a 64 × 64 tile per block.
fn check_nf4_tf32(cfg: Nf4Config, m: u32, seed: u64) {
    let what = format!("{cfg:?}, m = {m}, seed {seed}");
    let run = run_nf4(&cfg, m, seed);
    let lens = [cfg.k, cfg.n];
    let cols = [cfg.n, cfg.k];
    assert_eq!(run.log.len(), 2);
    for (g, rec) in run.log.iter().enumerate() {
        let err = error_relative_to_max(&run.got[g], &run.exact[g]);
        let tol = tf32::tolerance(lens[g]);
        let model = error_relative_to_max(&run.got[g], &run.model[g]);
        eprintln!(
            "{what} {}: error {err:.3e}, tolerance {tol:.3e}, vs model {model:.3e}",
            rec.entry
        );
        assert!(err <= tol, "{what} {}: {err:e} > {tol:e}", rec.entry);
        assert!(
            err >= TF32_FLOOR,
            "{what} {}: {err:e}: still f32?",
            rec.entry
        );
        assert!(
            model <= F32_TOL,
            "{what} {}: off the tf32 model by {model:e}",
            rec.entry
        );
        let blocks = u64::from(cols[g].div_ceil(64) * m.div_ceil(64));
        let mma = blocks * 4 * 8 * MMA_PER_STAGE * u64::from(lens[g].div_ceil(TF32_TILE_K));
        assert_eq!(
            rec.counters.mma_instructions, mma,
            "{what} {}: mma count",
            rec.entry
        );
    }
}

fn nf4_tf32(n: u32, k: u32) -> Nf4Config {
    Nf4Config {
        allow_tf32: true,
        ..Nf4Config::new(n, k)
    }
}

#[test]
fn nf4_tf32_gemms() {
    for (n, k, block, double_quant, m, seed) in [
        (100, 136, 64, false, 70, 5),
        (132, 72, 32, true, 65, 6),
        // Packed rows off 4-byte words (k % 8 ≠ 0): the staged codes start 2 bytes into odd rows.
        (100, 228, 64, false, 70, 9),
        (68, 420, 128, true, 33, 10),
        // Double quantisation with rows on block boundaries: the forward's quads decode four
        // blocks at a time (10 per row: the last group runs into the next row).
        (100, 320, 32, true, 50, 11),
    ] {
        let cfg = Nf4Config {
            block,
            double_quant,
            ..nf4_tf32(n, k)
        };
        check_nf4_tf32(cfg, m, seed);
    }
}

/// Random shapes (multiples of 4), block sizes, double quantisation and row counts.
#[test]
fn nf4_tf32_fuzzed() {
    let mut rng = SplitMix64::new(91);
    for case in 0..3 {
        let cfg = Nf4Config {
            block: Nf4Config::BLOCKS[rng.below(4) as usize],
            double_quant: rng.below(2) == 0,
            ..nf4_tf32(
                4 * (1 + rng.below(50) as u32),
                4 * (1 + rng.below(50) as u32),
            )
        };
        check_nf4_tf32(cfg, 9 + rng.below(120) as u32, 200 + case);
    }
}

/// Before sm_80, and for shapes the tf32 tile cannot copy (`k` not a multiple of 4),
/// `allow_tf32` silently keeps the exact CUDA-core GEMMs; another dtype is an error.
#[test]
fn nf4_tf32_fallbacks_and_rule() {
    for cfg in [
        Nf4Config {
            arch: Arch::Sm75,
            ..nf4_tf32(100, 136)
        },
        nf4_tf32(100, 138),
    ] {
        let run = run_nf4(&cfg, 70, 7);
        for g in 0..2 {
            let err = error_relative_to_max(&run.got[g], &run.exact[g]);
            assert!(err <= F32_TOL, "{cfg:?}: {err:e}");
        }
        assert!(run.log.iter().all(|r| r.counters.mma_instructions == 0));
    }
    for dtype in [DType::F16, DType::BF16] {
        let errs = Nf4Config {
            dtype,
            ..nf4_tf32(64, 64)
        }
        .validate()
        .expect_err("allow_tf32 with a non-f32 dtype");
        assert_eq!(errs.0[0].fields[0], "allow_tf32", "{dtype}");
    }
}

/// The 128 × 128 × 256 GEMM of BENCHMARKS.md's Triton tf32 row (`n = 128`, `k = 256`,
/// `m = 128`) and its backward (`n`, `k` swapped roles): instructions per output, mma,
/// `ldmatrix` wavefronts per x4 (4.00 required), shared wavefronts per request, global load
/// efficiency, CUDA cores against tf32.
#[test]
fn nf4_tf32_counters() {
    for allow_tf32 in [false, true] {
        let cfg = Nf4Config {
            allow_tf32,
            ..Nf4Config::new(128, 256)
        };
        let run = run_nf4(&cfg, 128, 8);
        for (rec, outputs) in run.log.iter().zip([128 * 128, 128 * 256]) {
            report("nf4 n128 k256 m128", rec, outputs, allow_tf32);
        }
    }
}
