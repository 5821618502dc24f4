//! The attention kernel family: FlashAttention-2-style forward with GQA and causal masking.
//!
//! This module owns the configuration ([`AttentionConfig`]) with its tile defaults and
//! shared-memory footprint, the run-time shape ([`AttentionShape`]) and the host reference
//! ([`mod@reference`]).

mod config;
pub mod reference;

pub use config::{
    AttentionConfig, AttentionShape, AttentionShapeError, AttentionTiles, SharedMemoryKind,
};
