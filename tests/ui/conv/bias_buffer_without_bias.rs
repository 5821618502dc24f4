use ptxforge::prelude::*;

// Without `bias = true` the forward wrappers take no bias buffer.
#[conv2d_kernel(in_channels = 3, out_channels = 8, kernel = 3)]
pub struct Conv;

fn main() -> Result<(), LaunchError> {
    let dev = SimBackend::new();
    let shape = ConvShape { batch: 1, height: 8, width: 8 };
    let x = dev.alloc::<f32>(192)?;
    let w = dev.alloc::<f32>(216)?;
    let bias = dev.alloc::<f32>(8)?;
    let mut y = dev.alloc::<f32>(288)?;
    Conv.forward(&dev, &shape, &x, &w, &bias, &mut y)?;
    Ok(())
}
