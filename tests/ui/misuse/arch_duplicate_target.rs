use ptxforge::prelude::*;

#[nf4_gemm(n = 64, k = 64, arch = [sm_80, sm_90, sm_80])]
pub struct Proj;

fn main() {}
