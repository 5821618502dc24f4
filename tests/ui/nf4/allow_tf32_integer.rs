use ptxforge::prelude::*;

#[nf4_gemm(n = 4096, k = 4096, allow_tf32 = 1)]
pub struct Proj;

fn main() {}
