use ptxforge::prelude::*;

#[attention_kernel(causal, dtype = bf16)]
pub struct Attn;

fn main() {}
