//! The split tensor-core backward-filter (`conv2d_bwd_filter_implicit_gemm_split` into f32
//! partials, then `conv2d_bwd_filter_reduce` in slice order) in the interpreter with every
//! sanitizer check on: forced slice counts over fixed and fuzzed shapes (groups, stride,
//! padding, dilation, ragged pixel counts, empty trailing slices), both layouts, f16, bf16
//! and tf32, against the f64 reference within the family's tolerances (tf32: `√K / 1024` of
//! the exact reference and f32 accumulation error of the tf32-rounded-operand one); the same
//! bits under block shuffling; one slice runs the unsplit entry alone; `backward_filter`
//! following the slice rule (the rule itself, from the grid alone, is a unit test in the
//! conv geometry); typed errors for bad slice counts; and the counters at a forced `S = 2`.

#![cfg(feature = "sim")]

mod conv_support;

use std::ops::Deref;

use half::{bf16, f16};
use ptxforge_runtime::dtype::DType;
use ptxforge_runtime::launch::{
    Backend, DeviceBuffer, Element, LaunchError, LaunchRecord, SimBackend,
};
use ptxforge_runtime::templates::conv::kernels::{
    ENTRY_BWD_BIAS, ENTRY_BWD_FILTER_CHANNELS_LAST_SPLIT, ENTRY_BWD_FILTER_IMPLICIT_GEMM,
    ENTRY_BWD_FILTER_REDUCE, ENTRY_BWD_FILTER_SPLIT, ENTRY_GRADIENT_TO_CHANNELS_LAST,
    ENTRY_TO_CHANNELS_LAST,
};
use ptxforge_runtime::templates::conv::launch::{
    backward_filter, backward_filter_sliced, backward_filter_with, Slices,
};
use ptxforge_runtime::templates::conv::reference::{self, to_channels_last};
use ptxforge_runtime::templates::conv::{Conv2dConfig, ConvDims, Layout};
use ptxforge_runtime::templates::testing::{
    counters_summary, error_relative_to_max, from_f64, to_f64, HostFloat, SplitMix64,
};
use ptxforge_runtime::templates::tf32::{self, round_tf32};
use ptxforge_runtime::Arch;

use conv_support::{
    assert_close, backward_filter_cases, download, fuzz_cases_with, must, shape, tensor_core_cases,
    tolerance, Case, Prepared,
};

/// One split run: the config, its module and shape, and the device holding the inputs.
struct Run(Prepared);

impl Deref for Run {
    type Target = Prepared;

    fn deref(&self) -> &Prepared {
        &self.0
    }
}

impl Run {
    /// `case` in `layout` with `dtype` (f32 means tf32) on sm_80, on a device with `options`.
    fn new(case: &Case, dtype: DType, layout: Layout, options: ptxforge_sim::Options) -> Self {
        let cfg = Conv2dConfig {
            dtype,
            arch: Arch::Sm80,
            ..case
                .cfg
                .with_layout(layout)
                .with_allow_tf32(dtype == DType::F32)
        };
        Self(Prepared::new(case, cfg, SimBackend::with_options(options)))
    }

    /// NCHW extents of `x`, `y` and `w`.
    fn extents(&self) -> [[usize; 4]; 3] {
        let (c, s, d) = (&self.cfg, &self.shape, &self.dims);
        [
            [s.batch, c.in_channels, s.height, s.width],
            [s.batch, c.out_channels, d.out_h, d.out_w],
            [c.out_channels, c.in_per_group(), c.kernel_h, c.kernel_w],
        ]
        .map(|e| e.map(|v| v as usize))
    }

    /// Random values in `[-1, 1]` rounded to `T` (NCHW, what the reference sees) and their
    /// device copy in the config's layout.
    fn random<T: HostFloat + Element>(
        &self,
        rng: &mut SplitMix64,
        extents: [usize; 4],
    ) -> (Vec<f64>, DeviceBuffer<SimBackend, T>) {
        let values = rng.vec_f64(extents.iter().product(), -1.0, 1.0);
        let rounded = to_f64(&from_f64::<T>(&values));
        let stored = match self.cfg.layout {
            Layout::Nchw => rounded.clone(),
            Layout::Nhwc => to_channels_last(&rounded, extents),
        };
        (
            rounded,
            self.dev.upload(&from_f64::<T>(&stored)).expect("upload"),
        )
    }

    /// The weight gradient in the config's layout from NCHW `x` and `gy`, and the bias one.
    fn reference(&self, x: &[f64], gy: &[f64]) -> (Vec<f64>, Option<Vec<f64>>) {
        let (dw, db) = reference::backward_filter(&self.cfg, &self.shape, x, gy).expect("ref");
        let dw = match self.cfg.layout {
            Layout::Nchw => dw,
            Layout::Nhwc => to_channels_last(&dw, self.extents()[2]),
        };
        (dw, db)
    }

    /// `backward_filter_sliced` with `slices` on inputs drawn from `seed`: the `dw` and `db`
    /// downloaded, checked against the reference; the launch log.
    fn check<T: HostFloat + Element>(&self, slices: u32, seed: u64) -> (Vec<T>, Vec<LaunchRecord>) {
        let mut rng = SplitMix64::new(seed);
        let [x_ext, y_ext, _] = self.extents();
        let (x, x_dev) = self.random::<T>(&mut rng, x_ext);
        let (gy, gy_dev) = self.random::<T>(&mut rng, y_ext);
        let dev = &self.dev;
        let mut dw = dev
            .alloc::<T>(ConvDims::weight_len(&self.cfg))
            .expect("alloc");
        let mut db = dev
            .alloc::<T>(self.cfg.out_channels as usize)
            .expect("alloc");
        let db_arg = self.cfg.bias.then_some(&mut db);
        let (cfg, ptx, s) = (&self.cfg, &self.ptx, &self.shape);
        let run = backward_filter_sliced(
            cfg,
            dev,
            ptx,
            s,
            Slices::Exactly(slices),
            &x_dev,
            &gy_dev,
            &mut dw,
            db_arg,
        );
        must(&self.label, run);
        let what = format!("{} S = {slices}", self.label);
        let got = download(dev, &dw);
        let (want_dw, want_db) = self.reference(&x, &gy);
        if cfg.dtype == DType::F32 {
            let k = u64::from(s.batch) * u64::from(self.dims.out_h * self.dims.out_w);
            let err = error_relative_to_max(&got, &want_dw);
            assert!(
                err <= tf32::tolerance(k as u32),
                "{what}: tf32 error {err:e}"
            );
            let tf32_in = |v: &[f64]| -> Vec<f64> {
                v.iter().map(|&a| f64::from(round_tf32(a as f32))).collect()
            };
            let (model, _) = self.reference(&tf32_in(&x), &tf32_in(&gy));
            assert_close(
                &format!("{what} dw (tf32 model)"),
                &got,
                &model,
                tolerance(cfg.dtype),
            );
        } else {
            assert_close(&format!("{what} dw"), &got, &want_dw, tolerance(cfg.dtype));
        }
        if let Some(want_db) = &want_db {
            let tol = tolerance(cfg.dtype);
            assert_close(&format!("{what} db"), &download(dev, &db), want_db, tol);
        }
        let log = dev.take_launch_log();
        let entries: Vec<&str> = log.iter().map(|r| r.entry.as_str()).collect();
        let mut want = match slices {
            1 => vec![ENTRY_BWD_FILTER_IMPLICIT_GEMM],
            _ => vec![ENTRY_BWD_FILTER_SPLIT, ENTRY_BWD_FILTER_REDUCE],
        };
        if cfg.bias {
            want.push(ENTRY_BWD_BIAS);
        }
        assert_eq!(entries, want, "{what}");
        (dev.download(&dw).expect("download"), log)
    }

    /// Reduction tiles of the unsplit entry: `⌈N·OH·OW / K⌉`, `K` = 64 bytes of elements.
    fn tiles(&self) -> u32 {
        let depth = 64 / self.cfg.dtype.size_bytes() as usize;
        (self.shape.batch as usize * self.dims.out_pixels()).div_ceil(depth) as u32
    }
}

/// [`Run::check`] in the element type of `dtype`, the bits dropped.
fn check_dtype(run: &Run, slices: u32, seed: u64) {
    match run.cfg.dtype {
        DType::F16 => drop(run.check::<f16>(slices, seed)),
        DType::BF16 => drop(run.check::<bf16>(slices, seed)),
        _ => drop(run.check::<f32>(slices, seed)),
    }
}

/// The backward-filter cases (a long reduction over three images, two `Og` and three
/// filter-column tiles; groups with a bias under stride, dilation and padding; a strided
/// grouped 1 × 1) and a ragged pixel count (not a multiple of the tile) over a 2 × 3 kernel.
fn split_cases() -> Vec<Case> {
    let mut cases = backward_filter_cases();
    cases.push(Case {
        name: "split 2x3 p(1,0) 6→10 ragged M",
        cfg: Conv2dConfig::new(6, 10, 1)
            .with_kernel(2, 3)
            .with_padding(1, 0),
        shape: shape(2, 13, 11),
    });
    cases
}

/// Every split case, the tensor-core cases and fuzzed ones, in both layouts and f16, bf16,
/// tf32, at `S` = 2, 3 and one slice per tile plus two empty slices past the end.
#[test]
fn split_matches_the_reference() {
    let mut cases = split_cases();
    cases.extend(tensor_core_cases());
    cases.extend(fuzz_cases_with(1117, 6, &[1, 2, 3, 8]));
    let dtypes = [DType::F16, DType::BF16, DType::F32];
    for (i, case) in cases.iter().enumerate() {
        for layout in Layout::ALL {
            // Each case in one dtype per layout (rotating), to keep the interpreter time down.
            let dtype = dtypes[(2 * i + layout as usize) % dtypes.len()];
            let run = Run::new(case, dtype, layout, ptxforge_sim::Options::default());
            let tiles = run.tiles();
            for slices in [2, 3, tiles + 2] {
                check_dtype(&run, slices, 31 + i as u64);
            }
        }
    }
}

/// Each of f16, bf16 and tf32 on every split case in both layouts at `S = 2`.
#[test]
fn split_every_dtype() {
    for case in split_cases() {
        for layout in Layout::ALL {
            for dtype in [DType::F16, DType::BF16, DType::F32] {
                let run = Run::new(&case, dtype, layout, ptxforge_sim::Options::default());
                check_dtype(&run, 2, 77);
            }
        }
    }
}

/// The split weight gradient is bitwise the same whatever order the blocks run in, in both
/// layouts (`S = 3`, shuffled block orders as the unsplit determinism test uses).
#[test]
fn split_is_deterministic_under_block_shuffling() {
    let case = &split_cases()[0];
    for layout in Layout::ALL {
        let mut results = Vec::new();
        for shuffle in [None, Some(1), Some(2)] {
            let options = ptxforge_sim::Options {
                shuffle_blocks: shuffle,
                ..ptxforge_sim::Options::default()
            };
            let run = Run::new(case, DType::F16, layout, options);
            let (dw, _) = run.check::<f16>(3, 9);
            results.push(dw.iter().map(|v| v.to_bits()).collect::<Vec<u16>>());
        }
        assert!(
            results.windows(2).all(|w| w[0] == w[1]),
            "{layout}: bitwise identical results"
        );
    }
}

/// One slice runs the unsplit entry alone, with the same bits as `backward_filter_with`,
/// which picks one slice for this small shape.
#[test]
fn one_slice_is_the_unsplit_entry() {
    let case = &split_cases()[1];
    for layout in Layout::ALL {
        let run = Run::new(case, DType::F16, layout, ptxforge_sim::Options::default());
        assert_eq!(run.cfg.backward_filter_slices(&run.dims), 1);
        let (dw, _) = run.check::<f16>(1, 5);
        let mut rng = SplitMix64::new(5);
        let [x_ext, y_ext, _] = run.extents();
        let (_, x) = run.random::<f16>(&mut rng, x_ext);
        let (_, gy) = run.random::<f16>(&mut rng, y_ext);
        let mut dw_auto = run.dev.alloc::<f16>(dw.len()).expect("alloc");
        let mut db = run
            .dev
            .alloc::<f16>(run.cfg.out_channels as usize)
            .expect("alloc");
        let entry = ENTRY_BWD_FILTER_IMPLICIT_GEMM;
        let (cfg, ptx, s) = (&run.cfg, &run.ptx, &run.shape);
        let auto = backward_filter_with(
            cfg,
            &run.dev,
            ptx,
            s,
            entry,
            &x,
            &gy,
            &mut dw_auto,
            Some(&mut db),
        );
        must("auto", auto);
        let auto = run.dev.download(&dw_auto).expect("download");
        assert!(dw
            .iter()
            .zip(&auto)
            .all(|(a, b)| a.to_bits() == b.to_bits()));
    }
}

/// `backward_filter` follows the slice rule: a 1 × 1 8 → 8 layer over 4 × 16 × 16 pixels (1
/// block, 32 tiles of 32) splits into 2 slices of 16 tiles (in NCHW the split entry over the
/// channels-last copies), and matches the reference.
#[test]
fn backward_filter_splits_by_the_rule() {
    let case = Case {
        name: "auto split 1x1 8→8 batch 4",
        cfg: Conv2dConfig::new(8, 8, 1),
        shape: shape(4, 16, 16),
    };
    for layout in Layout::ALL {
        let run = Run::new(&case, DType::F16, layout, ptxforge_sim::Options::default());
        assert_eq!(run.cfg.backward_filter_slices(&run.dims), 2);
        let mut rng = SplitMix64::new(3);
        let [x_ext, y_ext, _] = run.extents();
        let (x, x_dev) = run.random::<f16>(&mut rng, x_ext);
        let (gy, gy_dev) = run.random::<f16>(&mut rng, y_ext);
        let mut dw = run.dev.alloc::<f16>(64).expect("alloc");
        let (cfg, ptx, s) = (&run.cfg, &run.ptx, &run.shape);
        must(
            "auto",
            backward_filter(cfg, &run.dev, ptx, s, &x_dev, &gy_dev, &mut dw, None),
        );
        let entries: Vec<String> = run
            .dev
            .take_launch_log()
            .into_iter()
            .map(|r| r.entry)
            .collect();
        // NCHW halves with channels in multiples of 8 reduce over channels-last copies.
        let expected: &[&str] = match layout {
            Layout::Nchw => &[
                ENTRY_TO_CHANNELS_LAST,
                ENTRY_GRADIENT_TO_CHANNELS_LAST,
                ENTRY_BWD_FILTER_CHANNELS_LAST_SPLIT,
                ENTRY_BWD_FILTER_REDUCE,
            ],
            Layout::Nhwc => &[ENTRY_BWD_FILTER_SPLIT, ENTRY_BWD_FILTER_REDUCE],
        };
        assert_eq!(entries, expected, "{layout}");
        let (want, _) = run.reference(&x, &gy);
        let got = download(&run.dev, &dw);
        assert_close(&run.label, &got, &want, tolerance(DType::F16));
    }
}

/// No slices, or a workspace past the family's index bound (`S·|dw| > 2^31 − 1`), is a typed
/// error naming `slices`, before anything runs.
#[test]
fn bad_slice_counts_are_typed_errors() {
    let run = Run::new(
        &split_cases()[0],
        DType::F16,
        Layout::Nchw,
        Default::default(),
    );
    let mut rng = SplitMix64::new(1);
    let [x_ext, y_ext, _] = run.extents();
    let (_, x) = run.random::<f16>(&mut rng, x_ext);
    let (_, gy) = run.random::<f16>(&mut rng, y_ext);
    let mut dw = run
        .dev
        .alloc::<f16>(ConvDims::weight_len(&run.cfg))
        .expect("alloc");
    for slices in [0, u32::MAX] {
        let (cfg, ptx, s) = (&run.cfg, &run.ptx, &run.shape);
        let slices = Slices::Exactly(slices);
        let got = backward_filter_sliced(cfg, &run.dev, ptx, s, slices, &x, &gy, &mut dw, None);
        assert!(
            matches!(got, Err(LaunchError::InvalidDim { name: "slices", .. })),
            "{slices:?}: {got:?}"
        );
    }
    assert!(run.dev.take_launch_log().is_empty());
}

/// Counters of the ResNet 3 × 3 64 → 64 layer on 16 × 16 at batch 2 (16 K tiles) at `S = 2`
/// (f16, sm_80, both layouts): the split entry issues exactly the unsplit mma count (9
/// blocks × 2 slices × 8 tiles × 64), global load efficiency ≥ 0.9, shared bank-conflict
/// factor ≤ 1.05; the reduction reads whole sectors; instructions per `dw` element of both
/// entries together within [`SPLIT_INSTRUCTIONS_PER_OUTPUT`].
#[test]
fn split_counters_resnet_3x3() {
    let case = Case {
        name: "resnet 3x3 64→64 bwd-filter",
        cfg: Conv2dConfig::new(64, 64, 3).with_padding(1, 1),
        shape: shape(2, 16, 16),
    };
    let outputs = 64 * 64 * 9;
    for layout in Layout::ALL {
        let run = Run::new(&case, DType::F16, layout, ptxforge_sim::Options::default());
        let (_, log) = run.check::<f16>(2, 19);
        let mut instructions = 0;
        for record in &log {
            let c = &record.counters;
            eprintln!("{layout} {}", counters_summary(record, outputs as f64));
            instructions += c.instructions.total();
            assert!(
                c.global_load_efficiency() >= 0.9,
                "{layout} {}",
                record.entry
            );
            if record.entry == ENTRY_BWD_FILTER_SPLIT {
                assert_eq!(c.mma_instructions, 9 * 2 * 8 * 64);
                assert!(c.ldmatrix_wavefronts_per_request() <= 4.0 + 1e-9);
                assert!(c.shared_bank_conflict_factor() <= 1.05, "{layout}");
            }
        }
        let per_output = instructions as f64 / outputs as f64;
        eprintln!("{layout}: split + reduce {per_output:.1} instructions per dw element");
        let bar = SPLIT_INSTRUCTIONS_PER_OUTPUT[layout as usize];
        assert!(
            per_output <= bar,
            "{layout}: {per_output} instructions/output"
        );
    }
}

/// Instructions per `dw` element of split + reduce at `S = 2` on the ResNet layer, NCHW and
/// NHWC (measured 429.3, and 118.4 = 83.4 split + 35.0 reduce; NHWC was 458.4 = 423.4 +
/// 35.0 before its operands were staged pixel-major from `cp.async` chunks and read by
/// `ldmatrix.trans`; NCHW was 423.5 = 388.5 + 35.0 before its input B was read by `x`
/// windows, `Strategy::Windows`).
const SPLIT_INSTRUCTIONS_PER_OUTPUT: [f64; 2] = [450.0, 124.0];
