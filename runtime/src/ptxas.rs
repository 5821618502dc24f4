//! Running NVIDIA's `ptxas` on emitted PTX: the first layer of verification.
//!
//! The assembler is found through `PTXAS` (a path) or `ptxas` on `PATH`; `cargo xtask test`
//! installs a pinned copy from PyPI and exports `PTXAS`. With `PTXFORGE_REQUIRE_PTXAS=1` a
//! missing assembler is an error; otherwise callers skip loudly.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::arch::Arch;

/// What `ptxas -v` reported for one entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EntryReport {
    pub entry: String,
    pub registers: u32,
    pub spill_stores: u32,
    pub spill_loads: u32,
    pub stack_bytes: u32,
    pub shared_bytes: u32,
}

/// The result of assembling one module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssembleReport {
    pub entries: Vec<EntryReport>,
    /// Lines ptxas printed that are warnings (any is a failure in the harness).
    pub warnings: Vec<String>,
}

/// Why assembling failed.
#[derive(Debug, thiserror::Error)]
pub enum PtxasError {
    #[error("could not run ptxas at {path}: {source}")]
    Spawn {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("could not write the PTX to a temporary file: {0}")]
    Io(#[from] std::io::Error),
    #[error("ptxas rejected the module for {arch}:\n{output}")]
    Rejected { arch: Arch, output: String },
}

/// Whether a missing ptxas must fail the run (`PTXFORGE_REQUIRE_PTXAS=1`).
pub fn required() -> bool {
    std::env::var("PTXFORGE_REQUIRE_PTXAS").is_ok_and(|v| v == "1")
}

/// Locates ptxas: `$PTXAS`, then `ptxas` on `PATH`.
pub fn locate() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("PTXAS").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("ptxas"))
        .find(|p| p.is_file())
}

/// Assembles `ptx` for `arch` with `ptxas -v`, writing scratch files under `scratch_dir`.
pub fn assemble(
    ptxas: &Path,
    ptx: &str,
    arch: Arch,
    scratch_dir: &Path,
) -> Result<AssembleReport, PtxasError> {
    std::fs::create_dir_all(scratch_dir)?;
    let stem = format!("{:016x}", fnv1a(ptx.as_bytes()) ^ arch as u64);
    let input = scratch_dir.join(format!("{stem}.ptx"));
    let output = scratch_dir.join(format!("{stem}.cubin"));
    std::fs::write(&input, ptx)?;
    let out = Command::new(ptxas)
        .arg(format!("-arch={arch}"))
        .arg("-v")
        .arg(&input)
        .arg("-o")
        .arg(&output)
        .output()
        .map_err(|source| PtxasError::Spawn {
            path: ptxas.to_path_buf(),
            source,
        })?;
    let _ = std::fs::remove_file(&input);
    let _ = std::fs::remove_file(&output);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        return Err(PtxasError::Rejected { arch, output: text });
    }
    Ok(parse_verbose(&text))
}

impl AssembleReport {
    /// What makes the module fail a harness, one line each, prefixed with `name`: every
    /// warning and every entry that spills.
    pub fn findings(&self, name: &str) -> Vec<String> {
        let warnings = self.warnings.iter().map(|w| format!("{name}: {w}"));
        let spills = self
            .entries
            .iter()
            .filter(|e| e.spill_stores + e.spill_loads > 0)
            .map(|e| {
                format!(
                    "{name}: entry {} spills ({} B stores, {} B loads)",
                    e.entry, e.spill_stores, e.spill_loads
                )
            });
        warnings.chain(spills).collect()
    }
}

/// The assembler for a test harness: located, or `None` after saying the test is skipped;
/// panics when `PTXFORGE_REQUIRE_PTXAS=1` and none is found.
pub fn locate_or_skip() -> Option<PathBuf> {
    let found = locate();
    if found.is_none() {
        assert!(
            !required(),
            "PTXFORGE_REQUIRE_PTXAS=1 but ptxas was not found"
        );
        eprintln!("SKIPPED: ptxas not found; set PTXAS");
    }
    found
}

/// Assembles one module per item (`module` gives its name, target and PTX, or the error that
/// kept it from building) in a scratch directory `tag` under the temp dir, and returns what
/// fails the harness, one line each: build errors, ptxas rejections and every
/// [`AssembleReport::findings`]. `inspect` sees each assembled module's report.
pub fn assemble_each<T>(
    ptxas: &Path,
    tag: &str,
    items: impl IntoIterator<Item = T>,
    module: impl Fn(&T) -> (String, Arch, Result<String, String>),
    mut inspect: impl FnMut(&T, &str, &AssembleReport),
) -> Vec<String> {
    let scratch = std::env::temp_dir().join(format!("ptxforge-{tag}-{}", std::process::id()));
    let mut failures = Vec::new();
    for item in items {
        let (name, arch, ptx) = module(&item);
        let report =
            ptx.and_then(|ptx| assemble(ptxas, &ptx, arch, &scratch).map_err(|e| e.to_string()));
        match report {
            Ok(report) => {
                failures.extend(report.findings(&name));
                inspect(&item, &name, &report);
            }
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    failures
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Parses `ptxas -v` output into per-entry figures and warnings.
pub fn parse_verbose(text: &str) -> AssembleReport {
    let mut entries: Vec<EntryReport> = Vec::new();
    let mut warnings = Vec::new();
    for line in text.lines() {
        if line.contains("warning") {
            warnings.push(line.trim().to_string());
        } else if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            let name = rest.split('\'').next().unwrap_or_default();
            entries.push(EntryReport {
                entry: name.to_string(),
                ..EntryReport::default()
            });
        } else if let Some(e) = entries.last_mut() {
            if line.contains("bytes stack frame") {
                e.stack_bytes = number_before(line, "bytes stack frame");
                e.spill_stores = number_before(line, "bytes spill stores");
                e.spill_loads = number_before(line, "bytes spill loads");
            } else if line.contains("Used") && line.contains("registers") {
                e.registers = number_before(line, "registers");
                e.shared_bytes = number_before(line, "bytes smem");
            }
        }
    }
    AssembleReport { entries, warnings }
}

/// The integer just before `marker` in `line` (0 when absent).
fn number_before(line: &str, marker: &str) -> u32 {
    line.split(marker)
        .next()
        .filter(|head| head.len() < line.len())
        .and_then(|head| {
            head.split(|c: char| !c.is_ascii_digit())
                .rfind(|s| !s.is_empty())
        })
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_verbose_output() {
        let text = "ptxas info    : 0 bytes gmem\n\
            ptxas info    : Compiling entry function 'gemm' for 'sm_80'\n\
            ptxas info    : Function properties for gemm\n    \
            16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\n\
            ptxas info    : Used 30 registers, used 1 barriers, 2048 bytes smem, 388 bytes cmem[0]\n\
            ptxas warning : Something odd\n";
        let r = parse_verbose(text);
        assert_eq!(
            r.entries,
            vec![EntryReport {
                entry: "gemm".into(),
                registers: 30,
                spill_stores: 8,
                spill_loads: 4,
                stack_bytes: 16,
                shared_bytes: 2048
            }]
        );
        assert_eq!(
            r.warnings,
            vec!["ptxas warning : Something odd".to_string()]
        );
    }
}
