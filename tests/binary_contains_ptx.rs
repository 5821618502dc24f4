//! The `const PTX` sits in the built program: builds `examples/moe_layer` (already built by
//! `cargo test`, so this is a no-op build in the usual case) into the same target directory and
//! finds the module the runtime builds for the example's configuration, byte for byte, and each
//! `.entry` name, in the executable's bytes.

use std::path::PathBuf;
use std::process::Command;

use ptxforge::runtime::templates::moe::{Ffn, MoeConfig};
use ptxforge::runtime::templates::KernelFamily;
use ptxforge::runtime::DType;

/// `#[moe_kernel(experts = 8, top_k = 2, hidden = 64, expert_dim = 96, capacity_factor = 1.25,
/// dtype = bf16, ffn = swiglu, arch = sm_80)]` of `examples/moe_layer.rs`.
fn example_config() -> MoeConfig {
    MoeConfig {
        capacity_factor: Some(1.25),
        dtype: DType::BF16,
        ffn: Ffn::Swiglu,
        ..MoeConfig::new(8, 2, 64, 96)
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn moe_layer_example_carries_its_ptx() {
    let target_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("CARGO_TARGET_TMPDIR is <target>/tmp")
        .to_path_buf();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let status = Command::new(cargo)
        // `--workspace` resolves features as `cargo test --workspace` does, so the build is a no-op there.
        .args(["build", "--quiet", "--workspace", "--example", "moe_layer"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("CARGO_TARGET_DIR", &target_dir)
        .status()
        .expect("cargo runs");
    assert!(status.success(), "cargo build --example moe_layer failed");
    let exe = target_dir
        .join("debug")
        .join("examples")
        .join(format!("moe_layer{}", std::env::consts::EXE_SUFFIX));
    let bytes = std::fs::read(&exe).unwrap_or_else(|e| panic!("{}: {e}", exe.display()));

    let module = example_config().compile().expect("valid configuration");
    for entry in &module.entries {
        let declaration = format!(".visible .entry {}(", entry.name);
        assert!(
            contains(&bytes, declaration.as_bytes()),
            "`{declaration}` not in {}",
            exe.display()
        );
    }
    assert!(
        contains(&bytes, module.ptx.as_bytes()),
        "the whole module ({} bytes) is not in {}",
        module.ptx.len(),
        exe.display()
    );
}
