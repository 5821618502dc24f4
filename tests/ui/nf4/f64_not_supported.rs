use ptxforge::prelude::*;

#[nf4_gemm(n = 4096, k = 4096, dtype = f64)]
pub struct Proj;

fn main() {}
