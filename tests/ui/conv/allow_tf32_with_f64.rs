use ptxforge::prelude::*;

#[conv2d_kernel(in_channels = 8, out_channels = 8, kernel = 3, dtype = f64, allow_tf32 = true)]
pub struct Conv;

fn main() {}
