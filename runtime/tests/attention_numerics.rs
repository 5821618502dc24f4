//! Attention forward in the interpreter (every check on: findings fail the launch) against the
//! f64 host reference, over a union of sweeps that together cover the cross product:
//!
//! - every `(Sq, Skv)` pair of {1, 17, 64, 129}², causal off and on (D = 64, f32);
//! - every head_dim at small sequences, causal off and on (f32);
//! - every dtype (f16, bf16, f32, f64) on a few shapes and archs (bf16's software conversion
//!   before sm_80/sm_90, f64's dynamic shared memory at D = 256);
//! - GQA ratio 4 (and MQA) with batches, causal;
//! - explicit tilings (smallest and largest tiles, partial tiles everywhere);
//! - a scale override, and seeded fuzzed shapes;
//! - blocks run in shuffled orders (no block depends on another);
//! - interpreter counters: Q/K/V loads fully coalesced, shared-memory accesses at their
//!   bank-conflict minimum;
//! - the tensor-core path (f16/bf16 on sm_80+, chosen automatically) in the sequence-pair,
//!   dtype, GQA, fuzzed, shuffled and strided sweeps above, plus every head_dim on every
//!   tensor-core target, explicit tilings (1 to 8 warps, 16 to 128 keys) and its counters
//!   against the CUDA-core kernel on the same job.
//!
//! Tolerances (error of O relative to the largest |O| of the reference; LSE absolute, scaled by
//! max(1, |LSE|)):
//!
//! | dtype | O        | LSE   |
//! |-------|----------|-------|
//! | f16   | 2e-3     | 1e-5  |
//! | bf16  | 1.6e-2   | 1e-5  |
//! | f32   | 1e-5     | 1e-5  |
//! | f64   | 1e-12    | 1e-5 (LSE is stored as f32) |
//!
//! Half types: inputs are rounded to the storage type before the reference sees them, so the
//! tolerance covers the kernel's f32 arithmetic and the final rounding of O (half an ulp:
//! 4.9e-4 for f16, 3.9e-3 for bf16). On tensor cores P is also rounded to the storage type
//! before `P·V` (the same half-ulp per weight, averaged over the keys); the same tolerances
//! hold, with the largest errors seen at about a quarter of them. Fully masked rows must be
//! exactly `O = 0`, `LSE = −∞`.
//! Q, K and V must be unchanged after the launch.

#![cfg(feature = "sim")]

use ptxforge_runtime::arch::Arch;
use ptxforge_runtime::dtype::DType;
use ptxforge_runtime::launch::{Backend, Element, LaunchError, SimBackend};
use ptxforge_runtime::templates::attention::launch::{forward, AttentionBuffers};
use ptxforge_runtime::templates::attention::{
    reference, AttentionConfig, AttentionPath, AttentionShape,
};
use ptxforge_runtime::templates::testing::{to_f64, HostFloat, SplitMix64};
use ptxforge_runtime::templates::KernelFamily;
use ptxforge_sim::Options;

fn device() -> SimBackend {
    SimBackend::new()
}

/// One kernel configuration and launch.
#[derive(Debug, Clone, Copy)]
struct Case {
    cfg: AttentionConfig,
    shape: AttentionShape,
    scale: Option<f64>,
    seed: u64,
}

fn shape(batch: u32, heads_q: u32, heads_kv: u32, seq_q: u32, seq_kv: u32) -> AttentionShape {
    AttentionShape {
        batch,
        heads_q,
        heads_kv,
        seq_q,
        seq_kv,
    }
}

fn config(head_dim: u32, dtype: DType, causal: bool, arch: Arch) -> AttentionConfig {
    AttentionConfig {
        dtype,
        causal,
        arch,
        ..AttentionConfig::new(head_dim)
    }
}

fn o_tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 2e-3,
        DType::BF16 => 1.6e-2,
        DType::F32 => 1e-5,
        DType::F64 => 1e-12,
    }
}

const LSE_TOLERANCE: f64 = 1e-5;

/// Runs one case for storage type `T` and checks it; returns the O error relative to the
/// tolerance (≤ 1 passes).
fn check_typed<T: HostFloat + Element + PartialEq>(dev: &SimBackend, case: &Case) -> f64 {
    let Case {
        cfg,
        shape: s,
        scale,
        seed,
    } = *case;
    let d = cfg.head_dim;
    let compiled = cfg
        .compile()
        .unwrap_or_else(|e| panic!("{case:?} does not compile: {e}"));
    let mut rng = SplitMix64::new(seed);
    let mut gen = |len: usize| -> Vec<T> {
        rng.vec_f64(len, -1.0, 1.0)
            .into_iter()
            .map(T::from_f64)
            .collect()
    };
    let (q, k, v) = (gen(s.q_len(d)), gen(s.kv_len(d)), gen(s.kv_len(d)));
    let q_buf = dev.upload(&q).unwrap();
    let k_buf = dev.upload(&k).unwrap();
    let v_buf = dev.upload(&v).unwrap();
    let o_buf = dev.alloc::<T>(s.q_len(d)).unwrap();
    let lse_buf = dev.alloc::<f32>(s.lse_len()).unwrap();
    let bufs = AttentionBuffers {
        q: &q_buf,
        k: &k_buf,
        v: &v_buf,
        o: &o_buf,
        lse: &lse_buf,
    };
    forward(&cfg, dev, &compiled.ptx, &s, &bufs, scale)
        .unwrap_or_else(|e| panic!("{case:?}: launch failed: {e}"));
    let o = to_f64(&dev.download(&o_buf).unwrap());
    let lse = dev.download(&lse_buf).unwrap();
    assert!(
        dev.download(&q_buf).unwrap() == q
            && dev.download(&k_buf).unwrap() == k
            && dev.download(&v_buf).unwrap() == v,
        "{case:?}: an input was written"
    );
    let want = reference::forward(
        &s,
        d,
        &to_f64(&q),
        &to_f64(&k),
        &to_f64(&v),
        cfg.causal,
        // 1/√D written here, not `cfg.default_scale()`, which the launch itself calls.
        scale.unwrap_or_else(|| 1.0 / f64::from(cfg.head_dim).sqrt()),
    )
    .unwrap();
    let max_ref = want.o.iter().fold(0.0f64, |m, x| m.max(x.abs())).max(1e-30);
    let tol = o_tolerance(cfg.dtype);
    let mut worst = 0.0f64;
    for (i, (got, exp)) in o.iter().zip(&want.o).enumerate() {
        let err = (got - exp).abs() / max_ref / tol;
        assert!(
            err <= 1.0,
            "{case:?}: O[{i}] = {got}, expected {exp} (error {:.3e} of max |O| {max_ref:.3e})",
            err * tol
        );
        worst = worst.max(err);
    }
    if let Err(e) = want.check_lse(d, &o, &lse, LSE_TOLERANCE) {
        panic!("{case:?}: {e}");
    }
    println!(
        "{} {}: O error {:.3} of tolerance",
        cfg.matrix_name(),
        cfg.arch,
        worst
    );
    worst
}

fn check(dev: &SimBackend, case: Case) -> f64 {
    match case.cfg.dtype {
        DType::F16 => check_typed::<half::f16>(dev, &case),
        DType::BF16 => check_typed::<half::bf16>(dev, &case),
        DType::F32 => check_typed::<f32>(dev, &case),
        DType::F64 => check_typed::<f64>(dev, &case),
    }
}

const SEQS: [u32; 4] = [1, 17, 64, 129];

/// Every `(Sq, Skv)` pair (partial Q tiles, partial and multiple KV tiles, `Sq > Skv` with
/// fully masked rows), causal off and on, on CUDA cores (f32) and on tensor cores (f16, bf16).
#[test]
fn every_sequence_pair_causal_and_not() {
    let dev = device();
    for (dtype, arch) in [
        (DType::F32, Arch::Sm80),
        (DType::F16, Arch::Sm80),
        (DType::BF16, Arch::Sm90),
    ] {
        for causal in [false, true] {
            for sq in SEQS {
                for skv in SEQS {
                    check(
                        &dev,
                        Case {
                            cfg: config(64, dtype, causal, arch),
                            shape: shape(1, 1, 1, sq, skv),
                            scale: None,
                            seed: u64::from(sq * 1000 + skv) + u64::from(causal),
                        },
                    );
                }
            }
        }
    }
}

#[test]
fn every_head_dim() {
    let dev = device();
    for head_dim in AttentionConfig::HEAD_DIMS {
        for (causal, sq, skv) in [(false, 17, 33), (true, 20, 9)] {
            check(
                &dev,
                Case {
                    cfg: config(head_dim, DType::F32, causal, Arch::Sm80),
                    shape: shape(1, 1, 1, sq, skv),
                    scale: None,
                    seed: u64::from(head_dim),
                },
            );
        }
    }
}

#[test]
fn every_dtype() {
    let dev = device();
    let cases = [
        (DType::F16, 64, Arch::Sm70),
        (DType::F16, 128, Arch::Sm90),
        (DType::BF16, 64, Arch::Sm75),
        (DType::BF16, 96, Arch::Sm80),
        (DType::BF16, 32, Arch::Sm90),
        (DType::F32, 128, Arch::Sm86),
        (DType::F64, 64, Arch::Sm80),
        (DType::F64, 256, Arch::Sm90),
    ];
    for (dtype, head_dim, arch) in cases {
        for (causal, sq, skv) in [(true, 17, 129), (false, 64, 17)] {
            check(
                &dev,
                Case {
                    cfg: config(head_dim, dtype, causal, arch),
                    shape: shape(1, 2, 2, sq, skv),
                    scale: None,
                    seed: u64::from(head_dim) + sq as u64,
                },
            );
        }
    }
}

#[test]
fn grouped_query_attention() {
    let dev = device();
    for (dtype, hq, hkv, sq, skv) in [
        (DType::F32, 4, 1, 17, 64),
        (DType::F16, 8, 2, 64, 17),
        (DType::BF16, 4, 1, 1, 129),
        (DType::F64, 4, 4, 17, 17),
    ] {
        check(
            &dev,
            Case {
                cfg: config(32, dtype, true, Arch::Sm80),
                shape: shape(2, hq, hkv, sq, skv),
                scale: None,
                seed: u64::from(hq * 100 + sq),
            },
        );
    }
}

#[test]
fn explicit_tilings_and_scale_override() {
    let dev = device();
    // A large scale makes the softmax sharp, so the running maximum moves between tiles and
    // the rescaling of ℓ and O matters.
    for (head_dim, block_m, block_n, scale) in [
        (32, 16, 16, 0.3),
        (32, 128, 16, 2.0),
        (64, 16, 128, 0.3),
        (96, 32, 16, 2.0),
        (64, 16, 16, 4.0),
    ] {
        let cfg = AttentionConfig {
            block_m,
            block_n,
            ..config(head_dim, DType::F32, true, Arch::Sm80)
        };
        check(
            &dev,
            Case {
                cfg,
                shape: shape(1, 2, 1, 33, 40),
                scale: Some(scale),
                seed: u64::from(block_m + block_n),
            },
        );
    }
}

#[test]
fn fuzzed_shapes() {
    let dev = device();
    let mut rng = SplitMix64::new(0xa77e);
    for i in 0..8 {
        let head_dim = AttentionConfig::HEAD_DIMS[rng.below(5) as usize];
        let dtype = DType::ALL[rng.below(4) as usize];
        let arch = Arch::ALL[rng.below(7) as usize];
        let cfg = config(head_dim, dtype, rng.below(2) == 1, arch);
        if cfg.validate().is_err() {
            continue;
        }
        let heads_kv = 1 + rng.below(2) as u32;
        let group = [1, 2, 4][rng.below(3) as usize];
        let s = shape(
            1 + rng.below(2) as u32,
            heads_kv * group,
            heads_kv,
            1 + rng.below(80) as u32,
            1 + rng.below(80) as u32,
        );
        check(
            &dev,
            Case {
                cfg,
                shape: s,
                scale: None,
                seed: i,
            },
        );
    }
}

#[test]
fn shuffled_block_order() {
    for seed in [1, 2] {
        let dev = SimBackend::with_options(Options {
            shuffle_blocks: Some(seed),
            ..Options::default()
        });
        for cfg in [
            config(32, DType::F32, true, Arch::Sm80),
            tc_config(32, DType::BF16, true, Arch::Sm80),
        ] {
            check(
                &dev,
                Case {
                    cfg,
                    shape: shape(2, 4, 2, 129, 64),
                    scale: None,
                    seed,
                },
            );
        }
    }
}

/// Interpreter counters of one launch per configuration (`Sq = Skv = 128`, one head): every
/// global load is fully coalesced (Q rows and K/V tiles are read in whole 32-byte sectors),
/// and every shared request takes the fewest wavefronts its phases allow (no bank conflict;
/// the counter serves 8-byte accesses as two half-warps and 16-byte ones as four
/// quarter-warps, at least one wavefront each). Wavefronts per request then follow from the
/// mix of access widths: the CUDA-core kernels' 16-byte tile stores and K/V reads (and f64's
/// 8-byte ones) need 2–4 each; on tensor cores the 16-byte reads of the staged O tile need 4.
#[test]
fn loads_are_coalesced_and_shared_accesses_conflict_free() {
    let dev = device();
    for (head_dim, dtype, max_wavefronts_per_request) in [
        (64, DType::F32, 3.601),
        // Tensor cores (ldmatrix and cp.async are counted apart): per warp the O staging's 32
        // conflict-free 4-byte stores and 8 16-byte reads at their minimum of 4 wavefronts,
        // (32 + 8 · 4) / 40 = 1.6.
        (128, DType::F16, 1.601),
        (256, DType::F32, 3.667),
        (64, DType::F64, 3.86),
    ] {
        let cfg = config(head_dim, dtype, false, Arch::Sm80);
        let _ = dev.take_launch_log();
        check(
            &dev,
            Case {
                cfg,
                shape: shape(1, 1, 1, 128, 128),
                scale: None,
                seed: 5,
            },
        );
        let log = dev.take_launch_log();
        assert_eq!(log.len(), 1);
        let c = &log[0].counters;
        let load_efficiency = c.global_load_efficiency();
        let wavefronts = c.shared_wavefronts_per_request();
        println!(
            "{}: global load efficiency {load_efficiency:.3}, store {:.3}, shared wavefronts \
             per request {wavefronts:.3} (× the fewest {:.3}), {} thread-instructions",
            cfg.matrix_name(),
            c.global_store_efficiency(),
            c.shared_bank_conflict_factor(),
            c.instructions.total()
        );
        assert!(load_efficiency > 0.999, "{}", cfg.matrix_name());
        assert!(
            wavefronts <= max_wavefronts_per_request,
            "{}: {wavefronts}",
            cfg.matrix_name()
        );
        assert!(
            (c.shared_bank_conflict_factor() - 1.0).abs() < 1e-9,
            "{}: {} × the fewest wavefronts",
            cfg.matrix_name(),
            c.shared_bank_conflict_factor()
        );
    }
}

/// Issue 11's shared-memory bar on the f16 tensor-core kernel (tf32 is held to it in every case
/// of `attention_tf32.rs`): full and causal, one KV head per query head and GQA, every
/// head_dim, every launch at most 1.05 × the fewest shared wavefronts (the O staging's pair
/// stores and its 16-byte reads; `ldmatrix` and `cp.async` are counted apart).
#[test]
fn tensor_core_shared_accesses_conflict_free() {
    let dev = device();
    for head_dim in AttentionConfig::HEAD_DIMS {
        for causal in [false, true] {
            for s in [shape(1, 2, 2, 128, 128), shape(1, 4, 1, 70, 129)] {
                let cfg = tc_config(head_dim, DType::F16, causal, Arch::Sm80);
                let _ = dev.take_launch_log();
                let seed = u64::from(head_dim + s.heads_q);
                let case = Case {
                    cfg,
                    shape: s,
                    scale: None,
                    seed,
                };
                check(&dev, case);
                let log = dev.take_launch_log();
                let c = &log[0].counters;
                let factor = c.shared_bank_conflict_factor();
                let per_output = c.instructions.total() as f64 / s.q_len(head_dim) as f64;
                println!(
                    "{} {s:?}: shared wavefronts {factor:.3} × the fewest, {per_output:.1} \
                     instructions per output",
                    cfg.matrix_name()
                );
                assert!(factor <= 1.05, "{} {s:?}: {factor}", cfg.matrix_name());
            }
        }
    }
}

/// A configuration that must build the tensor-core kernel (f16/bf16 on sm_80+).
fn tc_config(head_dim: u32, dtype: DType, causal: bool, arch: Arch) -> AttentionConfig {
    let cfg = config(head_dim, dtype, causal, arch);
    assert_eq!(cfg.path(), AttentionPath::TensorCores, "{cfg:?}");
    cfg
}

/// Every head_dim on the tensor-core path (Q fragments in registers up to 128, re-read from
/// shared memory at 256), on every tensor-core target, with at least two KV tiles.
#[test]
fn tensor_cores_every_head_dim_and_target() {
    let dev = device();
    let archs = [Arch::Sm80, Arch::Sm86, Arch::Sm89, Arch::Sm90, Arch::Sm90a];
    for (i, head_dim) in AttentionConfig::HEAD_DIMS.into_iter().enumerate() {
        for causal in [false, true] {
            let dtype = if (i + usize::from(causal)) % 2 == 0 {
                DType::F16
            } else {
                DType::BF16
            };
            check(
                &dev,
                Case {
                    cfg: tc_config(head_dim, dtype, causal, archs[(i + 2) % archs.len()]),
                    shape: shape(1, 2, 1, 70, 150),
                    scale: None,
                    seed: u64::from(head_dim) + u64::from(causal),
                },
            );
        }
    }
}

/// The K/V ring is three deep where two blocks of that footprint fit the target (D = 32 and 64
/// on sm_80, D = 32 on sm_86), two deep otherwise (D = 64 on sm_86, D = 128 on sm_90): the
/// launch asks for exactly `(block_m + 2 · stages · block_n) · (D + 8) · 2` bytes (default
/// tiles: 128 × 64 in warps of 32 rows where they fit, else 64 × 64), and with 6 KV tiles
/// every slot is refilled at least once while its neighbours are in flight.
#[test]
fn tensor_cores_kv_ring_depth_follows_shared_memory() {
    let dev = device();
    for (head_dim, arch, stages, dtype, tiles) in [
        (32, Arch::Sm80, 3, DType::BF16, (128, 64)),
        (64, Arch::Sm80, 3, DType::F16, (128, 64)),
        (32, Arch::Sm86, 3, DType::F16, (128, 64)),
        (64, Arch::Sm86, 2, DType::BF16, (128, 64)),
        (128, Arch::Sm90, 2, DType::F16, (64, 64)),
    ] {
        for causal in [false, true] {
            let cfg = tc_config(head_dim, dtype, causal, arch);
            let t = cfg.tiles();
            assert_eq!((t.block_m, t.block_n), tiles, "{}", cfg.matrix_name());
            assert_eq!(cfg.tc_stages_for(t.block_m, t.block_n), stages);
            let _ = dev.take_launch_log();
            check(
                &dev,
                Case {
                    cfg,
                    shape: shape(1, 2, 1, 70, 333),
                    scale: None,
                    seed: u64::from(head_dim * stages) + u64::from(causal),
                },
            );
            let log = dev.take_launch_log();
            let footprint = (tiles.0 + 2 * stages * tiles.1) * (head_dim + 8) * 2;
            assert_eq!(
                log[0].config.dynamic_shared_bytes,
                footprint,
                "{}: {stages} stages",
                cfg.matrix_name()
            );
        }
    }
}

/// Explicit tilings on the tensor-core path (1 to 8 warps, 16 to 128 keys per tile) with a
/// sharp softmax, negative and zero scales, GQA and a batch.
#[test]
fn tensor_cores_explicit_tilings_and_scale_override() {
    let dev = device();
    for (head_dim, block_m, block_n, scale, dtype) in [
        (32, 16, 16, 0.3, DType::F16),
        (64, 128, 16, 2.0, DType::BF16),
        (64, 16, 128, 0.3, DType::F16),
        (96, 32, 64, 2.0, DType::F16),
        (128, 64, 32, 4.0, DType::BF16),
        // A negative scale (Q's sign flipped in shared memory, the softmax scaled by |scale|),
        // with Q in registers and re-read from shared, and a zero scale (uniform weights,
        // masked keys still excluded).
        (64, 64, 64, -0.7, DType::F16),
        (256, 64, 32, -2.0, DType::BF16),
        (128, 64, 64, 0.0, DType::F16),
    ] {
        let cfg = AttentionConfig {
            block_m,
            block_n,
            ..tc_config(head_dim, dtype, true, Arch::Sm80)
        };
        check(
            &dev,
            Case {
                cfg,
                shape: shape(2, 4, 2, 33, 140),
                scale: Some(scale),
                seed: u64::from(block_m + block_n),
            },
        );
    }
}

/// Warps of 32 query rows (two m16 tiles sharing each K and V fragment; 128-row blocks of 4
/// warps): shapes where a mis-assigned second tile would show. `Sq = 70`: warp 2's first tile
/// holds rows 64..80 (6 valid) and its second tile, rows 80..96, lies wholly past `Sq`, as
/// does warp 3; `Sq = Skv = 150` causal: the diagonal crosses both tiles of every warp (and
/// the second block); `Sq = 45 < Skv = 150` causal: the bottom-right diagonal starts inside
/// warp 1's second tile. Q in registers (D ≤ 64) and re-read from shared memory (D = 128),
/// negative and zero scales, GQA and a batch.
#[test]
fn tensor_cores_warps_of_32_rows() {
    let dev = device();
    for (head_dim, block_n, dtype, arch, scale) in [
        (128, 32, DType::F16, Arch::Sm80, None),
        (64, 64, DType::BF16, Arch::Sm80, Some(-0.4)),
        (32, 128, DType::F16, Arch::Sm86, Some(0.0)),
        (64, 32, DType::F16, Arch::Sm90, None),
        (96, 32, DType::BF16, Arch::Sm89, Some(1.5)),
    ] {
        for causal in [false, true] {
            let cfg = AttentionConfig {
                block_m: 128,
                block_n,
                ..tc_config(head_dim, dtype, causal, arch)
            };
            assert_eq!(cfg.tc_warp_rows(128, block_n), 32, "{}", cfg.matrix_name());
            assert_eq!(cfg.tiles().threads, 128);
            for (b, hq, hkv, sq, skv) in
                [(1, 2, 1, 70, 90), (1, 1, 1, 150, 150), (2, 4, 2, 45, 150)]
            {
                check(
                    &dev,
                    Case {
                        cfg,
                        shape: shape(b, hq, hkv, sq, skv),
                        scale,
                        seed: u64::from(head_dim + sq) + u64::from(causal),
                    },
                );
            }
        }
    }
}

/// Interpreter counters of the same job (f16, `B = 1, H = 2, S = 128, D = 64`, causal off and
/// on) on CUDA cores (sm_75) and on tensor cores (sm_80): the tensor-core kernel's `cp.async`
/// copies read whole sectors, every `ldmatrix` is an x4 at 4 wavefronts (one per 8×8 matrix:
/// conflict-free), the tensor cores do all of `Q·Kᵀ` and `P·V`, and it issues fewer
/// instructions per output.
#[test]
fn tensor_core_counters_against_cuda_cores() {
    let dev = device();
    for causal in [false, true] {
        let mut per_output = Vec::new();
        for arch in [Arch::Sm75, Arch::Sm80] {
            let cfg = config(64, DType::F16, causal, arch);
            let s = shape(1, 2, 2, 128, 128);
            let _ = dev.take_launch_log();
            check(
                &dev,
                Case {
                    cfg,
                    shape: s,
                    scale: None,
                    seed: 11,
                },
            );
            let log = dev.take_launch_log();
            let c = &log[0].counters;
            let outputs = s.q_len(64) as f64;
            let total = c.instructions.total() as f64;
            // Q·Kᵀ and P·V of the unmasked problem: 2 · 2 · Sq · Skv · D per head.
            let gemm_flops = 4.0 * 2.0 * 128.0 * 128.0 * 64.0;
            let cp_async_efficiency = c.cp_async_load_efficiency();
            let ldmatrix = match c.ldmatrix_requests {
                0 => "n/a (none)".to_string(),
                _ => format!(
                    "{:.2} ({:.2} per 8x8 matrix)",
                    c.ldmatrix_wavefronts_per_request(),
                    c.ldmatrix_wavefronts_per_request() / 4.0
                ),
            };
            println!(
                "{} {:?} {arch}: {:.1} thread-instructions per output, tensor-core \
                 instructions {:.4} of all, mma flops / attention flops {:.3}, global load \
                 efficiency {:.3} (ld) {cp_async_efficiency:.3} (cp.async), store {:.3}, \
                 ldmatrix wavefronts per request {ldmatrix}, shared wavefronts per request \
                 {:.3}, barriers {}",
                cfg.matrix_name(),
                cfg.path(),
                total / outputs,
                c.instructions.tensor_core as f64 / total,
                c.mma_flops as f64 / gemm_flops,
                c.global_load_efficiency(),
                c.global_store_efficiency(),
                c.shared_wavefronts_per_request(),
                c.barriers
            );
            if cfg.path() == AttentionPath::TensorCores {
                assert!(c.mma_instructions > 0);
                assert!(c.ldmatrix_wavefronts_per_request() <= 4.0);
                assert!(cp_async_efficiency > 0.999);
                assert!(c.global_load_efficiency() > 0.999);
                // Causal tiles above the diagonal are skipped, so at most the whole problem.
                assert!(c.mma_flops as f64 <= gemm_flops);
            }
            per_output.push(total / outputs);
        }
        assert!(per_output[1] < per_output[0], "{per_output:?}");
    }
}

#[test]
fn bad_inputs_are_rejected_before_launching() {
    let dev = device();
    let cfg = config(32, DType::F32, false, Arch::Sm80);
    let ptx = cfg.compile().unwrap().ptx;
    let s = shape(1, 2, 1, 5, 7);
    let q = dev.upload(&vec![0.0f32; s.q_len(32)]).unwrap();
    let kv = dev.upload(&vec![0.0f32; s.kv_len(32)]).unwrap();
    let short = dev.upload(&vec![0.0f32; s.kv_len(32) - 1]).unwrap();
    let o = dev.alloc::<f32>(s.q_len(32)).unwrap();
    let lse = dev.alloc::<f32>(s.lse_len()).unwrap();
    let bufs = |k| AttentionBuffers {
        q: &q,
        k,
        v: &kv,
        o: &o,
        lse: &lse,
    };
    assert_eq!(
        forward(&cfg, &dev, &ptx, &s, &bufs(&short), None),
        Err(LaunchError::BufferLength {
            name: "k",
            expected: s.kv_len(32),
            actual: s.kv_len(32) - 1
        })
    );
    let gqa3 = shape(1, 2, 3, 5, 7);
    assert!(matches!(
        forward(&cfg, &dev, &ptx, &gqa3, &bufs(&kv), None),
        Err(LaunchError::Shape(_))
    ));
    assert!(matches!(
        forward(&cfg, &dev, &ptx, &shape(1, 2, 1, 0, 7), &bufs(&kv), None),
        Err(LaunchError::InvalidDim { name: "seq_q", .. })
    ));
    // Nothing was launched: O is still uninitialised, and a real launch still works.
    assert_eq!(forward(&cfg, &dev, &ptx, &s, &bufs(&kv), None), Ok(()));
}

// ---- strided layouts ------------------------------------------------------------------------
//
// The kernel with explicit strides must give exactly the contiguous result (the arithmetic does
// not depend on where the elements live), for `[B, S, H, D]`, one packed QKV buffer and a KV
// cache whose spare capacity is filled with NaN (so any read past `seq_kv` would show), every
// check on; and bad layouts are refused before launch.

mod strided {
    use super::*;
    use ptxforge_runtime::templates::attention::launch::{forward_strided, StridedLaunchError};
    use ptxforge_runtime::templates::attention::{AttentionLayouts, LayoutError, TensorLayout};

    /// `[B, H, S, D]` contiguous data rewritten into `layout` inside a buffer of `len` elements
    /// (elements the layout does not reach keep `fill`).
    fn scatter<T: Copy>(src: &[T], dims: [u32; 4], layout: &TensorLayout, dst: &mut [T]) {
        let [b, h, s, d] = dims.map(|x| x as usize);
        for bi in 0..b {
            for hi in 0..h {
                for si in 0..s {
                    let from = ((bi * h + hi) * s + si) * d;
                    let to = layout.offset + bi * layout.batch + hi * layout.head + si * layout.seq;
                    dst[to..to + d].copy_from_slice(&src[from..from + d]);
                }
            }
        }
    }

    /// The inverse of [`scatter`].
    fn gather<T: Copy + Default>(src: &[T], dims: [u32; 4], layout: &TensorLayout) -> Vec<T> {
        let [b, h, s, d] = dims.map(|x| x as usize);
        let mut out = vec![T::default(); b * h * s * d];
        for bi in 0..b {
            for hi in 0..h {
                for si in 0..s {
                    let to = ((bi * h + hi) * s + si) * d;
                    let from =
                        layout.offset + bi * layout.batch + hi * layout.head + si * layout.seq;
                    out[to..to + d].copy_from_slice(&src[from..from + d]);
                }
            }
        }
        out
    }

    struct Inputs<T> {
        q: Vec<T>,
        k: Vec<T>,
        v: Vec<T>,
    }

    fn inputs<T: HostFloat>(cfg: &AttentionConfig, s: &AttentionShape, seed: u64) -> Inputs<T> {
        let mut rng = SplitMix64::new(seed);
        let d = cfg.head_dim;
        let mut v = |n: usize| -> Vec<T> {
            rng.vec_f32(n, -1.0, 1.0)
                .into_iter()
                .map(|x| T::from_f64(f64::from(x)))
                .collect()
        };
        Inputs {
            q: v(s.q_len(d)),
            k: v(s.kv_len(d)),
            v: v(s.kv_len(d)),
        }
    }

    /// The contiguous launch: `(O, LSE)`.
    fn contiguous<T: Element + HostFloat>(
        cfg: &AttentionConfig,
        s: &AttentionShape,
        x: &Inputs<T>,
    ) -> (Vec<T>, Vec<f32>) {
        let dev = device();
        let ptx = cfg.compile().unwrap().ptx;
        let (q, k, v) = (
            dev.upload(&x.q).unwrap(),
            dev.upload(&x.k).unwrap(),
            dev.upload(&x.v).unwrap(),
        );
        let o = dev.alloc::<T>(s.q_len(cfg.head_dim)).unwrap();
        let lse = dev.alloc::<f32>(s.lse_len()).unwrap();
        let bufs = AttentionBuffers {
            q: &q,
            k: &k,
            v: &v,
            o: &o,
            lse: &lse,
        };
        forward(cfg, &dev, &ptx, s, &bufs, None).unwrap();
        (dev.download(&o).unwrap(), dev.download(&lse).unwrap())
    }

    /// Launches with `layouts` on buffers `[q, k, v]` (indices into `bufs`; equal indices share
    /// a buffer) of the given lengths filled with `fill`, scattering the inputs first; returns
    /// the output gathered back to `[B, H, S, D]`, and LSE.
    #[allow(clippy::too_many_arguments)]
    fn strided<T: Element + HostFloat + Default>(
        cfg: &AttentionConfig,
        s: &AttentionShape,
        x: &Inputs<T>,
        layouts: &AttentionLayouts,
        which: [usize; 3],
        lens: &[usize],
        o_len: usize,
        fill: T,
    ) -> (Vec<T>, Vec<f32>) {
        let d = cfg.head_dim;
        let mut host: Vec<Vec<T>> = lens.iter().map(|&n| vec![fill; n]).collect();
        let q_dims = [s.batch, s.heads_q, s.seq_q, d];
        let kv_dims = [s.batch, s.heads_kv, s.seq_kv, d];
        scatter(&x.q, q_dims, &layouts.q, &mut host[which[0]]);
        scatter(&x.k, kv_dims, &layouts.k, &mut host[which[1]]);
        scatter(&x.v, kv_dims, &layouts.v, &mut host[which[2]]);
        let dev = device();
        let ptx = cfg.compile().unwrap().ptx;
        let bufs: Vec<_> = host.iter().map(|h| dev.upload(h).unwrap()).collect();
        let o = dev.alloc::<T>(o_len).unwrap();
        let lse = dev.alloc::<f32>(s.lse_len()).unwrap();
        let launch = AttentionBuffers {
            q: &bufs[which[0]],
            k: &bufs[which[1]],
            v: &bufs[which[2]],
            o: &o,
            lse: &lse,
        };
        forward_strided(cfg, &dev, &ptx, s, &launch, layouts, None).unwrap();
        for (h, b) in host.iter().zip(&bufs) {
            let after: Vec<u64> = dev
                .download(b)
                .unwrap()
                .iter()
                .map(|x| x.to_f64().to_bits())
                .collect();
            let before: Vec<u64> = h.iter().map(|x| x.to_f64().to_bits()).collect();
            assert_eq!(after, before, "inputs must be unchanged");
        }
        let o = gather(&dev.download(&o).unwrap(), q_dims, &layouts.o);
        (o, dev.download(&lse).unwrap())
    }

    fn bits<T: HostFloat>(v: &[T]) -> Vec<u64> {
        v.iter().map(|x| x.to_f64().to_bits()).collect()
    }

    fn check_all_layouts<T: Element + HostFloat + Default>(cfg: AttentionConfig, nan: T) {
        let d = cfg.head_dim;
        for s in [shape(2, 4, 2, 37, 37), shape(1, 2, 2, 70, 70)] {
            let x = inputs::<T>(&cfg, &s, 7 + u64::from(s.seq_q));
            let (o_ref, lse_ref) = contiguous(&cfg, &s, &x);
            let name = format!("{} {:?}", cfg.matrix_name(), s);

            // [B, S, H, D] everywhere.
            let l = AttentionLayouts::bshd(&s, d);
            let lens = [s.q_len(d), s.kv_len(d), s.kv_len(d)];
            let (o, lse) = strided(&cfg, &s, &x, &l, [0, 1, 2], &lens, s.q_len(d), nan);
            assert_eq!(bits(&o), bits(&o_ref), "{name}: bshd O");
            assert_eq!(bits(&lse), bits(&lse_ref), "{name}: bshd LSE");

            // One packed QKV buffer [B, S, Hq + 2 Hkv, D], O [B, S, Hq, D].
            let l = AttentionLayouts::packed_qkv(&s, d);
            let packed = (s.batch * s.seq_q * (s.heads_q + 2 * s.heads_kv) * d) as usize;
            let (o, lse) = strided(&cfg, &s, &x, &l, [0, 0, 0], &[packed], s.q_len(d), nan);
            assert_eq!(bits(&o), bits(&o_ref), "{name}: packed QKV O");
            assert_eq!(bits(&lse), bits(&lse_ref), "{name}: packed QKV LSE");
        }
        // A KV cache [B, Hkv, capacity, D] with NaN beyond seq_kv, decode-like and prefill-like,
        // causal or not as configured.
        for s in [shape(2, 4, 2, 1, 45), shape(1, 4, 1, 19, 45)] {
            let x = inputs::<T>(&cfg, &s, 99 + u64::from(s.seq_q));
            let (o_ref, lse_ref) = contiguous(&cfg, &s, &x);
            let capacity = 64;
            let l = AttentionLayouts::kv_cache(&s, d, capacity);
            let cache = (s.batch * s.heads_kv * capacity * d) as usize;
            let lens = [s.q_len(d), cache, cache];
            let (o, lse) = strided(&cfg, &s, &x, &l, [0, 1, 2], &lens, s.q_len(d), nan);
            let name = format!("{} {:?}", cfg.matrix_name(), s);
            assert_eq!(bits(&o), bits(&o_ref), "{name}: KV cache O");
            assert_eq!(bits(&lse), bits(&lse_ref), "{name}: KV cache LSE");
        }
    }

    #[test]
    fn strided_layouts_match_the_contiguous_result_f32() {
        check_all_layouts::<f32>(AttentionConfig::new(64), f32::NAN);
        let causal = AttentionConfig {
            causal: true,
            ..AttentionConfig::new(32)
        };
        check_all_layouts::<f32>(causal, f32::NAN);
    }

    #[test]
    fn strided_layouts_match_the_contiguous_result_f16() {
        let cfg = AttentionConfig {
            dtype: DType::F16,
            causal: true,
            ..AttentionConfig::new(96)
        };
        assert_eq!(cfg.path(), AttentionPath::TensorCores);
        check_all_layouts::<half::f16>(cfg, half::f16::NAN);
    }

    #[test]
    fn strided_layouts_match_the_contiguous_result_tf32() {
        let cfg = AttentionConfig {
            allow_tf32: true,
            causal: true,
            ..AttentionConfig::new(64)
        };
        assert_eq!(cfg.path(), AttentionPath::TensorCores);
        check_all_layouts::<f32>(cfg, f32::NAN);
    }

    #[test]
    fn strided_layouts_match_the_contiguous_result_bf16_tensor_cores() {
        let cfg = AttentionConfig {
            dtype: DType::BF16,
            arch: Arch::Sm90,
            ..AttentionConfig::new(64)
        };
        assert_eq!(cfg.path(), AttentionPath::TensorCores);
        check_all_layouts::<half::bf16>(cfg, half::bf16::NAN);
        let f16_on_cuda_cores = AttentionConfig {
            dtype: DType::F16,
            causal: true,
            arch: Arch::Sm75,
            ..AttentionConfig::new(32)
        };
        assert_eq!(f16_on_cuda_cores.path(), AttentionPath::CudaCores);
        check_all_layouts::<half::f16>(f16_on_cuda_cores, half::f16::NAN);
    }

    #[test]
    fn bad_layouts_are_refused_before_launch() {
        let cfg = AttentionConfig::new(32);
        let s = shape(2, 4, 2, 9, 9);
        let d = cfg.head_dim;
        let dev = SimBackend::new();
        let ptx = cfg.compile().unwrap().ptx;
        let q = dev.upload(&vec![0.5f32; s.q_len(d)]).unwrap();
        let kv = dev.upload(&vec![0.25f32; s.kv_len(d)]).unwrap();
        let o = dev.alloc::<f32>(s.q_len(d)).unwrap();
        let lse = dev.alloc::<f32>(s.lse_len()).unwrap();
        let bufs = AttentionBuffers {
            q: &q,
            k: &kv,
            v: &kv,
            o: &o,
            lse: &lse,
        };
        let run = |l: &AttentionLayouts| forward_strided(&cfg, &dev, &ptx, &s, &bufs, l, None);
        let good = AttentionLayouts::contiguous(&s, d);
        // Two outputs on one element: O rows 16 elements apart hold 32 each.
        let mut l = good;
        l.o.seq = 16;
        assert!(matches!(
            run(&l),
            Err(StridedLaunchError::Layout(LayoutError::Overlap {
                tensor: "o",
                ..
            }))
        ));
        // O heads on top of each other.
        let mut l = good;
        l.o.head = 0;
        assert!(matches!(
            run(&l),
            Err(StridedLaunchError::Layout(LayoutError::Overlap {
                tensor: "o",
                ..
            }))
        ));
        // Past a buffer: a KV cache layout larger than the buffer, a shifted V.
        let l = AttentionLayouts::kv_cache(&s, d, 16);
        assert!(matches!(
            run(&l),
            Err(StridedLaunchError::Layout(LayoutError::OutOfBounds {
                tensor: "k",
                ..
            }))
        ));
        let mut l = good;
        l.v.offset = 4;
        assert!(matches!(
            run(&l),
            Err(StridedLaunchError::Layout(LayoutError::OutOfBounds {
                tensor: "v",
                ..
            }))
        ));
        // Misaligned stride for the 16-byte accesses.
        let mut l = good;
        l.q.seq = 34;
        assert!(matches!(
            run(&l),
            Err(StridedLaunchError::Layout(LayoutError::Misaligned {
                tensor: "q",
                ..
            }))
        ));
        // LSE stays contiguous and exact.
        let short_lse = dev.alloc::<f32>(s.lse_len() - 1).unwrap();
        let bad = AttentionBuffers {
            lse: &short_lse,
            ..bufs
        };
        assert!(matches!(
            forward_strided(&cfg, &dev, &ptx, &s, &bad, &good, None),
            Err(StridedLaunchError::Launch(LaunchError::BufferLength {
                name: "lse",
                ..
            }))
        ));
        assert_eq!(run(&good), Ok(()));
    }
}
