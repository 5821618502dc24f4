//! NF4 kernels vs the host reference, in the interpreter with every sanitizer check on (a
//! finding fails the launch and so the test).
//!
//! Reference: the activations are rounded to the kernel dtype first, then widened back to f32 and
//! fed to `nf4::reference::{forward, backward_input}` (dequantise, naive f32 matmul). Tolerance
//! per output element, with `S = Σ |a · ŵ|` over its reduction:
//!
//! | dtype | bound |
//! |---|---|
//! | f32 | `1e-5 · S + 1e-6` (summation order and fma only) |
//! | f16 | `2e-3 · S + 1e-6` (plus one rounding of the result to f16, 2⁻¹¹ relative) |
//! | bf16 | `2e-2 · S + 1e-6` (plus one rounding of the result to bf16, 2⁻⁸ relative) |
//!
//! Both forward paths (GEMV for `m ≤ 8`, tiled) and both backward paths (backward GEMV for
//! `m ≤ 8`, tiled; the tiled ones also on small `m`) are checked, each launch's entry asserted.
//! Shapes cover `m ∈ {1, 3, 8, 33, 128}`, three 1024-column windows of the forward GEMV, more than one 256-row window of `G_C`, `n` and `k` that are not multiples of any tile (8 rows
//! per GEMV block, 64 × 64 output tiles, 32-wide reduction slices, 16-byte packed chunks), rows
//! whose packed start is not 16-byte aligned, quantisation blocks spanning rows and a ragged last
//! block, every block size, double quantisation on and off, and every dtype.
#![cfg(feature = "sim")]

use half::{bf16, f16};
use ptxforge_runtime::arch::Arch;
use ptxforge_runtime::launch::{Backend, DeviceBuffer, KernelArg, LaunchError, SimBackend};
use ptxforge_runtime::templates::nf4::kernels::tf32_tensor_cores;
use ptxforge_runtime::templates::nf4::launch::{
    self as nf4_launch, DeviceWeights, Nf4Activation, Slices,
};
use ptxforge_runtime::templates::nf4::{
    quantize, reference, Nf4Config, Nf4DoubleQuant, Nf4Weights,
};
use ptxforge_runtime::templates::testing::{HostFloat, SplitMix64};
use ptxforge_runtime::templates::KernelFamily;
use ptxforge_runtime::DType;

/// Which kernel a case runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    /// `launch::forward` (GEMV for m ≤ 8, tiled above).
    Forward,
    /// `launch::forward_tiled`, whatever `m`.
    ForwardTiled,
    /// `launch::backward_input` (backward GEMV for m ≤ 8, tiled above).
    Backward,
    /// `launch::backward_input_tiled`, whatever `m`.
    BackwardTiled,
    /// `launch::backward_gemv_sliced` with this split of the rows of `W` (`m ≤ 8`).
    BackwardSliced(Slices),
    /// `launch::forward_tiled_sliced` with this split of `k`, whatever `m`.
    ForwardSliced(Slices),
}

impl Path {
    fn is_backward(self) -> bool {
        matches!(
            self,
            Path::Backward | Path::BackwardTiled | Path::BackwardSliced(_)
        )
    }
}

#[derive(Debug, Clone, Copy)]
struct Case {
    m: u32,
    n: u32,
    k: u32,
    block: u32,
    double_quant: bool,
    dtype: DType,
    seed: u64,
}

impl Case {
    fn config(&self) -> Nf4Config {
        Nf4Config {
            block: self.block,
            double_quant: self.double_quant,
            dtype: self.dtype,
            ..Nf4Config::new(self.n, self.k)
        }
    }
}

/// A quantised weight on the host: what the kernels read, and its single-level equivalent
/// (absmax reconstructed exactly as the kernels do) for the reference.
struct HostWeights {
    reference: Nf4Weights,
    double_quant: Option<Nf4DoubleQuant>,
}

fn host_weights(case: &Case, rng: &mut SplitMix64) -> HostWeights {
    let len = (case.n * case.k) as usize;
    // Varying magnitudes per region so absmax differ between blocks.
    let mut w = rng.vec_f32(len, -1.0, 1.0);
    for (i, x) in w.iter_mut().enumerate() {
        *x *= 0.25 + ((i / case.block as usize) % 7) as f32 * 0.5;
    }
    let q = quantize(&w, case.block as usize).unwrap();
    if case.double_quant {
        let dq = Nf4DoubleQuant::new(&q);
        HostWeights {
            reference: dq.to_weights().unwrap(),
            double_quant: Some(dq),
        }
    } else {
        HostWeights {
            reference: q,
            double_quant: None,
        }
    }
}

fn upload_weights(dev: &SimBackend, w: &HostWeights) -> DeviceWeights<SimBackend> {
    match &w.double_quant {
        Some(dq) => DeviceWeights::upload_double_quant(dev, dq).unwrap(),
        None => DeviceWeights::upload(dev, &w.reference).unwrap(),
    }
}

/// `Σ_l |x[i, l] · ŵ[j, l]|`-style magnitudes for the tolerance, in f64.
fn magnitudes(path: Path, x: &[f32], m: usize, wd: &[f32], n: usize, k: usize) -> Vec<f64> {
    match path {
        Path::Forward | Path::ForwardTiled | Path::ForwardSliced(_) => {
            let mut s = vec![0.0f64; m * n];
            for i in 0..m {
                for j in 0..n {
                    s[i * n + j] = (0..k)
                        .map(|l| (f64::from(x[i * k + l]) * f64::from(wd[j * k + l])).abs())
                        .sum();
                }
            }
            s
        }
        _ => {
            let mut s = vec![0.0f64; m * k];
            for i in 0..m {
                for l in 0..k {
                    s[i * k + l] = (0..n)
                        .map(|j| (f64::from(x[i * n + j]) * f64::from(wd[j * k + l])).abs())
                        .sum();
                }
            }
            s
        }
    }
}

/// The bound's factor: the dtype's, and for f32 on tf32 tensor cores f16's (each operand
/// rounded to 10 fraction bits, `2⁻¹¹` relative, so each product within `2⁻¹⁰` of its own
/// magnitude).
fn tolerance(cfg: &Nf4Config) -> f64 {
    match cfg.dtype {
        DType::F32 if tf32_tensor_cores(cfg) => 2e-3,
        DType::F32 => 1e-5,
        DType::F16 => 2e-3,
        _ => 2e-2,
    }
}

/// Runs one case, compiled as `cfg` (the case's shape and types on some target), on a fresh
/// device and checks it against the reference.
fn run_case<T: Nf4Activation + HostFloat>(case: Case, cfg: Nf4Config, path: Path) {
    assert_eq!(T::DTYPE, case.dtype);
    let compiled = cfg.compile().unwrap();
    let dev = SimBackend::new();
    let mut rng = SplitMix64::new(case.seed);
    let weights = host_weights(&case, &mut rng);
    let (m, n, k) = (case.m as usize, case.n as usize, case.k as usize);
    let (in_len, out_len) = if path.is_backward() {
        (m * n, m * k)
    } else {
        (m * k, m * n)
    };
    let x: Vec<T> = rng
        .vec_f64(in_len, -1.0, 1.0)
        .into_iter()
        .map(T::from_f64)
        .collect();
    let x32: Vec<f32> = x.iter().map(|v| v.to_f64() as f32).collect();
    let x_dev = dev.upload(&x).unwrap();
    let w_dev = upload_weights(&dev, &weights);
    // Poison the output so a missed store shows up as a mismatch.
    let mut out_dev = dev.upload(&vec![T::from_f64(1e4); out_len]).unwrap();
    let launched = match path {
        Path::Forward => nf4_launch::forward(
            &cfg,
            &dev,
            &compiled.ptx,
            case.m,
            &x_dev,
            &w_dev,
            &mut out_dev,
        ),
        Path::ForwardTiled => nf4_launch::forward_tiled(
            &cfg,
            &dev,
            &compiled.ptx,
            case.m,
            &x_dev,
            &w_dev,
            &mut out_dev,
        ),
        Path::Backward => nf4_launch::backward_input(
            &cfg,
            &dev,
            &compiled.ptx,
            case.m,
            &x_dev,
            &w_dev,
            &mut out_dev,
        ),
        Path::BackwardTiled => nf4_launch::backward_input_tiled(
            &cfg,
            &dev,
            &compiled.ptx,
            case.m,
            &x_dev,
            &w_dev,
            &mut out_dev,
        ),
        Path::BackwardSliced(slices) | Path::ForwardSliced(slices) => {
            let sliced = if path.is_backward() {
                nf4_launch::backward_gemv_sliced::<SimBackend, T>
            } else {
                nf4_launch::forward_tiled_sliced::<SimBackend, T>
            };
            let ptx = &compiled.ptx;
            sliced(
                &cfg,
                &dev,
                ptx,
                case.m,
                slices,
                &x_dev,
                &w_dev,
                &mut out_dev,
            )
        }
    };
    launched.unwrap_or_else(|e| panic!("{case:?} {path:?}: {e}"));
    let log = dev.take_launch_log();
    let entries: Vec<&str> = log.iter().map(|l| l.entry.as_str()).collect();
    assert_eq!(
        entries,
        expected_entries(&cfg, case.m, path),
        "{case:?} {path:?}"
    );
    let got = dev.download(&out_dev).unwrap();
    let expected = if path.is_backward() {
        reference::backward_input(&x32, m, &weights.reference, n, k)
    } else {
        reference::forward(&x32, m, &weights.reference, n, k)
    }
    .unwrap();
    let wd = ptxforge_runtime::templates::nf4::dequantize(&weights.reference).unwrap();
    let scale = magnitudes(path, &x32, m, &wd, n, k);
    let tol = tolerance(&cfg);
    for (idx, ((g, e), s)) in got.iter().zip(&expected).zip(&scale).enumerate() {
        let err = (g.to_f64() - f64::from(*e)).abs();
        assert!(
            err <= tol * s + 1e-6,
            "{case:?} {path:?}: element {idx}: got {}, expected {e} (|err| {err:e}, bound {:e})",
            g.to_f64(),
            tol * s + 1e-6
        );
    }
    // The kernels never write their inputs.
    assert_eq!(bits(&dev.download(&x_dev).unwrap()), bits(&x));
}

/// The entries a path launches, in order: the backward GEMV split into `S > 1` slices of the
/// rows of `W`, and the tiled forward into `S > 1` slices of `k`, run the split entry, then the
/// reduce; the unsplit tiled forward runs `nf4_gemm_tall` where `gemm_tall` says (f16/bf16 on
/// tensor cores, `m > 64`).
/// The unsplit tiled forward's entry for `m` rows.
fn unsplit_forward_entry(cfg: &Nf4Config, m: u32) -> &'static str {
    if nf4_launch::gemm_tall(cfg, m) {
        "nf4_gemm_tall"
    } else {
        "nf4_gemm"
    }
}

fn expected_entries(cfg: &Nf4Config, m: u32, path: Path) -> Vec<&'static str> {
    let forward_slices = match path {
        Path::Forward if m <= 8 => return vec!["nf4_gemv"],
        Path::Forward | Path::ForwardTiled | Path::ForwardSliced(Slices::Auto) => {
            Some(nf4_launch::gemm_slices(cfg, m))
        }
        Path::ForwardSliced(Slices::Exactly(s)) => Some(s),
        _ => None,
    };
    match forward_slices {
        Some(1) => return vec![unsplit_forward_entry(cfg, m)],
        // 128-row tiles where the module has the tall split.
        Some(_) if nf4_launch::gemm_tall_split(cfg, m) => {
            return vec!["nf4_gemm_tall_split", "nf4_gemm_reduce"]
        }
        Some(_) => return vec!["nf4_gemm_split", "nf4_gemm_reduce"],
        None => {}
    }
    let slices = match path {
        Path::Forward | Path::ForwardTiled | Path::ForwardSliced(_) => unreachable!(),
        Path::BackwardTiled => return vec!["nf4_backward_input"],
        Path::Backward if m > 8 => return vec!["nf4_backward_input"],
        Path::Backward | Path::BackwardSliced(Slices::Auto) => {
            nf4_launch::backward_gemv_slices(cfg)
        }
        Path::BackwardSliced(Slices::Exactly(s)) => s,
    };
    if slices == 1 {
        vec!["nf4_backward_gemv"]
    } else {
        vec!["nf4_backward_gemv_split", "nf4_backward_gemv_reduce"]
    }
}

fn bits<T: HostFloat>(v: &[T]) -> Vec<u64> {
    v.iter().map(|x| x.to_f64().to_bits()).collect()
}

fn run(case: Case, path: Path) {
    run_on(case, case.config(), path);
}

/// [`run`] compiled as `cfg` (another target, or tf32).
fn run_on(case: Case, cfg: Nf4Config, path: Path) {
    match case.dtype {
        DType::F16 => run_case::<f16>(case, cfg, path),
        DType::BF16 => run_case::<bf16>(case, cfg, path),
        DType::F32 => run_case::<f32>(case, cfg, path),
        DType::F64 => unreachable!("nf4 has no f64 activations"),
    }
}

const DTYPES: [DType; 3] = [DType::F16, DType::BF16, DType::F32];
const BLOCKS: [u32; 4] = [32, 64, 128, 256];

/// Shapes rotated through the block × dq × dtype grid: ragged `k` (row starts at every
/// alignment, blocks spanning rows), aligned `k`, `n` not a multiple of 8 or 64, and tiny ones.
const SHAPES: [(u32, u32); 6] = [(13, 70), (9, 96), (70, 34), (3, 2), (17, 258), (66, 40)];

#[test]
fn forward_gemv_every_dtype_block_and_double_quant() {
    let mut seed = 100;
    for (di, dtype) in DTYPES.into_iter().enumerate() {
        for (bi, block) in BLOCKS.into_iter().enumerate() {
            for double_quant in [false, true] {
                let (n, k) = SHAPES[(di + bi * 2 + usize::from(double_quant)) % SHAPES.len()];
                for m in [1, 3, 8] {
                    seed += 1;
                    let case = Case {
                        m,
                        n,
                        k,
                        block,
                        double_quant,
                        dtype,
                        seed,
                    };
                    run(case, Path::Forward);
                }
            }
        }
    }
}

#[test]
fn forward_tiled_every_dtype_block_and_double_quant() {
    let mut seed = 200;
    for (di, dtype) in DTYPES.into_iter().enumerate() {
        for (bi, block) in BLOCKS.into_iter().enumerate() {
            for double_quant in [false, true] {
                let (n, k) = SHAPES[(di * 3 + bi + usize::from(double_quant)) % SHAPES.len()];
                seed += 1;
                let m = if seed % 2 == 0 { 33 } else { 9 };
                run(
                    Case {
                        m,
                        n,
                        k,
                        block,
                        double_quant,
                        dtype,
                        seed,
                    },
                    Path::Forward,
                );
            }
        }
    }
}

/// Each dtype × block × double-quant case runs the backward GEMV (`m ≤ 8`, via
/// `backward_input`), the tiled entry on the same small `m` (explicitly), and the tiled entry via
/// `backward_input` for `m > 8`.
#[test]
fn backward_input_every_dtype_block_and_double_quant() {
    let mut seed = 300;
    for (di, dtype) in DTYPES.into_iter().enumerate() {
        for (bi, block) in BLOCKS.into_iter().enumerate() {
            for double_quant in [false, true] {
                let (n, k) = SHAPES[(di + bi + usize::from(double_quant) * 3) % SHAPES.len()];
                seed += 1;
                let case = |m| Case {
                    m,
                    n,
                    k,
                    block,
                    double_quant,
                    dtype,
                    seed,
                };
                let small = [1, 3, 8][(seed % 3) as usize];
                run(case(small), Path::Backward);
                run(case(small), Path::BackwardTiled);
                run(case(if seed % 2 == 0 { 33 } else { 9 }), Path::Backward);
            }
        }
    }
}

/// The backward GEMV on shapes that stress it: several 256-row windows of `G_C` with a ragged
/// last one, several 64-column blocks with a ragged last one, `k % 64 ≠ 0` (packed rows not
/// sector aligned, quantisation blocks spanning rows), every block size and dtype.
#[test]
fn backward_gemv_ragged_windows_and_columns() {
    let shapes = [(300, 130), (257, 66), (513, 2), (40, 258)];
    let mut seed = 350;
    for (si, (n, k)) in shapes.into_iter().enumerate() {
        for (di, dtype) in DTYPES.into_iter().enumerate() {
            seed += 1;
            let case = Case {
                m: [1, 8, 5][(si + di) % 3],
                n,
                k,
                block: BLOCKS[(si + di) % 4],
                double_quant: (si + di) % 2 == 1,
                dtype,
                seed,
            };
            run(case, Path::Backward);
        }
    }
}

/// The backward GEMV's staged double-quantisation decodes: several 256-row windows whose
/// nested absmax start past entry 0 (`first` offset: 600 rows of 32 blocks at block 32 are 75
/// nested groups, 32 per window), several column blocks with blocks of 256 (2 absmax per row
/// segment), `k % block ≠ 0` (blocks spanning rows, a 9th slot per row), and 260 rows of
/// `k = 16448` at block 32, whose window (514 nested entries, over the 512 copied) is not
/// copied: decodes read the nested absmax from global memory.
#[test]
fn backward_gemv_double_quant_windows() {
    let shapes = [
        (600, 1024, 32),
        (520, 2560, 256),
        (300, 1000, 64),
        (260, 16448, 32),
    ];
    for (si, (n, k, block)) in shapes.into_iter().enumerate() {
        let dtype = DTYPES[si % 3];
        run(
            Case {
                m: [3, 1, 8, 2][si],
                n,
                k,
                block,
                double_quant: true,
                dtype,
                seed: 470 + si as u64,
            },
            Path::Backward,
        );
    }
}

/// The CUDA-core tiled GEMMs (f32 without tf32) past their first absmax window: the forward
/// stages each weight row's absmax `8 · block` columns (256 to 512) at a time and refills at
/// every span, the backward stages each 32-row slice's absmax of its 256 columns; so `k` over
/// a span and over a 256-column block with ragged last ones, `k % block ≠ 0` (blocks spanning
/// rows), double quantisation (decodes from the shared map and the window's nested absmax),
/// and several 64-row tiles and 32-row slices with ragged last ones.
#[test]
fn cuda_core_tiled_across_absmax_windows() {
    for (m, n, k, block, double_quant, seed) in [
        (70, 70, 1100, 64, false, 480),
        (9, 130, 600, 256, true, 481),
        (33, 40, 530, 32, true, 482),
        (65, 300, 1024, 128, false, 483),
    ] {
        let case = Case {
            m,
            n,
            k,
            block,
            double_quant,
            dtype: DType::F32,
            seed,
        };
        run(case, Path::ForwardTiled);
        run(case, Path::BackwardTiled);
    }
}

/// Past the first window: the forward GEMV walks `k` in windows of 1024 columns, so
/// `k = 2·1024 + 38` takes three trips with a ragged last one (a kernel that forgets a window's
/// start column, or stages past `k`, fails here); the backward GEMV on the same `k` spans 5
/// column blocks of 512 and two 256-row windows of `G_C` (`n = 300`, ragged). The forward's
/// `k % 32 = 0` path (vector staging, `ld.shared.v4` activations) at `k = 2048` (whole windows:
/// no bounds tests) and `k = 1024 + 96` (a partial second window: lanes and staging threads
/// past `k` skip).
#[test]
fn gemv_past_the_first_window() {
    for (i, dtype) in DTYPES.into_iter().enumerate() {
        let case = |m, n, k| Case {
            m,
            n,
            k,
            block: BLOCKS[i + 1],
            double_quant: i == 1,
            dtype,
            seed: 450 + i as u64,
        };
        run(case([1, 8, 3][i], 9, 2 * 1024 + 38), Path::Forward);
        run(case([8, 1, 2][i], 300, 2 * 1024 + 38), Path::Backward);
        for k in [2 * 1024, 1024 + 96] {
            run(case([3, 1, 8][i], 9, k), Path::Forward);
        }
    }
}

#[test]
fn every_m_of_the_issue_on_tile_edges() {
    // n = 65, k = 130: one past a 64-tile in n, two 64-tiles + 2 in k (and k % 32 = 2).
    for (i, dtype) in DTYPES.into_iter().enumerate() {
        for m in [1, 3, 8, 33, 128] {
            let case = Case {
                m,
                n: 65,
                k: 130,
                block: 64,
                double_quant: i == 1,
                dtype,
                seed: 400 + u64::from(m),
            };
            run(case, Path::Forward);
            run(case, Path::Backward);
            if m <= 8 {
                run(case, Path::BackwardTiled);
            }
        }
    }
}

#[test]
fn tiled_forward_with_small_m_and_gemv_agree() {
    for m in [1, 5, 8] {
        let case = Case {
            m,
            n: 19,
            k: 100,
            block: 32,
            double_quant: false,
            dtype: DType::F32,
            seed: 500 + u64::from(m),
        };
        run(case, Path::ForwardTiled);
        run(case, Path::Forward);
    }
}

/// The backward GEMV split over the rows of `W` (`backward_gemv_sliced`) into 1, 2, 3 and the
/// automatic number of slices (4 to 17 here): plain and double-quantised absmax, every dtype,
/// ragged `k` (packed rows off sector boundaries, blocks spanning rows, a ragged last block of
/// columns), `n` not a multiple of the slices (ragged last slice) and slices shorter than a
/// 256-row window of `G_C`, several windows per slice, and `m` of 1 to 8 (the workspace's
/// `m·k` not a multiple of 4: the reduce's element-wise tail).
#[test]
fn backward_gemv_split_over_rows() {
    let shapes = [
        (300, 130, 64),
        (257, 66, 32),
        (1100, 1002, 128),
        (260, 520, 256),
    ];
    let slices = [
        Slices::Exactly(1),
        Slices::Exactly(2),
        Slices::Exactly(3),
        Slices::Auto,
    ];
    let mut seed = 800;
    for (si, (n, k, block)) in shapes.into_iter().enumerate() {
        for (pi, split) in slices.into_iter().enumerate() {
            seed += 1;
            let case = Case {
                m: [1, 3, 8, 5][(si + pi) % 4],
                n,
                k,
                block,
                double_quant: (si + pi) % 2 == 1,
                dtype: DTYPES[(si + pi) % 3],
                seed,
            };
            run(case, Path::BackwardSliced(split));
        }
    }
    // The automatic rule does split these shapes (else Auto above repeated S = 1).
    for (n, k, block) in shapes {
        let cfg = Nf4Config {
            block,
            ..Nf4Config::new(n, k)
        };
        assert!(nf4_launch::backward_gemv_slices(&cfg) > 3, "{n} x {k}");
    }
}

/// The backward GEMV's word layout at `m = 1` (`k % block = 0`, 256 or 512 columns per
/// block: a packed `u32` per lane and row): every block size (256 columns per block at block
/// 32, 512 above), a ragged last column block (lanes past `k` idle), several 256-row windows
/// with a ragged last one, row counts that leave the one-row tail loop work, slices shorter
/// than a window, plain and double-quantised absmax, every dtype; and `m = 2` on the same
/// shapes (the byte layout, beside it in the same entry). Then seeded shapes on the same rule.
#[test]
fn backward_gemv_words_at_m1() {
    let shapes = [
        (300, 768, 64),
        (517, 256, 32),
        (45, 1024, 128),
        (263, 1280, 256),
        (7, 384, 32),
    ];
    let slices = [Slices::Exactly(1), Slices::Exactly(3), Slices::Auto];
    let mut seed = 1200;
    for (si, (n, k, block)) in shapes.into_iter().enumerate() {
        for (pi, split) in slices.into_iter().enumerate() {
            seed += 1;
            let case = Case {
                m: if pi == 2 && si % 2 == 0 { 2 } else { 1 },
                n,
                k,
                block,
                double_quant: (si + pi) % 2 == 1,
                dtype: DTYPES[(si + pi) % 3],
                seed,
            };
            run(case, Path::BackwardSliced(split));
        }
    }
    let mut rng = SplitMix64::new(0x5744_4D31);
    for i in 0..8 {
        let block = BLOCKS[rng.below(4) as usize];
        let n = 1 + rng.below(600) as u32;
        let case = Case {
            m: 1,
            n,
            k: block * (1 + rng.below(2048 / u64::from(block)) as u32),
            block,
            double_quant: rng.below(2) == 1,
            dtype: DTYPES[rng.below(3) as usize],
            seed: 1300 + i,
        };
        let split = match rng.below(3) {
            0 => Slices::Auto,
            _ => Slices::Exactly(1 + rng.below(u64::from(n.min(12))) as u32),
        };
        run(case, Path::BackwardSliced(split));
    }
}

/// Seeded shapes and slice counts for the split backward GEMV, up to as many slices as rows.
#[test]
fn backward_gemv_split_fuzz() {
    let mut rng = SplitMix64::new(0x4E46_3453);
    for i in 0..10 {
        let n = 1 + rng.below(400) as u32;
        let split = match rng.below(3) {
            0 => Slices::Auto,
            _ => Slices::Exactly(1 + rng.below(u64::from(n.min(12))) as u32),
        };
        let case = Case {
            m: 1 + rng.below(8) as u32,
            n,
            k: 2 * (1 + rng.below(300) as u32),
            block: BLOCKS[rng.below(4) as usize],
            double_quant: rng.below(2) == 1,
            dtype: DTYPES[rng.below(3) as usize],
            seed: 900 + i,
        };
        run(case, Path::BackwardSliced(split));
    }
}

/// The split backward GEMV gives the same bits on two fresh devices, for a fixed split and the
/// automatic one.
#[test]
fn backward_gemv_split_is_deterministic() {
    let case = Case {
        m: 3,
        n: 700,
        k: 258,
        block: 64,
        double_quant: true,
        dtype: DType::BF16,
        seed: 950,
    };
    let cfg = case.config();
    let ptx = cfg.compile().unwrap().ptx;
    let mut rng = SplitMix64::new(case.seed);
    let w = host_weights(&case, &mut rng);
    let g: Vec<bf16> = rng
        .vec_f64((case.m * case.n) as usize, -1.0, 1.0)
        .into_iter()
        .map(bf16::from_f64)
        .collect();
    let run_once = |split: Slices| {
        let dev = SimBackend::new();
        let g_c = dev.upload(&g).unwrap();
        let w_dev = upload_weights(&dev, &w);
        let mut g_a = dev
            .upload(&vec![bf16::ZERO; (case.m * case.k) as usize])
            .unwrap();
        nf4_launch::backward_gemv_sliced(&cfg, &dev, &ptx, case.m, split, &g_c, &w_dev, &mut g_a)
            .unwrap();
        assert_eq!(dev.take_launch_log().len(), 2, "{split:?} splits");
        let out: Vec<u16> = dev
            .download(&g_a)
            .unwrap()
            .iter()
            .map(|x| x.to_bits())
            .collect();
        out
    };
    for split in [Slices::Exactly(3), Slices::Auto] {
        assert_eq!(run_once(split), run_once(split), "{split:?}");
    }
}

#[test]
fn seeded_fuzz() {
    let mut rng = SplitMix64::new(0x4E46_3400);
    for i in 0..12 {
        let dtype = DTYPES[rng.below(3) as usize];
        let block = BLOCKS[rng.below(4) as usize];
        let n = 1 + rng.below(80) as u32;
        let k = 2 * (1 + rng.below(100) as u32);
        let m = if i % 2 == 0 {
            1 + rng.below(8) as u32
        } else {
            9 + rng.below(70) as u32
        };
        let case = Case {
            m,
            n,
            k,
            block,
            double_quant: rng.below(2) == 1,
            dtype,
            seed: 600 + i,
        };
        run(case, Path::Forward);
        run(case, Path::Backward);
    }
}

#[test]
fn results_are_deterministic() {
    let case = Case {
        m: 40,
        n: 70,
        k: 66,
        block: 64,
        double_quant: true,
        dtype: DType::F32,
        seed: 700,
    };
    let cfg = case.config();
    let ptx = cfg.compile().unwrap().ptx;
    let mut rng = SplitMix64::new(case.seed);
    let w = host_weights(&case, &mut rng);
    let a = rng.vec_f32((case.m * case.k) as usize, -1.0, 1.0);
    let g = rng.vec_f32((case.m * case.n) as usize, -1.0, 1.0);
    let outputs: Vec<Vec<u32>> = (0..2)
        .map(|_| {
            let dev = SimBackend::new();
            let a_dev = dev.upload(&a).unwrap();
            let w_dev = upload_weights(&dev, &w);
            let mut c: DeviceBuffer<SimBackend, f32> =
                dev.upload(&vec![0.0; (case.m * case.n) as usize]).unwrap();
            nf4_launch::forward(&cfg, &dev, &ptx, case.m, &a_dev, &w_dev, &mut c).unwrap();
            let mut out: Vec<u32> = dev
                .download(&c)
                .unwrap()
                .iter()
                .map(|x| x.to_bits())
                .collect();
            // Backward on both paths: the GEMV (first 8 rows of G_C) and the tiled entry.
            for m in [8, case.m] {
                let g_c = dev.upload(&g[..(m * case.n) as usize]).unwrap();
                let mut g_a: DeviceBuffer<SimBackend, f32> =
                    dev.upload(&vec![0.0; (m * case.k) as usize]).unwrap();
                nf4_launch::backward_input(&cfg, &dev, &ptx, m, &g_c, &w_dev, &mut g_a).unwrap();
                out.extend(dev.download(&g_a).unwrap().iter().map(|x| x.to_bits()));
            }
            out
        })
        .collect();
    assert_eq!(outputs[0], outputs[1]);
}

#[test]
fn bad_inputs_are_rejected_before_launch() {
    let cfg = Nf4Config {
        double_quant: false,
        ..Nf4Config::new(10, 64)
    };
    let ptx = cfg.compile().unwrap().ptx;
    let dev = SimBackend::new();
    let q = quantize(&vec![0.5; 640], 64).unwrap();
    let w = DeviceWeights::upload(&dev, &q).unwrap();
    let a = dev.upload(&vec![1.0f32; 2 * 64]).unwrap();
    let mut c = dev.upload(&[0.0f32; 2 * 10]).unwrap();
    // Wrong activation length, m = 0, and a dtype other than the config's.
    let err = nf4_launch::forward(&cfg, &dev, &ptx, 3, &a, &w, &mut c).unwrap_err();
    assert!(
        matches!(
            err,
            LaunchError::BufferLength {
                name: "a",
                expected: 192,
                actual: 128
            }
        ),
        "{err}"
    );
    let err = nf4_launch::forward(&cfg, &dev, &ptx, 0, &a, &w, &mut c).unwrap_err();
    assert!(
        matches!(
            err,
            LaunchError::InvalidDim {
                name: "m",
                value: 0,
                ..
            }
        ),
        "{err}"
    );
    let a16 = dev.upload(&vec![f16::ONE; 128]).unwrap();
    let mut c16 = dev.upload(&[f16::ZERO; 20]).unwrap();
    let err = nf4_launch::forward(&cfg, &dev, &ptx, 2, &a16, &w, &mut c16).unwrap_err();
    assert!(
        matches!(err, LaunchError::ArgumentType { index: 0, .. }),
        "{err}"
    );
    // Double-quantised weights for a single-level config.
    let wdq = DeviceWeights::upload_double_quant(&dev, &Nf4DoubleQuant::new(&q)).unwrap();
    let mut g_a = dev.upload(&vec![0.0f32; 2 * 64]).unwrap();
    let err = nf4_launch::backward_input(&cfg, &dev, &ptx, 2, &c, &wdq, &mut g_a).unwrap_err();
    assert!(
        matches!(
            err,
            LaunchError::ArgumentCount {
                expected: 5,
                actual: 8,
                ..
            }
        ),
        "{err}"
    );
    // A split of k into no slices, or into more than one per 512-column step (the CUDA-core
    // f32 path's alignment at block 64: k = 64 allows one).
    for bad in [0, 2] {
        let err = nf4_launch::forward_tiled_sliced(
            &cfg,
            &dev,
            &ptx,
            2,
            Slices::Exactly(bad),
            &a,
            &w,
            &mut c,
        )
        .unwrap_err();
        assert!(
            matches!(err, LaunchError::InvalidDim { name: "slices", value, .. } if value == u64::from(bad)),
            "{err}"
        );
    }
    assert!(dev.take_launch_log().is_empty(), "nothing may launch");
    // The valid call still works afterwards.
    nf4_launch::forward(&cfg, &dev, &ptx, 2, &a, &w, &mut c).unwrap();
}

/// With one-hot activations every output is a single dequantised weight (`1 · ŵ` plus exact
/// zeros), so the kernels' dequantisation, including the double-quantised absmax
/// `fma(q − 128, scale, offset)`, must equal the host's bit for bit, on every path.
#[test]
fn dequantisation_matches_the_host_bit_for_bit() {
    for (block, double_quant, n, k) in [(32, true, 11, 70), (64, true, 9, 96), (256, false, 5, 34)]
    {
        let case = Case {
            m: 1,
            n,
            k,
            block,
            double_quant,
            dtype: DType::F32,
            seed: 800 + u64::from(k),
        };
        let cfg = case.config();
        let ptx = cfg.compile().unwrap().ptx;
        let dev = SimBackend::new();
        let mut rng = SplitMix64::new(case.seed);
        let w = host_weights(&case, &mut rng);
        let w_dev = upload_weights(&dev, &w);
        let wd = ptxforge_runtime::templates::nf4::dequantize(&w.reference).unwrap();
        let (nu, ku) = (n as usize, k as usize);
        // Forward, GEMV (8 one-hot rows at a time) and tiled (all k one-hot rows): C[i, j] = Ŵ[j, l_i].
        for (cols, tiled) in [
            ((0..ku).step_by(ku.div_ceil(8)).collect::<Vec<_>>(), false),
            ((0..ku).collect(), true),
        ] {
            let m = cols.len();
            let mut a = vec![0.0f32; m * ku];
            for (i, &l) in cols.iter().enumerate() {
                a[i * ku + l] = 1.0;
            }
            let a_dev = dev.upload(&a).unwrap();
            let mut c = dev.upload(&vec![0.0f32; m * nu]).unwrap();
            let run = if tiled {
                nf4_launch::forward_tiled
            } else {
                nf4_launch::forward_gemv
            };
            run(&cfg, &dev, &ptx, m as u32, &a_dev, &w_dev, &mut c).unwrap();
            let got = dev.download(&c).unwrap();
            for (i, &l) in cols.iter().enumerate() {
                for j in 0..nu {
                    assert_eq!(
                        got[i * nu + j].to_bits(),
                        wd[j * ku + l].to_bits(),
                        "{case:?} tiled={tiled} C[{i}, {j}]"
                    );
                }
            }
        }
        // Backward: G_C one-hot at row j → G_A[j, l] = Ŵ[j, l]; tiled for all n rows at once,
        // the GEMV for up to 8 rows at a time.
        for (rows, tiled) in [((0..nu).collect::<Vec<_>>(), true)].into_iter().chain(
            (0..nu)
                .step_by(8)
                .map(|r0| ((r0..nu.min(r0 + 8)).collect(), false)),
        ) {
            let m = rows.len();
            let mut g_c = vec![0.0f32; m * nu];
            for (i, &j) in rows.iter().enumerate() {
                g_c[i * nu + j] = 1.0;
            }
            let g_dev = dev.upload(&g_c).unwrap();
            let mut g_a = dev.upload(&vec![0.0f32; m * ku]).unwrap();
            let run = if tiled {
                nf4_launch::backward_input_tiled
            } else {
                nf4_launch::backward_gemv
            };
            run(&cfg, &dev, &ptx, m as u32, &g_dev, &w_dev, &mut g_a).unwrap();
            let got = dev.download(&g_a).unwrap();
            let expect: Vec<u32> = rows
                .iter()
                .flat_map(|&j| wd[j * ku..(j + 1) * ku].iter().map(|x| x.to_bits()))
                .collect();
            assert_eq!(
                got.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                expect,
                "{case:?} backward tiled={tiled} rows {rows:?}"
            );
        }
    }
}

/// Every path of the tiled forward, `(dtype, arch, allow_tf32)`: f16/bf16 tensor cores, tf32
/// tensor cores, the CUDA-core GEMM for f32 and for f16/bf16 before sm_80 (bf16 in software
/// on sm_70).
const TILED_PATHS: [(DType, Arch, bool); 7] = [
    (DType::F16, Arch::Sm80, false),
    (DType::BF16, Arch::Sm90, false),
    (DType::F32, Arch::Sm80, true),
    (DType::F32, Arch::Sm90, false),
    (DType::F16, Arch::Sm75, false),
    (DType::BF16, Arch::Sm70, false),
    (DType::F32, Arch::Sm75, true),
];

/// `case` compiled for one of [`TILED_PATHS`].
fn on_path(case: &Case, (dtype, arch, allow_tf32): (DType, Arch, bool)) -> (Case, Nf4Config) {
    let case = Case { dtype, ..*case };
    let cfg = Nf4Config {
        arch,
        allow_tf32,
        ..case.config()
    };
    (case, cfg)
}

/// The tiled forward split over `k` (`forward_tiled_sliced`) on every path, against the host
/// reference within the unsplit bounds (a split changes only the order of the f32 additions:
/// each slice sums its columns, the reduce adds the slices in order): 2 and 3 slices, the
/// automatic count (asserted > 1 on these shapes), and the most slices (one alignment step
/// each); `k` ragged against 64 and against the block (blocks spanning rows), a short last
/// slice, `n` not a multiple of 64, `m` from 9 to 100 (one and two row tiles, the
/// one-m16-tile branch), plain and double-quantised absmax.
#[test]
fn forward_split_over_k_every_path() {
    let shapes = [
        (16, 72, 1280, 64),
        (33, 132, 1100, 32),
        (65, 40, 2100, 128),
        (9, 200, 1536, 256),
    ];
    let mut seed = 1000;
    for (pi, path) in TILED_PATHS.into_iter().enumerate() {
        for j in 0..2 {
            let (m, n, k, block) = shapes[(pi + j) % shapes.len()];
            seed += 1;
            let case = Case {
                m,
                n,
                k,
                block,
                double_quant: (pi + j) % 2 == 1,
                dtype: DType::F32,
                seed,
            };
            let (case, cfg) = on_path(&case, path);
            assert!(nf4_launch::gemm_slices(&cfg, m) > 1, "{case:?} {path:?}");
            let most = nf4_launch::gemm_max_slices(&cfg);
            let picks = [Slices::Exactly(2), Slices::Exactly(3), Slices::Auto];
            for slices in [picks[(pi + j) % 3], Slices::Exactly(most)] {
                run_on(case, cfg, Path::ForwardSliced(slices));
            }
        }
    }
}

/// `nf4_gemm_tall_split` under double quantisation with `k % block ≠ 0` (absmax decoded per
/// stage into the ring's shared staging beside the split's slice bounds; the launcher ran
/// 64-row tiles there until ptxas showed 0 spills at the 128-register cap), f16 on sm_80 and
/// bf16 on sm_90: `m` over two 128-row tiles with a ragged second (its second warp row idle),
/// blocks spanning rows and slices, 2 and 3 slices, the automatic count and the most.
#[test]
fn tall_split_under_double_quant_with_ragged_blocks() {
    for (i, (m, n, k, block)) in [(150, 72, 1100, 64), (70, 40, 2100, 128)]
        .into_iter()
        .enumerate()
    {
        let path = TILED_PATHS[i];
        let case = Case {
            m,
            n,
            k,
            block,
            double_quant: true,
            dtype: DType::F32,
            seed: 1300 + i as u64,
        };
        let (case, cfg) = on_path(&case, path);
        assert!(!k.is_multiple_of(block));
        assert!(nf4_launch::gemm_tall_split(&cfg, m), "{case:?}");
        let most = nf4_launch::gemm_max_slices(&cfg);
        for slices in [2, 3, most]
            .map(Slices::Exactly)
            .into_iter()
            .chain([Slices::Auto])
        {
            run_on(case, cfg, Path::ForwardSliced(slices));
        }
    }
}

/// Seeded shapes, paths and slice counts for the split forward, including counts that leave
/// the last slices empty (they write zeros).
#[test]
fn forward_split_fuzz() {
    let mut rng = SplitMix64::new(0x4E46_3454);
    for i in 0..10 {
        let case = Case {
            m: 9 + rng.below(90) as u32,
            n: 1 + rng.below(150) as u32,
            k: 2 * (1 + rng.below(1300) as u32),
            block: BLOCKS[rng.below(4) as usize],
            double_quant: rng.below(2) == 1,
            dtype: DType::F32,
            seed: 1100 + i,
        };
        let path = TILED_PATHS[rng.below(TILED_PATHS.len() as u64) as usize];
        let (case, cfg) = on_path(&case, path);
        let most = nf4_launch::gemm_max_slices(&cfg);
        let slices = match rng.below(3) {
            0 => Slices::Auto,
            _ => Slices::Exactly(1 + rng.below(u64::from(most.min(12))) as u32),
        };
        run_on(case, cfg, Path::ForwardSliced(slices));
    }
}

/// The split entry run as one slice (`nf4_gemm_split` over all of `k`, then the reduce adding
/// that one part to 0) gives the unsplit entry's bits on every path: same order of additions
/// per output, one rounding (at `m = 70` on f16/bf16 tensor cores `nf4_gemm_tall`, against
/// `nf4_gemm_tall_split`). `Slices::Exactly(1)` launches the unsplit entry itself, and a
/// split into 3 gives the same bits on a second run.
#[test]
fn forward_split_one_slice_is_the_unsplit_entry_bit_for_bit() {
    for (pi, path) in TILED_PATHS.into_iter().enumerate() {
        let case = Case {
            m: [20, 70][pi % 2],
            n: 136,
            k: 1032,
            block: 64,
            double_quant: pi % 3 == 0,
            dtype: DType::F32,
            seed: 1200 + pi as u64,
        };
        let (case, cfg) = on_path(&case, path);
        let bits = match case.dtype {
            DType::F16 => one_slice_bits::<f16>(&case, &cfg),
            DType::BF16 => one_slice_bits::<bf16>(&case, &cfg),
            _ => one_slice_bits::<f32>(&case, &cfg),
        };
        let [unsplit, exactly_one, one_slice, three, three_again] = bits;
        assert_eq!(unsplit, exactly_one, "{path:?}: Exactly(1)");
        assert_eq!(
            unsplit, one_slice,
            "{path:?}: the split entry over one slice"
        );
        assert_eq!(three, three_again, "{path:?}: three slices twice");
    }
}

/// The output bits of: the unsplit entry, `Exactly(1)`, the split entry launched by hand over
/// one slice and reduced, and `Exactly(3)` twice.
fn one_slice_bits<T: Nf4Activation + HostFloat>(case: &Case, cfg: &Nf4Config) -> [Vec<u64>; 5] {
    let ptx = cfg.compile().unwrap().ptx;
    let dev = SimBackend::new();
    let mut rng = SplitMix64::new(case.seed);
    let w = host_weights(case, &mut rng);
    let a: Vec<T> = rng
        .vec_f64((case.m * case.k) as usize, -1.0, 1.0)
        .into_iter()
        .map(T::from_f64)
        .collect();
    let a = dev.upload(&a).unwrap();
    let w_dev = upload_weights(&dev, &w);
    let out_len = (case.m * case.n) as usize;
    let mut c = dev.upload(&vec![T::from_f64(0.0); out_len]).unwrap();
    let m = case.m;
    let mut results = Vec::new();
    let mut take = |dev: &SimBackend, c: &DeviceBuffer<SimBackend, T>| {
        results.push(bits(&dev.download(c).unwrap()));
    };
    nf4_launch::forward_tiled_sliced(cfg, &dev, &ptx, m, Slices::Exactly(1), &a, &w_dev, &mut c)
        .unwrap();
    // `Exactly(1)` launches the unsplit entry alone.
    let log = dev.take_launch_log();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].entry, unsplit_forward_entry(cfg, m));
    take(&dev, &c);
    nf4_launch::forward_tiled_sliced(cfg, &dev, &ptx, m, Slices::Exactly(1), &a, &w_dev, &mut c)
        .unwrap();
    take(&dev, &c);
    // By hand: one slice of all of `k` into the workspace, then the reduce.
    let partials = dev
        .upload(&vec![f32::NAN; nf4_launch::gemm_slice_len(cfg, m) as usize])
        .unwrap();
    let mut args = vec![KernelArg::buffer(&a), KernelArg::buffer(&w_dev.packed)];
    match &w_dev.absmax {
        nf4_launch::DeviceAbsmax::Plain(absmax) => args.push(KernelArg::buffer(absmax)),
        nf4_launch::DeviceAbsmax::DoubleQuant {
            codes,
            map,
            nested_absmax,
            offset,
        } => {
            args.extend([
                KernelArg::buffer(codes),
                KernelArg::buffer(map),
                KernelArg::buffer(nested_absmax),
                KernelArg::F32(*offset),
            ]);
        }
    }
    args.extend([
        KernelArg::buffer(&partials),
        KernelArg::U32(m),
        KernelArg::U32(nf4_launch::gemm_slice_k(cfg, 1)),
    ]);
    let (entry, split) = if nf4_launch::gemm_tall_split(cfg, m) {
        (
            "nf4_gemm_tall_split",
            nf4_launch::gemm_tall_split_launch_config(cfg, m, 1),
        )
    } else {
        (
            "nf4_gemm_split",
            nf4_launch::gemm_split_launch_config(cfg, m, 1),
        )
    };
    dev.launch(&ptx, entry, split, &args).unwrap();
    drop(args);
    let reduce = nf4_launch::gemm_reduce_launch_config(cfg, m);
    let args = [
        KernelArg::buffer(&partials),
        KernelArg::buffer(&c),
        KernelArg::U32(m),
        KernelArg::U32(1),
    ];
    dev.launch(&ptx, "nf4_gemm_reduce", reduce, &args).unwrap();
    take(&dev, &c);
    for _ in 0..2 {
        let slices = Slices::Exactly(3);
        nf4_launch::forward_tiled_sliced(cfg, &dev, &ptx, m, slices, &a, &w_dev, &mut c).unwrap();
        take(&dev, &c);
    }
    results.try_into().unwrap()
}

/// The tall tensor-core forward's 2 × 4 warps (each 64 rows × 16 columns of the 128 × 64
/// block tile), whole and split over `k`, on shapes that would catch a warp given the wrong
/// rows or columns: `m` = 70 (the second warp row holds 6 rows: its one-m16-tile branch), 100
/// (both warp rows full-width), 150 (the last block's second warp row lies wholly past `m`
/// and skips its work), 200 (two blocks, a short second warp row in the second); `n` = 100
/// and 72 (the last block's warps own columns past `n`, one of them partly), `k` ragged
/// against 64 (rows off 4-byte words) or aligned, plain and double-quantised absmax, f16 and
/// bf16.
#[test]
fn tall_forward_warp_rows_and_columns_on_ragged_edges() {
    let shapes = [
        (70, 100, 192),
        (100, 72, 130),
        (150, 100, 256),
        (200, 72, 192),
    ];
    let mut seed = 1300;
    for (si, &(m, n, k)) in shapes.iter().enumerate() {
        for (di, dtype) in [DType::F16, DType::BF16].into_iter().enumerate() {
            seed += 1;
            let case = Case {
                m,
                n,
                k,
                block: [64, 32][(si + di) % 2],
                double_quant: (si + di) % 2 == 1,
                dtype,
                seed,
            };
            let cfg = case.config();
            assert!(nf4_launch::gemm_tall(&cfg, m), "{case:?}");
            run_on(case, cfg, Path::Forward);
            run_on(case, cfg, Path::ForwardSliced(Slices::Exactly(2)));
        }
    }
}
