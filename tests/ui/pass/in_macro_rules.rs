use ptxforge::prelude::*;

// Values passed through `macro_rules!` metavariables arrive in invisible groups.
macro_rules! moe {
    ($name:ident, $experts:expr, $top_k:literal, $dtype:ident) => {
        #[moe_kernel(experts = $experts, top_k = $top_k, hidden = 256, expert_dim = 512,
                     dtype = $dtype)]
        pub struct $name;
    };
}

moe!(Small, 4, 1, f32);
moe!(Large, 16, 4, bf16);

const fn uses_config_in_const_context() -> u32 {
    Small::CONFIG.experts + Large::CONFIG.top_k
}

fn main() {
    assert_eq!(uses_config_in_const_context(), 8);
    assert_eq!(Large::CONFIG.dtype, DType::BF16);
}
