use ptxforge::prelude::*;

#[nf4_gemm(n = 64, 64)]
pub struct Kernel;

fn main() {}
