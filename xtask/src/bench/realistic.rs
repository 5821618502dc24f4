//! Modelled H100 time of each family on realistic shapes (Mixtral expert GEMM, NF4 LLM layers,
//! long-context attention, ResNet-50 convolutions), next to the job's ideal roofline time. A
//! MODEL from interpreter counters (see [`super::model`]), not a measurement.
//!
//! The shapes are far too big to interpret, so each runs as samples: launches of the same
//! kernels with fewer identically-working blocks (scaled back by the block ratio) at two or
//! three values of one size parameter (the K loop's length, or the sequence length), extended
//! to the real value by [`extrapolate`]. Every sample runs with the interpreter's checks off
//! (the counter sections above run the same kernels with every check on). Each row is run on
//! two targets: sm_70 (no tensor cores: the CUDA-core path) and sm_80 (the tensor-core path
//! wherever a family has one).

use std::fmt::Write as _;

use half::{bf16, f16};
use ptxforge_runtime::launch::{Backend, LaunchRecord, SimBackend};
use ptxforge_runtime::templates::attention::launch::{
    forward as attention_forward, AttentionBuffers,
};
use ptxforge_runtime::templates::attention::{AttentionConfig, AttentionShape};
use ptxforge_runtime::templates::conv::launch as conv;
use ptxforge_runtime::templates::conv::{Conv2dConfig, ConvShape};
use ptxforge_runtime::templates::moe::launch::{forward as moe_forward, ExpertWeights};
use ptxforge_runtime::templates::moe::{Ffn, MoeConfig};
use ptxforge_runtime::templates::nf4::launch::{forward as nf4_forward, DeviceWeights};
use ptxforge_runtime::templates::nf4::{quantize, Nf4Config};
use ptxforge_runtime::templates::testing::SplitMix64;
use ptxforge_runtime::templates::KernelFamily;
use ptxforge_runtime::{Arch, DType};
use ptxforge_sim::Options;

use super::model::{bound, extrapolate, ideal, us, Job, Precision, Work, H100};

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

/// A backend for samples: counters on, checks off.
fn backend() -> SimBackend {
    SimBackend::with_options(Options::unchecked())
}

/// Runs `launch(size)` at every sample size, weighs each launch's counters by `scale(entry)`
/// (the block ratio to the real shape), and extends the sum to `at`. Returns the entries run.
fn sampled(
    sizes: &[u32],
    at: u32,
    mut launch: impl FnMut(u32) -> Result<Vec<LaunchRecord>>,
    scale: impl Fn(&str) -> f64,
) -> Result<(String, Work)> {
    let mut points = Vec::with_capacity(sizes.len());
    let mut entries: Vec<String> = Vec::new();
    for &size in sizes {
        let mut work = Work::default();
        for r in launch(size)? {
            work = work.plus(&Work::from_counters(&r.counters).scaled(scale(&r.entry)));
            if !entries.contains(&r.entry) {
                entries.push(r.entry);
            }
        }
        points.push((f64::from(size), work));
    }
    Ok((entries.join(" + "), extrapolate(&points, f64::from(at))))
}

fn halves(rng: &mut SplitMix64, n: usize, lo: f32, hi: f32) -> Vec<f16> {
    rng.vec_f32(n, lo, hi)
        .into_iter()
        .map(f16::from_f32)
        .collect()
}

/// NF4 f16 forward, K = 4096, N ∈ {4096, 14336}, M ∈ {1, 16, 256}. Sample: N = 128 columns,
/// min(M, 128) rows, K ∈ {512, 1024}; blocks tile N and M, so the block ratio is exact.
fn nf4(rows: &mut Vec<Row>) -> Result<()> {
    const K: u32 = 4096;
    const NS: u32 = 128;
    let mut rng = SplitMix64::new(21);
    for m in [1u32, 16, 256] {
        let ms = m.min(128);
        for (arch, path) in PATHS {
            let (entries, per) = sampled(
                &[512, 1024],
                K,
                |k| {
                    let cfg = Nf4Config {
                        dtype: DType::F16,
                        arch,
                        ..Nf4Config::new(NS, k)
                    };
                    let ptx = cfg.compile().map_err(err)?.ptx;
                    let w = quantize(
                        &rng.vec_f32((NS * k) as usize, -1.0, 1.0),
                        cfg.block as usize,
                    )
                    .map_err(err)?;
                    let dev = backend();
                    let weights = DeviceWeights::upload(&dev, &w).map_err(err)?;
                    let a = dev
                        .upload(&halves(&mut rng, (ms * k) as usize, -1.0, 1.0))
                        .map_err(err)?;
                    let mut c = dev.alloc::<f16>((ms * NS) as usize).map_err(err)?;
                    nf4_forward(&cfg, &dev, &ptx, ms, &a, &weights, &mut c).map_err(err)?;
                    Ok(dev.take_launch_log())
                },
                |_| f64::from(m) / f64::from(ms),
            )?;
            for n in [4096u32, 14336] {
                let (mf, nf, kf) = (f64::from(m), f64::from(n), f64::from(K));
                let bytes = nf * kf / 2.0 + nf * kf / 64.0 * 4.0 + 2.0 * (mf * kf + mf * nf);
                rows.push(Row {
                    job: format!("NF4 f16 forward N={n} K={K} M={m}"),
                    path: path.into(),
                    entries: entries.clone(),
                    sample: format!("N=128, M={ms}, K=512/1024 → 4096, ×{}", n / NS),
                    outputs: mf * nf,
                    work: per.scaled(nf / f64::from(NS)),
                    need: Job {
                        compulsory_bytes: bytes,
                        footprint_bytes: bytes,
                        flops: 2.0 * mf * nf * kf,
                        precision: Precision::F16Tensor,
                    },
                });
            }
        }
    }
    Ok(())
}

/// Attention forward f16, B=1, H=32, S=4096, D=128. Full: one head, 128 queries, keys ∈ {256,
/// 512} → 4096 (linear in the key count), × 32 query blocks × 32 heads. Causal: one head, every
/// query block, S ∈ {128, 256, 384} → 4096 (quadratic in S), × 32 heads.
fn attention(rows: &mut Vec<Row>) -> Result<()> {
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
            let mut run = |seq_q: u32, seq_kv: u32| -> Result<Vec<LaunchRecord>> {
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
                Ok(dev.take_launch_log())
            };
            let ((entries, work), sample) = if causal {
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
            rows.push(Row {
                job: format!("attention f16 fwd {mask} B=1 H=32 S=4096 D=128"),
                path: path.into(),
                entries,
                sample,
                outputs: h * s * d,
                work,
                need: Job {
                    compulsory_bytes: bytes,
                    footprint_bytes: bytes,
                    flops: 4.0 * h * pairs * d,
                    precision: Precision::F16Tensor,
                },
            });
        }
    }
    Ok(())
}

/// ResNet-50 conv3_x layers at batch 32, f16: 3×3 128→128 and 1×1 128→512 on 28×28, stride 1,
/// through [`conv::forward`] (the entry the family chooses for the target: the tensor-core
/// implicit GEMM on sm_80, `conv2d_1x1` / `conv2d_direct` on sm_70).
/// Sample: batch 1, 64 output channels, C_in ∈ {16, 32} → 128 (linear in the reduction).
fn resnet(rows: &mut Vec<Row>) -> Result<()> {
    const BATCH: u32 = 32;
    const HW: u32 = 28;
    const CIN: u32 = 128;
    const COUT_SAMPLE: u32 = 64;
    let mut rng = SplitMix64::new(23);
    for (kernel, cout) in [(3u32, 128u32), (1, 512)] {
        for (arch, path) in PATHS {
            let shape = ConvShape {
                batch: 1,
                height: HW,
                width: HW,
            };
            let (entries, work) = sampled(
                &[16, 32],
                CIN,
                |cin| {
                    let cfg = Conv2dConfig {
                        padding_h: kernel / 2,
                        padding_w: kernel / 2,
                        dtype: DType::F16,
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
                    // The entry the family chooses: the tensor-core implicit GEMM on sm_80,
                    // `conv2d_1x1` / `conv2d_direct` on sm_70.
                    conv::forward(&cfg, &dev, &ptx, &shape, &x, &w, None, &mut y).map_err(err)?;
                    Ok(dev.take_launch_log())
                },
                |_| f64::from(BATCH * cout / COUT_SAMPLE),
            )?;
            let (n, p, ci, co, kk) = (
                f64::from(BATCH),
                f64::from(HW * HW),
                f64::from(CIN),
                f64::from(cout),
                f64::from(kernel * kernel),
            );
            let bytes = 2.0 * (n * p * ci + co * ci * kk + n * p * co);
            rows.push(Row {
                job: format!(
                    "ResNet-50 conv {kernel}×{kernel} {CIN}→{cout} 28×28 batch 32 f16 fwd"
                ),
                path: path.into(),
                entries,
                sample: format!(
                    "batch 1, C_out=64, C_in=16/32 → 128, ×{}",
                    BATCH * cout / COUT_SAMPLE
                ),
                outputs: n * p * co,
                work,
                need: Job {
                    compulsory_bytes: bytes,
                    footprint_bytes: bytes,
                    flops: 2.0 * n * p * co * ci * kk,
                    precision: Precision::F16Tensor,
                },
            });
        }
    }
    Ok(())
}

/// Mixtral-8x7B expert up-projection as a linear-expert MoE layer, bf16: E=8, top-2, H=4096,
/// F=14336, T ∈ {16, 128, 512}. Sample: F=64, H ∈ {128, 256} → 4096; the expert GEMM and
/// unpermute launches (work ∝ F) × 224, routing launches as run. The gating logits are the
/// same at every sample size, so routing (and padding) is that of the real layer.
fn moe(rows: &mut Vec<Row>) -> Result<()> {
    const E: u32 = 8;
    const TOP: u32 = 2;
    const H: u32 = 4096;
    const F: u32 = 14336;
    const FS: u32 = 64;
    let mut rng = SplitMix64::new(24);
    for tokens in [16u32, 128, 512] {
        let logits: Vec<bf16> = rng
            .vec_f32((tokens * E) as usize, -2.0, 2.0)
            .into_iter()
            .map(bf16::from_f32)
            .collect();
        for (arch, path) in PATHS {
            let (entries, work) = sampled(
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
                    Ok(dev.take_launch_log())
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
            rows.push(Row {
                job: format!("Mixtral expert up-projection bf16 T={tokens} (E=8 top-2 H=4096 F=14336, linear)"),
                path: path.into(),
                entries,
                sample: format!("F=64, H=128/256 → 4096, expert launches ×{}", F / FS),
                outputs: t * f,
                work,
                need: Job {
                    compulsory_bytes: bytes,
                    footprint_bytes: bytes * 2.0,
                    flops: 2.0 * t * f64::from(TOP) * h * f,
                    precision: Precision::F16Tensor,
                },
            });
        }
    }
    Ok(())
}

/// Every realistic job on both paths.
pub fn rows() -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    moe(&mut rows)?;
    nf4(&mut rows)?;
    attention(&mut rows)?;
    resnet(&mut rows)?;
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
pub fn section(md: &mut String) -> Result<()> {
    let rows = rows()?;
    md.push_str("## Modelled H100 time (a MODEL, not a measurement)\n\n");
    md.push_str(
        "A roofline lower bound on an H100 SXM from the interpreter's counters, on realistic \
         shapes: **bound** = max(DRAM bytes / 3.35 TB/s, tensor FLOPs / 989 TFLOP/s (tf32: \
         494.5), FP32-pipe thread-instructions × 2 / 67 TFLOP/s, warp instructions / (132 SMs × \
         4 schedulers × 1.98 GHz)), where DRAM bytes are the 32-byte sectors the kernel moved, \
         capped at the bytes of the buffers it touches (a perfect L2), and warp instructions are \
         thread-instructions ÷ 32. **ideal** = max(compulsory bytes / 3.35 TB/s, required FLOPs \
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
         chooses on sm_80 (its tensor-core share says whether that is `mma`). Command: `cargo \
         xtask bench`.\n\n",
    );
    table(md, &rows);
    md.push('\n');
    Ok(())
}

#[cfg(test)]
mod tests {
    /// The whole section (minutes): `cargo test -p xtask -- --ignored realistic_section`.
    #[test]
    #[ignore]
    fn realistic_section() {
        let t = std::time::Instant::now();
        let mut md = String::new();
        super::section(&mut md).expect("section");
        println!("{md}\n{:.1} s", t.elapsed().as_secs_f64());
    }
}
