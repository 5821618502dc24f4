use proc_macro2::TokenStream;
use quote::{quote, ToTokens};

use crate::expand::expand;
use crate::family::{Attention, Conv2d, Family, Moe, Nf4};
use crate::tests::{tokens, underlined};

fn expand_str<F: Family>(attr: TokenStream, item: TokenStream) -> String {
    expand::<F>(attr, item).to_string()
}

#[test]
fn valid_moe_gets_config_and_docs() {
    let out = expand_str::<Moe>(
        quote!(
            experts = 8,
            top_k = 2,
            hidden = 4096,
            expert_dim = 14336,
            capacity_factor = 1.25,
            dtype = bf16,
            ffn = swiglu,
            arch = sm_80
        ),
        quote!(
            pub struct Mixtral;
        ),
    );
    assert!(!out.contains("compile_error"), "{out}");
    assert!(
        out.contains("pub const CONFIG : :: ptxforge :: __private :: MoeConfig"),
        "{out}"
    );
    assert!(out.contains("experts : 8"), "{out}");
    assert!(
        out.contains("capacity_factor : :: core :: option :: Option :: Some (1.25f32)"),
        "{out}"
    );
    assert!(
        out.contains(":: ptxforge :: __private :: DType :: BF16"),
        "{out}"
    );
    assert!(out.contains("# Kernel configuration"), "{out}");
    assert!(out.contains("`normalize_topk` | true (default)"), "{out}");
}

#[test]
fn crate_override_changes_every_path() {
    let out = expand_str::<Nf4>(
        quote!(n = 64, k = 64, crate = "::reexport::ptxforge"),
        quote!(
            struct Proj;
        ),
    );
    assert!(!out.contains("compile_error"), "{out}");
    assert!(
        out.contains(":: reexport :: ptxforge :: __private :: Nf4Config"),
        "{out}"
    );
    let elsewhere = out.replace(":: reexport :: ptxforge", "");
    assert!(!elsewhere.contains("ptxforge ::"), "{out}");
}

#[test]
fn errors_keep_the_item_and_stub_the_config() {
    let out = expand_str::<Moe>(
        quote!(experts = 8, top_k = 9, hidden = 64, expert_dim = 64),
        quote!(
            #[derive(Debug)]
            pub struct Mixtral;
        ),
    );
    assert!(
        out.contains("compile_error ! { \"top_k = 9 exceeds experts = 8\" }"),
        "{out}"
    );
    assert!(out.contains("pub struct Mixtral ;"), "{out}");
    assert!(out.contains("# [derive (Debug)]"), "{out}");
    // The stub holds the values as written, so code reading it still compiles.
    assert!(
        out.contains(
            "pub const CONFIG : :: ptxforge :: __private :: MoeConfig = \
             :: ptxforge :: __private :: MoeConfig { experts : 8 , top_k : 9"
        ),
        "{out}"
    );
}

#[test]
fn every_error_at_once() {
    let out = expand::<Conv2d>(
        quote!(
            in_channels = 6,
            out_channel = 4,
            kernel = (3, 3, 3),
            groups = 4,
            dtype = f17
        ),
        quote!(
            struct Conv {
                x: u32,
            }
        ),
    );
    let text = out.to_string();
    let errors = text.matches("compile_error").count();
    // item, unknown key (its missing twin not repeated), kernel arity, dtype; no rule checks
    // without a complete configuration.
    assert_eq!(errors, 4, "{text}");
    assert!(text.contains("did you mean `out_channels`?"), "{text}");
    // The struct with fields still gets the stub impl.
    assert!(text.contains("impl Conv"), "{text}");
}

#[test]
fn rules_run_when_other_keys_are_wrong() {
    let text = expand_str::<Attention>(
        quote!(head_dim = 100, causal = true, causl = true),
        quote!(
            struct A;
        ),
    );
    assert!(text.contains("unknown argument `causl`"), "{text}");
    assert!(text.contains("head_dim = 100 is not one of"), "{text}");
}

#[test]
fn non_struct_items_fail_soft() {
    let text = expand_str::<Nf4>(
        quote!(n = 64, k = 64),
        quote!(
            fn proj() {}
        ),
    );
    assert!(text.contains("not on a function"), "{text}");
    assert!(text.contains("fn proj () { }"), "{text}");
    assert!(!text.contains("impl"), "{text}");
    let text = expand_str::<Nf4>(
        quote!(n = 64, k = 64),
        quote!(
            enum Proj {
                A,
            }
        ),
    );
    assert!(text.contains("impl Proj"), "{text}");
}

/// Every error of `#[F(attr)] struct K;` with the text it underlines.
fn errors_of<F: Family>(attr: &str) -> Vec<(String, String)> {
    let analysis = crate::expand::analyse::<F>(
        tokens(attr),
        quote!(
            struct K;
        ),
    );
    match analysis.errors.finish() {
        Ok(()) => Vec::new(),
        Err(error) => {
            let under = underlined(attr, &error);
            error
                .into_iter()
                .map(|e| e.to_string())
                .zip(under)
                .map(|(message, under)| (under, message))
                .collect()
        }
    }
}

#[test]
fn parse_errors_underline_the_offending_token() {
    let errors = errors_of::<Moe>(
        "expers = 8, experts = 8, top_k = 2.5, hidden = 64, expert_dim = 64, dtype = bf17, \
         hidden = 128, arch = \"sm_61\", ffn(swiglu)",
    );
    let under: Vec<&str> = errors.iter().map(|(u, _)| u.as_str()).collect();
    assert_eq!(
        under,
        [
            "expers",       // unknown key: the key
            "hidden = 128", // duplicate: the second occurrence
            "2.5",          // wrong type: the value
            "bf17",
            "\"sm_61\"",
            "(swiglu)", // list form: the parenthesised part
        ],
        "{errors:?}"
    );
}

#[test]
fn rule_errors_underline_the_whole_argument() {
    let errors = errors_of::<Conv2d>(
        "in_channels = 6, out_channels = 8, kernel = (3, 0), groups = 4, stride = 2",
    );
    assert_eq!(
        errors,
        [
            (
                "kernel = (3, 0)".to_owned(),
                "kernel width = 0: must be at least 1".to_owned()
            ),
            (
                "groups = 4".to_owned(),
                "groups = 4 does not divide in_channels = 6".to_owned()
            ),
        ]
    );
}

#[test]
fn valid_arguments_have_no_errors() {
    assert_eq!(
        errors_of::<Attention>("head_dim = 128, causal, dtype = \"bf16\""),
        []
    );
    assert_eq!(
        errors_of::<Nf4>("n = 64, k = 64, block = 32, double_quant = true,"),
        []
    );
}

/// The `(name, signature)` of every `pub fn` and the name of every `const` in the impl blocks
/// of an expansion.
fn impl_items(out: &TokenStream) -> (Vec<String>, Vec<String>) {
    let file: syn::File = syn::parse2(out.clone()).expect("the expansion is valid Rust");
    let (mut fns, mut consts) = (Vec::new(), Vec::new());
    for item in file.items {
        if let syn::Item::Impl(block) = item {
            for item in block.items {
                match item {
                    syn::ImplItem::Fn(f) => fns.push(f.sig.to_token_stream().to_string()),
                    syn::ImplItem::Const(c) => consts.push(c.ident.to_string()),
                    _ => {}
                }
            }
        }
    }
    (fns, consts)
}

/// `forward` of `fn forward < B : … > (…)`.
fn fn_name(signature: &str) -> &str {
    signature
        .trim_start_matches("fn ")
        .split(' ')
        .next()
        .unwrap_or_default()
}

fn mixtral(top_k: u32) -> TokenStream {
    let top_k = proc_macro2::Literal::u32_unsuffixed(top_k);
    expand::<Moe>(
        quote!(experts = 8, top_k = #top_k, hidden = 64, expert_dim = 96, dtype = bf16, ffn = swiglu),
        quote!(
            pub struct Mixtral;
        ),
    )
}

#[test]
fn valid_moe_gets_ptx_entries_and_typed_wrappers() {
    let out = mixtral(2);
    let text = out.to_string();
    assert!(!text.contains("compile_error"), "{text}");
    // The module text is a raw string literal (no escaping: see `generate::ptx`).
    assert!(text.contains("pub const __PTX_TEXT : & 'static str = r#\"//"));
    assert!(text.contains("pub const PTX : & 'static str = Self :: __PTX_TEXT ;"));
    assert!(
        text.contains("(Mixtral :: CONFIG , Mixtral :: PTX)"),
        "{text}"
    );
    assert!(text.contains("\n.version 7.0\n.target sm_80\n"));
    for entry in [
        "moe_gating",
        "moe_permute",
        "moe_expert_swiglu_up",
        "moe_unpermute",
    ] {
        assert!(text.contains(&format!(".entry {entry}")), "{entry}");
    }
    let (fns, consts) = impl_items(&out);
    assert_eq!(
        consts,
        [
            "CONFIG",
            "__PTX_TEXT",
            "PTX",
            "GATING",
            "PERMUTE",
            "SCHEDULE",
            "EXPERT_SWIGLU_UP",
            "EXPERT_SWIGLU_DOWN",
            "UNPERMUTE"
        ]
    );
    let forward = fns.iter().find(|f| f.contains("fn forward <")).unwrap();
    let bf16_buffer =
        "& :: ptxforge :: __private :: DeviceBuffer < B , :: ptxforge :: __private :: \
                       half :: bf16 >";
    assert!(forward.contains(&format!("x : {bf16_buffer}")), "{forward}");
    assert!(
        forward.contains("w1 :") && forward.contains("w2 :"),
        "{forward}"
    );
    assert!(
        forward.contains(
            "out : & mut :: ptxforge :: __private :: DeviceBuffer < B , :: ptxforge :: \
             __private :: half :: bf16 >"
        ),
        "{forward}"
    );
    // Thin: the runtime's launch function, with the target's configuration and const PTX.
    assert!(text.contains("let (__config , __ptx) = Self :: __target (dev) ? ;"));
    assert!(text.contains(":: ptxforge :: __private :: moe :: forward (__config , dev , __ptx"));
    assert!(!text.contains("unsafe"));
}

#[test]
fn stubs_have_the_real_signatures_and_names() {
    let (valid_fns, valid_consts) = impl_items(&mixtral(2));
    let broken = mixtral(9);
    let text = broken.to_string();
    assert!(text.contains("top_k = 9 exceeds experts = 8"), "{text}");
    let (stub_fns, stub_consts) = impl_items(&broken);
    assert_eq!(stub_fns, valid_fns);
    assert_eq!(stub_consts, valid_consts);
    assert!(
        text.contains("pub const __PTX_TEXT : & 'static str = \"\""),
        "{text}"
    );
    assert!(text.contains("LaunchError :: Build"), "{text}");
}

#[test]
fn stubs_without_a_configuration_take_any_element_type() {
    let out = expand::<Conv2d>(
        quote!(in_channels = 4, out_channels = 4, kernl = 3),
        quote!(
            pub struct Conv;
        ),
    );
    let (fns, consts) = impl_items(&out);
    let forward = fns.iter().find(|f| f.contains("fn forward <")).unwrap();
    assert!(
        forward.contains("T : :: ptxforge :: __private :: Element"),
        "{forward}"
    );
    assert!(forward.contains("DeviceBuffer < B , T >"), "{forward}");
    assert!(consts.contains(&"DIRECT".to_owned()), "{consts:?}");
}

#[test]
fn conv_signatures_follow_bias_and_kernel_size() {
    let with_bias = |bias: bool, kernel: u32| {
        let kernel = proc_macro2::Literal::u32_unsuffixed(kernel);
        impl_items(&expand::<Conv2d>(
            quote!(in_channels = 4, out_channels = 8, kernel = #kernel, bias = #bias),
            quote!(
                pub struct Conv;
            ),
        ))
    };
    let (fns, consts) = with_bias(true, 1);
    let names: Vec<&str> = fns.iter().map(|f| fn_name(f)).collect();
    assert_eq!(
        names,
        [
            "__targets",
            "__target",
            "__ptx_static",
            "forward",
            "forward_direct",
            "forward_im2col",
            "forward_1x1",
            "backward_data",
            "backward_filter"
        ]
    );
    assert!(fns[3].contains("bias :"), "{}", fns[3]);
    assert!(fns[8].contains("db :"), "{}", fns[8]);
    assert!(consts.contains(&"CONV2D_1X1".to_owned()) && consts.contains(&"BWD_BIAS".to_owned()));
    let (fns, consts) = with_bias(false, 3);
    assert!(!fns.iter().any(|f| f.contains("forward_1x1")));
    assert!(!fns[3].contains("bias :") && !fns.last().unwrap().contains("db :"));
    assert!(!consts.contains(&"BWD_BIAS".to_owned()));
}

/// `layout = nhwc`: `forward` and both backward launchers (with `db` exactly when the bias
/// is on), and the entry consts of the backward entries (tensor-core ones for f16 on sm_80).
#[test]
fn nhwc_exposes_the_backward_launchers() {
    let (fns, consts) = impl_items(&expand::<Conv2d>(
        quote!(
            in_channels = 16,
            out_channels = 16,
            kernel = 3,
            padding = 1,
            bias = true,
            dtype = f16,
            arch = sm_80,
            layout = nhwc
        ),
        quote!(
            pub struct Conv;
        ),
    ));
    let names: Vec<&str> = fns.iter().map(|f| fn_name(f)).collect();
    assert_eq!(
        names,
        [
            "__targets",
            "__target",
            "__ptx_static",
            "forward",
            "backward_data",
            "backward_filter"
        ]
    );
    assert!(fns[5].contains("db :"), "{}", fns[5]);
    for c in [
        "IMPLICIT_GEMM",
        "NHWC",
        "BWD_DATA",
        "BWD_DATA_IMPLICIT_GEMM",
        "BWD_FILTER",
        "BWD_FILTER_IMPLICIT_GEMM",
        "BWD_BIAS",
    ] {
        assert!(consts.contains(&c.to_owned()), "{c}: {consts:?}");
    }
}

#[test]
fn every_family_expands_to_valid_rust_with_wrappers() {
    let item = quote!(
        pub struct K;
    );
    let outs = [
        expand::<Nf4>(quote!(n = 64, k = 64, dtype = f16), item.clone()),
        expand::<Attention>(quote!(head_dim = 64, causal), item.clone()),
        expand::<Conv2d>(
            quote!(in_channels = 3, out_channels = 8, kernel = 3),
            item.clone(),
        ),
    ];
    let expected: [&[&str]; 3] = [
        &[
            "__targets",
            "__target",
            "__ptx_static",
            "forward",
            "forward_gemv",
            "forward_tiled",
            "backward_input",
            "backward_input_gemv",
            "backward_input_tiled",
            "upload_weights",
        ],
        &[
            "__targets",
            "__target",
            "__ptx_static",
            "forward",
            "forward_strided",
        ],
        &[
            "__targets",
            "__target",
            "__ptx_static",
            "forward",
            "forward_direct",
            "forward_im2col",
            "backward_data",
            "backward_filter",
        ],
    ];
    for (out, expected) in outs.iter().zip(expected) {
        let text = out.to_string();
        assert!(!text.contains("compile_error"), "{text}");
        let (fns, _) = impl_items(out);
        let names: Vec<String> = fns.iter().map(|f| fn_name(f).to_owned()).collect();
        assert_eq!(names, *expected);
    }
}

#[test]
fn a_module_that_fails_to_build_is_reported_at_the_attribute_with_stubs() {
    use ptxforge_runtime::templates::{ConfigError, ConfigErrors, TemplateError};
    let out = crate::expand::expand_with::<Nf4>(
        quote!(n = 64, k = 64),
        quote!(
            pub struct Proj;
        ),
        |_| {
            Err(TemplateError::Config(ConfigErrors(vec![ConfigError::new(
                &["arch"],
                "needs 99 registers",
            )])))
        },
    );
    let text = out.to_string();
    assert!(
        text.contains(
            "the `#[nf4_gemm]` kernels cannot be built for this configuration: invalid \
             configuration: needs 99 registers"
        ),
        "{text}"
    );
    let (fns, consts) = impl_items(&out);
    assert!(
        fns.iter().any(|f| f.contains("fn backward_input")),
        "{fns:?}"
    );
    assert_eq!(
        consts,
        [
            "CONFIG",
            "__PTX_TEXT",
            "PTX",
            "GEMV",
            "GEMM",
            "BACKWARD_INPUT",
            "BACKWARD_GEMV",
            "BACKWARD_GEMV_SPLIT",
            "BACKWARD_GEMV_REDUCE"
        ]
    );
}

#[test]
fn several_targets_embed_one_module_each() {
    let out = expand::<Nf4>(
        quote!(n = 64, k = 64, dtype = f16, arch = [sm_90, sm_75]),
        quote!(
            pub struct K;
        ),
    );
    let text = out.to_string();
    assert!(!text.contains("compile_error"), "{text}");
    let (_, consts) = impl_items(&out);
    assert!(consts.contains(&"PTX".to_owned()) && consts.contains(&"PTX_SM_90".to_owned()));
    // The lowest target is the primary module; each other target has its own.
    assert!(text.contains("\n.target sm_75\n"), "{text}");
    assert!(text.contains("\n.target sm_90\n"), "{text}");
    assert!(text.contains("(:: ptxforge :: __private :: Arch :: Sm75 , (K :: CONFIG , K :: PTX))"));
    assert!(text.contains(":: ptxforge :: __private :: Arch :: Sm90 , (:: ptxforge"));
    assert!(text.contains("K :: PTX_SM_90))"));
}
