//! Examples are tests: every `examples/*.rs` compares its kernels with the host reference and
//! exits non-zero on a FAIL, so `cargo xtask test` runs each one and stops at the first failure.

use std::path::Path;

/// Names of the examples (`examples/<name>.rs`), sorted so the run order is stable.
fn names(root: &Path) -> Result<Vec<String>, String> {
    let dir = root.join("examples");
    let entries = std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "rs"))
        .filter_map(|p| Some(p.file_stem()?.to_str()?.to_owned()))
        .collect();
    names.sort();
    if names.is_empty() {
        return Err(format!("no examples found in {}", dir.display()));
    }
    Ok(names)
}

/// `cargo run --example <name>` for each example; the first non-zero exit is the error.
pub fn run_all() -> Result<(), String> {
    for name in names(&super::workspace_root())? {
        super::run(super::cargo().args(["run", "--quiet", "--example", &name]))
            .map_err(|e| format!("example {name}: {e}"))?;
    }
    Ok(())
}
