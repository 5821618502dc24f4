use ptxforge::prelude::*;
use ptxforge::runtime::templates::moe::kernels::{expert_threads, EXPERT_LINEAR, GEMM_THREADS, TC_THREADS};

/// f32 experts on tf32 tensor cores (sm_80+).
#[moe_kernel(experts = 8, top_k = 2, hidden = 64, expert_dim = 128, allow_tf32 = true)]
pub struct Tf32Experts;

/// Before sm_80 `allow_tf32` is accepted and the CUDA-core f32 GEMM runs, silently.
#[moe_kernel(experts = 8, top_k = 2, hidden = 64, expert_dim = 128, allow_tf32 = true, arch = sm_75)]
pub struct Tf32OnTuring;

fn main() {
    assert!(Tf32Experts::CONFIG.allow_tf32);
    assert_eq!(expert_threads(&Tf32Experts::CONFIG, EXPERT_LINEAR), TC_THREADS);
    assert!(Tf32Experts::PTX.contains("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"));
    assert_eq!(expert_threads(&Tf32OnTuring::CONFIG, EXPERT_LINEAR), GEMM_THREADS);
    assert!(!Tf32OnTuring::PTX.contains("mma"));
}
