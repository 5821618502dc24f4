//! The `PTX` section: the family's whole module as a string literal, built by the runtime
//! template at expansion time, so the binary carries it and launches generate nothing.
//!
//! The wrappers pass the module to the backend through `__ptx_static()`, a `static` holding
//! `Self::PTX`: a `const` is copied into each codegen unit that uses it (so `PTX.as_ptr()`
//! differs between call sites in a debug build), a `static` is one object. Every launch of a
//! kernel therefore passes the same address, and the 100-odd KiB of text are in the binary once
//! for all wrappers.
//!
//! Every kernel has a target table, `__targets()`: `(target, configuration, module)` per target,
//! lowest first (one row unless the attribute says `arch = [sm_80, sm_90]`; the other targets'
//! modules are `PTX_SM_90`…). Wrappers call `__target(dev)`, which picks the highest target the
//! device runs (`Backend::arch`; the interpreter runs any, so it gets the highest) or returns a
//! typed error when every embedded target is newer than the device. PTX for an older target
//! still runs on a newer GPU: the driver JIT-compiles it for the device when it is loaded.

use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote};
use syn::Path;

use ptxforge_runtime::templates::KernelFamily;
use ptxforge_runtime::Arch;

use super::{config, docs, Kernel};
use crate::family::Family;

/// `pub const PTX: &'static str = Self::__PTX_TEXT;` with the text in a `#[doc(hidden)]` const, so
/// rustdoc does not render it.
pub(crate) fn emit<F: Family>(cx: &Kernel<'_, F>) -> TokenStream {
    let ident = &cx.item.ident;
    let krate = cx.krate;
    let ptx = &cx.compiled.ptx;
    let text = text_literal(ptx);
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
    let p = quote!(#krate::__private);
    let config_ty = config::config_type::<F>(krate);
    let primary_arch = arch_path(KernelFamily::arch(cx.config), &p);
    let mut rows = vec![quote!((#primary_arch, (#ident::CONFIG, #ident::PTX)))];
    let mut extra_consts = Vec::new();
    for target in cx.extra {
        let name = format_ident!("PTX_{}", target.arch.name().to_uppercase());
        let doc = format!(
            " The module for target `{}` ({} bytes): the same entries as [`Self::PTX`], built for \
             this target.",
            target.arch,
            target.compiled.ptx.len()
        );
        let text = text_literal(&target.compiled.ptx);
        let hidden = format_ident!("__PTX_TEXT_{}", target.arch.name().to_uppercase());
        extra_consts.push(quote! {
            #[doc(hidden)]
            pub const #hidden: &'static str = #text;
            #[doc = #doc]
            pub const #name: &'static str = Self::#hidden;
        });
        let arch = arch_path(target.arch, &p);
        let literal = config::literal::<F>(&target.config, krate);
        rows.push(quote!((#arch, (#literal, #ident::#name))));
    }
    let count = rows.len();
    quote! {
        #[doc(hidden)]
        pub const __PTX_TEXT: &'static str = #text;
        #[doc = #doc]
        pub const PTX: &'static str = Self::__PTX_TEXT;
        #(#extra_consts)*
        /// Every embedded target with its configuration and module, lowest first.
        #[doc(hidden)]
        pub fn __targets() -> &'static [(#p::Arch, (#config_ty, &'static str))] {
            static TARGETS: [(#p::Arch, (#config_ty, &'static str)); #count] = [#(#rows),*];
            &TARGETS
        }
        /// The configuration and module to launch on `dev`: the highest target it runs.
        #[doc(hidden)]
        pub fn __target<B: #p::Backend + ?::core::marker::Sized>(
            dev: &B,
        ) -> ::core::result::Result<(&'static #config_ty, &'static str), #p::LaunchError> {
            let (config, ptx) = #p::select_target(dev, #ident::__targets())?;
            ::core::result::Result::Ok((config, ptx))
        }
        /// `Self::PTX` from one `static`: the text every launch wrapper passes to the backend
        /// for the lowest target.
        #[doc(hidden)]
        pub fn __ptx_static() -> &'static str {
            #ident::__targets()[0].1 .1
        }
    }
}

/// The module text as a raw string literal (`r#"…"#`, with enough `#`s): the same `&str` as an
/// escaped literal, but made without escaping every character (`Literal::string` escapes each
/// of the 100-odd KiB one `char` at a time, the largest cost of expanding a conv kernel) and read
/// by the compiler without unescaping.
fn text_literal(text: &str) -> Literal {
    let mut hashes = String::from("#");
    while text.contains(&format!("\"{hashes}")) {
        hashes.push('#');
    }
    format!("r{hashes}\"{text}\"{hashes}")
        .parse()
        .unwrap_or_else(|_| Literal::string(text))
}

/// `Arch::Sm80` through the hidden path.
fn arch_path(arch: Arch, p: &TokenStream) -> TokenStream {
    let variant = format_ident!("{arch:?}");
    quote!(#p::Arch::#variant)
}

/// An empty module and an empty target table.
pub(crate) fn stub<F: Family>(krate: &Path) -> TokenStream {
    let p = quote!(#krate::__private);
    let config_ty = config::config_type::<F>(krate);
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
        pub fn __targets() -> &'static [(#p::Arch, (#config_ty, &'static str))] {
            &[]
        }
        #[doc(hidden)]
        pub fn __target<B: #p::Backend + ?::core::marker::Sized>(
            dev: &B,
        ) -> ::core::result::Result<(&'static #config_ty, &'static str), #p::LaunchError> {
            let (config, ptx) = #p::select_target(dev, Self::__targets())?;
            ::core::result::Result::Ok((config, ptx))
        }
        #[doc(hidden)]
        pub fn __ptx_static() -> &'static str {
            ""
        }
    }
}

#[cfg(test)]
mod tests {
    use super::text_literal;

    /// The raw literal is the module text exactly, with as many `#`s as the text needs (a
    /// `"#` inside would end an `r#"…"#` early); a literal that fell back to escaping would not
    /// start with `r`.
    #[test]
    fn text_literal_is_raw_and_exact() {
        for text in [
            ".version 8.0\n\t.reg .f32 %f<3>;\n",
            "// a \"quoted\" comment with \\ and \"# and \"## in it\n",
            "",
        ] {
            let literal = text_literal(text);
            let repr = literal.to_string();
            assert!(repr.starts_with('r'), "{repr}");
            let parsed: syn::LitStr =
                syn::parse2(quote::quote!(#literal)).expect("a string literal");
            assert_eq!(parsed.value(), text);
        }
    }
}
