//! `cargo xtask bench --gpu` (feature `cuda`): device timings with CUDA events, each figure a
//! ratio to a baseline measured in the same run.
//!
//! - NF4 GEMV at `m = 1` on 4096×4096 and 14336×4096: achieved bytes/s as a fraction of the
//!   device-to-device copy bandwidth measured here (the bandwidth-bound model's time is
//!   `bytes / copy bandwidth`).
//! - NF4 tiled GEMM against cuBLAS `sgemm` on the dequantised weight, same `m, n, k`; the MoE
//!   expert GEMM against cuBLAS' strided-batched `sgemm` over the same experts and bins.
//! - Attention and conv2d against PyTorch (`scaled_dot_product_attention`,
//!   `torch.nn.functional.conv2d`) when a Python with torch and CUDA is on the PATH:
//!   `xtask/torch_bench.py` times the same shapes with CUDA events and writes its timings to a
//!   JSON file read back here.

use std::sync::Arc;

use cudarc::cublas::sys::cublasOperation_t;
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig, StridedBatchedConfig};
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaSlice, CudaStream};
use ptxforge_runtime::launch::{Backend, CudaBackend, LaunchError};
use ptxforge_runtime::templates::nf4::Nf4Config;
use ptxforge_runtime::templates::CompileCached;

use super::timing::{median_ms, nf4_gemv, Clock, Repeats};

/// CUDA events around each run on the backend's stream.
#[derive(Debug)]
pub struct EventClock(pub Arc<CudaStream>);

impl Clock for EventClock {
    fn time_ms(&self, f: &mut dyn FnMut() -> Result<(), String>) -> Result<f64, String> {
        let ctx = self.0.context();
        let flags = Some(CUevent_flags::CU_EVENT_DEFAULT);
        let start = ctx.new_event(flags).map_err(|e| format!("{e:?}"))?;
        let end = ctx.new_event(flags).map_err(|e| format!("{e:?}"))?;
        start.record(&self.0).map_err(|e| format!("{e:?}"))?;
        f()?;
        end.record(&self.0).map_err(|e| format!("{e:?}"))?;
        end.synchronize().map_err(|e| format!("{e:?}"))?;
        start
            .elapsed_ms(&end)
            .map(f64::from)
            .map_err(|e| format!("{e:?}"))
    }
}

const REPEATS: Repeats = Repeats {
    warmup: 5,
    timed: 31,
};

/// Device-to-device copy bandwidth in GB/s (bytes read plus bytes written).
fn copy_bandwidth(stream: &Arc<CudaStream>, clock: &EventClock) -> Result<f64, String> {
    let bytes = 1usize << 30;
    let src: CudaSlice<u8> = stream.alloc_zeros(bytes).map_err(|e| format!("{e:?}"))?;
    let mut dst: CudaSlice<u8> = stream.alloc_zeros(bytes).map_err(|e| format!("{e:?}"))?;
    let ms = median_ms(clock, REPEATS, &mut || {
        stream
            .memcpy_dtod(&src, &mut dst)
            .map_err(|e| format!("{e:?}"))
    })?;
    Ok(2.0 * bytes as f64 / (ms * 1e-3) / 1e9)
}

/// NF4 tiled GEMM against cuBLAS sgemm on the same shape: (ours ms, cuBLAS ms).
fn nf4_tiled_vs_cublas(
    dev: &CudaBackend,
    clock: &EventClock,
    (m, n, k): (u32, u32, u32),
) -> Result<(f64, f64), String> {
    let e = |e: LaunchError| e.to_string();
    let handle = Nf4Config::new(n, k)
        .compile_cached()
        .map_err(|e| e.to_string())?;
    let weight: Vec<f32> = (0..(n * k) as usize)
        .map(|i| ((i % 29) as f32 - 14.0) / 16.0)
        .collect();
    let weights = handle.upload_weights(dev, &weight).map_err(e)?;
    let a = dev.upload(&vec![0.25f32; (m * k) as usize]).map_err(e)?;
    let mut c = dev.alloc::<f32>((m * n) as usize).map_err(e)?;
    let ours = median_ms(clock, REPEATS, &mut || {
        handle
            .forward_tiled(dev, m, &a, &weights, &mut c)
            .map_err(e)
    })?;
    let stream = dev.stream();
    let blas = CudaBlas::new(stream.clone()).map_err(|e| format!("{e:?}"))?;
    let a32: CudaSlice<f32> = stream
        .clone_htod(&vec![0.25f32; (m * k) as usize])
        .map_err(|e| format!("{e:?}"))?;
    let w32: CudaSlice<f32> = stream.clone_htod(&weight).map_err(|e| format!("{e:?}"))?;
    let mut c32: CudaSlice<f32> = stream
        .alloc_zeros((m * n) as usize)
        .map_err(|e| format!("{e:?}"))?;
    // Row-major C[m, n] = A[m, k] · Wᵀ is column-major Cᵀ[n, m] = W[n, k]ᵀᵀ · Aᵀ: op(W) = W
    // read transposed (k × n, lda = k), Aᵀ as k × m (ldb = k).
    let cfg = GemmConfig {
        transa: cublasOperation_t::CUBLAS_OP_T,
        transb: cublasOperation_t::CUBLAS_OP_N,
        m: n as i32,
        n: m as i32,
        k: k as i32,
        alpha: 1.0f32,
        lda: k as i32,
        ldb: k as i32,
        beta: 0.0f32,
        ldc: n as i32,
    };
    let cublas = median_ms(clock, REPEATS, &mut || {
        // SAFETY-relevant shapes: every matrix was allocated with exactly the sizes `cfg` names.
        #[allow(unsafe_code)]
        unsafe { blas.gemm(cfg, &w32, &a32, &mut c32) }.map_err(|e| format!("{e:?}"))
    })?;
    Ok((ours, cublas))
}

/// The MoE expert GEMM (linear, f32) against cuBLAS' strided-batched sgemm over the same
/// experts and bin sizes (rows pre-gathered for cuBLAS): (ours ms, cuBLAS ms, capacity).
fn expert_gemm_vs_cublas(
    dev: &CudaBackend,
    clock: &EventClock,
    (experts, hidden, expert_dim, tokens): (u32, u32, u32, u32),
) -> Result<(f64, f64, u32), String> {
    use ptxforge_runtime::templates::moe::launch::ExpertWeights;
    use ptxforge_runtime::templates::moe::{Ffn, MoeConfig};
    use ptxforge_runtime::DType;
    let e = |e: LaunchError| e.to_string();
    let mut cfg = MoeConfig::new(experts, 2, hidden, expert_dim);
    cfg.dtype = DType::F32;
    cfg.ffn = Ffn::Linear;
    let handle = cfg.compile_cached().map_err(|e| e.to_string())?;
    let x = dev
        .upload(&vec![0.01f32; (tokens * hidden) as usize])
        .map_err(e)?;
    let logits: Vec<f32> = (0..tokens * experts)
        .map(|i| (i % experts) as f32 * 0.1)
        .collect();
    let logits = dev.upload(&logits).map_err(e)?;
    let w = dev
        .upload(&vec![0.01f32; (experts * expert_dim * hidden) as usize])
        .map_err(e)?;
    let mut ws = handle.workspace::<_, f32>(dev, tokens).map_err(e)?;
    handle.gating(dev, tokens, &logits, &mut ws).map_err(e)?;
    handle.permute(dev, tokens, &mut ws).map_err(e)?;
    let ours = median_ms(clock, REPEATS, &mut || {
        handle
            .experts(dev, tokens, &x, ExpertWeights::Linear { w: &w }, &mut ws)
            .map_err(e)
    })?;
    let capacity = ws.capacity;
    let stream = dev.stream();
    let blas = CudaBlas::new(stream.clone()).map_err(|e| format!("{e:?}"))?;
    let rows = (experts * capacity) as usize;
    let xg: CudaSlice<f32> = stream
        .alloc_zeros(rows * hidden as usize)
        .map_err(|e| format!("{e:?}"))?;
    let wg: CudaSlice<f32> = stream
        .alloc_zeros((experts * expert_dim * hidden) as usize)
        .map_err(|e| format!("{e:?}"))?;
    let mut yg: CudaSlice<f32> = stream
        .alloc_zeros(rows * expert_dim as usize)
        .map_err(|e| format!("{e:?}"))?;
    // Per expert, row-major Y_e [C, F] = X_e [C, H] · W_eᵀ, as column-major Y_eᵀ = W_eᵀᵀ · X_eᵀ.
    let (c, f, h) = (capacity as i32, expert_dim as i32, hidden as i32);
    let cfg = StridedBatchedConfig {
        gemm: GemmConfig {
            transa: cublasOperation_t::CUBLAS_OP_T,
            transb: cublasOperation_t::CUBLAS_OP_N,
            m: f,
            n: c,
            k: h,
            alpha: 1.0f32,
            lda: h,
            ldb: h,
            beta: 0.0f32,
            ldc: f,
        },
        batch_size: experts as i32,
        stride_a: i64::from(f) * i64::from(h),
        stride_b: i64::from(c) * i64::from(h),
        stride_c: i64::from(c) * i64::from(f),
    };
    let cublas = median_ms(clock, REPEATS, &mut || {
        // Every matrix was allocated with exactly the sizes `cfg` names.
        #[allow(unsafe_code)]
        unsafe { blas.gemm_strided_batched(cfg, &wg, &xg, &mut yg) }.map_err(|e| format!("{e:?}"))
    })?;
    Ok((ours, cublas, capacity))
}

/// Attention (f16, causal, B=2, H=16, S=1024, D=128) and conv2d (f32, N=8, 64→128 channels,
/// 56×56, 3×3, padding 1): our times in ms.
fn ours_attention_conv(dev: &CudaBackend, clock: &EventClock) -> Result<(f64, f64), String> {
    use ptxforge_runtime::templates::attention::{AttentionConfig, AttentionShape};
    use ptxforge_runtime::templates::conv::{Conv2dConfig, ConvShape};
    use ptxforge_runtime::DType;
    let e = |e: LaunchError| e.to_string();
    let mut att = AttentionConfig::new(128);
    att.causal = true;
    att.dtype = DType::F16;
    let att = att.compile_cached().map_err(|e| e.to_string())?;
    let shape = AttentionShape {
        batch: 2,
        heads_q: 16,
        heads_kv: 16,
        seq_q: 1024,
        seq_kv: 1024,
    };
    let q = dev
        .upload(&vec![half::f16::from_f32(0.01); shape.q_len(128)])
        .map_err(e)?;
    let k = dev
        .upload(&vec![half::f16::from_f32(0.01); shape.kv_len(128)])
        .map_err(e)?;
    let mut o = dev.alloc::<half::f16>(shape.q_len(128)).map_err(e)?;
    let mut lse = dev.alloc::<f32>(shape.lse_len()).map_err(e)?;
    let attention = median_ms(clock, REPEATS, &mut || {
        att.forward(dev, &shape, &q, &k, &k, &mut o, &mut lse, None)
            .map(|_| ())
            .map_err(e)
    })?;
    let mut conv = Conv2dConfig::new(64, 128, 3);
    conv.padding_h = 1;
    conv.padding_w = 1;
    conv.dtype = DType::F32;
    let conv = conv.compile_cached().map_err(|e| e.to_string())?;
    let shape = ConvShape {
        batch: 8,
        height: 56,
        width: 56,
    };
    let x = dev.upload(&vec![0.1f32; 8 * 64 * 56 * 56]).map_err(e)?;
    let w = dev.upload(&vec![0.1f32; 128 * 64 * 9]).map_err(e)?;
    let mut y = dev.alloc::<f32>(8 * 128 * 56 * 56).map_err(e)?;
    let conv2d = median_ms(clock, REPEATS, &mut || {
        conv.forward(dev, &shape, &x, &w, None, &mut y)
            .map(|_| ())
            .map_err(e)
    })?;
    Ok((attention, conv2d))
}

/// PyTorch's times (ms) for the same attention and conv2d shapes, when a python3 with torch and
/// CUDA is present: `xtask/torch_bench.py` writes them to a JSON file read back here.
fn torch_timings(root: &std::path::Path) -> Option<(f64, f64)> {
    let script = root.join("xtask").join("torch_bench.py");
    let out_file = root.join("target").join("torch-bench.json");
    let status = std::process::Command::new("python3")
        .arg(&script)
        .arg(&out_file)
        .status()
        .ok()?;
    if !status.success() {
        return None;
    }
    let text = std::fs::read_to_string(&out_file).ok()?;
    let field = |name: &str| -> Option<f64> {
        let at = text.find(&format!("\"{name}\""))?;
        let rest = &text[at..];
        let colon = rest.find(':')?;
        rest[colon + 1..]
            .trim_start()
            .split([',', '}'])
            .next()?
            .trim()
            .parse()
            .ok()
    };
    Some((field("attention_ms")?, field("conv2d_ms")?))
}

/// Every GPU figure as a Markdown section.
pub fn run(root: &std::path::Path, dev: &CudaBackend) -> Result<String, String> {
    let clock = EventClock(dev.stream().clone());
    let mut md =
        String::from("## GPU (measured with CUDA events: 5 warm-up runs, median of 31)\n\n");
    md.push_str(&format!("Device architecture: {:?}\n\n", dev.arch()));
    let bandwidth = copy_bandwidth(dev.stream(), &clock)?;
    md.push_str(&format!(
        "Device-to-device copy bandwidth: {bandwidth:.0} GB/s (read + write)\n\n\
         | NF4 GEMV m=1 | median | achieved | fraction of copy bandwidth | modelled (bytes / copy bandwidth) |\n|---|---|---|---|---|\n"
    ));
    for shape in [(4096, 4096), (14336, 4096)] {
        let t = nf4_gemv(dev, &clock, REPEATS, shape)?;
        md.push_str(&format!(
            "| {}×{} | {:.3} ms | {:.0} GB/s | {:.2} | {:.3} ms |\n",
            t.n,
            t.k,
            t.median_ms,
            t.gb_per_s(),
            t.gb_per_s() / bandwidth,
            t.bytes as f64 / (bandwidth * 1e9) * 1e3
        ));
    }
    md.push_str("\n| NF4 tiled GEMM (m, n, k) | ours | cuBLAS sgemm (dequantised f32) | ours / cuBLAS |\n|---|---|---|---|\n");
    for shape in [(256, 4096, 4096), (256, 14336, 4096)] {
        let (ours, cublas) = nf4_tiled_vs_cublas(dev, &clock, shape)?;
        md.push_str(&format!(
            "| {:?} | {ours:.3} ms | {cublas:.3} ms | {:.2} |\n",
            shape,
            ours / cublas
        ));
    }
    md.push_str("\n| MoE expert GEMM f32 (E, H, F, T) | ours | cuBLAS strided-batched sgemm | ours / cuBLAS |\n|---|---|---|---|\n");
    for shape in [(8, 4096, 4096, 256), (8, 4096, 14336, 512)] {
        let (ours, cublas, capacity) = expert_gemm_vs_cublas(dev, &clock, shape)?;
        md.push_str(&format!(
            "| {shape:?}, capacity {capacity} | {ours:.3} ms | {cublas:.3} ms | {:.2} |\n",
            ours / cublas
        ));
    }
    let (attention, conv2d) = ours_attention_conv(dev, &clock)?;
    md.push_str("\n| vs PyTorch | ours | PyTorch | ours / PyTorch |\n|---|---|---|---|\n");
    match torch_timings(root) {
        Some((t_att, t_conv)) => {
            for (name, ours, torch) in [
                ("attention f16 causal 2×16×1024×128 (SDPA)", attention, t_att),
                ("conv2d f32 8×64×56×56 → 128, 3×3 (F.conv2d)", conv2d, t_conv),
            ] {
                md.push_str(&format!(
                    "| {name} | {ours:.3} ms | {torch:.3} ms | {:.2} |\n",
                    ours / torch
                ));
            }
        }
        None => md.push_str(&format!(
            "| attention f16 causal 2×16×1024×128 | {attention:.3} ms | skipped (no python3 with torch and CUDA) | |\n\
             | conv2d f32 8×64×56×56 → 128, 3×3 | {conv2d:.3} ms | skipped | |\n"
        )),
    }
    dev.synchronize().map_err(|e| e.to_string())?;
    Ok(md)
}
