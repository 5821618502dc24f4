//! Compile-time behaviour of the kernel attributes: every configuration rule and misuse is a
//! compile error at the offending token (`tests/ui/<family>/*.rs` with blessed `.stderr`); with
//! an error, the stub wrappers keep call sites compiling (`misuse/stubs_*`); buffers of the wrong
//! dtype or a bias the configuration lacks do not compile; and valid configurations compile,
//! expose their checked `CONFIG`, and run their launch wrappers on the CPU backend against the
//! host references (`tests/ui/pass/*_launch.rs`: trybuild runs each `main`).
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
