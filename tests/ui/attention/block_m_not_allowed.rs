use ptxforge::prelude::*;

#[attention_kernel(head_dim = 64, block_m = 48)]
pub struct Attn;

fn main() {}
