use ptxforge::prelude::*;

#[nf4_gemm(n = 4096, k = 4096, double_quant = "yes")]
pub struct Proj;

fn main() {}
