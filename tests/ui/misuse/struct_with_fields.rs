use ptxforge::prelude::*;

#[attention_kernel(head_dim = 64)]
pub struct Attn {
    head_dim: u32,
}

fn main() {}
