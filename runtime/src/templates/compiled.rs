//! Configurations known only at run time (a model's `config.json`): the official path next to
//! the attributes. [`CompileCached::compile_cached`] builds, validates and emits a family
//! configuration's module once per process (the same template code the attribute runs at
//! compile time, so the same configuration gives the same bytes) and returns a
//! [`CompiledKernel`]: a handle with the same launch wrappers the attribute generates
//! (`forward`, `forward_with`, `gating`, …, `backward_*`, `upload_weights`).
//!
//! ```
//! use ptxforge_runtime::launch::{Backend, SimBackend};
//! use ptxforge_runtime::templates::nf4::Nf4Config;
//! use ptxforge_runtime::templates::CompileCached;
//!
//! // e.g. read from a checkpoint's config at start-up
//! let (n, k) = (64, 128);
//! let proj = Nf4Config::new(n, k).compile_cached()?;
//! let dev = SimBackend::new();
//! let weights = proj.upload_weights(&dev, &vec![0.25f32; (n * k) as usize])?;
//! let a = dev.upload(&vec![1.0f32; k as usize])?;
//! let mut c = dev.alloc::<f32>(n as usize)?;
//! proj.forward(&dev, 1, &a, &weights, &mut c)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The cache is keyed by the configuration; each distinct configuration's text is kept for the
//! life of the process (it is what backends load and cache by address), so a program compiles
//! each configuration it uses once and never frees it — the same as the attribute's `const`.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Mutex, OnceLock};

use super::attention::launch::AttentionBuffers;
use super::attention::{AttentionConfig, AttentionShape};
use super::conv::{Conv2dConfig, ConvDims, ConvShape};
use super::moe::launch::{ExpertWeights, MoeLaunch, MoeStats, MoeWorkspace};
use super::moe::MoeConfig;
use super::nf4::launch::{DeviceWeights, Nf4Activation};
use super::nf4::{quantize, Nf4Config, Nf4DoubleQuant};
use super::{attention, conv, moe, nf4, KernelFamily, TemplateError};
use crate::launch::{Backend, DeviceBuffer, Element, LaunchError};

/// A family configuration compiled at run time: the configuration and its module's text.
#[derive(Debug, Clone, Copy)]
pub struct CompiledKernel<C: 'static> {
    config: &'static C,
    ptx: &'static str,
}

impl<C> CompiledKernel<C> {
    /// The configuration the module was built for.
    pub fn config(&self) -> &'static C {
        self.config
    }

    /// The module's PTX text (what the attribute's `PTX` const holds for the same
    /// configuration).
    pub fn ptx(&self) -> &'static str {
        self.ptx
    }
}

/// `compile_cached()` for every family configuration.
pub trait CompileCached: KernelFamily + Debug + Copy + Send + Sync + 'static {
    /// Builds (once per process and configuration) and returns the launch handle. Fails, as
    /// the attribute would at compile time, when the configuration breaks a rule.
    fn compile_cached(&self) -> Result<CompiledKernel<Self>, TemplateError>;
}

impl<C: KernelFamily + Debug + Copy + Send + Sync + 'static> CompileCached for C {
    fn compile_cached(&self) -> Result<CompiledKernel<Self>, TemplateError> {
        type Leaked = (&'static (dyn Any + Send + Sync), &'static str);
        static MODULES: OnceLock<Mutex<HashMap<(TypeId, String), Leaked>>> = OnceLock::new();
        // A configuration's `Debug` text names every field: a complete key.
        let key = (TypeId::of::<C>(), format!("{self:?}"));
        let modules = MODULES.get_or_init(Default::default);
        let cached = modules
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            .copied();
        let (config, ptx) = match cached {
            Some(hit) => hit,
            None => {
                // Built outside the lock: compiling takes milliseconds and may run in parallel
                // for different configurations; a racing duplicate is dropped here.
                let ptx: &'static str = Box::leak(self.compile()?.ptx.into_boxed_str());
                let config: &'static C = Box::leak(Box::new(*self));
                *modules
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .entry(key)
                    .or_insert((config, ptx))
            }
        };
        let config = config
            .downcast_ref::<C>()
            .expect("the cache is keyed by the configuration's TypeId");
        Ok(CompiledKernel { config, ptx })
    }
}

/// Quantises a host weight `W [n, k]` (row-major f32) with `cfg`'s block size (and double
/// quantisation when configured), bitsandbytes-compatible, and uploads it: `upload_weights` of
/// both `#[nf4_gemm]` and [`CompiledKernel<Nf4Config>`].
pub fn nf4_upload_weights<B: Backend>(
    cfg: &Nf4Config,
    dev: &B,
    weight: &[f32],
) -> Result<DeviceWeights<B>, LaunchError> {
    let expected = cfg.n as usize * cfg.k as usize;
    if weight.len() != expected {
        return Err(LaunchError::BufferLength {
            name: "weight",
            expected,
            actual: weight.len(),
        });
    }
    let quantized =
        quantize(weight, cfg.block as usize).map_err(|e| LaunchError::Shape(e.to_string()))?;
    if cfg.double_quant {
        DeviceWeights::upload_double_quant(dev, &Nf4DoubleQuant::new(&quantized))
    } else {
        DeviceWeights::upload(dev, &quantized)
    }
}

/// The wrappers of `#[nf4_gemm]`, for a configuration compiled at run time.
impl CompiledKernel<Nf4Config> {
    /// Forward `c [m, n] = a [m, k] · dequant(W)ᵀ`: GEMV for small `m`, tiled above.
    pub fn forward<B: Backend, T: Nf4Activation>(
        &self,
        dev: &B,
        m: u32,
        a: &DeviceBuffer<B, T>,
        weights: &DeviceWeights<B>,
        c: &mut DeviceBuffer<B, T>,
    ) -> Result<(), LaunchError> {
        nf4::launch::forward(self.config, dev, self.ptx, m, a, weights, c)
    }

    /// Forward through entry `nf4_gemv` only.
    pub fn forward_gemv<B: Backend, T: Nf4Activation>(
        &self,
        dev: &B,
        m: u32,
        a: &DeviceBuffer<B, T>,
        weights: &DeviceWeights<B>,
        c: &mut DeviceBuffer<B, T>,
    ) -> Result<(), LaunchError> {
        nf4::launch::forward_gemv(self.config, dev, self.ptx, m, a, weights, c)
    }

    /// Forward through the tiled entries only (`nf4_gemm`, split over `k` when its grid is
    /// small: [`nf4::launch::forward_tiled`]).
    pub fn forward_tiled<B: Backend, T: Nf4Activation>(
        &self,
        dev: &B,
        m: u32,
        a: &DeviceBuffer<B, T>,
        weights: &DeviceWeights<B>,
        c: &mut DeviceBuffer<B, T>,
    ) -> Result<(), LaunchError> {
        nf4::launch::forward_tiled(self.config, dev, self.ptx, m, a, weights, c)
    }

    /// Backward with respect to the input: `g_a [m, k] = g_c [m, n] · dequant(W)`.
    pub fn backward_input<B: Backend, T: Nf4Activation>(
        &self,
        dev: &B,
        m: u32,
        g_c: &DeviceBuffer<B, T>,
        weights: &DeviceWeights<B>,
        g_a: &mut DeviceBuffer<B, T>,
    ) -> Result<(), LaunchError> {
        nf4::launch::backward_input(self.config, dev, self.ptx, m, g_c, weights, g_a)
    }

    /// Quantises and uploads a host weight `W [n, k]` as this kernel reads it.
    pub fn upload_weights<B: Backend>(
        &self,
        dev: &B,
        weight: &[f32],
    ) -> Result<DeviceWeights<B>, LaunchError> {
        nf4_upload_weights(self.config, dev, weight)
    }
}

/// The wrappers of `#[moe_kernel]`, for a configuration compiled at run time. Expert weights
/// are one [`ExpertWeights`] (its variant must match the configuration's `ffn`).
impl CompiledKernel<MoeConfig> {
    /// The checked launch context for `tokens` tokens.
    pub fn launcher<'a, B: Backend>(
        &'a self,
        dev: &'a B,
        tokens: u32,
    ) -> Result<MoeLaunch<'a, B>, LaunchError> {
        MoeLaunch::new(self.config, dev, self.ptx, tokens)
    }

    /// Allocates every intermediate buffer of a forward pass over `tokens` tokens.
    pub fn workspace<B: Backend, T: Element>(
        &self,
        dev: &B,
        tokens: u32,
    ) -> Result<MoeWorkspace<B, T>, LaunchError> {
        self.launcher(dev, tokens)?.workspace::<T>()
    }

    /// The whole layer, allocating the intermediates; returns the statistics.
    pub fn forward<B: Backend, T: Element>(
        &self,
        dev: &B,
        tokens: u32,
        x: &DeviceBuffer<B, T>,
        logits: &DeviceBuffer<B, T>,
        weights: ExpertWeights<'_, B, T>,
        out: &mut DeviceBuffer<B, T>,
    ) -> Result<MoeStats, LaunchError> {
        moe::launch::forward(
            self.config,
            dev,
            self.ptx,
            tokens,
            x,
            logits,
            weights,
            &*out,
        )
    }

    /// The whole layer with caller-provided intermediates; only queues the phases
    /// (`ws.stats(dev)` reads the statistics).
    #[allow(clippy::too_many_arguments)]
    pub fn forward_with<B: Backend, T: Element>(
        &self,
        dev: &B,
        tokens: u32,
        ws: &mut MoeWorkspace<B, T>,
        x: &DeviceBuffer<B, T>,
        logits: &DeviceBuffer<B, T>,
        weights: ExpertWeights<'_, B, T>,
        out: &mut DeviceBuffer<B, T>,
    ) -> Result<(), LaunchError> {
        self.launcher(dev, tokens)?
            .forward_with(&*ws, x, logits, weights, &*out)
    }

    /// Phase 1, gating: `logits` → `ws.indices`, `ws.weights`.
    pub fn gating<B: Backend, T: Element>(
        &self,
        dev: &B,
        tokens: u32,
        logits: &DeviceBuffer<B, T>,
        ws: &mut MoeWorkspace<B, T>,
    ) -> Result<(), LaunchError> {
        self.launcher(dev, tokens)?.gating(logits, ws.routing())
    }

    /// Phase 2, permute: `ws.indices` → the expert bins.
    pub fn permute<B: Backend, T: Element>(
        &self,
        dev: &B,
        tokens: u32,
        ws: &mut MoeWorkspace<B, T>,
    ) -> Result<(), LaunchError> {
        self.launcher(dev, tokens)?.permute(&ws.indices, ws.bins())
    }

    /// Phase 3, the experts: `ws.expert_out` from `x` gathered through the bins.
    pub fn experts<B: Backend, T: Element>(
        &self,
        dev: &B,
        tokens: u32,
        x: &DeviceBuffer<B, T>,
        weights: ExpertWeights<'_, B, T>,
        ws: &mut MoeWorkspace<B, T>,
    ) -> Result<(), LaunchError> {
        self.launcher(dev, tokens)?.experts(
            x,
            ws.bins(),
            weights,
            ws.gated.as_ref(),
            &ws.expert_out,
        )
    }

    /// Phase 4, unpermute: `out` = the weighted sum of each token's kept expert rows.
    pub fn unpermute<B: Backend, T: Element>(
        &self,
        dev: &B,
        tokens: u32,
        ws: &MoeWorkspace<B, T>,
        out: &mut DeviceBuffer<B, T>,
    ) -> Result<(), LaunchError> {
        self.launcher(dev, tokens)?
            .unpermute(&ws.expert_out, ws.routing(), ws.bins(), &*out)
    }
}

/// The wrapper of `#[attention_kernel]`, for a configuration compiled at run time.
impl CompiledKernel<AttentionConfig> {
    /// Attention forward: `o = softmax(q · kᵀ · scale) · v` and the log-sum-exp `lse`.
    #[allow(clippy::too_many_arguments)]
    pub fn forward<B: Backend, T: Element>(
        &self,
        dev: &B,
        shape: &AttentionShape,
        q: &DeviceBuffer<B, T>,
        k: &DeviceBuffer<B, T>,
        v: &DeviceBuffer<B, T>,
        o: &mut DeviceBuffer<B, T>,
        lse: &mut DeviceBuffer<B, f32>,
        scale: Option<f64>,
    ) -> Result<(), LaunchError> {
        let buffers = AttentionBuffers {
            q,
            k,
            v,
            o: &*o,
            lse: &*lse,
        };
        attention::launch::forward(self.config, dev, self.ptx, shape, &buffers, scale)
    }
}

/// The wrappers of `#[conv2d_kernel]`, for a configuration compiled at run time. `bias` and
/// `db` are `Some` exactly when the configuration has `bias = true`.
impl CompiledKernel<Conv2dConfig> {
    /// Forward through the fastest entry of the module, as the attribute's `forward`
    /// ([`conv::launch::forward`]): the tensor-core implicit GEMMs where the config has them,
    /// else `conv2d_nhwc`, `conv2d_1x1` or `conv2d_direct`.
    pub fn forward<B: Backend, T: Element>(
        &self,
        dev: &B,
        shape: &ConvShape,
        x: &DeviceBuffer<B, T>,
        w: &DeviceBuffer<B, T>,
        bias: Option<&DeviceBuffer<B, T>>,
        y: &mut DeviceBuffer<B, T>,
    ) -> Result<ConvDims, LaunchError> {
        conv::launch::forward(self.config, dev, self.ptx, shape, x, w, bias, y)
    }

    /// Forward through entry `conv2d_direct`.
    pub fn forward_direct<B: Backend, T: Element>(
        &self,
        dev: &B,
        shape: &ConvShape,
        x: &DeviceBuffer<B, T>,
        w: &DeviceBuffer<B, T>,
        bias: Option<&DeviceBuffer<B, T>>,
        y: &mut DeviceBuffer<B, T>,
    ) -> Result<ConvDims, LaunchError> {
        conv::launch::forward_direct(self.config, dev, self.ptx, shape, x, w, bias, y)
    }

    /// Forward through entries `conv2d_im2col` and `conv2d_gemm` with the column buffer `cols`.
    #[allow(clippy::too_many_arguments)]
    pub fn forward_im2col<B: Backend, T: Element>(
        &self,
        dev: &B,
        shape: &ConvShape,
        x: &DeviceBuffer<B, T>,
        w: &DeviceBuffer<B, T>,
        bias: Option<&DeviceBuffer<B, T>>,
        cols: &mut DeviceBuffer<B, T>,
        y: &mut DeviceBuffer<B, T>,
    ) -> Result<ConvDims, LaunchError> {
        conv::launch::forward_im2col(self.config, dev, self.ptx, shape, x, w, bias, cols, y)
    }

    /// Forward through entry `conv2d_1x1` (1×1 kernels only).
    pub fn forward_1x1<B: Backend, T: Element>(
        &self,
        dev: &B,
        shape: &ConvShape,
        x: &DeviceBuffer<B, T>,
        w: &DeviceBuffer<B, T>,
        bias: Option<&DeviceBuffer<B, T>>,
        y: &mut DeviceBuffer<B, T>,
    ) -> Result<ConvDims, LaunchError> {
        conv::launch::forward_1x1(self.config, dev, self.ptx, shape, x, w, bias, y)
    }

    /// Gradient with respect to the input.
    pub fn backward_data<B: Backend, T: Element>(
        &self,
        dev: &B,
        shape: &ConvShape,
        gy: &DeviceBuffer<B, T>,
        w: &DeviceBuffer<B, T>,
        dx: &mut DeviceBuffer<B, T>,
    ) -> Result<ConvDims, LaunchError> {
        conv::launch::backward_data(self.config, dev, self.ptx, shape, gy, w, dx)
    }

    /// Gradient with respect to the weights (and the bias).
    pub fn backward_filter<B: Backend, T: Element>(
        &self,
        dev: &B,
        shape: &ConvShape,
        x: &DeviceBuffer<B, T>,
        gy: &DeviceBuffer<B, T>,
        dw: &mut DeviceBuffer<B, T>,
        db: Option<&mut DeviceBuffer<B, T>>,
    ) -> Result<ConvDims, LaunchError> {
        conv::launch::backward_filter(self.config, dev, self.ptx, shape, x, gy, dw, db)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compiles_once_per_configuration() {
        let a = Nf4Config::new(64, 128).compile_cached().expect("compiles");
        let b = Nf4Config::new(64, 128).compile_cached().expect("compiles");
        assert!(std::ptr::eq(a.ptx(), b.ptx()), "the cached text is reused");
        assert!(std::ptr::eq(a.config(), b.config()));
        assert_eq!(a.ptx(), Nf4Config::new(64, 128).compile().unwrap().ptx);
        let c = Nf4Config::new(64, 256).compile_cached().expect("compiles");
        assert!(!std::ptr::eq(a.ptx(), c.ptx()));
        assert_eq!(c.config().k, 256);
    }

    #[test]
    fn a_bad_configuration_is_the_attribute_error() {
        let err = MoeConfig::new(8, 9, 64, 64).compile_cached().unwrap_err();
        assert!(matches!(err, TemplateError::Config(_)), "{err}");
    }
}
