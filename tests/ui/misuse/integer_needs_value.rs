use ptxforge::prelude::*;

// A bare key only means `true` for flags like `causal`.
#[nf4_gemm(n = 64, k)]
pub struct Kernel;

fn main() {}
