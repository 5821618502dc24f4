//! The NF4 tiled GEMMs on the tensor-core path (f16/bf16, sm_80), in the interpreter with every
//! sanitizer check on.
//!
//! Reference: exactly what the kernels multiply — each weight dequantised in the activation
//! type `T` (`rn(rn(NF4_CODE[code]) · rn(absmax))`, every rounding to `T`, nearest even: the B
//! fragment holds `T`; `kernels::half_dequant`), products summed in f64. Tolerance relative to `max |ref|` over the output: f16
//! 2e-3, bf16 2e-2 (f32 accumulation in mma order plus the one rounding of each output to `T`).
//! With one-hot activations every output is a single rounded weight, so there the kernels must
//! match bit for bit. Shapes take ≥ 3 trips of the 3-stage ring in both GEMMs, two row tiles,
//! ragged edges in every dimension, and every copy width of the ring (packed rows of 16-, 8-, 4-
//! byte multiples, and rows off 4-byte words copied as the aligned words covering them; odd `n`
//! for the element-wise `G_C` copies).
#![cfg(feature = "sim")]

use half::{bf16, f16};
use ptxforge_runtime::arch::Arch;
use ptxforge_runtime::launch::{Backend, LaunchRecord, SimBackend};
use ptxforge_runtime::templates::nf4::launch::{self as nf4_launch, DeviceWeights, Nf4Activation};
use ptxforge_runtime::templates::nf4::{quantize, Nf4Config, Nf4DoubleQuant, NF4_CODE};
use ptxforge_runtime::templates::testing::{HostFloat, SplitMix64};
use ptxforge_runtime::templates::KernelFamily;
use ptxforge_runtime::DType;

struct Run {
    forward: Vec<f64>,
    backward: Vec<f64>,
    /// `Ŵ` as the kernels multiply it (rounded to `T`), row-major `n × k`.
    weights: Vec<f64>,
    log: Vec<LaunchRecord>,
}

/// Quantises a random weight, runs the tiled forward on `a` (`m × k`) and the tiled backward on
/// `g` (`m × n`), and returns both outputs.
fn run<T: Nf4Activation + HostFloat>(cfg: &Nf4Config, m: u32, a: &[f64], g: &[f64]) -> Run {
    let ptx = cfg.compile().unwrap().ptx;
    let dev = SimBackend::new();
    let mut rng = SplitMix64::new(u64::from(cfg.n * 31 + cfg.k));
    let mut w = rng.vec_f32((cfg.n * cfg.k) as usize, -1.0, 1.0);
    for (i, x) in w.iter_mut().enumerate() {
        *x *= 0.25 + ((i / cfg.block as usize) % 7) as f32 * 0.5;
    }
    let q = quantize(&w, cfg.block as usize).unwrap();
    let (w_dev, host) = if cfg.double_quant {
        let dq = Nf4DoubleQuant::new(&q);
        (
            DeviceWeights::upload_double_quant(&dev, &dq).unwrap(),
            dq.to_weights().unwrap(),
        )
    } else {
        (DeviceWeights::upload(&dev, &q).unwrap(), q)
    };
    // Dequantised in `T` as the kernels do: code and absmax each rounded to `T`, their product
    // (exact in f32: 11- or 8-bit significands) rounded once more. Rounded from f32 values (as
    // `cvt.rn.*x2.f32` does): `half`'s `bf16::from_f64` does not round every f64 to nearest
    // (e.g. f32 0x3ca08004 goes down), so it is not used here.
    let to_t = |x: f32| -> f32 {
        match cfg.dtype {
            DType::F16 => f16::from_f32(x).to_f32(),
            _ => bf16::from_f32(x).to_f32(),
        }
    };
    let weights = (0..host.len)
        .map(|i| {
            let code = to_t(NF4_CODE[usize::from(host.code(i))]);
            let absmax = to_t(host.absmax[i / host.block]);
            f64::from(to_t(code * absmax))
        })
        .collect();
    let to_t = |v: &[f64]| -> Vec<T> { v.iter().map(|&x| T::from_f64(x)).collect() };
    let a_dev = dev.upload(&to_t(a)).unwrap();
    let g_dev = dev.upload(&to_t(g)).unwrap();
    let mut c = dev
        .upload(&vec![T::from_f64(1e4); (m * cfg.n) as usize])
        .unwrap();
    let mut g_a = dev
        .upload(&vec![T::from_f64(1e4); (m * cfg.k) as usize])
        .unwrap();
    nf4_launch::forward_tiled(cfg, &dev, &ptx, m, &a_dev, &w_dev, &mut c).unwrap();
    nf4_launch::backward_input_tiled(cfg, &dev, &ptx, m, &g_dev, &w_dev, &mut g_a).unwrap();
    let back = |v: Vec<T>| v.iter().map(|x| x.to_f64()).collect();
    Run {
        forward: back(dev.download(&c).unwrap()),
        backward: back(dev.download(&g_a).unwrap()),
        weights,
        log: dev.take_launch_log(),
    }
}

fn run_dtype(cfg: &Nf4Config, m: u32, a: &[f64], g: &[f64]) -> Run {
    match cfg.dtype {
        DType::F16 => run::<f16>(cfg, m, a, g),
        _ => run::<bf16>(cfg, m, a, g),
    }
}

fn rounded(dtype: DType, v: Vec<f64>) -> Vec<f64> {
    v.into_iter()
        .map(|x| match dtype {
            DType::F16 => f16::from_f64(x).to_f64(),
            _ => bf16::from_f64(x).to_f64(),
        })
        .collect()
}

/// Both launches ran on the tensor cores with conflict-free ldmatrix, fed by cp.async (the
/// packed codes always, whatever their rows' alignment).
fn assert_tensor_core_path(log: &[LaunchRecord], what: &str) {
    assert_eq!(log.len(), 2);
    for r in log {
        let c = &r.counters;
        assert!(c.mma_instructions > 0, "{what} {}: no mma", r.entry);
        assert!(c.cp_async_requests > 0, "{what} {}: cp.async", r.entry);
        let wf = c.ldmatrix_wavefronts_per_request();
        assert!(
            wf <= 4.0 + 1e-9,
            "{what} {}: {wf} ldmatrix wavefronts",
            r.entry
        );
        let sw = c.shared_bank_conflict_factor();
        assert!(
            sw <= 1.1,
            "{what} {}: {sw} × the fewest shared wavefronts",
            r.entry
        );
    }
}

/// The forward reads whole sectors (global load efficiency, `ld.global` and `cp.async` together,
/// lanes reading the same bytes counted once: ≥ 0.9) when the absmax are plain and its rows are
/// whole sectors (`k % 64 = 0`: activation rows of `2k` bytes, packed rows of `k / 2`): the
/// activations and codes by whole-chunk `cp.async`, the absmax by the two-sector window (an
/// absmax array under a sector cannot fill one, so not for tiny weights). The backward's
/// figure depends on `m` and the block size (its staged absmax use 8 to 32 bytes of a sector
/// per weight row per 256-column tile): `nf4_counters.rs` holds it to 0.9 (f16/bf16) or to the
/// arithmetic bound of the tf32 path's tiles, together with the figures for rows off sector
/// boundaries.
fn assert_whole_sector_loads(log: &[LaunchRecord], cfg: &Nf4Config, what: &str) {
    assert!(!cfg.double_quant, "{what}: not a whole-sector shape");
    if !cfg.k.is_multiple_of(64) {
        return;
    }
    let forward = &log[0];
    assert!(
        ["nf4_gemm", "nf4_gemm_tall"].contains(&forward.entry.as_str()),
        "{what}: {}",
        forward.entry
    );
    let eff = forward.counters.global_load_efficiency();
    assert!(
        eff >= 0.9,
        "{what} {}: global load efficiency {eff}",
        forward.entry
    );
}

/// Runs both GEMMs of `cfg` on random activations and compares them with the kernel-exact
/// reference within the dtype's tolerance; with `whole_sectors`, also that the forward reads
/// whole sectors where its rows allow ([`assert_whole_sector_loads`]).
fn check_against_reference(
    cfg: &Nf4Config,
    m: u32,
    rng: &mut SplitMix64,
    whole_sectors: bool,
) -> Vec<LaunchRecord> {
    let (n, k, dtype) = (cfg.n, cfg.k, cfg.dtype);
    let a = rounded(dtype, rng.vec_f64((m * k) as usize, -1.0, 1.0));
    let g = rounded(dtype, rng.vec_f64((m * n) as usize, -1.0, 1.0));
    let r = run_dtype(cfg, m, &a, &g);
    let what = format!("{cfg:?} m={m}");
    assert_tensor_core_path(&r.log, &what);
    if whole_sectors {
        assert_whole_sector_loads(&r.log, cfg, &what);
    }
    let (m, n, k) = (m as usize, n as usize, k as usize);
    let w = &r.weights;
    let fwd: Vec<f64> = (0..m * n)
        .map(|o| (0..k).map(|l| a[o / n * k + l] * w[o % n * k + l]).sum())
        .collect();
    let bwd: Vec<f64> = (0..m * k)
        .map(|o| (0..n).map(|j| g[o / k * n + j] * w[j * k + o % k]).sum())
        .collect();
    let tol = if dtype == DType::F16 { 2e-3 } else { 2e-2 };
    for (name, got, want) in [("forward", &r.forward, fwd), ("backward", &r.backward, bwd)] {
        let scale = want.iter().fold(0.0f64, |s, x| s.max(x.abs()));
        let worst = got
            .iter()
            .zip(&want)
            .map(|(g, e)| (g - e).abs())
            .fold(0.0f64, f64::max);
        assert!(
            worst <= tol * scale,
            "{what} {name}: max |err| {worst:e} > {tol} · max |ref| {scale:e}"
        );
    }
    r.log
}

#[test]
fn tensor_core_gemms_match_a_kernel_exact_reference() {
    let shapes = [
        (80, 200, 264, 64, false),  // k/2 = 132: 4-byte code copies
        (70, 131, 320, 32, true),   // k/2 = 160: 16-byte copies; odd n
        (65, 150, 200, 128, false), // k/2 = 100: 4-byte copies; n/2 ragged
        (33, 190, 230, 256, true),  // k/2 = 115: word-covering code copies
        (9, 129, 144, 64, true),    // k/2 = 72: 8-byte copies; small m
        (70, 96, 448, 32, false),   // k % block = 0, two blocks per slice, rows off sectors
        (40, 72, 512, 256, false),  // k % block = 0, a block over four slices
    ];
    check_shapes(&shapes, 0x7C_4E46, |_, _, _| {});
}

/// [`check_against_reference`] on each `(m, n, k, block, double_quant)` of `shapes`, f16 and
/// bf16, sm_80 and sm_90 in turn; `each(cfg, m, log)` inspects the launches.
fn check_shapes(
    shapes: &[(u32, u32, u32, u32, bool)],
    seed: u64,
    each: impl Fn(&Nf4Config, u32, &[LaunchRecord]),
) {
    let mut rng = SplitMix64::new(seed);
    for (i, &(m, n, k, block, double_quant)) in shapes.iter().enumerate() {
        for dtype in [DType::F16, DType::BF16] {
            let cfg = Nf4Config {
                block,
                double_quant,
                dtype,
                arch: [Arch::Sm80, Arch::Sm90][i % 2],
                ..Nf4Config::new(n, k)
            };
            let log = check_against_reference(&cfg, m, &mut rng, !double_quant);
            each(&cfg, m, &log);
        }
    }
}

/// The tall forward (`nf4_gemm_tall`, 128-row tiles in two warp rows of 64: what the unsplit
/// forward runs above 64 rows) on shapes that take its full branch with a ragged last row
/// (`m` = 250: rows 128..250 in the second block, 58 of them in its second warp row), a second
/// warp row wholly past `m` that skips its work (`m` = 130, whose first warp row runs the
/// one-m16-tile branch, and 190), a block of one row tile (`m` = 65: the second warp row's
/// one-m16-tile branch), every copy width of the ring, odd `n`, and double quantisation with
/// `k % block ≠ 0` (absmax staged with the codes).
#[test]
fn tall_forward_matches_a_kernel_exact_reference() {
    let shapes = [
        (250, 72, 256, 64, false),  // k/2 = 128: 16-byte copies
        (130, 131, 320, 32, true),  // odd n, double quantisation, k % block = 0
        (190, 96, 230, 128, false), // k/2 = 115: word-covering code copies
        (65, 150, 200, 128, true),  // k/2 = 100: 4-byte copies; blocks span rows
        (129, 40, 136, 64, true),   // k/2 = 68: 4-byte copies, k % block ≠ 0
    ];
    check_shapes(&shapes, 0x7A11, |cfg, m, log| {
        assert_eq!(log[0].entry, "nf4_gemm_tall", "{cfg:?} m={m}");
    });
}

/// Random shapes (even `k`, any block, both absmax forms): the absmax window meets blocks
/// spanning rows, rows starting anywhere in a sector, and the array's ragged end.
#[test]
fn tensor_core_gemms_fuzzed_shapes() {
    let mut rng = SplitMix64::new(0xF0_2217);
    for i in 0..6 {
        let n = 1 + rng.below(150) as u32;
        let k = 2 * (1 + rng.below(200) as u32);
        let m = 1 + rng.below(200) as u32;
        let cfg = Nf4Config {
            block: Nf4Config::BLOCKS[rng.below(4) as usize],
            double_quant: i % 3 == 2,
            dtype: [DType::F16, DType::BF16][i % 2],
            arch: [Arch::Sm80, Arch::Sm86, Arch::Sm90][rng.below(3) as usize],
            ..Nf4Config::new(n, k)
        };
        let log = check_against_reference(&cfg, m, &mut rng, false);
        eprintln!("{cfg:?} m={m}: {}", log[0].entry);
    }
}

#[test]
fn tensor_core_dequantisation_is_bit_exact() {
    for (n, k, block, double_quant, dtype) in [
        (70, 136, 32, true, DType::F16),
        (67, 130, 64, false, DType::BF16),
        (9, 96, 256, true, DType::BF16),
    ] {
        let cfg = Nf4Config {
            block,
            double_quant,
            dtype,
            ..Nf4Config::new(n, k)
        };
        let (nu, ku) = (n as usize, k as usize);
        // Forward: row i of A is one-hot at column i (m = k), so C[i, j] = Ŵ[j, i].
        // Backward: row i of G_C is one-hot at column i (m = n), so G_A[i, l] = Ŵ[i, l].
        // One run serves both when m = max(n, k) with the extra rows all zero.
        let m = nu.max(ku);
        let mut a = vec![0.0; m * ku];
        let mut g = vec![0.0; m * nu];
        for i in 0..ku {
            a[i * ku + i] = 1.0;
        }
        for i in 0..nu {
            g[i * nu + i] = 1.0;
        }
        let r = run_dtype(&cfg, m as u32, &a, &g);
        assert_tensor_core_path(&r.log, &format!("{cfg:?}"));
        for i in 0..m {
            for j in 0..nu {
                let want = if i < ku { r.weights[j * ku + i] } else { 0.0 };
                assert_eq!(
                    r.forward[i * nu + j].to_bits(),
                    want.to_bits(),
                    "{cfg:?} C[{i}, {j}]"
                );
            }
            for l in 0..ku {
                let want = if i < nu { r.weights[i * ku + l] } else { 0.0 };
                assert_eq!(
                    r.backward[i * ku + l].to_bits(),
                    want.to_bits(),
                    "{cfg:?} G_A[{i}, {l}]"
                );
            }
        }
    }
}

/// CUDA-core (sm_70) vs tensor-core (sm_80) counters on one shape, printed for the benchmarks.
#[test]
fn counters_cuda_core_vs_tensor_core() {
    let (m, n, k) = (64u32, 256u32, 512u32);
    let mut rng = SplitMix64::new(7);
    let a = rounded(DType::F16, rng.vec_f64((m * k) as usize, -1.0, 1.0));
    let g = rounded(DType::F16, rng.vec_f64((m * n) as usize, -1.0, 1.0));
    for arch in [Arch::Sm70, Arch::Sm80] {
        let cfg = Nf4Config {
            dtype: DType::F16,
            arch,
            ..Nf4Config::new(n, k)
        };
        let r = run_dtype(&cfg, m, &a, &g);
        for (rec, outputs) in r.log.iter().zip([m * n, m * k]) {
            let c = &rec.counters;
            let total = c.instructions.total();
            eprintln!(
                "nf4 f16 {arch} {} m={m} n={n} k={k}: thread instr/output {:.2}, \
                 tensor-core share {:.4}, mma {}, global load eff {:.3}, cp.async sectors {} bytes {}, \
                 ldmatrix wf/request {:.2} (per 8x8 {:.2}), shared wf/request {:.3}",
                rec.entry,
                total as f64 / f64::from(outputs),
                c.instructions.tensor_core as f64 / total as f64,
                c.mma_instructions,
                c.global_load_efficiency(),
                c.cp_async_sectors,
                c.cp_async_bytes,
                c.ldmatrix_wavefronts_per_request(),
                c.ldmatrix_wavefronts_per_request() / 4.0,
                c.shared_wavefronts_per_request(),
            );
            assert_eq!(c.mma_instructions > 0, arch == Arch::Sm80, "{}", rec.entry);
        }
        if arch == Arch::Sm80 {
            assert_whole_sector_loads(&r.log, &cfg, "counters");
        }
    }
}
