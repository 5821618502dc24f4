#![cfg(feature = "sim")]
//! MoE kernels in the interpreter (every check on: a finding fails the launch) against the host
//! reference, phase by phase, for every dtype.
//!
//! Inputs are generated in f64, rounded to the dtype, and the *rounded* values are what the
//! reference sees, so the routing (indices, slots, token ids, counts, drops) must match
//! exactly — ties between equal rounded logits go to the lower index on both sides.
//!
//! Tolerances (values relative to the largest reference magnitude of the tensor; routing weights
//! absolute, they are ≤ 1):
//!
//! | dtype | routing weights | expert outputs, layer output |
//! |---|---|---|
//! | f32 | 1e-5 | 1e-5 |
//! | f16 | 2e-3 | 2e-3 |
//! | bf16 | 1e-2 | 2e-2 |
//! | f64 | 1e-12 | 1e-12 |
//!
//! Half types compute in f32 but store routing weights, the swiglu intermediate and the expert
//! outputs rounded to the dtype, which the tolerances cover.

use half::{bf16, f16};
use ptxforge_runtime::arch::Arch;
use ptxforge_runtime::launch::{Backend, DeviceBuffer, Element, LaunchRecord, SimBackend};
use ptxforge_runtime::templates::moe::kernels::GATING_WARP_MIN_EXPERTS;
use ptxforge_runtime::templates::moe::launch::{ExpertWeights, MoeLaunch};
use ptxforge_runtime::templates::moe::reference;
use ptxforge_runtime::templates::moe::{Ffn, MoeConfig};
use ptxforge_runtime::templates::testing::{
    error_relative_to_max, from_f64, to_f64, HostFloat, SplitMix64,
};
use ptxforge_runtime::templates::KernelFamily;
use ptxforge_runtime::DType;
use ptxforge_sim::Options;

#[path = "moe_support/permute.rs"]
mod permute_support;
use permute_support::{permute_checked, permute_reference, skewed_indices};

type Dev = SimBackend;

fn device() -> Dev {
    SimBackend::new()
}

/// A dtype under test and its tolerances.
trait TestFloat: HostFloat + Element {
    const DTYPE: DType;
    /// Absolute tolerance of routing weights.
    const WEIGHT_TOL: f64;
    /// Tolerance of expert outputs and the layer output, relative to the largest magnitude.
    const VALUE_TOL: f64;
}

impl TestFloat for f32 {
    const DTYPE: DType = DType::F32;
    const WEIGHT_TOL: f64 = 1e-5;
    const VALUE_TOL: f64 = 1e-5;
}

impl TestFloat for f16 {
    const DTYPE: DType = DType::F16;
    const WEIGHT_TOL: f64 = 2e-3;
    const VALUE_TOL: f64 = 2e-3;
}

impl TestFloat for bf16 {
    const DTYPE: DType = DType::BF16;
    const WEIGHT_TOL: f64 = 1e-2;
    const VALUE_TOL: f64 = 2e-2;
}

impl TestFloat for f64 {
    const DTYPE: DType = DType::F64;
    const WEIGHT_TOL: f64 = 1e-12;
    const VALUE_TOL: f64 = 1e-12;
}

/// How the logits of a case are generated.
#[derive(Debug, Clone, Copy)]
enum Logits {
    /// Uniform in [−4, 4).
    Random,
    /// Uniform, plus `bias` on one expert (skewed routing).
    Skewed { expert: u32, bias: f64 },
    /// Every logit equal (all ties).
    Constant,
    /// Token `t` prefers expert `t mod E` (logit 2), then `t + 1 mod E` (logit 1): every expert
    /// gets the same number of pairs.
    Balanced,
    /// Expert `e` is the first choice (logit 4, the rest 0) of `counts[e]` tokens, interleaved
    /// (token `t` goes to the expert with the most of its share still unassigned, the lower
    /// index on ties): with `top_k = 1` the bins hold exactly `counts` (`Σ counts = T`).
    Routed { counts: &'static [u32] },
}

/// Rounds f64 test data to `T` and returns both the device copy and what the reference sees.
fn rounded<T: TestFloat>(dev: &Dev, data: &[f64]) -> (DeviceBuffer<Dev, T>, Vec<f64>) {
    let stored: Vec<T> = from_f64(data);
    let seen = to_f64(&stored);
    (dev.upload(&stored).expect("upload"), seen)
}

/// Runs the whole layer for one configuration (dtype taken from `T`) and checks every phase's
/// output against the reference. Returns the interpreter's launch log.
fn run_case<T: TestFloat>(
    base: MoeConfig,
    tokens: u32,
    logits_kind: Logits,
    seed: u64,
) -> Vec<LaunchRecord> {
    run_case_on::<T>(device(), base, tokens, logits_kind, seed).log
}

/// What a case left behind: the launch log and the bits of the layer output.
struct CaseResult {
    log: Vec<LaunchRecord>,
    out_bits: Vec<u64>,
    counts: Vec<u32>,
}

/// [`run_case`] on a given backend.
fn run_case_on<T: TestFloat>(
    dev: Dev,
    base: MoeConfig,
    tokens: u32,
    logits_kind: Logits,
    seed: u64,
) -> CaseResult {
    let cfg = MoeConfig {
        dtype: T::DTYPE,
        ..base
    };
    let what = format!("{cfg:?}, tokens = {tokens}, {logits_kind:?}, seed {seed}");
    let (e, k, h, f) = (
        cfg.experts as usize,
        cfg.top_k as usize,
        cfg.hidden as usize,
        cfg.expert_dim as usize,
    );
    let t = tokens as usize;
    let mut rng = SplitMix64::new(seed);
    let x = rng.vec_f64(t * h, -1.0, 1.0);
    let mut logits = match logits_kind {
        Logits::Constant => vec![0.5; t * e],
        Logits::Balanced => (0..t * e)
            .map(|i| {
                let (token, expert) = (i / e, i % e);
                if expert == token % e {
                    2.0
                } else if expert == (token + 1) % e {
                    1.0
                } else {
                    0.0
                }
            })
            .collect(),
        Logits::Routed { counts } => routed_logits(counts, e),
        _ => rng.vec_f64(t * e, -4.0, 4.0),
    };
    if let Logits::Skewed { expert, bias } = logits_kind {
        for row in logits.chunks_mut(e) {
            row[expert as usize] += bias;
        }
    }
    let scale_h = 1.0 / (h as f64).sqrt();
    let scale_f = 1.0 / (f as f64).sqrt();
    let w1 = rng.vec_f64(e * f * h, -scale_h, scale_h);
    let w3 = rng.vec_f64(e * f * h, -scale_h, scale_h);
    let w2 = rng.vec_f64(e * h * f, -2.0 * scale_f, 2.0 * scale_f);

    let ptx = cfg.compile().expect("compiles").ptx;
    let (x_dev, x_seen) = rounded::<T>(&dev, &x);
    let (logits_dev, logits_seen) = rounded::<T>(&dev, &logits);
    let (w1_dev, w1_seen) = rounded::<T>(&dev, &w1);
    let (w3_dev, w3_seen) = rounded::<T>(&dev, &w3);
    let (w2_dev, w2_seen) = rounded::<T>(&dev, &w2);
    let (weights_dev, weights_ref) = match cfg.ffn {
        Ffn::Linear => (
            ExpertWeights::Linear { w: &w1_dev },
            reference::ExpertWeights::Linear { w: &w1_seen },
        ),
        Ffn::Swiglu => (
            ExpertWeights::Swiglu {
                w1: &w1_dev,
                w3: &w3_dev,
                w2: &w2_dev,
            },
            reference::ExpertWeights::Swiglu {
                w1: &w1_seen,
                w3: &w3_seen,
                w2: &w2_seen,
            },
        ),
    };
    let launch = MoeLaunch::new(&cfg, &dev, &ptx, tokens).expect("valid launch");
    let ws = launch.workspace::<T>().expect("workspace");
    let out_dev = dev.alloc::<T>(t * cfg.out_width() as usize).expect("alloc");
    launch
        .forward_with(&ws, &x_dev, &logits_dev, weights_dev, &out_dev)
        .unwrap_or_else(|err| panic!("{what}: {err}"));
    let stats = ws.stats(&dev).expect("stats");

    let want = reference::forward(&cfg, &x_seen, &logits_seen, weights_ref, t).expect("reference");

    // Gating.
    let logits_after = to_f64(&dev.download(&logits_dev).expect("download"));
    assert_eq!(logits_after, logits_seen, "{what}: logits were written");
    let indices = dev.download(&ws.indices).expect("download");
    assert_eq!(indices, want.gating.indices, "{what}: indices");
    let weights = to_f64(&dev.download(&ws.weights).expect("download"));
    let weight_err = weights
        .iter()
        .zip(&want.gating.weights)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    assert!(
        weight_err <= T::WEIGHT_TOL,
        "{what}: routing weights off by {weight_err:e} > {:e}",
        T::WEIGHT_TOL
    );

    // Permute.
    let perm = &want.permutation;
    assert_eq!(stats.capacity, perm.capacity, "{what}: capacity");
    assert_eq!(
        dev.download(&ws.token_ids).expect("download"),
        perm.token_ids,
        "{what}: token_ids"
    );
    assert_eq!(
        dev.download(&ws.slot_of).expect("download"),
        perm.slot_of,
        "{what}: slot_of"
    );
    assert_eq!(stats.counts, perm.counts, "{what}: counts");
    assert_eq!(stats.routed, perm.routed, "{what}: routed");
    assert_eq!(stats.dropped, perm.dropped, "{what}: dropped");

    // Routing is readable after the forward pass.
    assert_eq!(stats.indices, want.gating.indices, "{what}: stats.indices");
    assert_eq!(stats.weights, weights, "{what}: stats.weights");

    // Experts (permuted layout: packed bins when dropless, `e·C` otherwise); only routed rows
    // are written, so only those are compared.
    let filled = perm.filled_rows();
    let width = cfg.out_width() as usize;
    let routed_rows = |rows: &[f64]| -> Vec<f64> {
        rows.chunks(width)
            .zip(&filled)
            .filter(|(_, &f)| f)
            .flat_map(|(row, _)| row.iter().copied())
            .collect()
    };
    let expert_out = to_f64(&dev.download(&ws.expert_out).expect("download"));
    let err = error_relative_to_max(&routed_rows(&expert_out), &routed_rows(&want.expert_out));
    assert!(
        err <= T::VALUE_TOL,
        "{what}: expert outputs off by {err:e} (relative to max) > {:e}",
        T::VALUE_TOL
    );
    let out = to_f64(&dev.download(&out_dev).expect("download"));
    let err = error_relative_to_max(&out, &want.out);
    assert!(
        err <= T::VALUE_TOL,
        "{what}: layer output off by {err:e} (relative to max) > {:e}",
        T::VALUE_TOL
    );
    // Dropped pairs contribute nothing: a token with every pair dropped has a zero row.
    for token in 0..t {
        if perm.slot_of[token * k..(token + 1) * k]
            .iter()
            .all(|&s| s == u32::MAX)
        {
            assert!(
                out[token * width..(token + 1) * width]
                    .iter()
                    .all(|&v| v == 0.0),
                "{what}: token {token} lost every pair but has a non-zero output"
            );
        }
    }
    CaseResult {
        log: dev.take_launch_log(),
        out_bits: out.iter().map(|v| v.to_bits()).collect(),
        counts: stats.counts,
    }
}

/// Mixtral-like routing, scaled down: 8 experts, top-2, swiglu, renormalised weights,
/// capacity-limited (Switch/GShard-style, factor 1.25).
fn mixtral() -> MoeConfig {
    MoeConfig {
        ffn: Ffn::Swiglu,
        capacity_factor: Some(1.25),
        ..MoeConfig::new(8, 2, 64, 96)
    }
}

/// DeepSeek-like routing, scaled down: 64 experts, top-6, raw probabilities (linear experts;
/// swiglu is covered by the Mixtral-like and fuzzed cases), capacity-limited (factor 1.25).
fn deepseek() -> MoeConfig {
    MoeConfig {
        normalize_topk: false,
        capacity_factor: Some(1.25),
        ..MoeConfig::new(64, 6, 48, 40)
    }
}

/// The same layer with the default, dropless routing.
fn dropless(cfg: MoeConfig) -> MoeConfig {
    MoeConfig {
        capacity_factor: None,
        ..cfg
    }
}

/// Dropless routing (the default): every pair kept, bins packed by their counts, for every
/// dtype and both FFNs, over token counts that leave ragged row tiles and give bins of ≥ 2 tiles.
#[test]
fn dropless_matches_reference() {
    for (i, tokens) in [1, 7, 64, 333].into_iter().enumerate() {
        let seed = 400 + i as u64;
        run_case::<f32>(dropless(mixtral()), tokens, Logits::Random, seed);
        run_case::<f32>(dropless(deepseek()), tokens, Logits::Random, seed);
    }
    for (i, tokens) in [7, 150].into_iter().enumerate() {
        let seed = 410 + i as u64;
        run_case::<f16>(dropless(mixtral()), tokens, Logits::Random, seed);
        run_case::<bf16>(dropless(mixtral()), tokens, Logits::Random, seed);
        run_case::<f64>(dropless(deepseek()), tokens, Logits::Random, seed);
        run_case::<bf16>(dropless(deepseek()), tokens, Logits::Random, seed);
    }
}

/// Dropless with skewed routing: expert 3 is every token's first choice (one bin holds all `T`
/// tokens, ≥ 2 row tiles, the others share the second choices); nothing is dropped and the
/// output matches the reference.
#[test]
fn dropless_skewed_routing_keeps_every_pair() {
    let skew = Logits::Skewed {
        expert: 3,
        bias: 40.0,
    };
    for (i, tokens) in [64u32, 200].into_iter().enumerate() {
        let seed = 420 + i as u64;
        let counts = [
            run_case_on::<f32>(device(), dropless(mixtral()), tokens, skew, seed).counts,
            run_case_on::<bf16>(device(), dropless(mixtral()), tokens, skew, seed).counts,
            run_case_on::<f16>(device(), dropless(deepseek()), tokens, skew, seed).counts,
            run_case_on::<f64>(device(), dropless(deepseek()), tokens, skew, seed).counts,
        ];
        for c in counts {
            assert_eq!(c[3], tokens, "expert 3 holds every token: {c:?}");
        }
    }
}

#[test]
fn mixtral_like_f32() {
    for (i, tokens) in [1, 7, 64, 333].into_iter().enumerate() {
        run_case::<f32>(mixtral(), tokens, Logits::Random, 10 + i as u64);
    }
}

#[test]
fn mixtral_like_f16() {
    for (i, tokens) in [1, 7, 64].into_iter().enumerate() {
        run_case::<f16>(mixtral(), tokens, Logits::Random, 20 + i as u64);
    }
}

#[test]
fn mixtral_like_bf16() {
    for (i, tokens) in [1, 7, 64].into_iter().enumerate() {
        run_case::<bf16>(mixtral(), tokens, Logits::Random, 30 + i as u64);
    }
}

#[test]
fn mixtral_like_f64() {
    for (i, tokens) in [1, 7, 64].into_iter().enumerate() {
        run_case::<f64>(mixtral(), tokens, Logits::Random, 40 + i as u64);
    }
}

#[test]
fn deepseek_like_f32() {
    for (i, tokens) in [1, 7, 64, 333].into_iter().enumerate() {
        run_case::<f32>(deepseek(), tokens, Logits::Random, 50 + i as u64);
    }
}

#[test]
fn deepseek_like_half_types() {
    for (i, tokens) in [1, 7, 64].into_iter().enumerate() {
        run_case::<f16>(deepseek(), tokens, Logits::Random, 60 + i as u64);
        run_case::<bf16>(deepseek(), tokens, Logits::Random, 70 + i as u64);
    }
}

#[test]
fn deepseek_like_f64() {
    for (i, tokens) in [1, 7, 64].into_iter().enumerate() {
        run_case::<f64>(deepseek(), tokens, Logits::Random, 80 + i as u64);
    }
}

#[test]
fn deepseek_like_swiglu() {
    let cfg = MoeConfig {
        ffn: Ffn::Swiglu,
        ..deepseek()
    };
    run_case::<f32>(cfg, 64, Logits::Random, 90);
    run_case::<bf16>(cfg, 7, Logits::Random, 91);
}

/// Bins far too small: most pairs are dropped, counted, and contribute nothing.
#[test]
fn capacity_overflow_drops_and_counts() {
    let cfg = MoeConfig {
        capacity_factor: Some(0.25),
        ..mixtral()
    };
    for (i, tokens) in [7, 64].into_iter().enumerate() {
        run_case::<f32>(cfg, tokens, Logits::Random, 100 + i as u64);
    }
    run_case::<f16>(cfg, 64, Logits::Random, 102);
    let linear = MoeConfig {
        capacity_factor: Some(0.3),
        ..deepseek()
    };
    run_case::<f64>(linear, 64, Logits::Random, 103);
}

/// Logits favouring one expert: its bin overflows while the others stay nearly empty.
#[test]
fn skewed_routing() {
    let skew = Logits::Skewed {
        expert: 3,
        bias: 6.0,
    };
    run_case::<f32>(mixtral(), 64, skew, 110);
    run_case::<bf16>(mixtral(), 64, skew, 111);
    run_case::<f32>(deepseek(), 64, skew, 112);
    run_case::<f64>(deepseek(), 7, skew, 113);
}

/// Equal logits everywhere: ties go to the lowest indices, weights are equal.
#[test]
fn ties_go_to_lower_index() {
    let cfg = MoeConfig {
        capacity_factor: Some(4.0),
        ..MoeConfig::new(8, 3, 16, 8)
    };
    run_case::<f32>(cfg, 5, Logits::Constant, 120);
    run_case::<bf16>(cfg, 5, Logits::Constant, 121);
}

/// Sizes that are no multiple of any tile: 40 experts (one warp plus 8 lanes per token),
/// hidden 33, expert_dim 70, and the smallest layer (one expert of width one).
#[test]
fn odd_and_tiny_sizes() {
    let odd = MoeConfig {
        ffn: Ffn::Swiglu,
        capacity_factor: Some(1.0),
        ..MoeConfig::new(40, 3, 33, 70)
    };
    run_case::<f32>(odd, 7, Logits::Random, 130);
    run_case::<f32>(odd, 50, Logits::Random, 131);
    run_case::<bf16>(odd, 7, Logits::Random, 132);
    run_case::<f64>(odd, 7, Logits::Random, 133);
    let tiny = MoeConfig::new(1, 1, 1, 1);
    run_case::<f32>(tiny, 1, Logits::Random, 134);
    run_case::<f16>(tiny, 5, Logits::Random, 135);
    let tiny_swiglu = MoeConfig {
        ffn: Ffn::Swiglu,
        ..MoeConfig::new(2, 2, 1, 1)
    };
    run_case::<f64>(tiny_swiglu, 3, Logits::Random, 136);
}

/// Unpermute's edges: rows wider than one pass of its block (1100 f32 = 275 vectors of 4 > 256
/// threads: a second vector trip; f16 at 8 per vector), fewer tokens per block for a large
/// `top_k` (20 → 12 tokens, a partial last block) and more pairs per token than threads
/// (`top_k = 260` → one token per block, its routing staged in two trips).
#[test]
fn unpermute_wide_rows_and_many_choices() {
    let wide = MoeConfig::new(40, 20, 8, 1100);
    run_case::<f32>(wide, 20, Logits::Random, 140);
    run_case::<f16>(wide, 13, Logits::Random, 141);
    let many = MoeConfig {
        capacity_factor: Some(0.5),
        ..MoeConfig::new(300, 260, 2, 3)
    };
    run_case::<f64>(many, 3, Logits::Random, 142);
}

/// [`Logits::Routed`]'s logits `[Σ counts, experts]`.
fn routed_logits(counts: &[u32], experts: usize) -> Vec<f64> {
    let mut left = counts.to_vec();
    let tokens: u32 = counts.iter().sum();
    let mut logits = vec![0.0; tokens as usize * experts];
    for row in logits.chunks_mut(experts) {
        let (e, _) = left
            .iter()
            .enumerate()
            .rev()
            .max_by_key(|(_, &n)| n)
            .expect("experts");
        left[e] -= 1;
        row[e] = 4.0;
    }
    logits
}

/// The 128-row tensor-core tiles' edges (f16/bf16, `H` and `F` multiples of 8, not of 32, so
/// the last K tile is cut by the column test): bins of 150 rows (a full 128-row item and one
/// of 22 rows), 0, 1, 129 (an item of one row) and 40 rows, top-1; output widths 200
/// (128 × 128 tiles: the second column tile 72 wide) and 136 (128 × 64: the third 8 wide);
/// dropless, capacity-limited below the largest bins (`C = 128`: 22 and 1 rows dropped) and
/// above them (`C = 192`: padded capacity). Checks the grids the launches used, so the wide
/// tiles are what ran.
#[test]
fn wide_tiles_edges() {
    const COUNTS: &[u32] = &[150, 0, 1, 129, 40];
    let tokens: u32 = COUNTS.iter().sum();
    let routed = Logits::Routed { counts: COUNTS };
    let shapes = [(Ffn::Linear, 136, 200), (Ffn::Swiglu, 200, 136)];
    for (i, (ffn, hidden, expert_dim)) in shapes.into_iter().enumerate() {
        for (j, capacity_factor) in [None, Some(2.0), Some(3.0)].into_iter().enumerate() {
            let cfg = MoeConfig {
                ffn,
                capacity_factor,
                arch: [Arch::Sm80, Arch::Sm90][j % 2],
                ..MoeConfig::new(5, 1, hidden, expert_dim)
            };
            let seed = 960 + 3 * i as u64 + j as u64;
            let case = if (i + j) % 2 == 0 {
                run_case_on::<f16>(device(), cfg, tokens, routed, seed)
            } else {
                run_case_on::<bf16>(device(), cfg, tokens, routed, seed)
            };
            let capacity = u32::try_from(cfg.capacity(tokens)).expect("capacity");
            let kept: Vec<u32> = COUNTS.iter().map(|&c| c.min(capacity)).collect();
            assert_eq!(case.counts, kept, "{cfg:?}: counts");
            let items: u32 = kept.iter().map(|c| c.div_ceil(128)).sum();
            for rec in case
                .log
                .iter()
                .filter(|r| r.entry.starts_with("moe_expert"))
            {
                let (width, _) = expert_dims(&cfg, &rec.entry);
                let tile_n = match (rec.entry.as_str(), width) {
                    ("moe_expert_swiglu_up", _) | (_, 136) => 64,
                    _ => 128,
                };
                let grid = rec.config.grid;
                assert_eq!(
                    (grid.y, rec.config.block.x),
                    (width.div_ceil(tile_n), 128),
                    "{cfg:?} {}",
                    rec.entry
                );
                assert!(grid.x >= items, "{cfg:?} {}: {} blocks", rec.entry, grid.x);
                assert!(rec.counters.mma_instructions > 0, "{}: no mma", rec.entry);
            }
        }
    }
}

/// Output width and reduction length of expert entry `entry`: `(F, H)` for linear and SwiGLU
/// up, `(H, F)` for SwiGLU down.
fn expert_dims(cfg: &MoeConfig, entry: &str) -> (u32, u32) {
    if entry == "moe_expert_swiglu_down" {
        (cfg.hidden, cfg.expert_dim)
    } else {
        (cfg.expert_dim, cfg.hidden)
    }
}

/// Reduction lengths that are not multiples of 8 stay on the tensor cores: the ring slot is
/// filled by 8-byte (`H = 76, F = 92`) or 4-byte (`H = 70, F = 90`; `H = 130`: 5 K tiles, so every
/// slot is refilled) `cp.async` copies, or element by element for odd lengths (`H = 69, F = 45`),
/// zero past the length; both FFNs, f16 and bf16, every check on, against the reference in
/// [`run_case`].
#[test]
fn tensor_cores_ragged_reduction_lengths() {
    let shapes = [(70, 90), (76, 92), (69, 45), (130, 38), (72, 37)];
    for (i, (hidden, expert_dim)) in shapes.into_iter().enumerate() {
        for ffn in [Ffn::Linear, Ffn::Swiglu] {
            let cfg = MoeConfig {
                ffn,
                capacity_factor: None,
                arch: [Arch::Sm80, Arch::Sm90][i % 2],
                ..MoeConfig::new(6, 2, hidden, expert_dim)
            };
            let seed = 900 + 2 * i as u64 + u64::from(ffn == Ffn::Swiglu);
            let log = if i % 2 == 0 {
                run_case::<f16>(cfg, 75, Logits::Random, seed)
            } else {
                run_case::<bf16>(cfg, 75, Logits::Random, seed)
            };
            let experts: Vec<_> = log
                .iter()
                .filter(|r| r.entry.starts_with("moe_expert"))
                .collect();
            assert!(!experts.is_empty(), "{cfg:?}: no expert launch");
            for rec in experts {
                let (_, len) = expert_dims(&cfg, &rec.entry);
                let c = &rec.counters;
                assert!(c.mma_instructions > 0, "{cfg:?} {}: no mma", rec.entry);
                assert_eq!(
                    c.cp_async_requests > 0,
                    len % 2 == 0,
                    "{cfg:?} {}: cp.async for len {len}",
                    rec.entry
                );
            }
        }
    }
}

/// Ragged reduction lengths (`H = 70, F = 90`, SwiGLU, bf16, 128 tokens, dropless): the expert
/// GEMMs on CUDA cores (sm_75, where every length went before) and on tensor cores (sm_80,
/// 4-byte `cp.async`), printed for the benchmarks; the tensor-core entries issue fewer
/// instructions per output, run ldmatrix conflict-free, and their copies use the sectors they
/// touch as well as 64-byte K tiles of such rows allow ([`ragged_row_sector_bound`]).
#[test]
fn ragged_expert_gemm_counters() {
    let mut per_output = Vec::new();
    for arch in [Arch::Sm75, Arch::Sm80] {
        let cfg = MoeConfig {
            ffn: Ffn::Swiglu,
            capacity_factor: None,
            arch,
            ..MoeConfig::new(8, 2, 70, 90)
        };
        let log = run_case::<bf16>(cfg, 128, Logits::Random, 310);
        let mut row = Vec::new();
        for rec in log.iter().filter(|r| r.entry.starts_with("moe_expert")) {
            let c = &rec.counters;
            let (width, _) = expert_dims(&cfg, &rec.entry);
            let outputs = u64::from(width) * 128 * u64::from(cfg.top_k);
            let total = c.instructions.total();
            eprintln!(
                "ragged h70 f90 {arch} {}: instructions/output {:.2}, tensor-core share {:.3}, \
                 mma {}, global load eff {:.3}, cp.async load eff {:.3} ({} requests), ldmatrix \
                 wavefronts/request {:.3}, shared wavefronts/request {:.3}",
                rec.entry,
                total as f64 / outputs as f64,
                c.instructions.tensor_core as f64 / total.max(1) as f64,
                c.mma_instructions,
                c.global_load_efficiency(),
                c.cp_async_load_efficiency(),
                c.cp_async_requests,
                c.ldmatrix_wavefronts_per_request(),
                c.shared_wavefronts_per_request(),
            );
            if arch == Arch::Sm80 {
                let w = c.ldmatrix_wavefronts_per_request();
                assert!((w - 4.0).abs() < 1e-9, "{}: {w} wavefronts", rec.entry);
                let (_, len) = expert_dims(&cfg, &rec.entry);
                let bound = ragged_row_sector_bound(len * 2);
                assert!(c.cp_async_requests > 0, "{}: no cp.async", rec.entry);
                let efficiency = c.cp_async_load_efficiency();
                assert!(
                    efficiency >= 0.98 * bound,
                    "{}: cp.async load efficiency {efficiency:.3}, bound {bound:.3}",
                    rec.entry
                );
            }
            row.push(total as f64 / outputs as f64);
        }
        per_output.push(row);
    }
    for (cuda, tc) in per_output[0].iter().zip(&per_output[1]) {
        assert!(
            tc < cuda,
            "instructions/output: tensor cores {tc} vs CUDA cores {cuda}"
        );
    }
}

/// The best per-request sector use of staging rows of `row_bytes` bytes (4-byte aligned, as
/// `H = 70` halves are: 140 bytes) through 64-byte K tiles, one request per tile segment: rows
/// start at every multiple of 4 modulo 32 alike (`140 · r mod 32` cycles through all eight), and
/// a segment of `n` bytes at offset `o` touches `⌈(o + n) / 32⌉` sectors, so even whole-segment
/// requests read `Σ n / Σ 32 · ⌈(o + n) / 32⌉` of what they touch: 140 / 224 = 0.625 at
/// `H = 70`, 180 / 264 = 0.682 at `F = 90`. Above 0.9 would need segments longer than a K
/// tile (or 16-byte aligned rows, which take 16-byte copies at 1.0).
fn ragged_row_sector_bound(row_bytes: u32) -> f64 {
    let (mut used, mut touched) = (0u32, 0u32);
    for offset in (0..32).step_by(4) {
        for start in (0..row_bytes).step_by(64) {
            let n = (row_bytes - start).min(64);
            used += n;
            touched += 32 * ((offset + start) % 32 + n).div_ceil(32);
        }
    }
    f64::from(used) / f64::from(touched)
}

/// Seeded random configurations: experts, top-k, widths, token count, capacity factor, ffn,
/// normalisation and dtype all drawn at random.
#[test]
fn fuzzed_configurations() {
    let mut rng = SplitMix64::new(0x006d_6f65);
    for case in 0..10u64 {
        let experts = 1 + rng.below(70) as u32;
        let top_k = 1 + rng.below(u64::from(experts.min(8))) as u32;
        let cfg = MoeConfig {
            capacity_factor: match rng.below(3) {
                0 => None,
                _ => Some(rng.uniform(0.3, 2.0) as f32),
            },
            ffn: if rng.below(2) == 0 {
                Ffn::Linear
            } else {
                Ffn::Swiglu
            },
            normalize_topk: rng.below(2) == 0,
            ..MoeConfig::new(
                experts,
                top_k,
                1 + rng.below(80) as u32,
                1 + rng.below(80) as u32,
            )
        };
        let tokens = 1 + rng.below(40) as u32;
        let seed = 1000 + case;
        match rng.below(4) {
            0 => run_case::<f16>(cfg, tokens, Logits::Random, seed),
            1 => run_case::<bf16>(cfg, tokens, Logits::Random, seed),
            2 => run_case::<f32>(cfg, tokens, Logits::Random, seed),
            _ => run_case::<f64>(cfg, tokens, Logits::Random, seed),
        };
    }
}

/// Blocks run in shuffled orders give bit-identical results (slot assignment by scan, fixed
/// reduction orders, no float atomics).
#[test]
fn block_order_does_not_change_results() {
    let skew = Logits::Skewed {
        expert: 5,
        bias: 3.0,
    };
    let linear = run_case_on::<f32>(device(), mixtral(), 64, skew, 140).out_bits;
    for order_seed in [1, 2] {
        let shuffled = SimBackend::with_options(Options {
            shuffle_blocks: Some(order_seed),
            ..Options::default()
        });
        let bits = run_case_on::<f32>(shuffled, mixtral(), 64, skew, 140).out_bits;
        assert!(
            bits == linear,
            "block order {order_seed} changed the output"
        );
    }
}

/// Interpreter counters of the expert GEMMs with full tiles (balanced routing, 256 tokens,
/// 8 experts top-2, capacity 64 = one full slot tile per expert, widths multiples of 64):
/// the operand loads (gathered token rows, weight rows, permuted rows) must be quads (16 bytes
/// per lane for f32 and f64, 8 for bf16) reaching ≥ 85 % global load efficiency, and the
/// shared-memory accesses (transposing stores and the inner loop) must take no more wavefronts
/// than the conflict-free layout's minimum (see `conflict_free_wavefronts_per_request`).
///
/// The per-launch counters also include index loads; they are known exactly and taken out, so
/// the figures are those of the operand loads alone: [`WORK_ITEM_LOADS`] broadcasts per warp
/// (every lane reading the same address: [`WORK_ITEM_BYTES`] distinct bytes in all, each
/// request from one sector) and, in the gathering
/// kernels, one token-id load per warp and loader pass (2 passes; 16 consecutive ids read by
/// two lanes each, 64 distinct bytes from 2 sectors, the bins being 64-aligned; bf16: 8 ids
/// by four lanes each, 32 bytes from 1 sector).
#[test]
fn expert_gemm_counters() {
    let base = MoeConfig {
        capacity_factor: Some(1.0),
        ..MoeConfig::new(8, 2, 128, 128)
    };
    let swiglu = MoeConfig {
        ffn: Ffn::Swiglu,
        ..base
    };
    let logs = [
        (
            "f32 swiglu",
            run_case::<f32>(swiglu, 256, Logits::Balanced, 200),
            32,
        ),
        (
            // sm_75: the CUDA-core GEMM (sm_80+ takes the tensor-core one, measured in
            // `expert_gemm_tensor_core_counters`).
            "bf16 linear",
            run_case::<bf16>(
                MoeConfig {
                    arch: Arch::Sm75,
                    ..base
                },
                256,
                Logits::Balanced,
                201,
            ),
            32,
        ),
        (
            "f64 linear",
            run_case::<f64>(base, 256, Logits::Balanced, 202),
            16,
        ),
    ];
    for (what, log, tile_k) in logs {
        for rec in log.iter().filter(|r| r.entry.starts_with("moe_expert")) {
            let c = &rec.counters;
            let warps = rec.config.grid.volume() * u64::from(rec.config.block.x / 32);
            let gathers = rec.entry != "moe_expert_swiglu_down";
            let id_loads = if gathers { 2 } else { 0 };
            let halves = what.starts_with("bf16");
            // A warp stages 16 rows (8 for halves): their ids fill 2 sectors (1).
            let id_sectors = if halves { 1 } else { 2 };
            let index_requests = warps * (WORK_ITEM_LOADS + id_loads);
            let index_bytes = warps * (WORK_ITEM_BYTES + id_loads * id_sectors * 32);
            let bytes = c.global_load_bytes - index_bytes;
            let sectors = c.global_load_sectors - warps * (WORK_ITEM_LOADS + id_sectors * id_loads);
            let requests = c.global_load_requests - index_requests;
            let efficiency = bytes as f64 / (sectors * 32) as f64;
            // A quad is tile_k / 8 elements: 4 f32 or 2 f64 (16 bytes), 4 bf16 (8 bytes).
            let quad_bytes = if what.starts_with("bf16") { 8u32 } else { 16 };
            let bytes_per_lane = bytes as f64 / (requests * 32) as f64;
            assert!(
                (bytes_per_lane - f64::from(quad_bytes)).abs() < 0.01,
                "{what} {}: {bytes_per_lane} bytes per lane, not quads of {quad_bytes}",
                rec.entry
            );
            let b_tiles = if rec.entry == "moe_expert_swiglu_up" {
                2
            } else {
                1
            };
            let wavefronts = c.shared_wavefronts_per_request();
            let minimum = conflict_free_wavefronts_per_request(tile_k, b_tiles, halves);
            eprintln!(
                "{what} {}: operand load efficiency {:.3} ({} requests), all loads {:.3}, \
                 store efficiency {:.3}, shared wavefronts/request {:.3} (× the fewest {:.3})",
                rec.entry,
                efficiency,
                requests,
                c.global_load_efficiency(),
                c.global_store_efficiency(),
                wavefronts,
                c.shared_bank_conflict_factor()
            );
            assert!(efficiency >= 0.85, "{what} {}: {efficiency}", rec.entry);
            assert!(
                wavefronts <= minimum + 1e-9,
                "{what} {}: {wavefronts} wavefronts per request, conflict-free {minimum}",
                rec.entry
            );
        }
    }
}

/// Broadcast loads per warp that decode a block's work item: the item (expert and first slot,
/// one 8-byte vector), and the expert's count and offset.
const WORK_ITEM_LOADS: u64 = 3;
/// The distinct bytes those loads read: 8 + 4 + 4.
const WORK_ITEM_BYTES: u64 = 16;

/// Shared wavefronts per request of the expert GEMM's layout without bank conflicts, per
/// staged tile of `tile_k` columns with `b_tiles` weight tiles, counted per phase (a warp for
/// 4-byte accesses, half-warps for 8-byte ones, quarter-warps for 16-byte ones). f32 compute
/// (`tile_k` 32): per `kk` one `ld.shared.v4` of `A` and one of each `B` (4 quarter-warps,
/// each at most 8 distinct quads on distinct banks: 4 wavefronts); staging: 2 passes × 4
/// scalar stores per tile (1 each; 2 for `halves`, whose 8-byte quads put 4 per row in a warp:
/// a 2-way conflict). f64 compute (`tile_k` 16): per `kk` 4 scalar 8-byte reads of `A` and of
/// each `B` (2 half-warps: 2 each); staging 2 passes × 2 stores of 8 bytes per tile (2 each).
fn conflict_free_wavefronts_per_request(tile_k: u64, b_tiles: u64, halves: bool) -> f64 {
    let tiles = 1 + b_tiles;
    let per_store = if halves { 2 } else { 1 };
    let (requests, wavefronts) = if tile_k == 32 {
        (
            tile_k * tiles + tiles * 2 * 4,
            tile_k * tiles * 4 + tiles * 2 * 4 * per_store,
        )
    } else {
        (
            tile_k * 4 * tiles + tiles * 2 * 2,
            tile_k * 4 * tiles * 2 + tiles * 2 * 2 * 2,
        )
    };
    wavefronts as f64 / requests as f64
}

/// The expert GEMMs of the Mixtral-like layer (8 experts, top-2, swiglu, H = 64, F = 96,
/// 256 tokens, capacity factor 1.25), bf16, on the CUDA-core path (sm_70) and the tensor-core
/// path (sm_80), every check on: instructions per output element, the tensor-core share of
/// instructions, `ldmatrix` wavefronts per x4 request (4.00 = conflict-free) and `cp.async`
/// sector use. The tensor-core path must issue mma and run its ldmatrix conflict-free; both
/// paths already match the reference in [`run_case`].
#[test]
fn expert_gemm_tensor_core_counters() {
    for arch in [Arch::Sm70, Arch::Sm80] {
        let cfg = MoeConfig { arch, ..mixtral() };
        let log = run_case::<bf16>(cfg, 256, Logits::Random, 300);
        for rec in log.iter().filter(|r| r.entry.starts_with("moe_expert")) {
            let c = &rec.counters;
            let (width, _) = expert_dims(&cfg, &rec.entry);
            // Routed rows: T·K pairs less the dropped ones ≈ every slot the GEMM wrote.
            let outputs = u64::from(width) * 256 * u64::from(cfg.top_k);
            let total = c.instructions.total();
            let tensor = c.instructions.tensor_core;
            eprintln!(
                "{arch} {}: block {} instructions/output {:.2} (per thread, all kinds), \
                 tensor-core share {:.3}, mma {}, ldmatrix wavefronts/request {:.3} \
                 (/matrix {:.3}), cp.async load efficiency {:.3}, cp.async bank-conflict \
                 factor {:.3}, shared wavefronts/request {:.3}",
                rec.entry,
                rec.config.block.x,
                total as f64 / outputs as f64,
                tensor as f64 / total.max(1) as f64,
                c.mma_instructions,
                c.ldmatrix_wavefronts_per_request(),
                c.ldmatrix_wavefronts_per_request() / 4.0,
                c.cp_async_load_efficiency(),
                c.cp_async_bank_conflict_factor(),
                c.shared_wavefronts_per_request(),
            );
            if arch == Arch::Sm80 {
                assert!(c.mma_instructions > 0, "{}: no mma", rec.entry);
                // 16-byte pieces dealt in quarter-warp chunk columns land conflict-free (dealt
                // row-major, a quarter-warp's two rows 20 words apart measured 2.0).
                let f = c.cp_async_bank_conflict_factor();
                assert!(f <= 1.0 + 1e-9, "{}: cp.async factor {f}", rec.entry);
                let w = c.ldmatrix_wavefronts_per_request();
                assert!(
                    (w - 4.0).abs() < 1e-9,
                    "{}: {w} wavefronts per x4",
                    rec.entry
                );
            } else {
                assert_eq!(c.mma_instructions, 0, "{}", rec.entry);
            }
        }
    }
}

/// Permute alone on hand-written routing that names non-experts (`≥ E`): those pairs are
/// marked dropped and counted nowhere; the rest get token-major slots as in the reference.
/// Capacity `ceil(0.5 · 5 · 2 / 4) = 2`, so expert 1 (three pairs) drops its last one.
#[test]
fn permute_marks_non_expert_indices_dropped() {
    let cfg = MoeConfig {
        capacity_factor: Some(0.5),
        ..MoeConfig::new(4, 2, 1, 1)
    };
    let indices = [0, 7, 1, 1, u32::MAX, 2, 3, 0, 1, 4];
    assert_eq!(cfg.capacity(5), 2);
    let expected = permute_reference(&indices, 4, 2, 2);
    assert_eq!(expected.routed[1] - expected.counts[1], 1);
    permute_checked(&cfg, 5, &indices);
}

/// Permute over one, two (E = 33: the second group holds one expert) and four expert groups,
/// on skewed routing whose low experts overflow their bins, with non-expert indices, and token
/// counts that leave the last 256-pair chunk partly empty.
#[test]
fn permute_expert_groups_overflow_and_non_experts() {
    for (experts, top_k, tokens) in [
        (8, 2, 131),
        (32, 4, 200),
        (33, 3, 131),
        (64, 6, 300),
        (128, 8, 257),
    ] {
        for capacity_factor in [Some(1.0), Some(0.25), None] {
            let cfg = MoeConfig {
                capacity_factor,
                ..MoeConfig::new(experts, top_k, 8, 8)
            };
            let indices = skewed_indices(experts, top_k, tokens, u64::from(experts + tokens));
            permute_checked(&cfg, tokens, &indices);
        }
    }
}

/// Gating on both sides of the mapping threshold (a thread per token below
/// `GATING_WARP_MIN_EXPERTS` experts, a warp per token from it on) for every dtype, renormalised
/// and raw, with ties, and a token count that leaves the last block partly empty.
#[test]
fn gating_both_mappings_every_dtype() {
    let below = GATING_WARP_MIN_EXPERTS - 1;
    for (i, experts) in [1, 3, 8, below, GATING_WARP_MIN_EXPERTS, 33]
        .into_iter()
        .enumerate()
    {
        let top_k = experts.min(3);
        for normalize_topk in [true, false] {
            let cfg = MoeConfig {
                normalize_topk,
                ..MoeConfig::new(experts, top_k, 8, 8)
            };
            let seed = 300 + i as u64;
            run_case::<f32>(cfg, 131, Logits::Random, seed);
            run_case::<f16>(cfg, 131, Logits::Random, seed);
            run_case::<bf16>(cfg, 131, Logits::Random, seed);
            run_case::<f64>(cfg, 131, Logits::Random, seed);
            run_case::<bf16>(cfg, 5, Logits::Constant, seed);
        }
    }
}

/// The thread-per-token gating at expert counts whose stage swizzle differs (`E = 2^a · m`:
/// 2, 6, 12, 16, 20, 24) and with `K` whose routing rows are one vector store (2, 4, and 8
/// for 16-bit weights), over a partial second block.
#[test]
fn gating_swizzled_stage_and_vector_stores() {
    for (i, (experts, top_k)) in [(2, 2), (6, 2), (12, 4), (16, 2), (20, 8), (24, 4)]
        .into_iter()
        .enumerate()
    {
        let cfg = MoeConfig::new(experts, top_k, 8, 8);
        let seed = 350 + i as u64;
        run_case::<f32>(cfg, 131, Logits::Random, seed);
        run_case::<f16>(cfg, 131, Logits::Random, seed);
        run_case::<bf16>(cfg, 131, Logits::Random, seed);
        run_case::<f64>(cfg, 131, Logits::Random, seed);
    }
}

/// The warp-per-token gating reads each logit once (held in registers for the K selection rounds
/// and the softmax sum); only the lanes writing weights read back their pick's index and logit.
#[test]
fn gating_warp_mapping_reads_each_logit_once() {
    for experts in [GATING_WARP_MIN_EXPERTS + 1, 64] {
        let (top_k, tokens) = (4u32, 64u32);
        let cfg = MoeConfig {
            normalize_topk: false,
            ..MoeConfig::new(experts, top_k, 64, 128)
        };
        let log = run_case::<f32>(cfg, tokens, Logits::Random, 16);
        let rec = log
            .iter()
            .find(|r| r.entry == "moe_gating")
            .expect("gating ran");
        let c = &rec.counters;
        eprintln!(
            "moe_gating E={experts} K={top_k} T={tokens} f32: {:.1} thread-instructions per \
             output, {} load bytes",
            c.instructions.total() as f64 / f64::from(tokens * top_k),
            c.global_load_bytes
        );
        let logits = tokens * experts * 4;
        let read_back = tokens * top_k * (4 + 4);
        assert_eq!(
            c.global_load_bytes,
            u64::from(logits + read_back),
            "E = {experts}"
        );
    }
}

/// Interpreter counters of `moe_gating` at E = 8, K = 2, T = 64, f32 (the bench's shape):
/// dynamic thread-instructions per routed pair and global load efficiency.
#[test]
fn gating_counters_small_experts() {
    let cfg = MoeConfig::new(8, 2, 64, 128);
    let log = run_case::<f32>(cfg, 64, Logits::Random, 15);
    let rec = log
        .iter()
        .find(|r| r.entry == "moe_gating")
        .expect("gating ran");
    let c = &rec.counters;
    let per_output = c.instructions.total() as f64 / (64.0 * 2.0);
    let efficiency = c.global_load_efficiency();
    eprintln!(
        "moe_gating E=8 K=2 T=64 f32: {per_output:.1} thread-instructions per output, \
         load efficiency {efficiency:.3}, store efficiency {:.3}",
        c.global_store_efficiency()
    );
    assert!(per_output <= 200.0, "{per_output}");
    assert!(efficiency >= 0.9, "{efficiency}");
}
