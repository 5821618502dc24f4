use ptxforge::prelude::*;

#[attention_kernel(head_dim 64)]
pub struct Kernel;

fn main() {}
