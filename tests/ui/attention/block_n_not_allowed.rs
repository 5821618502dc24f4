use ptxforge::prelude::*;

#[attention_kernel(head_dim = 64, block_n = 256)]
pub struct Attn;

fn main() {}
