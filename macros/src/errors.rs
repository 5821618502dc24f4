//! Collecting every error of one expansion into one `syn::Error` (which keeps a start and end
//! span per message, so `key = value` ranges survive), in the order they were found.

/// Errors found so far.
#[derive(Debug, Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    pub fn push(&mut self, error: impl Into<syn::Error>) {
        let error = error.into();
        match &mut self.0 {
            Some(all) => all.combine(error),
            None => self.0 = Some(error),
        }
    }

    /// The value of `result`, recording its error.
    pub fn handle<T, E: Into<syn::Error>>(&mut self, result: Result<T, E>) -> Option<T> {
        result.map_err(|e| self.push(e)).ok()
    }

    pub fn finish(self) -> syn::Result<()> {
        self.0.map_or(Ok(()), Err)
    }
}
