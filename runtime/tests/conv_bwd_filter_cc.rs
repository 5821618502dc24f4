//! The tiled CUDA-core weight gradient `conv2d_bwd_filter` (and `conv2d_bwd_bias` beside it) in
//! the interpreter, every sanitizer check on (`SimBackend::new`: a finding fails the launch
//! and the test), against the f64 host reference (NHWC: inputs and expected `dw` transposed
//! to channels-last), in both layouts, over fixed and seeded random shapes: groups, stride 2,
//! dilation, padding, several output-channel and filter-row tiles with ragged edges, `Og` and
//! `Cg` that are and are not multiples of the 16-byte chunk (NHWC vector and element
//! gathers), pixel counts that are not multiples of the 32- (16-) pixel reduction tile and
//! tiles that span two images; f16, bf16 and f32 on sm_70, f32 and f64 on sm_80. Tolerances as
//! in `conv_support` (f32 ≤ 1e-5, f16 ≤ 2e-3, bf16 ≤ 2e-2, f64 ≤ 1e-12 relative to the largest
//! output).
//!
//! Its counters on the families benchmark shape (3×3 64→64, 16×16, padding 1, batch 1; f16 on
//! sm_70 and f32): thread instructions per `dw` element at most a tenth of the
//! warp-per-element kernel's 9725.2 (BENCHMARKS.md before the tiling), global load
//! efficiency ≥ 0.9 and shared wavefronts ≤ 1.05 × the fewest the requests could take, in
//! both layouts.

#![cfg(feature = "sim")]

mod conv_support;

use half::{bf16, f16};
use ptxforge_runtime::dtype::DType;
use ptxforge_runtime::launch::{Backend, Element, LaunchRecord, SimBackend};
use ptxforge_runtime::templates::conv::kernels::ENTRY_BWD_FILTER;
use ptxforge_runtime::templates::conv::launch::backward_filter_with;
use ptxforge_runtime::templates::conv::reference::{self, to_channels_last};
use ptxforge_runtime::templates::conv::{Conv2dConfig, ConvDims, Layout};
use ptxforge_runtime::templates::testing::{from_f64, to_f64, HostFloat, SplitMix64};
use ptxforge_runtime::Arch;

use conv_support::{
    assert_close, backward_filter_cases, bias_entries, download, fuzz_cases_with, must, prepare,
    shape, tolerance, Case,
};

/// Fixed shapes beside [`backward_filter_cases`]. Chunks: 8 halves, 4 f32, 2 f64.
fn fixed_cases() -> Vec<Case> {
    let c = Conv2dConfig::new;
    let mut cases = vec![
        Case {
            name: "3x3 p1 64→64 batch 2 (vector NHWC loads, 9 row tiles, tiles across images)",
            cfg: c(64, 64, 3).with_padding(1, 1),
            shape: shape(2, 9, 10),
        },
        Case {
            name:
                "3x3 s2 p(1, 0) 48→40 groups 2 + bias (Cg 24, Og 20: f16 element gy, 4 row tiles)",
            cfg: c(48, 40, 3)
                .with_groups(2)
                .with_stride(2, 2)
                .with_padding(1, 0)
                .with_bias(true),
            shape: shape(2, 12, 11),
        },
        Case {
            name: "5x5 p2 12→20 groups 4 (Cg 3, Og 5: element gathers, 75 filter rows)",
            cfg: c(12, 20, 5).with_padding(2, 2).with_groups(4),
            shape: shape(1, 6, 7),
        },
        Case {
            name: "depthwise 3x3 d2 p2 24→24 groups 24",
            cfg: c(24, 24, 3)
                .with_dilation(2, 2)
                .with_padding(2, 2)
                .with_groups(24),
            shape: shape(2, 8, 7),
        },
        Case {
            name: "1x1 s2 16→136 (three output-channel tiles, 16 filter rows)",
            cfg: c(16, 136, 1).with_stride(2, 2),
            shape: shape(1, 9, 12),
        },
    ];
    cases.extend(backward_filter_cases());
    cases
}

/// Seeded random shapes with 1, 2, 3, 4, 8 or 16 channels per group on each side.
fn fuzz_cases(seed: u64, count: usize) -> Vec<Case> {
    fuzz_cases_with(seed, count, &[1, 2, 3, 4, 8, 16])
}

/// `conv2d_bwd_filter` (then `conv2d_bwd_bias` where the case has a bias) of `case` in
/// `layout` with `dtype` on `arch`, `dw` and `db` against the reference. Returns the weight
/// gradient's launch record.
fn run<T: HostFloat + Element>(
    case: &Case,
    layout: Layout,
    dtype: DType,
    arch: Arch,
    seed: u64,
) -> LaunchRecord {
    let cfg = Conv2dConfig {
        dtype,
        arch,
        ..case.cfg.with_layout(layout)
    };
    let (label, ptx, dims) = prepare(case, &cfg);
    let s = &case.shape;
    let mut rng = SplitMix64::new(seed);
    let round = |v: Vec<f64>| to_f64(&from_f64::<T>(&v));
    let x = round(rng.vec_f64(dims.input_len(&cfg), -1.0, 1.0));
    let gy = round(rng.vec_f64(dims.output_len(&cfg), -1.0, 1.0));
    let (want_dw, want_db) = reference::backward_filter(&cfg, s, &x, &gy).expect("reference");
    let (x, gy, want_dw) = match layout {
        Layout::Nchw => (x, gy, want_dw),
        Layout::Nhwc => {
            let (n, c_in, c_out) = (
                s.batch as usize,
                cfg.in_channels as usize,
                cfg.out_channels as usize,
            );
            let (kh, kw) = (cfg.kernel_h as usize, cfg.kernel_w as usize);
            let (oh, ow) = (dims.out_h as usize, dims.out_w as usize);
            let cg = c_in / cfg.groups as usize;
            (
                to_channels_last(&x, [n, c_in, s.height as usize, s.width as usize]),
                to_channels_last(&gy, [n, c_out, oh, ow]),
                to_channels_last(&want_dw, [c_out, cg, kh, kw]),
            )
        }
    };
    let dev = SimBackend::new();
    let x = dev.upload(&from_f64::<T>(&x)).expect("upload");
    let gy = dev.upload(&from_f64::<T>(&gy)).expect("upload");
    let mut dw = dev.alloc::<T>(ConvDims::weight_len(&cfg)).expect("alloc");
    let mut db = dev.alloc::<T>(cfg.out_channels as usize).expect("alloc");
    let db_arg = cfg.bias.then_some(&mut db);
    must(
        &label,
        backward_filter_with(
            &cfg,
            &dev,
            &ptx,
            s,
            ENTRY_BWD_FILTER,
            &x,
            &gy,
            &mut dw,
            db_arg,
        ),
    );
    let tol = tolerance(dtype);
    assert_close(&format!("{label}: dw"), &download(&dev, &dw), &want_dw, tol);
    if let Some(want_db) = want_db {
        assert_close(&format!("{label}: db"), &download(&dev, &db), &want_db, tol);
    }
    let mut log = dev.take_launch_log();
    let entries: Vec<&str> = log.iter().map(|r| r.entry.as_str()).collect();
    let mut expected = vec![ENTRY_BWD_FILTER];
    expected.extend(bias_entries(&cfg, s));
    assert_eq!(entries, expected, "{label}");
    log.swap_remove(0)
}

/// Every case in both layouts and the five (dtype, target) pairs.
fn run_every_dtype(cases: &[Case], seed: u64) {
    for (i, case) in cases.iter().enumerate() {
        let seed = seed + i as u64;
        for layout in Layout::ALL {
            run::<f16>(case, layout, DType::F16, Arch::Sm70, seed);
            run::<bf16>(case, layout, DType::BF16, Arch::Sm70, seed);
            run::<f32>(case, layout, DType::F32, Arch::Sm70, seed);
            run::<f32>(case, layout, DType::F32, Arch::Sm80, seed);
            run::<f64>(case, layout, DType::F64, Arch::Sm80, seed);
        }
    }
}

#[test]
fn fixed_shapes_every_dtype() {
    run_every_dtype(&fixed_cases(), 31);
}

#[test]
fn fuzzed_shapes_every_dtype() {
    run_every_dtype(&fuzz_cases(4242, 10), 900);
}

/// Thread instructions per `dw` element of the warp-per-element kernel on the families shape
/// (BENCHMARKS.md, both layouts, before the tiling); the tiled kernel must do 10× better.
const UNTILED_INSTRUCTIONS_PER_OUTPUT: f64 = 9725.2;

#[test]
fn counters_on_the_families_shape() {
    let case = Case {
        name: "families 3x3 p1 64→64",
        cfg: Conv2dConfig::new(64, 64, 3).with_padding(1, 1),
        shape: shape(1, 16, 16),
    };
    let outputs = f64::from(64 * 64 * 9);
    for layout in Layout::ALL {
        for (dtype, arch) in [
            (DType::F16, Arch::Sm70),
            (DType::F32, Arch::Sm70),
            (DType::F64, Arch::Sm80),
        ] {
            let r = match dtype {
                DType::F16 => run::<f16>(&case, layout, dtype, arch, 3),
                DType::F32 => run::<f32>(&case, layout, dtype, arch, 3),
                _ => run::<f64>(&case, layout, dtype, arch, 3),
            };
            let label = format!("{layout} {dtype} {arch}");
            let c = &r.counters;
            let per_output = c.instructions.total() as f64 / outputs;
            let load = c.global_load_efficiency();
            let smem = c.shared_bank_conflict_factor();
            eprintln!(
                "{label}: instr/output {per_output:.1}, global load efficiency {load:.3} ({} \
                 requests, {} sectors), shared wavefronts / min {smem:.3} ({} requests)",
                c.global_load_requests, c.global_load_sectors, c.shared_requests,
            );
            assert!(load >= 0.9, "{label}: load efficiency {load:.3}");
            assert!(smem <= 1.05, "{label}: shared wavefronts / min {smem:.3}");
            assert!(
                per_output <= UNTILED_INSTRUCTIONS_PER_OUTPUT / 10.0,
                "{label}: {per_output:.1} instructions per output"
            );
        }
    }
}
