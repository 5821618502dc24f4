//! The attention kernel family: FlashAttention-2-style forward with GQA and causal masking.
//!
//! This module owns the configuration ([`AttentionConfig`]) with its tile defaults and
//! shared-memory footprint, the run-time shape ([`AttentionShape`]), the host reference
//! ([`mod@reference`]), the kernels (built by [`KernelFamily::compile`](crate::templates::KernelFamily))
//! and the host launch code ([`launch`]).

mod config;
mod kernels;
pub mod launch;
pub mod reference;

pub use config::{
    AttentionConfig, AttentionShape, AttentionShapeError, AttentionTiles, SharedMemoryKind,
};
pub use kernels::{matrix_configs, ENTRY};
