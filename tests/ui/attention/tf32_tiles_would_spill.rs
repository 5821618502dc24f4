use ptxforge::prelude::*;

// One warp of D = 256 tf32 copies 32 rounds of K/V chunks with their own addresses: about 275
// registers per thread, beyond the 255 a thread may have (ptxas spills).
#[attention_kernel(head_dim = 256, block_m = 16, block_n = 16, dtype = f32, allow_tf32 = true, arch = sm_86)]
pub struct Attn;

fn main() {}
