use ptxforge::prelude::*;

#[nf4_gemm(n = 4096, k = 4096, blok = 64)]
pub struct Proj;

fn main() {}
