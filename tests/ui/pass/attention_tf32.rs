use ptxforge::prelude::*;
use ptxforge::runtime::templates::attention::AttentionPath;

/// f32 attention on tf32 tensor cores (sm_80+): `Q·Kᵀ` and `P·V` on `mma.m16n8k8`.
#[attention_kernel(head_dim = 64, causal = true, allow_tf32 = true)]
pub struct Tf32Attn;

/// Before sm_80 `allow_tf32` is accepted and the CUDA-core kernel runs, silently.
#[attention_kernel(head_dim = 64, allow_tf32 = true, arch = sm_75)]
pub struct Tf32OnTuring;

fn main() {
    assert!(Tf32Attn::CONFIG.allow_tf32);
    assert_eq!(Tf32Attn::CONFIG.path(), AttentionPath::TensorCores);
    assert!(Tf32Attn::PTX.contains("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"));
    assert!(Tf32Attn::PTX.contains("cvt.rna.tf32.f32"));
    assert_eq!(Tf32OnTuring::CONFIG.path(), AttentionPath::CudaCores);
    assert!(!Tf32OnTuring::PTX.contains("mma"));
}
