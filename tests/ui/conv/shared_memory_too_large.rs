use ptxforge::prelude::*;

// The direct kernel stages (15 + 100·2 + 1)² f32 inputs: more than sm_75 allows.
#[conv2d_kernel(in_channels = 8, out_channels = 8, kernel = 3, dilation = 100, arch = sm_75)]
pub struct Conv;

fn main() {}
