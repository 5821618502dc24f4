//! ptxforge runtime: the PTX IR, the typed builder templates are written in, the architecture
//! model, the validator, the emitter, the kernel templates and the launch layer (metadata,
//! `Backend` trait, CPU and CUDA backends).

pub mod arch;
pub mod dtype;
pub mod launch;
pub mod lint;
pub mod matrix;
pub mod ptxas;
pub mod samples;
pub mod templates;

pub use arch::{Arch, PtxVersion};
pub use dtype::DType;

/// The cudarc crate the CUDA backend uses (feature `cuda`).
#[cfg(feature = "cuda")]
pub use cudarc;
pub mod builder;
pub mod emit;
pub mod ir;
pub mod validate;
