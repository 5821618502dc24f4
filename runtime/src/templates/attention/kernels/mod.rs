//! The attention kernels, built with the typed builder: `attention_forward`
//! (FlashAttention-2-style forward with GQA, bottom-right causal mask and LSE).
//!
//! Phases live in their own modules, each function with its formula: [`plan`] (build-time
//! geometry, thread placement, running state), [`loads`] (Q into registers, K/V tiles into
//! shared memory), [`softmax`] (scores and the online-softmax update), [`output`] (`P·V` and
//! the final stores). [`ext`] holds builder helpers only this family needs. Those phases are the
//! CUDA-core kernel; [`tc`] is the tensor-core kernel (f16/bf16 on sm_80+, f32 with
//! `allow_tf32`), which reuses the
//! parameters, head offsets, tile count and causal bound from [`plan`].

mod ext;
mod forward;
mod loads;
mod output;
mod plan;
mod softmax;
mod tc;

pub use forward::ENTRY;

use super::config::{AttentionConfig, AttentionPath};
use crate::arch::Arch;
use crate::builder::{ModuleBuilder, BF16, F16, F32, F64};
use crate::dtype::DType;
use crate::templates::{CompiledFamily, KernelFamily, TemplateError};

impl KernelFamily for AttentionConfig {
    const FAMILY: &'static str = "attention";

    /// Validates the configuration and builds the module holding [`ENTRY`].
    fn compile(&self) -> Result<CompiledFamily, TemplateError> {
        self.validate()?;
        let cfg = self.resolved();
        let tensor_cores = cfg.path() == AttentionPath::TensorCores;
        let kernel = match cfg.dtype {
            DType::F16 if tensor_cores => tc::forward_kernel::<F16>(&cfg),
            DType::BF16 if tensor_cores => tc::forward_kernel::<BF16>(&cfg),
            DType::F32 if tensor_cores => tc::forward_kernel::<F32>(&cfg),
            DType::F16 => forward::forward_kernel::<F16, F32>(&cfg),
            DType::BF16 => forward::forward_kernel::<BF16, F32>(&cfg),
            DType::F32 => forward::forward_kernel::<F32, F32>(&cfg),
            DType::F64 => forward::forward_kernel::<F64, F64>(&cfg),
        };
        let module = ModuleBuilder::new(cfg.arch).kernel(kernel).build()?;
        Ok(CompiledFamily::from_module(&module))
    }

    /// `d<D>_<dtype>[_tf32][_causal]_m<block_m>_n<block_n>` (tiles resolved).
    fn matrix_name(&self) -> String {
        let r = self.resolved();
        format!(
            "d{}_{}{}{}_m{}_n{}",
            r.head_dim,
            r.dtype,
            if r.allow_tf32 { "_tf32" } else { "" },
            if r.causal { "_causal" } else { "" },
            r.block_m,
            r.block_n
        )
    }

    fn arch(&self) -> Arch {
        self.arch
    }
}

/// The representative configurations of the ptxas matrix: per dtype three (head_dim, causal)
/// pairs covering every head_dim and both mask modes across the dtypes, plus f32 with
/// `allow_tf32` on four (tf32 tensor cores on sm_80+, the CUDA-core path before), default
/// tiles, on every target that accepts them (f64 with `D = 256` needs more shared memory than
/// sm_75 has).
pub fn matrix_configs() -> Vec<AttentionConfig> {
    // (dtype, allow_tf32, (head_dim, causal) pairs)
    type Shapes = &'static [(u32, bool)];
    let per_dtype: [(DType, bool, Shapes); 5] = [
        (DType::F16, false, &[(32, false), (128, true), (256, false)]),
        (DType::BF16, false, &[(64, true), (96, false), (256, true)]),
        (DType::F32, false, &[(32, true), (96, false), (256, false)]),
        (
            DType::F32,
            true,
            &[(32, false), (64, true), (128, false), (256, true)],
        ),
        (DType::F64, false, &[(64, false), (128, true), (256, false)]),
    ];
    let mut out = Vec::new();
    for arch in Arch::ALL {
        for (dtype, allow_tf32, shapes) in per_dtype {
            for &(head_dim, causal) in shapes {
                let cfg = AttentionConfig {
                    causal,
                    dtype,
                    allow_tf32,
                    arch,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::templates::attention::SharedMemoryKind;

    #[test]
    fn every_matrix_config_compiles_with_the_declared_footprint() {
        let configs = matrix_configs();
        assert!(configs.len() >= 4 * 3 * 6, "{} configs", configs.len());
        for cfg in configs {
            let compiled = cfg.compile().unwrap();
            let entry = compiled.entry(ENTRY).expect("the forward entry");
            let t = cfg.tiles();
            assert_eq!(entry.required_block, Some([t.threads, 1, 1]));
            let declared = match t.shared_kind {
                SharedMemoryKind::Static => {
                    assert_eq!(entry.max_dynamic_shared_bytes, 0);
                    entry.static_shared_bytes
                }
                SharedMemoryKind::Dynamic => {
                    assert_eq!(entry.static_shared_bytes, 0);
                    entry.max_dynamic_shared_bytes
                }
            };
            assert_eq!(declared, t.shared_bytes, "{}", cfg.matrix_name());
            let names: Vec<_> = entry.params.iter().map(|(n, _)| n.as_str()).collect();
            assert_eq!(
                names,
                [
                    "q", "k", "v", "o", "lse", "seq_q", "seq_kv", "heads_q", "heads_kv", "scale",
                    "q_offset", "q_batch", "q_head", "q_seq", "k_offset", "k_batch", "k_head",
                    "k_seq", "v_offset", "v_batch", "v_head", "v_seq", "o_offset", "o_batch",
                    "o_head", "o_seq"
                ]
            );
        }
    }

    #[test]
    fn emission_is_deterministic_and_invalid_configs_are_refused() {
        let cfg = AttentionConfig {
            causal: true,
            dtype: DType::BF16,
            ..AttentionConfig::new(96)
        };
        assert_eq!(cfg.compile().unwrap().ptx, cfg.compile().unwrap().ptx);
        assert!(matches!(
            AttentionConfig::new(80).compile(),
            Err(TemplateError::Config(_))
        ));
    }
}
