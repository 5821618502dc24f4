use ptxforge::prelude::*;

#[nf4_gemm(n = 0, k = 4096)]
pub struct Proj;

fn main() {}
