//! `conv2d_bwd_data` in NCHW (the CUDA-core tiled kernel: the direct forward of the stride-
//! spread `gy` with the flipped filter) in the interpreter, every sanitizer check on (a finding
//! fails the launch and the test), against the f64 host reference over fixed and seeded random
//! shapes: groups, depthwise, strides 2 and 3 (equal and mixed), dilation, padding larger than
//! the dilated kernel's reach (negative flipped padding), ragged channel counts (a second
//! channel block of 1, a second weight chunk), ragged heights and widths (7, 28, 37, several
//! tiles), looped kernel rows and columns; f32 on sm_70 and sm_80, f64, f16 on sm_70, bf16.
//!
//! Counter bars (module `conv_support::bars`): the two BENCHMARKS.md scenarios at a quarter
//! of the per-element kernel's instructions per output, global load efficiency ≥ 0.9 and
//! shared wavefronts ≤ 1.05 × the fewest on widths up to the 32-column tile, stride 2
//! included.
//!
//! Tolerances (module doc of `conv_support`): f32 ≤ 1e-5, f16 ≤ 2e-3, bf16 ≤ 2e-2, f64 ≤
//! 1e-12, relative to the largest reference value.

#![cfg(feature = "sim")]

#[path = "conv_support/bars.rs"]
mod bars;
mod conv_support;

use half::{bf16, f16};
use ptxforge_runtime::dtype::DType;
use ptxforge_runtime::templates::conv::Conv2dConfig;
use ptxforge_runtime::Arch;

use conv_support::{
    fuzz_cases_with, run_backward_data, run_backward_data_every_dtype, shape, Case,
};

/// Fixed shapes: every feature the kernel honours, tiles cut by every edge.
fn fixed_cases() -> Vec<Case> {
    let c = Conv2dConfig::new;
    vec![
        Case {
            name: "3x3 p1 16→16, 32 × 32 (one tile, 16-byte gy chunks)",
            cfg: c(16, 16, 3).with_padding(1, 1),
            shape: shape(1, 32, 32),
        },
        Case {
            name: "3x3 p1 17→5, 40 × 72 (two row and three column tiles, channel blocks 16 + 1)",
            cfg: c(17, 5, 3).with_padding(1, 1),
            shape: shape(2, 40, 72),
        },
        Case {
            name: "3x3 p1 6→5, width 7 (ragged, element by element)",
            cfg: c(6, 5, 3).with_padding(1, 1),
            shape: shape(1, 9, 7),
        },
        Case {
            name: "3x3 p1 6→5, width 28 (gy rows not 16-byte multiples of the tile)",
            cfg: c(6, 5, 3).with_padding(1, 1),
            shape: shape(1, 30, 28),
        },
        Case {
            name: "3x3 s2 p1 groups 2, width 37",
            cfg: c(4, 6, 3)
                .with_stride(2, 2)
                .with_padding(1, 1)
                .with_groups(2),
            shape: shape(1, 35, 37),
        },
        Case {
            name: "3x3 s3 d2 p2 (taps skipped by both phases)",
            cfg: c(4, 6, 3)
                .with_stride(3, 3)
                .with_dilation(2, 2)
                .with_padding(2, 2),
            shape: shape(2, 29, 28),
        },
        Case {
            name: "3x3 s(2,1) p1 (spaced rows, 16-byte columns), width 32",
            cfg: c(4, 4, 3).with_stride(2, 1).with_padding(1, 1),
            shape: shape(1, 17, 32),
        },
        Case {
            name: "5x5 d2 p3, 9 output channels (weight chunks of 6 and 3)",
            cfg: c(5, 9, 5).with_dilation(2, 2).with_padding(3, 3),
            shape: shape(1, 19, 24),
        },
        Case {
            name: "depthwise 3x3 p1 (multiplier 2), width 16",
            cfg: c(8, 16, 3).with_groups(8).with_padding(1, 1),
            shape: shape(2, 20, 16),
        },
        Case {
            name: "1x1 s2 p1 2→150 (negative flipped padding, weight chunks 144 + 6)",
            cfg: c(2, 150, 1).with_stride(2, 2).with_padding(1, 1),
            shape: shape(1, 9, 8),
        },
        Case {
            name: "7x7 s2 p3 stem, rectangular",
            cfg: c(3, 4, 7).with_stride(2, 2).with_padding(3, 3),
            shape: shape(1, 23, 70),
        },
        Case {
            name: "1x70 s(1,2) (looped kernel columns)",
            cfg: c(2, 1, 1).with_kernel(1, 70).with_stride(1, 2),
            shape: shape(1, 2, 75),
        },
        Case {
            name: "9x9 p(1,2) (looped kernel rows)",
            cfg: c(3, 2, 9).with_padding(1, 2),
            shape: shape(1, 10, 11),
        },
    ]
}

#[test]
fn fixed_shapes_every_dtype() {
    run_backward_data_every_dtype(&fixed_cases(), 1);
}

#[test]
fn fuzzed_shapes_every_dtype() {
    run_backward_data_every_dtype(&fuzz_cases_with(0xbacd, 12, &[1, 3, 5, 17]), 200);
}

/// The bars of the module doc on the BENCHMARKS.md scenarios (first two) and further shapes.
#[test]
fn counter_bars() {
    let c = Conv2dConfig::new;
    let cases = [
        // Interpreter-counters table: 22738496 instructions over 16384 outputs, load 0.81.
        (
            DType::F32,
            Arch::Sm80,
            c(16, 16, 3).with_padding(1, 1),
            shape(1, 32, 32),
            Some(22_738_496.0 / 16_384.0 / 4.0),
        ),
        // Families table: 5568.8 instructions per output, load 0.65.
        (
            DType::F16,
            Arch::Sm70,
            c(64, 64, 3).with_padding(1, 1),
            shape(1, 16, 16),
            Some(5568.8 / 4.0),
        ),
        (
            DType::F64,
            Arch::Sm80,
            c(8, 4, 5).with_padding(2, 2),
            shape(1, 16, 8),
            None,
        ),
        (
            DType::BF16,
            Arch::Sm80,
            c(8, 24, 3).with_padding(1, 1),
            shape(2, 24, 32),
            None,
        ),
        (
            DType::F32,
            Arch::Sm80,
            c(8, 8, 3).with_groups(8).with_padding(1, 1),
            shape(1, 32, 32),
            None,
        ),
        // Spread `gy` columns: element by element from a grid on two sectors.
        (
            DType::F32,
            Arch::Sm80,
            c(3, 8, 7).with_stride(2, 2).with_padding(3, 3),
            shape(1, 32, 32),
            None,
        ),
        (
            DType::F32,
            Arch::Sm70,
            c(16, 16, 3).with_stride(2, 2).with_padding(1, 1),
            shape(1, 32, 32),
            None,
        ),
    ];
    for (i, (dtype, arch, cfg, s, instruction_bar)) in cases.into_iter().enumerate() {
        let case = Case {
            name: "bars",
            cfg,
            shape: s,
        };
        let r = match dtype {
            DType::F32 => run_backward_data::<f32>(&case, dtype, arch, i as u64),
            DType::F64 => run_backward_data::<f64>(&case, dtype, arch, i as u64),
            DType::F16 => run_backward_data::<f16>(&case, dtype, arch, i as u64),
            DType::BF16 => run_backward_data::<bf16>(&case, dtype, arch, i as u64),
        };
        let dims = cfg.check_shape(&s, false).expect("valid");
        let label = format!(
            "{dtype} {arch} {}->{} k{} g{} {}x{}",
            cfg.in_channels, cfg.out_channels, cfg.kernel_h, cfg.groups, s.height, s.width
        );
        bars::check(&label, &r, dims.input_len(&cfg) as u64, instruction_bar);
    }
}
