//! Generate: a checked configuration → the tokens that replace the annotated struct. Nothing
//! here reports a user error; every user error was found by parse or check.
//!
//! The struct is re-emitted (with a rustdoc section describing the configuration) followed by an
//! impl block assembled from *sections*. Each section has a full form, built from the checked
//! configuration, and a stub form with the same names and types, emitted beside the
//! `compile_error!`s when anything failed so that code using the kernel still type-checks and
//! one typo does not light up every call site:
//!
//! | section | full form | stub form |
//! |---|---|---|
//! | [`config`] | `pub const CONFIG: …Config = …Config { … };` | the same with placeholder values |
//! | [`ptx`] | `pub const PTX: &'static str` (the template's emitted module, its text in a hidden const; with `arch = [..]` the lowest target's, and `PTX_SM_90`… for the others), the hidden target table the wrappers choose from | `""` |
//! | [`entries`] | one `pub const GATING: KernelEntry = …;` per entry | same names, no params |
//! | [`wrappers`] | `pub fn forward<B: Backend>(&self, dev: &B, …) -> Result<…, LaunchError>`, per phase, `backward_*` | same signatures, bodies returning `LaunchError::Build` |
//!
//! To add a section: a module here with an `emit(cx)` and a `stub(krate, config)` function,
//! listed in [`kernel`] and [`fail_soft`].
//!
//! The module is built (`Family::compile`) before generation, in [`crate::expand`]: a template
//! that fails to build for a checked configuration is reported there, at the attribute, and
//! this module only sees modules that built.
//!
//! Generated code names only `#krate::__private::…` (`::ptxforge` unless `crate = "…"`).

pub(crate) mod config;
pub(crate) mod docs;
pub(crate) mod entries;
pub(crate) mod ptx;
pub(crate) mod wrappers;

use proc_macro2::TokenStream;
use quote::quote;
use syn::{ItemStruct, Path};

use ptxforge_runtime::templates::CompiledFamily;
use ptxforge_runtime::Arch;

use crate::family::Family;
use crate::parse::item::NotAKernelItem;

/// Everything the full forms are generated from.
pub(crate) struct Kernel<'a, F: Family> {
    pub item: &'a ItemStruct,
    pub args: &'a F::Args,
    pub config: &'a F::Config,
    /// The module built from `config`.
    pub compiled: &'a CompiledFamily,
    /// The other targets of `arch = [..]`, each with its configuration and module (empty for
    /// one target). `config` is the lowest target.
    pub extra: &'a [Target<F>],
    pub krate: &'a Path,
}

/// One more target of a multi-target kernel.
pub(crate) struct Target<F: Family> {
    pub arch: Arch,
    pub config: F::Config,
    pub compiled: CompiledFamily,
}

/// The struct, documented, and its impl block.
pub(crate) fn kernel<F: Family>(cx: &Kernel<'_, F>) -> TokenStream {
    let mut item = cx.item.clone();
    item.attrs.extend(docs::struct_section(cx));
    let ident = &item.ident;
    let sections = [
        config::emit(cx),
        ptx::emit(cx),
        entries::emit(cx),
        wrappers::emit(cx),
    ];
    // A private kernel struct need not use every generated item.
    quote! {
        #item
        #[allow(dead_code)]
        impl #ident {
            #(#sections)*
        }
    }
}

/// The item as written, the errors, and stub sections on the item's type when it has one.
pub(crate) fn fail_soft<F: Family>(
    item: Result<ItemStruct, NotAKernelItem>,
    errors: syn::Error,
    krate: &Path,
    config: Option<&F::Config>,
) -> TokenStream {
    let (tokens, self_ty) = match item {
        Ok(item) => {
            let ident = item.ident.clone();
            (quote!(#item), Some(ident))
        }
        Err(not_a_kernel) => (not_a_kernel.tokens, not_a_kernel.self_ty),
    };
    let errors = errors.into_compile_error();
    let stubs = self_ty.map(|ident| {
        let sections = [
            config::stub::<F>(krate, config),
            ptx::stub::<F>(krate),
            entries::stub::<F>(krate, config),
            wrappers::stub::<F>(krate, config),
        ];
        quote! {
            #[allow(dead_code)]
            impl #ident {
                #(#sections)*
            }
        }
    });
    quote! {
        #tokens
        #errors
        #stubs
    }
}

/// `::ptxforge`, the facade crate as users depend on it.
pub(crate) fn default_crate() -> Path {
    syn::parse_quote!(::ptxforge)
}
