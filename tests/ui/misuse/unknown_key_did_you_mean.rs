use ptxforge::prelude::*;

// A misspelt required key is reported once, as the misspelling.
#[moe_kernel(expers = 8, top_k = 2, hidden = 4096, expert_dim = 14336)]
pub struct Kernel;

fn main() {}
