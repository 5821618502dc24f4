use ptxforge::prelude::*;

// Would silently be 0 as an f32.
#[moe_kernel(experts = 8, top_k = 2, hidden = 4096, expert_dim = 14336, capacity_factor = 1e-50)]
pub struct Mixtral;

fn main() {}
