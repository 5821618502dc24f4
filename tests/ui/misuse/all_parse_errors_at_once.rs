use ptxforge::prelude::*;

// Every malformed value is reported, not just the first.
#[conv2d_kernel(in_channels = -1, out_channels = 4.0, kernel = (3, 3, 3), dtype = f17)]
pub struct Kernel;

fn main() {}
