use ptxforge::prelude::*;

#[conv2d_kernel(in_channels = 6, out_channels = 8, kernel = 3, groups = 4)]
pub struct Conv;

fn main() {}
