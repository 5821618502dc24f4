use ptxforge::prelude::*;

#[conv2d_kernel]
pub struct Kernel;

fn main() {}
