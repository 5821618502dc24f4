//! Attention wrappers: `forward` (contiguous tensors) and `forward_strided` (explicit layouts),
//! both launching the family's one entry.

use quote::quote;

use ptxforge_runtime::templates::attention::AttentionConfig;

use super::{param, Wrapper, WrapperTypes};

pub(crate) fn wrappers(c: &AttentionConfig, t: &WrapperTypes) -> Vec<Wrapper> {
    let p = &t.private;
    let mask = if c.causal {
        "with the causal mask aligned to the bottom-right"
    } else {
        "without a mask"
    };
    // `dev, shape, [layouts,] q, k, v, o, lse, scale`.
    let params = |layouts: Option<(proc_macro2::Ident, proc_macro2::TokenStream)>| {
        let mut list = vec![
            t.dev(),
            param("shape", quote!(&#p::attention::AttentionShape)),
        ];
        list.extend(layouts);
        list.extend([
            param("q", t.input()),
            param("k", t.input()),
            param("v", t.input()),
            param("o", t.output()),
            param("lse", t.buf(&quote!(::core::primitive::f32), true)),
            param(
                "scale",
                quote!(::core::option::Option<::core::primitive::f64>),
            ),
        ]);
        list
    };
    let forward = Wrapper {
        name: "forward",
        doc: format!(
            "Attention forward, entry `attention_forward`, {mask}: \
             `o = softmax(q · kᵀ · scale) · v` and the log-sum-exp `lse` per query row. \
             Layouts: `q, o [batch, heads_q, seq_q, head_dim]`, `k, v [batch, heads_kv, seq_kv, \
             head_dim]`, `lse [batch, heads_q, seq_q]`; `scale` defaults to `1/√head_dim`. \
             `o` and `lse` are overwritten."
        ),
        lifetimes: quote!(),
        params: params(None),
        ok: quote!(()),
        body: quote! {
            let buffers = #p::attention::AttentionBuffers { q, k, v, o: &*o, lse: &*lse };
            #p::attention::forward(__config, dev, __ptx, shape, &buffers, scale)
        },
    };
    let strided = Wrapper {
        name: "forward_strided",
        doc: format!(
            "[`Self::forward`] ({mask}) on tensors with explicit batch/head/sequence strides              (`layouts`: e.g. `AttentionLayouts::bshd` for `[batch, seq, heads, head_dim]`,              `packed_qkv` with one buffer passed as `q`, `k` and `v`, or `kv_cache` for K/V with              capacity beyond `seq_kv`); `lse [batch, heads_q, seq_q]` stays contiguous. A layout              that is misaligned, reaches past a buffer or makes two outputs overlap is              `LaunchError::Shape` naming the tensor, before any launch."
        ),
        lifetimes: quote!(),
        params: params(Some(param(
            "layouts",
            quote!(&#p::attention::AttentionLayouts),
        ))),
        ok: quote!(()),
        body: quote! {
            let buffers = #p::attention::AttentionBuffers { q, k, v, o: &*o, lse: &*lse };
            #p::attention::forward_strided(
                __config, dev, __ptx, shape, &buffers, layouts, scale,
            )
            .map_err(|e| match e {
                #p::attention::StridedLaunchError::Launch(e) => e,
                #p::attention::StridedLaunchError::Layout(e) => {
                    #p::LaunchError::Shape(::std::string::ToString::to_string(&e))
                }
            })
        },
    };
    vec![forward, strided]
}
