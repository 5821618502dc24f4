use ptxforge::prelude::*;

#[attention_kernel(head_dim = 64, dtype = f64, allow_tf32 = true)]
pub struct Attn;

fn main() {}
