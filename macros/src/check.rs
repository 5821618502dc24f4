//! Check: the rules that look at more than one argument, reported at the arguments they name.
//!
//! The rules live with the configurations in the runtime (`validate()`, shared with run-time
//! users of the configs); each violation names the argument(s) at fault, most responsible first.
//! This module runs them and points each at the first of those arguments the user wrote, so
//! `top_k = 9 exceeds experts = 8` underlines `top_k = 9`. A rule only the macro can state goes
//! in [`Family::extra_rules`]; there are none so far (the runtime covers every rule of this
//! phase).
//!
//! [`resources`] checks the built module against the target's limits (shared memory per block,
//! static and dynamic; threads per block): each entry's declared resources, at the arguments
//! that decide them ([`Family::SHARED_MEMORY_ARGS`], [`Family::THREAD_ARGS`]). The runtime's
//! `validate()` already rejects every configuration known to exceed them (conv's direct tile,
//! MoE's experts per gating block, attention's tiles), so these rules are the backstop for
//! the ones it misses rather than the first line.

use proc_macro2::Span;

use ptxforge_runtime::templates::{CompiledFamily, ConfigError, KernelFamily};

use ptxforge_runtime::Arch;

use crate::errors::Errors;
use crate::family::Family;
use crate::parse::value::SpanRange;

/// Every rule `config` violates, each at its argument's span.
pub(crate) fn check<F: Family>(args: &F::Args, config: &F::Config) -> syn::Result<()> {
    let mut errors = Errors::default();
    for rule in F::runtime_rules(config)
        .iter()
        .chain(&F::extra_rules(config))
    {
        errors.push(locate(rule, F::argument_of, |key| F::written(args, key)));
    }
    errors.finish()
}

/// Every resource limit of the target the built module exceeds, each at the arguments
/// responsible.
pub(crate) fn resources<F: Family>(
    args: &F::Args,
    config: &F::Config,
    compiled: &CompiledFamily,
) -> syn::Result<()> {
    let mut errors = Errors::default();
    for rule in resource_rules(
        KernelFamily::arch(config),
        compiled,
        F::SHARED_MEMORY_ARGS,
        F::THREAD_ARGS,
    ) {
        errors.push(locate(&rule, F::argument_of, |key| F::written(args, key)));
    }
    errors.finish()
}

/// The resource rules on `compiled` for `arch` (pure, for unit tests).
pub(crate) fn resource_rules(
    arch: Arch,
    compiled: &CompiledFamily,
    shared_memory_args: &'static [&'static str],
    thread_args: &'static [&'static str],
) -> Vec<ConfigError> {
    let mut rules = Vec::new();
    let (max_static, max_dynamic) = (
        arch.max_static_shared_bytes(),
        arch.max_dynamic_shared_bytes(),
    );
    let max_threads = arch.max_threads_per_block();
    for entry in &compiled.entries {
        let name = &entry.name;
        if entry.static_shared_bytes > max_static {
            rules.push(ConfigError::new(
                shared_memory_args,
                format!(
                    "entry `{name}` declares {} bytes of static shared memory, more than \
                     {arch}'s static maximum {max_static}",
                    entry.static_shared_bytes
                ),
            ));
        }
        let total =
            u64::from(entry.static_shared_bytes) + u64::from(entry.max_dynamic_shared_bytes);
        if total > u64::from(max_dynamic) {
            rules.push(ConfigError::new(
                shared_memory_args,
                format!(
                    "entry `{name}` needs {total} bytes of shared memory per block, more than \
                     {arch}'s maximum {max_dynamic}"
                ),
            ));
        }
        if let Some([x, y, z]) = entry.required_block {
            let threads = u64::from(x) * u64::from(y) * u64::from(z);
            if threads > u64::from(max_threads) {
                rules.push(ConfigError::new(
                    thread_args,
                    format!(
                        "entry `{name}` needs {threads} threads per block ({x} × {y} × {z}), \
                         more than {arch}'s maximum {max_threads}"
                    ),
                ));
            }
        }
    }
    rules
}

/// The error for one violated rule: at the first named argument the user wrote (the whole
/// `key = value`), mentioning the other written ones the message does not already name. When
/// only defaults are involved there is no token to point at, so it goes on the attribute and says
/// which defaults.
pub(crate) fn locate(
    rule: &ConfigError,
    argument_of: impl Fn(&str) -> Option<&'static str>,
    written: impl Fn(&str) -> Option<(SpanRange, String)>,
) -> syn::Error {
    let mut named: Vec<&'static str> = Vec::new();
    for field in &rule.fields {
        if let Some(arg) = argument_of(field) {
            if !named.contains(&arg) {
                named.push(arg);
            }
        }
    }
    let given: Vec<(&'static str, SpanRange, String)> = named
        .iter()
        .filter_map(|&arg| written(arg).map(|(span, text)| (arg, span, text)))
        .collect();
    match given.split_first() {
        Some(((_, primary, _), others)) => {
            let unmentioned: Vec<String> = others
                .iter()
                .filter(|(arg, _, text)| {
                    !mentions(&rule.message, arg) && !mentions(&rule.message, text)
                })
                .map(|(arg, _, text)| format!("`{arg} = {text}`"))
                .collect();
            let message = if unmentioned.is_empty() {
                rule.message.clone()
            } else {
                format!("{} (given {})", rule.message, unmentioned.join(", "))
            };
            primary.error(message)
        }
        None => {
            let defaults: Vec<String> = named.iter().map(|arg| format!("`{arg}`")).collect();
            let message = if defaults.is_empty() {
                rule.message.clone()
            } else {
                format!(
                    "{} (from the default {})",
                    rule.message,
                    defaults.join(", ")
                )
            };
            syn::Error::new(Span::call_site(), message)
        }
    }
}

/// Whether `message` contains `word` as a whole word (`k` is not mentioned by `block`).
fn mentions(message: &str, word: &str) -> bool {
    let is_word_char = |c: char| c.is_alphanumeric() || c == '_';
    !word.is_empty()
        && message.match_indices(word).any(|(at, _)| {
            let before = message[..at].chars().next_back();
            let after = message[at + word.len()..].chars().next();
            !before.is_some_and(is_word_char) && !after.is_some_and(is_word_char)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use darling::ast::NestedMeta;
    use darling::FromMeta;

    use crate::family::{Conv2d, Moe};
    use crate::parse::moe::MoeArgs;
    use crate::tests::{tokens, underlined};
    use ptxforge_runtime::templates::EntryInfo;

    fn parsed<A: FromMeta>(src: &str) -> A {
        A::from_list(&NestedMeta::parse_meta_list(tokens(src)).unwrap()).unwrap()
    }

    fn locate_in<F: Family>(
        src: &str,
        fields: &[&'static str],
        message: &str,
    ) -> (String, Vec<String>)
    where
        F::Args: FromMeta,
    {
        let args: F::Args = parsed(src);
        let error = locate(&ConfigError::new(fields, message), F::argument_of, |k| {
            F::written(&args, k)
        });
        (error.to_string(), underlined(src, &error))
    }

    #[test]
    fn points_at_the_whole_first_written_argument() {
        let src = "experts = 8, top_k = 9, hidden = 1, expert_dim = 1";
        let (message, under) =
            locate_in::<Moe>(src, &["top_k", "experts"], "top_k = 9 exceeds experts = 8");
        assert_eq!(message, "top_k = 9 exceeds experts = 8");
        assert_eq!(under, ["top_k = 9"]);
    }

    #[test]
    fn skips_defaults_to_a_written_argument() {
        let src = "experts = 2000, top_k = 1, hidden = 1, expert_dim = 1";
        let (message, under) = locate_in::<Moe>(
            src,
            &["arch", "experts"],
            "experts = 2000 exceeds the maximum",
        );
        assert_eq!(message, "experts = 2000 exceeds the maximum");
        assert_eq!(under, ["experts = 2000"]);
    }

    #[test]
    fn mentions_other_written_arguments_the_message_omits() {
        let src = "experts = 8, top_k = 2, hidden = 1, expert_dim = 1, arch = sm_70";
        let (message, under) =
            locate_in::<Moe>(src, &["experts", "arch", "top_k"], "too many experts = 8");
        assert_eq!(
            message,
            "too many experts = 8 (given `arch = sm_70`, `top_k = 2`)"
        );
        assert_eq!(under, ["experts = 8"]);
    }

    #[test]
    fn only_defaults_go_on_the_attribute() {
        let src = "experts = 8, top_k = 2, hidden = 1, expert_dim = 1";
        let (message, _) = locate_in::<Moe>(src, &["arch"], "needs 2048 threads");
        assert_eq!(message, "needs 2048 threads (from the default `arch`)");
    }

    #[test]
    fn config_fields_map_to_their_argument() {
        let src = "in_channels = 4, out_channels = 4, kernel = (3, 0)";
        let (message, under) =
            locate_in::<Conv2d>(src, &["kernel_w"], "kernel width = 0: must be at least 1");
        assert_eq!(message, "kernel width = 0: must be at least 1");
        assert_eq!(under, ["kernel = (3, 0)"]);
    }

    #[test]
    fn check_reports_every_rule_at_its_argument() {
        let src = "experts = 0, top_k = 0, hidden = 0, expert_dim = 0";
        let args: MoeArgs = parsed(src);
        let config = args.config().unwrap();
        let error = check::<Moe>(&args, &config).unwrap_err();
        assert_eq!(
            underlined(src, &error),
            ["experts = 0", "top_k = 0", "hidden = 0", "expert_dim = 0"]
        );
    }

    #[test]
    fn whole_word_mentions() {
        assert!(mentions("k = 7 is odd", "k"));
        assert!(!mentions("block = 48", "k"));
        assert!(mentions("n · k = 4", "n"));
        assert!(mentions("more than sm_75's maximum", "sm_75"));
        assert!(!mentions("more than sm_75's maximum", "sm_7"));
        assert!(!mentions("anything", ""));
    }

    fn module_with(entry: EntryInfo) -> CompiledFamily {
        CompiledFamily {
            ptx: String::new(),
            entries: vec![entry],
        }
    }

    fn entry(static_shared: u32, dynamic_shared: u32, block: Option<[u32; 3]>) -> EntryInfo {
        EntryInfo {
            name: "attention_forward".to_owned(),
            params: Vec::new(),
            required_block: block,
            static_shared_bytes: static_shared,
            max_dynamic_shared_bytes: dynamic_shared,
        }
    }

    const SMEM: &[&str] = &["block_m", "arch"];
    const THREADS: &[&str] = &["block_m"];

    #[test]
    fn resources_within_the_limits_pass() {
        let fits = module_with(entry(48 * 1024, 0, Some([256, 1, 1])));
        assert!(resource_rules(Arch::Sm80, &fits, SMEM, THREADS).is_empty());
        let dynamic = module_with(entry(0, 160 * 1024, Some([1024, 1, 1])));
        assert!(resource_rules(Arch::Sm80, &dynamic, SMEM, THREADS).is_empty());
    }

    #[test]
    fn resources_past_the_limits_name_the_arguments() {
        let too_much = module_with(entry(50_000, 0, Some([32, 33, 1])));
        let rules = resource_rules(Arch::Sm80, &too_much, SMEM, THREADS);
        let messages: Vec<&str> = rules.iter().map(|r| r.message.as_str()).collect();
        assert_eq!(
            messages,
            [
                "entry `attention_forward` declares 50000 bytes of static shared memory, more \
                 than sm_80's static maximum 49152",
                "entry `attention_forward` needs 1056 threads per block (32 × 33 × 1), more \
                 than sm_80's maximum 1024",
            ]
        );
        assert_eq!(rules[0].fields, SMEM);
        assert_eq!(rules[1].fields, THREADS);
        let dynamic = module_with(entry(0, 300 * 1024, None));
        let rules = resource_rules(Arch::Sm70, &dynamic, SMEM, THREADS);
        assert_eq!(rules.len(), 1);
        assert!(rules[0]
            .message
            .contains("307200 bytes of shared memory per block"));
    }

    #[test]
    fn resource_errors_point_at_the_written_argument() {
        use crate::family::Attention;
        use crate::parse::attention::AttentionArgs;
        let src = "head_dim = 64, block_m = 256, arch = sm_70";
        let args: AttentionArgs = parsed(src);
        let config = args.config().unwrap();
        let rules = resource_rules(
            Arch::Sm70,
            &module_with(entry(0, 0, Some([2048, 1, 1]))),
            Attention::SHARED_MEMORY_ARGS,
            Attention::THREAD_ARGS,
        );
        let error = locate(&rules[0], Attention::argument_of, |k| {
            Attention::written(&args, k)
        });
        assert_eq!(underlined(src, &error), ["block_m = 256"]);
        assert!(config.validate().is_ok() || config.validate().is_err());
    }
}
