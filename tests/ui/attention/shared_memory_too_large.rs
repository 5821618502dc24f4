use ptxforge::prelude::*;

// Explicit tiles: (128 + 2·128)·256·4 + 128·128·4 bytes > sm_75's 64 KiB.
#[attention_kernel(head_dim = 256, block_m = 128, block_n = 128, arch = sm_75)]
pub struct Attn;

fn main() {}
