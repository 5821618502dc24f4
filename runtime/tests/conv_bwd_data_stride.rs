//! `conv2d_bwd_data` (NCHW, CUDA cores) at strides above 1, where it runs one block per
//! stride phase of `dx` on the dense `gy` with that phase's taps only (module doc of the
//! kernel): in the interpreter with every sanitizer check on, against the f64 host reference
//! over fixed and seeded random shapes with strides 2 and 3 (equal and mixed), odd sizes,
//! padding 0, 1 and 2, dilation 2 (phases without taps: `dx` there is 0 and must be written),
//! groups and depthwise; f32 on sm_80 and sm_70, f64, f16 on sm_70, bf16.
//!
//! Counter bars on a stride-2 3 × 3 padding-1 layer (64 → 64 channels, f32 on sm_70), against
//! the spread-`gy` kernel's instructions per `dx` element (it multiplied the three zeros of
//! every four staged positions): on 16 × 16 `dx` below 70 % of them (the phases' 8 × 8 grids
//! fill a quarter of the 32 × 32 tile, so the staging, not the multiply-adds, is most of what
//! remains) with global loads at least 0.9 efficient; on 56 × 56 below 35 %, with
//! `conv_support::bars`' load and shared-wavefront bars. Further layers (f16, 1 × 1 stride 2,
//! stride 3, dilation 2) print their figures only.
//!
//! Tolerances (module doc of `conv_support`): f32 ≤ 1e-5, f16 ≤ 2e-3, bf16 ≤ 2e-2, f64 ≤
//! 1e-12.

#![cfg(feature = "sim")]

#[path = "conv_support/bars.rs"]
mod bars;
mod conv_support;

use half::f16;
use ptxforge_runtime::dtype::DType;
use ptxforge_runtime::launch::LaunchRecord;
use ptxforge_runtime::templates::conv::Conv2dConfig;
use ptxforge_runtime::Arch;

use conv_support::{
    fuzz_cases_with, run_backward_data, run_backward_data_every_dtype, shape, Case,
};

/// Fixed strided shapes: every phase pattern the decomposition has.
fn fixed_cases() -> Vec<Case> {
    let c = Conv2dConfig::new;
    vec![
        Case {
            name: "3x3 s2 p1 5→7, 17 × 19 (odd sizes, phases of 4, 2, 2 and 1 taps)",
            cfg: c(5, 7, 3).with_stride(2, 2).with_padding(1, 1),
            shape: shape(2, 17, 19),
        },
        Case {
            name: "3x3 s2 p0, 16 × 15",
            cfg: c(3, 4, 3).with_stride(2, 2),
            shape: shape(1, 16, 15),
        },
        Case {
            name: "1x1 s2 p0 (three phases without taps: zeros)",
            cfg: c(6, 5, 1).with_stride(2, 2),
            shape: shape(1, 13, 14),
        },
        Case {
            name: "3x3 s2 d2 p2 (stride and dilation share 2: odd phases without taps)",
            cfg: c(4, 3, 3)
                .with_stride(2, 2)
                .with_dilation(2, 2)
                .with_padding(2, 2),
            shape: shape(1, 21, 18),
        },
        Case {
            name: "3x3 s3 p1 groups 2, 70 wide (several column tiles per phase)",
            cfg: c(4, 6, 3)
                .with_stride(3, 3)
                .with_padding(1, 1)
                .with_groups(2),
            shape: shape(1, 11, 70),
        },
        Case {
            name: "5x5 s(3,2) p(2,1) (mixed strides, a phase of 2 rows × 3 columns)",
            cfg: c(3, 5, 5).with_stride(3, 2).with_padding(2, 1),
            shape: shape(1, 23, 20),
        },
        Case {
            name: "depthwise 3x3 s2 p1, 35 × 67 (several tiles, 17 × 34 phase grid)",
            cfg: c(8, 8, 3)
                .with_groups(8)
                .with_stride(2, 2)
                .with_padding(1, 1),
            shape: shape(1, 35, 67),
        },
        Case {
            name: "4x4 s2 p2 d(1,2) 17→3 (channel blocks 16 + 1)",
            cfg: c(17, 3, 4)
                .with_stride(2, 2)
                .with_padding(2, 2)
                .with_dilation(1, 2),
            shape: shape(1, 9, 12),
        },
        Case {
            name: "7x7 s2 p3 stem 3→64 (weight chunks of 3 output channels)",
            cfg: c(3, 64, 7).with_stride(2, 2).with_padding(3, 3),
            shape: shape(1, 20, 21),
        },
        Case {
            name: "17x17 s2 p8 (phases of 81, 72 and 64 taps: looped rows past 64)",
            cfg: c(2, 3, 17).with_stride(2, 2).with_padding(8, 8),
            shape: shape(1, 20, 19),
        },
        Case {
            name: "9x9 s2 p1 (phases of 25, 20, 20 and 16 taps)",
            cfg: c(2, 3, 9).with_stride(2, 2).with_padding(1, 1),
            shape: shape(1, 12, 13),
        },
        Case {
            name: "2x2 s3 p0 (kernel smaller than the stride: five phases without taps)",
            cfg: c(3, 2, 2).with_stride(3, 3),
            shape: shape(2, 10, 11),
        },
    ]
}

#[test]
fn fixed_strided_shapes() {
    run_backward_data_every_dtype(&fixed_cases(), 7);
}

#[test]
fn fuzzed_strided_shapes() {
    let strided: Vec<Case> = fuzz_cases_with(0x5717de, 40, &[1, 2, 5, 17])
        .into_iter()
        .filter(|case| case.cfg.stride_h * case.cfg.stride_w > 1)
        .take(14)
        .collect();
    assert!(strided.len() >= 10, "{} strided cases", strided.len());
    run_backward_data_every_dtype(&strided, 300);
}

/// Runs `case` in `dtype` on sm_70, prints its counter figures (and the instructions by
/// class) and returns the record and the instructions per `dx` element.
fn measure(label: &str, case: &Case, dtype: DType) -> (LaunchRecord, f64) {
    let r = match dtype {
        DType::F16 => run_backward_data::<f16>(case, dtype, Arch::Sm70, 11),
        _ => run_backward_data::<f32>(case, dtype, Arch::Sm70, 11),
    };
    let dims = case.cfg.check_shape(&case.shape, false).expect("valid");
    let per_output = bars::report(label, &r, dims.input_len(&case.cfg) as u64);
    eprintln!("  {:?}", r.counters.instructions);
    (r, per_output)
}

/// The instructions per `dx` element of the spread-`gy` kernel (before the phase
/// decomposition) on the stride-2 3 × 3 64 → 64 layer below, f32 on sm_70: `dx` 16 × 16 and
/// 56 × 56.
const SPREAD_INSTRUCTIONS_PER_OUTPUT: [f64; 2] = [1711.1, 1162.5];

#[test]
fn stride_two_counters() {
    let c = Conv2dConfig::new;
    let layer = Case {
        name: "3x3 s2 p1 64→64",
        cfg: c(64, 64, 3).with_stride(2, 2).with_padding(1, 1),
        shape: shape(1, 16, 16),
    };
    let label = "f32 sm_70 3x3 s2 p1 64→64 16x16";
    let (r, per_output) = measure(label, &layer, DType::F32);
    let bar = 0.7 * SPREAD_INSTRUCTIONS_PER_OUTPUT[0];
    assert!(
        per_output <= bar,
        "{label}: {per_output:.1} instructions per output > {bar:.1}"
    );
    let load = r.counters.global_load_efficiency();
    assert!(
        load >= bars::LOAD_FLOOR,
        "{label}: load efficiency {load:.3}"
    );
    measure("f16 sm_70 3x3 s2 p1 64→64 16x16", &layer, DType::F16);
    // ResNet's size: 28 × 28 phase grids nearly fill the 32 × 32 tiles.
    let resnet = Case {
        shape: shape(1, 56, 56),
        ..layer
    };
    let label = "f32 sm_70 3x3 s2 p1 64→64 56x56";
    let r = run_backward_data::<f32>(&resnet, DType::F32, Arch::Sm70, 11);
    let dx = resnet.cfg.check_shape(&resnet.shape, false).expect("valid");
    let bar = 0.35 * SPREAD_INSTRUCTIONS_PER_OUTPUT[1];
    bars::check(label, &r, dx.input_len(&resnet.cfg) as u64, Some(bar));
    let others = [
        (
            "f32 sm_70 1x1 s2 64→64 16x16",
            c(64, 64, 1).with_stride(2, 2),
        ),
        (
            "f32 sm_70 3x3 s3 p1 64→64 16x16",
            c(64, 64, 3).with_stride(3, 3).with_padding(1, 1),
        ),
        (
            "f32 sm_70 3x3 s2 d2 p2 64→64 16x16",
            c(64, 64, 3)
                .with_stride(2, 2)
                .with_dilation(2, 2)
                .with_padding(2, 2),
        ),
    ];
    for (label, cfg) in others {
        let case = Case {
            name: label,
            cfg,
            shape: shape(1, 16, 16),
        };
        measure(label, &case, DType::F32);
    }
}
