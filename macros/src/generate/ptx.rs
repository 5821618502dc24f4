//! The `PTX` section: the family's whole module as a string literal, built by the runtime
//! template at expansion time, so the binary carries it and launches generate nothing.

use proc_macro2::TokenStream;
use quote::quote;

use ptxforge_runtime::templates::KernelFamily;

use super::{docs, Kernel};
use crate::family::Family;

/// `pub const PTX: &'static str = "…";`
pub(crate) fn emit<F: Family>(cx: &Kernel<'_, F>) -> TokenStream {
    let ptx = &cx.compiled.ptx;
    let entries: Vec<String> = cx
        .compiled
        .entries
        .iter()
        .map(|e| format!("`{}`", e.name))
        .collect();
    let version = ptx
        .lines()
        .find_map(|line| line.trim().strip_prefix(".version "))
        .unwrap_or("?");
    let doc = format!(
        " The PTX module (PTX ISA {version}, target `{}`, {} bytes) holding every entry of this \
         kernel: {}.\n\n Built, validated and emitted at compile time for `#[{}({})]`; the \
         launch wrappers pass exactly this string to the backend.",
        KernelFamily::arch(cx.config),
        ptx.len(),
        entries.join(", "),
        F::KEYS.attr,
        docs::summary::<F>(cx.config),
    );
    quote! {
        #[doc = #doc]
        pub const PTX: &'static str = #ptx;
    }
}

/// An empty module.
pub(crate) fn stub<F: Family>() -> TokenStream {
    let doc = format!(
        " Unavailable (empty): this kernel's `#[{}]` configuration has errors.",
        F::KEYS.attr
    );
    quote! {
        #[doc = #doc]
        pub const PTX: &'static str = "";
    }
}
