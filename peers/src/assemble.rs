//! Assembling the peers' PTX with NVIDIA's ptxas (through `ptxforge_runtime::ptxas`).

use std::path::PathBuf;

use ptxforge_runtime::ptxas::{self, PtxasError};
use ptxforge_runtime::Arch;

/// Locates ptxas: `$PTXAS`, `ptxas` on `PATH`, then the copy `cargo xtask test` installs under
/// the repository's `target/tools/`.
pub fn locate() -> Option<PathBuf> {
    ptxas::locate().or_else(|| {
        let installed = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join("target")
            .join("tools")
            .join("ptxas");
        installed.is_file().then_some(installed)
    })
}

/// The `ptxas --version` release line, e.g. `Cuda compilation tools, release 12.9, V12.9.86`.
pub fn version(path: &PathBuf) -> Option<String> {
    let out = std::process::Command::new(path)
        .arg("--version")
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.contains("release"))
        .map(str::to_string)
}

/// The "assembles?" cell: `yes (N regs)`, `no: <first error>`, or why it was not tried.
pub fn check(ptxas_path: Option<&PathBuf>, ptx: &str) -> String {
    let Some(path) = ptxas_path else {
        return "not checked (no ptxas: set PTXAS)".to_string();
    };
    let scratch = std::env::temp_dir().join(format!("ptxforge-peers-{}", std::process::id()));
    match ptxas::assemble(path, ptx, Arch::Sm80, &scratch) {
        Ok(report) => {
            let mut cell = String::from("yes");
            if let Some(e) = report.entries.first() {
                cell.push_str(&format!(" ({} regs", e.registers));
                if e.spill_stores + e.spill_loads > 0 {
                    cell.push_str(&format!(
                        ", spills {} B st / {} B ld",
                        e.spill_stores, e.spill_loads
                    ));
                }
                cell.push(')');
            }
            if !report.warnings.is_empty() {
                cell.push_str(&format!("; warnings: {}", report.warnings.join(" / ")));
            }
            cell
        }
        Err(PtxasError::Rejected { output, .. }) => {
            let first = output
                .lines()
                .find(|l| l.contains("error"))
                .or_else(|| output.lines().next())
                .unwrap_or("rejected")
                .trim();
            format!("no: {}", strip_path(first))
        }
        Err(e) => format!("not checked ({e})"),
    }
}

/// Drops the scratch file path from a ptxas message (`ptxas /tmp/…/x.ptx, line 3; error : …`).
fn strip_path(line: &str) -> String {
    let line = line.split_whitespace().collect::<Vec<_>>().join(" ");
    let line = line.as_str();
    match (line.find("line "), line.find(".ptx")) {
        (Some(l), Some(p)) if p < l => format!("ptxas {}", &line[l..]),
        _ => line.to_string(),
    }
}
