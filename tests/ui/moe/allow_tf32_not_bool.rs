use ptxforge::prelude::*;

#[moe_kernel(experts = 8, top_k = 2, hidden = 4096, expert_dim = 14336, allow_tf32 = "yes")]
pub struct Mixtral;

fn main() {}
