use ptxforge::prelude::*;

#[conv2d_kernel(in_channels = 65536, out_channels = 65536, kernel = 3)]
pub struct Conv;

fn main() {}
