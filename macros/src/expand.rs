//! The pipeline every attribute runs: parse → check → generate, collecting every error on the
//! way and failing soft.

use darling::FromMeta;
use proc_macro2::TokenStream;

use crate::check;
use crate::errors::Errors;
use crate::family::Family;
use crate::generate::{self, Kernel};
use crate::parse::{args, item};

/// Expands `#[<family>(attr)] item`.
pub(crate) fn expand<F: Family>(attr: TokenStream, item: TokenStream) -> TokenStream {
    let mut errors = Errors::default();

    // Parse: what the attribute is on, then its arguments (keys, then values).
    let item = item::kernel_struct(item, F::KEYS.attr);
    if let Err(not_a_kernel) = &item {
        errors.push(not_a_kernel.error.clone());
    }
    let mut parse_errors = darling::Error::accumulator();
    let list = args::sort_out(attr, F::KEYS, &mut parse_errors);
    let args = parse_errors.handle(F::Args::from_list(&list.items));
    errors.handle(parse_errors.finish());
    let krate = list
        .krate
        .map_or_else(generate::default_crate, |arg| arg.value.0);

    // Check: the rules across arguments, once every argument has a value.
    let config = args.as_ref().and_then(F::config);
    if let (Some(args), Some(config)) = (&args, &config) {
        errors.handle(check::check::<F>(args, config));
    }

    // Generate: the kernel, or the item with stubs beside the errors.
    match (item, &args, &config, errors.finish()) {
        (Ok(item), Some(args), Some(config), Ok(())) => generate::kernel::<F>(&Kernel {
            item: &item,
            args,
            config,
            krate: &krate,
        }),
        (item, _, config, Err(errors)) => {
            generate::fail_soft::<F>(item, errors, &krate, config.as_ref())
        }
        // Every way to lack a config (missing key, bad value) records an error.
        (item, _, _, Ok(())) => generate::fail_soft::<F>(
            item,
            syn::Error::new(
                proc_macro2::Span::call_site(),
                "internal error: no configuration and no error; please report this",
            ),
            &krate,
            None,
        ),
    }
}
