#![cfg(feature = "sim")]
//! f32 attention with `allow_tf32` in the interpreter (every check on: a finding fails the
//! launch) against the f64 host reference, over fixed and fuzzed shapes (ragged sequences,
//! causal and not, GQA, D 32/64/128 and the rest).
//!
//! Tolerance ([`tf32::tolerance`], `templates/tf32.rs`): O is a length-`Skv` reduction of P·V
//! whose P comes from length-`D` reductions of Q·Kᵀ, so the test requires
//! `max|O − exact| ≤ 2⁻¹⁰ · √max(D, Skv) · max|exact|`; LSE (f32) within 2⁻¹⁰ · √D.
//!
//! Each case also proves tf32 really ran: the interpreter's mma count equals the count the
//! tile schedule predicts for `m16n8k8` (a kernel that stayed on CUDA cores issues none), the
//! error against the exact reference is at least [`TF32_FLOOR`], and the kernel matches a host
//! model of its arithmetic (Q, K, V and each tile's P rounded with `cvt.rna` semantics, the
//! online softmax per KV tile) to f32 accuracy. Before sm_80 `allow_tf32` must silently give
//! the exact CUDA-core f32 result.
//!
//! Every case is also held to issue 11's shared-memory bar: wavefronts at most
//! [`MAX_BANK_CONFLICT_FACTOR`] × the fewest its accesses could take (the O staging, the V
//! B-fragment loads and the staged 16-byte reads; `ldmatrix` and `cp.async` are counted apart).

use ptxforge_runtime::arch::Arch;
use ptxforge_runtime::launch::{Backend, LaunchRecord, SimBackend};
use ptxforge_runtime::templates::attention::launch::{forward, AttentionBuffers};
use ptxforge_runtime::templates::attention::reference::{self, causal_visible};
use ptxforge_runtime::templates::attention::{AttentionConfig, AttentionPath, AttentionShape};
use ptxforge_runtime::templates::testing::{error_relative_to_max, to_f64, SplitMix64};
use ptxforge_runtime::templates::tf32::{self, round_tf32};
use ptxforge_runtime::templates::KernelFamily;

/// Least error (relative to max) a tf32 result shows against the exact reference on random
/// data: 2⁻¹⁶, far above exact f32's 2⁻²⁴.
const TF32_FLOOR: f64 = 1.0 / 65536.0;
/// The kernel against the model of its own arithmetic: f32 accumulation and `ex2.approx`,
/// plus the odd P rounded the other way at a tf32 tie.
const MODEL_TOL: f64 = 1e-4;
/// Shared wavefronts ÷ the fewest possible ([`ptxforge_sim::Counters::shared_bank_conflict_factor`]).
const MAX_BANK_CONFLICT_FACTOR: f64 = 1.05;

fn tf32_config(head_dim: u32, causal: bool, arch: Arch) -> AttentionConfig {
    AttentionConfig {
        causal,
        allow_tf32: true,
        arch,
        ..AttentionConfig::new(head_dim)
    }
}

/// What one launch produced next to the references.
struct Run {
    o: Vec<f64>,
    lse: Vec<f32>,
    exact: reference::AttentionOutput,
    model: Vec<f64>,
    log: Vec<LaunchRecord>,
}

fn run(cfg: &AttentionConfig, s: &AttentionShape, seed: u64, scale: Option<f64>) -> Run {
    let d = cfg.head_dim;
    let mut rng = SplitMix64::new(seed);
    let (q, k, v) = (
        rng.vec_f32(s.q_len(d), -1.0, 1.0),
        rng.vec_f32(s.kv_len(d), -1.0, 1.0),
        rng.vec_f32(s.kv_len(d), -1.0, 1.0),
    );
    let dev = SimBackend::new();
    let ptx = cfg.compile().expect("compiles").ptx;
    let up = |x: &[f32]| dev.upload(x).expect("upload");
    let (q_buf, k_buf, v_buf) = (up(&q), up(&k), up(&v));
    let o_buf = dev.alloc::<f32>(s.q_len(d)).expect("alloc");
    let lse_buf = dev.alloc::<f32>(s.lse_len()).expect("alloc");
    let bufs = AttentionBuffers {
        q: &q_buf,
        k: &k_buf,
        v: &v_buf,
        o: &o_buf,
        lse: &lse_buf,
    };
    forward(cfg, &dev, &ptx, s, &bufs, scale).unwrap_or_else(|e| panic!("{cfg:?}: {e}"));
    // 1/√D written here, not `cfg.default_scale()`, which the launch itself calls.
    let scale = scale.unwrap_or_else(|| 1.0 / f64::from(d).sqrt());
    let exact = reference::forward(
        s,
        d,
        &to_f64(&q),
        &to_f64(&k),
        &to_f64(&v),
        cfg.causal,
        scale,
    )
    .expect("reference");
    let rounded = |x: &[f32]| -> Vec<f64> { x.iter().map(|&a| f64::from(round_tf32(a))).collect() };
    let block_n = cfg.resolved().block_n as usize;
    let model = tf32_model(
        s,
        d,
        [&rounded(&q), &rounded(&k), &rounded(&v)],
        cfg.causal,
        block_n,
        scale,
    );
    Run {
        o: to_f64(&dev.download(&o_buf).expect("download")),
        lse: dev.download(&lse_buf).expect("download"),
        exact,
        model,
        log: dev.take_launch_log(),
    }
}

/// O as the kernel computes it from tf32-rounded Q, K, V: per row, per KV tile of `block_n`
/// keys, in log2 units,
///
/// ```text
/// s = Q·Kᵀ · scale · log2 e;  μ = max(m, max s);  ℓ ← 2^(m − μ)·ℓ + Σ p;  p = 2^(s − μ)
/// O ← 2^(m − μ)·O + Σ tf32(p)·V;  m ← μ                      and finally O / ℓ
/// ```
fn tf32_model(
    s: &AttentionShape,
    head_dim: u32,
    [q, k, v]: [&[f64]; 3],
    causal: bool,
    block_n: usize,
    scale: f64,
) -> Vec<f64> {
    let d = head_dim as usize;
    let (sq, skv) = (s.seq_q as usize, s.seq_kv as usize);
    let factor = std::f64::consts::LOG2_E * scale;
    let mut out = vec![0.0; s.q_len(head_dim)];
    for b in 0..s.batch as usize {
        for h in 0..s.heads_q as usize {
            let kv_base = (b * s.heads_kv as usize + s.kv_head(h as u32) as usize) * skv * d;
            let q_row = (b * s.heads_q as usize + h) * sq;
            for i in 0..sq {
                let qi = &q[(q_row + i) * d..(q_row + i + 1) * d];
                let (mut m, mut l) = (f64::NEG_INFINITY, 0.0);
                let o = &mut out[(q_row + i) * d..(q_row + i + 1) * d];
                for tile in (0..skv).step_by(block_n) {
                    let keys: Vec<usize> = (tile..skv.min(tile + block_n))
                        .filter(|&j| {
                            !causal || causal_visible(i as u32, j as u32, s.seq_q, s.seq_kv)
                        })
                        .collect();
                    let scores: Vec<f64> = keys
                        .iter()
                        .map(|&j| {
                            let kj = &k[kv_base + j * d..kv_base + (j + 1) * d];
                            factor * qi.iter().zip(kj).map(|(a, b)| a * b).sum::<f64>()
                        })
                        .collect();
                    let mu = scores.iter().fold(m, |a, &b| a.max(b));
                    if mu == f64::NEG_INFINITY {
                        continue;
                    }
                    let alpha = (m - mu).exp2();
                    l *= alpha;
                    o.iter_mut().for_each(|x| *x *= alpha);
                    for (&j, &sj) in keys.iter().zip(&scores) {
                        let p = (sj - mu).exp2();
                        l += p;
                        let p = f64::from(round_tf32(p as f32));
                        let vj = &v[kv_base + j * d..kv_base + (j + 1) * d];
                        o.iter_mut().zip(vj).for_each(|(x, y)| *x += p * y);
                    }
                    m = mu;
                }
                if l > 0.0 {
                    o.iter_mut().for_each(|x| *x /= l);
                }
            }
        }
    }
    out
}

/// The `m16n8k8` count of a launch: per block, per visited KV tile, per warp, `D · block_n / 64`
/// for `Q·Kᵀ` and as many for `P·V`.
fn expected_mma(cfg: &AttentionConfig, s: &AttentionShape) -> u64 {
    let r = cfg.resolved();
    let (bm, bn, d) = (r.block_m, r.block_n, r.head_dim);
    let per_tile = u64::from(bm / 16) * u64::from(2 * d * bn / 64);
    let tiles: u64 = (0..s.seq_q.div_ceil(bm))
        .map(|block| {
            let kv_end = if r.causal {
                let last = (block * bm + bm).min(s.seq_q);
                (i64::from(last) + i64::from(s.seq_kv) - i64::from(s.seq_q))
                    .clamp(0, i64::from(s.seq_kv)) as u32
            } else {
                s.seq_kv
            };
            u64::from(kv_end.div_ceil(bn))
        })
        .sum();
    tiles * per_tile * u64::from(s.heads_q * s.batch)
}

/// Checks one tf32 case at the default scale; returns thread-instructions per output.
fn check_tf32(cfg: AttentionConfig, s: AttentionShape, seed: u64) -> f64 {
    check_tf32_scaled(cfg, s, seed, None)
}

/// Checks one tf32 case with a scale override; returns thread-instructions per output.
fn check_tf32_scaled(
    cfg: AttentionConfig,
    s: AttentionShape,
    seed: u64,
    scale: Option<f64>,
) -> f64 {
    let what = format!(
        "{} {} {s:?} seed {seed} scale {scale:?}",
        cfg.matrix_name(),
        cfg.arch
    );
    assert_eq!(cfg.path(), AttentionPath::TensorCores, "{what}");
    let r = run(&cfg, &s, seed, scale);
    let err = error_relative_to_max(&r.o, &r.exact.o);
    let tol = tf32::tolerance(cfg.head_dim.max(s.seq_kv));
    let model = error_relative_to_max(&r.o, &r.model);
    let c = &r.log[0].counters;
    let banks = c.shared_bank_conflict_factor();
    eprintln!(
        "{what}: error {err:.3e} (tolerance {tol:.3e}), against the model {model:.3e}, shared \
         wavefronts {banks:.3} × the fewest"
    );
    assert!(err <= tol, "{what}: error {err:e} > tf32 tolerance {tol:e}");
    assert!(
        err >= TF32_FLOOR,
        "{what}: error {err:e}: did P·V and Q·Kᵀ stay in f32?"
    );
    assert!(
        model <= MODEL_TOL,
        "{what}: off the tf32 model by {model:e}"
    );
    let lse_tol = tf32::tolerance(cfg.head_dim);
    if let Err(e) = r.exact.check_lse(cfg.head_dim, &r.o, &r.lse, lse_tol) {
        panic!("{what}: {e}");
    }
    assert!(
        banks <= MAX_BANK_CONFLICT_FACTOR,
        "{what}: shared wavefronts {banks} × the fewest"
    );
    assert_eq!(
        c.mma_instructions,
        expected_mma(&cfg, &s),
        "{what}: mma count"
    );
    assert_eq!(
        c.mma_flops,
        c.mma_instructions * 2 * 16 * 8 * 8,
        "{what}: m16n8k8"
    );
    c.instructions.total() as f64 / s.q_len(cfg.head_dim) as f64
}

/// Ragged sequences (partial Q and KV tiles, `Sq > Skv` with fully masked causal rows), causal
/// and not, D 32/64/128.
#[test]
fn fixed_shapes() {
    for (i, head_dim) in [32, 64, 128].into_iter().enumerate() {
        for causal in [false, true] {
            for (sq, skv) in [(17, 129), (129, 64), (70, 150)] {
                let seed = 10 * i as u64 + u64::from(causal) + u64::from(sq);
                check_tf32(
                    tf32_config(head_dim, causal, Arch::Sm80),
                    AttentionShape::new(1, 2, 1, sq, skv),
                    seed,
                );
            }
        }
    }
}

/// Negative scales (the kernel flips Q's sign in shared memory and scales the softmax by
/// |scale|), causal and not.
#[test]
fn negative_scales() {
    for (head_dim, causal, scale) in [(64, true, -0.4), (128, false, -0.09)] {
        let cfg = tf32_config(head_dim, causal, Arch::Sm80);
        check_tf32_scaled(cfg, AttentionShape::new(1, 2, 1, 70, 150), 7, Some(scale));
    }
}

/// GQA (4 query heads per kv head, D 64 causal and D 128 full) and MQA with a batch, and the
/// head_dims kept off the
/// fixed sweep (96, 256) on other tensor-core targets.
#[test]
fn gqa_and_other_head_dims() {
    check_tf32(
        tf32_config(64, true, Arch::Sm80),
        AttentionShape::new(2, 8, 2, 33, 90),
        1,
    );
    check_tf32(
        tf32_config(128, false, Arch::Sm80),
        AttentionShape::new(1, 4, 1, 70, 129),
        5,
    );
    check_tf32(
        tf32_config(32, false, Arch::Sm86),
        AttentionShape::new(1, 4, 1, 50, 50),
        2,
    );
    check_tf32(
        tf32_config(96, true, Arch::Sm90),
        AttentionShape::new(1, 2, 2, 40, 77),
        3,
    );
    check_tf32(
        tf32_config(256, false, Arch::Sm89),
        AttentionShape::new(1, 1, 1, 20, 70),
        4,
    );
}

/// Seeded fuzzed shapes.
#[test]
fn fuzzed_shapes() {
    let mut rng = SplitMix64::new(0x7f32);
    for seed in 0..6 {
        let pick = |rng: &mut SplitMix64, n: u64| (rng.next_u64() % n) as u32;
        let head_dim = [32, 64, 128][pick(&mut rng, 3) as usize];
        let heads_kv = 1 + pick(&mut rng, 2);
        let heads_q = heads_kv * (1 + pick(&mut rng, 3));
        let s = AttentionShape::new(
            1 + pick(&mut rng, 2),
            heads_q,
            heads_kv,
            1 + pick(&mut rng, 100),
            1 + pick(&mut rng, 160),
        );
        let causal = pick(&mut rng, 2) == 1;
        check_tf32(tf32_config(head_dim, causal, Arch::Sm80), s, seed);
    }
}

/// Before sm_80 `allow_tf32` silently keeps the CUDA-core kernel: exact f32, no mma.
#[test]
fn sm75_stays_on_cuda_cores() {
    let cfg = tf32_config(64, true, Arch::Sm75);
    assert_eq!(cfg.path(), AttentionPath::CudaCores);
    let plain = AttentionConfig {
        allow_tf32: false,
        ..cfg
    };
    assert_eq!(cfg.compile().unwrap().ptx, plain.compile().unwrap().ptx);
    let s = AttentionShape::new(1, 2, 1, 40, 70);
    let r = run(&cfg, &s, 9, None);
    let err = error_relative_to_max(&r.o, &r.exact.o);
    assert!(err <= 1e-5, "sm_75: error {err:e}");
    assert!(r.log.iter().all(|rec| rec.counters.mma_instructions == 0));
}

/// Instructions per output of the same job (`B 1, H 2, S 128, D 64`, not causal) on CUDA
/// cores (f32) and on tf32 tensor cores.
#[test]
fn counters_against_cuda_cores() {
    let s = AttentionShape::new(1, 2, 2, 128, 128);
    let tf32 = check_tf32(tf32_config(64, false, Arch::Sm80), s, 11);
    let plain = AttentionConfig {
        allow_tf32: false,
        ..tf32_config(64, false, Arch::Sm80)
    };
    let r = run(&plain, &s, 11, None);
    let cuda = r.log[0].counters.instructions.total() as f64 / s.q_len(64) as f64;
    let c = &run(&tf32_config(64, false, Arch::Sm80), &s, 11, None).log[0].counters;
    eprintln!(
        "instructions per output: CUDA cores {cuda:.1}, tf32 {tf32:.1}; tf32 global load \
         efficiency {:.3}, shared wavefronts per request {:.3}, ldmatrix wavefronts per request \
         {:.2}",
        c.global_load_efficiency(),
        c.shared_wavefronts_per_request(),
        c.ldmatrix_wavefronts_per_request()
    );
    assert!(tf32 < cuda, "tf32 {tf32} vs CUDA cores {cuda}");
}
