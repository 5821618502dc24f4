use ptxforge::prelude::*;

#[nf4_gemm(n = 64, k = 64)]
mod proj {}

fn main() {}
