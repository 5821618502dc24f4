//! The launch-wrapper section: typed, thin methods on the kernel struct that call the runtime's
//! launch functions with the configuration and module of the target chosen for the device
//! (`Self::__target(dev)`: `Self::CONFIG` and `Self::PTX` for a single target, see
//! [`super::ptx`]; nothing is generated at launch time).
//!
//! Each family lists its wrappers (one module per family) as [`Wrapper`]s: a signature and a
//! body. The full form emits both; the stub form keeps the signature and returns
//! `LaunchError::Build`, so calls still type-check while the attribute's errors are fixed.
//! Buffers are typed by the configured dtype ([`WrapperTypes::elem`]); a stub for a
//! configuration that did not parse takes any element type instead.

pub(crate) mod attention;
pub(crate) mod conv;
pub(crate) mod moe;
pub(crate) mod nf4;

use proc_macro2::{Ident, TokenStream};
use quote::{format_ident, quote};
use syn::Path;

use ptxforge_runtime::DType;

use super::{docs, Kernel};
use crate::family::Family;

/// One generated method: `pub fn <name><generics>(&self, <params>) -> Result<<ok>, LaunchError>`.
pub(crate) struct Wrapper {
    pub name: &'static str,
    /// What it computes (first doc paragraph; the configuration is appended).
    pub doc: String,
    /// Lifetime parameters before `B` (e.g. `'a`), without the angle brackets.
    pub lifetimes: TokenStream,
    /// `(name, type)` after `&self`.
    pub params: Vec<(Ident, TokenStream)>,
    /// The `Ok` type.
    pub ok: TokenStream,
    pub body: TokenStream,
}

/// Paths and buffer types the wrapper lists are written with.
pub(crate) struct WrapperTypes {
    /// `#krate::__private`.
    pub private: TokenStream,
    /// The tensors' element type: the dtype's Rust type, or the stub's generic `T`.
    pub elem: TokenStream,
    /// Whether `elem` is the stub's generic parameter `T: Element`.
    pub generic_elem: bool,
}

impl WrapperTypes {
    pub fn new(krate: &Path, dtype: Option<DType>) -> Self {
        let private = quote!(#krate::__private);
        let (elem, generic_elem) = match dtype {
            Some(dtype) => (elem_type(dtype, &private), false),
            None => (quote!(T), true),
        };
        Self {
            private,
            elem,
            generic_elem,
        }
    }

    /// `&DeviceBuffer<B, elem>` (`mutable`: `&mut`, for outputs).
    pub fn buf(&self, elem: &TokenStream, mutable: bool) -> TokenStream {
        let p = &self.private;
        if mutable {
            quote!(&mut #p::DeviceBuffer<B, #elem>)
        } else {
            quote!(&#p::DeviceBuffer<B, #elem>)
        }
    }

    /// A read-only buffer of the tensor element type.
    pub fn input(&self) -> TokenStream {
        self.buf(&self.elem, false)
    }

    /// A written buffer of the tensor element type.
    pub fn output(&self) -> TokenStream {
        self.buf(&self.elem, true)
    }

    /// `dev: &B`, the first parameter of every wrapper.
    pub fn dev(&self) -> (Ident, TokenStream) {
        (format_ident!("dev"), quote!(&B))
    }
}

/// The Rust type of a dtype's elements.
fn elem_type(dtype: DType, private: &TokenStream) -> TokenStream {
    match dtype {
        DType::F16 => quote!(#private::half::f16),
        DType::BF16 => quote!(#private::half::bf16),
        DType::F32 => quote!(::core::primitive::f32),
        DType::F64 => quote!(::core::primitive::f64),
    }
}

/// `(name, type)` with `name` as an identifier.
pub(crate) fn param(name: &str, ty: TokenStream) -> (Ident, TokenStream) {
    (format_ident!("{name}"), ty)
}

/// The full wrappers for a checked configuration.
pub(crate) fn emit<F: Family>(cx: &Kernel<'_, F>) -> TokenStream {
    let types = WrapperTypes::new(cx.krate, Some(F::dtype(cx.config)));
    let summary = docs::summary::<F>(cx.config);
    let methods = F::wrappers(cx.config, &types).into_iter().map(|w| {
        let doc = wrapper_doc::<F>(&w, &summary);
        let body = &w.body;
        // Launching bodies name the chosen target's configuration and module.
        let target = (mentions(body, "__config") || mentions(body, "__ptx"))
            .then(|| quote!(let (__config, __ptx) = Self::__target(dev)?;));
        let sig = signature(&w, &types);
        quote! {
            #[doc = #doc]
            #[allow(clippy::too_many_arguments)]
            #sig {
                #target
                #body
            }
        }
    });
    quote!(#(#methods)*)
}

/// Stubs: the same signatures (for `config` when the arguments gave one, any element type
/// otherwise), each returning `LaunchError::Build`.
pub(crate) fn stub<F: Family>(krate: &Path, config: Option<&F::Config>) -> TokenStream {
    let placeholder = F::placeholder();
    let types = WrapperTypes::new(krate, config.map(F::dtype));
    let private = &types.private;
    let message = format!(
        "this kernel's `#[{}]` configuration has errors; see the compile errors",
        F::KEYS.attr
    );
    let doc = format!(
        " Unavailable: this kernel's `#[{}]` configuration has errors.",
        F::KEYS.attr
    );
    let methods = F::wrappers(config.unwrap_or(&placeholder), &types)
        .into_iter()
        .map(|w| {
            let sig = signature(&w, &types);
            quote! {
                #[doc = #doc]
                #[allow(unused_variables, clippy::too_many_arguments)]
                #sig {
                    ::core::result::Result::Err(#private::LaunchError::Build(
                        ::std::string::String::from(#message),
                    ))
                }
            }
        });
    quote!(#(#methods)*)
}

fn signature(w: &Wrapper, types: &WrapperTypes) -> TokenStream {
    let p = &types.private;
    let name = format_ident!("{}", w.name);
    let lifetimes = &w.lifetimes;
    let lifetimes = if lifetimes.is_empty() {
        quote!()
    } else {
        quote!(#lifetimes,)
    };
    let elem = if types.generic_elem && mentions_elem(w) {
        quote!(, T: #p::Element)
    } else {
        quote!()
    };
    let params = w.params.iter().map(|(name, ty)| quote!(#name: #ty));
    let ok = &w.ok;
    quote! {
        pub fn #name<#lifetimes B: #p::Backend #elem>(&self, #(#params),*)
            -> ::core::result::Result<#ok, #p::LaunchError>
    }
}

/// Whether the stub's generic element `T` appears in `w`'s parameters or result (a `T` no
/// argument mentions could not be inferred at call sites).
fn mentions_elem(w: &Wrapper) -> bool {
    w.params.iter().any(|(_, ty)| mentions(ty, "T")) || mentions(&w.ok, "T")
}

/// Whether identifier `name` appears anywhere in `tokens`.
fn mentions(tokens: &TokenStream, name: &str) -> bool {
    tokens.clone().into_iter().any(|tree| match tree {
        proc_macro2::TokenTree::Ident(ident) => ident == name,
        proc_macro2::TokenTree::Group(group) => mentions(&group.stream(), name),
        _ => false,
    })
}

fn wrapper_doc<F: Family>(w: &Wrapper, summary: &str) -> String {
    format!(
        " {}\n\n Generated by `#[{}({summary})]`; launches entries of [`Self::PTX`] (no code is \
         generated at launch time).",
        w.doc,
        F::KEYS.attr,
    )
}
