//! Compile-time behaviour of the kernel attributes: every configuration rule and misuse is a
//! compile error at the offending token (`tests/ui/<family>/*.rs` with blessed `.stderr`), and
//! valid configurations compile and expose their checked `CONFIG` (`tests/ui/pass/*.rs`).
//!
//! Bless changed diagnostics with `TRYBUILD=overwrite cargo test --test ui`, then review the
//! `.stderr` diff: the caret must sit under the argument at fault.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    for family in ["moe", "nf4", "attention", "conv", "misuse"] {
        t.compile_fail(format!("tests/ui/{family}/*.rs"));
    }
    t.pass("tests/ui/pass/*.rs");
}
