//! Assembles every conv2d module of the emit matrix ([`matrix_configs`]: every dtype ×
//! representative shape × target, so every tensor-core implicit GEMM — forward in both
//! layouts, backward-data, backward-filter — and every CUDA-core entry) with ptxas, and fails
//! on errors, warnings or spills. Prints `ptxas -v` registers and shared memory of the
//! tensor-core entries. Skips loudly when ptxas is missing, unless `PTXFORGE_REQUIRE_PTXAS=1`.

use ptxforge_runtime::ptxas::{assemble, locate, required};
use ptxforge_runtime::templates::conv::kernels::matrix_configs;
use ptxforge_runtime::templates::KernelFamily;

#[test]
fn conv_modules_assemble_without_warnings_or_spills() {
    let Some(ptxas) = locate() else {
        assert!(!required(), "PTXFORGE_REQUIRE_PTXAS=1 but no ptxas");
        eprintln!("SKIPPED: ptxas not found; set PTXAS");
        return;
    };
    let scratch = std::env::temp_dir().join(format!("ptxforge-conv-{}", std::process::id()));
    let mut failures = Vec::new();
    let mut tensor_core_entries = 0;
    for cfg in matrix_configs() {
        let name = format!("{}.{}", cfg.matrix_name(), cfg.arch);
        let report = cfg
            .compile()
            .map_err(|e| e.to_string())
            .and_then(|c| assemble(&ptxas, &c.ptx, cfg.arch, &scratch).map_err(|e| e.to_string()));
        let report = match report {
            Ok(report) => report,
            Err(e) => {
                failures.push(format!("{name}: {e}"));
                continue;
            }
        };
        failures.extend(report.findings(&name));
        for e in report
            .entries
            .iter()
            .filter(|e| e.entry.ends_with("implicit_gemm"))
        {
            tensor_core_entries += 1;
            println!(
                "{name:<44} {:<32} regs {:>3} smem {:>6} spill {}/{}",
                e.entry, e.registers, e.shared_bytes, e.spill_stores, e.spill_loads
            );
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        tensor_core_entries > 0,
        "no tensor-core implicit GEMM assembled"
    );
}
