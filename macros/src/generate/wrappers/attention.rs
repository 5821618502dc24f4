//! Attention wrapper: `forward` (the family's one entry).

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
    vec![Wrapper {
        name: "forward",
        doc: format!(
            "Attention forward, entry `attention_forward`, {mask}: \
             `o = softmax(q · kᵀ · scale) · v` and the log-sum-exp `lse` per query row. \
             Layouts: `q, o [batch, heads_q, seq_q, head_dim]`, `k, v [batch, heads_kv, seq_kv, \
             head_dim]`, `lse [batch, heads_q, seq_q]`; `scale` defaults to `1/√head_dim`. \
             `o` and `lse` are overwritten."
        ),
        lifetimes: quote!(),
        params: vec![
            t.dev(),
            param("shape", quote!(&#p::attention::AttentionShape)),
            param("q", t.input()),
            param("k", t.input()),
            param("v", t.input()),
            param("o", t.output()),
            param("lse", t.buf(&quote!(::core::primitive::f32), true)),
            param(
                "scale",
                quote!(::core::option::Option<::core::primitive::f64>),
            ),
        ],
        ok: quote!(()),
        body: quote! {
            let buffers = #p::attention::AttentionBuffers { q, k, v, o: &*o, lse: &*lse };
            #p::attention::forward(__config, dev, __ptx, shape, &buffers, scale)
        },
    }]
}
