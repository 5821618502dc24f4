use ptxforge::prelude::*;

// The softmax scale is a run-time argument (default 1/√D).
#[attention_kernel(head_dim = 64, scale = 0.125)]
pub struct Attn;

fn main() {}
