use ptxforge::prelude::*;

#[conv2d_kernel(in_channels = 8, out_channels = 8, kernel = 3)]
pub struct Conv(u32);

fn main() {}
