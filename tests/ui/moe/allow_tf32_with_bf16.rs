use ptxforge::prelude::*;

#[moe_kernel(experts = 8, top_k = 2, hidden = 4096, expert_dim = 14336, dtype = bf16, allow_tf32 = true)]
pub struct Mixtral;

fn main() {}
