use proc_macro2::TokenStream;
use quote::quote;

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
    assert!(out.contains("capacity_factor : 1.25f32"), "{out}");
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
