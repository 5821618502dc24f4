//! The MoE kernel family: token routing (gating, permute), expert FFNs and unpermute.
//!
//! This module owns the configuration ([`MoeConfig`]), its validation and the run-time capacity
//! computation, the host reference implementation ([`mod@reference`]) the kernels are tested
//! against, the kernels themselves ([`mod@kernels`], `impl KernelFamily for MoeConfig`) and the
//! host launch code ([`mod@launch`]).

mod config;
pub mod kernels;
pub mod launch;
pub mod reference;

pub use config::{Ffn, MoeConfig, MoeRunShape, MoeShapeError, UnknownFfn, INDEX_BOUND};
pub use kernels::matrix_configs;
