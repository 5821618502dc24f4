// A crate that re-exports ptxforge under another name points the generated paths at it.
extern crate ptxforge as forge;

mod kernels {
    use forge::prelude::*;

    #[nf4_gemm(n = 64, k = 64, crate = "::forge")]
    pub struct Small;

    #[attention_kernel(head_dim = 32, crate = forge)]
    pub struct Tiny;
}

fn main() {
    assert_eq!(kernels::Small::CONFIG.n, 64);
    assert_eq!(kernels::Tiny::CONFIG.head_dim, 32);
}
