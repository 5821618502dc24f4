//! The argument list as a whole: splitting it into `key = value` items (each parsed on its own,
//! so one syntax error does not hide the rest), rejecting unknown and duplicate keys, naming the
//! missing ones, and reading the `crate = …` override. What is left goes to the family's darling
//! struct, which reads the values.

use darling::ast::NestedMeta;
use darling::error::Accumulator;
use darling::{Error, FromMeta};
use proc_macro2::{Span, TokenStream, TokenTree};
use quote::ToTokens;
use syn::parse::{ParseStream, Parser};
use syn::Meta;

use super::suggest;
use super::value::{error_at, path_text, Arg, CratePath};

/// The argument keys of one attribute.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Keys {
    /// The attribute's name, `moe_kernel`.
    pub attr: &'static str,
    /// Every configuration key, in the order the configuration declares them.
    pub all: &'static [&'static str],
    /// The keys without a default.
    pub required: &'static [&'static str],
}

/// The macro-level key naming the facade crate's path; accepted by every attribute.
pub(crate) const CRATE_KEY: &str = "crate";

/// The argument list, sorted out.
#[derive(Debug, Default)]
pub(crate) struct ArgList {
    /// Known, first-occurrence `key = value` items for the family's darling struct.
    pub items: Vec<NestedMeta>,
    /// `crate = …`, if given and well-formed.
    pub krate: Option<Arg<CratePath>>,
    /// Whether every required key is present.
    pub complete: bool,
}

/// Splits `attr` into items, reports malformed, unknown, duplicate and missing ones to `errors`
/// and returns the rest.
pub(crate) fn sort_out(attr: TokenStream, keys: Keys, errors: &mut Accumulator) -> ArgList {
    let mut list = ArgList::default();
    let mut seen: Vec<(String, String)> = Vec::new();
    // Required keys an unknown key probably misspells: reported once, as the misspelling.
    let mut suggested: Vec<&'static str> = Vec::new();
    let (pieces, attempted) = split(attr, errors);
    for item in pieces {
        let meta = match item {
            NestedMeta::Meta(meta) => meta,
            // Turned into its parse error by `parse_piece`.
            NestedMeta::NameValueInvalidExpr(_) => continue,
            NestedMeta::Lit(lit) => {
                errors.push(
                    Error::custom(format!(
                        "expected `key = value`, found literal `{}`",
                        lit.to_token_stream()
                    ))
                    .with_span(&lit),
                );
                continue;
            }
        };
        let key = path_text(meta.path());
        let written = meta.to_token_stream().to_string();
        if let Some((_, first)) = seen.iter().find(|(k, _)| *k == key) {
            errors.push(
                Error::custom(format!(
                    "duplicate argument `{key}`: already given as `{first}`"
                ))
                .with_span(&meta),
            );
            continue;
        }
        if key == CRATE_KEY {
            seen.push((key, written));
            list.krate = errors.handle(Arg::<CratePath>::from_meta(&meta));
            continue;
        }
        if !keys.all.contains(&key.as_str()) {
            errors.push(unknown_key(&key, &meta, keys));
            if let Some(guess) = suggest::did_you_mean(&key, keys.all.iter().copied()) {
                suggested.push(guess);
            }
            continue;
        }
        seen.push((key, written));
        list.items.push(NestedMeta::Meta(meta));
    }
    let missing: Vec<&str> = keys
        .required
        .iter()
        .copied()
        .filter(|k| !seen.iter().any(|(s, _)| s == k) && !attempted.iter().any(|a| a == k))
        .collect();
    list.complete = missing.is_empty();
    let unexplained: Vec<String> = missing
        .iter()
        .filter(|k| !suggested.contains(k))
        .map(|k| format!("`{k}`"))
        .collect();
    if !unexplained.is_empty() {
        // The only error without a token of its own: it belongs to the attribute as a whole.
        errors.push(error_at(
            Span::call_site(),
            format!(
                "#[{}] is missing required argument{} {}",
                keys.attr,
                if unexplained.len() == 1 { "" } else { "s" },
                unexplained.join(", ")
            ),
        ));
    }
    list
}

fn unknown_key(key: &str, meta: &Meta, keys: Keys) -> Error {
    let valid = keys.all.iter().chain([&CRATE_KEY]);
    let hint = suggest::hint(key, valid.clone().copied());
    let valid: Vec<&str> = valid.copied().collect();
    Error::custom(format!(
        "unknown argument `{key}` for #[{}]; {hint}valid arguments: {}",
        keys.attr,
        valid.join(", ")
    ))
    .with_span(meta.path())
}

/// Splits the attribute's tokens at top-level commas and parses each piece as one item; a piece
/// that does not parse is reported and skipped, and its leading key, if any, is returned too (so
/// `head_dim 64` is not also reported as a missing `head_dim`). A trailing comma is fine.
pub(crate) fn split(attr: TokenStream, errors: &mut Accumulator) -> (Vec<NestedMeta>, Vec<String>) {
    let mut pieces: Vec<(Vec<TokenTree>, Option<Span>)> = vec![(Vec::new(), None)];
    for token in attr {
        match &token {
            TokenTree::Punct(p) if p.as_char() == ',' => {
                if let Some(last) = pieces.last_mut() {
                    last.1 = Some(p.span());
                }
                pieces.push((Vec::new(), None));
            }
            _ => {
                if let Some(last) = pieces.last_mut() {
                    last.0.push(token);
                }
            }
        }
    }
    let mut items = Vec::new();
    let mut attempted = Vec::new();
    for (tokens, comma) in pieces {
        if tokens.is_empty() {
            // An empty piece before a comma: `a = 1,, b = 2` or a leading comma.
            if let Some(comma) = comma {
                errors.push(error_at(comma, "expected an argument before `,`"));
            }
            continue;
        }
        let key = match &tokens[0] {
            TokenTree::Ident(ident) => Some(ident.to_string()),
            _ => None,
        };
        match parse_piece(tokens) {
            Ok(item) => items.push(item),
            Err(error) => {
                errors.push(error);
                attempted.extend(key);
            }
        }
    }
    (items, attempted)
}

fn parse_piece(tokens: Vec<TokenTree>) -> darling::Result<NestedMeta> {
    let first = tokens[0].clone();
    let last = tokens[tokens.len() - 1].clone();
    if !matches!(first, TokenTree::Ident(_) | TokenTree::Literal(_)) {
        return Err(error_at(
            first.span(),
            format!("expected an argument name, found `{first}`"),
        ));
    }
    if matches!(&last, TokenTree::Punct(p) if p.as_char() == '=') {
        return Err(error_at(last.span(), "expected a value after `=`"));
    }
    let stream: TokenStream = tokens.into_iter().collect();
    let parser = |input: ParseStream<'_>| {
        let item: NestedMeta = input.parse()?;
        if !input.is_empty() {
            let message = match &item {
                NestedMeta::Meta(Meta::Path(path)) => {
                    format!("expected `=` after `{}`", path_text(path))
                }
                _ => "expected `,` between arguments".to_owned(),
            };
            return Err(input.error(message));
        }
        Ok(item)
    };
    let item = parser.parse2(stream).map_err(|e| {
        // syn reports running out of tokens at the call site; the last token is closer.
        if e.to_string().contains("end of input") {
            error_at(last.span(), e.to_string())
        } else {
            darling::Error::from(e)
        }
    })?;
    match item {
        // `key = <not an expression>`: the expression's own parse error.
        NestedMeta::NameValueInvalidExpr(invalid) => Err(invalid.error),
        item => Ok(item),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proc_macro2::{Delimiter, Group};
    use quote::quote;

    /// Wraps tokens in an invisible group, as a `macro_rules!` expansion would.
    fn invisible(tokens: TokenStream) -> TokenTree {
        TokenTree::Group(Group::new(Delimiter::None, tokens))
    }

    const KEYS: Keys = Keys {
        attr: "moe_kernel",
        all: &["experts", "top_k", "hidden", "dtype"],
        required: &["experts", "top_k"],
    };

    fn run(attr: TokenStream) -> (ArgList, Vec<String>) {
        let mut errors = Error::accumulator();
        let list = sort_out(attr, KEYS, &mut errors);
        let messages = match errors.finish() {
            Ok(()) => Vec::new(),
            Err(e) => e.into_iter().map(|e| e.to_string()).collect(),
        };
        (list, messages)
    }

    fn keys_of(list: &ArgList) -> Vec<String> {
        list.items
            .iter()
            .map(|i| match i {
                NestedMeta::Meta(m) => path_text(m.path()),
                NestedMeta::Lit(_) | NestedMeta::NameValueInvalidExpr(_) => unreachable!(),
            })
            .collect()
    }

    #[test]
    fn well_formed_list_passes_through() {
        let (list, errors) = run(quote!(experts = 8, top_k = 2, dtype = bf16,));
        assert!(errors.is_empty(), "{errors:?}");
        assert!(list.complete && list.krate.is_none());
        assert_eq!(keys_of(&list), ["experts", "top_k", "dtype"]);
    }

    #[test]
    fn unknown_key_suggests_and_lists() {
        let (list, errors) = run(quote!(expers = 8, top_k = 2));
        assert_eq!(
            errors,
            [
                "unknown argument `expers` for #[moe_kernel]; did you mean `experts`? \
              valid arguments: experts, top_k, hidden, dtype, crate"
            ]
        );
        // The misspelt required key is not reported a second time as missing.
        assert!(!list.complete);
    }

    #[test]
    fn duplicate_reported_once_and_first_kept() {
        let (list, errors) = run(quote!(experts = 8, top_k = 2, experts = 16));
        assert_eq!(
            errors,
            ["duplicate argument `experts`: already given as `experts = 8`"]
        );
        assert_eq!(keys_of(&list), ["experts", "top_k"]);
    }

    #[test]
    fn missing_keys_named_together() {
        let (_, errors) = run(quote!(hidden = 4));
        assert_eq!(
            errors,
            ["#[moe_kernel] is missing required arguments `experts`, `top_k`"]
        );
        let (_, errors) = run(TokenStream::new());
        assert_eq!(errors.len(), 1);
    }

    #[test]
    fn malformed_pieces_each_reported() {
        let (list, errors) = run(quote!(experts 8, top_k = , = 3, 7, hidden = 4 5, dtype = bf16));
        assert_eq!(
            errors,
            [
                "expected `=` after `experts`",
                "expected a value after `=`",
                "expected an argument name, found `=`",
                "expected `,` between arguments",
                "expected `key = value`, found literal `7`",
                // `experts` and `top_k` were attempted: no "missing" error on top.
            ]
        );
        assert_eq!(keys_of(&list), ["dtype"]);
    }

    #[test]
    fn empty_pieces() {
        let (_, errors) = run(quote!(experts = 8,, top_k = 2));
        assert_eq!(errors, ["expected an argument before `,`"]);
        let (_, errors) = run(quote!(, experts = 8, top_k = 2));
        assert_eq!(errors, ["expected an argument before `,`"]);
    }

    #[test]
    fn crate_override_is_read_separately() {
        let (list, errors) = run(quote!(
            experts = 8,
            top_k = 2,
            crate = "::reexported::ptxforge"
        ));
        assert!(errors.is_empty(), "{errors:?}");
        let krate = list.krate.as_ref().unwrap();
        assert_eq!(path_text(&krate.value.0), "::reexported::ptxforge");
        assert_eq!(keys_of(&list), ["experts", "top_k"]);
    }

    #[test]
    fn invisible_groups_from_macro_rules_are_transparent() {
        let value = invisible(quote!(8));
        let (list, errors) = run(quote!(experts = #value, top_k = 2));
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(keys_of(&list), ["experts", "top_k"]);
    }
}
