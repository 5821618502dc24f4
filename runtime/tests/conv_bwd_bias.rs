//! The bias gradient `db[c] = Σ_{n, oh, ow} gy[n, c, oh, ow]` (`conv2d_bwd_bias`, its split
//! `conv2d_bwd_bias_split` + `conv2d_bwd_bias_reduce`) in the interpreter with every sanitizer
//! check on, against a plain f64 sum over the same rounded `gy` written here: fixed and seeded
//! random shapes (groups, batch 1, odd pixel counts, channel counts below, at and past the
//! NHWC tile of 32), both layouts, f16, bf16, f32 and f64, forced slice counts 1, 2, 3 and 7
//! (7 leaves empty trailing slices on short cases) and `Slices::Auto`, within the family's
//! tolerances (f32 ≤ 1e-5, f16 ≤ 2e-3, bf16 ≤ 2e-2, f64 ≤ 1e-12 relative to the largest
//! `|db|`); the same bits under shuffled block orders; the counters (load efficiency, blocks)
//! at the families and ResNet-like shapes; the slice rule's grid at ResNet-50's 28×28 layer.

#![cfg(feature = "sim")]

mod conv_support;

use half::{bf16, f16};
use ptxforge_runtime::dtype::DType;
use ptxforge_runtime::launch::{Backend, Element, LaunchRecord, SimBackend};
use ptxforge_runtime::templates::conv::kernels::{
    ENTRY_BWD_BIAS, ENTRY_BWD_BIAS_REDUCE, ENTRY_BWD_BIAS_SPLIT,
};
use ptxforge_runtime::templates::conv::launch::{backward_bias_sliced, Slices};
use ptxforge_runtime::templates::conv::reference::to_channels_last;
use ptxforge_runtime::templates::conv::{Conv2dConfig, Layout};
use ptxforge_runtime::templates::testing::{from_f64, to_f64, HostFloat, SplitMix64};
use ptxforge_runtime::Arch;

use conv_support::{
    assert_close, assert_same_bits_under_shuffles, download, fuzz_cases_with, must, prepare,
    rotate_slices, shape, tolerance, Case,
};

/// The (dtype, target) pairs.
const TARGETS: [(DType, Arch); 5] = [
    (DType::F16, Arch::Sm70),
    (DType::BF16, Arch::Sm80),
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

fn cases() -> Vec<Case> {
    let c = |i, o, k| Conv2dConfig::new(i, o, k).with_bias(true);
    let mut cases = vec![
        Case {
            name: "1x1 2→3 batch 1, 7×9 = 63 pixels (3 channels of an NHWC tile)",
            cfg: c(2, 3, 1),
            shape: shape(1, 7, 9),
        },
        Case {
            name: "3x3 s2 8→40 groups 4, batch 3 (NHWC tiles 32 + 8, 15 pixels per image)",
            cfg: c(8, 40, 3).with_stride(2, 2).with_groups(4),
            shape: shape(3, 8, 11),
        },
        Case {
            name: "1x1 4→64 batch 2, 16×16 (a NCHW image per 256-thread round)",
            cfg: c(4, 64, 1),
            shape: shape(2, 16, 16),
        },
        Case {
            name: "3x3 p1 2→33 batch 2, 23×21 (odd images, NHWC 32 + 1)",
            cfg: c(2, 33, 3).with_padding(1, 1),
            shape: shape(2, 23, 21),
        },
        Case {
            name: "depthwise 3x3 p1 16→16 groups 16, batch 1, 45×47 (2115 pixels)",
            cfg: c(16, 16, 3).with_padding(1, 1).with_groups(16),
            shape: shape(1, 45, 47),
        },
    ];
    cases.extend(
        fuzz_cases_with(9191, 6, &[1, 2, 3, 5, 8, 16, 33])
            .into_iter()
            .map(|case| Case {
                cfg: case.cfg.with_bias(true),
                ..case
            }),
    );
    cases
}

/// `db[c] = Σ_{n, p} gy[n, c, p]` in f64 over NCHW `gy [N, C, P]`.
fn reference_db(gy: &[f64], batch: usize, channels: usize, pixels: usize) -> Vec<f64> {
    (0..channels)
        .map(|c| {
            (0..batch)
                .flat_map(|n| {
                    let plane = (n * channels + c) * pixels;
                    gy[plane..plane + pixels].iter()
                })
                .sum()
        })
        .collect()
}

/// One bias launch of `case` under `cfg` with `slices`.
struct Run<'a> {
    case: &'a Case,
    cfg: Conv2dConfig,
    slices: Slices,
    options: ptxforge_sim::Options,
}

impl Run<'_> {
    /// Runs on `gy` drawn from `seed`, checks `db` against [`reference_db`] and the entries
    /// launched; returns `db`'s bits and the launch log.
    fn check<T: HostFloat + Element>(
        &self,
        seed: u64,
        bits: fn(T) -> u64,
    ) -> (Vec<u64>, Vec<LaunchRecord>) {
        let (cfg, case) = (&self.cfg, self.case);
        let (label, ptx, dims) = prepare(case, cfg);
        let label = format!("{label} {:?}", self.slices);
        let (n, c, p) = (
            dims.batch as usize,
            cfg.out_channels as usize,
            dims.out_pixels(),
        );
        let mut rng = SplitMix64::new(seed);
        let gy = to_f64(&from_f64::<T>(&rng.vec_f64(n * c * p, -1.0, 1.0)));
        let want = reference_db(&gy, n, c, p);
        let gy = match cfg.layout {
            Layout::Nchw => gy,
            Layout::Nhwc => to_channels_last(&gy, [n, c, dims.out_h as usize, dims.out_w as usize]),
        };
        let dev = SimBackend::with_options(self.options.clone());
        let gy = dev.upload(&from_f64::<T>(&gy)).expect("upload");
        let mut db = dev.alloc::<T>(c).expect("alloc");
        let result = backward_bias_sliced(cfg, &dev, &ptx, &case.shape, self.slices, &gy, &mut db);
        must(&label, result);
        assert_close(
            &format!("{label}: db"),
            &download(&dev, &db),
            &want,
            tolerance(cfg.dtype),
        );
        let log = dev.take_launch_log();
        let entries: Vec<&str> = log.iter().map(|r| r.entry.as_str()).collect();
        let slices = match self.slices {
            Slices::Auto => cfg.backward_bias_slices(&dims),
            Slices::Exactly(s) => s,
        };
        let expected = match slices {
            1 => vec![ENTRY_BWD_BIAS],
            _ => vec![ENTRY_BWD_BIAS_SPLIT, ENTRY_BWD_BIAS_REDUCE],
        };
        assert_eq!(entries, expected, "{label}");
        let db = dev.download(&db).expect("download");
        (db.into_iter().map(bits).collect(), log)
    }
}

/// `db`'s bits and the launch log of `case` in `layout` with `dtype` on `arch`.
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
    match dtype {
        DType::F16 => run.check::<f16>(seed, |v| u64::from(v.to_bits())),
        DType::BF16 => run.check::<bf16>(seed, |v| u64::from(v.to_bits())),
        DType::F32 => run.check::<f32>(seed, |v| u64::from(v.to_bits())),
        DType::F64 => run.check::<f64>(seed, f64::to_bits),
    }
}

/// Every case in both layouts on every target, the slice count rotating through [`SLICES`].
#[test]
fn db_matches_the_reference() {
    rotate_slices(
        &cases(),
        &TARGETS,
        &SLICES,
        900,
        |case, layout, target, slices, seed| {
            let options = ptxforge_sim::Options::default();
            run(case, layout, target, slices, options, seed);
        },
    );
}

/// The same bits for one slice count under three block orders, in both layouts.
#[test]
fn db_is_deterministic_under_block_shuffles() {
    let case = &cases()[1];
    for layout in Layout::ALL {
        for target in [(DType::F32, Arch::Sm80), (DType::F64, Arch::Sm80)] {
            for slices in [Slices::Exactly(1), Slices::Exactly(3)] {
                let label = format!("{layout} {target:?} {slices:?}");
                assert_same_bits_under_shuffles(&label, |options| {
                    run(case, layout, target, slices, options, 77).0
                });
            }
        }
    }
}

/// Blocks of the bias launches at ResNet-50's 128-channel 28×28 layer, batch 32 (25088
/// pixels): NCHW 128 channel blocks, 98 rounds of 256 pixels: `S = min(⌈264 / 128⌉, ⌊98 /
/// 16⌋) = 3` (384 blocks); NHWC 4 tiles of 32 channels, 3136 rounds of 8 pixels: `S =
/// min(66, 196) = 66` (264 blocks). One warp per channel was `128 / 8 = 16` blocks.
#[test]
fn resnet50_grid() {
    let cfg = Conv2dConfig::new(128, 128, 3)
        .with_padding(1, 1)
        .with_bias(true);
    for (layout, slices, blocks) in [(Layout::Nchw, 3, 384), (Layout::Nhwc, 66, 264)] {
        let cfg = cfg.with_layout(layout);
        let d = cfg.check_shape(&shape(32, 28, 28), false).unwrap();
        let s = cfg.backward_bias_slices(&d);
        let g = cfg.backward_bias_launch_config().grid;
        eprintln!(
            "ResNet-50 128 channels 28×28 batch 32 {layout}: {} blocks unsplit, S = {s}, {} \
             blocks split (one warp per channel: 16)",
            g.x,
            g.x * s
        );
        assert_eq!((s, g.x * s), (slices, blocks), "{layout}");
        assert!(g.x * s >= 264, "{layout}: {} blocks for 132 SMs", g.x * s);
    }
}

/// The counters of every bias launch (`Auto`) at C = 64, batch 2, 16×16 and C = 128, batch
/// 4, 28×28, both layouts, f32 and f16: global load efficiency ≥ 0.9 (NHWC: a warp reads 32
/// consecutive channels of a pixel; NCHW: consecutive pixels of a plane), and the figures.
#[test]
fn bias_counters() {
    let c = |o| Conv2dConfig::new(1, o, 1).with_bias(true);
    let cases = [
        Case {
            name: "C 64 batch 2 16×16",
            cfg: c(64),
            shape: shape(2, 16, 16),
        },
        Case {
            name: "C 128 batch 4 28×28",
            cfg: c(128),
            shape: shape(4, 28, 28),
        },
    ];
    for case in &cases {
        for layout in Layout::ALL {
            for target in [(DType::F32, Arch::Sm80), (DType::F16, Arch::Sm80)] {
                let options = ptxforge_sim::Options::default();
                let (_, log) = run(case, layout, target, Slices::Auto, options, 5);
                let outputs = f64::from(case.cfg.out_channels);
                let elements =
                    outputs * f64::from(case.shape.batch * case.shape.height * case.shape.width);
                for r in &log {
                    let (cn, g) = (&r.counters, r.config.grid);
                    let load = cn.global_load_efficiency();
                    eprintln!(
                        "{} {layout} {:?}: {} grid {}×{}: instr/output {:.1} (/gy element \
                         {:.2}), global load efficiency {load:.3}, shared factor {:.3}",
                        case.name,
                        target.0,
                        r.entry,
                        g.x,
                        g.y,
                        cn.instructions.total() as f64 / outputs,
                        cn.instructions.total() as f64 / elements,
                        cn.shared_bank_conflict_factor(),
                    );
                    assert!(
                        load >= 0.9,
                        "{} {layout} {:?} {}: {load:.3}",
                        case.name,
                        target.0,
                        r.entry
                    );
                }
            }
        }
    }
}
