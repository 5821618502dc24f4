use ptxforge::prelude::*;

#[nf4_gemm(n = 64, k = 64, crate = "not a path")]
pub struct Kernel;

fn main() {}
