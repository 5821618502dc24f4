use half::f16;
use ptxforge::prelude::*;

// A misspelt key leaves no configuration: the stubs take any element type, so the call below
// does not add a type error to the one at the misspelling.
#[nf4_gemm(n = 64, kk = 64, dtype = f16)]
pub struct Proj;

fn main() -> Result<(), LaunchError> {
    let dev = SimBackend::new();
    let weights = Proj.upload_weights(&dev, &[0.0; 64 * 64])?;
    let a = dev.alloc::<f16>(64)?;
    let mut c = dev.alloc::<f16>(64)?;
    Proj.forward(&dev, 1, &a, &weights, &mut c)?;
    let mut g_a = dev.alloc::<f16>(64)?;
    Proj.backward_input(&dev, 1, &c, &weights, &mut g_a)?;
    Ok(())
}
