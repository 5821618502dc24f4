use ptxforge::prelude::*;

#[nf4_gemm(n = 64, k = 64)]
pub fn proj() {}

fn main() {}
