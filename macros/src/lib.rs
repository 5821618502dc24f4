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
/// ```ignore
/// #[moe_kernel(experts = 8, top_k = 2, hidden = 4096, expert_dim = 14336,
///              capacity_factor = 1.25, dtype = bf16, ffn = swiglu, arch = sm_80)]
/// pub struct Mixtral;
/// ```
///
/// Required: `experts`, `top_k`, `hidden`, `expert_dim`. Defaults: `capacity_factor = 1.25`,
/// `dtype = f32`, `ffn = linear`, `normalize_topk = true`, `arch = sm_80`.
#[proc_macro_attribute]
pub fn moe_kernel(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand::<Moe>(attr.into(), item.into()).into()
}

/// A GEMM with bitsandbytes-compatible NF4 weights `W [n, k]`.
///
/// ```ignore
/// #[nf4_gemm(n = 4096, k = 4096, block = 64, double_quant = true, dtype = bf16, arch = sm_80)]
/// pub struct Proj;
/// ```
///
/// Required: `n`, `k`. Defaults: `block = 64`, `double_quant = false`, `dtype = f32`,
/// `arch = sm_80`.
#[proc_macro_attribute]
pub fn nf4_gemm(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand::<Nf4>(attr.into(), item.into()).into()
}

/// FlashAttention-2-style forward attention with GQA and an optional causal mask.
///
/// ```ignore
/// #[attention_kernel(head_dim = 128, causal = true, dtype = bf16, arch = sm_80)]
/// pub struct Attn;
/// ```
///
/// Required: `head_dim`. Defaults: `block_m = 0`, `block_n = 0` (automatic), `causal = false`,
/// `dtype = f32`, `arch = sm_80`.
#[proc_macro_attribute]
pub fn attention_kernel(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand::<Attention>(attr.into(), item.into()).into()
}

/// An NCHW 2-D convolution (direct, 1×1, im2col + GEMM, backward-data, backward-filter).
///
/// ```ignore
/// #[conv2d_kernel(in_channels = 64, out_channels = 128, kernel = 3, padding = 1,
///                 groups = 1, bias = true, dtype = f16, arch = sm_80)]
/// pub struct Conv;
/// ```
///
/// Required: `in_channels`, `out_channels`, `kernel`. `kernel`, `stride`, `padding` and
/// `dilation` take one number or a pair `(height, width)`. Defaults: `stride = 1`,
/// `padding = 0`, `dilation = 1`, `groups = 1`, `bias = false`, `dtype = f32`, `arch = sm_80`.
#[proc_macro_attribute]
pub fn conv2d_kernel(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::expand::<Conv2d>(attr.into(), item.into()).into()
}
