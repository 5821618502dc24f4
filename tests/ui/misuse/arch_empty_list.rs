use ptxforge::prelude::*;

#[nf4_gemm(n = 64, k = 64, arch = [])]
pub struct Proj;

fn main() {}
