//! `#[attention_kernel(..)]` arguments.

use ptxforge_runtime::templates::attention::AttentionConfig;
use ptxforge_runtime::{Arch, DType};

use super::{family_args, required, set};

family_args! {
    /// The arguments of `#[attention_kernel(head_dim = 128, block_m = 64, block_n = 64,
    /// causal = true, dtype = bf16, arch = sm_80)]`.
    AttentionArgs {
        head_dim: u32,
        block_m: u32,
        block_n: u32,
        causal: bool,
        dtype: DType,
        allow_tf32: bool,
        arch: Arch,
    }
}

impl AttentionArgs {
    /// The configuration, defaults filling what is not given; `None` if a required argument is
    /// missing.
    pub(crate) fn config(&self) -> Option<AttentionConfig> {
        let mut config = AttentionConfig::new(required(&self.head_dim)?);
        set(&mut config.block_m, &self.block_m);
        set(&mut config.block_n, &self.block_n);
        set(&mut config.causal, &self.causal);
        set(&mut config.dtype, &self.dtype);
        set(&mut config.allow_tf32, &self.allow_tf32);
        set(&mut config.arch, &self.arch);
        Some(config)
    }
}
