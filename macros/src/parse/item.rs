//! The annotated item: a kernel attribute goes on a struct without fields (`pub struct Mixtral;`),
//! whose impl block receives the generated constants and launch wrappers.

use proc_macro2::{Ident, TokenStream};
use quote::ToTokens;
use syn::{Fields, Item, ItemStruct};

use super::value::SpanRange;

/// The annotated item when it cannot carry a kernel, kept for fail-soft re-emission.
#[derive(Debug)]
pub(crate) struct NotAKernelItem {
    pub error: syn::Error,
    /// The item exactly as written, to re-emit beside the error.
    pub tokens: TokenStream,
    /// A type the stubs can still be attached to (a non-generic struct, enum or union).
    pub self_ty: Option<Ident>,
}

/// The kernel struct, or why `item` cannot be one.
pub(crate) fn kernel_struct(item: TokenStream, attr: &str) -> Result<ItemStruct, NotAKernelItem> {
    let fail = |error: syn::Error, self_ty: Option<Ident>| NotAKernelItem {
        error,
        tokens: item.clone(),
        self_ty,
    };
    let parsed = match syn::parse2::<Item>(item.clone()) {
        Ok(parsed) => parsed,
        Err(error) => return Err(fail(error, None)),
    };
    let usage = format!("#[{attr}] goes on a unit struct such as `pub struct Mixtral;`");
    match parsed {
        Item::Struct(s) => {
            if !s.generics.params.is_empty() || s.generics.where_clause.is_some() {
                let error = syn::Error::new_spanned(
                    &s.generics,
                    format!("{usage}: kernel structs cannot be generic"),
                );
                return Err(fail(error, None));
            }
            let has_fields = match &s.fields {
                Fields::Unit => false,
                Fields::Named(named) => !named.named.is_empty(),
                Fields::Unnamed(unnamed) => !unnamed.unnamed.is_empty(),
            };
            if has_fields {
                let error = SpanRange::of(&s.fields).error(format!(
                    "{usage}, without fields: the kernel's configuration lives in the attribute's \
                     arguments"
                ));
                return Err(fail(error, Some(s.ident.clone())));
            }
            Ok(s)
        }
        other => {
            let (kind, range, self_ty) = describe(&other);
            Err(fail(
                range.error(format!("{usage}, not on {kind}")),
                self_ty,
            ))
        }
    }
}

/// What kind of item this is, from its keyword to its name, and its type name when the stubs can
/// still hang off it.
fn describe(item: &Item) -> (&'static str, SpanRange, Option<Ident>) {
    let from = |first: &dyn ToTokens, last: &dyn ToTokens| SpanRange {
        start: SpanRange::of(first).start,
        end: SpanRange::of(last).end,
    };
    let plain_type = |ident: &Ident, generics: &syn::Generics| {
        (generics.params.is_empty() && generics.where_clause.is_none()).then(|| ident.clone())
    };
    match item {
        Item::Enum(e) => (
            "an enum",
            from(&e.enum_token, &e.ident),
            plain_type(&e.ident, &e.generics),
        ),
        Item::Union(u) => (
            "a union",
            from(&u.union_token, &u.ident),
            plain_type(&u.ident, &u.generics),
        ),
        Item::Fn(f) => ("a function", from(&f.sig.fn_token, &f.sig.ident), None),
        Item::Trait(t) => ("a trait", from(&t.trait_token, &t.ident), None),
        Item::Impl(i) => ("an impl block", from(&i.impl_token, &i.self_ty), None),
        Item::Mod(m) => ("a module", from(&m.mod_token, &m.ident), None),
        Item::Const(c) => ("a constant", from(&c.const_token, &c.ident), None),
        Item::Static(s) => ("a static", from(&s.static_token, &s.ident), None),
        Item::Type(t) => ("a type alias", from(&t.type_token, &t.ident), None),
        Item::Use(u) => ("a `use` declaration", from(&u.use_token, &u.tree), None),
        Item::ExternCrate(e) => ("an `extern crate`", from(&e.extern_token, &e.ident), None),
        Item::ForeignMod(f) => ("an extern block", SpanRange::of(&f.abi), None),
        Item::Macro(m) => ("a macro invocation", SpanRange::of(&m.mac.path), None),
        Item::TraitAlias(t) => ("a trait alias", from(&t.trait_token, &t.ident), None),
        _ => ("this item", SpanRange::of(item), None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    fn error_of(item: TokenStream) -> (String, Option<String>) {
        let err = kernel_struct(item, "moe_kernel").unwrap_err();
        (err.error.to_string(), err.self_ty.map(|i| i.to_string()))
    }

    #[test]
    fn accepts_structs_without_fields() {
        for item in [
            quote!(
                pub struct Mixtral;
            ),
            quote!(
                struct Empty {}
            ),
            quote!(
                #[derive(Debug)]
                pub(crate) struct Tuple();
            ),
        ] {
            assert!(kernel_struct(item, "moe_kernel").is_ok());
        }
    }

    #[test]
    fn rejects_fields_and_generics() {
        let (msg, ty) = error_of(quote!(
            struct Mixtral {
                experts: u32,
            }
        ));
        assert!(msg.contains("without fields"), "{msg}");
        assert_eq!(ty.as_deref(), Some("Mixtral"));
        let (msg, _) = error_of(quote!(
            struct Mixtral(u32);
        ));
        assert!(msg.contains("without fields"), "{msg}");
        let (msg, ty) = error_of(quote!(
            struct Mixtral<T>(PhantomData<T>);
        ));
        assert!(msg.contains("cannot be generic"), "{msg}");
        assert_eq!(ty, None);
    }

    #[test]
    fn names_other_items() {
        let (msg, ty) = error_of(quote!(
            enum Mixtral {
                A,
            }
        ));
        assert_eq!(
            msg,
            "#[moe_kernel] goes on a unit struct such as `pub struct Mixtral;`, not on an enum"
        );
        assert_eq!(ty.as_deref(), Some("Mixtral"));
        let (msg, ty) = error_of(quote!(
            fn mixtral() {}
        ));
        assert!(msg.ends_with("not on a function"), "{msg}");
        assert_eq!(ty, None);
        assert!(error_of(quote!(
            mod m {}
        ))
        .0
        .ends_with("not on a module"));
        assert!(error_of(quote!(
            const X: u32 = 1;
        ))
        .0
        .ends_with("not on a constant"));
    }
}
