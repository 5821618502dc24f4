//! conv2d kernels in the interpreter (every sanitizer check on: a finding fails the launch and
//! the test) against the f64 host references, for every dtype, over the issue's shapes and
//! seeded random ones; plus the adjoint identity of backward-data, determinism of
//! backward-filter, and the launch functions' typed errors on bad input.
//!
//! Tolerances, as `max |got − want| / max |want|` over a tensor (the reference sees the same
//! rounded inputs the kernels do): f32 ≤ 1e-5, f16 ≤ 2e-3, bf16 ≤ 2e-2 (f32 accumulation, one
//! rounding of the output), f64 ≤ 1e-12. The adjoint identity `⟨conv(x), g⟩ = ⟨x,
//! bwd_data(g)⟩` is checked with kernel outputs on both sides, to the same tolerance relative
//! to `Σ|y·g| + Σ|x·dx|`.

#![cfg(feature = "sim")]

mod conv_support;

use half::{bf16, f16};
use ptxforge_runtime::dtype::DType;
use ptxforge_runtime::launch::{
    Backend, DeviceBuffer, Element, LaunchError, LaunchRecord, SimBackend,
};
use ptxforge_runtime::templates::conv::kernels::{
    ENTRY_BWD_DATA, ENTRY_BWD_DATA_CHANNELS_LAST, ENTRY_BWD_DATA_IMPLICIT_GEMM, ENTRY_BWD_FILTER,
    ENTRY_BWD_FILTER_CHANNELS_LAST, ENTRY_BWD_FILTER_CHANNELS_LAST_SPLIT,
    ENTRY_BWD_FILTER_IMPLICIT_GEMM, ENTRY_BWD_FILTER_REDUCE, ENTRY_BWD_FILTER_SPLIT, ENTRY_DIRECT,
    ENTRY_FILTER_TO_CHANNELS_LAST, ENTRY_GRADIENT_TO_CHANNELS_LAST, ENTRY_IMPLICIT_GEMM,
    ENTRY_IMPLICIT_GEMM_CHANNELS_LAST, ENTRY_IMPLICIT_GEMM_POINTWISE, ENTRY_TO_CHANNELS_LAST,
};
use ptxforge_runtime::templates::conv::launch::{
    backward_data, backward_data_with, backward_filter, backward_filter_channels_last_sliced,
    backward_filter_with, forward, forward_1x1, forward_channels_last, forward_direct,
    forward_im2col, forward_implicit_gemm, forward_implicit_gemm_pointwise, forward_nhwc, Slices,
};
use ptxforge_runtime::templates::conv::reference::{self, to_channels_last};
use ptxforge_runtime::templates::conv::{
    Conv2dConfig, ConvDims, ConvShape, Layout, POINTWISE_PIXEL_RUN,
};
use ptxforge_runtime::templates::testing::{
    counters_summary, error_relative_to_max, from_f64, to_f64, HostFloat, SplitMix64,
};
use ptxforge_runtime::templates::tf32::{self, round_tf32};
use ptxforge_runtime::templates::KernelFamily;
use ptxforge_runtime::Arch;

use conv_support::{
    assert_close, backward_filter_cases, bias_entries, download, fuzz_cases_with, must, prepare,
    shape, tensor_core_cases, tolerance, Case, GemmTiles,
};

/// Seeded random cases of 1–3 channels per group ([`fuzz_cases_with`]).
fn fuzz_cases(seed: u64, count: usize) -> Vec<Case> {
    fuzz_cases_with(seed, count, &[1, 2, 3])
}

/// The issue's shapes, with small channel counts and images (odd sizes, batch 1 and 3).
fn issue_cases() -> Vec<Case> {
    let c = Conv2dConfig::new;
    vec![
        Case {
            name: "resnet 3x3 s1 p1 + bias",
            cfg: c(4, 6, 3).with_padding(1, 1).with_bias(true),
            shape: shape(1, 7, 9),
        },
        Case {
            name: "3x3 s2 p1, batch 3",
            cfg: c(3, 5, 3).with_stride(2, 2).with_padding(1, 1),
            shape: shape(3, 9, 8),
        },
        Case {
            name: "1x1 s2, groups 2 + bias",
            cfg: c(4, 6, 1).with_stride(2, 2).with_groups(2).with_bias(true),
            shape: shape(1, 7, 7),
        },
        Case {
            name: "1x1 s1 p1 (padding honoured)",
            cfg: c(3, 2, 1).with_padding(1, 1),
            shape: shape(3, 3, 5),
        },
        Case {
            name: "7x7 s2 p3 stem",
            cfg: c(3, 4, 7).with_stride(2, 2).with_padding(3, 3),
            shape: shape(1, 19, 21),
        },
        Case {
            name: "depthwise 3x3 (multiplier 2) + bias, batch 3",
            cfg: c(4, 8, 3).with_groups(4).with_padding(1, 1).with_bias(true),
            shape: shape(3, 6, 5),
        },
        Case {
            name: "groups 4",
            cfg: c(8, 12, 3).with_groups(4).with_padding(1, 1),
            shape: shape(1, 5, 7),
        },
        Case {
            name: "dilation 2",
            cfg: c(3, 4, 3).with_dilation(2, 2).with_padding(2, 2),
            shape: shape(1, 9, 11),
        },
        Case {
            name: "several direct tiles, 10 channels (two channel blocks)",
            cfg: c(2, 10, 3).with_padding(1, 1),
            shape: shape(1, 18, 33),
        },
        Case {
            name: "rectangular 2x5 kernel, stride (3, 2), groups 2",
            cfg: c(4, 6, 2)
                .with_kernel(2, 5)
                .with_stride(3, 2)
                .with_groups(2),
            shape: shape(2, 11, 12),
        },
        Case {
            name: "output 1x1, batch 1",
            cfg: c(2, 3, 3),
            shape: shape(1, 3, 3),
        },
        Case {
            name: "9x9 window (looped kernel rows)",
            cfg: c(2, 3, 9).with_padding(1, 2).with_bias(true),
            shape: shape(1, 10, 11),
        },
        Case {
            name: "1x70 window, stride 2 (looped kernel columns)",
            cfg: c(1, 2, 1).with_kernel(1, 70).with_stride(1, 2),
            shape: shape(1, 2, 75),
        },
        Case {
            name: "dilation 50: input tile in dynamic shared memory",
            cfg: c(1, 2, 3).with_dilation(50, 50),
            shape: shape(1, 102, 101),
        },
    ]
}

#[test]
fn the_dynamic_shared_memory_case_is_dynamic() {
    let case = issue_cases().pop().expect("cases");
    assert_eq!(
        case.cfg.direct_tile().shared_kind,
        ptxforge_runtime::templates::attention::SharedMemoryKind::Dynamic
    );
}

fn dot(a: &[f64], b: &[f64]) -> (f64, f64) {
    a.iter()
        .zip(b)
        .fold((0.0, 0.0), |(s, m), (x, y)| (s + x * y, m + (x * y).abs()))
}

/// Rounded random data: the device copy and the f64 values the reference sees.
struct Data<T: Element> {
    host: Vec<f64>,
    dev: DeviceBuffer<SimBackend, T>,
}

fn random<T: HostFloat + Element>(dev: &SimBackend, rng: &mut SplitMix64, len: usize) -> Data<T> {
    let rounded: Vec<T> = from_f64(&rng.vec_f64(len, -1.0, 1.0));
    Data {
        host: to_f64(&rounded),
        dev: dev.upload(&rounded).expect("upload"),
    }
}

/// Every path of one case in one dtype on one arch against the references.
fn run_case<T: HostFloat + Element>(case: &Case, dtype: DType, arch: Arch, seed: u64) {
    let cfg = Conv2dConfig {
        dtype,
        arch,
        ..case.cfg
    };
    let label = format!(
        "{} [{}] {dtype} {arch} {:?}",
        case.name,
        cfg.matrix_name(),
        case.shape
    );
    let ptx = cfg.compile().unwrap_or_else(|e| panic!("{label}: {e}")).ptx;
    let tol = tolerance(dtype);
    let dev = SimBackend::new();
    let mut rng = SplitMix64::new(seed);
    let s = &case.shape;
    let dims = cfg.check_shape(s, true).expect("valid shape");
    let x = random::<T>(&dev, &mut rng, dims.input_len(&cfg));
    let w = random::<T>(&dev, &mut rng, ConvDims::weight_len(&cfg));
    let b = random::<T>(&dev, &mut rng, cfg.out_channels as usize);
    let gy = random::<T>(&dev, &mut rng, dims.output_len(&cfg));
    let bias = cfg.bias.then_some(&b.dev);
    let host_bias = cfg.bias.then_some(b.host.as_slice());
    let want_y = reference::forward(&cfg, s, &x.host, &w.host, host_bias).expect("reference");

    let mut y = dev.alloc::<T>(dims.output_len(&cfg)).expect("alloc");
    must(
        &label,
        forward_direct(&cfg, &dev, &ptx, s, &x.dev, &w.dev, bias, &mut y),
    );
    assert_close(
        &format!("{label}: direct"),
        &download(&dev, &y),
        &want_y,
        tol,
    );

    if cfg.has_tensor_core_forward() {
        let mut y_tc = dev.alloc::<T>(dims.output_len(&cfg)).expect("alloc");
        must(
            &label,
            forward_implicit_gemm(&cfg, &dev, &ptx, s, &x.dev, &w.dev, bias, &mut y_tc),
        );
        assert_close(
            &format!("{label}: implicit GEMM (tensor cores)"),
            &download(&dev, &y_tc),
            &want_y,
            tol,
        );
    }

    let mut cols = dev.alloc::<T>(dims.im2col_len(&cfg)).expect("alloc");
    let mut y2 = dev.alloc::<T>(dims.output_len(&cfg)).expect("alloc");
    must(
        &label,
        forward_im2col(
            &cfg, &dev, &ptx, s, &x.dev, &w.dev, bias, &mut cols, &mut y2,
        ),
    );
    let want_cols = reference::im2col(&cfg, s, &x.host).expect("reference");
    assert_eq!(
        download(&dev, &cols),
        want_cols,
        "{label}: im2col is an exact copy"
    );
    assert_close(
        &format!("{label}: im2col + gemm"),
        &download(&dev, &y2),
        &want_y,
        tol,
    );

    if cfg.has_pointwise() {
        let mut y3 = dev.alloc::<T>(dims.output_len(&cfg)).expect("alloc");
        must(
            &label,
            forward_1x1(&cfg, &dev, &ptx, s, &x.dev, &w.dev, bias, &mut y3),
        );
        assert_close(&format!("{label}: 1x1"), &download(&dev, &y3), &want_y, tol);
    }

    let mut dx = dev.alloc::<T>(dims.input_len(&cfg)).expect("alloc");
    must(
        &label,
        backward_data(&cfg, &dev, &ptx, s, &gy.dev, &w.dev, &mut dx),
    );
    let got_dx = download(&dev, &dx);
    let want_dx = reference::backward_data(&cfg, s, &gy.host, &w.host).expect("reference");
    assert_close(&format!("{label}: backward-data"), &got_dx, &want_dx, tol);

    let (got_dw, got_db) = run_backward_filter(&label, &cfg, (&dev, &ptx), s, &x.dev, &gy.dev);
    let (want_dw, want_db) =
        reference::backward_filter(&cfg, s, &x.host, &gy.host).expect("reference");
    assert_close(
        &format!("{label}: backward-filter dw"),
        &got_dw,
        &want_dw,
        tol,
    );
    if let Some(want_db) = want_db {
        assert_close(
            &format!("{label}: backward-filter db"),
            &got_db,
            &want_db,
            tol,
        );
    }

    // Adjoint identity with kernel outputs on both sides (bias-free forward).
    let plain = Conv2dConfig { bias: false, ..cfg };
    let plain_ptx = plain.compile().expect("compiles").ptx;
    let mut y0 = dev.alloc::<T>(dims.output_len(&cfg)).expect("alloc");
    must(
        &label,
        forward_direct(&plain, &dev, &plain_ptx, s, &x.dev, &w.dev, None, &mut y0),
    );
    let y0 = download(&dev, &y0);
    assert_adjoint(&label, (&y0, &gy.host), (&x.host, &got_dx), tol);
}

/// `backward_filter` (the entry it picks) of `x` and `gy`: `dw` and (with a bias) `db`.
fn run_backward_filter<T: HostFloat + Element>(
    label: &str,
    cfg: &Conv2dConfig,
    (dev, ptx): (&SimBackend, &str),
    s: &ConvShape,
    x: &DeviceBuffer<SimBackend, T>,
    gy: &DeviceBuffer<SimBackend, T>,
) -> (Vec<f64>, Vec<f64>) {
    let mut dw = dev.alloc::<T>(ConvDims::weight_len(cfg)).expect("alloc");
    let mut db = dev.alloc::<T>(cfg.out_channels as usize).expect("alloc");
    let db_arg = cfg.bias.then_some(&mut db);
    must(
        label,
        backward_filter(cfg, dev, ptx, s, x, gy, &mut dw, db_arg),
    );
    (download(dev, &dw), download(dev, &db))
}

/// The adjoint identity `⟨y, g⟩ = ⟨x, dx⟩` (with `y = conv(x)`, `dx = bwd_data(g)`) to `tol`
/// relative to `Σ|y·g| + Σ|x·dx|`.
fn assert_adjoint(label: &str, (y, g): (&[f64], &[f64]), (x, dx): (&[f64], &[f64]), tol: f64) {
    let (l, l_mag) = dot(y, g);
    let (r, r_mag) = dot(x, dx);
    assert!(
        (l - r).abs() <= tol * (l_mag + r_mag).max(1e-30),
        "{label}: adjoint ⟨conv(x), g⟩ = {l} vs ⟨x, bwd_data(g)⟩ = {r}"
    );
}

fn run_all_dtypes(cases: &[Case], seed: u64) {
    const ARCHS: [Arch; 3] = [Arch::Sm70, Arch::Sm80, Arch::Sm90];
    for (i, case) in cases.iter().enumerate() {
        let arch = ARCHS[i % ARCHS.len()];
        let seed = seed + i as u64;
        run_case::<f32>(case, DType::F32, arch, seed);
        run_case::<f64>(case, DType::F64, arch, seed);
        run_case::<f16>(case, DType::F16, arch, seed);
        run_case::<bf16>(case, DType::BF16, ARCHS[(i + 1) % ARCHS.len()], seed);
    }
}

#[test]
fn issue_shapes_every_dtype() {
    run_all_dtypes(&issue_cases(), 100);
}

#[test]
fn fuzzed_shapes_every_dtype() {
    run_all_dtypes(&fuzz_cases(2024, 8), 200);
}

#[test]
fn backward_filter_is_deterministic_under_block_shuffling() {
    let cfg = Conv2dConfig::new(4, 6, 3)
        .with_padding(1, 1)
        .with_groups(2)
        .with_bias(true);
    let ptx = cfg.compile().expect("compiles").ptx;
    let s = shape(3, 9, 7);
    let dims = cfg.check_shape(&s, false).expect("valid");
    let mut results = Vec::new();
    for shuffle in [None, Some(1), Some(2)] {
        let dev = SimBackend::with_options(ptxforge_sim::Options {
            shuffle_blocks: shuffle,
            ..ptxforge_sim::Options::default()
        });
        let mut rng = SplitMix64::new(5);
        let x = random::<f32>(&dev, &mut rng, dims.input_len(&cfg));
        let gy = random::<f32>(&dev, &mut rng, dims.output_len(&cfg));
        let mut dw = dev.alloc::<f32>(ConvDims::weight_len(&cfg)).expect("alloc");
        let mut db = dev.alloc::<f32>(6).expect("alloc");
        must(
            "bwd",
            backward_filter(
                &cfg,
                &dev,
                &ptx,
                &s,
                &x.dev,
                &gy.dev,
                &mut dw,
                Some(&mut db),
            ),
        );
        let bits = |v: Vec<f32>| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        results.push((
            bits(dev.download(&dw).unwrap()),
            bits(dev.download(&db).unwrap()),
        ));
    }
    assert!(
        results.windows(2).all(|w| w[0] == w[1]),
        "bitwise identical results"
    );
}

/// The interpreter's memory counters for the main operand loads of ResNet-like layers (f32:
/// the direct and GEMM kernels' shared-memory reads must be free of bank conflicts).
#[test]
fn coalescing_and_bank_conflicts() {
    let layers = [
        ("3x3 s1 p1", Conv2dConfig::new(8, 8, 3).with_padding(1, 1)),
        (
            "7x7 s2 p3",
            Conv2dConfig::new(3, 8, 7)
                .with_stride(2, 2)
                .with_padding(3, 3),
        ),
        (
            "depthwise 3x3",
            Conv2dConfig::new(8, 8, 3).with_groups(8).with_padding(1, 1),
        ),
    ];
    for (name, cfg) in layers {
        let ptx = cfg.compile().expect("compiles").ptx;
        let s = shape(1, 32, 32);
        let dims = cfg.check_shape(&s, true).expect("valid");
        let dev = SimBackend::new();
        let mut rng = SplitMix64::new(9);
        let x = random::<f32>(&dev, &mut rng, dims.input_len(&cfg));
        let w = random::<f32>(&dev, &mut rng, ConvDims::weight_len(&cfg));
        let gy = random::<f32>(&dev, &mut rng, dims.output_len(&cfg));
        let mut y = dev.alloc::<f32>(dims.output_len(&cfg)).unwrap();
        let mut cols = dev.alloc::<f32>(dims.im2col_len(&cfg)).unwrap();
        let mut dx = dev.alloc::<f32>(dims.input_len(&cfg)).unwrap();
        let mut dw = dev.alloc::<f32>(ConvDims::weight_len(&cfg)).unwrap();
        must(
            "direct",
            forward_direct(&cfg, &dev, &ptx, &s, &x.dev, &w.dev, None, &mut y),
        );
        must(
            "im2col",
            forward_im2col(
                &cfg, &dev, &ptx, &s, &x.dev, &w.dev, None, &mut cols, &mut y,
            ),
        );
        must(
            "bwd data",
            backward_data(&cfg, &dev, &ptx, &s, &gy.dev, &w.dev, &mut dx),
        );
        must(
            "bwd filter",
            backward_filter(&cfg, &dev, &ptx, &s, &x.dev, &gy.dev, &mut dw, None),
        );
        for record in dev.take_launch_log() {
            let c = &record.counters;
            eprintln!(
                "{name:<14} {:<18} load efficiency {:.3}, store efficiency {:.3}, shared \
                 wavefronts/request {:.3} ({} requests), instructions {}",
                record.entry,
                c.global_load_efficiency(),
                c.global_store_efficiency(),
                c.shared_wavefronts_per_request(),
                c.shared_requests,
                c.instructions.total()
            );
            // Against the fewest wavefronts: the direct kernel's weight reads are
            // `ld.shared.v4` broadcasts (4 wavefronts each, none of them a conflict).
            if record.entry == "conv2d_direct" || record.entry == "conv2d_gemm" {
                assert!(
                    c.shared_bank_conflict_factor() <= 1.1,
                    "{name}: {}: shared memory bank conflicts",
                    record.entry
                );
            }
        }
    }
}

// ---- bad input --------------------------------------------------------------------------

struct BadInput {
    cfg: Conv2dConfig,
    ptx: String,
    dev: SimBackend,
}

impl BadInput {
    fn new(cfg: Conv2dConfig) -> Self {
        Self {
            ptx: cfg.compile().expect("compiles").ptx,
            cfg,
            dev: SimBackend::new(),
        }
    }

    fn buf<T: Element + Default>(&self, len: usize) -> DeviceBuffer<SimBackend, T> {
        self.dev.upload(&vec![T::default(); len]).expect("upload")
    }

    fn direct<T: Element + Default>(
        &self,
        s: ConvShape,
        lens: [usize; 4],
        bias: bool,
    ) -> Result<ConvDims, LaunchError> {
        let (x, w, b) = (
            self.buf::<T>(lens[0]),
            self.buf::<T>(lens[1]),
            self.buf::<T>(lens[2]),
        );
        let mut y = self.buf::<T>(lens[3]);
        forward_direct(
            &self.cfg,
            &self.dev,
            &self.ptx,
            &s,
            &x,
            &w,
            bias.then_some(&b),
            &mut y,
        )
    }
}

#[test]
fn bad_input_is_a_typed_error_before_launch() {
    let cfg = Conv2dConfig::new(2, 3, 3).with_bias(true);
    let t = BadInput::new(cfg);
    let s = shape(1, 5, 5); // out 3 × 3
    let ok = [50, 54, 3, 27];
    assert!(t.direct::<f32>(s, ok, true).is_ok());
    // Mismatched lengths.
    for (i, name) in ["x", "w", "bias", "y"].into_iter().enumerate() {
        let mut lens = ok;
        lens[i] += 1;
        assert!(
            matches!(t.direct::<f32>(s, lens, true), Err(LaunchError::BufferLength { name: n, .. }) if n == name),
            "{name}"
        );
    }
    // Bias presence must match the config.
    assert!(matches!(
        t.direct::<f32>(s, ok, false),
        Err(LaunchError::BufferLength {
            name: "bias",
            expected: 3,
            actual: 0
        })
    ));
    // Element type against the dtype.
    assert!(matches!(
        t.direct::<f64>(s, ok, true),
        Err(LaunchError::ArgumentType { index: 0, .. })
    ));
    // Zero-sized dimensions.
    for (zero, name) in [
        (shape(0, 5, 5), "batch"),
        (shape(1, 0, 5), "height"),
        (shape(1, 5, 0), "width"),
    ] {
        assert!(
            matches!(t.direct::<f32>(zero, ok, true), Err(LaunchError::InvalidDim { name: n, value: 0, .. }) if n == name),
            "{name}"
        );
    }
    // Input smaller than the (dilated) kernel.
    assert!(matches!(
        t.direct::<f32>(shape(1, 2, 5), ok, true),
        Err(LaunchError::InvalidDim {
            name: "height",
            value: 2,
            ..
        })
    ));
    let dilated = BadInput::new(Conv2dConfig::new(1, 1, 3).with_dilation(1, 3));
    assert!(matches!(
        dilated.direct::<f32>(shape(1, 9, 6), [54, 9, 0, 0], false),
        Err(LaunchError::InvalidDim {
            name: "width",
            value: 6,
            ..
        })
    ));
    // Index overflow: tensors past the 32-bit index range.
    assert!(matches!(
        t.direct::<f32>(shape(60_000, 200, 200), ok, true),
        Err(LaunchError::InvalidDim { name: "input", .. })
    ));
    assert!(matches!(
        t.direct::<f32>(shape(30_000, 200, 200), ok, true),
        Err(LaunchError::InvalidDim { name: "x", .. })
    ));
    // No grid limit: tiles past 65535 blocks are walked (`conv_grid_limits`).
    // The 1×1 entry exists only for 1×1 kernels.
    let (x, w) = (t.buf::<f32>(50), t.buf::<f32>(54));
    let mut y = t.buf::<f32>(27);
    assert!(matches!(
        forward_1x1(&cfg, &t.dev, &t.ptx, &s, &x, &w, None, &mut y),
        Err(LaunchError::InvalidDim { name: "kernel", .. })
    ));
    // Backward functions check their buffers too.
    let gy = t.buf::<f32>(27);
    let mut dx = t.buf::<f32>(49);
    assert!(matches!(
        backward_data(&cfg, &t.dev, &t.ptx, &s, &gy, &w, &mut dx),
        Err(LaunchError::BufferLength {
            name: "dx",
            expected: 50,
            actual: 49
        })
    ));
    let mut dw = t.buf::<f32>(54);
    assert!(matches!(
        backward_filter(&cfg, &t.dev, &t.ptx, &s, &x, &gy, &mut dw, None),
        Err(LaunchError::BufferLength {
            name: "db",
            expected: 3,
            actual: 0
        })
    ));
    // Nothing ran for any of the rejected calls.
    assert_eq!(t.dev.take_launch_log().len(), 1);
}

/// Prints one launch's interpreter counters (per output of the layer: instructions; shares,
/// efficiencies and wavefronts per request) for the report.
fn print_counters(tag: &str, record: &LaunchRecord, outputs: f64) {
    eprintln!("{tag} {}", counters_summary(record, outputs));
}

// ---- tensor cores ------------------------------------------------------------------------

/// The issue's ResNet-like 3 × 3 layer, 64 → 64 channels, padding 1, bias, on a 16 × 16 image.
fn resnet_3x3() -> Case {
    Case {
        name: "resnet 3x3 64→64",
        cfg: Conv2dConfig::new(64, 64, 3)
            .with_padding(1, 1)
            .with_bias(true),
        shape: shape(1, 16, 16),
    }
}

/// A small ResNet-like 3×3 layer (64 → 64 channels, padding 1, bias, 16 × 16 image) in f16 on
/// sm_80, in both layouts: the CUDA-core kernel (`conv2d_direct` / `conv2d_nhwc`) vs the
/// tensor-core implicit GEMM, all checked against the reference; the implicit GEMM issues
/// exactly the mma count its tile implies (`GemmTiles`: the NCHW gathers' 64 × 64, the
/// 128 × 64 of NHWC and the channels-last entry, asserted) with conflict-free `ldmatrix`, and
/// in NHWC moves A and B with 16-byte `cp.async` only.
#[test]
fn tensor_core_counters_resnet_3x3() {
    let case = resnet_3x3();
    let pixels = 16 * 16u64;
    let outputs = (pixels * 64) as f64;
    for layout in Layout::ALL {
        let (dev, ran) = run_forward_on::<f16>(&case, DType::F16, Arch::Sm80, layout, 11);
        assert!(ran.contains(&"conv2d_implicit_gemm"));
        for record in dev.take_launch_log() {
            let c = &record.counters;
            print_counters(&layout.to_string(), &record, outputs);
            let channels_last = record.entry == "conv2d_implicit_gemm_channels_last";
            if record.entry == "conv2d_implicit_gemm" || channels_last {
                let cfg = Conv2dConfig {
                    dtype: DType::F16,
                    arch: Arch::Sm80,
                    layout,
                    ..case.cfg
                };
                let tiles = GemmTiles::new(&cfg, &record.entry, [pixels, 64, 64 * 9], 1);
                let tall = layout == Layout::Nhwc || channels_last;
                assert_eq!(tiles.tile, if tall { [128, 64] } else { [64, 64] });
                assert_eq!(c.mma_instructions, tiles.mma());
                assert!(c.ldmatrix_wavefronts_per_request() <= 4.0 + 1e-9);
                // NCHW gathers A lane → pixel: a warp reads 32 consecutive `iw` of one tap.
                assert!(c.global_load_efficiency() >= 0.9, "{layout}");
                if layout == Layout::Nhwc || channels_last {
                    // Every operand byte arrives by cp.async; the only global loads left are
                    // the epilogue's 8 bias reads per warp.
                    assert_eq!(c.cp_async_bytes, tiles.cp_async_bytes());
                    assert_eq!(c.global_load_requests, tiles.blocks * 4 * 8);
                }
                if channels_last {
                    // The staged epilogue: 16-byte runs along the pixels, whole sectors.
                    let stores = c.global_store_efficiency();
                    assert!(
                        stores >= 0.99,
                        "{}: store efficiency {stores}",
                        record.entry
                    );
                }
            } else if record.entry.ends_with("to_channels_last") {
                // The pre-passes: whole sectors both ways, conflict-free tiles.
                assert!(c.global_load_efficiency() >= 0.99, "{}", record.entry);
                assert!(c.shared_bank_conflict_factor() <= 1.0 + 1e-9);
                if record.entry == "conv2d_to_channels_last" {
                    // 16-byte loads along the pixels and stores along the channels, no tile.
                    assert!(c.global_store_efficiency() >= 0.99);
                    assert_eq!(c.shared_wavefronts, 0);
                }
                assert_eq!(c.mma_instructions, 0);
            } else {
                assert_eq!(c.mma_instructions, 0);
            }
        }
    }
}

/// The implicit GEMMs' done-when bars on three 64 → 64 layers on a 16 × 16 image (the ResNet
/// 3 × 3, a 1 × 1 and a stride-2 3 × 3): every tensor-core entry (forward NCHW and NHWC,
/// the NCHW channels-last forward and its two pre-passes, the NCHW pointwise forward,
/// backward-data, backward-filter), f16
/// and tf32, fetches at most 1/0.9 sectors per useful
/// byte (global load efficiency ≥ 0.9) and stores to shared memory within 5% of the fewest
/// wavefronts (bank conflict factor ≤ 1.05). The 28-wide rows (112 bytes of f32, so a
/// warp's 32 consecutive pixels start anywhere in a sector) hold the NCHW lane → pixel
/// gathers to it only through the sector windows (`Strategy::Windows`), f32 included.
#[test]
fn implicit_gemm_counter_bars() {
    let c = Conv2dConfig::new;
    let layers = [
        (
            "3x3 p1",
            c(64, 64, 3).with_padding(1, 1).with_bias(true),
            16,
        ),
        ("1x1", c(64, 64, 1), 16),
        (
            "3x3 s2 p1",
            c(64, 64, 3).with_stride(2, 2).with_padding(1, 1),
            16,
        ),
        // ResNet-50 conv3_x's 3 × 3 on its 28-wide rows, at 32 channels.
        ("3x3 p1 w28", c(32, 32, 3).with_padding(1, 1), 28),
    ];
    let mut failures = Vec::new();
    for (name, layer, size) in layers {
        for dtype in [DType::F16, DType::F32] {
            let cfg = Conv2dConfig {
                dtype,
                arch: Arch::Sm80,
                ..layer.with_allow_tf32(dtype == DType::F32)
            };
            let records = match dtype {
                DType::F16 => implicit_gemm_records::<f16>(&cfg, size),
                _ => implicit_gemm_records::<f32>(&cfg, size),
            };
            // f16 adds the channels-last forward: its pre-passes (no filter copy for a
            // 1 × 1, which adds the pointwise forward instead) and its GEMM.
            let expected = match dtype {
                DType::F16 => 9,
                _ => 6,
            };
            assert_eq!(records.len(), expected, "{name} {dtype}");
            for (pass, record, outputs) in records {
                let tag = format!("{name} {dtype} {pass}");
                print_counters(&tag, &record, outputs as f64);
                let (load_bar, bank_bar) = (0.9, 1.05);
                let c = &record.counters;
                let (load, banks) = (c.global_load_efficiency(), c.shared_bank_conflict_factor());
                if load < load_bar || banks > bank_bar {
                    failures.push(format!(
                        "{tag}: load efficiency {load:.3} (bar {load_bar}), bank conflict factor \
                         {banks:.3} (bar {bank_bar})"
                    ));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "below the bars:\n{}",
        failures.join("\n")
    );
}

/// Runs each implicit-GEMM entry of `cfg` once (forward, backward-data and backward-filter, in
/// both layouts) on a `size` × `size` image with random inputs: per entry the pass, its
/// launch record and its output count.
fn implicit_gemm_records<T: HostFloat + Element>(
    cfg: &Conv2dConfig,
    size: u32,
) -> Vec<(&'static str, LaunchRecord, usize)> {
    let s = shape(1, size, size);
    let dev = SimBackend::new();
    let mut rng = SplitMix64::new(23);
    let mut runs = Vec::new();
    for layout in Layout::ALL {
        let cfg = cfg.with_layout(layout);
        let ptx = cfg.compile().expect("compiles").ptx;
        let d = cfg.check_shape(&s, false).expect("valid shape");
        let x = random::<T>(&dev, &mut rng, d.input_len(&cfg));
        let w = random::<T>(&dev, &mut rng, ConvDims::weight_len(&cfg));
        let b = random::<T>(&dev, &mut rng, cfg.out_channels as usize);
        let bias = cfg.bias.then_some(&b.dev);
        let mut y = dev.alloc::<T>(d.output_len(&cfg)).expect("alloc");
        let run = forward_implicit_gemm(&cfg, &dev, &ptx, &s, &x.dev, &w.dev, bias, &mut y);
        must("forward", run);
        let [forward, data, filter] = match layout {
            Layout::Nchw => ["forward nchw", "backward-data nchw", "backward-filter nchw"],
            Layout::Nhwc => ["forward nhwc", "backward-data nhwc", "backward-filter nhwc"],
        };
        runs.push((forward, y.len()));
        if cfg.has_pointwise_implicit_gemm() {
            let run =
                forward_implicit_gemm_pointwise(&cfg, &dev, &ptx, &s, &x.dev, &w.dev, bias, &mut y);
            must("forward pointwise", run);
            runs.push(("forward pointwise", y.len()));
        }
        if cfg.has_channels_last_forward() {
            let run = forward_channels_last(&cfg, &dev, &ptx, &s, &x.dev, &w.dev, bias, &mut y);
            must("forward channels-last", run);
            if !cfg.has_pointwise() {
                runs.push(("filter pre-pass", y.len()));
            }
            runs.extend([
                ("input pre-pass", y.len()),
                ("forward channels-last", y.len()),
            ]);
        }
        let gy = random::<T>(&dev, &mut rng, d.output_len(&cfg));
        let mut dx = dev.alloc::<T>(d.input_len(&cfg)).expect("alloc");
        let entry = ENTRY_BWD_DATA_IMPLICIT_GEMM;
        let run = backward_data_with(&cfg, &dev, &ptx, &s, entry, &gy.dev, &w.dev, &mut dx);
        must("backward-data", run);
        runs.push((data, dx.len()));
        let mut dw = dev.alloc::<T>(ConvDims::weight_len(&cfg)).expect("alloc");
        let mut db = dev.alloc::<T>(cfg.out_channels as usize).expect("alloc");
        let db = cfg.bias.then_some(&mut db);
        let entry = ENTRY_BWD_FILTER_IMPLICIT_GEMM;
        let run = backward_filter_with(&cfg, &dev, &ptx, &s, entry, &x.dev, &gy.dev, &mut dw, db);
        must("backward-filter", run);
        runs.push((filter, dw.len()));
    }
    dev.take_launch_log()
        .into_iter()
        .filter(|r| {
            [
                "implicit_gemm",
                "implicit_gemm_split",
                "channels_last",
                "pointwise",
            ]
            .iter()
            .any(|end| r.entry.ends_with(end))
        })
        .zip(runs)
        .map(|(record, (pass, outputs))| (pass, record, outputs))
        .collect()
}

/// Runs the forward of `case` in `layout` with `dtype` on `arch` through every forward entry
/// the module has, each against the NCHW reference (transposed for NHWC). Returns the entries
/// run.
fn run_forward<T: HostFloat + Element>(
    case: &Case,
    dtype: DType,
    arch: Arch,
    layout: Layout,
    seed: u64,
) -> Vec<&'static str> {
    run_forward_on::<T>(case, dtype, arch, layout, seed).1
}

/// [`run_forward`], also returning the device (its launch log holds the counters).
fn run_forward_on<T: HostFloat + Element>(
    case: &Case,
    dtype: DType,
    arch: Arch,
    layout: Layout,
    seed: u64,
) -> (SimBackend, Vec<&'static str>) {
    let cfg = Conv2dConfig {
        dtype,
        arch,
        ..case.cfg.with_layout(layout)
    };
    let label = format!(
        "{} [{}] {layout} {dtype} {arch} {:?}",
        case.name,
        cfg.matrix_name(),
        case.shape
    );
    let ptx = cfg.compile().unwrap_or_else(|e| panic!("{label}: {e}")).ptx;
    let s = &case.shape;
    let dims = cfg.check_shape(s, false).expect("valid shape");
    let mut rng = SplitMix64::new(seed);
    let round = |v: Vec<f64>| to_f64(&from_f64::<T>(&v));
    let x = round(rng.vec_f64(dims.input_len(&cfg), -1.0, 1.0));
    let w = round(rng.vec_f64(ConvDims::weight_len(&cfg), -1.0, 1.0));
    let b = round(rng.vec_f64(cfg.out_channels as usize, -1.0, 1.0));
    let want =
        reference::forward(&cfg, s, &x, &w, cfg.bias.then_some(b.as_slice())).expect("reference");
    let (n, c_in, c_out) = (
        s.batch as usize,
        cfg.in_channels as usize,
        cfg.out_channels as usize,
    );
    let (x_dev, w_dev, want) = match layout {
        Layout::Nchw => (x, w, want),
        Layout::Nhwc => (
            to_channels_last(&x, [n, c_in, s.height as usize, s.width as usize]),
            to_channels_last(
                &w,
                [
                    c_out,
                    c_in / cfg.groups as usize,
                    cfg.kernel_h as usize,
                    cfg.kernel_w as usize,
                ],
            ),
            to_channels_last(&want, [n, c_out, dims.out_h as usize, dims.out_w as usize]),
        ),
    };
    let dev = SimBackend::new();
    let upload = |v: &[f64]| dev.upload(&from_f64::<T>(v)).expect("upload");
    let (x_buf, w_buf, b_buf) = (upload(&x_dev), upload(&w_dev), upload(&b));
    let bias = cfg.bias.then_some(&b_buf);
    let mut ran = Vec::new();
    type Forward<T> = fn(
        &Conv2dConfig,
        &SimBackend,
        &str,
        &ConvShape,
        &DeviceBuffer<SimBackend, T>,
        &DeviceBuffer<SimBackend, T>,
        Option<&DeviceBuffer<SimBackend, T>>,
        &mut DeviceBuffer<SimBackend, T>,
    ) -> Result<ConvDims, LaunchError>;
    let paths: [(&'static str, Forward<T>); 5] = [
        (
            "conv2d_implicit_gemm",
            forward_implicit_gemm::<SimBackend, T>,
        ),
        (
            "conv2d_implicit_gemm_pointwise",
            forward_implicit_gemm_pointwise::<SimBackend, T>,
        ),
        (
            "conv2d_implicit_gemm_channels_last",
            forward_channels_last::<SimBackend, T>,
        ),
        ("conv2d_nhwc", forward_nhwc::<SimBackend, T>),
        ("conv2d_direct", forward_direct::<SimBackend, T>),
    ];
    // The pointwise entry needs whole runs of 8 pixels per image.
    let whole_runs = dims.out_pixels().is_multiple_of(POINTWISE_PIXEL_RUN);
    for (entry, launch) in paths {
        let fits = entry != ENTRY_IMPLICIT_GEMM_POINTWISE || whole_runs;
        if !cfg.entry_names().contains(&entry) || !fits {
            continue;
        }
        let mut y = dev.alloc::<T>(dims.output_len(&cfg)).expect("alloc");
        must(
            &label,
            launch(&cfg, &dev, &ptx, s, &x_buf, &w_buf, bias, &mut y),
        );
        assert_close(
            &format!("{label}: {entry}"),
            &download(&dev, &y),
            &want,
            tolerance(dtype),
        );
        ran.push(entry);
    }
    let mut y = dev.alloc::<T>(dims.output_len(&cfg)).expect("alloc");
    must(
        &label,
        forward(&cfg, &dev, &ptx, s, &x_buf, &w_buf, bias, &mut y),
    );
    assert_close(
        &format!("{label}: forward"),
        &download(&dev, &y),
        &want,
        tolerance(dtype),
    );
    (dev, ran)
}

/// Every case (the issue's, the fuzzed ones, the tensor-core ones) through the tensor-core
/// implicit GEMM in both layouts: f16 on sm_80 and bf16 on sm_90 (the module must have the
/// entry), with `forward` choosing it.
#[test]
fn tensor_core_forward_every_case_both_layouts() {
    let mut cases = issue_cases();
    cases.extend(fuzz_cases(2024, 8));
    cases.extend(tensor_core_cases());
    for (i, case) in cases.iter().enumerate() {
        for layout in Layout::ALL {
            let seed = 300 + i as u64;
            let ran = run_forward::<f16>(case, DType::F16, Arch::Sm80, layout, seed);
            assert!(
                ran.contains(&"conv2d_implicit_gemm"),
                "{}: {ran:?}",
                case.name
            );
            let ran = run_forward::<bf16>(case, DType::BF16, Arch::Sm90, layout, seed);
            assert!(
                ran.contains(&"conv2d_implicit_gemm"),
                "{}: {ran:?}",
                case.name
            );
        }
    }
}

/// `forward`'s choice where no chunked route applies: NCHW layers of few output channels per
/// group (depthwise; 5 per group) stay on `conv2d_direct`, whose tensor-core GEMM would be
/// mostly padding, while 32 per group (`C_in` 3: no channels-last copy) and NHWC depthwise
/// (`conv2d_nhwc` tiles the same columns) take `conv2d_implicit_gemm`; every entry matches the
/// reference.
#[test]
fn forward_keeps_few_columns_per_group_on_cuda_cores() {
    let c = Conv2dConfig::new;
    let cases = [
        (
            "depthwise 3x3 24 groups 24",
            c(24, 24, 3).with_groups(24),
            Layout::Nchw,
            ENTRY_DIRECT,
        ),
        (
            "5x5 12→20 groups 4 (Og 5)",
            c(12, 20, 5).with_groups(4),
            Layout::Nchw,
            ENTRY_DIRECT,
        ),
        (
            "3x3 3→32 (Og 32, Cg 3)",
            c(3, 32, 3),
            Layout::Nchw,
            ENTRY_IMPLICIT_GEMM,
        ),
        (
            "depthwise 3x3 24 groups 24",
            c(24, 24, 3).with_groups(24),
            Layout::Nhwc,
            ENTRY_IMPLICIT_GEMM,
        ),
    ];
    for (i, (name, cfg, layout, entry)) in cases.into_iter().enumerate() {
        let case = Case {
            name,
            cfg: cfg.with_padding(1, 1),
            shape: shape(2, 7, 9),
        };
        let (dev, _) = run_forward_on::<f16>(&case, DType::F16, Arch::Sm80, layout, 60 + i as u64);
        let last = dev.take_launch_log().pop().expect("forward launched").entry;
        assert_eq!(last, entry, "{name} {layout}");
    }
}

/// NCHW shapes of the channels-last forward (`C_in` and `Cg` multiples of 8): the pre-pass's
/// ragged tiles in both directions (40 channels, 11 × 13 = 143
/// pixels), groups, rectangular filters, stride 2 and dilation, bias, batch 3. The input
/// copy's load width follows `H·W` (16-byte loads for multiples of 8, then 8, 4 and 2
/// bytes) and its lane tiling `C_in` (8, 16 or 32 channels per warp): the cases reach every
/// width (143 odd, 54 and 306 ≡ 2 mod 4, 196 ≡ 4 mod 8, 120 and 256 multiples of 8 that
/// leave a partial pixel tile) and every tiling (24, 16, 40, 64 and 128 channels). The GEMM
/// stages its NCHW output where `OH·OW` is a multiple of 8 (40 over batch 3, 48 over batch
/// 2: tiles across images and past `M`, channel tiles past `C_out`) and stores elements
/// otherwise (66, 49, 108, 306, 35). Two 1 × 1 layers whose `OH·OW` (49, 196) keeps the
/// pointwise GEMM out take this route without a filter copy.
fn channels_last_cases() -> Vec<Case> {
    let c = Conv2dConfig::new;
    vec![
        Case {
            name: "cl 3x3 s(2,1) p(1,0) 40→24 + bias, batch 2 (ragged pre-pass tiles)",
            cfg: c(40, 24, 3)
                .with_stride(2, 1)
                .with_padding(1, 0)
                .with_bias(true),
            shape: shape(2, 11, 13),
        },
        Case {
            name: "cl 2x3 groups 5 (Cg 8) 40→10 d(1,2) p(0,2), batch 3",
            cfg: c(40, 10, 2)
                .with_kernel(2, 3)
                .with_groups(5)
                .with_dilation(1, 2)
                .with_padding(0, 2),
            shape: shape(3, 6, 9),
        },
        Case {
            name: "cl 3x3 p1 64→72 + bias (two channel tiles, 18 × 17 image: 5 pixel tiles)",
            cfg: c(64, 72, 3).with_padding(1, 1).with_bias(true),
            shape: shape(1, 18, 17),
        },
        Case {
            name: "cl 3x3 s2 p1 24→40, batch 2, 14 × 14 (8-byte input loads, 8 channels a warp)",
            cfg: c(24, 40, 3).with_stride(2, 2).with_padding(1, 1),
            shape: shape(2, 14, 14),
        },
        Case {
            name: "cl 3x2 groups 2 (Cg 8) 16→20 + bias, batch 3, 12 × 10 (16-byte loads, ragged)",
            cfg: c(16, 20, 3)
                .with_kernel(3, 2)
                .with_groups(2)
                .with_padding(1, 0)
                .with_bias(true),
            shape: shape(3, 12, 10),
        },
        Case {
            name: "cl 3x3 p1 128→8, batch 2, 5 × 7 (four channel warps, 2-byte loads)",
            cfg: c(128, 8, 3).with_padding(1, 1),
            shape: shape(2, 5, 7),
        },
        Case {
            name: "cl 3x3 p1 32→72 + bias, batch 2, 8 × 6 (staged NCHW stores across images)",
            cfg: c(32, 72, 3).with_padding(1, 1).with_bias(true),
            shape: shape(2, 8, 6),
        },
        Case {
            name: "cl 1x1 24→16 + bias, batch 2, 7 × 7 (49 pixels: no pointwise GEMM, no w copy)",
            cfg: c(24, 16, 1).with_bias(true),
            shape: shape(2, 7, 7),
        },
        Case {
            name: "cl 1x1 groups 2 (Cg 16) 32→48, batch 2, 14 × 14 (196 pixels)",
            cfg: c(32, 48, 1).with_groups(2),
            shape: shape(2, 14, 14),
        },
    ]
}

/// Every NCHW case with the channels-last forward (the tensor-core cases that have it and
/// [`channels_last_cases`]) through `conv2d_to_channels_last` + `conv2d_implicit_gemm_channels_last`
/// against the reference, f16 on sm_80 and bf16 on sm_90, with `forward` choosing them.
#[test]
fn channels_last_forward_every_case() {
    let mut cases: Vec<Case> = tensor_core_cases()
        .into_iter()
        .filter(|case| {
            let cfg = Conv2dConfig {
                dtype: DType::F16,
                arch: Arch::Sm80,
                ..case.cfg.with_layout(Layout::Nchw)
            };
            cfg.has_channels_last_forward()
        })
        .collect();
    assert_eq!(
        cases.len(),
        4,
        "tensor-core cases with the channels-last forward"
    );
    cases.extend(channels_last_cases());
    let pointwise = cases.iter().filter(|case| case.cfg.has_pointwise());
    assert_eq!(pointwise.count(), 2, "1 × 1 cases");
    // Output channels that pad to 128 no further than to 64 (72, 120) take the 128 × 128
    // tile (its rings in dynamic shared memory), the others 128 × 64.
    let tile = |case: &Case| {
        let cfg = Conv2dConfig {
            dtype: DType::F16,
            arch: Arch::Sm80,
            ..case.cfg
        };
        cfg.implicit_gemm_tile(ENTRY_IMPLICIT_GEMM_CHANNELS_LAST)
    };
    let wide = cases.iter().filter(|&case| tile(case) == Some([128, 128]));
    assert!(wide.count() >= 3, "cases on the 128 × 128 tile");
    let tall = cases.iter().filter(|&case| tile(case) == Some([128, 64]));
    assert!(tall.count() >= 3, "cases on the 128 × 64 tile");
    for (i, case) in cases.iter().enumerate() {
        let seed = 700 + i as u64;
        for (dtype, arch) in [(DType::F16, Arch::Sm80), (DType::BF16, Arch::Sm90)] {
            let (dev, ran) = match dtype {
                DType::F16 => run_forward_on::<f16>(case, dtype, arch, Layout::Nchw, seed),
                _ => run_forward_on::<bf16>(case, dtype, arch, Layout::Nchw, seed),
            };
            assert!(
                ran.contains(&"conv2d_implicit_gemm_channels_last"),
                "{}: {ran:?}",
                case.name
            );
            // `forward` (the last launches) chose the pre-passes and the channels-last GEMM;
            // a 1 × 1 `w` is channels-last already.
            let log: Vec<String> = dev.take_launch_log().into_iter().map(|r| r.entry).collect();
            let mut want = vec![
                ENTRY_FILTER_TO_CHANNELS_LAST,
                ENTRY_TO_CHANNELS_LAST,
                ENTRY_IMPLICIT_GEMM_CHANNELS_LAST,
            ];
            if case.cfg.has_pointwise() {
                want.remove(0);
            }
            assert_eq!(log[log.len() - want.len()..], want, "{}", case.name);
        }
    }
}

/// `forward_channels_last` on a config without the entries (NHWC, a 1 × 1 at stride 2, odd
/// channels per group, f32 with tf32) is a typed error naming the layout and launches nothing;
/// a wrong `x` length is caught before the pre-passes run.
#[test]
fn channels_last_forward_rejects_what_it_does_not_cover() {
    let base = Conv2dConfig {
        dtype: DType::F16,
        arch: Arch::Sm80,
        ..Conv2dConfig::new(16, 16, 3).with_padding(1, 1)
    };
    let s = shape(1, 6, 6);
    let dev = SimBackend::new();
    let refused = [
        base.with_layout(Layout::Nhwc),
        Conv2dConfig {
            kernel_h: 1,
            kernel_w: 1,
            padding_h: 0,
            padding_w: 0,
            ..base.with_stride(2, 2)
        },
        Conv2dConfig {
            in_channels: 12,
            out_channels: 12,
            groups: 3,
            ..base
        },
        Conv2dConfig {
            dtype: DType::F32,
            ..base.with_allow_tf32(true)
        },
    ];
    for cfg in refused {
        assert!(!cfg.has_channels_last_forward(), "{}", cfg.matrix_name());
        let ptx = cfg.compile().expect("compiles").ptx;
        let d = cfg.check_shape(&s, false).expect("valid shape");
        let err = match cfg.dtype {
            DType::F32 => channels_last_with::<f32>(&cfg, &dev, &ptx, &s, d.input_len(&cfg)),
            _ => channels_last_with::<f16>(&cfg, &dev, &ptx, &s, d.input_len(&cfg)),
        };
        assert!(
            matches!(err, Err(LaunchError::InvalidDim { name: "layout", .. })),
            "{}: {err:?}",
            cfg.matrix_name()
        );
    }
    let ptx = base.compile().expect("compiles").ptx;
    let x_len = base
        .check_shape(&s, false)
        .expect("valid shape")
        .input_len(&base)
        + 1;
    let err = channels_last_with::<f16>(&base, &dev, &ptx, &s, x_len);
    assert!(
        matches!(err, Err(LaunchError::BufferLength { name: "x", .. })),
        "{err:?}"
    );
    assert!(dev.take_launch_log().is_empty());
}

/// NCHW 1 × 1 layers at stride 1 without padding (`conv2d_implicit_gemm_pointwise`: `x`
/// read in 16-byte chunks of 8 pixels of one channel): pixel tiles across images and past
/// `M` (72 and 160 pixels over batch 3 and 2), a ragged last K tile (`Cg` 40 and 24),
/// groups, dilation (no effect on one tap), bias, output channels on the 128 × 64 tile (24,
/// 64) and on the 128 × 128 tile (72 per group, 120, 200: three column tiles of 128, rings
/// in dynamic shared memory). f16 on sm_80 and bf16 on sm_90 against the reference, with
/// `forward` choosing the entry; per launch exactly the mma count and `cp.async` bytes the
/// tile implies, no other global loads but the bias, whole sectors both ways (the staged
/// NCHW stores), conflict-free shared memory.
#[test]
fn pointwise_forward_every_case() {
    let c = Conv2dConfig::new;
    let cases = [
        Case {
            name: "1x1 64→64 + bias, 16 × 16",
            cfg: c(64, 64, 1).with_bias(true),
            shape: shape(1, 16, 16),
        },
        Case {
            name: "1x1 40→24 + bias, batch 3, 4 × 6 (tiles across images, ragged K)",
            cfg: c(40, 24, 1).with_bias(true),
            shape: shape(3, 4, 6),
        },
        Case {
            name: "1x1 groups 2 (Cg 24, Og 72) 48→144, batch 2, 10 × 8",
            cfg: c(48, 144, 1).with_groups(2),
            shape: shape(2, 10, 8),
        },
        Case {
            name: "1x1 120→120 d2, batch 2, 8 × 8",
            cfg: c(120, 120, 1).with_dilation(2, 2),
            shape: shape(2, 8, 8),
        },
        Case {
            name: "1x1 16→200 + bias, 12 × 12 (three 128-channel tiles)",
            cfg: c(16, 200, 1).with_bias(true),
            shape: shape(1, 12, 12),
        },
    ];
    let mut tiles_seen = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let seed = 900 + i as u64;
        for (dtype, arch) in [(DType::F16, Arch::Sm80), (DType::BF16, Arch::Sm90)] {
            let cfg = Conv2dConfig {
                dtype,
                arch,
                ..case.cfg
            };
            assert!(cfg.has_pointwise_implicit_gemm(), "{}", case.name);
            let (dev, ran) = match dtype {
                DType::F16 => run_forward_on::<f16>(case, dtype, arch, Layout::Nchw, seed),
                _ => run_forward_on::<bf16>(case, dtype, arch, Layout::Nchw, seed),
            };
            assert!(
                ran.contains(&ENTRY_IMPLICIT_GEMM_POINTWISE),
                "{}: {ran:?}",
                case.name
            );
            let log = dev.take_launch_log();
            assert_eq!(
                log.last().map(|r| r.entry.as_str()),
                Some(ENTRY_IMPLICIT_GEMM_POINTWISE),
                "{}: forward's choice",
                case.name
            );
            let s = &case.shape;
            let pixels = u64::from(s.batch * s.height * s.width);
            let (og, cg) = (cfg.out_per_group(), cfg.in_per_group());
            let mnk = [pixels, u64::from(og), u64::from(cg)];
            let tiles = GemmTiles::new(&cfg, ENTRY_IMPLICIT_GEMM_POINTWISE, mnk, cfg.groups.into());
            tiles_seen.push(tiles.tile);
            for record in log
                .iter()
                .filter(|r| r.entry == ENTRY_IMPLICIT_GEMM_POINTWISE)
            {
                let c = &record.counters;
                let label = format!("{} {dtype}", case.name);
                print_counters(
                    &label,
                    record,
                    (pixels * u64::from(cfg.out_channels)) as f64,
                );
                assert_eq!(c.mma_instructions, tiles.mma(), "{label}");
                assert_eq!(c.cp_async_bytes, tiles.cp_async_bytes(), "{label}");
                assert_eq!(
                    c.global_load_requests,
                    bias_requests(&cfg, &tiles),
                    "{label}"
                );
                assert!(c.global_store_efficiency() >= 0.99, "{label}: stores");
                assert!(
                    c.shared_bank_conflict_factor() <= 1.0 + 1e-9,
                    "{label}: banks"
                );
                assert!(c.ldmatrix_wavefronts_per_request() <= 4.0 + 1e-9, "{label}");
            }
        }
    }
    assert!(tiles_seen.contains(&[128, 64]) && tiles_seen.contains(&[128, 128]));
}

/// The global load requests of a forward GEMM's epilogue whose operands all arrive by
/// `cp.async`: where the config has a bias, each warp (2 × 2 per block) loads its lanes' two
/// columns of each n8 accumulator once, a request wherever its first lane's column is inside
/// `Og`.
fn bias_requests(cfg: &Conv2dConfig, tiles: &GemmTiles) -> u64 {
    if !cfg.bias {
        return 0;
    }
    let [_, columns] = tiles.tile;
    let og = cfg.out_per_group();
    let column_tiles = og.div_ceil(columns);
    let per_row_of_blocks = (0..column_tiles * columns)
        .filter(|&c| c % 8 < 2 && c < og)
        .count() as u64;
    // Blocks along the pixels and groups, times the 2 warps along the pixels.
    let row_blocks = tiles.blocks / u64::from(column_tiles);
    row_blocks * 2 * per_row_of_blocks
}

/// The pointwise entry's limits: `OH·OW` not a multiple of 8 (7 × 7, 14 × 14 over batch 2) is
/// a typed error naming `out_pixels` and launches nothing, while `forward` takes another
/// entry and matches the reference; configs without the entry (stride 2, padding, a 3 × 3,
/// `Cg` 12, NHWC, tf32) have none in the module and are a typed error naming the layout.
#[test]
fn pointwise_forward_rejects_what_it_does_not_cover() {
    let base = Conv2dConfig {
        dtype: DType::F16,
        arch: Arch::Sm80,
        ..Conv2dConfig::new(16, 16, 1)
    };
    let dev = SimBackend::new();
    let ptx = base.compile().expect("compiles").ptx;
    for (i, s) in [shape(2, 7, 7), shape(2, 14, 14)].into_iter().enumerate() {
        let err = pointwise_with::<f16>(&base, &dev, &ptx, &s);
        assert!(
            matches!(
                err,
                Err(LaunchError::InvalidDim {
                    name: "out_pixels",
                    ..
                })
            ),
            "{s:?}: {err:?}"
        );
        assert!(dev.take_launch_log().is_empty());
        let case = Case {
            name: "1x1 16→16, pixels not a multiple of 8",
            cfg: base,
            shape: s,
        };
        let (dev, _) =
            run_forward_on::<f16>(&case, DType::F16, Arch::Sm80, Layout::Nchw, 40 + i as u64);
        let last = dev.take_launch_log().pop().expect("forward launched").entry;
        assert_ne!(last, ENTRY_IMPLICIT_GEMM_POINTWISE, "{s:?}");
    }
    let refused = [
        base.with_stride(2, 2),
        base.with_padding(1, 1),
        Conv2dConfig::new(16, 16, 3).with_padding(1, 1),
        Conv2dConfig::new(36, 12, 1).with_groups(3),
        base.with_layout(Layout::Nhwc),
        Conv2dConfig::new(16, 16, 1).with_allow_tf32(true),
    ];
    let s = shape(1, 8, 8);
    for cfg in refused {
        let cfg = Conv2dConfig {
            dtype: if cfg.allow_tf32 {
                DType::F32
            } else {
                DType::F16
            },
            arch: Arch::Sm80,
            ..cfg
        };
        assert!(!cfg.has_pointwise_implicit_gemm(), "{}", cfg.matrix_name());
        assert!(!cfg.entry_names().contains(&ENTRY_IMPLICIT_GEMM_POINTWISE));
        let ptx = cfg.compile().expect("compiles").ptx;
        let err = match cfg.dtype {
            DType::F32 => pointwise_with::<f32>(&cfg, &dev, &ptx, &s),
            _ => pointwise_with::<f16>(&cfg, &dev, &ptx, &s),
        };
        assert!(
            matches!(err, Err(LaunchError::InvalidDim { name: "layout", .. })),
            "{}: {err:?}",
            cfg.matrix_name()
        );
    }
    assert!(dev.take_launch_log().is_empty());
}

/// `forward_implicit_gemm_pointwise` of `cfg` with buffers of the right lengths (never
/// initialised: only for calls that must fail before launching).
fn pointwise_with<T: Element>(
    cfg: &Conv2dConfig,
    dev: &SimBackend,
    ptx: &str,
    s: &ConvShape,
) -> Result<ConvDims, LaunchError> {
    let d = cfg.check_shape(s, false).expect("valid shape");
    let buf = |len: usize| dev.alloc::<T>(len).expect("alloc");
    let (x, w, mut y) = (
        buf(d.input_len(cfg)),
        buf(ConvDims::weight_len(cfg)),
        buf(d.output_len(cfg)),
    );
    forward_implicit_gemm_pointwise(cfg, dev, ptx, s, &x, &w, None, &mut y)
}

/// `forward_channels_last` of `cfg` with an `x` of `x_len` elements and `w`, `y` of their
/// lengths (never initialised: only for calls that must fail before launching).
fn channels_last_with<T: Element>(
    cfg: &Conv2dConfig,
    dev: &SimBackend,
    ptx: &str,
    s: &ConvShape,
    x_len: usize,
) -> Result<ConvDims, LaunchError> {
    let d = cfg.check_shape(s, false).expect("valid shape");
    let buf = |len: usize| dev.alloc::<T>(len).expect("alloc");
    let (x, w, mut y) = (
        buf(x_len),
        buf(ConvDims::weight_len(cfg)),
        buf(d.output_len(cfg)),
    );
    forward_channels_last(cfg, dev, ptx, s, &x, &w, None, &mut y)
}

/// Backward-data of `case` (NCHW) with `dtype` on `arch` through every backward-data entry
/// the module has and through `backward_data` (which must pick the tensor-core entry when the
/// module has it), each against the reference; the tensor-core result also satisfies the
/// adjoint identity with the forward kernel. Returns the device (its launch log holds the
/// counters) and the entries run explicitly.
fn run_backward_data_on<T: HostFloat + Element>(
    case: &Case,
    dtype: DType,
    arch: Arch,
    seed: u64,
) -> (SimBackend, Vec<&'static str>) {
    let cfg = Conv2dConfig {
        dtype,
        arch,
        bias: false,
        ..case.cfg
    };
    let (label, ptx, dims) = prepare(case, &cfg);
    let s = &case.shape;
    let tol = tolerance(dtype);
    let dev = SimBackend::new();
    let mut rng = SplitMix64::new(seed);
    let gy = random::<T>(&dev, &mut rng, dims.output_len(&cfg));
    let w = random::<T>(&dev, &mut rng, ConvDims::weight_len(&cfg));
    let x = random::<T>(&dev, &mut rng, dims.input_len(&cfg));
    let want = reference::backward_data(&cfg, s, &gy.host, &w.host).expect("reference");
    let mut ran = Vec::new();
    for entry in DATA_ENTRIES {
        if !cfg.entry_names().contains(&entry) {
            continue;
        }
        let mut dx = dev.alloc::<T>(dims.input_len(&cfg)).expect("alloc");
        must(
            &label,
            backward_data_with(&cfg, &dev, &ptx, s, entry, &gy.dev, &w.dev, &mut dx),
        );
        assert_close(
            &format!("{label}: {entry}"),
            &download(&dev, &dx),
            &want,
            tol,
        );
        ran.push(entry);
    }
    dev.take_launch_log();
    let mut dx = dev.alloc::<T>(dims.input_len(&cfg)).expect("alloc");
    must(
        &label,
        backward_data(&cfg, &dev, &ptx, s, &gy.dev, &w.dev, &mut dx),
    );
    let picked: Vec<String> = dev.take_launch_log().into_iter().map(|r| r.entry).collect();
    let expected = if cfg.has_channels_last_backward() {
        // A 1 × 1 filter is channels-last already: no copy of `w`.
        let filter_copy = (!cfg.has_pointwise()).then_some(ENTRY_FILTER_TO_CHANNELS_LAST);
        filter_copy
            .into_iter()
            .chain([
                ENTRY_GRADIENT_TO_CHANNELS_LAST,
                ENTRY_BWD_DATA_CHANNELS_LAST,
            ])
            .collect()
    } else if cfg.prefers_tensor_core_backward_data() {
        vec![ENTRY_BWD_DATA_IMPLICIT_GEMM]
    } else {
        vec![ENTRY_BWD_DATA]
    };
    assert_eq!(picked, expected, "{label}");
    let got_dx = download(&dev, &dx);
    assert_close(&format!("{label}: backward_data"), &got_dx, &want, tol);
    // Adjoint identity, kernel outputs on both sides (the forward picks its fastest entry).
    let mut y = dev.alloc::<T>(dims.output_len(&cfg)).expect("alloc");
    must(
        &label,
        forward(&cfg, &dev, &ptx, s, &x.dev, &w.dev, None, &mut y),
    );
    let y = download(&dev, &y);
    assert_adjoint(&label, (&y, &gy.host), (&x.host, &got_dx), tol);
    (dev, ran)
}

/// Backward-data shapes beyond the shared ones: a filter of 8 taps (16-byte `cp.async` B
/// chunks), stride 3 with dilation (most taps skip a pixel), stride 3 along `w` only (`gy`
/// windows whose lanes read two or one of the five taps), and several images × groups
/// with two channel tiles (grid z and y beyond 1, K over many tiles).
fn backward_data_cases() -> Vec<Case> {
    let c = Conv2dConfig::new;
    vec![
        Case {
            name: "bwd-data 2x4 taps 8 p1 16→24 groups 2",
            cfg: c(16, 24, 1)
                .with_kernel(2, 4)
                .with_padding(1, 1)
                .with_groups(2),
            shape: shape(2, 7, 9),
        },
        Case {
            name: "bwd-data 3x3 s3 d2 p2 10→12",
            cfg: c(10, 12, 3)
                .with_stride(3, 3)
                .with_dilation(2, 2)
                .with_padding(2, 2),
            shape: shape(2, 14, 11),
        },
        Case {
            name: "bwd-data 3x5 s(1, 3) p(1, 2) 6→4 (gy windows of 2 taps)",
            cfg: c(6, 4, 3)
                .with_kernel(3, 5)
                .with_stride(1, 3)
                .with_padding(1, 2),
            shape: shape(2, 7, 13),
        },
        Case {
            name: "bwd-data 3x3 p1 144→40 groups 2 (Cg 72: two channel tiles, K 180)",
            cfg: c(144, 40, 3).with_padding(1, 1).with_groups(2),
            shape: shape(3, 5, 6),
        },
    ]
}

/// The issue's cases, 8 fuzzed ones from `seed`, the tensor-core and backward-data ones.
fn backward_cases(seed: u64) -> Vec<Case> {
    let mut cases = issue_cases();
    cases.extend(fuzz_cases(seed, 8));
    cases.extend(tensor_core_cases());
    cases.extend(backward_data_cases());
    cases
}

/// Every backward-data entry: CUDA cores, tensor cores, NCHW tensor cores over channels-last
/// copies.
const DATA_ENTRIES: [&str; 3] = [
    ENTRY_BWD_DATA,
    ENTRY_BWD_DATA_IMPLICIT_GEMM,
    ENTRY_BWD_DATA_CHANNELS_LAST,
];

/// Every weight-gradient entry, in the same order.
const FILTER_ENTRIES: [&str; 3] = [
    ENTRY_BWD_FILTER,
    ENTRY_BWD_FILTER_IMPLICIT_GEMM,
    ENTRY_BWD_FILTER_CHANNELS_LAST,
];

/// [`run_backward_data_on`] in `dtype`'s host type: the entries it ran explicitly.
fn backward_data_entries(case: &Case, dtype: DType, arch: Arch, seed: u64) -> Vec<&'static str> {
    match dtype {
        DType::BF16 => run_backward_data_on::<bf16>(case, dtype, arch, seed).1,
        _ => run_backward_data_on::<f16>(case, dtype, arch, seed).1,
    }
}

/// [`run_backward_filter_on`] in `dtype`'s host type: the entries it ran explicitly.
fn backward_filter_entries(case: &Case, dtype: DType, arch: Arch, seed: u64) -> Vec<&'static str> {
    match dtype {
        DType::BF16 => run_backward_filter_on::<bf16>(case, dtype, arch, seed).1,
        _ => run_backward_filter_on::<f16>(case, dtype, arch, seed).1,
    }
}

/// Runs every case through a backward pass's entries (`[CUDA cores, tensor cores, NCHW
/// tensor cores over channels-last copies]`) with `run(case, dtype, arch, seed)`, which
/// returns the entries it ran explicitly: f16 on sm_80 and bf16 on sm_90 must run the first
/// two and the third where the config has it ([`Conv2dConfig::has_channels_last_backward`]),
/// f16 on sm_75 (every fourth case) only the CUDA-core one. Returns how many cases ran the
/// third.
fn both_backward_entries(
    cases: &[Case],
    seed: u64,
    entries: [&'static str; 3],
    run: impl Fn(&Case, DType, Arch, u64) -> Vec<&'static str>,
) -> usize {
    let mut channels_last = 0;
    for (i, case) in cases.iter().enumerate() {
        let seed = seed + i as u64;
        for (dtype, arch) in [(DType::F16, Arch::Sm80), (DType::BF16, Arch::Sm90)] {
            let cfg = Conv2dConfig {
                dtype,
                arch,
                ..case.cfg
            };
            let with_copies = cfg.has_channels_last_backward();
            channels_last += usize::from(with_copies && dtype == DType::F16);
            let expected = &entries[..if with_copies { 3 } else { 2 }];
            assert_eq!(run(case, dtype, arch, seed), expected, "{}", case.name);
        }
        if i % 4 == 0 {
            let ran = run(case, DType::F16, Arch::Sm75, seed);
            assert_eq!(ran, entries[..1], "{}", case.name);
        }
    }
    channels_last
}

/// Every case (the issue's, fuzzed, tensor-core and backward-data ones) through every
/// backward-data entry.
#[test]
fn tensor_core_backward_data_every_case() {
    let channels_last = both_backward_entries(
        &backward_cases(4048),
        500,
        DATA_ENTRIES,
        backward_data_entries,
    );
    assert!(channels_last >= 2, "cases with the channels-last backward");
}

/// Counters of the small ResNet-like 3×3 layer's backward-data (64 → 64, padding 1, 16 × 16,
/// f16 on sm_80): the CUDA-core gather vs the tensor-core implicit GEMMs, which issue exactly
/// the mma count their tiles imply (`GemmTiles`: 64 × 64 for `Cg = 64`) with conflict-free
/// `ldmatrix` and coalesced gathers.
#[test]
fn tensor_core_backward_data_counters_resnet_3x3() {
    let case = Case {
        name: "resnet 3x3 64→64 bwd-data",
        cfg: Conv2dConfig::new(64, 64, 3).with_padding(1, 1),
        shape: shape(1, 16, 16),
    };
    let pixels = 16 * 16u64;
    let outputs = (pixels * 64) as f64;
    let (dev, ran) = run_backward_data_on::<f16>(&case, DType::F16, Arch::Sm80, 13);
    assert_eq!(ran, DATA_ENTRIES);
    // The log was drained after the explicit runs; rerun each for its counters.
    let cfg = Conv2dConfig {
        dtype: DType::F16,
        arch: Arch::Sm80,
        ..case.cfg
    };
    let ptx = cfg.compile().expect("compiles").ptx;
    let dims = cfg.check_shape(&case.shape, false).expect("valid shape");
    let mut rng = SplitMix64::new(17);
    let gy = random::<f16>(&dev, &mut rng, dims.output_len(&cfg));
    let w = random::<f16>(&dev, &mut rng, ConvDims::weight_len(&cfg));
    dev.take_launch_log();
    for entry in DATA_ENTRIES {
        let mut dx = dev.alloc::<f16>(dims.input_len(&cfg)).expect("alloc");
        must(
            "counters",
            backward_data_with(
                &cfg,
                &dev,
                &ptx,
                &case.shape,
                entry,
                &gy.dev,
                &w.dev,
                &mut dx,
            ),
        );
    }
    for record in dev.take_launch_log() {
        let c = &record.counters;
        print_counters("bwd-data", &record, outputs);
        let tiles = |entry: &str| GemmTiles::new(&cfg, entry, [pixels, 64, 64 * 9], 1);
        if record.entry == ENTRY_BWD_DATA_IMPLICIT_GEMM {
            assert_eq!(tiles(&record.entry).tile, [64, 64]);
            assert_eq!(c.mma_instructions, tiles(&record.entry).mma());
            assert!(c.ldmatrix_wavefronts_per_request() <= 4.0 + 1e-9);
            // A lane → pixel, B by filter slabs, each slab element loaded once (the taps a K
            // tile cuts wait in registers for the next tile).
            assert!(c.global_load_efficiency() >= 0.9);
        } else if record.entry == ENTRY_BWD_DATA_CHANNELS_LAST {
            // Both operands in 16-byte `cp.async` chunks: no `ld.global` at all; `dx` staged
            // and stored as 16-byte runs along the pixels (H·W = 256).
            assert_eq!(tiles(&record.entry).tile, [64, 64]);
            assert_eq!(c.mma_instructions, tiles(&record.entry).mma());
            assert_eq!(c.cp_async_bytes, tiles(&record.entry).cp_async_bytes());
            assert!(c.global_store_efficiency() >= 0.99);
            assert_eq!(c.global_load_requests, 0);
            assert!(c.cp_async_requests > 0);
            assert!(c.cp_async_bank_conflict_factor() <= 1.0 + 1e-9);
            assert!(c.ldmatrix_wavefronts_per_request() <= 4.0 + 1e-9);
            assert!(c.global_load_efficiency() >= 0.99);
        } else if record.entry.ends_with("to_channels_last") {
            assert_eq!(c.mma_instructions, 0);
            assert!(c.global_load_efficiency() >= 0.99);
            assert!(c.global_store_efficiency() >= 0.99);
        } else {
            assert_eq!(c.mma_instructions, 0);
        }
    }
}

/// Backward-filter of `case` (NCHW) with `dtype` on `arch` through every weight-gradient
/// entry the module has and through `backward_filter` (which must pick the tensor-core entry
/// when the module has it), `dw` and `db` each against the reference. Returns the explicit
/// runs' launch records (their counters) and the entries run explicitly.
fn run_backward_filter_on<T: HostFloat + Element>(
    case: &Case,
    dtype: DType,
    arch: Arch,
    seed: u64,
) -> (Vec<LaunchRecord>, Vec<&'static str>) {
    let cfg = Conv2dConfig {
        dtype,
        arch,
        ..case.cfg
    };
    let (label, ptx, dims) = prepare(case, &cfg);
    let s = &case.shape;
    let tol = tolerance(dtype);
    let dev = SimBackend::new();
    let mut rng = SplitMix64::new(seed);
    let x = random::<T>(&dev, &mut rng, dims.input_len(&cfg));
    let gy = random::<T>(&dev, &mut rng, dims.output_len(&cfg));
    let (want_dw, want_db) = reference::backward_filter(&cfg, s, &x.host, &gy.host).expect("ref");
    let run = |entry: Option<&'static str>| {
        let mut dw = dev.alloc::<T>(ConvDims::weight_len(&cfg)).expect("alloc");
        let mut db = dev.alloc::<T>(cfg.out_channels as usize).expect("alloc");
        let db_arg = cfg.bias.then_some(&mut db);
        let result = match entry {
            Some(entry) => {
                backward_filter_with(&cfg, &dev, &ptx, s, entry, &x.dev, &gy.dev, &mut dw, db_arg)
            }
            None => backward_filter(&cfg, &dev, &ptx, s, &x.dev, &gy.dev, &mut dw, db_arg),
        };
        must(&label, result);
        let what = entry.unwrap_or("backward_filter");
        assert_close(
            &format!("{label}: {what} dw"),
            &download(&dev, &dw),
            &want_dw,
            tol,
        );
        if let Some(want_db) = &want_db {
            assert_close(
                &format!("{label}: {what} db"),
                &download(&dev, &db),
                want_db,
                tol,
            );
        }
    };
    let mut ran = Vec::new();
    for entry in FILTER_ENTRIES {
        if cfg.entry_names().contains(&entry) {
            run(Some(entry));
            ran.push(entry);
        }
    }
    let log = dev.take_launch_log();
    run(None);
    let picked: Vec<String> = dev.take_launch_log().into_iter().map(|r| r.entry).collect();
    // The tensor-core GEMM, or its split pair where the rule splits.
    let tensor_core = |whole, split| match cfg.backward_filter_slices(&dims) {
        1 => vec![whole],
        _ => vec![split, ENTRY_BWD_FILTER_REDUCE],
    };
    let mut want_picked = if cfg.has_channels_last_backward() {
        [
            vec![ENTRY_TO_CHANNELS_LAST, ENTRY_GRADIENT_TO_CHANNELS_LAST],
            tensor_core(
                ENTRY_BWD_FILTER_CHANNELS_LAST,
                ENTRY_BWD_FILTER_CHANNELS_LAST_SPLIT,
            ),
        ]
        .concat()
    } else if cfg.has_tensor_core_backward_filter() {
        tensor_core(ENTRY_BWD_FILTER_IMPLICIT_GEMM, ENTRY_BWD_FILTER_SPLIT)
    } else {
        vec![ENTRY_BWD_FILTER]
    };
    want_picked.extend(bias_entries(&cfg, s));
    assert_eq!(picked, want_picked, "{label}");
    (log, ran)
}

/// Every case (the issue's, fuzzed, tensor-core, backward-data and backward-filter ones)
/// through every weight-gradient entry.
#[test]
fn tensor_core_backward_filter_every_case() {
    let mut cases = backward_cases(6072);
    cases.extend(backward_filter_cases());
    let channels_last = both_backward_entries(&cases, 700, FILTER_ENTRIES, backward_filter_entries);
    assert!(channels_last >= 2, "cases with the channels-last backward");
}

/// The NCHW backward passes over channels-last copies on the channels-last forward's cases
/// that have them ([`channels_last_cases`]: every load width and lane tiling of the copies,
/// ragged pixel and channel tiles, groups, strides, dilation, batches of 2 and 3) and a 3 × 1
/// filter, both passes through every entry, f16 on sm_80 and bf16 on sm_90.
#[test]
fn channels_last_backward_every_case() {
    let mut cases: Vec<Case> = channels_last_cases()
        .into_iter()
        .filter(|case| {
            let cfg = Conv2dConfig {
                dtype: DType::F16,
                arch: Arch::Sm80,
                ..case.cfg
            };
            cfg.has_channels_last_backward()
        })
        .collect();
    assert_eq!(
        cases.len(),
        7,
        "channels-last cases with the backward entries"
    );
    // `KW = 1` but `KH > 1`: a `w` copy all the same.
    cases.push(Case {
        name: "cl 3x1 s(2,1) p(1,0) 16→24 + bias, batch 2 (a filter one tap wide)",
        cfg: Conv2dConfig::new(16, 24, 3)
            .with_kernel(3, 1)
            .with_stride(2, 1)
            .with_padding(1, 0)
            .with_bias(true),
        shape: shape(2, 9, 7),
    });
    // 120 channels per group: backward-data on 64 × 128 tiles over `Cg`, backward-filter on
    // 128 × 64 tiles over `Og`, both ragged; `H·W = 48` stages `dx` through the B ring.
    let wide = Case {
        name: "cl 3x3 p1 120→120, batch 2, 6 × 8 (128-channel backward tiles, ragged)",
        cfg: Conv2dConfig::new(120, 120, 3).with_padding(1, 1),
        shape: shape(2, 6, 8),
    };
    let tiles = Conv2dConfig {
        dtype: DType::F16,
        arch: Arch::Sm80,
        ..wide.cfg
    };
    assert_eq!(
        tiles.implicit_gemm_tile(ENTRY_BWD_DATA_CHANNELS_LAST),
        Some([64, 128])
    );
    assert_eq!(
        tiles.implicit_gemm_tile(ENTRY_BWD_FILTER_CHANNELS_LAST),
        Some([128, 64])
    );
    cases.push(wide);
    let ran = both_backward_entries(&cases, 900, DATA_ENTRIES, backward_data_entries);
    assert_eq!(ran, cases.len());
    let ran = both_backward_entries(&cases, 950, FILTER_ENTRIES, backward_filter_entries);
    assert_eq!(ran, cases.len());
}

/// The channels-last weight gradient split into 1, 2 and 5 slices of the pixels (the split
/// entry's partials in the NCHW weight's order, summed by `conv2d_bwd_filter_reduce`) matches
/// the reference and is bitwise the same whatever the block order; a config without the
/// entries is a typed error that launches nothing.
#[test]
fn channels_last_backward_filter_slices() {
    let case = Case {
        name: "cl bwd-filter 3x3 s2 p1 32→16 groups 2 + bias, batch 3",
        cfg: Conv2dConfig::new(32, 16, 3)
            .with_padding(1, 1)
            .with_stride(2, 2)
            .with_groups(2)
            .with_bias(true),
        shape: shape(3, 9, 10),
    };
    let cfg = Conv2dConfig {
        dtype: DType::F16,
        arch: Arch::Sm80,
        ..case.cfg
    };
    assert!(cfg.has_channels_last_backward());
    let (label, ptx, dims) = prepare(&case, &cfg);
    let s = &case.shape;
    let mut first: Option<Vec<u16>> = None;
    for (slices, shuffle) in [(1, None), (2, Some(3)), (5, None), (5, Some(7))] {
        let dev = SimBackend::with_options(ptxforge_sim::Options {
            shuffle_blocks: shuffle,
            ..ptxforge_sim::Options::default()
        });
        let mut rng = SplitMix64::new(31);
        let x = random::<f16>(&dev, &mut rng, dims.input_len(&cfg));
        let gy = random::<f16>(&dev, &mut rng, dims.output_len(&cfg));
        let (want_dw, want_db) =
            reference::backward_filter(&cfg, s, &x.host, &gy.host).expect("reference");
        let mut dw = dev.alloc::<f16>(ConvDims::weight_len(&cfg)).expect("alloc");
        let mut db = dev.alloc::<f16>(16).expect("alloc");
        let run = backward_filter_channels_last_sliced(
            &cfg,
            &dev,
            &ptx,
            s,
            Slices::Exactly(slices),
            &x.dev,
            &gy.dev,
            &mut dw,
            Some(&mut db),
        );
        must(&label, run);
        let entries: Vec<String> = dev.take_launch_log().into_iter().map(|r| r.entry).collect();
        let gemm = if slices == 1 {
            ENTRY_BWD_FILTER_CHANNELS_LAST
        } else {
            ENTRY_BWD_FILTER_CHANNELS_LAST_SPLIT
        };
        assert_eq!(entries[2], gemm, "{label}: {entries:?}");
        let what = format!("{label}: {slices} slices");
        assert_close(&what, &download(&dev, &dw), &want_dw, tolerance(DType::F16));
        let want_db = want_db.expect("bias");
        assert_close(&what, &download(&dev, &db), &want_db, tolerance(DType::F16));
        let bits: Vec<u16> = dev
            .download(&dw)
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect();
        // Slices change the summation order; block order within one slice count never does.
        if slices == 5 {
            match &first {
                Some(bits_before) => assert_eq!(&bits, bits_before, "{what}: bitwise"),
                None => first = Some(bits),
            }
        }
    }
    let nhwc = cfg.with_layout(Layout::Nhwc);
    let ptx = nhwc.compile().expect("compiles").ptx;
    let dev = SimBackend::new();
    let buf = |len: usize| dev.alloc::<f16>(len).expect("alloc");
    let (x, gy, mut dw) = (
        buf(dims.input_len(&nhwc)),
        buf(dims.output_len(&nhwc)),
        buf(ConvDims::weight_len(&nhwc)),
    );
    let err = backward_filter_channels_last_sliced(
        &nhwc,
        &dev,
        &ptx,
        s,
        Slices::Auto,
        &x,
        &gy,
        &mut dw,
        None,
    );
    assert!(
        matches!(err, Err(LaunchError::InvalidDim { name: "layout", .. })),
        "{err:?}"
    );
    assert!(dev.take_launch_log().is_empty());
}

/// The tensor-core weight gradient is bitwise the same whatever order the blocks run in, in
/// both layouts.
#[test]
fn tensor_core_backward_filter_is_deterministic_under_block_shuffling() {
    for layout in Layout::ALL {
        backward_filter_is_deterministic(layout);
    }
}

fn backward_filter_is_deterministic(layout: Layout) {
    let cfg = Conv2dConfig {
        dtype: DType::F16,
        arch: Arch::Sm80,
        ..Conv2dConfig::new(8, 80, 3)
            .with_padding(1, 1)
            .with_groups(2)
            .with_layout(layout)
    };
    let ptx = cfg.compile().expect("compiles").ptx;
    let s = shape(2, 9, 7);
    let dims = cfg.check_shape(&s, false).expect("valid");
    let mut results = Vec::new();
    for shuffle in [None, Some(1), Some(2)] {
        let dev = SimBackend::with_options(ptxforge_sim::Options {
            shuffle_blocks: shuffle,
            ..ptxforge_sim::Options::default()
        });
        let mut rng = SplitMix64::new(9);
        let x = random::<f16>(&dev, &mut rng, dims.input_len(&cfg));
        let gy = random::<f16>(&dev, &mut rng, dims.output_len(&cfg));
        let mut dw = dev.alloc::<f16>(ConvDims::weight_len(&cfg)).expect("alloc");
        must(
            "bwd-filter",
            backward_filter_with(
                &cfg,
                &dev,
                &ptx,
                &s,
                ENTRY_BWD_FILTER_IMPLICIT_GEMM,
                &x.dev,
                &gy.dev,
                &mut dw,
                None,
            ),
        );
        let bits: Vec<u16> = dev
            .download(&dw)
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect();
        results.push(bits);
    }
    assert!(
        results.windows(2).all(|w| w[0] == w[1]),
        "{layout}: bitwise identical results"
    );
}

/// Counters of the small ResNet-like 3×3 layer's backward-filter (64 → 64, padding 1,
/// 16 × 16, batch 2, f16 on sm_80): the CUDA-core warp-per-weight reduction vs the
/// tensor-core implicit GEMM, which issues exactly the mma count its tiling implies
/// (`⌈Og/64⌉ · ⌈Cg·9/64⌉ · G` tiles × `⌈N·OH·OW/32⌉` K tiles × 4 warps × 16) with
/// conflict-free `ldmatrix` and coalesced gathers.
#[test]
fn tensor_core_backward_filter_counters_resnet_3x3() {
    let case = Case {
        name: "resnet 3x3 64→64 bwd-filter",
        cfg: Conv2dConfig::new(64, 64, 3).with_padding(1, 1),
        shape: shape(2, 16, 16),
    };
    let (log, ran) = run_backward_filter_on::<f16>(&case, DType::F16, Arch::Sm80, 19);
    assert_eq!(ran, FILTER_ENTRIES);
    let outputs = (64 * 64 * 9) as f64;
    let mut checked = 0;
    for record in log {
        let c = &record.counters;
        print_counters("bwd-filter", &record, outputs);
        let tiles = (64u64 * 9).div_ceil(64) * (2 * 16 * 16u64).div_ceil(32);
        if record.entry == ENTRY_BWD_FILTER_IMPLICIT_GEMM {
            assert_eq!(c.mma_instructions, tiles * 4 * 16);
            assert!(c.ldmatrix_wavefronts_per_request() <= 4.0 * 1.05);
            assert!(c.global_load_efficiency() >= 0.9);
            checked += 1;
        } else if record.entry == ENTRY_BWD_FILTER_CHANNELS_LAST {
            // Both operands staged by pixel in 16-byte `cp.async` chunks: no `ld.global`.
            assert_eq!(c.mma_instructions, tiles * 4 * 16);
            assert_eq!(c.global_load_requests, 0);
            assert!(c.cp_async_requests > 0);
            assert!(c.cp_async_bank_conflict_factor() <= 1.0 + 1e-9);
            assert!(c.ldmatrix_wavefronts_per_request() <= 4.0 + 1e-9);
            assert!(c.global_load_efficiency() >= 0.99);
            checked += 1;
        } else if record.entry.ends_with("to_channels_last") {
            assert_eq!(c.mma_instructions, 0);
            assert!(c.global_load_efficiency() >= 0.99);
        } else if record.entry == ENTRY_BWD_FILTER {
            assert_eq!(c.mma_instructions, 0);
        }
    }
    assert_eq!(checked, 2, "both tensor-core GEMMs ran unsplit");
}

/// NHWC without tensor cores (f32, f64, and f16 on sm_75) runs the CUDA-core `conv2d_nhwc`;
/// the NCHW f16 module for sm_75 has no tensor-core entry either.
#[test]
fn nhwc_cuda_core_fallback() {
    let mut cases = issue_cases();
    cases.extend(tensor_core_cases());
    for (i, case) in cases.iter().enumerate() {
        let seed = 500 + i as u64;
        let ran = run_forward::<f32>(case, DType::F32, Arch::Sm80, Layout::Nhwc, seed);
        assert_eq!(ran, ["conv2d_nhwc"], "{}", case.name);
        let ran = run_forward::<f64>(case, DType::F64, Arch::Sm90, Layout::Nhwc, seed);
        assert_eq!(ran, ["conv2d_nhwc"], "{}", case.name);
        let ran = run_forward::<f16>(case, DType::F16, Arch::Sm75, Layout::Nhwc, seed);
        assert_eq!(ran, ["conv2d_nhwc"], "{}", case.name);
        let nchw_sm75 = Conv2dConfig {
            dtype: DType::F16,
            arch: Arch::Sm75,
            ..case.cfg
        };
        // (The dilation-50 case's direct tile exceeds sm_75's shared memory: rejected.)
        if nchw_sm75.validate().is_ok() {
            let ran = run_forward::<f16>(case, DType::F16, Arch::Sm75, Layout::Nchw, seed);
            assert_eq!(ran, ["conv2d_direct"], "{}", case.name);
        }
    }
}

// ---- tf32 (`allow_tf32`) -----------------------------------------------------------------

/// Reduction depth of one tf32 pipeline stage (64 bytes of f32).
const TF32_TILE_K: u64 = 16;
/// `m16n8k8` per block per stage: 4 warps × 8 accumulators × 2 eight-deep slices.
const TF32_MMA_PER_STAGE: u64 = 4 * 8 * 2;

/// The same data tf32-rounded (`cvt.rna.tf32.f32`), for the reference that models the tensor
/// cores' inputs exactly.
fn tf32_rounded(v: &[f64]) -> Vec<f64> {
    v.iter().map(|&a| f64::from(round_tf32(a as f32))).collect()
}

/// A tf32 result: within the documented tolerance of the exact reference for reduction length
/// `k`, and within f32 accumulation error of the reference of tf32-rounded operands (a path
/// that silently stayed exact f32 is off that one by about 2⁻¹²).
fn assert_tf32(what: &str, got: &[f64], exact: &[f64], model: &[f64], k: u64) {
    let err = error_relative_to_max(got, exact);
    let tol = tf32::tolerance(k as u32);
    assert!(
        err <= tol,
        "{what}: error {err:e} > tf32 tolerance {tol:e} (K {k})"
    );
    let off_model = error_relative_to_max(got, model);
    eprintln!(
        "{what}: tf32 error {err:.2e} (K {k}, tolerance {tol:.2e}), off model {off_model:.2e}"
    );
    assert!(
        off_model <= tolerance(DType::F32),
        "{what}: off the tf32-rounded-operand reference by {off_model:e} (exact error {err:e})"
    );
}

/// The one launch of `entry` in `dev`'s log: exactly `blocks · ⌈k / 16⌉ · 64` `m16n8k8`,
/// conflict-free `ldmatrix`; its counters printed per output.
fn assert_tf32_mma(what: &str, dev: &SimBackend, entry: &str, [blocks, k, outputs]: [u64; 3]) {
    let log = dev.take_launch_log();
    let rec = log
        .iter()
        .find(|r| r.entry == entry)
        .unwrap_or_else(|| panic!("{what}: {entry} did not run ({log:?})"));
    let c = &rec.counters;
    assert_eq!(
        c.mma_instructions,
        blocks * k.div_ceil(TF32_TILE_K) * TF32_MMA_PER_STAGE,
        "{what}: {entry} mma count"
    );
    assert_eq!(
        c.mma_flops,
        c.mma_instructions * 2 * 16 * 8 * 8,
        "{what}: m16n8k8"
    );
    assert!(
        c.ldmatrix_wavefronts_per_request() <= 4.0 + 1e-9,
        "{what}: ldmatrix conflicts"
    );
    print_counters(what, rec, outputs as f64);
}

/// Forward, backward-data and backward-filter of `case` in `layout` in f32 with
/// `allow_tf32` on `arch` (on sm_80+ the implicit GEMMs by name, before sm_80 the entries
/// the launch functions pick), against the exact and the tf32-rounded references. On sm_80+ each must run its implicit GEMM on tf32
/// (exact mma counts, [`assert_tf32`]); before sm_80 the CUDA-core entries, exact f32.
fn run_tf32(case: &Case, layout: Layout, arch: Arch, seed: u64) {
    let cfg = Conv2dConfig {
        dtype: DType::F32,
        arch,
        ..case.cfg.with_layout(layout).with_allow_tf32(true)
    };
    let (label, ptx, d) = prepare(case, &cfg);
    let tc = arch.has_mma_m16n8k16();
    assert_eq!(cfg.has_tensor_core_forward(), tc, "{label}");
    let s = &case.shape;
    let dev = SimBackend::new();
    let mut rng = SplitMix64::new(seed);
    let x = random::<f32>(&dev, &mut rng, d.input_len(&cfg));
    let w = random::<f32>(&dev, &mut rng, ConvDims::weight_len(&cfg));
    let b = random::<f32>(&dev, &mut rng, cfg.out_channels as usize);
    let gy = random::<f32>(&dev, &mut rng, d.output_len(&cfg));
    let (n, c_in, c_out) = (
        s.batch as u64,
        u64::from(cfg.in_channels),
        u64::from(cfg.out_channels),
    );
    let (cg, og, groups) = (
        u64::from(cfg.in_per_group()),
        u64::from(cfg.out_per_group()),
        u64::from(cfg.groups),
    );
    let taps = u64::from(cfg.kernel_h * cfg.kernel_w);
    let (hw, ohw) = (u64::from(s.height * s.width), u64::from(d.out_h * d.out_w));
    let check = |what: &str, got: &[f64], exact: &[f64], model: &[f64], k: u64| {
        let what = format!("{label}: {what}");
        if tc {
            assert_tf32(&what, got, exact, model, k);
        } else {
            assert_close(&what, got, exact, tolerance(DType::F32));
        }
    };
    let mma = |what: &str, entry: &str, blocks: u64, k: u64, outputs: usize| {
        if tc {
            let counts = [blocks, k, outputs as u64];
            assert_tf32_mma(&format!("{label}: {what}"), &dev, entry, counts);
        } else {
            let log = dev.take_launch_log();
            assert!(
                log.iter().all(|r| r.counters.mma_instructions == 0),
                "{label}: {what}"
            );
        }
    };

    // Forward: M = N·OH·OW pixels, K = Cg·KH·KW.
    let bias = cfg.bias.then_some(b.host.as_slice());
    let at = |v: u64| v as usize;
    let forward_ref = |x: &[f64], w: &[f64]| {
        let y = reference::forward(&cfg, s, x, w, bias).expect("reference");
        match layout {
            Layout::Nchw => y,
            Layout::Nhwc => {
                to_channels_last(&y, [n, c_out, d.out_h.into(), d.out_w.into()].map(at))
            }
        }
    };
    let exact = forward_ref(&x.host, &w.host);
    let model = forward_ref(&tf32_rounded(&x.host), &tf32_rounded(&w.host));
    let (x_in, w_in) = match layout {
        Layout::Nchw => (x.dev, w.dev),
        Layout::Nhwc => {
            let up = |v: Vec<f64>| dev.upload(&from_f64::<f32>(&v)).expect("upload");
            (
                up(to_channels_last(
                    &x.host,
                    [n, c_in, s.height.into(), s.width.into()].map(at),
                )),
                up(to_channels_last(
                    &w.host,
                    [c_out, cg, cfg.kernel_h.into(), cfg.kernel_w.into()].map(at),
                )),
            )
        }
    };
    let b_dev = cfg.bias.then_some(&b.dev);
    let mut y = dev.alloc::<f32>(d.output_len(&cfg)).expect("alloc");
    // The tensor-core entries by name: `forward` and `backward_data` keep layers of few
    // channels per group on CUDA cores.
    let launch_forward = if tc { forward_implicit_gemm } else { forward };
    must(
        &label,
        launch_forward(&cfg, &dev, &ptx, s, &x_in, &w_in, b_dev, &mut y),
    );
    let k = cg * taps;
    check("forward", &download(&dev, &y), &exact, &model, k);
    let blocks = (n * ohw).div_ceil(64) * og.div_ceil(64) * groups;
    mma("forward", "conv2d_implicit_gemm", blocks, k, y.len());

    // Backward-data: per image and group M = H·W, N = Cg, K = Og·KH·KW.
    let x_dims = [n, c_in, s.height.into(), s.width.into()].map(at);
    let in_layout = |v: Vec<f64>| match layout {
        Layout::Nchw => v,
        Layout::Nhwc => to_channels_last(&v, x_dims),
    };
    let data_ref = |gy: &[f64], w: &[f64]| {
        in_layout(reference::backward_data(&cfg, s, gy, w).expect("reference"))
    };
    let exact = data_ref(&gy.host, &w.host);
    let model = data_ref(&tf32_rounded(&gy.host), &tf32_rounded(&w.host));
    let gy_in = match layout {
        Layout::Nchw => gy.dev,
        Layout::Nhwc => {
            let gy_dims = [n, c_out, d.out_h.into(), d.out_w.into()].map(at);
            let nhwc = to_channels_last(&gy.host, gy_dims);
            dev.upload(&from_f64::<f32>(&nhwc)).expect("upload")
        }
    };
    let mut dx = dev.alloc::<f32>(d.input_len(&cfg)).expect("alloc");
    let run = if tc {
        let entry = ENTRY_BWD_DATA_IMPLICIT_GEMM;
        backward_data_with(&cfg, &dev, &ptx, s, entry, &gy_in, &w_in, &mut dx)
    } else {
        backward_data(&cfg, &dev, &ptx, s, &gy_in, &w_in, &mut dx)
    };
    must(&label, run);
    let k = og * taps;
    check("backward-data", &download(&dev, &dx), &exact, &model, k);
    let blocks = hw.div_ceil(64) * cg.div_ceil(64) * n * groups;
    mma(
        "backward-data",
        ENTRY_BWD_DATA_IMPLICIT_GEMM,
        blocks,
        k,
        dx.len(),
    );

    // Backward-filter (weight gradient; the bias gradient stays on CUDA cores): M = Og,
    // N = Cg·KH·KW, K = N·OH·OW.
    let w_dims = [c_out, cg, cfg.kernel_h.into(), cfg.kernel_w.into()].map(at);
    let filter_ref = |x: &[f64], gy: &[f64]| {
        let (dw, _) = reference::backward_filter(&cfg, s, x, gy).expect("reference");
        match layout {
            Layout::Nchw => dw,
            Layout::Nhwc => to_channels_last(&dw, w_dims),
        }
    };
    let exact = filter_ref(&x.host, &gy.host);
    let model = filter_ref(&tf32_rounded(&x.host), &tf32_rounded(&gy.host));
    let (dw, _) = run_backward_filter(&label, &cfg, (&dev, &ptx), s, &x_in, &gy_in);
    let k = n * ohw;
    check("backward-filter", &dw, &exact, &model, k);
    let blocks = og.div_ceil(64) * (cg * taps).div_ceil(64) * groups;
    mma(
        "backward-filter",
        ENTRY_BWD_FILTER_IMPLICIT_GEMM,
        blocks,
        k,
        dw.len(),
    );
}

/// The tensor-core cases, a stride-2 3 × 3 one (the paired-lane gathers) and fuzzed ones
/// (groups, stride, padding, dilation, ragged tiles and reductions) on tf32: forward and
/// both backward passes, in both layouts.
#[test]
fn tf32_every_case() {
    let mut cases = tensor_core_cases();
    cases.push(Case {
        name: "tf32 3x3 s2 p1 12→20 (OW 6: output rows cross a warp's pixels)",
        cfg: Conv2dConfig::new(12, 20, 3)
            .with_stride(2, 2)
            .with_padding(1, 1),
        shape: shape(2, 13, 12),
    });
    cases.extend(fuzz_cases(4242, 6));
    for (i, case) in cases.iter().enumerate() {
        for layout in Layout::ALL {
            run_tf32(case, layout, Arch::Sm80, 700 + i as u64);
        }
    }
}

/// tf32 backward-data with B gathered by filter slabs into the slab-ordered stage (taps 2,
/// 3, 6 and 9; `implicit_gemm/slab_tile.rs`) and into the padded rows (5 taps, whose slab
/// order would not fit a stage): one and two channel tiles (`Cg` 72), groups, ragged `Og·taps`
/// reductions, against the exact and the tf32-rounded references.
#[test]
fn tf32_backward_data_slab_taps() {
    let c = Conv2dConfig::new;
    let cases = [
        (
            "1x2 taps 2, 6→10",
            c(6, 10, 1).with_kernel(1, 2),
            shape(2, 5, 9),
        ),
        (
            "3x1 taps 3 p1, 72→12 groups 1 (two channel tiles)",
            c(72, 12, 1).with_kernel(3, 1).with_padding(1, 0),
            shape(1, 6, 5),
        ),
        (
            "2x3 taps 6 s2, 8→20 groups 2",
            c(8, 20, 1)
                .with_kernel(2, 3)
                .with_stride(2, 2)
                .with_groups(2),
            shape(2, 9, 8),
        ),
        (
            "3x3 p1, 144→40 groups 2 (Cg 72, K 180)",
            c(144, 40, 3).with_padding(1, 1).with_groups(2),
            shape(1, 5, 6),
        ),
        (
            "1x5 taps 5 p2 (padded rows), 5→7",
            c(5, 7, 1).with_kernel(1, 5).with_padding(0, 2),
            shape(1, 4, 11),
        ),
    ];
    for (i, (name, cfg, shape)) in cases.into_iter().enumerate() {
        let case = Case { name, cfg, shape };
        run_tf32(&case, Layout::Nchw, Arch::Sm80, 900 + i as u64);
    }
}

/// The tf32 NCHW backward-data entry stores its shared tiles within 5% of the fewest
/// wavefronts (the slab-ordered B stage, `implicit_gemm/slab_tile.rs`; the padded `[c][k]`
/// rows took 1.26×) on the BENCHMARKS.md layer (3 × 3 64 → 64, padding 1, 16 × 16) and the
/// shapes that share its B gather (stride 2, 28-wide rows at 32 channels, groups 2), with
/// conflict-free `ldmatrix` and global load efficiency kept (the gathers' loads are those of
/// the padded-row stage: 0.980, 0.992 and 0.864 there for the first three).
#[test]
fn tf32_backward_data_shared_stores_conflict_free() {
    let c = |channels| Conv2dConfig::new(channels, channels, 3).with_padding(1, 1);
    let layers = [
        ("3x3 p1", c(64), 16, 0.975),
        ("3x3 s2 p1", c(64).with_stride(2, 2), 16, 0.99),
        ("3x3 p1 w28", c(32), 28, 0.86),
        ("3x3 p1 groups 2", c(64).with_groups(2), 16, 0.97),
    ];
    for (name, layer, size, load_floor) in layers {
        let cfg = Conv2dConfig {
            dtype: DType::F32,
            arch: Arch::Sm80,
            ..layer.with_allow_tf32(true)
        };
        let s = shape(1, size, size);
        let ptx = cfg.compile().expect("compiles").ptx;
        let d = cfg.check_shape(&s, false).expect("valid shape");
        let dev = SimBackend::new();
        let mut rng = SplitMix64::new(31);
        let gy = random::<f32>(&dev, &mut rng, d.output_len(&cfg));
        let w = random::<f32>(&dev, &mut rng, ConvDims::weight_len(&cfg));
        let mut dx = dev.alloc::<f32>(d.input_len(&cfg)).expect("alloc");
        let entry = ENTRY_BWD_DATA_IMPLICIT_GEMM;
        let run = backward_data_with(&cfg, &dev, &ptx, &s, entry, &gy.dev, &w.dev, &mut dx);
        must(name, run);
        let log = dev.take_launch_log();
        let record = log.iter().find(|r| r.entry == entry).expect("ran");
        print_counters(name, record, dx.len() as f64);
        let c = &record.counters;
        let banks = c.shared_bank_conflict_factor();
        assert!(banks <= 1.05, "{name}: bank conflict factor {banks:.3}");
        assert!(c.ldmatrix_wavefronts_per_request() <= 4.0 + 1e-9, "{name}");
        let load = c.global_load_efficiency();
        assert!(load >= load_floor, "{name}: load efficiency {load:.3}");
    }
}

/// Before sm_80 `allow_tf32` is accepted and silently keeps the exact CUDA-core entries
/// (no implicit GEMM in the module, no mma).
#[test]
fn tf32_before_sm80_is_f32() {
    for case in tensor_core_cases().iter().take(3) {
        for layout in Layout::ALL {
            run_tf32(case, layout, Arch::Sm75, 5);
        }
    }
}

/// `allow_tf32 = true` needs `dtype = f32`: f16, bf16 and f64 are errors naming the argument.
#[test]
fn tf32_needs_f32() {
    for dtype in [DType::F16, DType::BF16, DType::F64] {
        let cfg = Conv2dConfig {
            dtype,
            ..Conv2dConfig::new(8, 8, 3).with_allow_tf32(true)
        };
        let err = cfg.validate().expect_err("allow_tf32 with a non-f32 dtype");
        assert!(err.to_string().contains("allow_tf32"), "{dtype}: {err}");
    }
    assert!(Conv2dConfig::new(8, 8, 3)
        .with_allow_tf32(true)
        .validate()
        .is_ok());
}

/// The report's counters: the ResNet 3×3 64 → 64 layer on a 16 × 16 image in f32, CUDA cores
/// (`conv2d_direct` / `conv2d_nhwc`) vs tf32 (`conv2d_implicit_gemm`, whose mma count and
/// conflict-free `ldmatrix` [`run_tf32`] checks), on sm_80 and sm_90.
#[test]
fn tf32_counters_resnet_3x3() {
    let case = resnet_3x3();
    let outputs = (16 * 16 * 64) as f64;
    for layout in Layout::ALL {
        let (dev, ran) = run_forward_on::<f32>(&case, DType::F32, Arch::Sm80, layout, 11);
        assert!(!ran.contains(&"conv2d_implicit_gemm"), "{ran:?}");
        for record in dev.take_launch_log() {
            print_counters(&format!("{layout} f32"), &record, outputs);
        }
        for arch in [Arch::Sm80, Arch::Sm90] {
            run_tf32(&case, layout, arch, 11);
        }
    }
}

/// The 1 × 1 layer's backward passes (64 → 64, 16 × 16, batch 2, f16 on sm_80): the NCHW
/// implicit GEMMs (no `cp.async` operand: lane → pixel and lane → channel gathers) vs the
/// channels-last route, whose GEMMs read every operand by `cp.async` (no `ld.global`) and,
/// copies included, issue under half the instructions (the numerics of both routes:
/// `tensor_core_backward_*_every_case`, whose 1 × 1 32 → 72 case takes the copies).
#[test]
fn channels_last_backward_counters_1x1() {
    let cfg = Conv2dConfig {
        dtype: DType::F16,
        arch: Arch::Sm80,
        ..Conv2dConfig::new(64, 64, 1)
    };
    assert!(cfg.has_channels_last_backward());
    let s = shape(2, 16, 16);
    let ptx = cfg.compile().expect("compiles").ptx;
    let dims = cfg.check_shape(&s, false).expect("valid shape");
    let dev = SimBackend::new();
    let mut rng = SplitMix64::new(41);
    let x = random::<f16>(&dev, &mut rng, dims.input_len(&cfg));
    let w = random::<f16>(&dev, &mut rng, ConvDims::weight_len(&cfg));
    let gy = random::<f16>(&dev, &mut rng, dims.output_len(&cfg));
    let alloc = |len: usize| dev.alloc::<f16>(len).expect("alloc");
    let passes = [
        (DATA_ENTRIES[1], DATA_ENTRIES[2], dims.input_len(&cfg)),
        (
            FILTER_ENTRIES[1],
            FILTER_ENTRIES[2],
            ConvDims::weight_len(&cfg),
        ),
    ];
    for (nchw, channels_last, outputs) in passes {
        let mut instructions = [0u64; 2];
        for (route, entry) in [nchw, channels_last].into_iter().enumerate() {
            let mut out = alloc(outputs);
            let run = if entry.starts_with("conv2d_bwd_data") {
                backward_data_with(&cfg, &dev, &ptx, &s, entry, &gy.dev, &w.dev, &mut out)
            } else {
                backward_filter_with(&cfg, &dev, &ptx, &s, entry, &x.dev, &gy.dev, &mut out, None)
            };
            must(entry, run);
            for r in dev.take_launch_log() {
                print_counters("1x1", &r, outputs as f64);
                instructions[route] += r.counters.instructions.total();
                if r.entry == channels_last {
                    assert_eq!(r.counters.global_load_requests, 0, "{entry}");
                    assert!(r.counters.cp_async_requests > 0, "{entry}");
                    assert!(r.counters.global_load_efficiency() >= 0.99, "{entry}");
                } else if r.entry == nchw {
                    assert_eq!(r.counters.cp_async_requests, 0, "{entry}");
                }
            }
        }
        let [gathers, copies] = instructions;
        println!("{nchw}: {gathers} instructions; channels-last with copies: {copies}");
        assert!(2 * copies < gathers, "{nchw}: {copies} vs {gathers}");
    }
}
