//! Assembles the NF4 kernels with ptxas: the family's matrix configurations plus shapes that
//! select every copy width of the tensor-core ring (packed rows of 16/8/4-byte multiples and
//! rows off 4-byte words, f16/bf16 and tf32; odd `n`, so `G_C` rows copied element by element),
//! and fails on errors, warnings or spills, or when the f16/bf16 tensor-core forward (whole,
//! or one K slice of the split) needs more than [`FORWARD_REGISTERS`] (its 128-row tall entry
//! more than [`TALL_FORWARD_REGISTERS`]). Prints `ptxas -v` registers and shared memory per
//! entry. Skips loudly when ptxas is missing, unless `PTXFORGE_REQUIRE_PTXAS=1`.

use ptxforge_runtime::arch::Arch;
use ptxforge_runtime::dtype::DType;
use ptxforge_runtime::ptxas::{assemble_each, locate_or_skip};
use ptxforge_runtime::templates::nf4::kernels::tensor_cores;
use ptxforge_runtime::templates::nf4::{matrix_configs, Nf4Config};
use ptxforge_runtime::templates::KernelFamily;

/// Registers per thread of the f16/bf16 tensor-core forward (64-row tiles, 2 × 4 warps: two
/// weight rows' codes, scales and absmax windows per lane): 80 × 256 threads, so 3 blocks fit
/// an SM's 64 K registers (at 64, 4 would, but ptxas spills).
const FORWARD_REGISTERS: u32 = 80;
/// Registers per thread of `nf4_gemm_tall` and `nf4_gemm_tall_split` (32 accumulators per
/// thread, twice the 64-row entry's, and two weight rows' codes, scales and absmax windows per
/// lane): 128 × 256 threads, so 2 blocks fit an SM's 64 K registers (at 80, 3 would, but
/// ptxas spills; up to 128 the blocks per SM stay 2).
const TALL_FORWARD_REGISTERS: u32 = 128;

fn edge_configs() -> Vec<Nf4Config> {
    let mut out = Vec::new();
    for (n, k, block) in [(65, 130, 64), (96, 160, 32), (33, 48, 128), (7, 64, 256)] {
        for dtype in [DType::F16, DType::BF16] {
            for arch in [Arch::Sm80, Arch::Sm90] {
                out.push(Nf4Config {
                    block,
                    double_quant: n % 2 == 1,
                    dtype,
                    arch,
                    ..Nf4Config::new(n, k)
                });
            }
        }
    }
    // Packed rows off 4-byte words (k % 8 ≠ 0) with plain absmax, and on tf32 (whose code
    // window is 8 bytes: three covering words per row) with both absmax forms.
    for (n, k, block, double_quant, dtype, allow_tf32) in [
        (96, 230, 128, false, DType::F16, false),
        (128, 228, 64, false, DType::F32, true),
        (100, 228, 32, true, DType::F32, true),
    ] {
        for arch in [Arch::Sm80, Arch::Sm90] {
            out.push(Nf4Config {
                block,
                double_quant,
                dtype,
                allow_tf32,
                arch,
                ..Nf4Config::new(n, k)
            });
        }
    }
    out
}

#[test]
fn nf4_kernels_assemble_without_warnings_or_spills() {
    let Some(ptxas) = locate_or_skip() else {
        return;
    };
    let mut configs = matrix_configs();
    configs.extend(edge_configs());
    let mut over_budget = Vec::new();
    let mut tall = 0;
    let failures = assemble_each(&ptxas, "nf4", configs, module, |cfg, name, report| {
        for e in &report.entries {
            println!(
                "{name:<36} {:<20} regs {:>3} smem {:>6} spill {}/{}",
                e.entry, e.registers, e.shared_bytes, e.spill_stores, e.spill_loads
            );
            let tensor_core = matches!(cfg.dtype, DType::F16 | DType::BF16) && tensor_cores(cfg);
            let budget = match e.entry.as_str() {
                "nf4_gemm" | "nf4_gemm_split" if tensor_core => Some(FORWARD_REGISTERS),
                "nf4_gemm_tall" | "nf4_gemm_tall_split" => Some(TALL_FORWARD_REGISTERS),
                _ => None,
            };
            if budget.is_some_and(|b| e.registers > b) {
                over_budget.push(format!("{name} {}: {} registers", e.entry, e.registers));
            }
            if e.entry.starts_with("nf4_gemm_tall") {
                assert!(
                    tensor_core,
                    "{name}: {} off the f16/bf16 tensor cores",
                    e.entry
                );
                tall += 1;
            }
        }
    });
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(over_budget.is_empty(), "{}", over_budget.join("\n"));
    assert!(tall > 0, "no nf4_gemm_tall assembled");
}

fn module(cfg: &Nf4Config) -> (String, Arch, Result<String, String>) {
    let name = format!("{}.{}", cfg.matrix_name(), cfg.arch);
    (
        name,
        cfg.arch,
        cfg.compile().map(|c| c.ptx).map_err(|e| e.to_string()),
    )
}
