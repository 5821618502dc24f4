use ptxforge::prelude::*;

// D = 96 on one warp with 128-key tiles: 48 rounds of K/V chunks with their own addresses.
#[attention_kernel(head_dim = 96, block_m = 16, block_n = 128, dtype = f16, arch = sm_80)]
pub struct Attn;

fn main() {}
