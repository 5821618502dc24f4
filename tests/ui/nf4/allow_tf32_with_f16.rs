use ptxforge::prelude::*;

#[nf4_gemm(n = 4096, k = 4096, dtype = f16, allow_tf32 = true)]
pub struct Proj;

fn main() {}
