//! The four kernel families, each tying its argument struct (parse), its runtime configuration
//! and rules (check) and its configuration literal (generate) together behind one trait, so the
//! pipeline in [`crate::expand`] is written once.

use darling::FromMeta;
use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::Path;

use ptxforge_runtime::templates::attention::AttentionConfig;
use ptxforge_runtime::templates::conv::{Conv2dConfig, Layout};
use ptxforge_runtime::templates::moe::{kernels as moe_kernels, Ffn, MoeConfig};
use ptxforge_runtime::templates::nf4::{kernels as nf4_kernels, Nf4Config};
use ptxforge_runtime::templates::{
    CompiledFamily, ConfigError, ConfigErrors, KernelFamily, TemplateError,
};
use ptxforge_runtime::{Arch, DType};

use crate::generate::wrappers::{self, Wrapper, WrapperTypes};
use crate::parse::args::Keys;
use crate::parse::attention::AttentionArgs;
use crate::parse::conv::ConvArgs;
use crate::parse::moe::MoeArgs;
use crate::parse::nf4::Nf4Args;
use crate::parse::value::SpanRange;

/// One kernel family: `#[moe_kernel]`, `#[nf4_gemm]`, `#[attention_kernel]`, `#[conv2d_kernel]`.
pub(crate) trait Family {
    /// The attribute's keys (and name, for messages).
    const KEYS: Keys;
    /// The config type's name under `::ptxforge::__private`.
    const CONFIG_TYPE: &'static str;

    /// The prefix every entry name of the family starts with (dropped from the entry consts).
    const ENTRY_PREFIX: &'static str;

    type Args: FromMeta;
    type Config: KernelFamily;

    /// The configuration, defaults filled in; `None` when a required argument is missing.
    fn config(args: &Self::Args) -> Option<Self::Config>;

    /// A configuration for stubs when the arguments do not give one: required values 0.
    fn placeholder() -> Self::Config;

    /// Where the user wrote argument `key` and its value as written, if they did.
    fn written(args: &Self::Args, key: &str) -> Option<(SpanRange, String)>;

    /// The argument a name in a [`ConfigError`] refers to (a config field or an argument).
    fn argument_of(name: &str) -> Option<&'static str> {
        Self::KEYS.all.iter().copied().find(|k| *k == name)
    }

    /// Every rule of the runtime's `validate()` the configuration violates.
    fn runtime_rules(config: &Self::Config) -> Vec<ConfigError>;

    /// Rules the macro adds on top of the runtime's (see [`crate::check`]): none so far.
    fn extra_rules(_config: &Self::Config) -> Vec<ConfigError> {
        Vec::new()
    }

    /// The configuration's struct fields as `(field, value tokens)`, in declaration order.
    fn literal_fields(config: &Self::Config, krate: &Path) -> Vec<(&'static str, TokenStream)>;

    /// The configuration by argument, `(key, value as the user would write it)`, in key order.
    fn describe(config: &Self::Config) -> Vec<(&'static str, String)>;

    /// `config` for another target (`arch = [..]` builds one module per target).
    fn with_arch(config: &Self::Config, arch: Arch) -> Self::Config;

    /// Builds, validates and emits the family's module (the runtime template).
    fn compile(config: &Self::Config) -> Result<CompiledFamily, TemplateError> {
        config.compile()
    }

    /// The entries `compile` produces for `config`, in module order, without building them
    /// (the stubs' entry constants).
    fn entry_names(config: &Self::Config) -> Vec<&'static str>;

    /// The storage element type of the kernels' tensors.
    fn dtype(config: &Self::Config) -> DType;

    /// The arguments that decide the kernels' shared memory, most responsible first (for the
    /// resource rules checked on the built module).
    const SHARED_MEMORY_ARGS: &'static [&'static str];
    /// The arguments that decide the kernels' threads per block, most responsible first.
    const THREAD_ARGS: &'static [&'static str];

    /// The launch wrappers for `config`, with buffer types from `types`.
    fn wrappers(config: &Self::Config, types: &WrapperTypes) -> Vec<Wrapper>;
}

pub(crate) struct Moe;
pub(crate) struct Nf4;
pub(crate) struct Attention;
pub(crate) struct Conv2d;

fn errors_of(result: Result<(), ConfigErrors>) -> Vec<ConfigError> {
    result.err().map(|errors| errors.0).unwrap_or_default()
}

impl Family for Moe {
    const KEYS: Keys = Keys {
        attr: "moe_kernel",
        all: MoeConfig::FIELDS,
        required: MoeConfig::REQUIRED,
    };
    const CONFIG_TYPE: &'static str = "MoeConfig";
    const ENTRY_PREFIX: &'static str = "moe_";
    const SHARED_MEMORY_ARGS: &'static [&'static str] = &["experts", "dtype", "arch"];
    const THREAD_ARGS: &'static [&'static str] = &["experts", "arch"];
    type Args = MoeArgs;
    type Config = MoeConfig;

    fn config(args: &MoeArgs) -> Option<MoeConfig> {
        args.config()
    }

    fn with_arch(config: &MoeConfig, arch: Arch) -> MoeConfig {
        let mut config = *config;
        config.arch = arch;
        config
    }

    fn placeholder() -> MoeConfig {
        MoeConfig::new(0, 0, 0, 0)
    }

    fn written(args: &MoeArgs, key: &str) -> Option<(SpanRange, String)> {
        args.written(key)
    }

    fn runtime_rules(config: &MoeConfig) -> Vec<ConfigError> {
        errors_of(config.validate())
    }

    fn literal_fields(c: &MoeConfig, krate: &Path) -> Vec<(&'static str, TokenStream)> {
        vec![
            ("experts", lit_u32(c.experts)),
            ("top_k", lit_u32(c.top_k)),
            ("hidden", lit_u32(c.hidden)),
            ("expert_dim", lit_u32(c.expert_dim)),
            ("capacity_factor", lit_capacity_factor(c.capacity_factor)),
            ("dtype", lit_dtype(c.dtype, krate)),
            ("ffn", lit_ffn(c.ffn, krate)),
            ("normalize_topk", lit_bool(c.normalize_topk)),
            ("allow_tf32", lit_bool(c.allow_tf32)),
            ("arch", lit_arch(c.arch, krate)),
        ]
    }

    fn describe(c: &MoeConfig) -> Vec<(&'static str, String)> {
        vec![
            ("experts", c.experts.to_string()),
            ("top_k", c.top_k.to_string()),
            ("hidden", c.hidden.to_string()),
            ("expert_dim", c.expert_dim.to_string()),
            (
                "capacity_factor",
                // Dropless routing is written by leaving `capacity_factor` out.
                c.capacity_factor
                    .map_or_else(|| "unset (dropless)".to_string(), |x| format!("{x:?}")),
            ),
            ("dtype", c.dtype.to_string()),
            ("ffn", c.ffn.to_string()),
            ("normalize_topk", c.normalize_topk.to_string()),
            ("allow_tf32", c.allow_tf32.to_string()),
            ("arch", c.arch.to_string()),
        ]
    }
    fn entry_names(c: &MoeConfig) -> Vec<&'static str> {
        moe_kernels::entry_names(c.ffn).to_vec()
    }

    fn dtype(c: &MoeConfig) -> DType {
        c.dtype
    }

    fn wrappers(c: &MoeConfig, types: &WrapperTypes) -> Vec<Wrapper> {
        wrappers::moe::wrappers(c, types)
    }
}

impl Family for Nf4 {
    const KEYS: Keys = Keys {
        attr: "nf4_gemm",
        all: Nf4Config::FIELDS,
        required: Nf4Config::REQUIRED,
    };
    const CONFIG_TYPE: &'static str = "Nf4Config";
    const ENTRY_PREFIX: &'static str = "nf4_";
    const SHARED_MEMORY_ARGS: &'static [&'static str] = &["block", "k", "dtype", "arch"];
    const THREAD_ARGS: &'static [&'static str] = &["arch"];
    type Args = Nf4Args;
    type Config = Nf4Config;

    fn config(args: &Nf4Args) -> Option<Nf4Config> {
        args.config()
    }

    fn with_arch(config: &Nf4Config, arch: Arch) -> Nf4Config {
        let mut config = *config;
        config.arch = arch;
        config
    }

    fn placeholder() -> Nf4Config {
        Nf4Config::new(0, 0)
    }

    fn written(args: &Nf4Args, key: &str) -> Option<(SpanRange, String)> {
        args.written(key)
    }

    fn runtime_rules(config: &Nf4Config) -> Vec<ConfigError> {
        errors_of(config.validate())
    }

    fn literal_fields(c: &Nf4Config, krate: &Path) -> Vec<(&'static str, TokenStream)> {
        vec![
            ("n", lit_u32(c.n)),
            ("k", lit_u32(c.k)),
            ("block", lit_u32(c.block)),
            ("double_quant", lit_bool(c.double_quant)),
            ("dtype", lit_dtype(c.dtype, krate)),
            ("allow_tf32", lit_bool(c.allow_tf32)),
            ("arch", lit_arch(c.arch, krate)),
        ]
    }

    fn describe(c: &Nf4Config) -> Vec<(&'static str, String)> {
        vec![
            ("n", c.n.to_string()),
            ("k", c.k.to_string()),
            ("block", c.block.to_string()),
            ("double_quant", c.double_quant.to_string()),
            ("dtype", c.dtype.to_string()),
            ("allow_tf32", c.allow_tf32.to_string()),
            ("arch", c.arch.to_string()),
        ]
    }
    fn entry_names(_: &Nf4Config) -> Vec<&'static str> {
        vec![
            nf4_kernels::GEMV_ENTRY,
            nf4_kernels::GEMM_ENTRY,
            nf4_kernels::BACKWARD_INPUT_ENTRY,
            nf4_kernels::BACKWARD_GEMV_ENTRY,
            nf4_kernels::BACKWARD_GEMV_SPLIT_ENTRY,
            nf4_kernels::BACKWARD_GEMV_REDUCE_ENTRY,
        ]
    }

    fn dtype(c: &Nf4Config) -> DType {
        c.dtype
    }

    fn wrappers(c: &Nf4Config, types: &WrapperTypes) -> Vec<Wrapper> {
        wrappers::nf4::wrappers(c, types)
    }
}

impl Family for Attention {
    const KEYS: Keys = Keys {
        attr: "attention_kernel",
        all: AttentionConfig::FIELDS,
        required: AttentionConfig::REQUIRED,
    };
    const CONFIG_TYPE: &'static str = "AttentionConfig";
    const ENTRY_PREFIX: &'static str = "attention_";
    const SHARED_MEMORY_ARGS: &'static [&'static str] =
        &["block_m", "block_n", "head_dim", "dtype", "arch"];
    const THREAD_ARGS: &'static [&'static str] = &["block_m", "head_dim", "arch"];
    type Args = AttentionArgs;
    type Config = AttentionConfig;

    fn config(args: &AttentionArgs) -> Option<AttentionConfig> {
        args.config()
    }

    fn with_arch(config: &AttentionConfig, arch: Arch) -> AttentionConfig {
        let mut config = *config;
        config.arch = arch;
        config
    }

    fn placeholder() -> AttentionConfig {
        AttentionConfig::new(0)
    }

    fn written(args: &AttentionArgs, key: &str) -> Option<(SpanRange, String)> {
        args.written(key)
    }

    fn runtime_rules(config: &AttentionConfig) -> Vec<ConfigError> {
        errors_of(config.validate())
    }

    fn literal_fields(c: &AttentionConfig, krate: &Path) -> Vec<(&'static str, TokenStream)> {
        vec![
            ("head_dim", lit_u32(c.head_dim)),
            ("block_m", lit_u32(c.block_m)),
            ("block_n", lit_u32(c.block_n)),
            ("causal", lit_bool(c.causal)),
            ("dtype", lit_dtype(c.dtype, krate)),
            ("allow_tf32", lit_bool(c.allow_tf32)),
            ("arch", lit_arch(c.arch, krate)),
        ]
    }

    fn describe(c: &AttentionConfig) -> Vec<(&'static str, String)> {
        let auto = |v: u32| match v {
            0 => "0 (automatic)".to_owned(),
            v => v.to_string(),
        };
        vec![
            ("head_dim", c.head_dim.to_string()),
            ("block_m", auto(c.block_m)),
            ("block_n", auto(c.block_n)),
            ("causal", c.causal.to_string()),
            ("dtype", c.dtype.to_string()),
            ("allow_tf32", c.allow_tf32.to_string()),
            ("arch", c.arch.to_string()),
        ]
    }
    fn entry_names(_: &AttentionConfig) -> Vec<&'static str> {
        vec![ptxforge_runtime::templates::attention::ENTRY]
    }

    fn dtype(c: &AttentionConfig) -> DType {
        c.dtype
    }

    fn wrappers(c: &AttentionConfig, types: &WrapperTypes) -> Vec<Wrapper> {
        wrappers::attention::wrappers(c, types)
    }
}

impl Family for Conv2d {
    const KEYS: Keys = Keys {
        attr: "conv2d_kernel",
        all: Conv2dConfig::FIELDS,
        required: Conv2dConfig::REQUIRED,
    };
    const CONFIG_TYPE: &'static str = "Conv2dConfig";
    const ENTRY_PREFIX: &'static str = "conv2d_";
    const SHARED_MEMORY_ARGS: &'static [&'static str] =
        &["dilation", "kernel", "stride", "dtype", "arch"];
    const THREAD_ARGS: &'static [&'static str] = &["kernel", "arch"];
    type Args = ConvArgs;
    type Config = Conv2dConfig;

    fn config(args: &ConvArgs) -> Option<Conv2dConfig> {
        args.config()
    }

    fn with_arch(config: &Conv2dConfig, arch: Arch) -> Conv2dConfig {
        let mut config = *config;
        config.arch = arch;
        config
    }

    fn placeholder() -> Conv2dConfig {
        Conv2dConfig::new(0, 0, 0)
    }

    fn written(args: &ConvArgs, key: &str) -> Option<(SpanRange, String)> {
        args.written(key)
    }

    fn argument_of(name: &str) -> Option<&'static str> {
        Conv2dConfig::argument_of(name)
    }

    fn runtime_rules(config: &Conv2dConfig) -> Vec<ConfigError> {
        errors_of(config.validate())
    }

    fn literal_fields(c: &Conv2dConfig, krate: &Path) -> Vec<(&'static str, TokenStream)> {
        vec![
            ("in_channels", lit_u32(c.in_channels)),
            ("out_channels", lit_u32(c.out_channels)),
            ("kernel_h", lit_u32(c.kernel_h)),
            ("kernel_w", lit_u32(c.kernel_w)),
            ("stride_h", lit_u32(c.stride_h)),
            ("stride_w", lit_u32(c.stride_w)),
            ("padding_h", lit_u32(c.padding_h)),
            ("padding_w", lit_u32(c.padding_w)),
            ("dilation_h", lit_u32(c.dilation_h)),
            ("dilation_w", lit_u32(c.dilation_w)),
            ("groups", lit_u32(c.groups)),
            ("bias", lit_bool(c.bias)),
            ("dtype", lit_dtype(c.dtype, krate)),
            ("arch", lit_arch(c.arch, krate)),
            ("layout", lit_layout(c.layout, krate)),
            ("allow_tf32", lit_bool(c.allow_tf32)),
        ]
    }

    fn describe(c: &Conv2dConfig) -> Vec<(&'static str, String)> {
        let pair = |h: u32, w: u32| {
            if h == w {
                h.to_string()
            } else {
                format!("({h}, {w})")
            }
        };
        vec![
            ("in_channels", c.in_channels.to_string()),
            ("out_channels", c.out_channels.to_string()),
            ("kernel", pair(c.kernel_h, c.kernel_w)),
            ("stride", pair(c.stride_h, c.stride_w)),
            ("padding", pair(c.padding_h, c.padding_w)),
            ("dilation", pair(c.dilation_h, c.dilation_w)),
            ("groups", c.groups.to_string()),
            ("bias", c.bias.to_string()),
            ("dtype", c.dtype.to_string()),
            ("arch", c.arch.to_string()),
            ("layout", c.layout.to_string()),
            ("allow_tf32", c.allow_tf32.to_string()),
        ]
    }
    fn entry_names(c: &Conv2dConfig) -> Vec<&'static str> {
        c.entry_names()
    }

    fn dtype(c: &Conv2dConfig) -> DType {
        c.dtype
    }

    fn wrappers(c: &Conv2dConfig, types: &WrapperTypes) -> Vec<Wrapper> {
        wrappers::conv::wrappers(c, types)
    }
}

// ---- value tokens for the configuration literal ---------------------------------------------

fn lit_u32(v: u32) -> TokenStream {
    let lit = proc_macro2::Literal::u32_unsuffixed(v);
    quote!(#lit)
}

fn lit_bool(v: bool) -> TokenStream {
    quote!(#v)
}

/// An `f32` literal; the non-finite values (which validation rejects) as the named constants,
/// since there is no literal for them.
/// `Some(x)` (capacity-limited routing) or `None` (dropless).
fn lit_capacity_factor(v: Option<f32>) -> TokenStream {
    match v {
        Some(x) => {
            let x = lit_f32(x);
            quote!(::core::option::Option::Some(#x))
        }
        None => quote!(::core::option::Option::None),
    }
}

fn lit_f32(v: f32) -> TokenStream {
    if v.is_finite() {
        let lit = proc_macro2::Literal::f32_suffixed(v);
        quote!(#lit)
    } else if v.is_nan() {
        quote!(::core::primitive::f32::NAN)
    } else if v > 0.0 {
        quote!(::core::primitive::f32::INFINITY)
    } else {
        quote!(::core::primitive::f32::NEG_INFINITY)
    }
}

fn lit_dtype(v: DType, krate: &Path) -> TokenStream {
    let variant = match v {
        DType::F16 => "F16",
        DType::BF16 => "BF16",
        DType::F32 => "F32",
        DType::F64 => "F64",
    };
    let variant = format_ident!("{variant}");
    quote!(#krate::__private::DType::#variant)
}

fn lit_layout(v: Layout, krate: &Path) -> TokenStream {
    let variant = format_ident!(
        "{}",
        match v {
            Layout::Nchw => "Nchw",
            Layout::Nhwc => "Nhwc",
        }
    );
    quote!(#krate::__private::ConvLayout::#variant)
}

fn lit_arch(v: Arch, krate: &Path) -> TokenStream {
    let variant = match v {
        Arch::Sm70 => "Sm70",
        Arch::Sm75 => "Sm75",
        Arch::Sm80 => "Sm80",
        Arch::Sm86 => "Sm86",
        Arch::Sm89 => "Sm89",
        Arch::Sm90 => "Sm90",
        Arch::Sm90a => "Sm90a",
    };
    let variant = format_ident!("{variant}");
    quote!(#krate::__private::Arch::#variant)
}

fn lit_ffn(v: Ffn, krate: &Path) -> TokenStream {
    let variant = match v {
        Ffn::Linear => "Linear",
        Ffn::Swiglu => "Swiglu",
    };
    let variant = format_ident!("{variant}");
    quote!(#krate::__private::Ffn::#variant)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argument_structs_accept_exactly_the_runtime_fields() {
        assert_eq!(MoeArgs::KEYS, MoeConfig::FIELDS);
        assert_eq!(Nf4Args::KEYS, Nf4Config::FIELDS);
        assert_eq!(AttentionArgs::KEYS, AttentionConfig::FIELDS);
        assert_eq!(ConvArgs::KEYS, Conv2dConfig::FIELDS);
    }

    fn described_keys<F: Family>(config: &F::Config) -> Vec<&'static str> {
        F::describe(config).into_iter().map(|(k, _)| k).collect()
    }

    #[test]
    fn descriptions_cover_every_argument() {
        assert_eq!(
            described_keys::<Moe>(&MoeConfig::new(8, 2, 64, 64)),
            MoeConfig::FIELDS
        );
        assert_eq!(
            described_keys::<Nf4>(&Nf4Config::new(64, 64)),
            Nf4Config::FIELDS
        );
        assert_eq!(
            described_keys::<Attention>(&AttentionConfig::new(64)),
            AttentionConfig::FIELDS
        );
        assert_eq!(
            described_keys::<Conv2d>(&Conv2dConfig::new(3, 8, 3)),
            Conv2dConfig::FIELDS
        );
    }

    /// The field names of a config from its `Debug` form, `Name { a: 1, b: 2 }`.
    fn debug_fields(config: &impl std::fmt::Debug) -> Vec<String> {
        let text = format!("{config:?}");
        let inner = text
            .split_once('{')
            .and_then(|(_, rest)| rest.rsplit_once('}'))
            .map(|(inner, _)| inner)
            .unwrap();
        inner
            .split(", ")
            .map(|field| field.split(':').next().unwrap().trim().to_owned())
            .collect()
    }

    fn literal_names<F: Family>(config: &F::Config) -> Vec<String> {
        F::literal_fields(config, &syn::parse_quote!(::ptxforge))
            .into_iter()
            .map(|(name, _)| name.to_owned())
            .collect()
    }

    /// A field added to a runtime config must be added to its literal (and, if it is an
    /// argument, to the parser): the generated struct literal would not compile otherwise.
    #[test]
    fn literals_name_every_config_field_in_order() {
        let moe = MoeConfig::new(8, 2, 64, 64);
        assert_eq!(literal_names::<Moe>(&moe), debug_fields(&moe));
        let nf4 = Nf4Config::new(64, 64);
        assert_eq!(literal_names::<Nf4>(&nf4), debug_fields(&nf4));
        let attention = AttentionConfig::new(64);
        assert_eq!(
            literal_names::<Attention>(&attention),
            debug_fields(&attention)
        );
        let conv = Conv2dConfig::new(3, 8, 3);
        assert_eq!(literal_names::<Conv2d>(&conv), debug_fields(&conv));
    }

    #[test]
    fn float_literals_never_panic() {
        assert_eq!(lit_f32(1.25).to_string(), "1.25f32");
        assert!(lit_f32(f32::NAN).to_string().contains("NAN"));
        assert!(lit_f32(f32::NEG_INFINITY)
            .to_string()
            .contains("NEG_INFINITY"));
    }
}
