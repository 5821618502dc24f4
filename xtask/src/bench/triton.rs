//! Triton as a public peer: the Triton 3.9 PTX of `peers/triton/` (matmul f16/tf32/f32-IEEE,
//! attention forward, row softmax) run in the interpreter beside ptxforge's kernels for the same
//! job on the same shape, with the modelled H100 bound of each (see [`super::model`]).
//!
//! Every launch runs with every interpreter check on and must report no finding; each Triton
//! output is compared with an f64 host reference (attention: with ptxforge's output, which the
//! numerics tests check against the reference), so a row is only written for a kernel that did
//! the job.

use std::fmt::Write as _;
use std::path::Path;

use half::f16;
use ptxforge_runtime::launch::{Backend, Dim3, KernelArg, LaunchConfig, LaunchRecord, SimBackend};
use ptxforge_runtime::samples::{
    sample_module, GemmTiling, GEMM_THREADS, GEMM_TILE, SAMPLES, TENSOR_CORE_SAMPLES,
};
use ptxforge_runtime::templates::attention::launch::{
    forward as attention_forward, AttentionBuffers,
};
use ptxforge_runtime::templates::attention::{AttentionConfig, AttentionShape};
use ptxforge_runtime::templates::moe::launch::{forward as moe_forward, ExpertWeights};
use ptxforge_runtime::templates::moe::{Ffn, MoeConfig};
use ptxforge_runtime::templates::testing::SplitMix64;
use ptxforge_runtime::templates::KernelFamily;
use ptxforge_runtime::{Arch, DType};
use ptxforge_sim::{Arg, Counters, Device, Module, Options};

use super::counters::launch_gemm;
use super::model::{Job, Precision, Work};
use super::realistic::{table, Row};

type Result<T> = std::result::Result<T, String>;

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// GEMM shape of the matmul rows (a multiple of every kernel's tile).
pub const MM: (u32, u32, u32) = (128, 128, 256);
/// Attention: B=1, H=2, S=128, D=64, non-causal (the Triton kernel's head dim and mask).
const ATT_HEADS: u32 = 2;
const ATT_SEQ: u32 = 128;
const ATT_DIM: u32 = 64;
/// Softmax: 256 rows of 100 (the Triton kernel's block of 128 covers a row).
const SM_ROWS: u32 = 256;
const SM_COLS: u32 = 100;

/// Block threads and dynamic shared bytes from the first line Triton's AOT script writes:
/// "... launch with 128 threads per block and 16384 bytes of dynamic shared memory".
fn launch_header(ptx: &str) -> Result<(u32, u32)> {
    let first = ptx.lines().next().unwrap_or_default();
    let words: Vec<&str> = first.split_whitespace().collect();
    let number_before = |word: &str| -> Result<u32> {
        let at = words
            .iter()
            .position(|w| *w == word)
            .filter(|&i| i > 0)
            .ok_or_else(|| format!("no launch header in the Triton PTX: `{first}`"))?;
        words[at - 1].parse().map_err(err)
    };
    Ok((number_before("threads")?, number_before("bytes")?))
}

/// Launches `entry` of `peers/triton/<file>` on `dev` with every check on; a finding fails.
fn run_triton(
    root: &Path,
    dev: &mut Device,
    file: &str,
    entry: &str,
    grid: [u32; 3],
    args: &[Arg],
) -> Result<Counters> {
    let path = root.join("peers").join("triton").join(file);
    let ptx = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let (threads, smem) = launch_header(&ptx)?;
    let module = Module::parse(&ptx).map_err(|e| format!("{file}: {e}"))?;
    let report = dev
        .launch(
            &module,
            entry,
            grid,
            [threads, 1, 1],
            smem,
            args,
            &Options::default(),
        )
        .map_err(|e| format!("{file}: {e}"))?;
    if !report.is_clean() {
        return Err(format!("{file}: findings {:?}", report.findings));
    }
    Ok(report.counters)
}

/// `|got − want| ≤ tol · max |want|` everywhere, or an error naming the worst element.
fn check(what: &str, got: &[f64], want: &[f64], tol: f64) -> Result<()> {
    let scale = want.iter().fold(0.0f64, |m, w| m.max(w.abs())).max(1e-30);
    let worst = got
        .iter()
        .zip(want)
        .map(|(g, w)| (g - w).abs())
        .enumerate()
        .fold(
            (0, 0.0f64),
            |a, (i, e)| if e.is_nan() || e > a.1 { (i, e) } else { a },
        );
    if got.len() != want.len() || worst.1.is_nan() || worst.1 > tol * scale {
        return Err(format!(
            "{what}: element {} off by {:.3e} (tolerance {tol} × max |ref| {scale:.3e})",
            worst.0, worst.1
        ));
    }
    Ok(())
}

fn to_f16_bits(v: &[f32]) -> Vec<u16> {
    v.iter().map(|&x| f16::from_f32(x).to_bits()).collect()
}

fn from_f16_bits(v: &[u16]) -> Vec<f64> {
    v.iter().map(|&b| f16::from_bits(b).to_f64()).collect()
}

/// `a [m, k] · b [k, n]` in f64.
fn matmul_ref(a: &[f32], b: &[f32], (m, n, k): (u32, u32, u32)) -> Vec<f64> {
    let (m, n, k) = (m as usize, n as usize, k as usize);
    let mut c = vec![0.0f64; m * n];
    for i in 0..m {
        for p in 0..k {
            let x = f64::from(a[i * k + p]);
            for j in 0..n {
                c[i * n + j] += x * f64::from(b[p * n + j]);
            }
        }
    }
    c
}

fn row(job: &str, path: &str, entry: &str, outputs: f64, c: &Counters, need: Job) -> Row {
    Row {
        job: job.into(),
        path: path.into(),
        entries: entry.into(),
        sample: "as run (no extrapolation)".into(),
        outputs,
        work: Work::from_counters(c),
        need,
    }
}

fn last(dev: &SimBackend, name: &str) -> Result<LaunchRecord> {
    dev.take_launch_log()
        .pop()
        .ok_or_else(|| format!("{name}: no launch recorded"))
}

/// ptxforge's GEMM sample `name` on [`MM`] with `a`, `b` (f32 values, converted for f16 inputs).
fn ptxforge_gemm(name: &str, a: &[f32], b: &[f32]) -> Result<(Counters, Vec<f64>)> {
    let (m, n, _) = MM;
    let tiled = SAMPLES.iter().find(|s| s.name == name);
    let tc = TENSOR_CORE_SAMPLES
        .iter()
        .find(|t| t.sample.name == name)
        .and_then(|t| Some((&t.sample, t.gemm_tiling?)));
    let (sample, tiling) = match (tiled, tc) {
        (Some(s), _) => {
            let tiling = GemmTiling {
                tile_m: GEMM_TILE,
                tile_n: GEMM_TILE,
                threads: GEMM_THREADS,
            };
            (s, tiling)
        }
        (None, Some(t)) => t,
        _ => return Err(format!("no GEMM sample `{name}`")),
    };
    let (grid, block) = (tiling.grid(m, n), tiling.block());
    let dev = SimBackend::new();
    let ptx = sample_module(sample, Arch::Sm80).map_err(err)?;
    let c = dev.alloc::<f32>((m * n) as usize).map_err(err)?;
    let cfg = LaunchConfig {
        grid,
        block,
        dynamic_shared_bytes: 0,
    };
    if name.contains("_f16_") {
        let h = |v: &[f32]| v.iter().map(|&x| f16::from_f32(x)).collect::<Vec<_>>();
        launch_gemm(&dev, &ptx, name, cfg, &h(a), &h(b), &c, MM)?;
    } else {
        launch_gemm(&dev, &ptx, name, cfg, a, b, &c, MM)?;
    }
    let out = dev.download(&c).map_err(err)?;
    let record = last(&dev, name)?;
    Ok((record.counters, out.into_iter().map(f64::from).collect()))
}

/// The row path of ptxforge's plain tf32 GEMM, the sample `gemm_tc_tf32_m16n8k8`.
pub const TF32_SAMPLE_PATH: &str = "ptxforge tf32 tensor cores";

/// The row path of ptxforge's grouped MoE GEMM in tf32 on the same job (which kernel, and
/// its B layout).
pub const TF32_MOE_GEMM_PATH: &str =
    "ptxforge grouped MoE GEMM, tf32 (1 expert, top-1; B stored n-major)";

/// The entry of ptxforge's grouped MoE GEMM for the tf32 matmul job.
pub const TF32_MOE_GEMM_ENTRY: &str = "moe_expert_linear";

/// ptxforge's grouped MoE GEMM in tf32 on [`MM`]: the `allow_tf32` MoE expert GEMM with one
/// expert and top-1 routing (`MoeConfig::new(1, 1, K, N)`, linear, f32, sm_80), so every one
/// of the `M` tokens is a row of the one expert's `Y = X · Wᵀ` with `X = a` and `W [N, K] = bᵀ`
/// (the expert weight is stored n-major: `b` is transposed on the host). Its routing weight
/// is exactly 1, so the layer's output is that GEMM's. The counters are the expert GEMM
/// entry's alone (not gating, permute or unpermute).
fn ptxforge_tf32_moe_gemm(a: &[f32], b: &[f32]) -> Result<(Counters, Vec<f64>)> {
    let (m, n, k) = MM;
    let cfg = MoeConfig {
        ffn: Ffn::Linear,
        dtype: DType::F32,
        allow_tf32: true,
        arch: Arch::Sm80,
        ..MoeConfig::new(1, 1, k, n)
    };
    let ptx = cfg.compile().map_err(err)?.ptx;
    let (n_, k_) = (n as usize, k as usize);
    let w: Vec<f32> = (0..n_ * k_).map(|i| b[(i % k_) * n_ + i / k_]).collect();
    let dev = SimBackend::new();
    let x = dev.upload(a).map_err(err)?;
    let logits = dev.upload(&vec![0f32; m as usize]).map_err(err)?;
    let w = dev.upload(&w).map_err(err)?;
    let out = dev.alloc::<f32>((m * n) as usize).map_err(err)?;
    let weights = ExpertWeights::Linear { w: &w };
    moe_forward(&cfg, &dev, &ptx, m, &x, &logits, weights, &out).map_err(err)?;
    let record = dev
        .take_launch_log()
        .into_iter()
        .find(|r| r.entry == TF32_MOE_GEMM_ENTRY)
        .ok_or_else(|| format!("{TF32_MOE_GEMM_ENTRY}: no launch recorded"))?;
    let got = dev.download(&out).map_err(err)?;
    Ok((record.counters, got.into_iter().map(f64::from).collect()))
}

/// Triton's matmul `file` on [`MM`]: f16 inputs when `half`, f32 otherwise; f32 output.
fn triton_matmul(
    root: &Path,
    file: &str,
    half: bool,
    a: &[f32],
    b: &[f32],
) -> Result<(Counters, Vec<f64>)> {
    let (m, n, k) = MM;
    let mut dev = Device::new();
    let (da, db) = if half {
        (dev.upload(&to_f16_bits(a)), dev.upload(&to_f16_bits(b)))
    } else {
        (dev.upload(a), dev.upload(b))
    };
    let dc = dev.upload(&vec![0f32; (m * n) as usize]);
    let args = [
        Arg::Buffer(da),
        Arg::Buffer(db),
        Arg::Buffer(dc),
        Arg::U32(m),
        Arg::U32(n),
        Arg::U32(k),
        Arg::U32(k),
        Arg::U32(n),
        Arg::U32(n),
        Arg::U64(0),
        Arg::U64(0),
    ];
    let counters = run_triton(root, &mut dev, file, "matmul", [m / 64, n / 64, 1], &args)?;
    let out = dev.download::<f32>(dc).map_err(err)?;
    Ok((counters, out.into_iter().map(f64::from).collect()))
}

fn matmul_rows(root: &Path, rows: &mut Vec<Row>) -> Result<()> {
    let (m, n, k) = MM;
    let mut rng = SplitMix64::new(31);
    let a = rng.vec_f32((m * k) as usize, -1.0, 1.0);
    let b = rng.vec_f32((k * n) as usize, -1.0, 1.0);
    let (mf, nf, kf) = (f64::from(m), f64::from(n), f64::from(k));
    let need = |elem: f64, precision| {
        let bytes = elem * (mf * kf + kf * nf) + 4.0 * mf * nf;
        Job {
            compulsory_bytes: bytes,
            footprint_bytes: bytes,
            flops: 2.0 * mf * nf * kf,
            precision,
        }
    };
    // f16 inputs are rounded before the reference so only the sum's rounding is compared.
    let round = |v: &[f32]| -> Vec<f32> { v.iter().map(|&x| f16::from_f32(x).to_f32()).collect() };
    let want16 = matmul_ref(&round(&a), &round(&b), MM);
    let want32 = matmul_ref(&a, &b, MM);
    let shape = format!("{m}×{n}×{k}");
    let job = format!("matmul f16 in, f32 out {shape}");
    let need16 = need(2.0, Precision::F16Tensor);
    let (c, got) = triton_matmul(root, "triton_matmul_f16_f32.ptx", true, &a, &b)?;
    check("Triton f16 matmul", &got, &want16, 1e-5)?;
    rows.push(row(&job, "Triton 3.9", "matmul", mf * nf, &c, need16));
    let entry = "gemm_tc_f16_m16n8k16";
    let (c, got) = ptxforge_gemm(entry, &a, &b)?;
    check("ptxforge f16 GEMM", &got, &want16, 1e-5)?;
    rows.push(row(
        &job,
        "ptxforge tensor cores",
        entry,
        mf * nf,
        &c,
        need16,
    ));
    let entry = "gemm_tiled_f32";
    let (tiled, got) = ptxforge_gemm(entry, &a, &b)?;
    check("ptxforge f32 GEMM", &got, &want32, 1e-5)?;
    let path = "ptxforge CUDA cores (f32 inputs)";
    rows.push(row(&job, path, entry, mf * nf, &tiled, need16));
    // tf32 operands keep 10 fraction bits: both kernels are held to the same 5e-3 of max.
    let tol = 5e-3;
    let job = format!("matmul tf32 {shape}");
    let need_tf32 = need(4.0, Precision::Tf32Tensor);
    let (c, got) = triton_matmul(root, "triton_matmul_tf32.ptx", false, &a, &b)?;
    check("Triton tf32 matmul", &got, &want32, tol)?;
    rows.push(row(&job, "Triton 3.9", "matmul", mf * nf, &c, need_tf32));
    let entry = "gemm_tc_tf32_m16n8k8";
    let (c, got) = ptxforge_gemm(entry, &a, &b)?;
    check("ptxforge tf32 GEMM", &got, &want32, tol)?;
    rows.push(row(&job, TF32_SAMPLE_PATH, entry, mf * nf, &c, need_tf32));
    let (c, got) = ptxforge_tf32_moe_gemm(&a, &b)?;
    check("ptxforge tf32 grouped MoE GEMM", &got, &want32, tol)?;
    let (path, entry) = (TF32_MOE_GEMM_PATH, TF32_MOE_GEMM_ENTRY);
    rows.push(row(&job, path, entry, mf * nf, &c, need_tf32));
    let entry = "gemm_tiled_f32";
    let job = format!("matmul f32 IEEE {shape}");
    let (c, got) = triton_matmul(root, "triton_matmul_f32_ieee.ptx", false, &a, &b)?;
    check("Triton f32 IEEE matmul", &got, &want32, 1e-5)?;
    let need = need(4.0, Precision::F32Fma);
    rows.push(row(&job, "Triton 3.9", "matmul", mf * nf, &c, need));
    rows.push(row(
        &job,
        "ptxforge CUDA cores",
        entry,
        mf * nf,
        &tiled,
        need,
    ));
    Ok(())
}

/// ptxforge's f16 attention on `arch`: its counters and output.
fn ptxforge_attention(
    arch: Arch,
    q: &[f32],
    k: &[f32],
    v: &[f32],
) -> Result<(LaunchRecord, Vec<f64>)> {
    let (h, s, d) = (ATT_HEADS, ATT_SEQ, ATT_DIM);
    let cfg = AttentionConfig {
        dtype: DType::F16,
        arch,
        ..AttentionConfig::new(d)
    };
    let ptx = cfg.compile().map_err(err)?.ptx;
    let dev = SimBackend::new();
    let up = |x: &[f32]| dev.upload(&x.iter().map(|&v| f16::from_f32(v)).collect::<Vec<_>>());
    let (dq, dk, dv) = (
        up(q).map_err(err)?,
        up(k).map_err(err)?,
        up(v).map_err(err)?,
    );
    let o = dev.alloc::<f16>(q.len()).map_err(err)?;
    let lse = dev.alloc::<f32>((h * s) as usize).map_err(err)?;
    let shape = AttentionShape {
        batch: 1,
        heads_q: h,
        heads_kv: h,
        seq_q: s,
        seq_kv: s,
    };
    let bufs = AttentionBuffers {
        q: &dq,
        k: &dk,
        v: &dv,
        o: &o,
        lse: &lse,
    };
    attention_forward(&cfg, &dev, &ptx, &shape, &bufs, None).map_err(err)?;
    let out = dev.download(&o).map_err(err)?;
    Ok((
        last(&dev, "attention_forward")?,
        out.iter().map(|x| x.to_f64()).collect(),
    ))
}

fn attention_rows(root: &Path, rows: &mut Vec<Row>) -> Result<()> {
    let (h, s, d) = (ATT_HEADS, ATT_SEQ, ATT_DIM);
    let len = (h * s * d) as usize;
    let mut rng = SplitMix64::new(32);
    let (q, k, v) = (
        rng.vec_f32(len, -1.0, 1.0),
        rng.vec_f32(len, -1.0, 1.0),
        rng.vec_f32(len, -1.0, 1.0),
    );
    let (hf, sf, df) = (f64::from(h), f64::from(s), f64::from(d));
    let bytes = 4.0 * hf * sf * df * 2.0;
    let need = Job {
        compulsory_bytes: bytes,
        footprint_bytes: bytes + 4.0 * hf * sf,
        flops: 4.0 * hf * sf * sf * df,
        precision: Precision::F16Tensor,
    };
    let job = format!("attention fwd f16 full B=1 H={h} S={s} D={d}");
    let outputs = hf * sf * df;
    let mut dev = Device::new();
    let (dq, dk, dv) = (
        dev.upload(&to_f16_bits(&q)),
        dev.upload(&to_f16_bits(&k)),
        dev.upload(&to_f16_bits(&v)),
    );
    let o = dev.upload(&vec![0u16; len]);
    let args = [
        Arg::Buffer(dq),
        Arg::Buffer(dk),
        Arg::Buffer(dv),
        Arg::Buffer(o),
        Arg::F32(1.0 / (d as f32).sqrt()),
        Arg::U32(s),
        Arg::U32(s * d),
        Arg::U32(d),
        Arg::U64(0),
        Arg::U64(0),
    ];
    let file = "triton_attention_fwd.ptx";
    let grid = [s.div_ceil(64), h, 1];
    let c = run_triton(root, &mut dev, file, "attention_fwd", grid, &args)?;
    let triton = from_f16_bits(&dev.download::<u16>(o).map_err(err)?);
    rows.push(row(&job, "Triton 3.9", "attention_fwd", outputs, &c, need));
    for (arch, path) in [
        (Arch::Sm70, "ptxforge CUDA cores (sm_70)"),
        (Arch::Sm80, "ptxforge sm_80 path"),
    ] {
        let (r, ours) = ptxforge_attention(arch, &q, &k, &v)?;
        check("Triton attention vs ptxforge", &triton, &ours, 5e-3)?;
        rows.push(row(&job, path, &r.entry, outputs, &r.counters, need));
    }
    Ok(())
}

/// Softmax of each row of `x [rows, cols]` in f64.
fn softmax_ref(x: &[f32], cols: usize) -> Vec<f64> {
    x.chunks(cols)
        .flat_map(|row| {
            let m = row
                .iter()
                .fold(f64::NEG_INFINITY, |a, &v| a.max(f64::from(v)));
            let e: Vec<f64> = row.iter().map(|&v| (f64::from(v) - m).exp()).collect();
            let s: f64 = e.iter().sum();
            e.into_iter().map(move |v| v / s)
        })
        .collect()
}

fn softmax_rows(root: &Path, rows: &mut Vec<Row>) -> Result<()> {
    let (r, n) = (SM_ROWS, SM_COLS);
    let x = SplitMix64::new(33).vec_f32((r * n) as usize, -4.0, 4.0);
    let want = softmax_ref(&x, n as usize);
    let bytes = 8.0 * f64::from(r * n);
    let need = Job {
        compulsory_bytes: bytes,
        footprint_bytes: bytes,
        flops: 0.0,
        precision: Precision::F32Fma,
    };
    let job = format!("row softmax f32 {r}×{n}");
    let outputs = f64::from(r * n);
    let mut dev = Device::new();
    let dx = dev.upload(&x);
    let dy = dev.upload(&vec![0f32; (r * n) as usize]);
    let args = [
        Arg::Buffer(dy),
        Arg::Buffer(dx),
        Arg::U32(n),
        Arg::U32(n),
        Arg::U32(n),
        Arg::U64(0),
        Arg::U64(0),
    ];
    let file = "triton_softmax.ptx";
    let c = run_triton(root, &mut dev, file, "softmax_rows", [r, 1, 1], &args)?;
    let got: Vec<f64> = dev
        .download::<f32>(dy)
        .map_err(err)?
        .into_iter()
        .map(f64::from)
        .collect();
    check("Triton softmax", &got, &want, 1e-5)?;
    rows.push(row(&job, "Triton 3.9", "softmax_rows", outputs, &c, need));
    let sample = SAMPLES
        .iter()
        .find(|s| s.name == "softmax_row_f32")
        .ok_or("softmax_row_f32 sample missing")?;
    let ptx = sample_module(sample, Arch::Sm80).map_err(err)?;
    let be = SimBackend::new();
    let bx = be.upload(&x).map_err(err)?;
    let by = be.alloc::<f32>((r * n) as usize).map_err(err)?;
    let cfg = LaunchConfig {
        grid: Dim3::x(r),
        block: Dim3::x(32),
        dynamic_shared_bytes: 0,
    };
    let args = [
        KernelArg::buffer(&bx),
        KernelArg::buffer(&by),
        KernelArg::U32(n),
    ];
    be.launch(&ptx, sample.name, cfg, &args).map_err(err)?;
    let got: Vec<f64> = be
        .download(&by)
        .map_err(err)?
        .into_iter()
        .map(f64::from)
        .collect();
    check("ptxforge softmax", &got, &want, 1e-5)?;
    let rec = last(&be, sample.name)?;
    rows.push(row(
        &job,
        "ptxforge",
        sample.name,
        outputs,
        &rec.counters,
        need,
    ));
    Ok(())
}

/// Every job: Triton's kernel and ptxforge's, side by side.
pub fn rows(root: &Path) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    matmul_rows(root, &mut rows)?;
    attention_rows(root, &mut rows)?;
    softmax_rows(root, &mut rows)?;
    Ok(rows)
}

pub fn section(md: &mut String, root: &Path) -> Result<()> {
    let rows = rows(root)?;
    md.push_str("### Triton 3.9 beside ptxforge\n\n");
    let _ = writeln!(
        md,
        "Triton's PTX (`peers/triton/`: Triton 3.9.0 from PyPI, ahead of time for sm_80, \
         num_warps=4, default num_stages=3) and ptxforge's kernels for the same job on the same \
         shape, in the interpreter with every check on and no finding; every output checked \
         (Triton's matmul and softmax against f64 references, Triton's attention against \
         ptxforge's). Instructions are dynamic thread-instructions per output; load efficiency \
         counts the distinct bytes `ld.global` and `cp.async` read over the 32-byte sectors they \
         fetched (lanes reading one address count once); bound, ideal and \
         ideal/bound are the H100 MODEL of the section above at these small shapes (a few \
         blocks: far from filling an H100, so read them as per-job work, not speed). Command: \
         `cargo xtask bench`.\n"
    );
    table(md, &rows);
    md.push('\n');
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// Triton and ptxforge on the comparison shapes (seconds): every output checked inside
    /// [`super::rows`]; the tensor-core rows must count exactly 2·M·N·K mma FLOPs and the
    /// CUDA-core rows none.
    #[test]
    fn triton_side_by_side_runs_and_counts_the_gemm_flops() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let rows = super::rows(&root).expect("rows");
        let (m, n, k) = super::MM;
        let gemm_flops = 2.0 * f64::from(m) * f64::from(n) * f64::from(k);
        let find = |job: &str, path: &str| {
            rows.iter()
                .find(|r| r.job.starts_with(job) && r.path == path)
                .unwrap_or_else(|| panic!("no row {job} / {path}"))
        };
        assert_eq!(find("matmul f16", "Triton 3.9").work.mma_flops, gemm_flops);
        assert_eq!(find("matmul tf32", "Triton 3.9").work.mma_flops, gemm_flops);
        for path in [super::TF32_SAMPLE_PATH, super::TF32_MOE_GEMM_PATH] {
            assert_eq!(
                find("matmul tf32", path).work.mma_flops,
                gemm_flops,
                "{path}"
            );
        }
        let ours = find("matmul f16", "ptxforge tensor cores");
        assert_eq!(ours.work.mma_flops, gemm_flops);
        assert_eq!(find("matmul f32 IEEE", "Triton 3.9").work.mma_flops, 0.0);
        let tiled = find("matmul f32 IEEE", "ptxforge CUDA cores");
        assert_eq!(tiled.work.mma_flops, 0.0);
        assert!(find("attention", "Triton 3.9").work.tensor_share() > 0.0);
        let mut md = String::new();
        super::table(&mut md, &rows);
        println!("{md}");
        assert_eq!(md.lines().count(), rows.len() + 2);
    }

    /// Per job, ptxforge's kernel for it issues no more thread-instructions per output than
    /// Triton's on the same shape (issue 11). For the tf32 matmul that kernel is the plain
    /// tf32 GEMM sample ([`super::TF32_SAMPLE_PATH`]), which keeps the `cvt.rna.tf32.f32` of
    /// every operand (the PTX ISA defines no value for raw f32 bits in a `.tf32` operand, see
    /// `templates/tf32.rs`; Triton passes raw bits) but rounds each element once as it lands
    /// in shared memory. The grouped MoE GEMM's row ([`super::TF32_MOE_GEMM_PATH`]) carries
    /// the MoE work-list machinery and rounds per fragment; it is reported, not held to
    /// Triton's count.
    #[test]
    fn ptxforge_instructions_per_output_do_not_exceed_tritons() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let rows = super::rows(&root).expect("rows");
        let per_output = |job: &str, path: &str| {
            let r = rows
                .iter()
                .find(|r| r.job.starts_with(job) && r.path == path)
                .unwrap_or_else(|| panic!("no row {job} / {path}"));
            r.work.thread_instructions / r.outputs
        };
        for (job, ours) in [
            ("matmul f16", "ptxforge tensor cores"),
            ("matmul tf32", super::TF32_SAMPLE_PATH),
            ("matmul f32 IEEE", "ptxforge CUDA cores"),
            ("attention", "ptxforge sm_80 path"),
            ("row softmax", "ptxforge"),
        ] {
            let (ptxforge, triton) = (per_output(job, ours), per_output(job, "Triton 3.9"));
            assert!(
                ptxforge <= triton,
                "{job}: {ours} issues {ptxforge:.1} instructions per output, Triton {triton:.1}"
            );
        }
    }
}
