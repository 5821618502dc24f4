use ptxforge::prelude::*;
use ptxforge::runtime::templates::nf4::Nf4Config;

#[nf4_gemm(n = 4096, k = 4096, block = 64, double_quant = true, dtype = bf16, arch = sm_80)]
pub struct QProj;

#[derive(Debug, Clone, Copy, Default)]
#[nf4_gemm(n = 11008, k = 4096)]
pub struct UpProj;

fn main() {
    assert!(QProj::CONFIG.double_quant);
    assert_eq!(QProj::CONFIG.block, 64);
    assert_eq!(UpProj::CONFIG, Nf4Config::new(11008, 4096));
    // Other attributes on the struct are kept.
    let _ = format!("{:?}", UpProj);
}
