//! `#[moe_kernel(..)]` arguments.

use ptxforge_runtime::templates::moe::{Ffn, MoeConfig};
use ptxforge_runtime::{Arch, DType};
use syn::Expr;

use super::value::{parse_name, Value};
use super::{family_args, required, set};

family_args! {
    /// The arguments of `#[moe_kernel(experts = 8, top_k = 2, hidden = 4096, expert_dim = 14336,
    /// capacity_factor = 1.25, dtype = bf16, ffn = swiglu, arch = sm_80)]`; without
    /// `capacity_factor` the routing is dropless.
    MoeArgs {
        experts: u32,
        top_k: u32,
        hidden: u32,
        expert_dim: u32,
        capacity_factor: f32,
        dtype: DType,
        ffn: Ffn,
        normalize_topk: bool,
        allow_tf32: bool,
        arch: Arch,
    }
}

impl MoeArgs {
    /// The configuration, defaults filling what is not given; `None` if a required argument is
    /// missing.
    pub(crate) fn config(&self) -> Option<MoeConfig> {
        let mut config = MoeConfig::new(
            required(&self.experts)?,
            required(&self.top_k)?,
            required(&self.hidden)?,
            required(&self.expert_dim)?,
        );
        if let Some(arg) = &self.capacity_factor {
            config.capacity_factor = Some(arg.value);
        }
        set(&mut config.dtype, &self.dtype);
        set(&mut config.ffn, &self.ffn);
        set(&mut config.normalize_topk, &self.normalize_topk);
        set(&mut config.allow_tf32, &self.allow_tf32);
        set(&mut config.arch, &self.arch);
        Some(config)
    }
}

impl Value for Ffn {
    const EXPECTED: &'static str = "an expert FFN (linear, swiglu)";
    const EXAMPLE: &'static str = "swiglu";

    fn parse_value(expr: &Expr) -> darling::Result<Self> {
        const ALIASES: &[(&str, &str)] = &[
            ("swi_glu", "swiglu"),
            ("silu", "swiglu"),
            ("glu", "swiglu"),
            ("gated", "swiglu"),
            ("mixtral", "swiglu"),
            ("dense", "linear"),
            ("identity", "linear"),
        ];
        let names = Ffn::ALL.map(Ffn::name);
        parse_name(expr, "ffn", &names, ALIASES)
    }
}
