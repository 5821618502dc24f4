use ptxforge::prelude::*;

#[nf4_gemm(n = 64, k = 64, batch_size = 4)]
pub struct Kernel;

fn main() {}
