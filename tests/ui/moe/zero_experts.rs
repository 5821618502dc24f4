use ptxforge::prelude::*;

#[moe_kernel(experts = 0, top_k = 2, hidden = 4096, expert_dim = 14336)]
pub struct Mixtral;

fn main() {}
