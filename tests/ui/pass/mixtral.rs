use ptxforge::prelude::*;

/// Mixtral 8x7B's MoE layer.
#[moe_kernel(experts = 8, top_k = 2, hidden = 4096, expert_dim = 14336,
             capacity_factor = 1.25, dtype = bf16, ffn = swiglu, arch = sm_80)]
pub struct Mixtral;

fn main() {
    const C: ptxforge::runtime::templates::moe::MoeConfig = Mixtral::CONFIG;
    assert_eq!(C.experts, 8);
    assert_eq!(C.top_k, 2);
    assert_eq!(C.capacity_factor, Some(1.25));
    assert_eq!(C.dtype, DType::BF16);
    assert_eq!(C.arch, Arch::Sm80);
    assert!(C.normalize_topk);
    assert_eq!(C.validate(), Ok(()));
}
