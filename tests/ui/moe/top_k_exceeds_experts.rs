use ptxforge::prelude::*;

// The stub CONFIG keeps this use compiling: only the rule is reported.
#[moe_kernel(experts = 8, top_k = 9, hidden = 4096, expert_dim = 14336)]
pub struct Mixtral;

fn main() {
    let _ = Mixtral::CONFIG;
}
