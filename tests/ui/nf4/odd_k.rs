use ptxforge::prelude::*;

// Two codes per byte: rows must start on a byte boundary.
#[nf4_gemm(n = 4096, k = 4095)]
pub struct Proj;

fn main() {}
