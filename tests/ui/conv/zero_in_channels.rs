use ptxforge::prelude::*;

#[conv2d_kernel(in_channels = 0, out_channels = 8, kernel = 3)]
pub struct Conv;

fn main() {}
