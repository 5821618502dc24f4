//! ptxforge attribute macros: `#[moe_kernel(..)]`, `#[nf4_gemm(..)]`, `#[attention_kernel(..)]`
//! and `#[conv2d_kernel(..)]` on a unit struct.
//!
//! Each checks its configuration at compile time (every error at the offending token, all at
//! once) and adds the checked configuration, and in the next phase the kernel's PTX and typed
//! launch wrappers, to the struct. The pipeline (`expand`) is parse (`parse/`) → check
//! (`check.rs`) → generate (`generate/`); the entry points below only hand tokens to it.

mod check;
mod errors;
mod expand;
mod family;
mod generate;
mod parse;

#[cfg(test)]
mod tests;

use proc_macro::TokenStream;

use family::{Attention, Conv2d, Moe, Nf4};

/// A mixture-of-experts layer: gating, permute, expert FFNs, unpermute.
///
/// ```
/// use ptxforge::prelude::*;
///
/// #[moe_kernel(experts = 4, top_k = 2, hidden = 16, expert_dim = 32,
///              capacity_factor = 2.0, dtype = bf16, ffn = swiglu, arch = sm_80)]
/// pub struct Mixtral;
///
/// # fn main() -> Result<(), LaunchError> {
/// let (tokens, e, h, f) = (8usize, 4usize, 16usize, 32usize);
/// let fill = |n: usize, s: f32| -> Vec<bf16> {
///     (0..n).map(|i| bf16::from_f32(((i * 7 % 13) as f32 / 13.0 - 0.5) * s)).collect()
/// };
/// let dev = SimBackend::new();
/// let x = dev.upload(&fill(tokens * h, 1.0))?; // [tokens, hidden]
/// let logits = dev.upload(&fill(tokens * e, 4.0))?; // [tokens, experts]
/// let w1 = dev.upload(&fill(e * f * h, 0.3))?; // [experts, expert_dim, hidden]
/// let w3 = dev.upload(&fill(e * f * h, 0.3))?;
/// let w2 = dev.upload(&fill(e * h * f, 0.3))?; // [experts, hidden, expert_dim]
/// let mut out = dev.alloc::<bf16>(tokens * h)?;
/// let stats = Mixtral.forward(&dev, tokens as u32, &x, &logits, &w1, &w3, &w2, &mut out)?;
/// assert_eq!(stats.counts.len(), e);
/// assert!(dev.download(&out)?.iter().all(|v| v.is_finite()));
/// # Ok(())
/// # }
/// ```
///
/// Required: `experts`, `top_k`, `hidden`, `expert_dim`. Defaults: `capacity_factor = 1.25`,
/// `dtype = f32`, `ffn = linear`, `normalize_topk = true`, `allow_tf32 = false`, `arch = sm_80`.
/// `allow_tf32 = true` (f32 only) runs the expert GEMMs on tf32 tensor cores on sm_80+
/// (error ≤ `2⁻¹⁰·√K` relative to the output's largest magnitude); older targets keep the
/// CUDA-core f32 GEMMs silently.
#[proc_macro_attribute]
pub fn moe_kernel(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand::<Moe>(attr.into(), item.into()).into()
}

/// A GEMM with bitsandbytes-compatible NF4 weights `W [n, k]`.
///
/// ```
/// use ptxforge::prelude::*;
///
/// #[nf4_gemm(n = 32, k = 64, block = 64, double_quant = true, dtype = bf16, arch = sm_80)]
/// pub struct Proj;
///
/// # fn main() -> Result<(), LaunchError> {
/// let dev = SimBackend::new();
/// let w: Vec<f32> = (0..32 * 64).map(|i| (i % 9) as f32 / 9.0 - 0.5).collect(); // W [n, k]
/// let weights = Proj.upload_weights(&dev, &w)?;
/// let a = dev.upload(&vec![bf16::ZERO; 2 * 64])?; // A [m, k]
/// let mut c = dev.upload(&vec![bf16::ONE; 2 * 32])?; // C [m, n], overwritten
/// Proj.forward(&dev, 2, &a, &weights, &mut c)?;
/// assert!(dev.download(&c)?.iter().all(|v| *v == bf16::ZERO));
/// # Ok(())
/// # }
/// ```
///
/// Required: `n`, `k`. Defaults: `block = 64`, `double_quant = false`, `dtype = f32`,
/// `allow_tf32 = false`, `arch = sm_80`. `allow_tf32 = true` (f32 only) runs the tiled forward
/// and backward-input GEMMs on tf32 tensor cores on sm_80+ when `k` and `n` are multiples of 4;
/// other shapes and older targets keep the CUDA-core GEMMs silently.
#[proc_macro_attribute]
pub fn nf4_gemm(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand::<Nf4>(attr.into(), item.into()).into()
}

/// FlashAttention-2-style forward attention with GQA and an optional causal mask.
///
/// ```
/// use ptxforge::prelude::*;
///
/// #[attention_kernel(head_dim = 32, causal = true, dtype = bf16, arch = sm_80)]
/// pub struct Attn;
///
/// # fn main() -> Result<(), LaunchError> {
/// let shape = AttentionShape { batch: 1, heads_q: 2, heads_kv: 1, seq_q: 3, seq_kv: 3 };
/// let dev = SimBackend::new();
/// let q = dev.upload(&vec![bf16::ONE; shape.q_len(32)])?; // [B, Hq, Sq, D]
/// let kv = dev.upload(&vec![bf16::from_f32(0.5); shape.kv_len(32)])?; // [B, Hkv, Skv, D]
/// let mut o = dev.alloc::<bf16>(shape.q_len(32))?;
/// let mut lse = dev.alloc::<f32>(shape.lse_len())?; // [B, Hq, Sq]
/// Attn.forward(&dev, &shape, &q, &kv, &kv, &mut o, &mut lse, None)?;
/// // Every key equal: the output is V's row, whatever the weights.
/// assert!(dev.download(&o)?.iter().all(|v| *v == bf16::from_f32(0.5)));
/// # Ok(())
/// # }
/// ```
///
/// Required: `head_dim`. Defaults: `block_m = 0`, `block_n = 0` (automatic), `causal = false`,
/// `dtype = f32`, `allow_tf32 = false`, `arch = sm_80`. `allow_tf32 = true` (f32 only) runs the
/// forward's `Q·Kᵀ` and `P·V` on tf32 tensor cores on sm_80+ (CUDA cores before, silently).
#[proc_macro_attribute]
pub fn attention_kernel(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand::<Attention>(attr.into(), item.into()).into()
}

/// A 2-D convolution (NCHW: direct, 1×1, im2col + GEMM; both layouts: tensor-core implicit
/// GEMMs, backward-data, backward-filter).
///
/// ```
/// use ptxforge::prelude::*;
///
/// #[conv2d_kernel(in_channels = 4, out_channels = 8, kernel = 3, padding = 1,
///                 groups = 1, bias = true, dtype = f16, arch = sm_80)]
/// pub struct Conv;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let shape = ConvShape { batch: 1, height: 6, width: 6 };
/// let (out_h, out_w) = Conv::CONFIG.output_size(&shape)?; // (6 + 2 - 2 - 1) / 1 + 1 = 6
/// let dev = SimBackend::new();
/// let x = dev.upload(&vec![f16::ONE; 4 * 6 * 6])?; // [N, C_in, H, W]
/// let w = dev.upload(&vec![f16::ZERO; 8 * 4 * 3 * 3])?; // [C_out, C_in / groups, kh, kw]
/// let bias = dev.upload(&vec![f16::from_f32(2.0); 8])?;
/// let mut y = dev.alloc::<f16>(8 * (out_h * out_w) as usize)?; // [N, C_out, out_h, out_w]
/// Conv.forward(&dev, &shape, &x, &w, &bias, &mut y)?;
/// assert!(dev.download(&y)?.iter().all(|v| *v == f16::from_f32(2.0)));
/// # Ok(())
/// # }
/// ```
///
/// Required: `in_channels`, `out_channels`, `kernel`. `kernel`, `stride`, `padding` and
/// `dilation` take one number or a pair `(height, width)`. Defaults: `stride = 1`,
/// `padding = 0`, `dilation = 1`, `groups = 1`, `bias = false`, `dtype = f32`, `arch = sm_80`,
/// `layout = nchw`, `allow_tf32 = false`. `allow_tf32 = true` (f32 only) runs the forward,
/// backward-data and backward-filter implicit GEMMs on tf32 tensor cores on sm_80+
/// (pre-sm_80 targets silently keep the CUDA-core f32 entries). `layout = nhwc`
/// (channels-last: `x [N, H, W, C_in]`, `w [C_out, KH, KW, C_in / groups]`, `y [N, OH, OW,
/// C_out]`) generates `forward`, `backward_data` and `backward_filter` only.
#[proc_macro_attribute]
pub fn conv2d_kernel(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand::<Conv2d>(attr.into(), item.into()).into()
}
