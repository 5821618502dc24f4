//! `#[nf4_gemm(..)]` arguments.

use ptxforge_runtime::templates::nf4::Nf4Config;
use ptxforge_runtime::{Arch, DType};

use super::{family_args, required, set};

family_args! {
    /// The arguments of `#[nf4_gemm(n = 4096, k = 4096, block = 64, double_quant = true,
    /// dtype = bf16, arch = sm_80)]`.
    Nf4Args {
        n: u32,
        k: u32,
        block: u32,
        double_quant: bool,
        dtype: DType,
        allow_tf32: bool,
        arch: Arch,
    }
}

impl Nf4Args {
    /// The configuration, defaults filling what is not given; `None` if a required argument is
    /// missing.
    pub(crate) fn config(&self) -> Option<Nf4Config> {
        let mut config = Nf4Config::new(required(&self.n)?, required(&self.k)?);
        set(&mut config.block, &self.block);
        set(&mut config.double_quant, &self.double_quant);
        set(&mut config.dtype, &self.dtype);
        set(&mut config.allow_tf32, &self.allow_tf32);
        set(&mut config.arch, &self.arch);
        Some(config)
    }
}
