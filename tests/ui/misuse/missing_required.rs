use ptxforge::prelude::*;

#[moe_kernel(experts = 8, top_k = 2)]
pub struct Kernel;

fn main() {}
