//! Malformed argument lists from a seeded generator: every one must expand to either a kernel
//! (with `CONFIG`) or the item plus `compile_error!`s, never panic, and always be valid Rust
//! items.

use std::panic::{catch_unwind, AssertUnwindSafe};

use proc_macro2::TokenStream;

use crate::expand::expand;
use crate::family::{Attention, Conv2d, Family, Moe, Nf4};

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

const KEYS: &[&str] = &[
    "experts",
    "top_k",
    "hidden",
    "expert_dim",
    "capacity_factor",
    "dtype",
    "ffn",
    "normalize_topk",
    "allow_tf32",
    "arch",
    "n",
    "k",
    "block",
    "double_quant",
    "head_dim",
    "block_m",
    "block_n",
    "causal",
    "in_channels",
    "out_channels",
    "kernel",
    "stride",
    "padding",
    "dilation",
    "groups",
    "bias",
    "crate",
    "expers",
    "topk",
    "num_experts",
    "expérts",
    "ñ",
    "日本",
    "r#type",
    "self",
    "true",
    "a::b",
    "::experts",
    "_",
    "KERNEL",
];

const VALUES: &[&str] = &[
    "0",
    "1",
    "2",
    "3",
    "8",
    "64",
    "128",
    "4096",
    "14336",
    "4294967295",
    "4294967296",
    "99999999999999999999999999999999999999999",
    "-1",
    "-0",
    "0x10",
    "0b101",
    "1_000",
    "8u32",
    "8i8",
    "1.25",
    "-1.5",
    "0.0",
    "1e400",
    "1e-50",
    "1e-45",
    "2048.0",
    "\"bf16\"",
    "\"\"",
    "\"sm_80\"",
    "\"sm_100\"",
    "\"not a path\"",
    "\"::ptxforge\"",
    "\"a::b<c>\"",
    "\"3x3\"",
    "\"1.25\"",
    "\"true\"",
    "true",
    "false",
    "bf16",
    "f16",
    "f32",
    "f64",
    "f17",
    "sm_70",
    "sm_90a",
    "sm_61",
    "swiglu",
    "linear",
    "relu",
    "N",
    "(3, 3)",
    "(3,)",
    "()",
    "((3))",
    "[1, 2]",
    "(3, (4, 5))",
    "(0, 1)",
    "(1, 7)",
    "{3}",
    "'a'",
    "b\"x\"",
    "a::b",
    "::ptxforge",
    "1 + 2",
    "-",
    "!",
    "-(-1)",
    "- 1.0",
    "3 3",
    "= 3",
    "#",
    "..",
    "&x",
    "x.y",
    "f(1)",
];

const SEPARATORS: &[&str] = &["=", "=", "=", "=", "==", ":", "", "=>", "+="];

fn soup(rng: &mut Rng) -> String {
    let mut out = String::new();
    let args = rng.below(9);
    for i in 0..args {
        if i > 0 || rng.chance(5) {
            out.push_str(if rng.chance(5) { ",," } else { ", " });
        }
        match rng.below(10) {
            // A bare literal or word.
            0 => out.push_str(rng.pick(VALUES)),
            // A list form `key(value)`.
            1 => {
                let (key, value) = (rng.pick(KEYS), rng.pick(VALUES));
                out.push_str(&format!("{key}({value})"));
            }
            // A bare key.
            2 => out.push_str(rng.pick(KEYS)),
            _ => {
                let key = rng.pick(KEYS);
                let sep = rng.pick(SEPARATORS);
                let value = if rng.chance(10) { "" } else { rng.pick(VALUES) };
                out.push_str(&format!("{key} {sep} {value}"));
            }
        }
    }
    if rng.chance(20) {
        out.push(',');
    }
    if rng.chance(5) {
        out = format!("({out})");
    }
    out
}

const ITEMS: &[&str] = &[
    "pub struct Fuzz;",
    "struct Fuzz {}",
    "struct Fuzz { x: u32 }",
    "struct Fuzz(u8, u8);",
    "enum Fuzz { A }",
    "fn fuzz() {}",
    "struct Fuzz<T>(T);",
];

fn check_one<F: Family>(attr: &TokenStream, item: &TokenStream, case: &str) {
    let expanded = catch_unwind(AssertUnwindSafe(|| expand::<F>(attr.clone(), item.clone())))
        .unwrap_or_else(|_| panic!("#[{}({case})] panicked", F::KEYS.attr));
    let text = expanded.to_string();
    let file = syn::parse2::<syn::File>(expanded).unwrap_or_else(|e| {
        panic!(
            "#[{}({case})] expanded to invalid Rust ({e}): {text}",
            F::KEYS.attr
        )
    });
    let has_error = text.contains("compile_error");
    let has_config = text.contains("pub const CONFIG");
    assert!(
        has_error || has_config,
        "#[{}({case})] gave neither a kernel nor an error: {text}",
        F::KEYS.attr
    );
    // The annotated item is always kept.
    assert!(
        !file.items.is_empty(),
        "#[{}({case})] dropped the item",
        F::KEYS.attr
    );
}

#[test]
fn malformed_argument_lists_never_panic() {
    let mut rng = Rng(0x5eed_1234_abcd_0042);
    let mut lexed = 0;
    let mut valid = 0;
    for _ in 0..600 {
        let case = soup(&mut rng);
        // Unbalanced delimiters never reach a macro: the compiler rejects them first.
        let Ok(attr) = case.parse::<TokenStream>() else {
            continue;
        };
        lexed += 1;
        let item: TokenStream = rng.pick(ITEMS).parse().unwrap();
        check_one::<Moe>(&attr, &item, &case);
        check_one::<Nf4>(&attr, &item, &case);
        check_one::<Attention>(&attr, &item, &case);
        check_one::<Conv2d>(&attr, &item, &case);
        if !expand::<Nf4>(attr, "struct X;".parse().unwrap())
            .to_string()
            .contains("compile_error")
        {
            valid += 1;
        }
    }
    assert!(lexed >= 300, "only {lexed} cases lexed");
    // The generator is not so hostile that nothing is ever valid, nor so kind that most are.
    assert!(valid < lexed / 2, "{valid} of {lexed} valid");
}

#[test]
fn near_valid_lists_are_mostly_accepted_or_precisely_rejected() {
    // Valid MoE arguments with one mutation each: every one gives exactly one kind of outcome.
    let base = [
        ("experts", "8"),
        ("top_k", "2"),
        ("hidden", "64"),
        ("expert_dim", "128"),
    ];
    let mut rng = Rng(42);
    for _ in 0..300 {
        let mut parts: Vec<String> = base.iter().map(|(k, v)| format!("{k} = {v}")).collect();
        let at = rng.below(parts.len());
        match rng.below(4) {
            0 => parts[at] = format!("{} = {}", base[at].0, rng.pick(VALUES)),
            1 => parts[at] = format!("{} = {}", rng.pick(KEYS), base[at].1),
            2 => parts.push(format!("{} = {}", rng.pick(KEYS), rng.pick(VALUES))),
            _ => {
                parts.remove(at);
            }
        }
        let case = parts.join(", ");
        let Ok(attr) = case.parse::<TokenStream>() else {
            continue;
        };
        check_one::<Moe>(&attr, &"struct M;".parse().unwrap(), &case);
    }
}
