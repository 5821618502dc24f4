//! Tells the interpreter whether it is being compiled without optimisation (a dependent crate's
//! default debug profile: the workspace's `opt-level` overrides do not reach other crates), so
//! that it can say once how to fix that (`Device::launch`).
fn main() {
    println!("cargo::rustc-check-cfg=cfg(ptxforge_sim_unoptimized)");
    println!("cargo::rerun-if-changed=build.rs");
    if std::env::var("OPT_LEVEL").is_ok_and(|level| level == "0") {
        println!("cargo::rustc-cfg=ptxforge_sim_unoptimized");
    }
}
