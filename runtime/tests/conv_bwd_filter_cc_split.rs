//! The split CUDA-core weight gradient (`conv2d_bwd_filter_split` into partials of the
//! accumulation type, then `conv2d_bwd_filter_reduce` in slice order) in the interpreter with
//! every sanitizer check on, against the f64 host reference (NHWC: inputs and expected `dw`
//! transposed to channels-last): forced slice counts 1, 2, 3 and 7 (7 leaves empty trailing
//! slices on the short cases) and `Slices::Auto`, over fixed and seeded random shapes
//! (groups, stride, dilation, padding, ragged pixel counts, tiles across images), both
//! layouts, f16, bf16 and f32 on sm_70, f32 and f64 on sm_80, within the family's tolerances
//! (f32 ≤ 1e-5, f16 ≤ 2e-3, bf16 ≤ 2e-2, f64 ≤ 1e-12 relative to the largest output); the
//! same bits under shuffled block orders; the slice rule's grids at the families shape and
//! at ResNet-50's 3×3 128→128 layer, 28×28, batch 32; and the counters of a split.

#![cfg(feature = "sim")]

mod conv_support;

use half::{bf16, f16};
use ptxforge_runtime::dtype::DType;
use ptxforge_runtime::launch::{Backend, Element, LaunchRecord, SimBackend};
use ptxforge_runtime::templates::conv::kernels::{
    ENTRY_BWD_FILTER, ENTRY_BWD_FILTER_CUDA_SPLIT, ENTRY_BWD_FILTER_REDUCE,
};
use ptxforge_runtime::templates::conv::launch::{
    backward_filter_cuda_core_sliced, backward_filter_with, Slices,
};
use ptxforge_runtime::templates::conv::reference::{self, to_channels_last};
use ptxforge_runtime::templates::conv::{Conv2dConfig, ConvDims, Layout};
use ptxforge_runtime::templates::testing::{from_f64, to_f64, HostFloat, SplitMix64};
use ptxforge_runtime::Arch;

use conv_support::{
    assert_close, assert_same_bits_under_shuffles, backward_filter_cases, bias_entries, download,
    fuzz_cases_with, must, prepare, rotate_slices, shape, tolerance, Case,
};

/// The (dtype, target) pairs of the CUDA-core path.
const TARGETS: [(DType, Arch); 5] = [
    (DType::F16, Arch::Sm70),
    (DType::BF16, Arch::Sm70),
    (DType::F32, Arch::Sm70),
    (DType::F32, Arch::Sm80),
    (DType::F64, Arch::Sm80),
];

/// Forced slice counts, then the rule.
const SLICES: [Slices; 5] = [
    Slices::Exactly(1),
    Slices::Exactly(2),
    Slices::Exactly(3),
    Slices::Exactly(7),
    Slices::Auto,
];

/// A small layer whose rule splits: 1 block, `2·24·24 = 1152` pixels = 36 tiles of 32 (72 of
/// 16 for f64), so `S = min(264, ⌊36 / 16⌋) = 2` (f64: 4).
fn auto_splitting_case() -> Case {
    Case {
        name: "3x3 4→4 26×26 batch 2 (Auto splits)",
        cfg: Conv2dConfig::new(4, 4, 3),
        shape: shape(2, 26, 26),
    }
}

fn cases() -> Vec<Case> {
    let mut cases = backward_filter_cases();
    cases.push(Case {
        name: "3x3 p1 64→64 batch 2 (NHWC vector loads, 9 row tiles)",
        cfg: Conv2dConfig::new(64, 64, 3).with_padding(1, 1),
        shape: shape(2, 9, 10),
    });
    cases.push(auto_splitting_case());
    cases.extend(fuzz_cases_with(7070, 4, &[1, 2, 3, 4, 8, 16]));
    cases
}

/// One run of the CUDA-core backward-filter.
struct Run<'a> {
    case: &'a Case,
    cfg: Conv2dConfig,
    slices: Slices,
    options: ptxforge_sim::Options,
}

impl Run<'_> {
    /// Runs with `slices` on inputs drawn from `seed`, checks `dw` (and `db`) against the
    /// reference and the entries launched; returns `dw` and the launch log.
    fn check<T: HostFloat + Element>(&self, seed: u64) -> (Vec<T>, Vec<LaunchRecord>) {
        let (cfg, case) = (&self.cfg, self.case);
        let (label, ptx, dims) = prepare(case, cfg);
        let s = &case.shape;
        let mut rng = SplitMix64::new(seed);
        let round = |v: Vec<f64>| to_f64(&from_f64::<T>(&v));
        let x = round(rng.vec_f64(dims.input_len(cfg), -1.0, 1.0));
        let gy = round(rng.vec_f64(dims.output_len(cfg), -1.0, 1.0));
        let (want_dw, want_db) = reference::backward_filter(cfg, s, &x, &gy).expect("reference");
        let (x, gy, want_dw) = match cfg.layout {
            Layout::Nchw => (x, gy, want_dw),
            Layout::Nhwc => {
                let (n, c_in, c_out) = (s.batch, cfg.in_channels, cfg.out_channels);
                let [n, c_in, c_out, h, w, oh, ow, cg, kh, kw] = [
                    n,
                    c_in,
                    c_out,
                    s.height,
                    s.width,
                    dims.out_h,
                    dims.out_w,
                    cfg.in_per_group(),
                    cfg.kernel_h,
                    cfg.kernel_w,
                ]
                .map(|v| v as usize);
                (
                    to_channels_last(&x, [n, c_in, h, w]),
                    to_channels_last(&gy, [n, c_out, oh, ow]),
                    to_channels_last(&want_dw, [c_out, cg, kh, kw]),
                )
            }
        };
        let dev = SimBackend::with_options(self.options.clone());
        let x = dev.upload(&from_f64::<T>(&x)).expect("upload");
        let gy = dev.upload(&from_f64::<T>(&gy)).expect("upload");
        let mut dw = dev.alloc::<T>(ConvDims::weight_len(cfg)).expect("alloc");
        let mut db = dev.alloc::<T>(cfg.out_channels as usize).expect("alloc");
        let db_arg = cfg.bias.then_some(&mut db);
        let result = match self.slices {
            // `Auto` through the entry-naming launch, as a caller gets it.
            Slices::Auto => backward_filter_with(
                cfg,
                &dev,
                &ptx,
                s,
                ENTRY_BWD_FILTER,
                &x,
                &gy,
                &mut dw,
                db_arg,
            ),
            forced => backward_filter_cuda_core_sliced(
                cfg, &dev, &ptx, s, forced, &x, &gy, &mut dw, db_arg,
            ),
        };
        let label = format!("{label} {:?}", self.slices);
        must(&label, result);
        let tol = tolerance(cfg.dtype);
        assert_close(&format!("{label}: dw"), &download(&dev, &dw), &want_dw, tol);
        if let Some(want_db) = want_db {
            assert_close(&format!("{label}: db"), &download(&dev, &db), &want_db, tol);
        }
        let log = dev.take_launch_log();
        let entries: Vec<&str> = log.iter().map(|r| r.entry.as_str()).collect();
        let slices = match self.slices {
            Slices::Auto => cfg.backward_filter_cuda_core_slices(&dims),
            Slices::Exactly(s) => s,
        };
        let mut expected = match slices {
            1 => vec![ENTRY_BWD_FILTER],
            _ => vec![ENTRY_BWD_FILTER_CUDA_SPLIT, ENTRY_BWD_FILTER_REDUCE],
        };
        expected.extend(bias_entries(cfg, s));
        assert_eq!(entries, expected, "{label}");
        (dev.download(&dw).expect("download"), log)
    }
}

/// `dw`'s bits of `case` in `layout` with `dtype` on `arch` and `slices`.
fn run(
    case: &Case,
    layout: Layout,
    (dtype, arch): (DType, Arch),
    slices: Slices,
    options: ptxforge_sim::Options,
    seed: u64,
) -> (Vec<u64>, Vec<LaunchRecord>) {
    let run = Run {
        case,
        cfg: Conv2dConfig {
            dtype,
            arch,
            ..case.cfg.with_layout(layout)
        },
        slices,
        options,
    };
    fn bits<T: Copy>(v: &[T], f: impl Fn(T) -> u64) -> Vec<u64> {
        v.iter().map(|&x| f(x)).collect()
    }
    match dtype {
        DType::F16 => {
            let (dw, log) = run.check::<f16>(seed);
            (bits(&dw, |v| u64::from(v.to_bits())), log)
        }
        DType::BF16 => {
            let (dw, log) = run.check::<bf16>(seed);
            (bits(&dw, |v| u64::from(v.to_bits())), log)
        }
        DType::F32 => {
            let (dw, log) = run.check::<f32>(seed);
            (bits(&dw, |v| u64::from(v.to_bits())), log)
        }
        DType::F64 => {
            let (dw, log) = run.check::<f64>(seed);
            (bits(&dw, f64::to_bits), log)
        }
    }
}

/// Every case in both layouts on every target, the slice count rotating through [`SLICES`]
/// (each target meets every slice count over the cases: one run per combination would take
/// minutes).
#[test]
fn every_slice_count_matches_the_reference() {
    rotate_slices(
        &cases(),
        &TARGETS,
        &SLICES,
        500,
        |case, layout, target, slices, seed| {
            let options = ptxforge_sim::Options::default();
            run(case, layout, target, slices, options, seed);
        },
    );
}

/// The same bits for one slice count under three block orders, in both layouts.
#[test]
fn split_is_deterministic_under_block_shuffles() {
    let case = &backward_filter_cases()[0];
    for layout in Layout::ALL {
        for target in [(DType::F32, Arch::Sm70), (DType::F64, Arch::Sm80)] {
            assert_same_bits_under_shuffles(&format!("{layout} {target:?}"), |options| {
                run(case, layout, target, Slices::Exactly(3), options, 77).0
            });
        }
    }
}

/// Blocks of the CUDA-core backward-filter before (one slice) and after the rule, from the
/// grid alone: the families shape (3×3 64→64, 16×16, batch 1: 1 × 9 blocks, 8 tiles of 32
/// pixels, too short to split) and ResNet-50's 3×3 128→128 on 28×28 at batch 32 (2 × 18 =
/// 36 blocks, 25088 pixels = 784 tiles: `S = ⌈264 / 36⌉ = 8` slices of 98 tiles, 288 blocks;
/// f64: 1568 tiles of 16, also 8 slices).
#[test]
fn slice_rule_grids() {
    let blocks = |cfg: &Conv2dConfig| {
        let g = cfg.backward_filter_launch_config().unwrap().grid;
        g.x * g.y * g.z
    };
    let families = Conv2dConfig::new(64, 64, 3).with_padding(1, 1);
    let d = families.check_shape(&shape(1, 16, 16), false).unwrap();
    assert_eq!(blocks(&families), 9);
    assert_eq!(families.backward_filter_cuda_core_slices(&d), 1);
    for dtype in [DType::F32, DType::F64] {
        let resnet = Conv2dConfig {
            dtype,
            ..Conv2dConfig::new(128, 128, 3).with_padding(1, 1)
        };
        let d = resnet.check_shape(&shape(32, 28, 28), false).unwrap();
        assert_eq!(blocks(&resnet), 36);
        let slices = resnet.backward_filter_cuda_core_slices(&d);
        assert_eq!(slices, 8, "{dtype}");
        eprintln!(
            "ResNet-50 3x3 128→128 28×28 batch 32 {dtype}: {} blocks unsplit, {} split ({slices} \
             slices)",
            blocks(&resnet),
            blocks(&resnet) * slices
        );
    }
    let small = auto_splitting_case();
    let d = small.cfg.check_shape(&small.shape, false).unwrap();
    assert_eq!(small.cfg.backward_filter_cuda_core_slices(&d), 2);
}

/// The split's counters beside the unsplit kernel's on the families shape (forced `S = 2`):
/// the split entry keeps the unsplit load efficiency (≥ 0.9) and the reduce's loads are
/// whole sectors.
#[test]
fn split_counters_on_the_families_shape() {
    let case = Case {
        name: "families 3x3 p1 64→64",
        cfg: Conv2dConfig::new(64, 64, 3).with_padding(1, 1),
        shape: shape(1, 16, 16),
    };
    let outputs = f64::from(64 * 64 * 9);
    for layout in Layout::ALL {
        for target in [(DType::F32, Arch::Sm70), (DType::F64, Arch::Sm80)] {
            for slices in [1, 2] {
                let options = ptxforge_sim::Options::default();
                let (_, log) = run(&case, layout, target, Slices::Exactly(slices), options, 3);
                for r in &log {
                    let c = &r.counters;
                    let load = c.global_load_efficiency();
                    eprintln!(
                        "{layout} {target:?} S = {slices} {}: instr/output {:.1}, global load \
                         efficiency {load:.3}, shared wavefronts / min {:.3}",
                        r.entry,
                        c.instructions.total() as f64 / outputs,
                        c.shared_bank_conflict_factor(),
                    );
                    assert!(load >= 0.9, "{layout} {target:?} {}: {load:.3}", r.entry);
                }
            }
        }
    }
}
