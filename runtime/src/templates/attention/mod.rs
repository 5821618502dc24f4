//! The attention kernel family: FlashAttention-2-style forward with GQA and causal masking.
//!
//! Two kernels share one entry, parameters and launch ([`AttentionPath`], chosen silently from
//! the dtype and target): f16/bf16 on sm_80+ run on tensor cores (`mma.m16n8k16`, `cp.async`
//! K/V rings of 2 or 3 stages, P kept in registers); f32, f64 and older targets on CUDA cores.
//!
//! This module owns the configuration ([`AttentionConfig`]) with its tile defaults and
//! shared-memory footprint, the run-time shape ([`AttentionShape`]), the host reference
//! ([`mod@reference`]), the kernels (built by [`KernelFamily::compile`](crate::templates::KernelFamily))
//! the host launch code ([`launch`]) and the tensor layouts it accepts ([`layout`]: contiguous,
//! `[B, S, H, D]`, packed QKV, KV cache with spare capacity).

mod config;
mod kernels;
pub mod launch;
pub mod layout;
pub mod reference;

pub use config::{
    AttentionConfig, AttentionPath, AttentionShape, AttentionShapeError, AttentionTiles,
    SharedMemoryKind, INDEX_BOUND,
};
pub use kernels::{matrix_configs, ENTRY};
pub use layout::{AttentionLayouts, LayoutError, TensorLayout};
