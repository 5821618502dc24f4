//! The numerics cases of the GPU suite (the CUDA-core ones here, the tensor-core ones in
//! [`super::tensor_cases`]): each family through its run-time handle
//! (`compile_cached`), the same inputs on the device under test and on the interpreter, both
//! compared with the host reference and with each other.

use half::{bf16, f16};
use ptxforge_runtime::launch::{Backend, Element, LaunchError, SimBackend};
use ptxforge_runtime::templates::attention::{self, AttentionConfig, AttentionShape};
use ptxforge_runtime::templates::conv::{self, Conv2dConfig, ConvShape};
use ptxforge_runtime::templates::moe::launch::ExpertWeights;
use ptxforge_runtime::templates::moe::{self, Ffn, MoeConfig};
use ptxforge_runtime::templates::nf4::{self, Nf4Config};
use ptxforge_runtime::templates::testing::{to_f64, HostFloat};
use ptxforge_runtime::templates::CompileCached;
use ptxforge_runtime::DType;

/// Problem sizes: tiny for the CPU dry run, real ones on a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Size {
    /// The CPU dry run's sizes (the `cargo xtask test` unit tests).
    #[cfg_attr(not(test), allow(dead_code))]
    Tiny,
    Full,
}

/// The outputs of one case: from the device, the interpreter and the host reference.
#[derive(Debug)]
pub struct Outputs {
    pub device: Vec<f64>,
    pub interpreter: Vec<f64>,
    pub reference: Vec<f64>,
    /// Largest accepted `|a − b| / max(1, |b|)` between any two of them.
    pub tolerance: f64,
}

pub type Case<B> = fn(&B, &SimBackend, Size) -> Result<Outputs, String>;

/// Every case, by name.
pub fn all<B: Backend>() -> Vec<(&'static str, Case<B>)> {
    let cuda_cores: Vec<(&'static str, Case<B>)> = vec![
        ("nf4 gemv m=1", nf4_gemv::<B>),
        ("nf4 tiled m=33", nf4_tiled::<B>),
        ("moe linear forward", moe_forward::<B>),
        ("attention causal forward", attention_forward::<B>),
        ("conv2d 3x3 forward", conv_forward::<B>),
    ];
    cuda_cores
        .into_iter()
        .chain(super::tensor_cases::all::<B>())
        .collect()
}

pub(super) fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Deterministic values in [−1, 1).
pub(super) fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn widen(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| f64::from(x)).collect()
}

/// Runs `run` on a backend and downloads its output as f64.
pub(super) fn on<D: Backend, T: HostFloat>(
    dev: &D,
    run: impl Fn(&D) -> Result<Vec<T>, LaunchError>,
) -> Result<Vec<f64>, String> {
    run(dev).map(|v| to_f64(&v)).map_err(err)
}

/// The element types of the cases, with the largest accepted `|a − b| / max(1, |b|)` of
/// outputs up to about 8: f32 summation order only; for halves a few units in the last
/// place (f32 accumulation in another order on the device, one rounding).
pub(super) trait CaseElem: HostFloat + Element {
    const DTYPE: DType;
    const TOLERANCE: f64;
}

impl CaseElem for f32 {
    const DTYPE: DType = DType::F32;
    const TOLERANCE: f64 = 1e-4;
}

impl CaseElem for f16 {
    const DTYPE: DType = DType::F16;
    const TOLERANCE: f64 = 5e-3;
}

impl CaseElem for bf16 {
    const DTYPE: DType = DType::BF16;
    const TOLERANCE: f64 = 4e-2;
}

/// `n` deterministic values in `[−scale, scale)` rounded to `T`, and those values as f64.
pub(super) fn rounded<T: CaseElem>(n: usize, seed: u64, scale: f64) -> (Vec<T>, Vec<f64>) {
    let v: Vec<T> = values(n, seed)
        .into_iter()
        .map(|x| T::from_f64(f64::from(x) * scale))
        .collect();
    let wide = to_f64(&v);
    (v, wide)
}

fn nf4_case<B: Backend>(
    dev: &B,
    sim: &SimBackend,
    m: u32,
    (n, k): (u32, u32),
) -> Result<Outputs, String> {
    let handle = Nf4Config::new(n, k).compile_cached().map_err(err)?;
    let w = values((n * k) as usize, 1);
    let a = values((m * k) as usize, 2);
    let quantized = nf4::quantize(&w, 64).map_err(err)?;
    let reference =
        nf4::reference::forward(&a, m as usize, &quantized, n as usize, k as usize).map_err(err)?;
    macro_rules! run_on {
        ($d:expr) => {
            on($d, |d| {
                let weights = handle.upload_weights(d, &w)?;
                let a = d.upload(&a)?;
                let mut c = d.alloc::<f32>((m * n) as usize)?;
                handle.forward(d, m, &a, &weights, &mut c)?;
                d.download(&c)
            })
        };
    }
    let (device, interpreter) = (run_on!(dev)?, run_on!(sim)?);
    Ok(Outputs {
        device,
        interpreter,
        reference: widen(&reference),
        tolerance: 1e-4,
    })
}

fn nf4_gemv<B: Backend>(dev: &B, sim: &SimBackend, size: Size) -> Result<Outputs, String> {
    let shape = match size {
        Size::Tiny => (64, 128),
        Size::Full => (4096, 4096),
    };
    nf4_case(dev, sim, 1, shape)
}

fn nf4_tiled<B: Backend>(dev: &B, sim: &SimBackend, size: Size) -> Result<Outputs, String> {
    let shape = match size {
        Size::Tiny => (64, 128),
        Size::Full => (1024, 1024),
    };
    nf4_case(dev, sim, 33, shape)
}

fn moe_forward<B: Backend>(dev: &B, sim: &SimBackend, size: Size) -> Result<Outputs, String> {
    let (experts, hidden, expert_dim, tokens) = match size {
        Size::Tiny => (4, 32, 64, 5u32),
        Size::Full => (8, 1024, 2048, 256),
    };
    let mut cfg = MoeConfig::new(experts, 2, hidden, expert_dim);
    cfg.dtype = DType::F32;
    cfg.ffn = Ffn::Linear;
    let handle = cfg.compile_cached().map_err(err)?;
    let x = values((tokens * hidden) as usize, 3);
    let logits = values((tokens * experts) as usize, 4);
    let w = values((experts * expert_dim * hidden) as usize, 5);
    let want = moe::reference::forward(
        &cfg,
        &widen(&x),
        &widen(&logits),
        moe::reference::ExpertWeights::Linear { w: &widen(&w) },
        tokens as usize,
    )
    .map_err(err)?;
    // The device runs the caller-workspace path (nothing waits inside), the interpreter the
    // allocating one: both must agree.
    macro_rules! run_on {
        ($d:expr, $with_workspace:expr) => {
            on($d, |d| {
                let (xb, lb, wb) = (d.upload(&x)?, d.upload(&logits)?, d.upload(&w)?);
                let mut out = d.alloc::<f32>((tokens * expert_dim) as usize)?;
                let weights = ExpertWeights::Linear { w: &wb };
                if $with_workspace {
                    let mut ws = handle.workspace(d, tokens)?;
                    handle.forward_with(d, tokens, &mut ws, &xb, &lb, weights, &mut out)?;
                } else {
                    handle.forward(d, tokens, &xb, &lb, weights, &mut out)?;
                }
                d.download(&out)
            })
        };
    }
    let (device, interpreter) = (run_on!(dev, true)?, run_on!(sim, false)?);
    Ok(Outputs {
        device,
        interpreter,
        reference: want.out,
        tolerance: 1e-4,
    })
}

fn attention_forward<B: Backend>(dev: &B, sim: &SimBackend, size: Size) -> Result<Outputs, String> {
    attention_case::<B, f32>(dev, sim, size)
}

/// The causal attention forward in `T` through the run-time handle.
pub(super) fn attention_case<B: Backend, T: CaseElem>(
    dev: &B,
    sim: &SimBackend,
    size: Size,
) -> Result<Outputs, String> {
    let (head_dim, shape) = match size {
        Size::Tiny => (32, AttentionShape::new(1, 2, 1, 9, 17)),
        Size::Full => (128, AttentionShape::new(2, 16, 4, 512, 512)),
    };
    let mut cfg = AttentionConfig::new(head_dim);
    cfg.causal = true;
    cfg.dtype = T::DTYPE;
    let handle = cfg.compile_cached().map_err(err)?;
    let (q, q_ref) = rounded::<T>(shape.q_len(head_dim), 6, 1.0);
    let (k, k_ref) = rounded::<T>(shape.kv_len(head_dim), 7, 1.0);
    let (v, v_ref) = rounded::<T>(shape.kv_len(head_dim), 8, 1.0);
    let scale = cfg.default_scale();
    let want = attention::reference::forward(&shape, head_dim, &q_ref, &k_ref, &v_ref, true, scale)
        .map_err(err)?;
    macro_rules! run_on {
        ($d:expr) => {
            on($d, |d| {
                let (qb, kb, vb) = (d.upload(&q)?, d.upload(&k)?, d.upload(&v)?);
                let mut o = d.alloc::<T>(shape.q_len(head_dim))?;
                let mut lse = d.alloc::<f32>(shape.lse_len())?;
                handle.forward(d, &shape, &qb, &kb, &vb, &mut o, &mut lse, None)?;
                d.download(&o)
            })
        };
    }
    Ok(Outputs {
        device: run_on!(dev)?,
        interpreter: run_on!(sim)?,
        reference: want.o,
        tolerance: T::TOLERANCE,
    })
}

fn conv_forward<B: Backend>(dev: &B, sim: &SimBackend, size: Size) -> Result<Outputs, String> {
    let (c_in, c_out, shape) = match size {
        Size::Tiny => (
            3,
            4,
            ConvShape {
                batch: 1,
                height: 7,
                width: 6,
            },
        ),
        Size::Full => (
            64,
            128,
            ConvShape {
                batch: 8,
                height: 56,
                width: 56,
            },
        ),
    };
    let mut cfg = Conv2dConfig::new(c_in, c_out, 3);
    cfg.padding_h = 1;
    cfg.padding_w = 1;
    cfg.dtype = DType::F32;
    let handle = cfg.compile_cached().map_err(err)?;
    let x = values(
        (shape.batch * c_in * shape.height * shape.width) as usize,
        9,
    );
    let w = values((c_out * c_in * 9) as usize, 10);
    let want = conv::reference::forward(&cfg, &shape, &widen(&x), &widen(&w), None).map_err(err)?;
    macro_rules! run_on {
        ($d:expr) => {
            on($d, |d| {
                let (xb, wb) = (d.upload(&x)?, d.upload(&w)?);
                let mut y = d.alloc::<f32>(want.len())?;
                handle.forward(d, &shape, &xb, &wb, None, &mut y)?;
                d.download(&y)
            })
        };
    }
    Ok(Outputs {
        device: run_on!(dev)?,
        interpreter: run_on!(sim)?,
        reference: want,
        tolerance: 1e-4,
    })
}
