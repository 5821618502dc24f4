//! Assembles every kernel of the emit matrix with NVIDIA's ptxas for the target it claims.
//! Fails on any error, warning or register spill. Skips loudly when ptxas is missing, unless
//! `PTXFORGE_REQUIRE_PTXAS=1`. Writes a summary to `$PTXFORGE_PTXAS_REPORT` when set.

use std::path::PathBuf;
use std::sync::Mutex;

use ptxforge::runtime::matrix::{matrix, MatrixEntry};
use ptxforge::runtime::ptxas::{assemble, locate, required, AssembleReport};

#[test]
fn every_matrix_kernel_assembles_without_warnings_or_spills() {
    let Some(ptxas) = locate() else {
        assert!(
            !required(),
            "PTXFORGE_REQUIRE_PTXAS=1 but ptxas was not found (set PTXAS)"
        );
        eprintln!("SKIPPED: ptxas not found; set PTXAS or run `cargo xtask test` to install it");
        return;
    };
    let entries = matrix().expect("the matrix builds");
    assert!(!entries.is_empty());
    let scratch = std::env::temp_dir().join(format!("ptxforge-ptxas-{}", std::process::id()));
    let failures = Mutex::new(Vec::new());
    let results: Mutex<Vec<(MatrixEntry, AssembleReport)>> = Mutex::new(Vec::new());
    let next = Mutex::new(entries.into_iter());
    let workers = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .min(8);
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let Some(entry) = next.lock().unwrap().next() else {
                    break;
                };
                match assemble(&ptxas, &entry.ptx, entry.arch, &scratch) {
                    Err(e) => failures
                        .lock()
                        .unwrap()
                        .push(format!("{}: {e}", entry.path())),
                    Ok(report) => {
                        for w in &report.warnings {
                            failures
                                .lock()
                                .unwrap()
                                .push(format!("{}: {w}", entry.path()));
                        }
                        for e in &report.entries {
                            if e.spill_stores + e.spill_loads > 0 {
                                failures.lock().unwrap().push(format!(
                                    "{}: entry {} spills ({} B stores, {} B loads)",
                                    entry.path(),
                                    e.entry,
                                    e.spill_stores,
                                    e.spill_loads
                                ));
                            }
                        }
                        results.lock().unwrap().push((entry, report));
                    }
                }
            });
        }
    });
    let _ = std::fs::remove_dir_all(&scratch);
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{} kernels failed ptxas:\n{}",
        failures.len(),
        failures.join("\n")
    );
    let mut results = results.into_inner().unwrap();
    results.sort_by_key(|(entry, _)| entry.path());
    let kernels: usize = results.iter().map(|(_, r)| r.entries.len()).sum();
    let mut summary = format!(
        "ptxas: assembled {} modules ({kernels} kernel×target pairs), 0 errors, 0 warnings, 0 spills\n",
        results.len()
    );
    summary.push_str("module | entry | registers | shared B | stack B\n");
    for (entry, report) in &results {
        for e in &report.entries {
            summary.push_str(&format!(
                "{} | {} | {} | {} | {}\n",
                entry.path(),
                e.entry,
                e.registers,
                e.shared_bytes,
                e.stack_bytes
            ));
        }
    }
    eprintln!("{}", summary.lines().next().unwrap_or_default());
    if let Some(path) = std::env::var_os("PTXFORGE_PTXAS_REPORT") {
        std::fs::write(PathBuf::from(path), summary).expect("write the ptxas report");
    }
}
