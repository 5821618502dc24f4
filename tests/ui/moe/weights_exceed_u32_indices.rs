use ptxforge::prelude::*;

// Each weight tensor is indexed in u32: E · F · H must fit.
#[moe_kernel(experts = 256, top_k = 8, hidden = 8192, expert_dim = 4096)]
pub struct Mixtral;

fn main() {}
