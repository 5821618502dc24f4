use ptxforge::prelude::*;

#[nf4_gemm(n = 4096, k = 0)]
pub struct Proj;

fn main() {}
