//! The tiled CUDA-core NHWC forward (`conv2d_nhwc`) and backward-data (`conv2d_bwd_data` of an
//! NHWC module) in the interpreter, every sanitizer check on (`SimBackend::new`: a finding
//! fails the launch and the test), against the NCHW f64 host references transposed to
//! channels-last, over fixed and seeded random shapes: groups, stride 2, dilation, padding,
//! ragged pixel and channel tiles (up to three), `Cg` and `Og` that are and are not multiples
//! of the 16-byte chunk (vector and element gathers and stores), several reduction tiles; f16
//! and f32 on sm_70, f32 and f64 on sm_80 (no tensor cores without `allow_tf32`).
//! Tolerances as in `conv_support` (f32 ≤ 1e-5, f16 ≤ 2e-3, bf16 ≤ 2e-2, f64 ≤ 1e-12
//! relative to the largest output).
//!
//! Their counters on the families benchmark shape (3×3 64→64, 16×16, padding 1, f16 on sm_70;
//! and f32): global load efficiency ≥ 0.9 (16-byte chunks, whole sectors), shared-memory
//! wavefronts ≤ 1.1 × the fewest the requests could take (the swizzle), and thread
//! instructions per output at most a tenth of the one-thread-per-output forward's 7618.6
//! (a seventh of backward-data's 5568.8: see [`UNTILED_INSTRUCTIONS_PER_OUTPUT`]).

#![cfg(feature = "sim")]

mod conv_support;

use half::f16;
use ptxforge_runtime::dtype::DType;
use ptxforge_runtime::launch::{Backend, Element, LaunchRecord, SimBackend};
use ptxforge_runtime::templates::conv::kernels::{ENTRY_BWD_DATA, ENTRY_NHWC};
use ptxforge_runtime::templates::conv::launch::{backward_data, forward, forward_nhwc};
use ptxforge_runtime::templates::conv::reference::{self, to_channels_last};
use ptxforge_runtime::templates::conv::{Conv2dConfig, ConvDims, Layout};
use ptxforge_runtime::templates::testing::{from_f64, to_f64, HostFloat, SplitMix64};
use ptxforge_runtime::Arch;

use conv_support::{
    assert_close, download, fuzz_cases_with, must, prepare, shape, tolerance, Case, NhwcForward,
};

/// Fixed shapes. Chunk sizes: 8 halves, 4 f32, 2 f64.
fn fixed_cases() -> Vec<Case> {
    let c = Conv2dConfig::new;
    vec![
        Case {
            name: "3x3 p1 64→64 + bias (vector everywhere, 18 f32 K tiles)",
            cfg: c(64, 64, 3).with_padding(1, 1).with_bias(true),
            shape: shape(1, 9, 10),
        },
        Case {
            name: "3x3 s2 p1 32→72 groups 2 + bias (Cg 16, Og 36: ragged channel tile, f16 element stores)",
            cfg: c(32, 72, 3)
                .with_stride(2, 2)
                .with_padding(1, 1)
                .with_groups(2)
                .with_bias(true),
            shape: shape(2, 11, 13),
        },
        Case {
            name: "3x3 d2 p2 16→128 (two channel tiles, dilation)",
            cfg: c(16, 128, 3).with_dilation(2, 2).with_padding(2, 2),
            shape: shape(1, 7, 12),
        },
        Case {
            name: "5x5 s2 p2 12→20 groups 4 + bias (Cg 3: element gathers, K 75)",
            cfg: c(12, 20, 5)
                .with_stride(2, 2)
                .with_padding(2, 2)
                .with_groups(4)
                .with_bias(true),
            shape: shape(2, 9, 8),
        },
        Case {
            name: "depthwise 3x3 p1 24→24 groups 24 (Cg 1, K 9)",
            cfg: c(24, 24, 3).with_groups(24).with_padding(1, 1),
            shape: shape(1, 7, 6),
        },
        Case {
            name: "3x3 p1 136→24 (backward-data: three input-channel tiles, Cg 136)",
            cfg: c(136, 24, 3).with_padding(1, 1),
            shape: shape(1, 5, 6),
        },
        Case {
            name: "1x1 s2 40→8 (K 40: a partial K tile, 3 pixel tiles)",
            cfg: c(40, 8, 1).with_stride(2, 2),
            shape: shape(3, 15, 17),
        },
        Case {
            name: "2x4 s(1, 2) p1 d(2, 1) 8→16 groups 2 (Cg 4) + bias",
            cfg: c(8, 16, 1)
                .with_kernel(2, 4)
                .with_stride(1, 2)
                .with_padding(1, 1)
                .with_dilation(2, 1)
                .with_groups(2)
                .with_bias(true),
            shape: shape(2, 6, 9),
        },
    ]
}

/// Seeded random shapes with 1, 2, 3, 4, 8 or 16 channels per group on each side.
fn fuzz_cases(seed: u64, count: usize) -> Vec<Case> {
    fuzz_cases_with(seed, count, &[1, 2, 3, 4, 8, 16])
}

/// `case` in NHWC with `dtype` on `arch` (and a bias when `bias`), a config without
/// tensor-core entries: the config, its label, module and checked dimensions.
fn nhwc(
    case: &Case,
    dtype: DType,
    arch: Arch,
    bias: bool,
) -> (Conv2dConfig, String, String, ConvDims) {
    let cfg = Conv2dConfig {
        dtype,
        arch,
        bias,
        ..case.cfg.with_layout(Layout::Nhwc)
    };
    assert!(!cfg.has_tensor_core_forward(), "{}", case.name);
    assert!(!cfg.has_tensor_core_backward_data(), "{}", case.name);
    let (label, ptx, dims) = prepare(case, &cfg);
    (cfg, label, ptx, dims)
}

/// Runs `case` in NHWC with `dtype` on `arch` through `conv2d_nhwc` and through `forward`
/// (which must pick it), each against the reference. Returns the two launches' records.
fn run<T: HostFloat + Element>(
    case: &Case,
    dtype: DType,
    arch: Arch,
    seed: u64,
) -> Vec<LaunchRecord> {
    let (cfg, label, ptx, dims) = nhwc(case, dtype, arch, case.cfg.bias);
    let s = &case.shape;
    let problem = NhwcForward::new::<T>(&cfg, s, &dims, seed);
    let dev = SimBackend::new();
    let upload = |v: &[f64]| dev.upload(&from_f64::<T>(v)).expect("upload");
    let (x, w, b) = (
        upload(&problem.x),
        upload(&problem.w),
        upload(&problem.bias),
    );
    let want = &problem.want;
    let bias = cfg.bias.then_some(&b);
    let mut y = dev.alloc::<T>(dims.output_len(&cfg)).expect("alloc");
    must(
        &label,
        forward_nhwc(&cfg, &dev, &ptx, s, &x, &w, bias, &mut y),
    );
    let tol = tolerance(dtype);
    assert_close(&label, &download(&dev, &y), want, tol);
    let mut y = dev.alloc::<T>(dims.output_len(&cfg)).expect("alloc");
    must(&label, forward(&cfg, &dev, &ptx, s, &x, &w, bias, &mut y));
    assert_close(&format!("{label}: forward"), &download(&dev, &y), want, tol);
    let log = dev.take_launch_log();
    assert!(log.iter().all(|r| r.entry == ENTRY_NHWC), "{label}");
    log
}

/// Backward-data of `case` in NHWC with `dtype` on `arch` through `backward_data` (which
/// must pick the tiled `conv2d_bwd_data`) against the reference. Returns its launch record.
fn run_backward_data<T: HostFloat + Element>(
    case: &Case,
    dtype: DType,
    arch: Arch,
    seed: u64,
) -> Vec<LaunchRecord> {
    let (cfg, label, ptx, dims) = nhwc(case, dtype, arch, false);
    let s = &case.shape;
    let mut rng = SplitMix64::new(seed);
    let round = |v: Vec<f64>| to_f64(&from_f64::<T>(&v));
    let gy = round(rng.vec_f64(dims.output_len(&cfg), -1.0, 1.0));
    let w = round(rng.vec_f64(ConvDims::weight_len(&cfg), -1.0, 1.0));
    let want = reference::backward_data(&cfg, s, &gy, &w).expect("reference");
    let (n, c_in, c_out) = (
        s.batch as usize,
        cfg.in_channels as usize,
        cfg.out_channels as usize,
    );
    let (kh, kw) = (cfg.kernel_h as usize, cfg.kernel_w as usize);
    let (oh, ow) = (dims.out_h as usize, dims.out_w as usize);
    let gy = to_channels_last(&gy, [n, c_out, oh, ow]);
    let w = to_channels_last(&w, [c_out, c_in / cfg.groups as usize, kh, kw]);
    let want = to_channels_last(&want, [n, c_in, s.height as usize, s.width as usize]);
    let dev = SimBackend::new();
    let gy = dev.upload(&from_f64::<T>(&gy)).expect("upload");
    let w = dev.upload(&from_f64::<T>(&w)).expect("upload");
    let mut dx = dev.alloc::<T>(dims.input_len(&cfg)).expect("alloc");
    must(&label, backward_data(&cfg, &dev, &ptx, s, &gy, &w, &mut dx));
    assert_close(&label, &download(&dev, &dx), &want, tolerance(dtype));
    let log = dev.take_launch_log();
    assert!(log.iter().all(|r| r.entry == ENTRY_BWD_DATA), "{label}");
    log
}

/// Every case, forward and backward-data, in the four (dtype, target) pairs the CUDA-core
/// NHWC path serves.
fn run_every_dtype(cases: &[Case], seed: u64) {
    for (i, case) in cases.iter().enumerate() {
        let seed = seed + i as u64;
        run::<f16>(case, DType::F16, Arch::Sm70, seed);
        run::<f32>(case, DType::F32, Arch::Sm70, seed);
        run::<f32>(case, DType::F32, Arch::Sm80, seed);
        run::<f64>(case, DType::F64, Arch::Sm80, seed);
        run_backward_data::<f16>(case, DType::F16, Arch::Sm70, seed);
        run_backward_data::<f32>(case, DType::F32, Arch::Sm70, seed);
        run_backward_data::<f32>(case, DType::F32, Arch::Sm80, seed);
        run_backward_data::<f64>(case, DType::F64, Arch::Sm80, seed);
    }
}

#[test]
fn fixed_shapes_every_dtype() {
    run_every_dtype(&fixed_cases(), 11);
}

#[test]
fn fuzzed_shapes_every_dtype() {
    run_every_dtype(&fuzz_cases(77, 10), 500);
}

/// The one-thread-per-output kernels' thread instructions per output on the families shape
/// (BENCHMARKS.md before the tiling) and the factor the tiled ones must beat them by:
/// forward 10×; backward-data 7× (its reduction is `KH·KW·C_out` = 576 FMAs per output, more
/// than a tenth of 5568.8 on its own).
const UNTILED_INSTRUCTIONS_PER_OUTPUT: [(f64, f64); 2] = [(7618.6, 10.0), (5568.8, 7.0)];

/// The families benchmark shape: 3×3 64→64, padding 1, batch 1, 16×16.
fn families_case() -> Case {
    Case {
        name: "families 3x3 p1 64→64",
        cfg: Conv2dConfig::new(64, 64, 3).with_padding(1, 1),
        shape: shape(1, 16, 16),
    }
}

/// Prints `r`'s figures and holds them to the bars: load efficiency ≥ 0.9, shared wavefronts
/// ≤ 1.1 × the fewest, instructions per output ≤ `untiled / factor`.
fn assert_counters(label: &str, r: &LaunchRecord, outputs: f64, (untiled, factor): (f64, f64)) {
    let c = &r.counters;
    let per_output = c.instructions.total() as f64 / outputs;
    let load = c.global_load_efficiency();
    let smem = c.shared_bank_conflict_factor();
    eprintln!(
        "{label} {}: instr/output {per_output:.1}, global load efficiency {load:.3} ({} \
         requests, {} sectors), shared wavefronts / min {smem:.3} ({} requests)",
        r.entry, c.global_load_requests, c.global_load_sectors, c.shared_requests,
    );
    assert!(load >= 0.9, "{label}: load efficiency {load:.3}");
    assert!(smem <= 1.1, "{label}: shared wavefronts / min {smem:.3}");
    assert!(
        per_output <= untiled / factor,
        "{label}: {per_output:.1} instructions per output"
    );
}

#[test]
fn counters_on_the_families_shape() {
    let case = families_case();
    let outputs = f64::from(16 * 16 * 64);
    let [forward, backward] = UNTILED_INSTRUCTIONS_PER_OUTPUT;
    for (dtype, arch) in [
        (DType::F16, Arch::Sm70),
        (DType::F32, Arch::Sm70),
        (DType::F32, Arch::Sm80),
    ] {
        let label = format!("{dtype} {arch}");
        let (fwd, bwd) = match dtype {
            DType::F16 => (
                run::<f16>(&case, dtype, arch, 3),
                run_backward_data::<f16>(&case, dtype, arch, 3),
            ),
            _ => (
                run::<f32>(&case, dtype, arch, 3),
                run_backward_data::<f32>(&case, dtype, arch, 3),
            ),
        };
        assert_counters(&label, &fwd[0], outputs, forward);
        assert_counters(&label, &bwd[0], outputs, backward);
    }
}
