//! Assembles every conv2d module of the emit matrix ([`matrix_configs`]: every dtype ×
//! representative shape × target, so every tensor-core implicit GEMM — forward in both
//! layouts, backward-data, backward-filter — and every CUDA-core entry) with ptxas, and fails
//! on errors, warnings or spills. Prints `ptxas -v` registers and shared memory of the
//! tensor-core entries, the split reduces and the bias entries. Skips loudly when ptxas is
//! missing, unless `PTXFORGE_REQUIRE_PTXAS=1`.

use ptxforge_runtime::arch::Arch;
use ptxforge_runtime::ptxas::{assemble_each, locate_or_skip};
use ptxforge_runtime::templates::conv::kernels::{
    matrix_configs, ENTRY_BWD_BIAS, ENTRY_BWD_FILTER_REDUCE, ENTRY_FILTER_TO_CHANNELS_LAST,
    ENTRY_GRADIENT_TO_CHANNELS_LAST, ENTRY_TO_CHANNELS_LAST,
};
use ptxforge_runtime::templates::conv::Conv2dConfig;
use ptxforge_runtime::templates::KernelFamily;

#[test]
fn conv_modules_assemble_without_warnings_or_spills() {
    let Some(ptxas) = locate_or_skip() else {
        return;
    };
    let mut tensor_core_entries = 0;
    let failures = assemble_each(
        &ptxas,
        "conv",
        matrix_configs(),
        module,
        |_, name, report| {
            for e in report.entries.iter().filter(|e| {
                e.entry.contains("implicit_gemm")
                    || e.entry == ENTRY_BWD_FILTER_REDUCE
                    || e.entry == ENTRY_TO_CHANNELS_LAST
                    || e.entry == ENTRY_GRADIENT_TO_CHANNELS_LAST
                    || e.entry == ENTRY_FILTER_TO_CHANNELS_LAST
                    || e.entry.starts_with(ENTRY_BWD_BIAS)
            }) {
                tensor_core_entries += usize::from(e.entry.contains("implicit_gemm"));
                println!(
                    "{name:<44} {:<38} regs {:>3} smem {:>6} spill {}/{}",
                    e.entry, e.registers, e.shared_bytes, e.spill_stores, e.spill_loads
                );
            }
        },
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        tensor_core_entries > 0,
        "no tensor-core implicit GEMM assembled"
    );
}

fn module(cfg: &Conv2dConfig) -> (String, Arch, Result<String, String>) {
    let name = format!("{}.{}", cfg.matrix_name(), cfg.arch);
    (
        name,
        cfg.arch,
        cfg.compile().map(|c| c.ptx).map_err(|e| e.to_string()),
    )
}
