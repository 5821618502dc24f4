//! The `CONFIG` section: the checked configuration as a `const` struct literal, so run-time code
//! (launch wrappers, host references, user code) reads exactly what was checked.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::Path;

use super::{docs, Kernel};
use crate::family::Family;

/// `pub const CONFIG: …Config = …Config { field: value, … };`
pub(crate) fn emit<F: Family>(cx: &Kernel<'_, F>) -> TokenStream {
    let ty = config_type::<F>(cx.krate);
    let fields = F::literal_fields(cx.config, cx.krate)
        .into_iter()
        .map(|(name, value)| {
            let name = format_ident!("{name}");
            quote!(#name: #value)
        });
    let doc = docs::config_const(cx);
    quote! {
        #[doc = #doc]
        pub const CONFIG: #ty = #ty { #(#fields,)* };
    }
}

/// `CONFIG` with the right type for a configuration that did not check: evaluating it (only
/// reachable once the compile errors are fixed, which replaces it) panics.
pub(crate) fn stub<F: Family>(krate: &Path) -> TokenStream {
    let ty = config_type::<F>(krate);
    let message = format!(
        "invalid #[{}] configuration: see the compile errors on the attribute",
        F::KEYS.attr
    );
    quote! {
        /// Unavailable: the kernel's configuration has errors.
        pub const CONFIG: #ty = ::core::panic!(#message);
    }
}

fn config_type<F: Family>(krate: &Path) -> TokenStream {
    let name = format_ident!("{}", F::CONFIG_TYPE);
    quote!(#krate::__private::#name)
}
