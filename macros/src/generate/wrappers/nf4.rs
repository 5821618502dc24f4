//! NF4 wrappers: `forward` (GEMV for `m ≤ 8`, tiled above), the two forward entries on their
//! own, `backward_input` (likewise) and its two entries on their own, and `upload_weights`
//! (quantise a host weight the way this kernel reads it, then upload).

use quote::quote;

use ptxforge_runtime::templates::nf4::Nf4Config;

use super::{param, Wrapper, WrapperTypes};

pub(crate) fn wrappers(c: &Nf4Config, t: &WrapperTypes) -> Vec<Wrapper> {
    let p = &t.private;
    let weights_ty = quote!(#p::nf4::DeviceWeights<B>);
    let m = param("m", quote!(::core::primitive::u32));
    let forward_params = vec![
        t.dev(),
        m.clone(),
        param("a", t.input()),
        param("weights", quote!(&#weights_ty)),
        param("c", t.output()),
    ];
    let forward = |name: &'static str, doc: &str| Wrapper {
        name,
        doc: doc.to_owned(),
        lifetimes: quote!(),
        params: forward_params.clone(),
        ok: quote!(()),
        body: {
            let f = quote::format_ident!("{name}");
            quote!(#p::nf4::#f(__config, dev, __ptx, m, a, weights, c))
        },
    };
    let backward_params = vec![
        t.dev(),
        m.clone(),
        param("g_c", t.input()),
        param("weights", quote!(&#weights_ty)),
        param("g_a", t.output()),
    ];
    let backward = |name: &'static str, doc: &str, runtime_fn: &str| Wrapper {
        name,
        doc: doc.to_owned(),
        lifetimes: quote!(),
        params: backward_params.clone(),
        ok: quote!(()),
        body: {
            let f = quote::format_ident!("{runtime_fn}");
            quote!(#p::nf4::#f(__config, dev, __ptx, m, g_c, weights, g_a))
        },
    };
    let quantization = if c.double_quant {
        "NF4 codes with double-quantised absmax"
    } else {
        "NF4 codes with one f32 absmax per block"
    };
    vec![
        forward(
            "forward",
            "Forward `c [m, n] = a [m, k] · dequant(W)ᵀ`: entry `nf4_gemv` for `m ≤ 8`, \
             the tiled forward above (`nf4_gemm`; `nf4_gemm_tall`, 128-row tiles, above 64 \
             rows for f16/bf16 on tensor cores; or, when its grid would be too small for the \
             GPU, `nf4_gemm_split` (`nf4_gemm_tall_split` on 128-row tiles) over slices of k \
             into an f32 workspace then \
             `nf4_gemm_reduce`: the same bits every run). `c` is overwritten.",
        ),
        forward(
            "forward_gemv",
            "Forward through entry `nf4_gemv` only (`1 ≤ m ≤ 8`).",
        ),
        forward(
            "forward_tiled",
            "Forward through the tiled forward only (any `m ≥ 1`; `nf4_gemm` or \
             `nf4_gemm_tall`, or split over k as in `forward`).",
        ),
        backward(
            "backward_input",
            "Backward with respect to the input, `g_a [m, k] = g_c [m, n] · dequant(W)`: \
             the backward GEMV for `m ≤ 8` (`nf4_backward_gemv`, or, when its grid would be \
             too small for the GPU, `nf4_backward_gemv_split` over slices of W's rows into an \
             f32 workspace then `nf4_backward_gemv_reduce`: the same bits every run), \
             `nf4_backward_input` above. `g_a` is overwritten.",
            "backward_input",
        ),
        backward(
            "backward_input_gemv",
            "Backward with respect to the input through the backward GEMV only (`1 ≤ m ≤ 8`; \
             `nf4_backward_gemv`, or split over W's rows as in `backward_input`).",
            "backward_gemv",
        ),
        backward(
            "backward_input_tiled",
            "Backward with respect to the input through entry `nf4_backward_input` only (any \
             `m ≥ 1`).",
            "backward_input_tiled",
        ),
        Wrapper {
            name: "upload_weights",
            doc: format!(
                "Quantises a host weight `W [n, k]` (row-major f32) as this kernel reads it \
                 ({quantization}, bitsandbytes-compatible) and uploads it."
            ),
            lifetimes: quote!(),
            params: vec![t.dev(), param("weight", quote!(&[::core::primitive::f32]))],
            ok: weights_ty,
            body: quote!(#p::nf4_upload_weights(&Self::CONFIG, dev, weight)),
        },
    ]
}
