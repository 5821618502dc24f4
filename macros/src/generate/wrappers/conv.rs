//! Conv2d wrappers: `forward` (the 1×1 entry for 1×1 kernels, the direct entry otherwise),
//! each NCHW forward path on its own (`forward_direct`, `forward_im2col`, and `forward_1x1`
//! for 1×1 kernels), `backward_data` and `backward_filter` (both layouts). The bias parameters
//! exist exactly when the configuration has `bias = true`.

use proc_macro2::{Ident, TokenStream};
use quote::{format_ident, quote};

use ptxforge_runtime::templates::conv::{Conv2dConfig, Layout};
use ptxforge_runtime::Arch;

use super::{param, Wrapper, WrapperTypes};

pub(crate) fn wrappers(c: &Conv2dConfig, t: &WrapperTypes) -> Vec<Wrapper> {
    let p = &t.private;
    let shape = param("shape", quote!(&#p::conv::ConvShape));
    let dims = quote!(#p::conv::ConvDims);
    let (bias_param, bias_arg) = optional(c.bias, "bias", t.input(), quote!(bias));
    let (db_param, db_arg) = optional(c.bias, "db", t.output(), quote!(db));
    let forward_params = |extra: &[(Ident, TokenStream)]| {
        let mut params = vec![
            t.dev(),
            shape.clone(),
            param("x", t.input()),
            param("w", t.input()),
        ];
        params.extend(bias_param.clone());
        params.extend(extra.iter().cloned());
        params.push(param("y", t.output()));
        params
    };
    let call = |function: &str, args: TokenStream| {
        let function = format_ident!("{function}");
        quote!(#p::conv::#function(__config, dev, __ptx, shape, #args))
    };
    let (x_layout, w_layout, y_layout) = match c.layout {
        Layout::Nchw => (
            "[batch, in_channels, height, width]",
            "[out_channels, in_channels / groups, kernel_h, kernel_w]",
            "[batch, out_channels, out_height, out_width]",
        ),
        Layout::Nhwc => (
            "[batch, height, width, in_channels]",
            "[out_channels, kernel_h, kernel_w, in_channels / groups]",
            "[batch, out_height, out_width, out_channels]",
        ),
    };
    let (inputs, output) = (
        format!("`x {x_layout}`, `w {w_layout}`"),
        format!("`y {y_layout}`"),
    );
    let layouts = format!(
        "Layouts: {inputs}{}, {output} (`out = (in + 2·padding − dilation·(kernel − 1) − 1) / \
         stride + 1` per axis)",
        if c.bias {
            ", `bias [out_channels]`"
        } else {
            ""
        }
    );
    // Inside the formula's code span: never a nested backtick.
    let bias_term = if c.bias { " + bias" } else { "" };
    // The config on a target with `mma.m16n8k16`: the config's own arch decides only whether
    // the target has it, which the docs state.
    let sm80 = Conv2dConfig {
        arch: Arch::Sm80,
        ..*c
    };
    let forward = Wrapper {
        name: "forward",
        doc: format!(
            "Forward `y = conv2d(x, w){bias_term}` through the fastest entry of the target the \
             module runs on: {}{}{}. {layouts}. Returns the checked dimensions.",
            // Whichever of the attribute's targets the module is for: the config's arch decides
            // only whether the target has `mma.m16n8k16`, which the sentence states.
            if sm80.has_pointwise_implicit_gemm() {
                "`conv2d_implicit_gemm_pointwise` (tensor cores, `x` read in 16-byte chunks of 8 \
                 pixels) where the target has `mma.m16n8k16` and `out_height · out_width` is a \
                 multiple of 8, else "
            } else if sm80.has_channels_last_forward() {
                "the channels-last copies of `x` and `w` (`conv2d_to_channels_last`, \
                 `conv2d_filter_to_channels_last`, into backend-allocated workspaces) and \
                 `conv2d_implicit_gemm_channels_last` (tensor cores) where the target has \
                 `mma.m16n8k16`, else "
            } else {
                ""
            },
            if sm80.prefers_tensor_core_forward() {
                "`conv2d_implicit_gemm` (tensor cores) for f16/bf16 on sm_80+, else "
            } else {
                ""
            },
            match (c.layout, c.has_pointwise()) {
                (Layout::Nhwc, _) => "`conv2d_nhwc`",
                (Layout::Nchw, true) => "`conv2d_1x1`",
                (Layout::Nchw, false) => "`conv2d_direct`",
            }
        ),
        lifetimes: quote!(),
        params: forward_params(&[]),
        ok: dims.clone(),
        body: call("forward", quote!(x, w, #bias_arg, y)),
    };
    let mut wrappers = vec![forward];
    if c.layout == Layout::Nchw {
        // The NCHW forward entries on their own.
        wrappers.extend([
            Wrapper {
                name: "forward_direct",
                doc: format!(
                    "Forward through entry `conv2d_direct` (shared-memory input tiles). {layouts}."
                ),
                lifetimes: quote!(),
                params: forward_params(&[]),
                ok: dims.clone(),
                body: call("forward_direct", quote!(x, w, #bias_arg, y)),
            },
            Wrapper {
                name: "forward_im2col",
                doc: format!(
                    "Forward through entries `conv2d_im2col` and `conv2d_gemm`, with the column \
                     buffer `cols [in_channels · kernel_h · kernel_w, batch · out_height · \
                     out_width]`. {layouts}."
                ),
                lifetimes: quote!(),
                params: forward_params(&[param("cols", t.output())]),
                ok: dims.clone(),
                body: call("forward_im2col", quote!(x, w, #bias_arg, cols, y)),
            },
        ]);
        if c.has_pointwise() {
            wrappers.push(Wrapper {
                name: "forward_1x1",
                doc: format!("Forward through entry `conv2d_1x1` (implicit GEMM). {layouts}."),
                lifetimes: quote!(),
                params: forward_params(&[]),
                ok: dims.clone(),
                body: call("forward_1x1", quote!(x, w, #bias_arg, y)),
            });
        }
    }
    let mut filter_params = vec![
        t.dev(),
        shape.clone(),
        param("x", t.input()),
        param("gy", t.input()),
        param("dw", t.output()),
    ];
    filter_params.extend(db_param);
    // Whether the NCHW backward passes go through channels-last copies on targets with
    // `mma.m16n8k16`.
    let backward_copies = sm80.has_channels_last_backward();
    let through_copies = |copies: &str, entry: &str| {
        if backward_copies {
            format!(
                "the channels-last copies of {copies} (into backend-allocated workspaces) and \
                 `{entry}` (tensor cores) where the target has `mma.m16n8k16`, else "
            )
        } else {
            String::new()
        }
    };
    let data_copies = through_copies(
        if c.has_pointwise() {
            "`gy` (`conv2d_gradient_to_channels_last`; a 1 × 1 `w` is channels-last already)"
        } else {
            "`w` and `gy` (`conv2d_filter_to_channels_last`, `conv2d_gradient_to_channels_last`)"
        },
        "conv2d_bwd_data_implicit_gemm_channels_last",
    );
    let data_gemm = if sm80.prefers_tensor_core_backward_data() {
        "`conv2d_bwd_data_implicit_gemm` (tensor cores) for f16/bf16 on sm_80+, else "
    } else {
        ""
    };
    let filter_copies = through_copies(
        "`x` and `gy` (`conv2d_to_channels_last`, `conv2d_gradient_to_channels_last`)",
        "conv2d_bwd_filter_implicit_gemm_channels_last",
    );
    wrappers.extend([
        Wrapper {
            name: "backward_data",
            doc: format!(
                "Gradient with respect to the input through the fastest entry of the target \
                 the module runs on: {data_copies}{data_gemm}`conv2d_bwd_data`: `dx {x_layout}` \
                 from `gy {y_layout}` and `w {w_layout}`. `dx` is overwritten."
            ),
            lifetimes: quote!(),
            params: vec![
                t.dev(),
                shape,
                param("gy", t.input()),
                param("w", t.input()),
                param("dx", t.output()),
            ],
            ok: dims.clone(),
            body: call("backward_data", quote!(gy, w, dx)),
        },
        Wrapper {
            name: "backward_filter",
            doc: format!(
                "Gradient with respect to the weights through the fastest entry of the target \
                 the module runs on, {filter_copies}`conv2d_bwd_filter_implicit_gemm` (tensor \
                 cores) for f16/bf16 on sm_80+, else `conv2d_bwd_filter`{}: `dw {w_layout}` \
                 from `x {x_layout}` and `gy {y_layout}`. Outputs are overwritten.",
                if c.bias {
                    ", and to the bias, entry `conv2d_bwd_bias`: `db [out_channels]`"
                } else {
                    ""
                }
            ),
            lifetimes: quote!(),
            params: filter_params,
            ok: dims,
            body: call("backward_filter", quote!(x, gy, dw, #db_arg)),
        },
    ]);
    wrappers
}

/// The parameter (when `present`) and the `Option` argument passed on.
fn optional(
    present: bool,
    name: &str,
    ty: TokenStream,
    arg: TokenStream,
) -> (Option<(Ident, TokenStream)>, TokenStream) {
    if present {
        (
            Some(param(name, ty)),
            quote!(::core::option::Option::Some(#arg)),
        )
    } else {
        (None, quote!(::core::option::Option::None))
    }
}
