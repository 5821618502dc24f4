use ptxforge::prelude::*;

#[attention_kernel(head_dim = 64, dtype = [bf16])]
pub struct Kernel;

fn main() {}
