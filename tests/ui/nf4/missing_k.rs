use ptxforge::prelude::*;

#[nf4_gemm(n = 4096)]
pub struct Proj;

fn main() {}
