use ptxforge::prelude::*;

#[attention_kernel(head_dim = 100)]
pub struct Attn;

fn main() {}
