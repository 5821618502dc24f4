//! What the conv kernel tests share: the case table's row, seeded random cases, the
//! tolerances per dtype and the comparison, device download and launch unwrapping.
//!
//! Tolerances, as `max |got − want| / max |want|` over a tensor (the reference sees the same
//! rounded inputs the kernels do): f32 ≤ 1e-5, f16 ≤ 2e-3, bf16 ≤ 2e-2 (f32 accumulation, one
//! rounding of the output), f64 ≤ 1e-12.

// Each test binary uses its own subset.
#![allow(dead_code)]

use half::{bf16, f16};
use ptxforge_runtime::dtype::DType;
use ptxforge_runtime::launch::{
    Backend, DeviceBuffer, Element, LaunchError, LaunchRecord, SimBackend,
};
use ptxforge_runtime::templates::conv::kernels::{
    ENTRY_BWD_BIAS, ENTRY_BWD_BIAS_REDUCE, ENTRY_BWD_BIAS_SPLIT, ENTRY_BWD_DATA,
};
use ptxforge_runtime::templates::conv::launch::{backward_data_with, Slices};
use ptxforge_runtime::templates::conv::reference::{self, to_channels_last};
use ptxforge_runtime::templates::conv::{Conv2dConfig, ConvDims, ConvShape, Layout};
use ptxforge_runtime::templates::testing::{from_f64, to_f64, HostFloat, SplitMix64};
use ptxforge_runtime::templates::KernelFamily;
use ptxforge_runtime::Arch;

/// One problem of the table.
#[derive(Debug, Clone, Copy)]
pub struct Case {
    pub name: &'static str,
    pub cfg: Conv2dConfig,
    pub shape: ConvShape,
}

pub const fn shape(batch: u32, height: u32, width: u32) -> ConvShape {
    ConvShape {
        batch,
        height,
        width,
    }
}

/// Seeded random configurations and shapes (every input at least the dilated kernel): 1–3
/// groups of `per_group[i]` input and output channels each (`i` drawn per side), kernels up to
/// 4 × 4, strides up to 3, padding up to 2, dilation up to 2, batch 1–2, bias or not.
pub fn fuzz_cases_with(seed: u64, count: usize, per_group: &[u32]) -> Vec<Case> {
    let mut rng = SplitMix64::new(seed);
    let mut pick = |lo: u32, hi: u32| lo + rng.below(u64::from(hi - lo + 1)) as u32;
    let last = per_group.len() as u32 - 1;
    (0..count)
        .map(|_| {
            let groups = pick(1, 3);
            let cg = per_group[pick(0, last) as usize];
            let og = per_group[pick(0, last) as usize];
            let cfg = Conv2dConfig::new(groups * cg, groups * og, 1)
                .with_kernel(pick(1, 4), pick(1, 4))
                .with_stride(pick(1, 3), pick(1, 3))
                .with_padding(pick(0, 2), pick(0, 2))
                .with_dilation(pick(1, 2), pick(1, 2))
                .with_groups(groups)
                .with_bias(pick(0, 1) == 1);
            let (eh, ew) = cfg.dilated_extent();
            let height = (eh as u32).saturating_sub(2 * cfg.padding_h).max(1) + pick(0, 9);
            let width = (ew as u32).saturating_sub(2 * cfg.padding_w).max(1) + pick(0, 9);
            Case {
                name: "fuzz",
                cfg,
                shape: shape(pick(1, 2), height, width),
            }
        })
        .collect()
}

/// Tolerance of a dtype (module doc).
pub fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => 1e-5,
        DType::F16 => 2e-3,
        DType::BF16 => 2e-2,
        DType::F64 => 1e-12,
    }
}

pub fn assert_close(what: &str, got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-30);
    let (i, err) = got
        .iter()
        .zip(want)
        .map(|(g, w)| {
            if g.is_nan() {
                f64::INFINITY
            } else {
                (g - w).abs()
            }
        })
        .enumerate()
        .fold(
            (0, 0.0),
            |best, (i, e)| if e > best.1 { (i, e) } else { best },
        );
    assert!(
        err / scale <= tol,
        "{what}: element {i}: got {}, want {} (error {:e} relative to max {scale}, tolerance {tol:e})",
        got[i],
        want[i],
        err / scale
    );
}

pub fn download<T: HostFloat + Element>(
    dev: &SimBackend,
    buf: &DeviceBuffer<SimBackend, T>,
) -> Vec<f64> {
    to_f64(&dev.download(buf).expect("download"))
}

/// The entries the bias gradient of `cfg` launches on `shape` after `dw` (none without a
/// bias): `conv2d_bwd_bias` alone, or its split and reduce where the slice rule splits.
pub fn bias_entries(cfg: &Conv2dConfig, shape: &ConvShape) -> Vec<&'static str> {
    if !cfg.bias {
        return Vec::new();
    }
    let dims = cfg.check_shape(shape, false).expect("valid shape");
    match cfg.backward_bias_slices(&dims) {
        1 => vec![ENTRY_BWD_BIAS],
        _ => vec![ENTRY_BWD_BIAS_SPLIT, ENTRY_BWD_BIAS_REDUCE],
    }
}

/// Runs every case in both layouts on every target with seed `seed + i` (case `i`), the slice
/// count rotating through `slices` (each target meets every slice count over the cases: one
/// run per combination would take minutes).
pub fn rotate_slices(
    cases: &[Case],
    targets: &[(DType, Arch)],
    slices: &[Slices],
    seed: u64,
    run: impl Fn(&Case, Layout, (DType, Arch), Slices, u64),
) {
    let mut combo = 0;
    for (i, case) in cases.iter().enumerate() {
        for layout in Layout::ALL {
            combo += 1;
            for (t, &target) in targets.iter().enumerate() {
                run(
                    case,
                    layout,
                    target,
                    slices[(combo + t) % slices.len()],
                    seed + i as u64,
                );
            }
        }
    }
}

/// Asserts that `run` gives the same bits in linear block order and under two shuffled
/// orders (`label` names the case).
pub fn assert_same_bits_under_shuffles(
    label: &str,
    run: impl Fn(ptxforge_sim::Options) -> Vec<u64>,
) {
    let runs: Vec<Vec<u64>> = [None, Some(1), Some(2)]
        .into_iter()
        .map(|shuffle| {
            run(ptxforge_sim::Options {
                shuffle_blocks: shuffle,
                ..ptxforge_sim::Options::default()
            })
        })
        .collect();
    assert_eq!(runs[0], runs[1], "{label}");
    assert_eq!(runs[0], runs[2], "{label}");
}

pub fn must<T>(what: &str, r: Result<T, LaunchError>) -> T {
    r.unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// Shapes for the tensor-core paths: channel counts that are multiples of 8 (16-byte
/// `cp.async` chunks of A in NHWC and of B), ragged pixel and channel tiles, several K tiles
/// (the 3-stage ring wraps), and K or `Cg` not multiples of 8 (element-wise gathers).
pub fn tensor_core_cases() -> Vec<Case> {
    let c = Conv2dConfig::new;
    vec![
        Case {
            name: "tc 3x3 p1 16→24 groups 2 + bias (Cg 8, K 72, ragged M and Og)",
            cfg: c(16, 24, 3)
                .with_padding(1, 1)
                .with_groups(2)
                .with_bias(true),
            shape: shape(2, 9, 11),
        },
        Case {
            name: "tc 1x1 s2 32→72 (two channel tiles, K 32)",
            cfg: c(32, 72, 1).with_stride(2, 2),
            shape: shape(1, 17, 15),
        },
        Case {
            name: "tc 3x3 s2 d2 p2 8→8 + bias",
            cfg: c(8, 8, 3)
                .with_stride(2, 2)
                .with_dilation(2, 2)
                .with_padding(2, 2)
                .with_bias(true),
            shape: shape(2, 13, 10),
        },
        Case {
            name: "tc 3x3 p1 64→16 (18 K tiles)",
            cfg: c(64, 16, 3).with_padding(1, 1),
            shape: shape(1, 8, 9),
        },
        Case {
            name: "tc depthwise 3x3 24→24 groups 24 (Cg 1, K 9)",
            cfg: c(24, 24, 3).with_groups(24).with_padding(1, 1),
            shape: shape(1, 7, 6),
        },
        Case {
            name: "tc 3x3 p1 120→120 (NHWC backward on 128-channel tiles, ragged)",
            cfg: c(120, 120, 3).with_padding(1, 1),
            shape: shape(1, 5, 6),
        },
        Case {
            name: "tc 5x5 p2 12→20 groups 4 (Cg 3, K 75) + bias",
            cfg: c(12, 20, 5)
                .with_padding(2, 2)
                .with_groups(4)
                .with_bias(true),
            shape: shape(1, 6, 7),
        },
    ]
}

/// The label, PTX and checked dimensions of `case` under `cfg`.
pub fn prepare(case: &Case, cfg: &Conv2dConfig) -> (String, String, ConvDims) {
    let label = format!(
        "{} [{}] {} {} {:?}",
        case.name,
        cfg.matrix_name(),
        cfg.dtype,
        cfg.arch,
        case.shape
    );
    let ptx = cfg.compile().unwrap_or_else(|e| panic!("{label}: {e}")).ptx;
    let dims = cfg.check_shape(&case.shape, false).expect("valid shape");
    (label, ptx, dims)
}

/// A case compiled for one config: its label, module, checked dimensions and shape, and the
/// device that runs it.
pub struct Prepared {
    pub label: String,
    pub cfg: Conv2dConfig,
    pub ptx: String,
    pub dims: ConvDims,
    pub shape: ConvShape,
    pub dev: SimBackend,
}

impl Prepared {
    /// `case` compiled for `cfg` ([`prepare`]), to run on `dev`.
    pub fn new(case: &Case, cfg: Conv2dConfig, dev: SimBackend) -> Self {
        let (label, ptx, dims) = prepare(case, &cfg);
        Self {
            label,
            cfg,
            ptx,
            dims,
            shape: case.shape,
            dev,
        }
    }
}

/// Backward-filter shapes: a long reduction over several images (the ring wraps many times,
/// a K tile spans two images), two output-channel tiles and two filter-column tiles, stride
/// with dilation and padding, groups with a bias.
pub fn backward_filter_cases() -> Vec<Case> {
    let c = Conv2dConfig::new;
    vec![
        Case {
            name: "bwd-filter 3x3 p1 16→72 (two Og tiles, K 144: three column tiles) batch 3",
            cfg: c(16, 72, 3).with_padding(1, 1),
            shape: shape(3, 7, 9),
        },
        Case {
            name: "bwd-filter 3x3 s2 d2 p3 12→8 groups 4 + bias",
            cfg: c(12, 8, 3)
                .with_stride(2, 2)
                .with_dilation(2, 2)
                .with_padding(3, 3)
                .with_groups(4)
                .with_bias(true),
            shape: shape(2, 11, 13),
        },
        Case {
            name: "bwd-filter 1x1 s2 32→24 groups 2 (pixels per image 30)",
            cfg: c(32, 24, 1).with_stride(2, 2).with_groups(2),
            shape: shape(4, 10, 11),
        },
    ]
}

/// A forward problem in the NHWC layout: seeded inputs in `[-1, 1]` rounded to `T`, and the
/// NCHW f64 reference's output, all transposed to channels-last (`x [N, H, W, C_in]`, `w
/// [C_out, KH, KW, Cg]`, `want [N, OH, OW, C_out]`; the bias is `[C_out]` either way).
pub struct NhwcForward {
    pub x: Vec<f64>,
    pub w: Vec<f64>,
    pub bias: Vec<f64>,
    pub want: Vec<f64>,
}

impl NhwcForward {
    pub fn new<T: HostFloat>(
        cfg: &Conv2dConfig,
        s: &ConvShape,
        dims: &ConvDims,
        seed: u64,
    ) -> Self {
        let mut rng = SplitMix64::new(seed);
        let round = |v: Vec<f64>| to_f64(&from_f64::<T>(&v));
        let x = round(rng.vec_f64(dims.input_len(cfg), -1.0, 1.0));
        let w = round(rng.vec_f64(ConvDims::weight_len(cfg), -1.0, 1.0));
        let bias = round(rng.vec_f64(cfg.out_channels as usize, -1.0, 1.0));
        let want = reference::forward(cfg, s, &x, &w, cfg.bias.then_some(bias.as_slice()))
            .expect("reference");
        let (n, c_in, c_out) = (
            s.batch as usize,
            cfg.in_channels as usize,
            cfg.out_channels as usize,
        );
        let filter = [
            c_out,
            c_in / cfg.groups as usize,
            cfg.kernel_h as usize,
            cfg.kernel_w as usize,
        ];
        Self {
            x: to_channels_last(&x, [n, c_in, s.height as usize, s.width as usize]),
            w: to_channels_last(&w, filter),
            bias,
            want: to_channels_last(&want, [n, c_out, dims.out_h as usize, dims.out_w as usize]),
        }
    }
}

/// Runs `case`'s NCHW CUDA-core backward-data (`conv2d_bwd_data`) in `dtype` on `arch` and checks it against the
/// reference; returns the launch record.
pub fn run_backward_data<T: HostFloat + Element>(
    case: &Case,
    dtype: DType,
    arch: Arch,
    seed: u64,
) -> LaunchRecord {
    let cfg = Conv2dConfig {
        dtype,
        arch,
        bias: false,
        ..case.cfg
    };
    let (label, ptx, dims) = prepare(case, &cfg);
    let dev = SimBackend::new();
    let mut rng = SplitMix64::new(seed);
    let mut data = |len: usize| {
        let rounded: Vec<T> = from_f64(&rng.vec_f64(len, -1.0, 1.0));
        let buf = dev.upload(&rounded).expect("upload");
        (to_f64(&rounded), buf)
    };
    let (gy, gy_dev) = data(dims.output_len(&cfg));
    let (w, w_dev) = data(ConvDims::weight_len(&cfg));
    let want = reference::backward_data(&cfg, &case.shape, &gy, &w).expect("reference");
    let mut dx = dev.alloc::<T>(dims.input_len(&cfg)).expect("alloc");
    must(
        &label,
        backward_data_with(
            &cfg,
            &dev,
            &ptx,
            &case.shape,
            ENTRY_BWD_DATA,
            &gy_dev,
            &w_dev,
            &mut dx,
        ),
    );
    assert_close(&label, &download(&dev, &dx), &want, tolerance(dtype));
    dev.take_launch_log().pop().expect("one launch")
}

/// [`run_backward_data`] on every case: f32 on sm_80 and sm_70, f64 on sm_80, f16 on sm_70
/// and bf16 on sm_80, case `i` with seed `seed + i`.
pub fn run_backward_data_every_dtype(cases: &[Case], seed: u64) {
    for (i, case) in cases.iter().enumerate() {
        let seed = seed + i as u64;
        run_backward_data::<f32>(case, DType::F32, Arch::Sm80, seed);
        run_backward_data::<f32>(case, DType::F32, Arch::Sm70, seed);
        run_backward_data::<f64>(case, DType::F64, Arch::Sm80, seed);
        run_backward_data::<f16>(case, DType::F16, Arch::Sm70, seed);
        run_backward_data::<bf16>(case, DType::BF16, Arch::Sm80, seed);
    }
}

/// A tensor-core implicit GEMM launch of f16/bf16 entry `entry` of `cfg` (dtype and target
/// set) over an `m × n` GEMM reduced over `k` halves, per `z` grid slice, as its block tile
/// implies ([`Conv2dConfig::implicit_gemm_tile`]).
#[derive(Debug, Clone, Copy)]
pub struct GemmTiles {
    /// Blocks: `⌈m / rows⌉ · ⌈n / columns⌉ · z`.
    pub blocks: u64,
    /// K tiles per block, `⌈k / 32⌉`.
    pub k_tiles: u64,
    /// The tile `[rows, columns]`.
    pub tile: [u32; 2],
}

impl GemmTiles {
    pub fn new(cfg: &Conv2dConfig, entry: &str, [m, n, k]: [u64; 3], z: u64) -> Self {
        let tile = cfg
            .implicit_gemm_tile(entry)
            .unwrap_or_else(|| panic!("{entry} is a tensor-core GEMM"));
        let [rows, columns] = tile.map(u64::from);
        Self {
            blocks: m.div_ceil(rows) * n.div_ceil(columns) * z,
            k_tiles: k.div_ceil(32),
            tile,
        }
    }

    /// `mma.m16n8k16` issued: per block K tile, one per 16 × 8 output piece per 16-deep
    /// slice, two slices.
    pub fn mma(&self) -> u64 {
        let [rows, columns] = self.tile.map(u64::from);
        self.blocks * self.k_tiles * (rows / 16) * (columns / 8) * 2
    }

    /// Bytes both operands' K tiles take when every element arrives by `cp.async`: per
    /// block K tile, `rows + columns` tile rows × 32 halves.
    pub fn cp_async_bytes(&self) -> u64 {
        let [rows, columns] = self.tile.map(u64::from);
        self.blocks * self.k_tiles * (rows + columns) * 32 * 2
    }
}
