use half::bf16;
use ptxforge::prelude::*;

// One broken rule: the attribute reports it, and the stubs keep every use below compiling
// (same names and signatures, buffers still typed bf16), so this is the only error.
#[moe_kernel(experts = 8, top_k = 9, hidden = 64, expert_dim = 64, dtype = bf16, ffn = swiglu)]
pub struct Mixtral;

fn main() -> Result<(), LaunchError> {
    let dev = SimBackend::new();
    let x = dev.alloc::<bf16>(64)?;
    let mut out = dev.alloc::<bf16>(64)?;
    let _stats = Mixtral.forward(&dev, 1, &x, &x, &x, &x, &x, &mut out)?;
    let mut ws = Mixtral.workspace(&dev, 1)?;
    Mixtral.gating(&dev, 1, &x, &mut ws)?;
    let _: KernelEntry = Mixtral::EXPERT_SWIGLU_DOWN;
    let _: &str = Mixtral::PTX;
    Ok(())
}
