//! MoE wrappers: the whole layer (`forward`, `forward_with`), the launch context and workspace,
//! and one method per phase (`gating`, `permute`, `experts`, `unpermute`) working through a
//! `MoeWorkspace`. Expert weights are separate parameters per `ffn` (`w`, or `w1, w3, w2`).

use proc_macro2::{Ident, TokenStream};
use quote::quote;

use ptxforge_runtime::templates::moe::{Ffn, MoeConfig};

use super::{param, Wrapper, WrapperTypes};

pub(crate) fn wrappers(c: &MoeConfig, t: &WrapperTypes) -> Vec<Wrapper> {
    let p = &t.private;
    let elem = &t.elem;
    let u32_ = quote!(::core::primitive::u32);
    let tokens = param("tokens", u32_.clone());
    let workspace = quote!(#p::moe::MoeWorkspace<B, #elem>);
    let ws_mut = param("ws", quote!(&mut #workspace));
    let (weight_params, weights) = expert_weights(c.ffn, t);
    let mut forward_params = vec![
        t.dev(),
        tokens.clone(),
        param("x", t.input()),
        param("logits", t.input()),
    ];
    forward_params.extend(weight_params.iter().cloned());
    forward_params.push(param("out", t.output()));
    let mut forward_with_params = forward_params.clone();
    forward_with_params.insert(2, ws_mut.clone());
    let mut expert_params = vec![t.dev(), tokens.clone(), param("x", t.input())];
    expert_params.extend(weight_params);
    expert_params.push(ws_mut.clone());
    let launcher = quote!(self.launcher(dev, tokens)?);
    vec![
        Wrapper {
            name: "forward",
            doc: "The whole MoE layer: gating → permute → experts → unpermute, `out [T, N]` \
                  from `x [T, hidden]` and `logits [T, experts]` (`N = hidden` for swiglu, \
                  `expert_dim` for linear), allocating the intermediates. Returns per-expert \
                  counts and the dropped total. Every buffer is checked before anything \
                  launches."
                .into(),
            lifetimes: quote!(),
            params: forward_params,
            ok: quote!(#p::moe::MoeStats),
            body: quote! {
                #weights
                #p::moe::forward(__config, dev, __ptx, tokens, x, logits, weights, &*out)
            },
        },
        Wrapper {
            name: "forward_with",
            doc: "The whole layer like `forward`, with caller-provided intermediates (see \
                  `workspace`). Only queues the phases (nothing waits, allocates or downloads, \
                  so it can be captured in a CUDA graph); `ws.stats(dev)` reads the statistics."
                .into(),
            lifetimes: quote!(),
            params: forward_with_params,
            ok: quote!(()),
            body: quote! {
                #weights
                #launcher.forward_with(&*ws, x, logits, weights, &*out)
            },
        },
        Wrapper {
            name: "launcher",
            doc: "The checked launch context for `tokens` tokens (every phase and size check of \
                  the runtime's `MoeLaunch`), bound to this kernel's configuration and PTX."
                .into(),
            lifetimes: quote!('a),
            params: vec![param("dev", quote!(&'a B)), tokens.clone()],
            ok: quote!(#p::moe::MoeLaunch<'a, B>),
            body: quote! {
                #p::moe::MoeLaunch::new(__config, dev, __ptx, tokens)
            },
        },
        Wrapper {
            name: "workspace",
            doc: "Allocates every intermediate buffer of a forward pass over `tokens` tokens."
                .into(),
            lifetimes: quote!(),
            params: vec![t.dev(), tokens.clone()],
            ok: workspace.clone(),
            body: quote!(#launcher.workspace::<#elem>()),
        },
        Wrapper {
            name: "gating",
            doc: "Phase 1, entry `moe_gating`: `logits [T, experts]` → `ws.indices`, \
                  `ws.weights [T, top_k]` (softmax, top-k, ties to the lower index)."
                .into(),
            lifetimes: quote!(),
            params: vec![
                t.dev(),
                tokens.clone(),
                param("logits", t.input()),
                ws_mut.clone(),
            ],
            ok: quote!(()),
            body: quote!(#launcher.gating(logits, ws.routing())),
        },
        Wrapper {
            name: "permute",
            doc: "Phase 2, entries `moe_permute` and `moe_schedule`: `ws.indices` → the expert \
                  bins (`ws.token_ids`, `ws.counts`, `ws.routed`, `ws.slot_of`), dropping pairs \
                  past the capacity when capacity-limited, then the bin offsets and the grouped \
                  expert GEMMs' work list (`ws.offsets`, `ws.work_items`)."
                .into(),
            lifetimes: quote!(),
            params: vec![t.dev(), tokens.clone(), ws_mut.clone()],
            ok: quote!(()),
            body: quote!(#launcher.permute(&ws.indices, ws.bins())),
        },
        Wrapper {
            name: "experts",
            doc: format!(
                "Phase 3, {}: `ws.expert_out [rows, N]` (`rows` = `T · top_k` when dropless, \
                 `experts · capacity` otherwise) from `x [T, hidden]` gathered through the bins.",
                match c.ffn {
                    Ffn::Linear => "entry `moe_expert_linear`",
                    Ffn::Swiglu => "entries `moe_expert_swiglu_up` and `moe_expert_swiglu_down`",
                }
            ),
            lifetimes: quote!(),
            params: expert_params,
            ok: quote!(()),
            body: quote! {
                #weights
                #launcher.experts(x, ws.bins(), weights, ws.gated.as_ref(), &ws.expert_out)
            },
        },
        Wrapper {
            name: "unpermute",
            doc: "Phase 4, entry `moe_unpermute`: `out [T, N]` = the routing-weighted sum of \
                  each token's kept expert rows of `ws.expert_out`."
                .into(),
            lifetimes: quote!(),
            params: vec![
                t.dev(),
                tokens,
                param("ws", quote!(&#workspace)),
                param("out", t.output()),
            ],
            ok: quote!(()),
            body: quote! {
                #launcher.unpermute(&ws.expert_out, ws.routing(), ws.bins(), &*out)
            },
        },
    ]
}

/// The weight parameters of `ffn` and the statement binding them as `weights`.
fn expert_weights(ffn: Ffn, t: &WrapperTypes) -> (Vec<(Ident, TokenStream)>, TokenStream) {
    let p = &t.private;
    match ffn {
        Ffn::Linear => (
            vec![param("w", t.input())],
            quote!(let weights = #p::moe::ExpertWeights::Linear { w };),
        ),
        Ffn::Swiglu => (
            vec![
                param("w1", t.input()),
                param("w3", t.input()),
                param("w2", t.input()),
            ],
            quote!(let weights = #p::moe::ExpertWeights::Swiglu { w1, w3, w2 };),
        ),
    }
}
