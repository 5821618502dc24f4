//! The NF4 kernel family: GEMMs with bitsandbytes-compatible 4-bit NormalFloat weights.
//!
//! This module owns the configuration ([`Nf4Config`]), the storage format and its host
//! quantise/dequantise helpers ([`mod@format`]), the host reference GEMMs ([`mod@reference`]),
//! the kernels ([`mod@kernels`]: forward GEMV and tiled GEMM, backward-input GEMM) and their
//! host launch code ([`mod@launch`]), and the loader for bitsandbytes checkpoints in safetensors
//! ([`mod@checkpoint`]).

pub mod checkpoint;
mod config;
pub mod format;
pub mod kernels;
pub mod launch;
pub mod reference;

pub use checkpoint::{CheckpointError, CheckpointLoadError, LoadedNf4, Nf4Checkpoint, Nf4State};
pub use config::{Nf4Config, Nf4ShapeError, INDEX_BOUND};
pub use format::{
    dequantize, dequantize_absmax, dynamic_map, quantize, quantize_absmax,
    quantize_absmax_with_offset, Nf4DoubleQuant, Nf4FormatError, Nf4Weights, QuantizedAbsmax,
    NF4_CODE,
};
pub use kernels::matrix_configs;
