//! The `PTX` section: the family's whole module as a string literal, built by the runtime
//! template at expansion time, so the binary carries it and launches generate nothing.
//!
//! The wrappers pass the module to the backend through `__ptx_static()`, a `static` holding
//! `Self::PTX`: a `const` is copied into each codegen unit that uses it (so `PTX.as_ptr()`
//! differs between call sites in a debug build), a `static` is one object. Every launch of a
//! kernel therefore passes the same address, and the 100-odd KiB of text are in the binary once
//! for all wrappers.

use proc_macro2::TokenStream;
use quote::quote;

use ptxforge_runtime::templates::KernelFamily;

use super::{docs, Kernel};
use crate::family::Family;

/// `pub const PTX: &'static str = Self::__PTX_TEXT;` with the text in a `#[doc(hidden)]` const, so
/// rustdoc does not render it.
pub(crate) fn emit<F: Family>(cx: &Kernel<'_, F>) -> TokenStream {
    let ident = &cx.item.ident;
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
    // rustdoc prints a `const`'s initializer when it is a literal (the whole module, 100+ KiB on
    // the user's doc page) but prints a path as written: the text lives in a hidden const.
    quote! {
        #[doc(hidden)]
        pub const __PTX_TEXT: &'static str = #ptx;
        #[doc = #doc]
        pub const PTX: &'static str = Self::__PTX_TEXT;
        /// `Self::PTX` from one `static`: the text every launch wrapper passes to the backend.
        #[doc(hidden)]
        pub fn __ptx_static() -> &'static str {
            static PTX: &str = #ident::PTX;
            PTX
        }
    }
}

/// An empty module.
pub(crate) fn stub<F: Family>() -> TokenStream {
    let doc = format!(
        " Unavailable (empty): this kernel's `#[{}]` configuration has errors.",
        F::KEYS.attr
    );
    quote! {
        #[doc(hidden)]
        pub const __PTX_TEXT: &'static str = "";
        #[doc = #doc]
        pub const PTX: &'static str = Self::__PTX_TEXT;
        #[doc(hidden)]
        pub fn __ptx_static() -> &'static str {
            ""
        }
    }
}
