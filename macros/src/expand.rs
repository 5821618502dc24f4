//! The pipeline every attribute runs: parse → check → build → check resources → generate,
//! collecting every error on the way and failing soft.

use darling::FromMeta;
use proc_macro2::{Span, TokenStream};
use syn::{ItemStruct, Path};

use ptxforge_runtime::templates::{CompiledFamily, TemplateError};
use ptxforge_runtime::Arch;

use crate::check;
use crate::errors::Errors;
use crate::family::Family;
use crate::generate::{self, Kernel};
use crate::parse::item::NotAKernelItem;
use crate::parse::targets::{self, Targets};
use crate::parse::{args, item};

/// Expands `#[<family>(attr)] item`.
pub(crate) fn expand<F: Family>(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand_with::<F>(attr, item, F::compile)
}

/// [`expand`] with the module built by `compile` (tests inject failures).
pub(crate) fn expand_with<F: Family>(
    attr: TokenStream,
    item: TokenStream,
    compile: impl FnOnce(&F::Config) -> Result<CompiledFamily, TemplateError>,
) -> TokenStream {
    let Analysis {
        item,
        args,
        config,
        krate,
        targets,
        errors,
    } = analyse::<F>(attr, item);
    match (item, &args, &config, errors.finish()) {
        (Ok(item), Some(args), Some(config), Ok(())) => {
            let built = build::<F>(args, config, compile).and_then(|compiled| {
                Ok((compiled, build_targets::<F>(args, config, targets.extra())?))
            });
            match built {
                Ok((compiled, extra)) => generate::kernel::<F>(&Kernel {
                    item: &item,
                    args,
                    config,
                    compiled: &compiled,
                    extra: &extra,
                    krate: &krate,
                }),
                Err(errors) => generate::fail_soft::<F>(Ok(item), errors, &krate, Some(config)),
            }
        }
        (item, _, config, Err(errors)) => {
            generate::fail_soft::<F>(item, errors, &krate, config.as_ref())
        }
        // Unreachable: every way to lack a configuration (missing key, bad value) records an
        // error. Still fail soft rather than panic.
        (item, _, _, Ok(())) => {
            let error = syn::Error::new(
                Span::call_site(),
                "internal error: no configuration and no error; please report this",
            );
            generate::fail_soft::<F>(item, error, &krate, None)
        }
    }
}

/// Builds the module of a checked configuration (the runtime template: build, validate, emit)
/// and checks its resources against the target. A build failure goes on the attribute with the
/// template's reason; a resource rule at the arguments responsible (see [`check::resources`]).
fn build<F: Family>(
    args: &F::Args,
    config: &F::Config,
    compile: impl FnOnce(&F::Config) -> Result<CompiledFamily, TemplateError>,
) -> syn::Result<CompiledFamily> {
    let compiled = compile(config).map_err(|error| {
        syn::Error::new(
            Span::call_site(),
            format!(
                "the `#[{}]` kernels cannot be built for this configuration: {error}",
                F::KEYS.attr
            ),
        )
    })?;
    check::resources::<F>(args, config, &compiled)?;
    Ok(compiled)
}

/// The modules of the targets after the first of `arch = [..]`: each target's configuration
/// checked and built like the primary one, its errors reported at that target in the list.
fn build_targets<F: Family>(
    args: &F::Args,
    config: &F::Config,
    extra: &[(Arch, Span)],
) -> syn::Result<Vec<generate::Target<F>>> {
    let mut errors = Errors::default();
    let mut built = Vec::new();
    for &(arch, span) in extra {
        let target = F::with_arch(config, arch);
        let result =
            check::check::<F>(args, &target).and_then(|()| build::<F>(args, &target, F::compile));
        match result {
            Ok(compiled) => built.push(generate::Target {
                arch,
                config: target,
                compiled,
            }),
            Err(e) => errors.push(syn::Error::new(span, format!("for target `{arch}`: {e}"))),
        }
    }
    errors.finish().map(|()| built)
}

/// What parse and check made of one attribute.
pub(crate) struct Analysis<F: Family> {
    pub item: Result<ItemStruct, NotAKernelItem>,
    pub args: Option<F::Args>,
    /// The configuration, when every required argument has a value (it may break rules).
    pub config: Option<F::Config>,
    pub krate: Path,
    /// `arch = [..]`'s targets, lowest (the one `config` has) first; empty for one target.
    pub targets: Targets,
    /// Everything wrong, in source order within each stage.
    pub errors: Errors,
}

/// Parse and check `#[<family>(attr)] item`.
pub(crate) fn analyse<F: Family>(attr: TokenStream, item: TokenStream) -> Analysis<F> {
    let mut errors = Errors::default();

    // Parse: what the attribute is on, then its arguments (keys, then values).
    let item = item::kernel_struct(item, F::KEYS.attr);
    if let Err(not_a_kernel) = &item {
        errors.push(not_a_kernel.error.clone());
    }
    let (attr, targets) = targets::split(attr, &mut errors);
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

    Analysis {
        item,
        args,
        config,
        krate,
        targets,
        errors,
    }
}
