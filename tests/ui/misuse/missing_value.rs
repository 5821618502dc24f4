use ptxforge::prelude::*;

#[attention_kernel(head_dim = 64, dtype = )]
pub struct Kernel;

fn main() {}
