//! Examples are tests: every `examples/*.rs` compares its kernels with the host reference and
//! exits non-zero on a FAIL, so `cargo xtask test` runs each one and stops at the first failure.

use std::path::Path;

/// Names of the examples (`examples/<name>.rs`), sorted so the run order is stable.
fn names(root: &Path) -> Result<Vec<String>, String> {
    let gated = feature_gated(root)?;
    let dir = root.join("examples");
    let entries = std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "rs"))
        .filter_map(|p| Some(p.file_stem()?.to_str()?.to_owned()))
        .filter(|name| !gated.contains(name))
        .collect();
    names.sort();
    if names.is_empty() {
        return Err(format!("no examples found in {}", dir.display()));
    }
    Ok(names)
}

/// Examples the facade's `Cargo.toml` declares with `required-features` (the CUDA ones, run by
/// `cargo xtask test --gpu` instead).
fn feature_gated(root: &Path) -> Result<Vec<String>, String> {
    let path = root.join("Cargo.toml");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(text
        .split("[[example]]")
        .skip(1)
        .filter(|block| block.contains("required-features"))
        .filter_map(|block| {
            let line = block.lines().find(|l| l.trim_start().starts_with("name"))?;
            Some(line.split('"').nth(1)?.to_owned())
        })
        .collect())
}

/// `cargo run --example <name>` for each example; the first non-zero exit is the error.
pub fn run_all() -> Result<(), String> {
    for name in names(&super::workspace_root())? {
        super::run(super::cargo().args(["run", "--quiet", "--example", &name]))
            .map_err(|e| format!("example {name}: {e}"))?;
    }
    Ok(())
}
