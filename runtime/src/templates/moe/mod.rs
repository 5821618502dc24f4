//! The MoE kernel family: token routing (gating, permute), expert FFNs and unpermute.
//!
//! This module owns the configuration ([`MoeConfig`]), its validation and the run-time capacity
//! computation, and the host reference implementation ([`mod@reference`]) the kernels are tested
//! against.

mod config;
pub mod reference;

pub use config::{Ffn, MoeConfig, MoeRunShape, MoeShapeError, UnknownFfn};
