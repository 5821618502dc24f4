use ptxforge::prelude::*;

#[attention_kernel(head_dim = (64, 64))]
pub struct Attn;

fn main() {}
