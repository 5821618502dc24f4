use ptxforge::prelude::*;
use ptxforge::runtime::templates::nf4::kernels::{gemm_threads, tf32_tensor_cores, THREADS};

/// f32 activations on tf32 tensor cores (sm_80+, `k` and `n` multiples of 4).
#[nf4_gemm(n = 4096, k = 4096, allow_tf32 = true)]
pub struct Tf32Proj;

/// Before sm_80 `allow_tf32` is accepted and the CUDA-core GEMMs run, silently.
#[nf4_gemm(n = 4096, k = 4096, allow_tf32 = true, arch = sm_75)]
pub struct Tf32OnTuring;

fn main() {
    assert!(Tf32Proj::CONFIG.allow_tf32);
    assert!(tf32_tensor_cores(&Tf32Proj::CONFIG));
    assert_eq!(gemm_threads(&Tf32Proj::CONFIG), 128);
    assert!(Tf32Proj::PTX.contains("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"));
    assert!(!tf32_tensor_cores(&Tf32OnTuring::CONFIG));
    assert_eq!(gemm_threads(&Tf32OnTuring::CONFIG), THREADS);
    assert!(!Tf32OnTuring::PTX.contains("mma"));
}
