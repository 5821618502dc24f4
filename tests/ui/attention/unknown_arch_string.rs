use ptxforge::prelude::*;

#[attention_kernel(head_dim = 64, arch = "sm_100")]
pub struct Attn;

fn main() {}
