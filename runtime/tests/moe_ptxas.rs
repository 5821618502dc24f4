//! Assembles the MoE kernels with ptxas: the family's matrix configurations (every dtype ×
//! target, so both expert-GEMM paths: tensor cores for f16/bf16 on sm_80+ with reduction
//! lengths that are multiples of 8, CUDA cores otherwise) plus a Mixtral-like swiglu and a
//! linear shape on sm_80/sm_90 whose reduction lengths take the tensor-core path in both GEMMs
//! (f16, bf16, and f32 with `allow_tf32` on tf32 tensor cores),
//! and fails on errors, warnings or spills. Prints `ptxas -v` registers and shared memory per
//! expert entry, and for `moe_permute` at 8 to 128 experts. Skips loudly when ptxas is missing, unless `PTXFORGE_REQUIRE_PTXAS=1`.

use ptxforge_runtime::arch::Arch;
use ptxforge_runtime::dtype::DType;
use ptxforge_runtime::ptxas::{assemble_each, locate_or_skip};
use ptxforge_runtime::templates::moe::kernels::tensor_cores;
use ptxforge_runtime::templates::moe::{matrix_configs, Ffn, MoeConfig};
use ptxforge_runtime::templates::KernelFamily;

fn tensor_core_configs() -> Vec<MoeConfig> {
    let mut out = Vec::new();
    for (ffn, hidden, expert_dim) in [
        (Ffn::Swiglu, 128, 256),
        (Ffn::Linear, 40, 136),
        // The benchmark's sampled Mixtral up-projection: short, fully unrolled K loops.
        (Ffn::Linear, 128, 128),
        (Ffn::Linear, 256, 128),
        // Mixtral's sizes: long reduction loops that ptxas unrolls only in part.
        (Ffn::Swiglu, 4096, 14336),
    ] {
        // f32 with `allow_tf32`: tf32 `mma.m16n8k8`.
        for dtype in [DType::F16, DType::BF16, DType::F32] {
            for arch in [Arch::Sm80, Arch::Sm90] {
                out.push(MoeConfig {
                    ffn,
                    dtype,
                    arch,
                    allow_tf32: dtype == DType::F32,
                    ..MoeConfig::new(8, 2, hidden, expert_dim)
                });
            }
        }
    }
    out
}

/// `moe_permute` at one, two and four expert groups (Mixtral-, Qwen- and DeepSeek-like
/// routing), on sm_80 and sm_90.
fn permute_configs() -> Vec<MoeConfig> {
    let mut out = Vec::new();
    for (experts, top_k) in [(8, 2), (16, 2), (32, 4), (64, 6), (128, 8)] {
        for arch in [Arch::Sm80, Arch::Sm90] {
            out.push(MoeConfig {
                arch,
                ..MoeConfig::new(experts, top_k, 64, 64)
            });
        }
    }
    out
}

#[test]
fn moe_kernels_assemble_without_warnings_or_spills() {
    let Some(ptxas) = locate_or_skip() else {
        return;
    };
    let mut configs = matrix_configs();
    configs.extend(tensor_core_configs());
    let mut tensor_core_entries = 0;
    let failures = assemble_each(&ptxas, "moe", configs, module, |cfg, name, report| {
        for e in report
            .entries
            .iter()
            .filter(|e| e.entry.starts_with("moe_expert"))
        {
            let tc = tensor_cores(cfg, &e.entry);
            tensor_core_entries += usize::from(tc);
            println!(
                "{name:<40} {:<24} {} regs {:>3} smem {:>6} spill {}/{}",
                e.entry,
                if tc { "tc  " } else { "cuda" },
                e.registers,
                e.shared_bytes,
                e.spill_stores,
                e.spill_loads
            );
        }
    });
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let failures = assemble_each(
        &ptxas,
        "moe",
        permute_configs(),
        module,
        |cfg, _, report| {
            for e in report.entries.iter().filter(|e| e.entry == "moe_permute") {
                println!(
                    "moe_permute E={:<3} K={} {}: regs {:>3} smem {:>6} spill {}/{}",
                    cfg.experts,
                    cfg.top_k,
                    cfg.arch,
                    e.registers,
                    e.shared_bytes,
                    e.spill_stores,
                    e.spill_loads
                );
            }
        },
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        tensor_core_entries > 0,
        "no tensor-core expert entry assembled"
    );
}

fn module(cfg: &MoeConfig) -> (String, Arch, Result<String, String>) {
    let name = format!("{}.{}", cfg.matrix_name(), cfg.arch);
    (
        name,
        cfg.arch,
        cfg.compile().map(|c| c.ptx).map_err(|e| e.to_string()),
    )
}
