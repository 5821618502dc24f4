use ptxforge::prelude::*;
use ptxforge::runtime::templates::moe::{Ffn, MoeConfig};

/// A DeepSeek-style router: raw top-k probabilities, many small experts, strings for names.
#[moe_kernel(experts = 64, top_k = 6, hidden = 2048, expert_dim = 1408,
             normalize_topk = false, dtype = "f16", ffn = "swiglu", arch = "sm_90")]
pub struct DeepSeek;

#[moe_kernel(experts = 4, top_k = 1, hidden = 64, expert_dim = 128)]
struct Minimal {}

fn main() {
    assert!(!DeepSeek::CONFIG.normalize_topk);
    assert_eq!(DeepSeek::CONFIG.dtype, DType::F16);
    assert_eq!(DeepSeek::CONFIG.ffn, Ffn::Swiglu);
    assert_eq!(DeepSeek::CONFIG.arch, Arch::Sm90);
    // Everything not given is the runtime's default.
    assert_eq!(Minimal::CONFIG, MoeConfig::new(4, 1, 64, 128));
    let _ = Minimal {};
}
