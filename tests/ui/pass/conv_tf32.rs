use ptxforge::prelude::*;

/// f32 convolution on tf32 tensor cores (sm_80+): forward, backward-data and backward-filter
/// implicit GEMMs on `mma.m16n8k8`.
#[conv2d_kernel(in_channels = 64, out_channels = 64, kernel = 3, padding = 1, allow_tf32 = true)]
pub struct Tf32Conv;

/// Before sm_80 `allow_tf32` is accepted and the CUDA-core entries run, silently.
#[conv2d_kernel(in_channels = 64, out_channels = 64, kernel = 3, allow_tf32 = true, arch = sm_75)]
pub struct Tf32OnTuring;

fn main() {
    assert!(Tf32Conv::CONFIG.allow_tf32);
    assert!(Tf32Conv::CONFIG.has_tensor_core_forward());
    assert!(Tf32Conv::CONFIG.has_tensor_core_backward_data());
    assert!(Tf32Conv::CONFIG.has_tensor_core_backward_filter());
    assert!(Tf32Conv::PTX.contains("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"));
    assert!(Tf32Conv::PTX.contains("cvt.rna.tf32.f32"));
    assert!(!Tf32OnTuring::CONFIG.has_tensor_core_forward());
    assert!(!Tf32OnTuring::PTX.contains("mma"));
}
