use ptxforge::prelude::*;
use ptxforge::runtime::templates::attention::AttentionConfig;

/// Llama-style attention: a bare `causal` means `causal = true`.
#[attention_kernel(head_dim = 128, causal, dtype = bf16, arch = sm_90a)]
pub struct Llama;

#[attention_kernel(head_dim = 64, block_m = 64, block_n = 32, causal = false)]
pub struct Tiled;

// Tiles too big for static shared memory are fine: the kernel uses dynamic shared memory.
#[attention_kernel(head_dim = 256, dtype = f32, arch = sm_90)]
pub struct Wide;

fn main() {
    assert!(Llama::CONFIG.causal);
    assert_eq!(Llama::CONFIG.arch, Arch::Sm90a);
    assert_eq!((Tiled::CONFIG.block_m, Tiled::CONFIG.block_n), (64, 32));
    assert_eq!(Wide::CONFIG, AttentionConfig { arch: Arch::Sm90, ..AttentionConfig::new(256) });
    assert_eq!(Wide::CONFIG.validate(), Ok(()));
}
