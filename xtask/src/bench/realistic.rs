//! Modelled H100 time of each family on realistic shapes (Mixtral expert GEMM, NF4 LLM layers,
//! long-context attention, ResNet-50 convolutions), next to the job's ideal roofline time. A
//! MODEL from interpreter counters (see [`super::model`]), not a measurement.
//!
//! The shapes are far too big to interpret, so each runs as samples: launches of the same
//! kernels with fewer identically-working blocks (scaled back by the block ratio) at two or
//! three values of one size parameter (the K loop's length, or the sequence length), extended
//! to the real value by the polynomial through them ([`lagrange_weights`]). Every sample runs
//! with the interpreter's checks off (the counter sections above run the same kernels with
//! every check on). Each row is run on two targets: sm_70 (no tensor cores: the CUDA-core path)
//! and sm_80 (the tensor-core path wherever a family has one); the ResNet weight gradient runs
//! on sm_80 only, unsplit and split. A second table puts each launch's grid and occupancy
//! beside the bound, and the waves-aware bound ([`super::model::waves_aware`]).

use std::fmt::Write as _;
use std::path::Path;

use half::{bf16, f16};
use ptxforge_runtime::launch::{Backend, LaunchRecord, SimBackend};
use ptxforge_runtime::ptxas::assemble;
use ptxforge_runtime::templates::attention::launch::{
    forward as attention_forward, AttentionBuffers,
};
use ptxforge_runtime::templates::attention::{AttentionConfig, AttentionShape};
use ptxforge_runtime::templates::conv::kernels::{
    ENTRY_BWD_DATA_IMPLICIT_GEMM, ENTRY_FILTER_TO_CHANNELS_LAST, ENTRY_GRADIENT_TO_CHANNELS_LAST,
    ENTRY_TO_CHANNELS_LAST,
};
use ptxforge_runtime::templates::conv::launch as conv;
use ptxforge_runtime::templates::conv::launch::Slices;
use ptxforge_runtime::templates::conv::{Conv2dConfig, ConvShape, Layout};
use ptxforge_runtime::templates::moe::launch::{forward as moe_forward, ExpertWeights};
use ptxforge_runtime::templates::moe::{Ffn, MoeConfig};
use ptxforge_runtime::templates::nf4::launch::{
    backward_gemv_slice_rows as nf4_backward_gemv_slice_rows,
    backward_gemv_sliced as nf4_backward_gemv, backward_gemv_slices as nf4_backward_gemv_slices,
    forward as nf4_forward, forward_tiled_sliced as nf4_forward_tiled,
    gemm_slices as nf4_gemm_slices, gemm_split_align as nf4_gemm_split_align, DeviceWeights,
};
use ptxforge_runtime::templates::nf4::{quantize, Nf4Config};
use ptxforge_runtime::templates::testing::SplitMix64;
use ptxforge_runtime::templates::KernelFamily;
use ptxforge_runtime::{Arch, DType};
use ptxforge_sim::Options;

use super::model::{
    blocks_per_sm, bound, ideal, lagrange_weights, us, waves, waves_aware, Job, Launch, Precision,
    Work, H100, H100_SM,
};

type Result<T> = std::result::Result<T, String>;

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The two paths each job runs on.
const PATHS: [(Arch, &str); 2] = [(Arch::Sm70, "CUDA cores"), (Arch::Sm80, "sm_80 path")];

/// One modelled job on one path.
pub struct Row {
    pub job: String,
    pub path: String,
    pub entries: String,
    pub sample: String,
    pub outputs: f64,
    pub work: Work,
    pub need: Job,
}

/// A job on one path: its row of the five-term table, and what the waves-aware table needs
/// (its launches at the real size, and the module they ran from, built for `arch`).
struct Modelled {
    row: Row,
    arch: Arch,
    sampled: Sampled,
}

impl Modelled {
    /// The row of `sampled` (entries and work from it).
    #[allow(clippy::too_many_arguments)]
    fn new(
        job: String,
        (arch, path): (Arch, &str),
        sample: String,
        outputs: f64,
        need: Job,
        sampled: Sampled,
    ) -> Modelled {
        Modelled {
            row: Row {
                job,
                path: path.into(),
                entries: sampled.entries.clone(),
                sample,
                outputs,
                work: sampled.work,
                need,
            },
            arch,
            sampled,
        }
    }
}

/// A backend for samples: counters on, checks off.
fn backend() -> SimBackend {
    SimBackend::with_options(Options::unchecked())
}

/// One launch of a sampled job at the real size: its entry, block shape, and its blocks and
/// work extended from the samples.
struct SampledLaunch {
    entry: String,
    blocks: f64,
    threads_per_block: u32,
    dynamic_shared_bytes: u32,
    work: Work,
}

/// A job's samples extended to the real size: the entries run, the total work, each launch in
/// order, and the module text of the last sample (for `ptxas -v`).
struct Sampled {
    entries: String,
    work: Work,
    launches: Vec<SampledLaunch>,
    ptx: String,
}

impl Sampled {
    /// `s` identically-working copies of every launch's blocks.
    fn scaled(&self, s: f64) -> Sampled {
        Sampled {
            entries: self.entries.clone(),
            work: self.work.scaled(s),
            launches: self
                .launches
                .iter()
                .map(|l| SampledLaunch {
                    entry: l.entry.clone(),
                    blocks: l.blocks * s,
                    work: l.work.scaled(s),
                    ..*l
                })
                .collect(),
            ptx: self.ptx.clone(),
        }
    }
}

/// Runs `launch(size)` (module text and launch log) at every sample size, weighs each launch's
/// counters and blocks by `scale(entry)` (the block ratio to the real shape), and extends each
/// launch to `at` by the polynomial through the samples ([`lagrange_weights`]; every sample must
/// launch the same entries in the same order).
fn sampled(
    sizes: &[u32],
    at: u32,
    mut launch: impl FnMut(u32) -> Result<(String, Vec<LaunchRecord>)>,
    scale: impl Fn(&str) -> f64,
) -> Result<Sampled> {
    let mut runs = Vec::with_capacity(sizes.len());
    let mut ptx = String::new();
    for &size in sizes {
        let (text, log) = launch(size)?;
        ptx = text;
        runs.push(log);
    }
    let first = runs.first().ok_or("no sample sizes")?;
    let same = |log: &Vec<LaunchRecord>| {
        log.len() == first.len() && log.iter().zip(first).all(|(a, b)| a.entry == b.entry)
    };
    if !runs.iter().all(same) {
        return Err("the samples launched different entries".into());
    }
    let xs: Vec<f64> = sizes.iter().map(|&x| f64::from(x)).collect();
    let weights = lagrange_weights(&xs, f64::from(at));
    let launches: Vec<SampledLaunch> = first
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let s = scale(&r.entry);
            let at_real = |of: &dyn Fn(&LaunchRecord) -> Work| {
                runs.iter()
                    .zip(&weights)
                    .fold(Work::default(), |acc, (run, w)| {
                        acc.plus(&of(&run[i]).scaled(s * w))
                    })
            };
            let blocks: f64 = runs
                .iter()
                .zip(&weights)
                .map(|(run, w)| {
                    let g = run[i].config.grid;
                    f64::from(g.x) * f64::from(g.y) * f64::from(g.z) * s * w
                })
                .sum();
            let b = r.config.block;
            SampledLaunch {
                entry: r.entry.clone(),
                blocks,
                threads_per_block: b.x * b.y * b.z,
                dynamic_shared_bytes: r.config.dynamic_shared_bytes,
                work: at_real(&|r| Work::from_counters(&r.counters)),
            }
        })
        .collect();
    let mut entries: Vec<&str> = Vec::new();
    for l in &launches {
        if !entries.contains(&l.entry.as_str()) {
            entries.push(&l.entry);
        }
    }
    Ok(Sampled {
        entries: entries.join(" + "),
        work: launches
            .iter()
            .fold(Work::default(), |acc, l| acc.plus(&l.work)),
        launches,
        ptx,
    })
}

fn halves(rng: &mut SplitMix64, n: usize, lo: f32, hi: f32) -> Vec<f16> {
    rng.vec_f32(n, lo, hi)
        .into_iter()
        .map(f16::from_f32)
        .collect()
}

/// An f16 NF4 config `W [n, k]` on `arch` (block 64), its module, an unchecked device and
/// random weights quantised and uploaded there.
fn nf4_sample(
    arch: Arch,
    n: u32,
    k: u32,
    rng: &mut SplitMix64,
) -> Result<(Nf4Config, String, SimBackend, DeviceWeights<SimBackend>)> {
    let cfg = Nf4Config {
        dtype: DType::F16,
        arch,
        ..Nf4Config::new(n, k)
    };
    let ptx = cfg.compile().map_err(err)?.ptx;
    let w = quantize(
        &rng.vec_f32((n * k) as usize, -1.0, 1.0),
        cfg.block as usize,
    )
    .map_err(err)?;
    let dev = backend();
    let weights = DeviceWeights::upload(&dev, &w).map_err(err)?;
    Ok((cfg, ptx, dev, weights))
}

/// Compulsory bytes of an f16 NF4 layer `W [n, k]` with `m` activation rows: packed codes, one
/// f32 absmax per 64 weights, and the activations in and out.
fn nf4_bytes(m: f64, n: f64, k: f64) -> f64 {
    n * k / 2.0 + n * k / 64.0 * 4.0 + 2.0 * (m * k + m * n)
}

/// NF4 f16 forward, K = 4096, N ∈ {4096, 14336}, M ∈ {1, 16, 256}, as `forward` runs it (the
/// tiled forward split over K as `Slices::Auto` splits the real shape, [`nf4_forward_plan`]),
/// and at M = 16, where sm_80 splits, also unsplit on sm_80 for comparison. Sample: N = 128 columns, min(M, 128)
/// rows; unsplit K ∈ {512, 1024}, split the real slice count `S` with slices of one and two
/// alignment steps `a` (K ∈ {S·a, 2·S·a}) → 4096, linear in K; blocks tile N and M (and the
/// slices), so the block ratio is exact.
fn nf4(rows: &mut Vec<Modelled>) -> Result<()> {
    let mut rng = SplitMix64::new(21);
    for m in [1u32, 16, 256] {
        nf4_rows(rows, m, &mut rng)?;
    }
    Ok(())
}

/// [`nf4`]'s rows of one `m`.
fn nf4_rows(rows: &mut Vec<Modelled>, m: u32, rng: &mut SplitMix64) -> Result<()> {
    const K: u32 = 4096;
    const NS: u32 = 128;
    let ms = m.min(128);
    for n in [4096u32, 14336] {
        // Beside a split sm_80 row at M = 16 (and 128, the tall tiles' split), the same job
        // unsplit.
        let splits = nf4_forward_plan(Arch::Sm80, (m, n, K), true).0 > 1;
        let compared = matches!(m, 16 | 128) && splits;
        let unsplit = compared.then_some((Arch::Sm80, "sm_80, unsplit", false));
        let paths = PATHS.into_iter().map(|(arch, path)| (arch, path, true));
        for (arch, path, split) in paths.chain(unsplit) {
            let (slices, sizes) = nf4_forward_plan(arch, (m, n, K), split);
            let per = sampled(
                &sizes,
                K,
                |k| {
                    let (cfg, ptx, dev, weights) = nf4_sample(arch, NS, k, rng)?;
                    let a = dev
                        .upload(&halves(rng, (ms * k) as usize, -1.0, 1.0))
                        .map_err(err)?;
                    let mut c = dev.alloc::<f16>((ms * NS) as usize).map_err(err)?;
                    if m <= 8 {
                        nf4_forward(&cfg, &dev, &ptx, ms, &a, &weights, &mut c)
                    } else {
                        let slices = Slices::Exactly(slices);
                        nf4_forward_tiled(&cfg, &dev, &ptx, ms, slices, &a, &weights, &mut c)
                    }
                    .map_err(err)?;
                    Ok((ptx, dev.take_launch_log()))
                },
                |_| f64::from(m) / f64::from(ms),
            )?;
            let (mf, nf, kf) = (f64::from(m), f64::from(n), f64::from(K));
            let bytes = nf4_bytes(mf, nf, kf);
            let workspace = if slices > 1 {
                4.0 * f64::from(slices) * mf * nf
            } else {
                0.0
            };
            let sample = if slices > 1 {
                format!(
                    "N=128, M={ms}, {slices} slices, K={}/{} → {K}, ×{}",
                    sizes[0],
                    sizes[1],
                    n / NS
                )
            } else {
                format!("N=128, M={ms}, K=512/1024 → {K}, ×{}", n / NS)
            };
            rows.push(Modelled::new(
                format!("NF4 f16 forward N={n} K={K} M={m}"),
                (arch, path),
                sample,
                mf * nf,
                Job {
                    compulsory_bytes: bytes,
                    footprint_bytes: bytes + 2.0 * workspace,
                    flops: 2.0 * mf * nf * kf,
                    precision: Precision::F16Tensor,
                },
                per.scaled(nf / f64::from(NS)),
            ));
        }
    }
    Ok(())
}

/// How the NF4 f16 forward row of `(m, n, k)` on `arch` runs and is sampled: its K slice count
/// (`Slices::Auto`'s rule, `gemm_slices`, for the tiled forward when `split`; 1 for the GEMV,
/// `m ≤ 8`) and its two sample K values (unsplit 512 and 1024; split `S·a` and `2·S·a`, `a`
/// the path's split alignment, so each sample's `S` slices are whole alignment steps).
fn nf4_forward_plan(arch: Arch, (m, n, k): (u32, u32, u32), split: bool) -> (u32, [u32; 2]) {
    let cfg = Nf4Config {
        dtype: DType::F16,
        arch,
        ..Nf4Config::new(n, k)
    };
    let slices = if split && m > 8 {
        nf4_gemm_slices(&cfg, m)
    } else {
        1
    };
    if slices == 1 {
        return (1, [512, 1024]);
    }
    let step = slices * nf4_gemm_split_align(&cfg);
    (slices, [step, 2 * step])
}

/// NF4 f16 backward-input, N = K = 4096, M = 1 (the backward GEMV), split as `Slices::Auto`
/// splits the real shape (32 slices of 128 rows by 8 blocks of 512 columns), and unsplit on
/// sm_80 for comparison. Sample: one 512-column block (K = 512, ×8 exact) and, split, the same
/// slice count with half and all of the real rows per slice (N = 64·S, 128·S = 4096: the real
/// launch is the second sample; a slice's cost is not linear below its first full loop trips
/// and absmax passes, so smaller samples would extrapolate low); unsplit N = 512, 1024 (2 and
/// 4 whole 256-row windows) → 4096.
fn nf4_backward(rows: &mut Vec<Modelled>) -> Result<()> {
    const N: u32 = 4096;
    const K: u32 = 4096;
    const KS: u32 = 512;
    let m = 1u32;
    let auto = nf4_backward_gemv_slices(&Nf4Config {
        dtype: DType::F16,
        ..Nf4Config::new(N, K)
    });
    let mut rng = SplitMix64::new(26);
    for (arch, path, slices) in [
        (PATHS[0].0, PATHS[0].1.to_string(), auto),
        (PATHS[1].0, PATHS[1].1.to_string(), auto),
        (Arch::Sm80, "sm_80, unsplit".to_string(), 1),
    ] {
        let sizes = if slices == 1 {
            [512, 1024]
        } else {
            let rows = nf4_backward_gemv_slice_rows(&Nf4Config::new(N, K), slices);
            [rows / 2 * slices, rows * slices]
        };
        let per = sampled(
            &sizes,
            N,
            |n| {
                let (cfg, ptx, dev, weights) = nf4_sample(arch, n, KS, &mut rng)?;
                let g_c = dev
                    .upload(&halves(&mut rng, (m * n) as usize, -1.0, 1.0))
                    .map_err(err)?;
                let mut g_a = dev.alloc::<f16>((m * KS) as usize).map_err(err)?;
                nf4_backward_gemv(
                    &cfg,
                    &dev,
                    &ptx,
                    m,
                    Slices::Exactly(slices),
                    &g_c,
                    &weights,
                    &mut g_a,
                )
                .map_err(err)?;
                Ok((ptx, dev.take_launch_log()))
            },
            |_| 1.0,
        )?;
        let (mf, nf, kf) = (f64::from(m), f64::from(N), f64::from(K));
        let bytes = nf4_bytes(mf, nf, kf);
        let workspace = 4.0 * f64::from(slices) * mf * kf;
        rows.push(Modelled::new(
            format!("NF4 f16 backward-input N={N} K={K} M={m}"),
            (arch, path.as_str()),
            format!(
                "K=512, {slices} slice(s) of N={}/{} rows → {}, ×{}",
                sizes[0] / slices,
                sizes[1] / slices,
                nf4_backward_gemv_slice_rows(&Nf4Config::new(N, K), slices),
                K / KS
            ),
            mf * kf,
            Job {
                compulsory_bytes: bytes,
                footprint_bytes: bytes + 2.0 * workspace,
                flops: 2.0 * mf * nf * kf,
                precision: Precision::F16Tensor,
            },
            per.scaled(kf / f64::from(KS)),
        ));
    }
    Ok(())
}

/// Attention forward f16, B=1, H=32, S=4096, D=128. Full: one head, 128 queries, keys ∈ {256,
/// 512} → 4096 (linear in the key count), × 32 query blocks × 32 heads. Causal: one head, every
/// query block, S ∈ {128, 256, 384} → 4096 (quadratic in S), × 32 heads.
fn attention(rows: &mut Vec<Modelled>) -> Result<()> {
    const S: u32 = 4096;
    const D: u32 = 128;
    const H: u32 = 32;
    let mut rng = SplitMix64::new(22);
    for causal in [false, true] {
        for (arch, path) in PATHS {
            let cfg = AttentionConfig {
                causal,
                dtype: DType::F16,
                arch,
                ..AttentionConfig::new(D)
            };
            let ptx = cfg.compile().map_err(err)?.ptx;
            let mut run = |seq_q: u32, seq_kv: u32| -> Result<(String, Vec<LaunchRecord>)> {
                let dev = backend();
                let shape = AttentionShape {
                    batch: 1,
                    heads_q: 1,
                    heads_kv: 1,
                    seq_q,
                    seq_kv,
                };
                let q = dev
                    .upload(&halves(&mut rng, (seq_q * D) as usize, -1.0, 1.0))
                    .map_err(err)?;
                let k = dev
                    .upload(&halves(&mut rng, (seq_kv * D) as usize, -1.0, 1.0))
                    .map_err(err)?;
                let v = dev
                    .upload(&halves(&mut rng, (seq_kv * D) as usize, -1.0, 1.0))
                    .map_err(err)?;
                let o = dev.alloc::<f16>((seq_q * D) as usize).map_err(err)?;
                let lse = dev.alloc::<f32>(seq_q as usize).map_err(err)?;
                let bufs = AttentionBuffers {
                    q: &q,
                    k: &k,
                    v: &v,
                    o: &o,
                    lse: &lse,
                };
                attention_forward(&cfg, &dev, &ptx, &shape, &bufs, None).map_err(err)?;
                Ok((ptx.clone(), dev.take_launch_log()))
            };
            let (sampled, sample) = if causal {
                (
                    sampled(&[128, 256, 384], S, |s| run(s, s), |_| f64::from(H))?,
                    "H=1, S=128/256/384 → 4096 (quadratic), ×32 heads".to_string(),
                )
            } else {
                (
                    sampled(
                        &[256, 512],
                        S,
                        |kv| run(128, kv),
                        |_| f64::from(H * S / 128),
                    )?,
                    "H=1, 128 queries, keys 256/512 → 4096, ×1024 blocks".to_string(),
                )
            };
            let (s, d, h) = (f64::from(S), f64::from(D), f64::from(H));
            let pairs = if causal { s * (s + 1.0) / 2.0 } else { s * s };
            let bytes = 4.0 * h * s * d * 2.0 + h * s * 4.0;
            let mask = if causal { "causal" } else { "full" };
            rows.push(Modelled::new(
                format!("attention f16 fwd {mask} B=1 H=32 S=4096 D=128"),
                (arch, path),
                sample,
                h * s * d,
                Job {
                    compulsory_bytes: bytes,
                    footprint_bytes: bytes,
                    flops: 4.0 * h * pairs * d,
                    precision: Precision::F16Tensor,
                },
                sampled,
            ));
        }
    }
    Ok(())
}

/// ResNet-50 conv3_x layers at batch 32, f16: 3×3 128→128 and 1×1 128→512 on 28×28, stride 1,
/// in NCHW and NHWC (PyTorch's channels_last, the layout tensor-core convolutions use), through
/// [`conv::forward`] (the entry the family chooses for the target and layout: the tensor-core
/// implicit GEMM on sm_80 — for the NCHW 3×3 after the channels-last pre-passes, whose
/// copies count in the footprint, for the NCHW 1×1 `conv2d_implicit_gemm_pointwise`, which
/// reads `x` as it is — `conv2d_1x1` / `conv2d_direct` / `conv2d_nhwc` on sm_70).
/// Sample: batch 1, 128 output channels (the 128 × 128 tile's width, as at the real 128 and
/// 512), C_in ∈ {32, 64} → 128 (linear in the reduction: whole 32-deep K tiles, 9 and 18 for
/// the 3×3, 1 and 2 for the 1×1).
fn resnet(rows: &mut Vec<Modelled>) -> Result<()> {
    const BATCH: u32 = 32;
    const HW: u32 = 28;
    const CIN: u32 = 128;
    const COUT_SAMPLE: u32 = 128;
    let mut rng = SplitMix64::new(23);
    for (kernel, cout) in [(3u32, 128u32), (1, 512)] {
        for layout in [Layout::Nchw, Layout::Nhwc] {
            for (arch, path) in PATHS {
                let shape = ConvShape {
                    batch: 1,
                    height: HW,
                    width: HW,
                };
                let sampled = sampled(
                    &[32, 64],
                    CIN,
                    |cin| {
                        let cfg = Conv2dConfig {
                            padding_h: kernel / 2,
                            padding_w: kernel / 2,
                            dtype: DType::F16,
                            layout,
                            arch,
                            ..Conv2dConfig::new(cin, COUT_SAMPLE, kernel)
                        };
                        let ptx = cfg.compile().map_err(err)?.ptx;
                        let dev = backend();
                        let pixels = (HW * HW) as usize;
                        let x = dev
                            .upload(&halves(&mut rng, cin as usize * pixels, -1.0, 1.0))
                            .map_err(err)?;
                        let wlen = (COUT_SAMPLE * cin * kernel * kernel) as usize;
                        let w = dev
                            .upload(&halves(&mut rng, wlen, -0.3, 0.3))
                            .map_err(err)?;
                        let mut y = dev
                            .alloc::<f16>(COUT_SAMPLE as usize * pixels)
                            .map_err(err)?;
                        conv::forward(&cfg, &dev, &ptx, &shape, &x, &w, None, &mut y)
                            .map_err(err)?;
                        Ok((ptx, dev.take_launch_log()))
                    },
                    // The layout pre-passes scale with what they move: the input with the
                    // batch, the filter with the output channels; everything else with both.
                    |entry| match entry {
                        ENTRY_TO_CHANNELS_LAST => f64::from(BATCH),
                        ENTRY_FILTER_TO_CHANNELS_LAST => f64::from(cout / COUT_SAMPLE),
                        _ => f64::from(BATCH * cout / COUT_SAMPLE),
                    },
                )?;
                let (n, p, ci, co, kk) = (
                    f64::from(BATCH),
                    f64::from(HW * HW),
                    f64::from(CIN),
                    f64::from(cout),
                    f64::from(kernel * kernel),
                );
                let bytes = 2.0 * (n * p * ci + co * ci * kk + n * p * co);
                // The channels-last copies of `x` and `w` the forward launched, each written
                // once and read once.
                let launched = |entry: &str, elements: f64| {
                    let copied = sampled.launches.iter().any(|l| l.entry == entry);
                    if copied {
                        2.0 * 2.0 * elements
                    } else {
                        0.0
                    }
                };
                let copies = launched(ENTRY_TO_CHANNELS_LAST, n * p * ci)
                    + launched(ENTRY_FILTER_TO_CHANNELS_LAST, co * ci * kk);
                rows.push(Modelled::new(
                    format!(
                        "ResNet-50 conv {kernel}×{kernel} {CIN}→{cout} 28×28 batch 32 f16 fwd, {}",
                        layout_name(layout)
                    ),
                    (arch, path),
                    format!(
                        "batch 1, C_out={COUT_SAMPLE}, C_in=32/64 → 128, ×{}",
                        BATCH * cout / COUT_SAMPLE
                    ),
                    n * p * co,
                    Job {
                        compulsory_bytes: bytes,
                        footprint_bytes: bytes + copies,
                        flops: 2.0 * n * p * co * ci * kk,
                        precision: Precision::F16Tensor,
                    },
                    sampled,
                ));
            }
        }
    }
    Ok(())
}

fn layout_name(layout: Layout) -> &'static str {
    match layout {
        Layout::Nchw => "NCHW",
        Layout::Nhwc => "NHWC",
    }
}

/// ResNet-50's 3×3 128→128 28×28 batch-32 weight gradient, f16, on sm_80's tensor-core
/// backward-filter. NHWC: unsplit (`conv2d_bwd_filter_implicit_gemm` on 128 × 64 tiles:
/// ⌈128/128⌉·⌈128·9/64⌉ = 18 blocks, each reducing over all 25088 pixels) and split as [`Slices::Auto`] splits the
/// real shape (`conv2d_bwd_filter_implicit_gemm_split` into S slices, then
/// `conv2d_bwd_filter_reduce`). NCHW, split likewise: the NCHW implicit GEMM's element
/// gathers, and the path `conv::backward_filter` takes, the channels-last copies of `x` and
/// `gy` (`conv2d_to_channels_last`, `conv2d_gradient_to_channels_last`, counted in the
/// footprint) and `conv2d_bwd_filter_implicit_gemm_channels_last_split`. Sample: all 128
/// output channels (the GEMM's 128-row tile over them), batch ∈ {8, 16} → 32 (linear in the
/// pixels reduced), with the real shape's S at every sample.
fn resnet_backward_filter(rows: &mut Vec<Modelled>) -> Result<()> {
    const BATCH: u32 = 32;
    const HW: u32 = 28;
    const C: u32 = 128;
    // All 128 output channels: the GEMM's 128 × 64 tile spans them (64 would take 64 × 64).
    const COUT_SAMPLE: u32 = C;
    /// How a row runs the weight gradient.
    #[derive(Clone, Copy, PartialEq)]
    enum Route {
        InLayout,
        ChannelsLast,
    }
    let mut rng = SplitMix64::new(25);
    for layout in [Layout::Nhwc, Layout::Nchw] {
        let real = Conv2dConfig {
            padding_h: 1,
            padding_w: 1,
            dtype: DType::F16,
            layout,
            arch: Arch::Sm80,
            ..Conv2dConfig::new(C, C, 3)
        };
        let dims = real
            .check_shape(
                &ConvShape {
                    batch: BATCH,
                    height: HW,
                    width: HW,
                },
                false,
            )
            .map_err(err)?;
        let auto = real.backward_filter_slices(&dims);
        let cfg = Conv2dConfig {
            out_channels: COUT_SAMPLE,
            ..real
        };
        let ptx = cfg.compile().map_err(err)?.ptx;
        let split = |slices| format!("split in {slices} (Slices::Auto)");
        let paths = match layout {
            Layout::Nhwc => vec![
                (1, Route::InLayout, "sm_80, unsplit".to_string()),
                (auto, Route::InLayout, format!("sm_80, {}", split(auto))),
            ],
            Layout::Nchw => {
                let copied = real.backward_filter_channels_last_slices(&dims);
                vec![
                    (
                        auto,
                        Route::InLayout,
                        format!("sm_80 NCHW gathers, {}", split(auto)),
                    ),
                    (
                        copied,
                        Route::ChannelsLast,
                        format!("sm_80 path: channels-last copies, {}", split(copied)),
                    ),
                ]
            }
        };
        for (slices, route, path) in paths {
            let sampled = sampled(
                &[8, 16],
                BATCH,
                |batch| {
                    let shape = ConvShape {
                        batch,
                        height: HW,
                        width: HW,
                    };
                    let pixels = (batch * HW * HW) as usize;
                    let dev = backend();
                    let x = dev
                        .upload(&halves(&mut rng, C as usize * pixels, -1.0, 1.0))
                        .map_err(err)?;
                    let gy = dev
                        .upload(&halves(&mut rng, COUT_SAMPLE as usize * pixels, -1.0, 1.0))
                        .map_err(err)?;
                    let mut dw = dev
                        .alloc::<f16>((COUT_SAMPLE * C * 9) as usize)
                        .map_err(err)?;
                    let run = match route {
                        Route::InLayout => conv::backward_filter_sliced,
                        Route::ChannelsLast => conv::backward_filter_channels_last_sliced,
                    };
                    let slices = Slices::Exactly(slices);
                    run(&cfg, &dev, &ptx, &shape, slices, &x, &gy, &mut dw, None).map_err(err)?;
                    Ok((ptx.clone(), dev.take_launch_log()))
                },
                // The `x` copy moves the whole input whatever the sampled output channels.
                |entry| match entry {
                    ENTRY_TO_CHANNELS_LAST => 1.0,
                    _ => f64::from(C / COUT_SAMPLE),
                },
            )?;
            let (n, p, c) = (f64::from(BATCH), f64::from(HW * HW), f64::from(C));
            let bytes = 2.0 * (2.0 * n * p * c + c * c * 9.0);
            let workspace = 4.0 * f64::from(slices) * c * c * 9.0;
            // The copies of `x` and `gy`, each written once and read once.
            let copies = match route {
                Route::InLayout => 0.0,
                Route::ChannelsLast => 2.0 * 2.0 * (2.0 * n * p * c),
            };
            rows.push(Modelled::new(
                format!(
                    "ResNet-50 conv 3×3 128→128 28×28 batch 32 f16 backward-filter, {}",
                    layout_name(layout)
                ),
                (Arch::Sm80, path.as_str()),
                format!("C_out={COUT_SAMPLE}, batch 8/16 → 32, ×{}", C / COUT_SAMPLE),
                c * c * 9.0,
                Job {
                    compulsory_bytes: bytes,
                    footprint_bytes: bytes + 2.0 * workspace + copies,
                    flops: 2.0 * n * p * c * c * 9.0,
                    precision: Precision::F16Tensor,
                },
                sampled,
            ));
        }
    }
    Ok(())
}

/// ResNet-50's 3×3 128→128 28×28 batch-32 input gradient, f16, on sm_80's tensor cores:
/// NHWC (`conv2d_bwd_data_implicit_gemm`), and NCHW through its element gathers (the same
/// entry in NCHW, by `backward_data_with`) and through the path `conv::backward_data` takes,
/// the channels-last copies of `w` and `gy` (`conv2d_filter_to_channels_last`,
/// `conv2d_gradient_to_channels_last`, counted in the footprint) and
/// `conv2d_bwd_data_implicit_gemm_channels_last`. Sample: batch 1, all 128 input channels,
/// C_out ∈ {32, 64} → 128 (linear in the reduction); the `gy` copy × 32 (the batch), the GEMM
/// × 32.
fn resnet_backward_data(rows: &mut Vec<Modelled>) -> Result<()> {
    const BATCH: u32 = 32;
    const HW: u32 = 28;
    const C: u32 = 128;
    // All 128 input channels: the GEMM's 64 × 128 tile spans them (64 would take 64 × 64).
    const CIN_SAMPLE: u32 = C;
    let mut rng = SplitMix64::new(26);
    let paths = [
        (
            Layout::Nhwc,
            Some(ENTRY_BWD_DATA_IMPLICIT_GEMM),
            "sm_80 path",
        ),
        (
            Layout::Nchw,
            Some(ENTRY_BWD_DATA_IMPLICIT_GEMM),
            "sm_80 NCHW gathers",
        ),
        (Layout::Nchw, None, "sm_80 path: channels-last copies"),
    ];
    for (layout, entry, path) in paths {
        let shape = ConvShape {
            batch: 1,
            height: HW,
            width: HW,
        };
        // K = 9·C_out: 9 and 18 whole K tiles (at 16 or 32 output channels ptxas unrolls
        // the short K loop and the module takes 238 registers; the real one 141).
        let sampled = sampled(
            &[32, 64],
            C,
            |cout| {
                let cfg = Conv2dConfig {
                    padding_h: 1,
                    padding_w: 1,
                    dtype: DType::F16,
                    layout,
                    arch: Arch::Sm80,
                    ..Conv2dConfig::new(CIN_SAMPLE, cout, 3)
                };
                let ptx = cfg.compile().map_err(err)?.ptx;
                let dev = backend();
                let pixels = (HW * HW) as usize;
                let gy = dev
                    .upload(&halves(&mut rng, cout as usize * pixels, -1.0, 1.0))
                    .map_err(err)?;
                let wlen = (cout * CIN_SAMPLE * 9) as usize;
                let w = dev
                    .upload(&halves(&mut rng, wlen, -0.3, 0.3))
                    .map_err(err)?;
                let mut dx = dev
                    .alloc::<f16>(CIN_SAMPLE as usize * pixels)
                    .map_err(err)?;
                match entry {
                    Some(entry) => {
                        conv::backward_data_with(&cfg, &dev, &ptx, &shape, entry, &gy, &w, &mut dx)
                    }
                    None => conv::backward_data(&cfg, &dev, &ptx, &shape, &gy, &w, &mut dx),
                }
                .map_err(err)?;
                Ok((ptx, dev.take_launch_log()))
            },
            |entry| match entry {
                ENTRY_GRADIENT_TO_CHANNELS_LAST => f64::from(BATCH),
                ENTRY_FILTER_TO_CHANNELS_LAST => f64::from(C / CIN_SAMPLE),
                _ => f64::from(BATCH * C / CIN_SAMPLE),
            },
        )?;
        let (n, p, c) = (f64::from(BATCH), f64::from(HW * HW), f64::from(C));
        let bytes = 2.0 * (2.0 * n * p * c + c * c * 9.0);
        // The copies of `gy` and `w`, each written once and read once.
        let copies = match entry {
            Some(_) => 0.0,
            None => 2.0 * 2.0 * (n * p * c + c * c * 9.0),
        };
        rows.push(Modelled::new(
            format!(
                "ResNet-50 conv 3×3 128→128 28×28 batch 32 f16 backward-data, {}",
                layout_name(layout)
            ),
            (Arch::Sm80, path),
            format!(
                "batch 1, C_in={CIN_SAMPLE}, C_out=32/64 → 128, ×{}",
                BATCH * C / CIN_SAMPLE
            ),
            n * p * c,
            Job {
                compulsory_bytes: bytes,
                footprint_bytes: bytes + copies,
                flops: 2.0 * n * p * c * c * 9.0,
                precision: Precision::F16Tensor,
            },
            sampled,
        ));
    }
    Ok(())
}

/// Mixtral-8x7B expert up-projection as a linear-expert MoE layer, bf16: E=8, top-2, H=4096,
/// F=14336, T ∈ {16, 128, 512}. Sample: F=64, H ∈ {128, 256} → 4096; the expert GEMM and
/// unpermute launches (work ∝ F) × 224, routing launches as run. The gating logits are the
/// same at every sample size, so routing (and padding) is that of the real layer.
fn moe(rows: &mut Vec<Modelled>) -> Result<()> {
    const E: u32 = 8;
    const TOP: u32 = 2;
    const H: u32 = 4096;
    const F: u32 = 14336;
    // A multiple of every expert tile's width (128), so the sampled launch has no padding
    // columns the scaling would multiply.
    const FS: u32 = 128;
    let mut rng = SplitMix64::new(24);
    for tokens in [16u32, 128, 512] {
        let logits: Vec<bf16> = rng
            .vec_f32((tokens * E) as usize, -2.0, 2.0)
            .into_iter()
            .map(bf16::from_f32)
            .collect();
        for (arch, path) in PATHS {
            let sampled = sampled(
                &[128, 256],
                H,
                |h| {
                    let cfg = MoeConfig {
                        ffn: Ffn::Linear,
                        dtype: DType::BF16,
                        capacity_factor: Some(1.25),
                        arch,
                        ..MoeConfig::new(E, TOP, h, FS)
                    };
                    let ptx = cfg.compile().map_err(err)?.ptx;
                    let dev = backend();
                    let up = |v: Vec<f32>| {
                        dev.upload(&v.into_iter().map(bf16::from_f32).collect::<Vec<_>>())
                    };
                    let x = up(rng.vec_f32((tokens * h) as usize, -1.0, 1.0)).map_err(err)?;
                    let w = up(rng.vec_f32((E * FS * h) as usize, -0.1, 0.1)).map_err(err)?;
                    let l = dev.upload(&logits).map_err(err)?;
                    let out = dev
                        .alloc::<bf16>((tokens * cfg.out_width()) as usize)
                        .map_err(err)?;
                    let weights = ExpertWeights::Linear { w: &w };
                    moe_forward(&cfg, &dev, &ptx, tokens, &x, &l, weights, &out).map_err(err)?;
                    Ok((ptx, dev.take_launch_log()))
                },
                |entry| {
                    if entry.contains("expert") || entry.contains("unpermute") {
                        f64::from(F / FS)
                    } else {
                        1.0
                    }
                },
            )?;
            let (t, e, h, f) = (f64::from(tokens), f64::from(E), f64::from(H), f64::from(F));
            let bytes = 2.0 * (e * f * h + t * h + t * f + t * e);
            let layer = MoeConfig {
                ffn: Ffn::Linear,
                dtype: DType::BF16,
                capacity_factor: Some(1.25),
                ..MoeConfig::new(E, TOP, H, F)
            };
            let workspace = moe_workspace_bytes(&layer, tokens);
            rows.push(Modelled::new(
                format!("Mixtral expert up-projection bf16 T={tokens} (E=8 top-2 H=4096 F=14336, linear)"),
                (arch, path),
                format!("F={FS}, H=128/256 → 4096, expert launches ×{}", F / FS),
                t * f,
                Job {
                    compulsory_bytes: bytes,
                    footprint_bytes: bytes + 2.0 * workspace,
                    flops: 2.0 * t * f64::from(TOP) * h * f,
                    precision: Precision::F16Tensor,
                },
                sampled,
            ));
        }
    }
    Ok(())
}

/// The bytes of a MoE layer's intermediates at `tokens` (written once, read once: counted twice
/// in its footprint, as the other jobs' workspaces): the permuted expert outputs `[E·C, F]` and
/// the routing buffers (top-k indices, weights and slots per pair, token ids per bin slot,
/// per-expert counts, routed counts and offsets; the work-item list is negligible).
fn moe_workspace_bytes(cfg: &MoeConfig, tokens: u32) -> f64 {
    let elem = f64::from(cfg.dtype.size_bytes());
    let experts = f64::from(cfg.experts);
    let slots = experts * cfg.capacity(tokens) as f64;
    let pairs = f64::from(tokens) * f64::from(cfg.top_k);
    let routing = pairs * (4.0 + elem + 4.0) + slots * 4.0 + experts * 3.0 * 4.0;
    slots * f64::from(cfg.out_width()) * elem + routing
}

/// Every realistic job on its paths.
fn jobs() -> Result<Vec<Modelled>> {
    let mut rows = Vec::new();
    moe(&mut rows)?;
    nf4(&mut rows)?;
    nf4_backward(&mut rows)?;
    attention(&mut rows)?;
    resnet(&mut rows)?;
    resnet_backward_data(&mut rows)?;
    resnet_backward_filter(&mut rows)?;
    Ok(rows)
}

/// The table header and one line per row, shared with the Triton comparison.
pub fn table(md: &mut String, rows: &[Row]) {
    md.push_str(
        "| job | kernel path | entries | sample → real | instr/output | tensor-core share | load eff. | DRAM MB | bound µs (limiter) | ideal µs | ideal/bound |\n\
         |---|---|---|---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let b = bound(&r.work, &r.need, &H100);
        let ideal = ideal(&r.need, &H100);
        let dram = r.work.sector_bytes().min(r.need.footprint_bytes);
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {:.1} | {:.1}% | {:.2} | {:.1} | {} ({}) | {} | {:.2} |",
            r.job,
            r.path,
            r.entries,
            r.sample,
            r.work.thread_instructions / r.outputs,
            100.0 * r.work.tensor_share(),
            r.work.load_efficiency(),
            dram / 1e6,
            us(b.seconds()),
            b.limiter(),
            us(ideal),
            ideal / b.seconds()
        );
    }
}

/// The section: what the model is, then the table.
pub fn section(md: &mut String, ptxas: &Path, scratch: &Path) -> Result<()> {
    let jobs = jobs()?;
    md.push_str("## Modelled H100 time (a MODEL, not a measurement)\n\n");
    md.push_str(
        "A roofline lower bound on an H100 SXM from the interpreter's counters, on realistic \
         shapes: **bound** = max(DRAM bytes / 3.35 TB/s, tensor FLOPs / 989 TFLOP/s (tf32: \
         494.5), FP32-pipe thread-instructions × 2 / 67 TFLOP/s, warp instructions / (132 SMs × \
         4 schedulers × 1.98 GHz), shared-memory wavefronts / (132 SMs × 1.98 GHz)), where DRAM \
         bytes are the 32-byte sectors the kernel moved, capped at the bytes of the buffers it \
         touches (a perfect L2), warp instructions are thread-instructions ÷ 32, and shared \
         wavefronts are the interpreter's count of 128-byte shared-memory cycles (ordinary \
         requests, `ldmatrix` and `cp.async` writes, bank conflicts included; an SM serves one \
         per cycle) — a fifth term beyond the issue's four, since a tensor-core kernel's \
         `ldmatrix` traffic can be its limit. **ideal** = max(compulsory bytes / 3.35 TB/s, required FLOPs \
         / the job's peak); ideal/bound is the roofline fraction the kernel's own work allows. \
         No GPU timed these: real kernels run slower than the bound (latency, occupancy, \
         `mma.sync` reaches only part of H100's `wgmma` peak); when a GPU is lent, measured \
         times go beside these to calibrate the model.\n\n\
         **Extrapolated**: these shapes are too big to interpret, so each runs as smaller \
         launches of the same kernels with fewer identically-working blocks (scaled by the \
         block ratio) at two or three values of one size, extended to the real size by the \
         polynomial through them (linear in a K loop, quadratic in the causal sequence length); \
         the sample column says how. Samples run with the interpreter's checks off. \"CUDA \
         cores\" is the sm_70 module (no tensor cores); \"sm_80 path\" is what the family \
         chooses on sm_80 (its tensor-core share says whether that is `mma`). The ResNet-50 \
         forward layers run in NCHW and in NHWC (PyTorch's channels_last); the ResNet-50 weight \
         gradient runs on sm_80's tensor cores only, unsplit and split as the family splits it \
         (its instr/output is per weight-gradient element); the NF4 forward above the GEMV (M > 8) runs \
         split over K as `Slices::Auto` splits it (`nf4_gemm_split` + `nf4_gemm_reduce`), and \
         at M = 16 also unsplit on sm_80; the NF4 backward-input at M = 1 (the \
         backward GEMV) runs split over the weight rows as `Slices::Auto` splits it, and unsplit \
         on sm_80. Command: `cargo xtask bench`.\n\n",
    );
    let (rows, waves): (Vec<Row>, Vec<(Arch, Sampled)>) = jobs
        .into_iter()
        .map(|m| (m.row, (m.arch, m.sampled)))
        .unzip();
    table(md, &rows);
    md.push('\n');
    waves_section(md, &rows, &waves, &Ptxas { ptxas, scratch })
}

/// `ptxas -v` of one module: registers and static shared memory per entry.
struct Ptxas<'a> {
    ptxas: &'a Path,
    scratch: &'a Path,
}

impl Ptxas<'_> {
    /// Each launch of `sampled` with its registers and shared memory from `ptxas -v` on the
    /// module it ran from, built for `arch`.
    fn launches(&self, arch: Arch, sampled: &Sampled) -> Result<Vec<(String, Launch, Work)>> {
        let reports = assemble(self.ptxas, &sampled.ptx, arch, self.scratch)
            .map_err(err)?
            .entries;
        sampled
            .launches
            .iter()
            .map(|l| {
                let r = reports
                    .iter()
                    .find(|r| r.entry == l.entry)
                    .ok_or_else(|| format!("ptxas reported no entry {}", l.entry))?;
                let launch = Launch {
                    blocks: l.blocks.round() as u64,
                    threads_per_block: l.threads_per_block,
                    registers: r.registers,
                    shared_bytes: r.shared_bytes + l.dynamic_shared_bytes,
                };
                Ok((l.entry.clone(), launch, l.work))
            })
            .collect()
    }
}

/// The waves-aware table: per job, each launch's grid, registers and shared memory, the blocks
/// an H100 SM holds and the waves, and the bound computed on the busiest SM.
fn waves_section(
    md: &mut String,
    rows: &[Row],
    waves_of: &[(Arch, Sampled)],
    ptxas: &Ptxas<'_>,
) -> Result<()> {
    md.push_str(
        "### Waves and occupancy (part of the MODEL)\n\n\
         The five-term bound above spreads each job's work over all 132 SMs, whatever its grid. \
         This table adds what the grid allows, per launch: blocks × threads, registers per \
         thread and shared memory per block (static from `ptxas -v` on the module the samples \
         ran, for its target: sm_70 for CUDA cores, sm_80 otherwise; plus dynamic), the blocks \
         an H100 SM holds at once (65536 registers allocated per warp in units of 256, 228 KiB \
         of shared memory with 1 KiB reserved per block, 2048 threads, 32 blocks; the limit that \
         decides it in brackets) and the waves ⌈blocks / (132 × blocks per SM)⌉. **waves-aware \
         bound** = max(the DRAM term above, Σ over launches, one after another, of the busiest \
         SM's time), where the busiest SM runs ⌈blocks / 132⌉ blocks: its tensor, FP32 and shared \
         terms are the job's times 132·⌈blocks / 132⌉ / blocks, and its issue term is, wave by wave, \
         the resident blocks' warp instructions over 4 schedulers at 1.98 GHz, never less than \
         one warp's own instructions (one per cycle). It is never below the bound and is the \
         one that sees a grid too small for the part (e.g. the unsplit backward-filter's 36 \
         blocks). Still a lower bound from counters, not a measurement. Command: `cargo xtask \
         bench`.\n\n\
         | job | kernel path | launches: blocks × threads, registers, shared B → blocks/SM (limit), waves | bound µs | waves-aware bound µs (limiter) | ideal/waves-aware |\n\
         |---|---|---|---:|---:|---:|\n",
    );
    for (row, (arch, sampled)) in rows.iter().zip(waves_of) {
        let launches = ptxas
            .launches(*arch, sampled)
            .map_err(|e| format!("{} ({}): {e}", row.job, row.path))?;
        let cells: Vec<String> = launches
            .iter()
            .map(|(entry, l, _)| {
                let (per_sm, limit) = blocks_per_sm(l, &H100_SM);
                format!(
                    "{entry}: {} × {}, {} regs, {} B → {per_sm}/SM ({}), {} wave{}",
                    l.blocks,
                    l.threads_per_block,
                    l.registers,
                    l.shared_bytes,
                    limit.name(),
                    waves(l, per_sm, &H100_SM),
                    if waves(l, per_sm, &H100_SM) == 1 {
                        ""
                    } else {
                        "s"
                    },
                )
            })
            .collect();
        let pairs: Vec<(Launch, Work)> = launches.iter().map(|(_, l, w)| (*l, *w)).collect();
        let four = bound(&row.work, &row.need, &H100);
        let aware = waves_aware(&pairs, &row.need, &H100, &H100_SM);
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} ({}) | {:.2} |",
            row.job,
            row.path,
            cells.join("; "),
            us(four.seconds()),
            us(aware.seconds()),
            aware.limiter(),
            ideal(&row.need, &H100) / aware.seconds()
        );
    }
    md.push('\n');
    Ok(())
}

#[cfg(test)]
mod tests {
    use ptxforge_runtime::Arch;

    /// The NF4 forward rows' plans: the M = 16 rows split as the kernels' rule splits them
    /// (N = 4096: 64 blocks → 6 slices on sm_80's tensor cores, 64-column steps; 8 on the
    /// CUDA cores, 512-column steps), and unsplit: N = 14336 at M = 16 and N = 4096 at
    /// M = 256 (224 and 256 blocks: 2 per SM at most, split in two or not), the GEMV
    /// (M = 1), two full waves (M = 256, N = 14336) and the comparison row.
    #[test]
    fn nf4_forward_rows_split_as_the_rule() {
        let plan = super::nf4_forward_plan;
        assert_eq!(plan(Arch::Sm80, (16, 4096, 4096), true), (6, [384, 768]));
        assert_eq!(plan(Arch::Sm70, (16, 4096, 4096), true), (8, [4096, 8192]));
        assert_eq!(plan(Arch::Sm80, (16, 14336, 4096), true), (1, [512, 1024]));
        assert_eq!(plan(Arch::Sm70, (16, 14336, 4096), true), (1, [512, 1024]));
        assert_eq!(plan(Arch::Sm80, (256, 4096, 4096), true), (1, [512, 1024]));
        assert_eq!(plan(Arch::Sm80, (256, 14336, 4096), true), (1, [512, 1024]));
        assert_eq!(plan(Arch::Sm80, (1, 4096, 4096), true), (1, [512, 1024]));
        assert_eq!(plan(Arch::Sm80, (16, 4096, 4096), false), (1, [512, 1024]));
    }

    /// The NF4 forward rows at M = 16 alone, both tables (a minute or two): `cargo test
    /// --release -p xtask -- --ignored nf4_m16_rows --nocapture`.
    #[test]
    #[ignore]
    fn nf4_m16_rows() {
        nf4_rows_of(16);
    }

    /// The NF4 forward rows at M = 128 alone (sm_80 splits its 128-row tiles over K:
    /// `nf4_gemm_tall_split`; beside it the unsplit `nf4_gemm_tall`), both tables: `cargo
    /// test --release -p xtask -- --ignored nf4_m128_rows --nocapture`.
    #[test]
    #[ignore]
    fn nf4_m128_rows() {
        nf4_rows_of(128);
    }

    /// The NF4 forward rows at M = 256 alone (the tall tensor-core forward on sm_80), both
    /// tables: `cargo test --release -p xtask -- --ignored nf4_m256_rows --nocapture`.
    #[test]
    #[ignore]
    fn nf4_m256_rows() {
        nf4_rows_of(256);
    }

    /// The MoE expert up-projection rows alone (T = 16, 128, 512), both tables: `cargo test
    /// --release -p xtask -- --ignored moe_rows --nocapture`.
    #[test]
    #[ignore]
    fn moe_rows() {
        let mut jobs = Vec::new();
        super::moe(&mut jobs).expect("rows");
        print_tables(jobs, "ptxforge-realistic-moe");
    }

    /// The attention rows alone (full and causal, CUDA cores and the sm_80 path), both tables:
    /// `cargo test --release -p xtask -- --ignored attention_rows --nocapture`.
    #[test]
    #[ignore]
    fn attention_rows() {
        let mut jobs = Vec::new();
        super::attention(&mut jobs).expect("rows");
        print_tables(jobs, "ptxforge-realistic-attention");
    }

    /// Prints the modelled-time and waves tables of the NF4 forward rows at `m`.
    fn nf4_rows_of(m: u32) {
        let mut jobs = Vec::new();
        let mut rng = ptxforge_runtime::templates::testing::SplitMix64::new(21);
        super::nf4_rows(&mut jobs, m, &mut rng).expect("rows");
        print_tables(jobs, &format!("ptxforge-realistic-nf4-m{m}"));
    }

    /// Prints both tables of `jobs` (ptxas from `PTXAS`, scratch files under the temporary
    /// directory's `scratch`, suffixed by the process id: tests running at once, in one
    /// process or several, never share a scratch directory).
    fn print_tables(jobs: Vec<super::Modelled>, scratch: &str) {
        let ptxas = ptxforge_runtime::ptxas::locate().expect("ptxas (set PTXAS)");
        let scratch = std::env::temp_dir().join(format!("{scratch}-{}", std::process::id()));
        let (rows, waves): (Vec<_>, Vec<_>) = jobs
            .into_iter()
            .map(|m| (m.row, (m.arch, m.sampled)))
            .unzip();
        let mut md = String::new();
        super::table(&mut md, &rows);
        let ptxas = super::Ptxas {
            ptxas: &ptxas,
            scratch: &scratch,
        };
        super::waves_section(&mut md, &rows, &waves, &ptxas).expect("waves");
        println!("{md}");
    }

    /// The ResNet-50 forward rows alone (both layers, both layouts, both paths), both
    /// tables: `cargo test --release -p xtask -- --ignored resnet_forward_rows --nocapture`.
    #[test]
    #[ignore]
    fn resnet_forward_rows() {
        let mut jobs = Vec::new();
        super::resnet(&mut jobs).expect("rows");
        print_tables(jobs, "ptxforge-realistic-fwd");
    }

    /// The NF4 backward-input rows at M = 1 (the backward GEMV, split and unsplit), both
    /// tables: `cargo test -p xtask -- --ignored nf4_backward_rows --nocapture`.
    #[test]
    #[ignore]
    fn nf4_backward_rows() {
        let mut jobs = Vec::new();
        super::nf4_backward(&mut jobs).expect("rows");
        print_tables(jobs, "ptxforge-realistic-nf4-backward");
    }

    /// The ResNet-50 backward-data rows alone, both tables: `cargo test --release -p xtask --
    /// --ignored resnet_backward_data_rows --nocapture`.
    #[test]
    #[ignore]
    fn resnet_backward_data_rows() {
        let mut jobs = Vec::new();
        super::resnet_backward_data(&mut jobs).expect("rows");
        print_tables(jobs, "ptxforge-realistic-dgrad");
    }

    /// The ResNet-50 backward-filter rows (NHWC and NCHW) alone, both tables: `cargo test
    /// --release -p xtask -- --ignored resnet_backward_filter_rows --nocapture`.
    #[test]
    #[ignore]
    fn resnet_backward_filter_rows() {
        let mut jobs = Vec::new();
        super::resnet_backward_filter(&mut jobs).expect("rows");
        print_tables(jobs, "ptxforge-realistic-wgrad");
    }

    /// The whole section (minutes): `cargo test -p xtask -- --ignored realistic_section`.
    #[test]
    #[ignore]
    fn realistic_section() {
        let t = std::time::Instant::now();
        let ptxas = ptxforge_runtime::ptxas::locate().expect("ptxas (set PTXAS)");
        let scratch =
            std::env::temp_dir().join(format!("ptxforge-realistic-section-{}", std::process::id()));
        let mut md = String::new();
        super::section(&mut md, &ptxas, &scratch).expect("section");
        println!("{md}\n{:.1} s", t.elapsed().as_secs_f64());
    }
}
