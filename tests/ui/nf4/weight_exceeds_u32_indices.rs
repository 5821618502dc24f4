use ptxforge::prelude::*;

#[nf4_gemm(n = 65536, k = 65536)]
pub struct Proj;

fn main() {}
