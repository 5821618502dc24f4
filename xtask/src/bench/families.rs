//! Each family's tensor-core kernels next to their CUDA-core path on one small shape each: the
//! same launch on sm_70 (no tensor cores) and on sm_80 (what the family chooses there), in the
//! interpreter with every check on; then the same jobs in f32 with `allow_tf32` on sm_80 (tf32
//! tensor cores). Per entry: thread-instructions per output, the tensor-core share, `ldmatrix`
//! wavefronts per 8×8 matrix, shared wavefronts ÷ their minimum (counted per phase, see
//! `ptxforge_sim::counters`), global load efficiency, and the registers and spills ptxas
//! reports for that entry on that target.

use std::fmt::Write as _;
use std::path::Path;

use half::{bf16, f16};
use ptxforge_runtime::launch::{Backend, Element, LaunchRecord, SimBackend};
use ptxforge_runtime::ptxas::{assemble, EntryReport};
use ptxforge_runtime::templates::attention::launch::{
    forward as attention_forward, AttentionBuffers,
};
use ptxforge_runtime::templates::attention::{AttentionConfig, AttentionShape};
use ptxforge_runtime::templates::conv::launch as conv;
use ptxforge_runtime::templates::conv::{Conv2dConfig, ConvShape, Layout};
use ptxforge_runtime::templates::moe::launch::{forward as moe_forward, ExpertWeights};
use ptxforge_runtime::templates::moe::{Ffn, MoeConfig};
use ptxforge_runtime::templates::nf4::launch::{backward_input, forward as nf4_forward};
use ptxforge_runtime::templates::nf4::launch::{DeviceWeights, Nf4Activation};
use ptxforge_runtime::templates::nf4::{quantize, Nf4Config};
use ptxforge_runtime::templates::testing::SplitMix64;
use ptxforge_runtime::templates::KernelFamily;
use ptxforge_runtime::{Arch, DType};

use super::bank_conflicts;

type Result<T> = std::result::Result<T, String>;

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The rows of each job, `(target, run)`: its f16/bf16 run ([`HALF`]) on CUDA cores (sm_70)
/// and on what the family picks where tensor cores exist (sm_80), then its f32 `allow_tf32`
/// run ([`TF32`]) on sm_80's tf32 tensor cores.
const PATHS: [(Arch, usize); 3] = [(Arch::Sm70, HALF), (Arch::Sm80, HALF), (Arch::Sm80, TF32)];
const HALF: usize = 0;
const TF32: usize = 1;

/// The launches of one run on `arch`: module text and launch log.
type RunFn = fn(Arch) -> Result<(String, Vec<LaunchRecord>)>;

/// One family job: a shape, its runs in f16/bf16 and in f32 with `allow_tf32`, and the
/// outputs each reported entry writes.
struct Job {
    /// The row label; `{}` stands for the element type of the run.
    name: &'static str,
    /// The element type of the [`HALF`] run.
    half: &'static str,
    run: [RunFn; 2],
    /// `(entry prefix, outputs)`: the launches reported, each with its output count.
    report: &'static [(&'static str, u64)],
}

impl Job {
    fn label(&self, run: usize) -> String {
        let elem = if run == TF32 {
            "f32 allow_tf32"
        } else {
            self.half
        };
        self.name.replace("{}", elem)
    }
}

/// A host element a job runs in: its dtype (f32 runs with `allow_tf32`) and its values from
/// f32.
trait JobElem: Element {
    const DTYPE: DType;
    fn from_f32(x: f32) -> Self;
}

impl JobElem for f16 {
    const DTYPE: DType = DType::F16;
    fn from_f32(x: f32) -> Self {
        f16::from_f32(x)
    }
}

impl JobElem for bf16 {
    const DTYPE: DType = DType::BF16;
    fn from_f32(x: f32) -> Self {
        bf16::from_f32(x)
    }
}

impl JobElem for f32 {
    const DTYPE: DType = DType::F32;
    fn from_f32(x: f32) -> Self {
        x
    }
}

/// Whether a job in `T` sets `allow_tf32` (f32 only: the configurations reject it otherwise).
fn tf32<T: JobElem>() -> bool {
    T::DTYPE == DType::F32
}

fn values<T: JobElem>(rng: &mut SplitMix64, n: usize, lo: f32, hi: f32) -> Vec<T> {
    rng.vec_f32(n, lo, hi)
        .into_iter()
        .map(T::from_f32)
        .collect()
}

// MoE: bf16 (or f32 with allow_tf32), 8 experts, top-2, H 64, F 96, 256 tokens, SwiGLU,
// dropless (every routed row is an output row of the expert GEMMs: 512 rows).
const MOE: (u32, u32, u32, u32, u32) = (8, 2, 64, 96, 256);

fn moe<T: JobElem>(arch: Arch) -> Result<(String, Vec<LaunchRecord>)> {
    let (e, k, h, f, t) = MOE;
    let cfg = MoeConfig {
        ffn: Ffn::Swiglu,
        dtype: T::DTYPE,
        allow_tf32: tf32::<T>(),
        arch,
        ..MoeConfig::new(e, k, h, f)
    };
    let ptx = cfg.compile().map_err(err)?.ptx;
    let dev = SimBackend::new();
    let mut rng = SplitMix64::new(31);
    let mut up = |n: u32, r: f32| {
        dev.upload(&values::<T>(&mut rng, n as usize, -r, r))
            .map_err(err)
    };
    let x = up(t * h, 1.0)?;
    let logits = up(t * e, 2.0)?;
    let (w1, w3, w2) = (
        up(e * f * h, 0.1)?,
        up(e * f * h, 0.1)?,
        up(e * h * f, 0.1)?,
    );
    let out = dev
        .alloc::<T>((t * cfg.out_width()) as usize)
        .map_err(err)?;
    let weights = ExpertWeights::Swiglu {
        w1: &w1,
        w3: &w3,
        w2: &w2,
    };
    moe_forward(&cfg, &dev, &ptx, t, &x, &logits, weights, &out).map_err(err)?;
    Ok((ptx, dev.take_launch_log()))
}

// NF4: f16 (or f32 with allow_tf32), M 64, N 256, K 512, block 64: the tiled forward and
// backward-input GEMMs.
const NF4: (u32, u32, u32) = (64, 256, 512);

fn nf4<T: JobElem + Nf4Activation>(arch: Arch) -> Result<(String, Vec<LaunchRecord>)> {
    let (m, n, k) = NF4;
    let cfg = Nf4Config {
        dtype: <T as JobElem>::DTYPE,
        allow_tf32: tf32::<T>(),
        arch,
        ..Nf4Config::new(n, k)
    };
    let ptx = cfg.compile().map_err(err)?.ptx;
    let mut rng = SplitMix64::new(32);
    let w = quantize(
        &rng.vec_f32((n * k) as usize, -1.0, 1.0),
        cfg.block as usize,
    )
    .map_err(err)?;
    let dev = SimBackend::new();
    let weights = DeviceWeights::upload(&dev, &w).map_err(err)?;
    let a = dev
        .upload(&values::<T>(&mut rng, (m * k) as usize, -1.0, 1.0))
        .map_err(err)?;
    let mut c = dev.alloc::<T>((m * n) as usize).map_err(err)?;
    nf4_forward(&cfg, &dev, &ptx, m, &a, &weights, &mut c).map_err(err)?;
    let g = dev
        .upload(&values::<T>(&mut rng, (m * n) as usize, -1.0, 1.0))
        .map_err(err)?;
    let mut ga = dev.alloc::<T>((m * k) as usize).map_err(err)?;
    backward_input(&cfg, &dev, &ptx, m, &g, &weights, &mut ga).map_err(err)?;
    Ok((ptx, dev.take_launch_log()))
}

// Attention: f16 (or f32 with allow_tf32), B 1, H 2, S 128, D 64.
const ATTENTION: (u32, u32, u32) = (2, 128, 64);

fn attention<T: JobElem>(arch: Arch, causal: bool) -> Result<(String, Vec<LaunchRecord>)> {
    let (heads, seq, d) = ATTENTION;
    let cfg = AttentionConfig {
        causal,
        dtype: T::DTYPE,
        allow_tf32: tf32::<T>(),
        arch,
        ..AttentionConfig::new(d)
    };
    let ptx = cfg.compile().map_err(err)?.ptx;
    let shape = AttentionShape {
        batch: 1,
        heads_q: heads,
        heads_kv: heads,
        seq_q: seq,
        seq_kv: seq,
    };
    let n = (heads * seq * d) as usize;
    let dev = SimBackend::new();
    let mut rng = SplitMix64::new(33);
    let mut up = || {
        dev.upload(&values::<T>(&mut rng, n, -1.0, 1.0))
            .map_err(err)
    };
    let (q, k, v) = (up()?, up()?, up()?);
    let o = dev.alloc::<T>(n).map_err(err)?;
    let lse = dev.alloc::<f32>((heads * seq) as usize).map_err(err)?;
    let buffers = AttentionBuffers {
        q: &q,
        k: &k,
        v: &v,
        o: &o,
        lse: &lse,
    };
    attention_forward(&cfg, &dev, &ptx, &shape, &buffers, None).map_err(err)?;
    Ok((ptx, dev.take_launch_log()))
}

// Conv: f16 (or f32 with allow_tf32), stride 1, N 1, 64 → 64 channels, 16×16; a 3×3 with
// padding 1 and a 1×1.
const CONV: (u32, u32) = (64, 16);

fn conv2d<T: JobElem>(
    arch: Arch,
    layout: Layout,
    kernel: u32,
) -> Result<(String, Vec<LaunchRecord>)> {
    let (c, hw) = CONV;
    let taps = kernel * kernel;
    let cfg = Conv2dConfig {
        padding_h: kernel / 2,
        padding_w: kernel / 2,
        dtype: T::DTYPE,
        allow_tf32: tf32::<T>(),
        arch,
        layout,
        ..Conv2dConfig::new(c, c, kernel)
    };
    let ptx = cfg.compile().map_err(err)?.ptx;
    let shape = ConvShape {
        batch: 1,
        height: hw,
        width: hw,
    };
    let act = (c * hw * hw) as usize;
    let dev = SimBackend::new();
    let mut rng = SplitMix64::new(34);
    let mut up = |n: usize, r: f32| dev.upload(&values::<T>(&mut rng, n, -r, r)).map_err(err);
    let x = up(act, 1.0)?;
    let w = up((c * c * taps) as usize, 0.2)?;
    let mut y = dev.alloc::<T>(act).map_err(err)?;
    conv::forward(&cfg, &dev, &ptx, &shape, &x, &w, None, &mut y).map_err(err)?;
    let gy = up(act, 1.0)?;
    let mut dx = dev.alloc::<T>(act).map_err(err)?;
    conv::backward_data(&cfg, &dev, &ptx, &shape, &gy, &w, &mut dx).map_err(err)?;
    let mut dw = dev.alloc::<T>((c * c * taps) as usize).map_err(err)?;
    conv::backward_filter(&cfg, &dev, &ptx, &shape, &x, &gy, &mut dw, None).map_err(err)?;
    Ok((ptx, dev.take_launch_log()))
}

const MOE_UP: u64 = (MOE.3 * MOE.1 * MOE.4) as u64;
const MOE_DOWN: u64 = (MOE.2 * MOE.1 * MOE.4) as u64;
const ATT_OUT: u64 = (ATTENTION.0 * ATTENTION.1 * ATTENTION.2) as u64;
const CONV_ACT: u64 = (CONV.0 * CONV.1 * CONV.1) as u64;
const CONV_W: u64 = (CONV.0 * CONV.0 * 9) as u64;
/// The conv jobs' entries: forward, backward-data, backward-filter (both layouts).
const CONV_REPORT: &[(&str, u64)] = &[
    ("conv2d_", CONV_ACT),
    ("conv2d_bwd_data", CONV_ACT),
    ("conv2d_bwd_filter", CONV_W),
];
/// [`CONV_REPORT`] of the 1×1 layer.
const CONV_1X1_REPORT: &[(&str, u64)] = &[
    ("conv2d_", CONV_ACT),
    ("conv2d_bwd_data", CONV_ACT),
    ("conv2d_bwd_filter", CONV_W / 9),
];

const JOBS: [Job; 7] = [
    Job {
        name: "MoE SwiGLU experts ({}, E 8, top-2, H 64, F 96, 256 tokens)",
        half: "bf16",
        run: [moe::<bf16>, moe::<f32>],
        report: &[
            ("moe_expert_swiglu_up", MOE_UP),
            ("moe_expert_swiglu_down", MOE_DOWN),
        ],
    },
    Job {
        name: "NF4 tiled ({}, M 64, N 256, K 512, block 64)",
        half: "f16",
        run: [nf4::<f16>, nf4::<f32>],
        report: &[
            ("nf4_gemm", (NF4.0 * NF4.1) as u64),
            ("nf4_backward_input", (NF4.0 * NF4.2) as u64),
        ],
    },
    Job {
        name: "attention full ({}, B 1, H 2, S 128, D 64)",
        half: "f16",
        run: [
            |arch| attention::<f16>(arch, false),
            |arch| attention::<f32>(arch, false),
        ],
        report: &[("attention_forward", ATT_OUT)],
    },
    Job {
        name: "attention causal ({}, same shape)",
        half: "f16",
        run: [
            |arch| attention::<f16>(arch, true),
            |arch| attention::<f32>(arch, true),
        ],
        report: &[("attention_forward", ATT_OUT)],
    },
    Job {
        name: "conv 3×3 64→64, NCHW ({}, N 1, 16×16, padding 1)",
        half: "f16",
        run: [
            |arch| conv2d::<f16>(arch, Layout::Nchw, 3),
            |arch| conv2d::<f32>(arch, Layout::Nchw, 3),
        ],
        report: CONV_REPORT,
    },
    Job {
        name: "conv 1×1 64→64, NCHW ({}, N 1, 16×16)",
        half: "f16",
        run: [
            |arch| conv2d::<f16>(arch, Layout::Nchw, 1),
            |arch| conv2d::<f32>(arch, Layout::Nchw, 1),
        ],
        report: CONV_1X1_REPORT,
    },
    Job {
        name: "conv 3×3 64→64, NHWC ({}, same shape)",
        half: "f16",
        run: [
            |arch| conv2d::<f16>(arch, Layout::Nhwc, 3),
            |arch| conv2d::<f32>(arch, Layout::Nhwc, 3),
        ],
        report: CONV_REPORT,
    },
];

/// The output count of `entry` in `job`: the longest matching prefix wins, so `conv2d_` covers
/// the forward entries and `conv2d_bwd_data` the backward ones.
fn outputs(job: &Job, entry: &str) -> Option<u64> {
    job.report
        .iter()
        .filter(|(prefix, _)| entry.starts_with(prefix))
        .max_by_key(|(prefix, _)| prefix.len())
        .map(|&(_, n)| n)
}

/// The NCHW f16/bf16 passes' layout copies on sm_80+ (ahead of their channels-last GEMMs):
/// they move data only, so no `mma` is expected of them.
const LAYOUT_COPIES: [&str; 3] = [
    "conv2d_to_channels_last",
    "conv2d_filter_to_channels_last",
    "conv2d_gradient_to_channels_last",
];

fn registers(reports: &[EntryReport], entry: &str) -> String {
    match reports.iter().find(|r| r.entry == entry) {
        Some(r) => format!("{} ({})", r.registers, r.spill_stores + r.spill_loads),
        None => "–".to_string(),
    }
}

/// Runs every job on its paths and writes the section.
pub fn section(md: &mut String, ptxas: &Path, scratch: &Path) -> Result<()> {
    md.push_str("### Families: CUDA-core path vs tensor-core path\n\n");
    md.push_str(
        "The same launches on sm_70 (no tensor cores: the CUDA-core path) and sm_80 (the path \
         the family chooses there), in the interpreter with every check on and no finding (the \
         numerics tests check both paths against host references); the `f32 allow_tf32` rows \
         are the same jobs in f32 on sm_80's tf32 tensor cores (`mma.m16n8k8`, every operand \
         rounded by `cvt.rna.tf32.f32`), and every sm_80 row issued mma but the NCHW f16 \
         passes' layout copies (`conv2d_to_channels_last`, `conv2d_filter_to_channels_last`, \
         `conv2d_gradient_to_channels_last`, ahead of their channels-last GEMMs, in the order \
         each pass launches them; their rows count per output of the pass). Instructions are \
         dynamic \
         thread-instructions per output element of that entry (a warp-wide `mma` counts 32); \
         ldmatrix is wavefronts per 8×8 matrix (1.00 = conflict-free); smem is the ordinary \
         shared requests' wavefronts ÷ the fewest they could take (1.00 = conflict-free, \
         whatever the access width; conflicts counted per phase: the warp for 4-byte accesses, \
         half-warps for 8-byte, quarter-warps for 16-byte, the interpreter's conservative \
         model); cp.async smem is the same for the shared-memory writes of `cp.async` copies \
         (zero fill included); load eff. is the distinct bytes global loads and \
         `cp.async` copies used ÷ the 32-byte sectors they moved, request by request (1.00 = \
         every sector wholly used); registers (spilled bytes) from `ptxas -v` for that entry on that target. Command: \
         `cargo xtask bench`.\n\n",
    );
    md.push_str(
        "| kernel (shape) | target | entry | instr/output | tensor-core share | ldmatrix wf/matrix | smem wf/min | cp.async smem wf/min | load eff. | registers (spills) |\n|---|---|---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for job in &JOBS {
        for (arch, run) in PATHS {
            let name = job.label(run);
            let (ptx, log) = (job.run[run])(arch).map_err(|e| format!("{name} on {arch}: {e}"))?;
            let reports = assemble(ptxas, &ptx, arch, scratch)
                .map_err(|e| format!("{name} on {arch}: {e}"))?
                .entries;
            for r in &log {
                let Some(outputs) = outputs(job, &r.entry) else {
                    continue;
                };
                let c = &r.counters;
                // Every family puts these entries on tensor cores where the target has them;
                // a launch that issued no mma there would be a mislabelled row.
                let copy = LAYOUT_COPIES.contains(&r.entry.as_str());
                if arch.has_mma_m16n8k16() && c.mma_instructions == 0 && !copy {
                    return Err(format!("{name} on {arch}: {} issued no mma", r.entry));
                }
                let total = c.instructions.total();
                let _ = writeln!(
                    md,
                    "| {name} | {arch} | {} | {:.1} | {:.1}% | {} | {} | {} | {:.2} | {} |",
                    r.entry,
                    total as f64 / outputs as f64,
                    100.0 * c.instructions.tensor_core as f64 / total.max(1) as f64,
                    bank_conflicts::cell(bank_conflicts::ldmatrix_per_matrix(c)),
                    bank_conflicts::cell(bank_conflicts::smem_per_min(c)),
                    bank_conflicts::cell(bank_conflicts::cp_async_per_min(c)),
                    c.global_load_efficiency(),
                    registers(&reports, &r.entry),
                );
            }
        }
    }
    md.push('\n');
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Slow (every family on every path with every check on): run with `--include-ignored`.
    #[test]
    #[ignore]
    fn families_section_runs() {
        let ptxas =
            ptxforge_runtime::ptxas::locate().expect("ptxas (cargo xtask test installs it)");
        let scratch =
            std::env::temp_dir().join(format!("ptxforge-families-section-{}", std::process::id()));
        let mut md = String::new();
        section(&mut md, &ptxas, &scratch).expect("section");
        println!("{md}");
        for entry in [
            "moe_expert_swiglu_up",
            "nf4_gemm",
            "attention_forward",
            "conv2d_implicit_gemm_pointwise",
        ] {
            assert!(
                md.contains(&format!("| sm_80 | {entry}")),
                "{entry} on sm_80"
            );
        }
        for (job, entry) in [
            (
                "MoE SwiGLU experts (f32 allow_tf32",
                "moe_expert_swiglu_down",
            ),
            ("NF4 tiled (f32 allow_tf32", "nf4_backward_input"),
            ("attention causal (f32 allow_tf32", "attention_forward"),
            ("conv 3×3 64→64, NCHW (f32 allow_tf32", "conv2d_bwd_filter"),
            (
                "conv 3×3 64→64, NHWC (f32 allow_tf32",
                "conv2d_implicit_gemm",
            ),
        ] {
            assert!(
                md.lines().any(|l| l.starts_with(&format!("| {job}"))
                    && l.contains(&format!("| sm_80 | {entry}"))),
                "tf32 row {job} / {entry}"
            );
        }
    }
}
