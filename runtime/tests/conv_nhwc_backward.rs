//! The channels-last (`Layout::Nhwc`) backward passes in the interpreter (every sanitizer
//! check on: a finding fails the launch and the test) against the NCHW f64 host references,
//! transposed (`reference::to_channels_last`): `x`/`dx [N, H, W, C_in]`, `gy [N, OH, OW,
//! C_out]`, `w`/`dw [C_out, KH, KW, C_in/G]`, `db [C_out]`.
//!
//! Both entries of each pass run explicitly (`*_with`), then the automatic choice
//! (`backward_data`, `backward_filter`) must pick the tensor-core implicit GEMM where the
//! module has it (f16/bf16 on sm_80+) and the CUDA-core entry otherwise (f32, f64, sm_75).
//! Tolerances, as `max |got − want| / max |want|` (the reference sees the same rounded
//! inputs): f32 ≤ 1e-5, f16 ≤ 2e-3, bf16 ≤ 2e-2, f64 ≤ 1e-12; tf32 is covered by
//! `conv_numerics.rs` (`tf32_every_case`, both layouts).

#![cfg(feature = "sim")]

mod conv_support;

use std::ops::Deref;

use half::{bf16, f16};
use ptxforge_runtime::dtype::DType;
use ptxforge_runtime::launch::{
    Backend, DeviceBuffer, Element, LaunchError, LaunchRecord, SimBackend,
};
use ptxforge_runtime::templates::conv::kernels::{
    ENTRY_BWD_DATA, ENTRY_BWD_DATA_IMPLICIT_GEMM, ENTRY_BWD_FILTER, ENTRY_BWD_FILTER_IMPLICIT_GEMM,
};
use ptxforge_runtime::templates::conv::launch::{
    backward_data, backward_data_with, backward_filter, backward_filter_with,
};
use ptxforge_runtime::templates::conv::reference::{self, to_channels_last};
use ptxforge_runtime::templates::conv::{Conv2dConfig, ConvDims, Layout};
use ptxforge_runtime::templates::testing::{
    counters_summary, from_f64, to_f64, HostFloat, SplitMix64,
};
use ptxforge_runtime::Arch;
use ptxforge_sim::Counters;

use conv_support::{
    assert_close, bias_entries, download, fuzz_cases_with, must, shape, tensor_core_cases,
    tolerance, Case, GemmTiles, Prepared,
};

/// Seeded random cases with 1, 2, 3, 8 or 16 channels per group on each side (16-byte `gy`
/// chunks and element gathers), see [`fuzz_cases_with`].
fn fuzz_cases(seed: u64, count: usize) -> Vec<Case> {
    fuzz_cases_with(seed, count, &[1, 2, 3, 8, 16])
}

/// Fixed shapes: the shared tensor-core cases (groups, stride, padding, dilation, ragged
/// tiles, `Cg` and `Og` of 1, 3, 5, 8, 12, 72 …) and NHWC backward ones: per-group channels
/// that are multiples of 8 (16-byte `cp.async` chunks of backward-data's `gy`), two channel
/// tiles, a stride that makes most taps skip a pixel, a rectangular kernel with a
/// rectangular stride.
fn fixed_cases() -> Vec<Case> {
    let c = Conv2dConfig::new;
    let mut cases = tensor_core_cases();
    cases.extend([
        Case {
            name: "3x3 p1 16→16 groups 2 (Cg 8, Og 8: gy chunks)",
            cfg: c(16, 16, 3).with_padding(1, 1).with_groups(2),
            shape: shape(2, 7, 9),
        },
        Case {
            name: "3x3 p1 144→80 groups 2 (Cg 72: two channel tiles, Og 40)",
            cfg: c(144, 80, 3).with_padding(1, 1).with_groups(2),
            shape: shape(2, 5, 6),
        },
        Case {
            name: "3x3 s3 d2 p2 10→16 + bias (most taps skip a pixel)",
            cfg: c(10, 16, 3)
                .with_stride(3, 3)
                .with_dilation(2, 2)
                .with_padding(2, 2)
                .with_bias(true),
            shape: shape(2, 14, 11),
        },
        Case {
            name: "2x4 p1 s(1, 2) 8→32 groups 2",
            cfg: c(8, 32, 1)
                .with_kernel(2, 4)
                .with_stride(1, 2)
                .with_padding(1, 1)
                .with_groups(2),
            shape: shape(3, 6, 9),
        },
    ]);
    cases
}

/// One case in NHWC with `dtype` on `arch`: its config, module and checked dimensions, a
/// fresh device and the data generator.
struct Setup {
    prepared: Prepared,
    rng: SplitMix64,
}

impl Deref for Setup {
    type Target = Prepared;

    fn deref(&self) -> &Prepared {
        &self.prepared
    }
}

impl Setup {
    fn new(case: &Case, dtype: DType, arch: Arch, seed: u64) -> Self {
        let cfg = Conv2dConfig {
            dtype,
            arch,
            ..case.cfg.with_layout(Layout::Nhwc)
        };
        Self {
            prepared: Prepared::new(case, cfg, SimBackend::new()),
            rng: SplitMix64::new(seed),
        }
    }

    /// Rounded random NCHW data with extents `dims` (what the reference sees) and its NHWC
    /// copy on the device.
    fn random<T: HostFloat + Element>(
        &mut self,
        dims: [usize; 4],
    ) -> (Vec<f64>, DeviceBuffer<SimBackend, T>) {
        let values = self.rng.vec_f64(dims.iter().product(), -1.0, 1.0);
        let rounded = to_f64(&from_f64::<T>(&values));
        let nhwc = from_f64::<T>(&to_channels_last(&rounded, dims));
        (rounded, self.dev.upload(&nhwc).expect("upload"))
    }

    /// NCHW extents `[N, C_in, H, W]` of `x`.
    fn x_dims(&self) -> [usize; 4] {
        let s = &self.shape;
        [s.batch, self.cfg.in_channels, s.height, s.width].map(|v| v as usize)
    }

    /// NCHW extents `[N, C_out, OH, OW]` of `y`.
    fn y_dims(&self) -> [usize; 4] {
        let (s, d) = (&self.shape, &self.dims);
        [s.batch, self.cfg.out_channels, d.out_h, d.out_w].map(|v| v as usize)
    }

    /// `[C_out, Cg, KH, KW]` of the NCHW weight.
    fn w_dims(&self) -> [usize; 4] {
        let c = &self.cfg;
        [c.out_channels, c.in_per_group(), c.kernel_h, c.kernel_w].map(|v| v as usize)
    }
}

/// Backward-data of `case` in NHWC through every backward-data entry of the module and
/// through `backward_data` (which must pick the tensor-core entry where the module has it),
/// each against the transposed reference. Returns the explicit runs' launch records and the
/// entries run explicitly.
fn run_backward_data<T: HostFloat + Element>(
    case: &Case,
    dtype: DType,
    arch: Arch,
    seed: u64,
) -> (Vec<LaunchRecord>, Vec<&'static str>) {
    let mut s = Setup::new(case, dtype, arch, seed);
    let (gy, gy_dev) = s.random::<T>(s.y_dims());
    let (w, w_dev) = s.random::<T>(s.w_dims());
    let (cfg, label, dev, tol) = (&s.cfg, &s.label, &s.dev, tolerance(dtype));
    let want = reference::backward_data(cfg, &s.shape, &gy, &w).expect("reference");
    let want = to_channels_last(&want, s.x_dims());
    let run = |entry: Option<&'static str>| {
        let mut dx = dev.alloc::<T>(s.dims.input_len(cfg)).expect("alloc");
        let result = match entry {
            Some(entry) => {
                backward_data_with(cfg, dev, &s.ptx, &s.shape, entry, &gy_dev, &w_dev, &mut dx)
            }
            None => backward_data(cfg, dev, &s.ptx, &s.shape, &gy_dev, &w_dev, &mut dx),
        };
        must(label, result);
        let what = format!("{label}: {}", entry.unwrap_or("backward_data"));
        assert_close(&what, &download(dev, &dx), &want, tol);
    };
    let entries = [ENTRY_BWD_DATA, ENTRY_BWD_DATA_IMPLICIT_GEMM];
    let (log, ran, picked) = each_entry_then_auto(dev, cfg, entries, run);
    assert_eq!(picked, [*ran.last().expect("an entry ran")], "{label}");
    (log, ran)
}

/// Backward-filter of `case` in NHWC through every weight-gradient entry of the module and
/// through `backward_filter` (which must pick the tensor-core entry where the module has
/// it, then `conv2d_bwd_bias` with a bias), `dw` and `db` against the transposed reference.
/// Returns the explicit runs' launch records and the entries run explicitly.
fn run_backward_filter<T: HostFloat + Element>(
    case: &Case,
    dtype: DType,
    arch: Arch,
    seed: u64,
) -> (Vec<LaunchRecord>, Vec<&'static str>) {
    let mut s = Setup::new(case, dtype, arch, seed);
    let (x, x_dev) = s.random::<T>(s.x_dims());
    let (gy, gy_dev) = s.random::<T>(s.y_dims());
    let (cfg, label, dev, tol) = (&s.cfg, &s.label, &s.dev, tolerance(dtype));
    let (want_dw, want_db) = reference::backward_filter(cfg, &s.shape, &x, &gy).expect("ref");
    let want_dw = to_channels_last(&want_dw, s.w_dims());
    let run = |entry: Option<&'static str>| {
        let mut dw = dev.alloc::<T>(ConvDims::weight_len(cfg)).expect("alloc");
        let mut db = dev.alloc::<T>(cfg.out_channels as usize).expect("alloc");
        let db_arg = cfg.bias.then_some(&mut db);
        let (p, sh) = (&s.ptx, &s.shape);
        let result = match entry {
            Some(entry) => {
                backward_filter_with(cfg, dev, p, sh, entry, &x_dev, &gy_dev, &mut dw, db_arg)
            }
            None => backward_filter(cfg, dev, p, sh, &x_dev, &gy_dev, &mut dw, db_arg),
        };
        must(label, result);
        let what = format!("{label}: {}", entry.unwrap_or("backward_filter"));
        assert_close(&format!("{what} dw"), &download(dev, &dw), &want_dw, tol);
        if let Some(want_db) = &want_db {
            assert_close(&format!("{what} db"), &download(dev, &db), want_db, tol);
        }
    };
    let entries = [ENTRY_BWD_FILTER, ENTRY_BWD_FILTER_IMPLICIT_GEMM];
    let (log, ran, picked) = each_entry_then_auto(dev, cfg, entries, run);
    let mut want_picked = vec![*ran.last().expect("an entry ran")];
    want_picked.extend(bias_entries(cfg, &s.shape));
    assert_eq!(picked, want_picked, "{label}");
    (log, ran)
}

/// Runs `run(Some(entry))` for each of `entries` (`[CUDA cores, tensor cores]`) the module
/// has, then `run(None)` (the launch function's own choice). Returns the explicit runs'
/// launch records, the entries they ran, and the entries the automatic call launched.
fn each_entry_then_auto(
    dev: &SimBackend,
    cfg: &Conv2dConfig,
    entries: [&'static str; 2],
    run: impl Fn(Option<&'static str>),
) -> (Vec<LaunchRecord>, Vec<&'static str>, Vec<String>) {
    let ran: Vec<&'static str> = entries
        .into_iter()
        .filter(|entry| cfg.entry_names().contains(entry))
        .collect();
    for &entry in &ran {
        run(Some(entry));
    }
    let log = dev.take_launch_log();
    run(None);
    let picked = dev.take_launch_log().into_iter().map(|r| r.entry).collect();
    (log, ran, picked)
}

/// Both passes of `case` with `dtype` on `arch`; returns the entries each ran explicitly.
fn run_both<T: HostFloat + Element>(
    case: &Case,
    dtype: DType,
    arch: Arch,
    seed: u64,
) -> [Vec<&'static str>; 2] {
    [
        run_backward_data::<T>(case, dtype, arch, seed).1,
        run_backward_filter::<T>(case, dtype, arch, seed + 1).1,
    ]
}

/// The fixed and 10 fuzzed cases: f16 on sm_80 and bf16 on sm_90 run both entries of each
/// pass (CUDA cores, tensor cores) and pick the tensor-core one; f16 on sm_75 (every third
/// case) has only the CUDA-core entries.
#[test]
fn nhwc_backward_every_case_tensor_cores() {
    let mut cases = fixed_cases();
    cases.extend(fuzz_cases(9119, 10));
    let both = [
        vec![ENTRY_BWD_DATA, ENTRY_BWD_DATA_IMPLICIT_GEMM],
        vec![ENTRY_BWD_FILTER, ENTRY_BWD_FILTER_IMPLICIT_GEMM],
    ];
    for (i, case) in cases.iter().enumerate() {
        let seed = 100 + 2 * i as u64;
        let ran = run_both::<f16>(case, DType::F16, Arch::Sm80, seed);
        assert_eq!(ran, both, "{}", case.name);
        let ran = run_both::<bf16>(case, DType::BF16, Arch::Sm90, seed);
        assert_eq!(ran, both, "{}", case.name);
        if i % 3 == 0 {
            let ran = run_both::<f16>(case, DType::F16, Arch::Sm75, seed);
            assert_eq!(ran, [[ENTRY_BWD_DATA], [ENTRY_BWD_FILTER]], "{}", case.name);
        }
    }
}

/// f32 (without `allow_tf32`) and f64 have only the CUDA-core NHWC backward entries, and the
/// tensor-core ones are a typed error naming the layout and listing the module's entries.
#[test]
fn nhwc_backward_cuda_core_fallback() {
    let mut cases = fixed_cases();
    cases.extend(fuzz_cases(7007, 4));
    for (i, case) in cases.iter().enumerate() {
        let seed = 300 + 2 * i as u64;
        let ran = run_both::<f32>(case, DType::F32, Arch::Sm80, seed);
        assert_eq!(ran, [[ENTRY_BWD_DATA], [ENTRY_BWD_FILTER]], "{}", case.name);
        let ran = run_both::<f64>(case, DType::F64, Arch::Sm90, seed);
        assert_eq!(ran, [[ENTRY_BWD_DATA], [ENTRY_BWD_FILTER]], "{}", case.name);
    }
    let s = Setup::new(&fixed_cases()[0], DType::F32, Arch::Sm80, 1);
    let dev = &s.dev;
    let gy = dev.alloc::<f32>(s.dims.output_len(&s.cfg)).expect("alloc");
    let w = dev
        .alloc::<f32>(ConvDims::weight_len(&s.cfg))
        .expect("alloc");
    let mut dx = dev.alloc::<f32>(s.dims.input_len(&s.cfg)).expect("alloc");
    let entry = ENTRY_BWD_DATA_IMPLICIT_GEMM;
    let err = backward_data_with(&s.cfg, dev, &s.ptx, &s.shape, entry, &gy, &w, &mut dx)
        .expect_err("no tensor-core entry in an f32 module");
    assert!(
        matches!(&err, LaunchError::InvalidDim { name: "layout", reason, .. }
            if reason.contains(entry) && reason.contains(ENTRY_BWD_DATA)),
        "{err}"
    );
    assert!(dev.take_launch_log().is_empty());
}

/// The ResNet-like 3 × 3 layer, 64 → 64 channels, padding 1, on 16 × 16 images (`batch`).
fn resnet_3x3(batch: u32) -> Case {
    Case {
        name: "resnet 3x3 64→64",
        cfg: Conv2dConfig::new(64, 64, 3).with_padding(1, 1),
        shape: shape(batch, 16, 16),
    }
}

/// The NHWC ResNet layer's config as the tests run it (f16, sm_80).
fn sm80_f16(batch: u32) -> Conv2dConfig {
    Conv2dConfig {
        dtype: DType::F16,
        arch: Arch::Sm80,
        layout: Layout::Nhwc,
        ..resnet_3x3(batch).cfg
    }
}

/// The launch record of `entry` among `log`, its summary printed per output.
fn record<'a>(log: &'a [LaunchRecord], entry: &str, outputs: u64) -> &'a LaunchRecord {
    for r in log {
        eprintln!("{}", counters_summary(r, outputs as f64));
    }
    log.iter()
        .find(|r| r.entry == entry)
        .unwrap_or_else(|| panic!("{entry} did not run"))
}

/// The counters of a tensor-core launch of `tiles`: exactly the `m16n8k16` count its tile
/// implies ([`GemmTiles::mma`]), every operand byte by `cp.async` and no `ld.global` at all
/// (the ResNet layer's operands all move in 16-byte chunks), conflict-free `ldmatrix` (one wavefront per 8 × 8 matrix, `.trans`
/// or not), global load efficiency ≥ 0.9, at most `instructions` per output and
/// `factor` shared wavefronts ÷ the fewest possible, and at least `share` of the
/// instructions on the tensor cores.
fn assert_tensor_core(c: &Counters, tiles: GemmTiles, outputs: u64, bounds: Bounds) {
    assert_eq!(c.mma_instructions, tiles.mma());
    assert_eq!(c.cp_async_bytes, tiles.cp_async_bytes());
    assert_eq!(c.global_load_requests, 0);
    assert_eq!(
        c.mma_flops,
        c.mma_instructions * 2 * 16 * 8 * 16,
        "m16n8k16"
    );
    let per_matrix = c.ldmatrix_wavefronts_per_matrix();
    assert!(
        per_matrix <= 1.0 + 1e-9,
        "ldmatrix wavefronts/matrix {per_matrix}"
    );
    let efficiency = c.global_load_efficiency();
    assert!(efficiency >= 0.9, "global load efficiency {efficiency}");
    let per_output = c.instructions.total() as f64 / outputs as f64;
    assert!(
        per_output <= bounds.instructions,
        "instructions/output {per_output}"
    );
    let measured = c.shared_bank_conflict_factor();
    assert!(
        measured <= bounds.factor,
        "shared bank-conflict factor {measured}"
    );
    let share = c.instructions.tensor_core as f64 / c.instructions.total() as f64;
    assert!(share >= bounds.share, "tensor-core share {share}");
}

/// What [`assert_tensor_core`] allows.
struct Bounds {
    /// The most instructions per output.
    instructions: f64,
    /// The most shared wavefronts ÷ the fewest possible.
    factor: f64,
    /// The least share of instructions on the tensor cores.
    share: f64,
}

/// Backward-data counters of the ResNet 3 × 3 layer (f16, sm_80): the tensor-core entry, on
/// 64 × 64 tiles (`Cg = 64`: `⌈H·W/64⌉ · ⌈Cg/64⌉ · N·G` blocks × `⌈9·Og/32⌉` K tiles × 64
/// mma); every
/// `gy` and weight byte arrives by 16-byte `cp.async` (the weight staged by reduction
/// index, read by `ldmatrix.trans`): no `ld.global` at all; `ldmatrix` conflict-free.
#[test]
fn nhwc_backward_data_counters_resnet_3x3() {
    let (log, _) = run_backward_data::<f16>(&resnet_3x3(1), DType::F16, Arch::Sm80, 21);
    let outputs = 16 * 16 * 64;
    let entry = ENTRY_BWD_DATA_IMPLICIT_GEMM;
    let c = &record(&log, entry, outputs).counters;
    let tiles = GemmTiles::new(&sm80_f16(1), entry, [16 * 16, 64, 9 * 64], 1);
    assert_eq!(tiles.tile, [64, 64]);
    assert_tensor_core(c, tiles, outputs, BWD_DATA_BOUNDS);
}

/// Backward-filter counters of the ResNet 3 × 3 layer (batch 2, f16, sm_80): the tensor-core
/// entry issues exactly `⌈Og/64⌉ · ⌈9·Cg/64⌉ · G` blocks × `⌈N·OH·OW/32⌉` K tiles × 64 mma;
/// both operands staged pixel-major by 16-byte `cp.async` (a request copies 64 contiguous
/// bytes of each pixel it touches: whole sectors) and read by `ldmatrix.trans`: no
/// `ld.global` at all, `ldmatrix` conflict-free.
#[test]
fn nhwc_backward_filter_counters_resnet_3x3() {
    let (log, _) = run_backward_filter::<f16>(&resnet_3x3(2), DType::F16, Arch::Sm80, 23);
    let outputs = 64 * 9 * 64;
    let entry = ENTRY_BWD_FILTER_IMPLICIT_GEMM;
    let c = &record(&log, entry, outputs).counters;
    let tiles = GemmTiles::new(&sm80_f16(2), entry, [64, 9 * 64, 2 * 16 * 16], 1);
    assert_eq!(tiles.tile, [64, 64]);
    assert_tensor_core(c, tiles, outputs, BWD_FILTER_BOUNDS);
}

/// The tensor-core backward-data on the ResNet layer (f16, sm_80). Instructions per `dx`
/// element: measured 197.4 with the weight gathered lane → channel (tensor-core share
/// 0.046), 86.0 with it staged by reduction index from `cp.async` chunks and read by
/// `ldmatrix.trans` (share 0.105). Shared wavefronts ÷ the fewest possible: measured 1.000
/// (conflict-free `ldmatrix` and copies).
const BWD_DATA_BOUNDS: Bounds = Bounds {
    instructions: 90.0,
    factor: 1.05,
    share: 0.10,
};
/// The tensor-core backward-filter on the ResNet layer, batch 2 (f16, sm_80). Instructions
/// per `dw` element: measured 411.4 with both operands gathered element-wise lane → channel
/// (tensor-core share 0.019), 70.4 with both staged pixel-major from `cp.async` chunks and
/// read by `ldmatrix.trans` (share 0.114; 81.8 and 0.098 while each thread's two chunks
/// were two pixels, each located per tile). Shared wavefronts ÷ the fewest possible:
/// measured 1.000.
const BWD_FILTER_BOUNDS: Bounds = Bounds {
    instructions: 74.0,
    factor: 1.05,
    share: 0.11,
};
