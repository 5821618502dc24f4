use ptxforge::prelude::*;

#[attention_kernel(head_dim = 64,, causal = true)]
pub struct Kernel;

fn main() {}
