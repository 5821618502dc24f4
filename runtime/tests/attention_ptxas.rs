//! Assembles the attention kernels with ptxas: the family's matrix configurations plus edge
//! tilings (every explicit tile pair `validate` accepts for a few head_dim/dtype pairs), and
//! fails on errors, warnings or spills. Prints `ptxas -v` registers per configuration. Skips
//! loudly when ptxas is missing, unless `PTXFORGE_REQUIRE_PTXAS=1`.
//!
//! The ignored `every_accepted_tensor_core_tiling_assembles_without_spills` checks the
//! tensor-core register rule of `validate` against ptxas over every explicit tiling it
//! accepts (run it with `--ignored`).

use ptxforge_runtime::arch::Arch;
use ptxforge_runtime::dtype::DType;
use ptxforge_runtime::ptxas::{assemble_each, locate_or_skip};
use ptxforge_runtime::templates::attention::{matrix_configs, AttentionConfig, AttentionPath};
use ptxforge_runtime::templates::KernelFamily;

fn edge_configs() -> Vec<AttentionConfig> {
    let mut out = Vec::new();
    for (head_dim, dtype, arch) in [
        (32, DType::F32, Arch::Sm80),
        (256, DType::F32, Arch::Sm80),
        (256, DType::F64, Arch::Sm90),
        (96, DType::BF16, Arch::Sm75),
        (128, DType::F16, Arch::Sm86),
        (256, DType::BF16, Arch::Sm90),
        (64, DType::F16, Arch::Sm80),
    ] {
        for block_m in AttentionConfig::BLOCKS {
            for block_n in AttentionConfig::BLOCKS {
                let cfg = AttentionConfig {
                    block_m,
                    block_n,
                    dtype,
                    arch,
                    causal: block_m == block_n,
                    ..AttentionConfig::new(head_dim)
                };
                if cfg.validate().is_ok() {
                    out.push(cfg);
                }
            }
        }
    }
    out
}

#[test]
fn attention_kernels_assemble_without_warnings_or_spills() {
    let Some(ptxas) = locate_or_skip() else {
        return;
    };
    let only_matrix = std::env::var("ATTN_PTXAS_MATRIX_ONLY").is_ok();
    let mut configs = matrix_configs();
    if !only_matrix {
        configs.extend(edge_configs());
    }
    // ATTN_PTXAS_FILTER=<substring> assembles only the matching configurations.
    if let Ok(filter) = std::env::var("ATTN_PTXAS_FILTER") {
        configs.retain(|c| format!("{}.{}", c.matrix_name(), c.arch).contains(&filter));
    }
    assemble_and_print(&ptxas, "attn", configs);
}

/// Every explicit tiling (`block_m`, `block_n` ∈ 16..128, both mask modes) that `validate`
/// accepts on tensor cores: f16, bf16 and f32 with `allow_tf32`, every head_dim, every target.
fn accepted_tensor_core_tilings() -> Vec<AttentionConfig> {
    let mut out = Vec::new();
    for arch in Arch::ALL {
        for (dtype, allow_tf32) in [
            (DType::F16, false),
            (DType::BF16, false),
            (DType::F32, true),
        ] {
            for head_dim in AttentionConfig::HEAD_DIMS {
                for block_m in AttentionConfig::BLOCKS {
                    for block_n in AttentionConfig::BLOCKS {
                        for causal in [false, true] {
                            let cfg = AttentionConfig {
                                block_m,
                                block_n,
                                causal,
                                dtype,
                                allow_tf32,
                                arch,
                                ..AttentionConfig::new(head_dim)
                            };
                            if cfg.path() == AttentionPath::TensorCores && cfg.validate().is_ok() {
                                out.push(cfg);
                            }
                        }
                    }
                }
            }
        }
    }
    out
}

/// The register rule of `validate` against ptxas: no accepted tensor-core tiling spills.
/// About 1,900 modules (eight minutes on two cores), so ignored by default;
/// `ATTN_SPILL_FILTER=<substring>` narrows it to the matching `<name>.<arch>` modules.
#[test]
#[ignore = "assembles about 1,900 modules; run with --ignored"]
fn every_accepted_tensor_core_tiling_assembles_without_spills() {
    let Some(ptxas) = locate_or_skip() else {
        return;
    };
    let mut configs = accepted_tensor_core_tilings();
    if let Ok(filter) = std::env::var("ATTN_SPILL_FILTER") {
        configs.retain(|c| format!("{}.{}", c.matrix_name(), c.arch).contains(&filter));
    }
    println!("{} accepted tilings", configs.len());
    assemble_and_print(&ptxas, "attn-spill", configs);
}

/// Assembles each configuration, prints its `ptxas -v` figures beside the register estimate,
/// and fails on any finding (errors, warnings, spills).
fn assemble_and_print(ptxas: &std::path::Path, tag: &str, configs: Vec<AttentionConfig>) {
    let failures = assemble_each(ptxas, tag, configs, module, |cfg, name, report| {
        for e in &report.entries {
            let t = cfg.tiles();
            println!(
                "{name:<40} threads {:>4} regs {:>3} (est {:>3}) smem {:>6} spill {}/{}",
                t.threads,
                e.registers,
                cfg.registers_estimate(t.block_m, t.block_n),
                e.shared_bytes,
                e.spill_stores,
                e.spill_loads
            );
        }
    });
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn module(cfg: &AttentionConfig) -> (String, Arch, Result<String, String>) {
    let name = format!("{}.{}", cfg.matrix_name(), cfg.arch);
    (
        name,
        cfg.arch,
        cfg.compile().map(|c| c.ptx).map_err(|e| e.to_string()),
    )
}
