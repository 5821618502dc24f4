//! Whole-pipeline tests driving [`crate::expand::expand`] with `quote!`d tokens, and helpers
//! shared by the unit tests.

mod expand;
mod fuzz;
mod timing;

use proc_macro2::TokenStream;

/// Parses one line of source into tokens with real columns (`span-locations`).
pub(crate) fn tokens(src: &str) -> TokenStream {
    src.parse().expect("test source lexes")
}

/// The text of `src` (one line) each message of `error` underlines, in order.
pub(crate) fn underlined(src: &str, error: &syn::Error) -> Vec<String> {
    error
        .clone()
        .into_iter()
        .map(|e| {
            let span = e.span();
            let (start, end) = (span.start(), span.end());
            assert_eq!(start.line, end.line, "one-line sources only");
            src.chars()
                .skip(start.column)
                .take(end.column - start.column)
                .collect()
        })
        .collect()
}
