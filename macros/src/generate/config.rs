//! The `CONFIG` section: the checked configuration as a `const` struct literal, so run-time code
//! (launch wrappers, host references, user code) reads exactly what was checked.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::Path;

use super::{docs, Kernel};
use crate::family::Family;

/// `pub const CONFIG: …Config = …Config { field: value, … };`
pub(crate) fn emit<F: Family>(cx: &Kernel<'_, F>) -> TokenStream {
    let doc = docs::config_const(cx);
    config_const::<F>(cx.config, cx.krate, &doc)
}

/// `CONFIG` for a configuration that did not check: the same type and a value that is no use
/// (the arguments as far as they parsed, else the placeholder), so code reading it compiles
/// while the attribute's errors are fixed. A panicking `const` would add an error at every use.
pub(crate) fn stub<F: Family>(krate: &Path, config: Option<&F::Config>) -> TokenStream {
    let placeholder = F::placeholder();
    let doc = format!(
        " Unavailable: this kernel's `#[{}]` configuration has errors.",
        F::KEYS.attr
    );
    config_const::<F>(config.unwrap_or(&placeholder), krate, &doc)
}

fn config_const<F: Family>(config: &F::Config, krate: &Path, doc: &str) -> TokenStream {
    let ty = config_type::<F>(krate);
    let value = literal::<F>(config, krate);
    quote! {
        #[doc = #doc]
        pub const CONFIG: #ty = #value;
    }
}

/// `…Config { field: value, … }`.
pub(crate) fn literal<F: Family>(config: &F::Config, krate: &Path) -> TokenStream {
    let ty = config_type::<F>(krate);
    let fields = F::literal_fields(config, krate)
        .into_iter()
        .map(|(name, value)| {
            let name = format_ident!("{name}");
            quote!(#name: #value)
        });
    quote!(#ty { #(#fields,)* })
}

pub(crate) fn config_type<F: Family>(krate: &Path) -> TokenStream {
    let name = format_ident!("{}", F::CONFIG_TYPE);
    quote!(#krate::__private::#name)
}
