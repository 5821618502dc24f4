use ptxforge::prelude::*;

// The wrappers' buffers are typed by `dtype`: f32 buffers for a bf16 kernel do not compile.
#[moe_kernel(experts = 8, top_k = 2, hidden = 64, expert_dim = 64, dtype = bf16)]
pub struct Router;

fn main() -> Result<(), LaunchError> {
    let dev = SimBackend::new();
    let x = dev.alloc::<f32>(64)?;
    let mut out = dev.alloc::<f32>(64)?;
    Router.forward(&dev, 1, &x, &x, &x, &mut out)?;
    Ok(())
}
