use ptxforge::prelude::*;

// Even the smallest default tiles exceed sm_75's shared memory in f64.
#[attention_kernel(head_dim = 256, dtype = f64, arch = sm_75)]
pub struct Attn;

fn main() {}
