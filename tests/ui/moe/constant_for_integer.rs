use ptxforge::prelude::*;

// The configuration must be literal: constants are not evaluated.
#[moe_kernel(experts = EXPERTS, top_k = 2, hidden = 4096, expert_dim = 14336)]
pub struct Mixtral;

fn main() {}
