//! Every sample kernel runs in the interpreter (all checks on) and matches a plain-Rust
//! reference, on the oldest target (software bf16) and on sm_90 (hardware conversions).

#![cfg(feature = "sim")]

use half::{bf16, f16};
use ptxforge_runtime::launch::{
    Backend, Dim3, Element, KernelArg, LaunchConfig, ScalarKind, SimBackend,
};
use ptxforge_runtime::samples::{
    check_launch, sample_module, vec_add_width, Sample, BLOCK, GEMM_THREADS, GEMM_TILE,
    HISTOGRAM_BINS, SAMPLES, SOFTMAX_MAX_COLS, TENSOR_CORE_SAMPLES,
};
use ptxforge_runtime::templates::testing::SplitMix64;
use ptxforge_runtime::templates::tf32;
use ptxforge_runtime::Arch;

const ARCHS: [Arch; 2] = [Arch::Sm70, Arch::Sm90];

fn sample(name: &str) -> &'static Sample {
    SAMPLES
        .iter()
        .find(|s| s.name == name)
        .expect("sample exists")
}

fn launch(
    dev: &SimBackend,
    name: &str,
    arch: Arch,
    grid: Dim3,
    block: Dim3,
    smem: u32,
    args: &[KernelArg<'_, SimBackend>],
) {
    launch_sample(dev, sample(name), arch, grid, block, smem, args);
}

fn launch_sample(
    dev: &SimBackend,
    sample: &Sample,
    arch: Arch,
    grid: Dim3,
    block: Dim3,
    smem: u32,
    args: &[KernelArg<'_, SimBackend>],
) {
    let name = sample.name;
    let ptx = sample_module(sample, arch).expect("sample builds");
    let cfg = LaunchConfig {
        grid,
        block,
        dynamic_shared_bytes: smem,
    };
    check_launch(&cfg, &[]).unwrap_or_else(|e| panic!("{name}: {e}"));
    dev.launch(&ptx, name, cfg, args)
        .unwrap_or_else(|e| panic!("{name} on {arch}: {e}"));
}

fn blocks_for(n: u32, block: u32) -> Dim3 {
    Dim3::x(n.div_ceil(block).max(1))
}

fn assert_close(name: &str, got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{name}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let err = (g - w).abs() / w.abs().max(1.0);
        assert!(
            err <= tol,
            "{name}[{i}]: got {g}, want {w} (error {err:e} > {tol:e})"
        );
    }
}

/// Runs sample `vec_add_<T>` on `a` and `b` and returns `c`.
fn vec_add<T: Element + PartialEq>(dev: &SimBackend, arch: Arch, a: &[T], b: &[T]) -> Vec<T> {
    let n = a.len() as u32;
    let name = format!(
        "vec_add_{}",
        match T::KIND {
            ScalarKind::F16 => "f16",
            ScalarKind::BF16 => "bf16",
            ScalarKind::F32 => "f32",
            _ => "f64",
        }
    );
    let (da, db, dc) = (
        dev.upload(a).unwrap(),
        dev.upload(b).unwrap(),
        dev.alloc::<T>(a.len()).unwrap(),
    );
    let args = [
        KernelArg::buffer(&da),
        KernelArg::buffer(&db),
        KernelArg::buffer(&dc),
        KernelArg::U32(n),
    ];
    let bytes = std::mem::size_of::<T>() as u32;
    let width = vec_add_width(bytes);
    let threads = n.div_ceil(width);
    launch(
        dev,
        &name,
        arch,
        blocks_for(threads, 128),
        Dim3::x(128),
        0,
        &args,
    );
    let log = dev.take_launch_log();
    let c = &log[0].counters;
    // Each input element read once; per whole vector of `width` elements one load of each input
    // and one store (16 bytes for f32 and f64, 8 for halves), per tail element three.
    assert_eq!(
        c.global_load_bytes,
        u64::from(2 * n * bytes),
        "{name}: each input element read once"
    );
    let accesses = 3 * u64::from(n / width + n % width);
    assert_eq!(
        c.instructions.mem_global, accesses,
        "{name}: one vector access per input and output per {width} elements (n = {n})"
    );
    dev.download(&dc).unwrap()
}

/// The host result of each vec_add: exact for f32/f64; the half types are computed in f32 and
/// rounded once to nearest even, so the device must match the host bit for bit.
#[test]
fn vec_add_every_type() {
    let mut rng = SplitMix64::new(1);
    for arch in ARCHS {
        for n in [1u32, 31, 257, 1000] {
            let a: Vec<f32> = (0..n).map(|_| rng.uniform(-4.0, 4.0) as f32).collect();
            let b: Vec<f32> = (0..n).map(|_| rng.uniform(-4.0, 4.0) as f32).collect();
            let dev = SimBackend::new();
            let want: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
            assert_eq!(
                vec_add(&dev, arch, &a, &b),
                want,
                "vec_add_f32 is exact on {arch}"
            );

            let a64: Vec<f64> = a.iter().map(|&x| f64::from(x) / 3.0).collect();
            let b64: Vec<f64> = b.iter().map(|&x| f64::from(x) / 7.0).collect();
            let want: Vec<f64> = a64.iter().zip(&b64).map(|(x, y)| x + y).collect();
            assert_eq!(
                vec_add(&dev, arch, &a64, &b64),
                want,
                "vec_add_f64 is exact on {arch}"
            );

            let a16: Vec<f16> = a.iter().map(|&x| f16::from_f32(x)).collect();
            let b16: Vec<f16> = b.iter().map(|&x| f16::from_f32(x)).collect();
            let want: Vec<f16> = a16
                .iter()
                .zip(&b16)
                .map(|(x, y)| f16::from_f32(x.to_f32() + y.to_f32()))
                .collect();
            assert_eq!(
                vec_add(&dev, arch, &a16, &b16),
                want,
                "vec_add_f16 rounds like the host on {arch}"
            );

            let ab: Vec<bf16> = a.iter().map(|&x| bf16::from_f32(x)).collect();
            let bb: Vec<bf16> = b.iter().map(|&x| bf16::from_f32(x)).collect();
            let want: Vec<bf16> = ab
                .iter()
                .zip(&bb)
                .map(|(x, y)| bf16::from_f32(x.to_f32() + y.to_f32()))
                .collect();
            assert_eq!(
                vec_add(&dev, arch, &ab, &bb),
                want,
                "vec_add_bf16 rounds like the host on {arch}"
            );
        }
    }
}

#[test]
fn saxpy_is_one_fma() {
    let mut rng = SplitMix64::new(2);
    let n = 300u32;
    let x: Vec<f32> = (0..n).map(|_| rng.uniform(-1.0, 1.0) as f32).collect();
    let y: Vec<f32> = (0..n).map(|_| rng.uniform(-1.0, 1.0) as f32).collect();
    for arch in ARCHS {
        let dev = SimBackend::new();
        let (dx, dy) = (dev.upload(&x).unwrap(), dev.upload(&y).unwrap());
        let args = [
            KernelArg::buffer(&dx),
            KernelArg::buffer(&dy),
            KernelArg::F32(0.75),
            KernelArg::U32(n),
        ];
        launch(
            &dev,
            "saxpy_f32",
            arch,
            blocks_for(n, 64),
            Dim3::x(64),
            0,
            &args,
        );
        let want: Vec<f32> = x
            .iter()
            .zip(&y)
            .map(|(a, b)| 0.75f32.mul_add(*a, *b))
            .collect();
        assert_eq!(dev.download(&dy).unwrap(), want);
    }
}

#[test]
fn reductions_match_the_host_sum() {
    let mut rng = SplitMix64::new(3);
    for n in [1u32, 100, 1000] {
        let x: Vec<f32> = (0..n).map(|_| rng.uniform(-1.0, 1.0) as f32).collect();
        let dev = SimBackend::new();
        let dx = dev.upload(&x).unwrap();
        // Warp reduction: one sum per 32 elements.
        let warps = n.div_ceil(32);
        let out = dev.alloc::<f32>(warps as usize).unwrap();
        let args = [
            KernelArg::buffer(&dx),
            KernelArg::buffer(&out),
            KernelArg::U32(n),
        ];
        launch(
            &dev,
            "warp_reduce_sum_f32",
            Arch::Sm80,
            blocks_for(n, 64),
            Dim3::x(64),
            0,
            &args,
        );
        let got: Vec<f64> = dev
            .download(&out)
            .unwrap()
            .into_iter()
            .map(f64::from)
            .collect();
        let want: Vec<f64> = x
            .chunks(32)
            .map(|c| c.iter().map(|&v| f64::from(v)).sum())
            .collect();
        assert_close("warp_reduce_sum_f32", &got, &want, 1e-5);
        // Block reduction: one sum per BLOCK elements.
        let blocks = n.div_ceil(BLOCK);
        let out = dev.alloc::<f32>(blocks as usize).unwrap();
        let args = [
            KernelArg::buffer(&dx),
            KernelArg::buffer(&out),
            KernelArg::U32(n),
        ];
        launch(
            &dev,
            "block_reduce_sum_f32",
            Arch::Sm80,
            Dim3::x(blocks),
            Dim3::x(BLOCK),
            0,
            &args,
        );
        let got: Vec<f64> = dev
            .download(&out)
            .unwrap()
            .into_iter()
            .map(f64::from)
            .collect();
        let want: Vec<f64> = x
            .chunks(BLOCK as usize)
            .map(|c| c.iter().map(|&v| f64::from(v)).sum())
            .collect();
        assert_close("block_reduce_sum_f32", &got, &want, 1e-5);
    }
}

#[test]
fn histogram_counts_every_value() {
    let mut rng = SplitMix64::new(4);
    let n = 1500u32;
    let values: Vec<u32> = (0..n).map(|_| rng.below(1000) as u32).collect();
    let dev = SimBackend::new();
    let dv = dev.upload(&values).unwrap();
    let bins = dev.upload(&vec![0u32; HISTOGRAM_BINS as usize]).unwrap();
    let args = [
        KernelArg::buffer(&dv),
        KernelArg::buffer(&bins),
        KernelArg::U32(n),
    ];
    launch(
        &dev,
        "histogram_u32",
        Arch::Sm80,
        blocks_for(n, BLOCK),
        Dim3::x(BLOCK),
        0,
        &args,
    );
    let mut want = vec![0u32; HISTOGRAM_BINS as usize];
    for v in &values {
        want[(v % HISTOGRAM_BINS) as usize] += 1;
    }
    assert_eq!(dev.download(&bins).unwrap(), want);
}

#[test]
fn tiled_gemm_matches_naive_matmul() {
    let mut rng = SplitMix64::new(5);
    // Edge-only blocks (ragged M, N, K; N not a multiple of 4), interior blocks with quads
    // throughout, and a mix with a K tail.
    let shapes = [
        (1u32, 1u32, 1u32),
        (17, 33, 5),
        (32, 16, 40),
        (64, 64, 32),
        (130, 68, 36),
        (64, 66, 20),
    ];
    for (m, n, k) in shapes {
        let a: Vec<f32> = (0..m * k).map(|_| rng.uniform(-1.0, 1.0) as f32).collect();
        let b: Vec<f32> = (0..k * n).map(|_| rng.uniform(-1.0, 1.0) as f32).collect();
        let dev = SimBackend::new();
        let (da, db, dc) = (
            dev.upload(&a).unwrap(),
            dev.upload(&b).unwrap(),
            dev.alloc::<f32>((m * n) as usize).unwrap(),
        );
        let args = [
            KernelArg::buffer(&da),
            KernelArg::buffer(&db),
            KernelArg::buffer(&dc),
            KernelArg::U32(m),
            KernelArg::U32(n),
            KernelArg::U32(k),
        ];
        let grid = Dim3::new(n.div_ceil(GEMM_TILE), m.div_ceil(GEMM_TILE), 1);
        launch(
            &dev,
            "gemm_tiled_f32",
            Arch::Sm80,
            grid,
            Dim3::x(GEMM_THREADS),
            0,
            &args,
        );
        let got: Vec<f64> = dev
            .download(&dc)
            .unwrap()
            .into_iter()
            .map(f64::from)
            .collect();
        let mut want = vec![0.0f64; (m * n) as usize];
        for i in 0..m as usize {
            for j in 0..n as usize {
                want[i * n as usize + j] = (0..k as usize)
                    .map(|p| f64::from(a[i * k as usize + p]) * f64::from(b[p * n as usize + j]))
                    .sum();
            }
        }
        assert_close("gemm_tiled_f32", &got, &want, 1e-5);
        let log = dev.take_launch_log();
        let c = &log[0].counters;
        // Per 16-wide K tile a warp issues 64 `ld.shared.v4` and 8 `st.shared.v4`, each served
        // as 4 quarter-warps: every quarter-warp reads one A quad (a broadcast) or 32
        // consecutive B words, and stages one quad column of 8 A rows 20 words apart or 32
        // consecutive B words, 1 wavefront each: 4 per request, the minimum.
        assert!(
            c.shared_wavefronts_per_request() <= 4.0 + 1e-9
                && (c.shared_bank_conflict_factor() - 1.0).abs() < 1e-9,
            "tile reads and staging are conflict-free ({m}×{n}×{k}): {} wavefronts per \
             request, {} × the fewest",
            c.shared_wavefronts_per_request(),
            c.shared_bank_conflict_factor()
        );
    }
}

/// Ragged tensor-core GEMM shapes: M, N, K not multiples of the 64 × 64 × 32 tile (N and K
/// multiples of 8, as the samples require), K with 1 to 7 pipeline trips, grids of 1 to 3 × 3.
const TC_SHAPES: [(u32, u32, u32); 4] = [(1, 8, 8), (77, 88, 104), (64, 64, 96), (130, 136, 200)];

/// How a GEMM sample's inputs are made from f32 values, and how the reference reads them.
type Conversions<T> = (fn(f32) -> T, fn(T) -> f64);
const F16_IN: Conversions<f16> = (f16::from_f32, |x| f64::from(x.to_f32()));
const BF16_IN: Conversions<bf16> = (bf16::from_f32, |x| f64::from(x.to_f32()));
/// f32 inputs, read as the tensor cores see them after `cvt.rna.tf32.f32`.
const TF32_IN: Conversions<f32> = (|x| x, |x| f64::from(tf32::round_tf32(x)));

/// One GEMM sample launch: its shape, inputs and output.
struct TcGemmRun<T> {
    m: usize,
    n: usize,
    k: usize,
    a: Vec<T>,
    b: Vec<T>,
    got: Vec<f32>,
}

impl<T: Copy> TcGemmRun<T> {
    /// `Σ_p f(a[i][p]) · f(b[p][j])` in f64 for every output.
    fn reference(&self, f: fn(T) -> f64) -> Vec<f64> {
        let (n, k) = (self.n, self.k);
        (0..self.m * n)
            .map(|ij| {
                let (i, j) = (ij / n, ij % n);
                (0..k)
                    .map(|p| f(self.a[i * k + p]) * f(self.b[p * n + j]))
                    .sum()
            })
            .collect()
    }
}

/// The largest magnitude of `v` (at least 1e-30).
fn max_abs(v: &[f64]) -> f64 {
    v.iter().fold(1e-30f64, |acc, w| acc.max(w.abs()))
}

/// `C = A · B` with A, B rounded to the sample's input type, on each of `shapes`, launched with
/// the sample's tiling; every output is checked against the f64 sum of `to_f64` of the inputs:
/// |got − ref| ≤ `rel_tol` · max|ref| (a wrong fragment lane, a stale pipeline stage or a missed
/// zero fill is off by O(max|ref|)). Every launch must use the tensor cores, and `ldmatrix`
/// and the other shared accesses without bank conflicts. Returns the runs for further checks.
fn run_tc_gemm<T: Element + Copy>(
    name: &str,
    arch: Arch,
    shapes: &[(u32, u32, u32)],
    (to_input, to_f64): Conversions<T>,
    rel_tol: f64,
) -> Vec<TcGemmRun<T>> {
    let targeted = TENSOR_CORE_SAMPLES
        .iter()
        .find(|t| t.sample.name == name)
        .expect("tensor-core sample exists");
    let tiling = targeted.gemm_tiling.expect("a block-tiled GEMM sample");
    let mut rng = SplitMix64::new(10);
    let mut runs = Vec::new();
    for &(m, n, k) in shapes {
        let a: Vec<T> = (0..m * k)
            .map(|_| to_input(rng.uniform(-1.0, 1.0) as f32))
            .collect();
        let b: Vec<T> = (0..k * n)
            .map(|_| to_input(rng.uniform(-1.0, 1.0) as f32))
            .collect();
        let dev = SimBackend::new();
        let (da, db) = (dev.upload(&a).unwrap(), dev.upload(&b).unwrap());
        let dc = dev.upload(&vec![f32::NAN; (m * n) as usize]).unwrap();
        let args = [
            KernelArg::buffer(&da),
            KernelArg::buffer(&db),
            KernelArg::buffer(&dc),
            KernelArg::U32(m),
            KernelArg::U32(n),
            KernelArg::U32(k),
        ];
        let (grid, block) = (tiling.grid(m, n), tiling.block());
        launch_sample(&dev, &targeted.sample, arch, grid, block, 0, &args);
        let run = TcGemmRun {
            m: m as usize,
            n: n as usize,
            k: k as usize,
            a,
            b,
            got: dev.download(&dc).unwrap(),
        };
        let want = run.reference(to_f64);
        let scale = max_abs(&want);
        for (idx, (g, w)) in run.got.iter().zip(&want).enumerate() {
            let err = (f64::from(*g) - w).abs();
            assert!(
                err <= rel_tol * scale,
                "{name} on {arch}, {m}x{n}x{k}: C[{}][{}] = {g}, want {w} (max |ref| {scale})",
                idx / run.n,
                idx % run.n
            );
        }
        let log = dev.take_launch_log();
        let c = &log[0].counters;
        assert!(c.mma_instructions > 0 && c.ldmatrix_requests > 0, "{name}");
        // Padded tiles: every 8x8 matrix of an ldmatrix is one wavefront (no bank conflict).
        let matrices_per_request = if name == "gemm_tc_f16_m16n8k8" {
            8.0 / 6.0
        } else {
            4.0
        };
        assert!(
            (c.ldmatrix_wavefronts_per_request() - matrices_per_request).abs() < 1e-9,
            "{name}: {} ldmatrix wavefronts per request, want {matrices_per_request}",
            c.ldmatrix_wavefronts_per_request()
        );
        assert!(
            (c.shared_bank_conflict_factor() - 1.0).abs() < 1e-9,
            "{name}: shared accesses take {} × the fewest wavefronts",
            c.shared_bank_conflict_factor()
        );
        runs.push(run);
    }
    runs
}

/// `C = A · B` in f32 on tf32 tensor cores, on the fixed ragged shapes (M arbitrary, N and K
/// multiples of 4, K with 1 to 13 pipeline trips, grids of 1 to 2 × 2) and on fuzzed ones.
/// Three checks: against the f64 sum of the inputs rounded as `cvt.rna.tf32.f32` does within
/// f32 accumulation (1e-5 of max|ref|: the numerics of the `allow_tf32` kernels, which an
/// unrounded or truncated operand misses on these inputs), against the exact f64 product within
/// the documented tf32 tolerance (`templates::tf32::tolerance`), and that the inputs exercise
/// the rounding (the rounded and exact references differ by more than 1e-5 of max|ref|
/// somewhere).
#[test]
fn tensor_core_gemm_tf32_matches_rounded_f64_reference() {
    const FIXED: [(u32, u32, u32); 5] = [
        (1, 4, 4),
        (77, 92, 108),
        (128, 128, 256),
        (130, 136, 200),
        (200, 260, 36),
    ];
    let mut rng = SplitMix64::new(12);
    let mut draw = |lo: u32, hi: u32| lo + rng.below(u64::from(hi - lo + 1)) as u32;
    let fuzzed: Vec<(u32, u32, u32)> = (0..3)
        .map(|_| (draw(1, 260), 4 * draw(1, 70), 4 * draw(1, 70)))
        .collect();
    let shapes: Vec<_> = FIXED.iter().copied().chain(fuzzed).collect();
    for arch in [Arch::Sm80, Arch::Sm90] {
        let name = "gemm_tc_tf32_m16n8k8";
        let runs = run_tc_gemm(name, arch, &shapes, TF32_IN, 1e-5);
        let mut rounding_visible = false;
        for run in &runs {
            let (exact, with_rounding) = (run.reference(f64::from), run.reference(TF32_IN.1));
            let scale = max_abs(&exact);
            let tol = tf32::tolerance(run.k as u32) * scale;
            for (g, w) in run.got.iter().zip(&exact) {
                assert!((f64::from(*g) - w).abs() <= tol, "{g} vs exact {w}");
            }
            rounding_visible |= exact
                .iter()
                .zip(&with_rounding)
                .any(|(e, r)| (e - r).abs() > 1e-5 * scale);
        }
        assert!(rounding_visible, "inputs must exercise the tf32 rounding");
    }
}

#[test]
fn tensor_core_gemm_f16_matches_f64_reference() {
    for arch in [Arch::Sm80, Arch::Sm90] {
        run_tc_gemm("gemm_tc_f16_m16n8k16", arch, &TC_SHAPES, F16_IN, 1e-4);
    }
}

#[test]
fn tensor_core_gemm_bf16_matches_f64_reference() {
    run_tc_gemm(
        "gemm_tc_bf16_m16n8k16",
        Arch::Sm80,
        &TC_SHAPES,
        BF16_IN,
        1e-4,
    );
}

#[test]
fn tensor_core_gemm_m16n8k8_on_sm75_matches_f64_reference() {
    run_tc_gemm("gemm_tc_f16_m16n8k8", Arch::Sm75, &TC_SHAPES, F16_IN, 1e-4);
}

fn tc_sample(name: &str) -> &'static Sample {
    &TENSOR_CORE_SAMPLES
        .iter()
        .find(|t| t.sample.name == name)
        .expect("tensor-core sample exists")
        .sample
}

/// Runs a one-warp `(a, b, c)` tile sample on `c_init` and returns `c`.
fn run_warp_tile<T: Element, O: Element>(
    name: &str,
    arch: Arch,
    a: &[T],
    b: &[T],
    c_init: &[O],
) -> Vec<O> {
    let dev = SimBackend::new();
    let (da, db, dc) = (
        dev.upload(a).unwrap(),
        dev.upload(b).unwrap(),
        dev.upload(c_init).unwrap(),
    );
    let args = [
        KernelArg::buffer(&da),
        KernelArg::buffer(&db),
        KernelArg::buffer(&dc),
    ];
    launch_sample(
        &dev,
        tc_sample(name),
        arch,
        Dim3::x(1),
        Dim3::x(32),
        0,
        &args,
    );
    dev.download(&dc).unwrap()
}

/// `cvt.rna.tf32.f32` on the host: keep 10 mantissa bits, rounding the 13 dropped bits to
/// nearest with ties away from zero (adding half an ulp to the magnitude).
fn tf32_rna(x: f32) -> f64 {
    f64::from(f32::from_bits((x.to_bits() + 0x1000) & !0x1fff))
}

#[test]
fn tf32_mma_tile_matches_rounded_reference() {
    let mut rng = SplitMix64::new(11);
    // Values with bits below the tf32 mantissa, so an unrounded or truncated input shows.
    let a: Vec<f32> = (0..16 * 8).map(|_| rng.uniform(-2.0, 2.0) as f32).collect();
    let b: Vec<f32> = (0..8 * 8).map(|_| rng.uniform(-2.0, 2.0) as f32).collect();
    for arch in [Arch::Sm80, Arch::Sm90] {
        let got = run_warp_tile("mma_tf32_m16n8k8", arch, &a, &b, &[f32::NAN; 16 * 8]);
        // Eight exact products summed in f32: a few f32 ulps of the magnitudes.
        let tol = 1e-6 * 8.0 * 4.0;
        let mut rounding_visible = 0;
        for i in 0..16 {
            for j in 0..8 {
                let dot = |round: fn(f32) -> f64| -> f64 {
                    (0..8)
                        .map(|p| round(a[i * 8 + p]) * round(b[p * 8 + j]))
                        .sum()
                };
                let (want, unrounded) = (dot(tf32_rna), dot(f64::from));
                let g = f64::from(got[i * 8 + j]);
                assert!((g - want).abs() <= tol, "C[{i}][{j}] = {g}, want {want}");
                rounding_visible += usize::from((unrounded - want).abs() > tol);
            }
        }
        assert!(
            rounding_visible > 64,
            "inputs must exercise the tf32 rounding"
        );
    }
}

#[test]
fn f16_accumulating_mma_tile_matches_reference() {
    let mut rng = SplitMix64::new(12);
    let a: Vec<f16> = (0..16 * 16)
        .map(|_| f16::from_f32(rng.uniform(-1.0, 1.0) as f32))
        .collect();
    let b: Vec<f16> = (0..16 * 8)
        .map(|_| f16::from_f32(rng.uniform(-1.0, 1.0) as f32))
        .collect();
    let want: Vec<f64> = (0..16 * 8)
        .map(|ij| {
            let (i, j) = (ij / 8, ij % 8);
            (0..16)
                .map(|p| f64::from(a[i * 16 + p].to_f32()) * f64::from(b[p * 8 + j].to_f32()))
                .sum()
        })
        .collect();
    // The result is an f16: within a couple of f16 ulps (2^-10 relative) of the largest value.
    let scale = want.iter().fold(0.0f64, |m, w| m.max(w.abs()));
    for arch in [Arch::Sm80, Arch::Sm90] {
        let init = [f16::NAN; 16 * 8];
        let got = run_warp_tile("mma_f16_accumulate_m16n8k16", arch, &a, &b, &init);
        for (idx, (g, w)) in got.iter().zip(&want).enumerate() {
            let g = f64::from(g.to_f32());
            assert!(
                (g - w).abs() <= 2.0 * scale / 1024.0,
                "{arch}: D[{}][{}] = {g}, want {w}",
                idx / 8,
                idx % 8
            );
        }
    }
}

#[test]
fn packed_conversions_put_lo_in_the_low_half() {
    let mut rng = SplitMix64::new(13);
    let n = 100usize;
    let mut x: Vec<f32> = (0..2 * n)
        .map(|_| rng.uniform(-70000.0, 70000.0) as f32)
        .collect();
    // Halfway cases, an f16 overflow, a NaN and signed zero.
    x[..8].copy_from_slice(&[
        1.0 + 1.0 / 2048.0,
        -3.0,
        65520.0,
        f32::NAN,
        -0.0,
        1e-8,
        0.1,
        7.0,
    ]);
    let dev = SimBackend::new();
    let dx = dev.upload(&x).unwrap();
    let outs: Vec<_> = (0..4).map(|_| dev.alloc::<u32>(n).unwrap()).collect();
    let mut args = vec![KernelArg::buffer(&dx)];
    args.extend(outs.iter().map(KernelArg::buffer));
    args.push(KernelArg::U32(n as u32));
    launch_sample(
        &dev,
        tc_sample("pack_f32_pairs"),
        Arch::Sm80,
        blocks_for(n as u32, BLOCK),
        Dim3::x(BLOCK),
        0,
        &args,
    );
    let got: Vec<Vec<u32>> = outs.iter().map(|o| dev.download(o).unwrap()).collect();
    for i in 0..n {
        let (lo, hi) = (x[2 * i], x[2 * i + 1]);
        let h =
            u32::from(f16::from_f32(lo).to_bits()) | u32::from(f16::from_f32(hi).to_bits()) << 16;
        let b =
            u32::from(bf16::from_f32(lo).to_bits()) | u32::from(bf16::from_f32(hi).to_bits()) << 16;
        let same = |g: u32, w: u32, what: &str| {
            // NaN payloads may differ; compare NaN-ness per half instead of bits.
            let nan = |v: u32, bf: bool| {
                if bf {
                    bf16::from_bits(v as u16).is_nan()
                } else {
                    f16::from_bits(v as u16).is_nan()
                }
            };
            let bf = what == "bf16x2";
            for shift in [0, 16] {
                let (gh, wh) = ((g >> shift) & 0xffff, (w >> shift) & 0xffff);
                assert!(
                    gh == wh || (nan(gh, bf) && nan(wh, bf)),
                    "{what}[{i}] ({lo}, {hi}): got {g:#010x}, want {w:#010x}"
                );
            }
        };
        same(got[0][i], h, "f16x2");
        same(got[1][i], b, "bf16x2");
        assert_eq!(
            got[2][i],
            (got[0][i] & 0xffff) | (got[1][i] << 16),
            "prmt[{i}]"
        );
        assert_eq!(got[3][i], got[0][i].rotate_left(16), "swapped[{i}]");
    }
}

/// Rows of 1 to `SOFTMAX_MAX_COLS` columns, each read from global memory exactly once; longer
/// rows (past the registers) stream in three passes and are still written.
#[test]
fn softmax_rows_sum_to_one() {
    let mut rng = SplitMix64::new(6);
    for cols in [1u32, 33, 77, SOFTMAX_MAX_COLS, SOFTMAX_MAX_COLS + 1, 2500] {
        let rows = 5u32;
        let x: Vec<f32> = (0..rows * cols)
            .map(|_| rng.uniform(-8.0, 8.0) as f32)
            .collect();
        let dev = SimBackend::new();
        let (dx, dy) = (
            dev.upload(&x).unwrap(),
            dev.alloc::<f32>((rows * cols) as usize).unwrap(),
        );
        let args = [
            KernelArg::buffer(&dx),
            KernelArg::buffer(&dy),
            KernelArg::U32(cols),
        ];
        launch(
            &dev,
            "softmax_row_f32",
            Arch::Sm80,
            Dim3::x(rows),
            Dim3::x(32),
            0,
            &args,
        );
        let got: Vec<f64> = dev
            .download(&dy)
            .unwrap()
            .into_iter()
            .map(f64::from)
            .collect();
        let mut want = Vec::new();
        for r in x.chunks(cols as usize) {
            let m = r
                .iter()
                .fold(f64::NEG_INFINITY, |a, &v| a.max(f64::from(v)));
            let s: f64 = r.iter().map(|&v| (f64::from(v) - m).exp()).sum();
            want.extend(r.iter().map(|&v| (f64::from(v) - m).exp() / s));
        }
        assert_close("softmax_row_f32", &got, &want, 1e-6);
        let log = dev.take_launch_log();
        let reads = if cols <= SOFTMAX_MAX_COLS { 1 } else { 3 };
        assert_eq!(
            log[0].counters.global_load_bytes,
            u64::from(reads * rows * cols * 4),
            "each element is read {reads} time(s) (cols = {cols})"
        );
    }
}

#[test]
fn ballot_counts_positive_lanes() {
    let mut rng = SplitMix64::new(7);
    let n = 128u32;
    let mut x: Vec<f32> = (0..n).map(|_| rng.uniform(-1.0, 1.0) as f32).collect();
    x[32..64].iter_mut().for_each(|v| *v = v.abs() + 0.5); // warp 1 all positive
    let dev = SimBackend::new();
    let dx = dev.upload(&x).unwrap();
    let (counts, all) = (dev.alloc::<u32>(4).unwrap(), dev.alloc::<u32>(4).unwrap());
    let args = [
        KernelArg::buffer(&dx),
        KernelArg::buffer(&counts),
        KernelArg::buffer(&all),
    ];
    launch(
        &dev,
        "ballot_count_positive_f32",
        Arch::Sm80,
        Dim3::x(2),
        Dim3::x(64),
        0,
        &args,
    );
    let want_counts: Vec<u32> = x
        .chunks(32)
        .map(|c| c.iter().filter(|&&v| v > 0.0).count() as u32)
        .collect();
    let want_all: Vec<u32> = x
        .chunks(32)
        .map(|c| u32::from(c.iter().all(|&v| v > 0.0)))
        .collect();
    assert_eq!(dev.download(&counts).unwrap(), want_counts);
    assert_eq!(dev.download(&all).unwrap(), want_all);
    assert_eq!(want_all[1], 1);
}

#[test]
fn dynamic_shared_memory_reverses_blocks() {
    let n = 3 * 96u32;
    let x: Vec<u32> = (0..n).collect();
    let dev = SimBackend::new();
    let (dx, dy) = (
        dev.upload(&x).unwrap(),
        dev.alloc::<u32>(n as usize).unwrap(),
    );
    let args = [KernelArg::buffer(&dx), KernelArg::buffer(&dy)];
    launch(
        &dev,
        "reverse_dynamic_smem_u32",
        Arch::Sm80,
        Dim3::x(3),
        Dim3::x(96),
        96 * 4,
        &args,
    );
    let want: Vec<u32> = x.chunks(96).flat_map(|c| c.iter().rev().copied()).collect();
    assert_eq!(dev.download(&dy).unwrap(), want);
}

#[test]
fn conversions_round_to_nearest_even_on_every_path() {
    let mut x: Vec<f32> = vec![
        0.0,
        -0.0,
        1.0,
        f32::from_bits(0x3f80_8000), // 1 + 2^-8: a bf16 tie, rounds down to even
        f32::from_bits(0x3f81_8000), // a bf16 tie that rounds up to even
        65504.0,
        65520.0,
        1e-8,
        -2.5625,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        3.0e38,
        1.0e-40,
    ];
    let mut rng = SplitMix64::new(8);
    x.extend((0..200).map(|_| f32::from_bits(rng.next_u64() as u32)));
    let n = x.len() as u32;
    for arch in ARCHS {
        let dev = SimBackend::new();
        let dx = dev.upload(&x).unwrap();
        let (y, z) = (
            dev.alloc::<bf16>(n as usize).unwrap(),
            dev.alloc::<f32>(n as usize).unwrap(),
        );
        let args = [
            KernelArg::buffer(&dx),
            KernelArg::buffer(&y),
            KernelArg::buffer(&z),
            KernelArg::U32(n),
        ];
        launch(
            &dev,
            "convert_f32_to_bf16",
            arch,
            blocks_for(n, 64),
            Dim3::x(64),
            0,
            &args,
        );
        let got = dev.download(&y).unwrap();
        for (i, (g, v)) in got.iter().zip(&x).enumerate() {
            let want = bf16::from_f32(*v);
            if v.is_nan() {
                assert!(g.is_nan(), "bf16[{i}] of NaN on {arch}");
            } else {
                assert_eq!(g.to_bits(), want.to_bits(), "bf16[{i}] of {v:e} on {arch}");
            }
        }
        let (y, z) = (
            dev.alloc::<f16>(n as usize).unwrap(),
            dev.alloc::<f32>(n as usize).unwrap(),
        );
        let args = [
            KernelArg::buffer(&dx),
            KernelArg::buffer(&y),
            KernelArg::buffer(&z),
            KernelArg::U32(n),
        ];
        launch(
            &dev,
            "convert_f32_to_f16",
            arch,
            blocks_for(n, 64),
            Dim3::x(64),
            0,
            &args,
        );
        let (got, back) = (dev.download(&y).unwrap(), dev.download(&z).unwrap());
        for (i, v) in x.iter().enumerate() {
            let want = f16::from_f32(*v);
            if v.is_nan() {
                assert!(got[i].is_nan() && back[i].is_nan());
            } else {
                assert_eq!(
                    got[i].to_bits(),
                    want.to_bits(),
                    "f16[{i}] of {v:e} on {arch}"
                );
                assert_eq!(back[i].to_bits(), want.to_f32().to_bits(), "f16→f32[{i}]");
            }
        }
    }
}

#[test]
fn f64_math_is_accurate() {
    let mut x: Vec<f64> = vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        709.0,
        -708.0,
        -744.0,
        -745.5,
        1e-300,
        -30.25,
        10.0,
        f64::NEG_INFINITY,
    ];
    let mut rng = SplitMix64::new(9);
    x.extend((0..200).map(|_| rng.uniform(-50.0, 50.0)));
    let n = x.len() as u32;
    let dev = SimBackend::new();
    let dx = dev.upload(&x).unwrap();
    let y = dev.alloc::<f64>(n as usize).unwrap();
    let args = [
        KernelArg::buffer(&dx),
        KernelArg::buffer(&y),
        KernelArg::U32(n),
    ];
    launch(
        &dev,
        "exp_f64",
        Arch::Sm80,
        blocks_for(n, 64),
        Dim3::x(64),
        0,
        &args,
    );
    for (g, v) in dev.download(&y).unwrap().iter().zip(&x) {
        let want = v.exp();
        let ulps = if want == 0.0 {
            g.abs() / f64::from_bits(1)
        } else {
            ((g - want) / want).abs() / f64::EPSILON
        };
        assert!(ulps <= 4.0, "exp({v}) = {g}, want {want} ({ulps} ulp)");
    }
    let y = dev.alloc::<f64>(n as usize).unwrap();
    let finite: Vec<f64> = x
        .iter()
        .map(|v| if v.is_finite() { *v } else { 2.0 })
        .collect();
    let dx = dev.upload(&finite).unwrap();
    let args = [
        KernelArg::buffer(&dx),
        KernelArg::buffer(&y),
        KernelArg::U32(n),
    ];
    launch(
        &dev,
        "rsqrt_norm_f64",
        Arch::Sm80,
        blocks_for(n, 64),
        Dim3::x(64),
        0,
        &args,
    );
    for (g, v) in dev.download(&y).unwrap().iter().zip(&finite) {
        let want = v / v.mul_add(*v, 1.0).sqrt();
        assert_eq!(*g, want, "rsqrt_norm({v}) is correctly rounded");
    }
}

#[test]
fn every_sample_has_a_numerics_test() {
    let tested = [
        "vec_add_f16",
        "vec_add_bf16",
        "vec_add_f32",
        "vec_add_f64",
        "saxpy_f32",
        "warp_reduce_sum_f32",
        "block_reduce_sum_f32",
        "histogram_u32",
        "gemm_tiled_f32",
        "softmax_row_f32",
        "ballot_count_positive_f32",
        "reverse_dynamic_smem_u32",
        "convert_f32_to_bf16",
        "convert_f32_to_f16",
        "rsqrt_norm_f64",
        "exp_f64",
    ];
    for s in SAMPLES {
        assert!(
            tested.contains(&s.name),
            "sample {} has no numerics test",
            s.name
        );
    }
}

#[test]
fn findings_fail_the_launch() {
    // vec_add with n larger than the buffers: the interpreter's memcheck must stop it.
    let dev = SimBackend::new();
    let (a, b, c) = (
        dev.upload(&[1.0f32; 8]).unwrap(),
        dev.upload(&[1.0f32; 8]).unwrap(),
        dev.alloc::<f32>(8).unwrap(),
    );
    let ptx = sample_module(sample("vec_add_f32"), Arch::Sm80).unwrap();
    let cfg = LaunchConfig {
        grid: Dim3::x(1),
        block: Dim3::x(32),
        dynamic_shared_bytes: 0,
    };
    let args = [
        KernelArg::buffer(&a),
        KernelArg::buffer(&b),
        KernelArg::buffer(&c),
        KernelArg::U32(32),
    ];
    let err = dev.launch(&ptx, "vec_add_f32", cfg, &args).unwrap_err();
    assert!(
        err.to_string().contains("OutOfBounds")
            || err.to_string().to_lowercase().contains("out of bounds"),
        "{err}"
    );
    assert_eq!(dev.cached_modules(), 1);
}
