use ptxforge::prelude::*;

// Unknown keys do not stop the rules from being checked.
#[moe_kernel(experts = 8, top_k = 9, hidden = 0, expert_dim = 14336, capacity_factor = 0.0, dtyp = bf16)]
pub struct Kernel;

fn main() {}
