//! Argument values: what the right-hand side of one `key = value` may be, parsed from the value
//! expression with its span kept, and the source ranges errors point at.
//!
//! Values are literal (the configuration is fixed at compile time): integers, floats, bools,
//! names written as identifiers or strings (`dtype = bf16`, `dtype = "bf16"`), and 2-D sizes
//! written as a pair or one number for both dimensions (`kernel = (3, 3)`, `kernel = 3`).

use std::fmt::Display;
use std::str::FromStr;

use darling::{Error, FromMeta, Result};
use proc_macro2::{Punct, Spacing, Span, TokenStream, TokenTree};
use quote::{ToTokens, TokenStreamExt};
use syn::{Expr, ExprLit, Lit, Meta, UnOp};

use ptxforge_runtime::templates::conv::Layout;
use ptxforge_runtime::{Arch, DType};

use super::suggest;

/// A source range from one token to another, so an error can underline all of `top_k = 9`
/// (proc macros on stable cannot join spans; `syn::Error::new_spanned` takes a first and last
/// token instead, which is what [`SpanRange`]'s tokens are).
#[derive(Debug, Clone, Copy)]
pub(crate) struct SpanRange {
    pub start: Span,
    pub end: Span,
}

impl SpanRange {
    /// From the first to the last token of `tokens` (the call site if there are none).
    pub fn of(tokens: &dyn ToTokens) -> Self {
        let mut iter = tokens.to_token_stream().into_iter();
        let start = iter
            .next()
            .map_or_else(Span::call_site, |first| first.span());
        let end = iter.last().map_or(start, |last| last.span());
        Self { start, end }
    }

    pub fn error(self, message: impl Display) -> syn::Error {
        syn::Error::new_spanned(self, message)
    }
}

impl ToTokens for SpanRange {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        for span in [self.start, self.end] {
            let mut punct = Punct::new('.', Spacing::Alone);
            punct.set_span(span);
            tokens.append(TokenTree::Punct(punct));
        }
    }
}

/// One parsed argument: its value and where the user wrote it.
#[derive(Debug, Clone)]
pub(crate) struct Arg<T> {
    pub value: T,
    /// The whole `key = value` (just the key for a bare `causal`).
    pub whole: SpanRange,
    /// The value as written (`sm_75`, `(3, 3)`), to quote in messages.
    pub text: String,
}

/// A kind of argument value.
pub(crate) trait Value: Sized {
    /// What a value looks like, for "expected …" messages: "an integer".
    const EXPECTED: &'static str;
    /// A sample value for hints: `8`.
    const EXAMPLE: &'static str;

    fn parse_value(expr: &Expr) -> Result<Self>;

    /// What a bare key without `= value` stands for (`causal` alone is `causal = true`).
    fn from_bare_key() -> Option<Self> {
        None
    }
}

impl<T: Value> FromMeta for Arg<T> {
    fn from_meta(meta: &Meta) -> Result<Self> {
        let key = path_text(meta.path());
        match meta {
            Meta::NameValue(nv) => {
                let value = T::parse_value(&nv.value).map_err(|e| e.with_span(&nv.value))?;
                Ok(Arg {
                    value,
                    whole: SpanRange::of(nv),
                    text: source_text(&nv.value),
                })
            }
            Meta::Path(path) => match T::from_bare_key() {
                Some(value) => Ok(Arg {
                    value,
                    whole: SpanRange::of(path),
                    text: String::new(),
                }),
                None => Err(Error::custom(format!(
                    "`{key}` needs a value: expected `{key} = {}` ({})",
                    T::EXAMPLE,
                    T::EXPECTED
                ))
                .with_span(path)),
            },
            Meta::List(list) => {
                let inside = list.tokens.to_string();
                let value = if inside.is_empty() {
                    T::EXAMPLE
                } else {
                    &inside
                };
                Err(error_at(
                    list.delimiter.span().join(),
                    format!("expected `{key} = {value}`, found `{key}({inside})`"),
                ))
            }
        }
    }
}

/// A darling error at one span (darling's own `with_span` wants a syntax node).
pub(crate) fn error_at(span: Span, message: impl Display) -> Error {
    syn::Error::new(span, message).into()
}

/// `a::b` for a path, `crate` for `crate`.
pub(crate) fn path_text(path: &syn::Path) -> String {
    let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
    let joined = segments.join("::");
    if path.leading_colon.is_some() {
        format!("::{joined}")
    } else {
        joined
    }
}

/// The expression inside invisible groups (`macro_rules!` metavariables) and redundant parens.
fn peel(expr: &Expr) -> &Expr {
    match expr {
        Expr::Group(g) => peel(&g.expr),
        Expr::Paren(p) => peel(&p.expr),
        _ => expr,
    }
}

/// The value as the user wrote it, near enough: `-1` rather than the token printer's `- 1`.
pub(crate) fn source_text(expr: &Expr) -> String {
    match peel(expr) {
        Expr::Unary(u) if matches!(u.op, UnOp::Neg(_)) => format!("-{}", source_text(&u.expr)),
        Expr::Lit(ExprLit {
            lit: Lit::Int(int), ..
        }) => int.to_string(),
        Expr::Lit(ExprLit {
            lit: Lit::Float(float),
            ..
        }) => float.to_string(),
        other => other.to_token_stream().to_string(),
    }
}

/// How the user's value reads in a message: "string literal `\"8\"`".
fn describe(expr: &Expr) -> String {
    let mut text = source_text(expr);
    if text.chars().count() > 40 {
        text = text.chars().take(37).collect::<String>() + "...";
    }
    let kind = match peel(expr) {
        Expr::Lit(ExprLit { lit, .. }) => match lit {
            Lit::Str(_) => "string literal ",
            Lit::Int(_) => "integer ",
            Lit::Float(_) => "float ",
            Lit::Bool(_) => "",
            Lit::Char(_) => "character literal ",
            Lit::Byte(_) | Lit::ByteStr(_) | Lit::CStr(_) => "byte literal ",
            _ => "literal ",
        },
        Expr::Path(_) => "",
        Expr::Tuple(_) => "tuple ",
        Expr::Array(_) => "array ",
        Expr::Unary(_) => "",
        _ => "expression ",
    };
    format!("{kind}`{text}`")
}

fn wrong_kind<T: Value>(expr: &Expr) -> Error {
    Error::custom(format!(
        "expected {}, found {}{}",
        T::EXPECTED,
        describe(expr),
        unquote_hint::<T>(expr)
    ))
    .with_span(expr)
}

/// `: write `1.25` without quotes` when the string's content would be a valid value.
fn unquote_hint<T: Value>(expr: &Expr) -> String {
    let Expr::Lit(ExprLit {
        lit: Lit::Str(s), ..
    }) = peel(expr)
    else {
        return String::new();
    };
    let content = s.value();
    match syn::parse_str::<Expr>(&content) {
        Ok(inner)
            if !matches!(
                &inner,
                Expr::Lit(ExprLit {
                    lit: Lit::Str(_),
                    ..
                })
            ) =>
        {
            if T::parse_value(&inner).is_ok() {
                format!(": write `{}` without quotes", content.trim())
            } else {
                String::new()
            }
        }
        _ => String::new(),
    }
}

const INTEGER_SUFFIXES: &[&str] = &[
    "u8", "u16", "u32", "u64", "u128", "usize", "i8", "i16", "i32", "i64", "i128", "isize",
];

/// Rejects literal suffixes that are not a type (`3x3` lexes as `3` with suffix `x3`).
fn check_suffix(suffix: &str, allowed: &[&str], lit: &dyn syn::spanned::Spanned) -> Result<()> {
    if suffix.is_empty() || allowed.contains(&suffix) {
        Ok(())
    } else {
        Err(error_at(
            lit.span(),
            format!("unexpected suffix `{suffix}` on a number"),
        ))
    }
}

fn negative(expr: &Expr) -> Error {
    Error::custom(format!(
        "expected a non-negative integer, found `{}`",
        source_text(expr)
    ))
    .with_span(expr)
}

/// An integer literal's digits, or a typed error for anything else.
fn integer_digits<T: Value>(expr: &Expr) -> Result<&syn::LitInt> {
    match peel(expr) {
        Expr::Lit(ExprLit {
            lit: Lit::Int(int), ..
        }) => Ok(int),
        Expr::Unary(unary) if matches!(unary.op, UnOp::Neg(_)) => Err(negative(expr)),
        Expr::Path(p) if p.path.get_ident().is_some() => Err(Error::custom(format!(
            "expected {}, found `{}`: the configuration must be written as literals",
            T::EXPECTED,
            p.to_token_stream()
        ))
        .with_span(expr)),
        _ => Err(wrong_kind::<T>(expr)),
    }
}

macro_rules! unsigned_value {
    ($($ty:ty),*) => {$(
        impl Value for $ty {
            const EXPECTED: &'static str = "an integer";
            const EXAMPLE: &'static str = "8";

            fn parse_value(expr: &Expr) -> Result<Self> {
                let int = integer_digits::<Self>(expr)?;
                // syn reads `-8` in an attribute as one negative literal.
                if int.base10_digits().starts_with('-') {
                    return Err(negative(expr));
                }
                check_suffix(int.suffix(), INTEGER_SUFFIXES, int)?;
                int.base10_digits()
                    .parse::<$ty>()
                    .map_err(|_| {
                        Error::custom(format!(
                            "integer `{}` is too large: at most {} fits here",
                            int.base10_digits(),
                            <$ty>::MAX
                        ))
                        .with_span(int)
                    })
            }
        }
    )*};
}

unsigned_value!(u8, u16, u32, u64, usize);

macro_rules! float_value {
    ($($ty:ty),*) => {$(
        impl Value for $ty {
            const EXPECTED: &'static str = "a number";
            const EXAMPLE: &'static str = "1.25";

            fn parse_value(expr: &Expr) -> Result<Self> {
                let (negative, inner) = match peel(expr) {
                    Expr::Unary(u) if matches!(u.op, UnOp::Neg(_)) => (true, peel(&u.expr)),
                    other => (false, other),
                };
                let digits = match inner {
                    Expr::Lit(ExprLit { lit: Lit::Float(f), .. }) => {
                        check_suffix(f.suffix(), &["f32", "f64"], f)?;
                        f.base10_digits()
                    }
                    Expr::Lit(ExprLit { lit: Lit::Int(i), .. }) => {
                        check_suffix(i.suffix(), &["f32", "f64"], i)?;
                        i.base10_digits()
                    }
                    _ => return Err(wrong_kind::<Self>(expr)),
                };
                let magnitude = digits
                    .parse::<$ty>()
                    .ok()
                    .filter(|v| v.is_finite())
                    .ok_or_else(|| {
                        Error::custom(format!("`{digits}` does not fit in an {}", stringify!($ty)))
                            .with_span(expr)
                    })?;
                // `1e-50` would silently become 0 and then fail a rule that quotes 0.
                let nonzero = digits.parse::<f64>().is_ok_and(|v| v != 0.0);
                if magnitude == 0.0 && nonzero {
                    return Err(Error::custom(format!(
                        "`{digits}` is too small for an {}: it rounds to 0",
                        stringify!($ty)
                    ))
                    .with_span(expr));
                }
                Ok(if negative { -magnitude } else { magnitude })
            }
        }
    )*};
}

float_value!(f32, f64);

impl Value for bool {
    const EXPECTED: &'static str = "`true` or `false`";
    const EXAMPLE: &'static str = "true";

    fn parse_value(expr: &Expr) -> Result<Self> {
        match peel(expr) {
            Expr::Lit(ExprLit {
                lit: Lit::Bool(b), ..
            }) => Ok(b.value),
            _ => Err(wrong_kind::<Self>(expr)),
        }
    }

    fn from_bare_key() -> Option<Self> {
        Some(true)
    }
}

/// The name in `key = name`, `key = "name"` or (for `arch = 80`) `key = 80`, with its span.
fn name_of(expr: &Expr) -> Option<(String, Span)> {
    match peel(expr) {
        Expr::Path(p) if p.qself.is_none() => p.path.get_ident().map(|ident| {
            let text = ident.to_string();
            let text = text.strip_prefix("r#").map(str::to_owned).unwrap_or(text);
            (text, ident.span())
        }),
        Expr::Lit(ExprLit {
            lit: Lit::Str(s), ..
        }) => Some((s.value(), s.span())),
        Expr::Lit(ExprLit {
            lit: Lit::Int(i), ..
        }) => Some((i.to_string(), i.span())),
        _ => None,
    }
}

/// Parses a name-valued argument (`dtype = bf16`) through the type's `FromStr`, suggesting the
/// closest valid name (or the canonical spelling of a common alias) when it is unknown.
pub(crate) fn parse_name<T: FromStr>(
    expr: &Expr,
    what: &str,
    names: &[&'static str],
    aliases: &[(&str, &'static str)],
) -> Result<T> {
    parse_name_with(expr, what, names, aliases, true)
}

/// [`parse_name`], optionally without edit-distance guesses (for names such as `sm_100` where
/// one digit apart means a different thing, not a typo).
fn parse_name_with<T: FromStr>(
    expr: &Expr,
    what: &str,
    names: &[&'static str],
    aliases: &[(&str, &'static str)],
    guess: bool,
) -> Result<T> {
    let expected_names = names.join(", ");
    let Some((name, span)) = name_of(expr) else {
        return Err(Error::custom(format!(
            "expected {what} name (one of: {expected_names}), found {}",
            describe(expr)
        ))
        .with_span(expr));
    };
    name.parse::<T>().map_err(|_| {
        let alias = aliases
            .iter()
            .find(|(alias, _)| alias.eq_ignore_ascii_case(&name))
            .map(|(_, canonical)| format!("did you mean `{canonical}`? "));
        let hint = alias.unwrap_or_else(|| {
            if guess {
                suggest::hint(&name, names.iter().copied())
            } else {
                String::new()
            }
        });
        error_at(
            span,
            format!("unknown {what} `{name}`; {hint}expected one of: {expected_names}"),
        )
    })
}

const DTYPE_NAMES: [&str; 4] = [
    DType::ALL[0].name(),
    DType::ALL[1].name(),
    DType::ALL[2].name(),
    DType::ALL[3].name(),
];

impl Value for DType {
    const EXPECTED: &'static str = "an element type (f16, bf16, f32, f64)";
    const EXAMPLE: &'static str = "bf16";

    fn parse_value(expr: &Expr) -> Result<Self> {
        const ALIASES: &[(&str, &str)] = &[
            ("half", "f16"),
            ("fp16", "f16"),
            ("float16", "f16"),
            ("bfloat16", "bf16"),
            ("bfloat", "bf16"),
            ("float", "f32"),
            ("fp32", "f32"),
            ("float32", "f32"),
            ("single", "f32"),
            ("double", "f64"),
            ("fp64", "f64"),
            ("float64", "f64"),
        ];
        parse_name(expr, "dtype", &DTYPE_NAMES, ALIASES)
    }
}

const LAYOUT_NAMES: [&str; 2] = [Layout::ALL[0].name(), Layout::ALL[1].name()];

impl Value for Layout {
    const EXPECTED: &'static str = "an activation layout (nchw, nhwc)";
    const EXAMPLE: &'static str = "nhwc";

    fn parse_value(expr: &Expr) -> Result<Self> {
        const ALIASES: &[(&str, &str)] = &[
            ("channels_last", "nhwc"),
            ("channels_first", "nchw"),
            ("contiguous", "nchw"),
        ];
        parse_name(expr, "layout", &LAYOUT_NAMES, ALIASES)
    }
}

impl Value for Arch {
    const EXPECTED: &'static str = "an architecture such as `sm_80`";
    const EXAMPLE: &'static str = "sm_80";

    fn parse_value(expr: &Expr) -> Result<Self> {
        const ALIASES: &[(&str, &str)] = &[
            ("volta", "sm_70"),
            ("turing", "sm_75"),
            ("ampere", "sm_80"),
            ("ada", "sm_89"),
            ("hopper", "sm_90"),
            ("v100", "sm_70"),
            ("t4", "sm_75"),
            ("a100", "sm_80"),
            ("h100", "sm_90"),
        ];
        parse_name_with(expr, "architecture", &Arch::NAMES, ALIASES, false)
    }
}

/// A 2-D size, `(height, width)`: written `(3, 3)`, `[3, 3]`, or `3` for both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Size2 {
    pub h: u32,
    pub w: u32,
}

impl Value for Size2 {
    const EXPECTED: &'static str = "a size: one integer or a pair `(height, width)`";
    const EXAMPLE: &'static str = "(3, 3)";

    fn parse_value(expr: &Expr) -> Result<Self> {
        let elems: Vec<&Expr> = match peel(expr) {
            Expr::Tuple(t) => t.elems.iter().collect(),
            Expr::Array(a) => a.elems.iter().collect(),
            // `3x3` lexes as the integer 3 with suffix `x3`.
            Expr::Lit(ExprLit {
                lit: Lit::Int(int), ..
            }) if int.suffix().starts_with(['x', 'X'])
                && int.suffix()[1..].parse::<u32>().is_ok() =>
            {
                return Err(Error::custom(format!(
                    "expected {}, found `{int}`: write `({}, {})`",
                    Self::EXPECTED,
                    int.base10_digits(),
                    &int.suffix()[1..]
                ))
                .with_span(expr));
            }
            Expr::Lit(ExprLit {
                lit: Lit::Int(_), ..
            })
            | Expr::Unary(_) => {
                let n = u32::parse_value(expr)?;
                return Ok(Size2 { h: n, w: n });
            }
            Expr::Lit(ExprLit {
                lit: Lit::Str(s), ..
            }) => {
                let text = s.value();
                let pair = text.split_once(['x', 'X', '×']).and_then(|(h, w)| {
                    Some((h.trim().parse::<u32>().ok()?, w.trim().parse::<u32>().ok()?))
                });
                return Err(match pair {
                    Some((h, w)) => Error::custom(format!(
                        "expected {}, found string literal `{}`: write `({h}, {w})`",
                        Self::EXPECTED,
                        s.to_token_stream()
                    ))
                    .with_span(expr),
                    None => wrong_kind::<Self>(expr),
                });
            }
            _ => return Err(wrong_kind::<Self>(expr)),
        };
        if elems.len() != 2 {
            return Err(Error::custom(format!(
                "expected a pair `(height, width)`, found {} element{}",
                elems.len(),
                if elems.len() == 1 { "" } else { "s" }
            ))
            .with_span(expr));
        }
        let mut errors = Error::accumulator();
        let h = errors.handle(u32::parse_value(elems[0]).map_err(|e| e.with_span(elems[0])));
        let w = errors.handle(u32::parse_value(elems[1]).map_err(|e| e.with_span(elems[1])));
        errors.finish()?;
        match (h, w) {
            (Some(h), Some(w)) => Ok(Size2 { h, w }),
            _ => Err(wrong_kind::<Self>(expr)),
        }
    }
}

/// The path generated code uses to reach the facade crate (`crate = "::my_reexport::ptxforge"`).
#[derive(Debug, Clone)]
pub(crate) struct CratePath(pub syn::Path);

impl Value for CratePath {
    const EXPECTED: &'static str = "a path to the ptxforge crate";
    const EXAMPLE: &'static str = "\"::ptxforge\"";

    fn parse_value(expr: &Expr) -> Result<Self> {
        match peel(expr) {
            Expr::Lit(ExprLit {
                lit: Lit::Str(s), ..
            }) => s
                .parse::<syn::Path>()
                .ok()
                .filter(is_plain_path)
                .map(CratePath)
                .ok_or_else(|| {
                    Error::custom(format!(
                        "`crate` must name a path such as `::ptxforge`, found `{}`",
                        s.to_token_stream()
                    ))
                    .with_span(s)
                }),
            Expr::Path(p) if p.qself.is_none() && is_plain_path(&p.path) => {
                Ok(CratePath(p.path.clone()))
            }
            _ => Err(wrong_kind::<Self>(expr)),
        }
    }
}

/// A module path without generic arguments (`::a::b`), usable as a prefix of type paths.
fn is_plain_path(path: &syn::Path) -> bool {
    path.segments.iter().all(|s| s.arguments.is_none())
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse_quote;

    fn parse<T: Value>(expr: Expr) -> std::result::Result<T, String> {
        T::parse_value(&expr).map_err(|e| e.to_string())
    }

    #[test]
    fn integers() {
        assert_eq!(parse::<u32>(parse_quote!(8)), Ok(8));
        assert_eq!(parse::<u32>(parse_quote!(4_096)), Ok(4096));
        assert_eq!(parse::<u32>(parse_quote!(0x10)), Ok(16));
        assert_eq!(parse::<u32>(parse_quote!((8))), Ok(8));
        let too_big = parse::<u32>(parse_quote!(99999999999)).unwrap_err();
        assert!(
            too_big.contains("too large") && too_big.contains("4294967295"),
            "{too_big}"
        );
        let huge =
            parse::<u64>(parse_quote!(999999999999999999999999999999999999999999)).unwrap_err();
        assert!(huge.contains("too large"), "{huge}");
        let negative = parse::<u32>(parse_quote!(-8)).unwrap_err();
        assert_eq!(negative, "expected a non-negative integer, found `-8`");
        // In attribute position syn reads `-8` as one literal.
        let nv: syn::MetaNameValue = syn::parse_str("experts = -8").unwrap();
        assert!(matches!(nv.value, Expr::Lit(_)));
        let negative = parse::<u32>(nv.value).unwrap_err();
        assert_eq!(negative, "expected a non-negative integer, found `-8`");
        let quoted = parse::<u32>(parse_quote!("8")).unwrap_err();
        assert!(quoted.contains("without quotes"), "{quoted}");
        let float = parse::<u32>(parse_quote!(8.0)).unwrap_err();
        assert_eq!(float, "expected an integer, found float `8.0`");
        let constant = parse::<u32>(parse_quote!(N)).unwrap_err();
        assert!(constant.contains("literals"), "{constant}");
        let expression = parse::<u32>(parse_quote!(4096 * 2)).unwrap_err();
        assert!(expression.contains("expression `4096 * 2`"), "{expression}");
    }

    #[test]
    fn floats() {
        assert_eq!(parse::<f64>(parse_quote!(1.25)), Ok(1.25));
        assert_eq!(parse::<f64>(parse_quote!(2)), Ok(2.0));
        assert_eq!(parse::<f32>(parse_quote!(-0.5)), Ok(-0.5));
        assert_eq!(parse::<f64>(parse_quote!(1e-3)), Ok(1e-3));
        assert!(parse::<f32>(parse_quote!(1e39))
            .unwrap_err()
            .contains("does not fit"));
        assert!(parse::<f32>(parse_quote!(1e-50))
            .unwrap_err()
            .contains("rounds to 0"));
        assert_eq!(parse::<f32>(parse_quote!(0.0)), Ok(0.0));
        assert_eq!(
            parse::<f64>(parse_quote!("1.25")).unwrap_err(),
            "expected a number, found string literal `\"1.25\"`: write `1.25` without quotes"
        );
        assert!(parse::<f64>(parse_quote!(true)).is_err());
    }

    #[test]
    fn bools() {
        assert_eq!(parse::<bool>(parse_quote!(true)), Ok(true));
        assert_eq!(parse::<bool>(parse_quote!(false)), Ok(false));
        assert!(parse::<bool>(parse_quote!("true"))
            .unwrap_err()
            .contains("without quotes"));
        assert!(parse::<bool>(parse_quote!(1))
            .unwrap_err()
            .contains("`true` or `false`"));
        assert_eq!(bool::from_bare_key(), Some(true));
    }

    #[test]
    fn layouts() {
        assert_eq!(parse::<Layout>(parse_quote!(nhwc)), Ok(Layout::Nhwc));
        assert_eq!(parse::<Layout>(parse_quote!("nchw")), Ok(Layout::Nchw));
        let alias = parse::<Layout>(parse_quote!(channels_last)).unwrap_err();
        assert!(alias.contains("nhwc"), "{alias}");
        let typo = parse::<Layout>(parse_quote!(nhcw)).unwrap_err();
        assert!(typo.contains("nchw") && typo.contains("nhwc"), "{typo}");
    }

    #[test]
    fn dtypes_as_idents_or_strings() {
        assert_eq!(parse::<DType>(parse_quote!(bf16)), Ok(DType::BF16));
        assert_eq!(parse::<DType>(parse_quote!("f32")), Ok(DType::F32));
        assert_eq!(parse::<DType>(parse_quote!(r#f64)), Ok(DType::F64));
        let typo = parse::<DType>(parse_quote!(bf61)).unwrap_err();
        assert_eq!(
            typo,
            "unknown dtype `bf61`; did you mean `bf16`? expected one of: f16, bf16, f32, f64"
        );
        let alias = parse::<DType>(parse_quote!(half)).unwrap_err();
        assert!(alias.contains("did you mean `f16`?"), "{alias}");
        let wrong = parse::<DType>(parse_quote!(16)).unwrap_err();
        assert!(wrong.starts_with("unknown dtype `16`"), "{wrong}");
        let tuple = parse::<DType>(parse_quote!((bf16, f32))).unwrap_err();
        assert!(tuple.contains("found tuple"), "{tuple}");
    }

    #[test]
    fn archs() {
        assert_eq!(parse::<Arch>(parse_quote!(sm_80)), Ok(Arch::Sm80));
        assert_eq!(parse::<Arch>(parse_quote!("sm_90a")), Ok(Arch::Sm90a));
        assert_eq!(parse::<Arch>(parse_quote!(sm_90a)), Ok(Arch::Sm90a));
        assert_eq!(parse::<Arch>(parse_quote!(86)), Ok(Arch::Sm86));
        let old = parse::<Arch>(parse_quote!(sm_61)).unwrap_err();
        assert!(old.starts_with("unknown architecture `sm_61`") && old.contains("sm_90a"));
        let newer = parse::<Arch>(parse_quote!("sm_100")).unwrap_err();
        assert!(!newer.contains("did you mean"), "{newer}");
        let nick = parse::<Arch>(parse_quote!(hopper)).unwrap_err();
        assert!(nick.contains("did you mean `sm_90`?"), "{nick}");
    }

    #[test]
    fn sizes_as_pair_or_single() {
        assert_eq!(
            parse::<Size2>(parse_quote!((3, 5))),
            Ok(Size2 { h: 3, w: 5 })
        );
        assert_eq!(
            parse::<Size2>(parse_quote!([1, 7])),
            Ok(Size2 { h: 1, w: 7 })
        );
        assert_eq!(parse::<Size2>(parse_quote!(3)), Ok(Size2 { h: 3, w: 3 }));
        assert_eq!(parse::<Size2>(parse_quote!((2))), Ok(Size2 { h: 2, w: 2 }));
        let three = parse::<Size2>(parse_quote!((3, 3, 3))).unwrap_err();
        assert_eq!(three, "expected a pair `(height, width)`, found 3 elements");
        let inner = parse::<Size2>(parse_quote!((3, -1))).unwrap_err();
        assert!(inner.contains("non-negative"), "{inner}");
        let text = parse::<Size2>(parse_quote!("3x5")).unwrap_err();
        assert!(text.ends_with("write `(3, 5)`"), "{text}");
        let unquoted = parse::<Size2>(parse_quote!(3x5)).unwrap_err();
        assert!(
            unquoted.ends_with("found `3x5`: write `(3, 5)`"),
            "{unquoted}"
        );
        let suffix = parse::<Size2>(parse_quote!(3px)).unwrap_err();
        assert_eq!(suffix, "unexpected suffix `px` on a number");
        assert_eq!(parse::<u32>(parse_quote!(8u32)), Ok(8));
        assert_eq!(parse::<f32>(parse_quote!(1.5f32)), Ok(1.5));
        assert!(parse::<f32>(parse_quote!(1.5u8)).is_err());
    }

    #[test]
    fn crate_paths() {
        let CratePath(p) = parse::<CratePath>(parse_quote!("::my::ptxforge")).unwrap();
        assert_eq!(path_text(&p), "::my::ptxforge");
        let CratePath(p) = parse::<CratePath>(parse_quote!(ptxforge)).unwrap();
        assert_eq!(path_text(&p), "ptxforge");
        assert!(parse::<CratePath>(parse_quote!("not a path")).is_err());
        assert!(parse::<CratePath>(parse_quote!("a::b<c>")).is_err());
    }

    #[test]
    fn span_range_spans_first_to_last_token() {
        let nv: syn::MetaNameValue = parse_quote!(top_k = 9);
        let range = SpanRange::of(&nv);
        // Two tokens come out (first, last) whatever the input length.
        assert_eq!(range.to_token_stream().into_iter().count(), 2);
        let err = range.error("top_k = 9 exceeds experts = 8");
        assert_eq!(err.to_string(), "top_k = 9 exceeds experts = 8");
    }
}
