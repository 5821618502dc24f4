use ptxforge::prelude::*;

// One gating thread per expert: at most 1024.
#[moe_kernel(experts = 2048, top_k = 2, hidden = 64, expert_dim = 64)]
pub struct Mixtral;

fn main() {}
