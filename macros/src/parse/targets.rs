//! `arch = [sm_80, sm_90]`: a kernel built for several targets. The list is taken out of the
//! argument tokens before the family's arguments are read: the family sees `arch = <lowest
//! target>` (at that element's span, so rules about the target point there), and the other
//! targets are built on their own after the primary one (see [`crate::expand`]). A single
//! `arch = sm_80` passes through untouched.

use proc_macro2::{Delimiter, Group, Span, TokenStream, TokenTree};
use quote::ToTokens;
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::{Expr, Token};

use ptxforge_runtime::Arch;

use super::value::Value;
use crate::errors::Errors;

/// The targets of one attribute, lowest first; empty when `arch` was not given as a list.
#[derive(Debug, Default, Clone)]
pub(crate) struct Targets {
    pub list: Vec<(Arch, Span)>,
}

impl Targets {
    /// The targets other than the primary (lowest) one.
    pub fn extra(&self) -> &[(Arch, Span)] {
        self.list.get(1..).unwrap_or(&[])
    }
}

/// Replaces a bracketed `arch = [..]` in `attr` by its lowest target and returns the targets;
/// empty lists, duplicates and unknown names go to `errors`.
pub(crate) fn split(attr: TokenStream, errors: &mut Errors) -> (TokenStream, Targets) {
    let mut out: Vec<TokenTree> = Vec::new();
    let mut targets = Targets::default();
    let tokens: Vec<TokenTree> = attr.into_iter().collect();
    let mut i = 0;
    while i < tokens.len() {
        let is_list = matches!(&tokens[i], TokenTree::Ident(key) if key == "arch")
            && matches!(tokens.get(i + 1), Some(TokenTree::Punct(p)) if p.as_char() == '=')
            && matches!(tokens.get(i + 2),
                Some(TokenTree::Group(g)) if g.delimiter() == Delimiter::Bracket)
            && (i == 0 || matches!(&tokens[i - 1], TokenTree::Punct(p) if p.as_char() == ','));
        if !is_list {
            out.push(tokens[i].clone());
            i += 1;
            continue;
        }
        let TokenTree::Group(group) = &tokens[i + 2] else {
            unreachable!("matched above")
        };
        out.extend(tokens[i..i + 2].iter().cloned());
        let (primary, list) = read_list(group, errors);
        out.extend(primary);
        targets.list = list;
        i += 3;
    }
    (out.into_iter().collect(), targets)
}

/// The value tokens standing in for the list (its lowest valid target, else a placeholder the
/// family accepts) and the valid targets, sorted.
fn read_list(group: &Group, errors: &mut Errors) -> (TokenStream, Vec<(Arch, Span)>) {
    let placeholder =
        || TokenTree::Ident(proc_macro2::Ident::new(Arch::Sm80.name(), group.span())).into();
    let elements = match Punctuated::<Expr, Token![,]>::parse_terminated.parse2(group.stream()) {
        Ok(elements) => elements,
        Err(e) => {
            errors.push(e);
            return (placeholder(), Vec::new());
        }
    };
    if elements.is_empty() {
        errors.push(syn::Error::new(
            group.span(),
            "`arch = []` names no target: list at least one, e.g. `arch = [sm_80, sm_90]`",
        ));
        return (placeholder(), Vec::new());
    }
    let mut list: Vec<(Arch, Span, &Expr)> = Vec::new();
    for expr in &elements {
        let Some(arch) = errors.handle(Arch::parse_value(expr)) else {
            continue;
        };
        if let Some((_, _, first)) = list.iter().find(|(a, _, _)| *a == arch) {
            errors.push(syn::Error::new_spanned(
                expr,
                format!(
                    "duplicate target `{arch}` in `arch`: already listed as `{}`",
                    first.to_token_stream()
                ),
            ));
            continue;
        }
        list.push((arch, span_of(expr), expr));
    }
    list.sort_by_key(|(arch, _, _)| *arch);
    let primary = list
        .first()
        .map_or_else(placeholder, |(_, _, expr)| expr.to_token_stream());
    (
        primary,
        list.into_iter()
            .map(|(arch, span, _)| (arch, span))
            .collect(),
    )
}

fn span_of(expr: &Expr) -> Span {
    expr.to_token_stream()
        .into_iter()
        .next()
        .map_or_else(Span::call_site, |t| t.span())
}

#[cfg(test)]
mod tests {
    use quote::quote;

    use super::*;

    fn run(attr: TokenStream) -> (String, Vec<Arch>, Option<String>) {
        let mut errors = Errors::default();
        let (rest, targets) = split(attr, &mut errors);
        let arches = targets.list.iter().map(|(a, _)| *a).collect();
        let error = errors.finish().err().map(|e| {
            e.into_iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join(" | ")
        });
        (rest.to_string(), arches, error)
    }

    #[test]
    fn a_list_becomes_its_lowest_target() {
        let (rest, arches, error) = run(quote!(n = 64, arch = [sm_90, sm_80], k = 64));
        assert_eq!(rest, "n = 64 , arch = sm_80 , k = 64");
        assert_eq!(arches, vec![Arch::Sm80, Arch::Sm90]);
        assert_eq!(error, None);
    }

    #[test]
    fn a_single_target_passes_through() {
        let (rest, arches, error) = run(quote!(n = 64, arch = sm_90));
        assert_eq!(rest, "n = 64 , arch = sm_90");
        assert!(arches.is_empty());
        assert_eq!(error, None);
    }

    #[test]
    fn empty_lists_and_duplicates_are_errors() {
        let (_, arches, error) = run(quote!(arch = []));
        assert!(arches.is_empty());
        assert!(error.unwrap().contains("names no target"));
        let (rest, arches, error) = run(quote!(arch = [sm_80, sm_90, "sm_80"]));
        assert_eq!(rest, "arch = sm_80");
        assert_eq!(arches, vec![Arch::Sm80, Arch::Sm90]);
        assert_eq!(
            error.unwrap(),
            "duplicate target `sm_80` in `arch`: already listed as `sm_80`"
        );
        let (_, arches, error) = run(quote!(arch = [sm_80, sm_61]));
        assert_eq!(arches, vec![Arch::Sm80]);
        assert!(error.unwrap().contains("sm_61"));
    }
}
