use ptxforge::prelude::*;

// `3x3` lexes as the integer 3 with the suffix `x3`.
#[conv2d_kernel(in_channels = 8, out_channels = 8, kernel = 3x3)]
pub struct Conv;

fn main() {}
