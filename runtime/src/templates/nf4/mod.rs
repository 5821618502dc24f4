//! The NF4 kernel family: GEMMs with bitsandbytes-compatible 4-bit NormalFloat weights.
//!
//! This module owns the configuration ([`Nf4Config`]), the storage format and its host
//! quantise/dequantise helpers ([`mod@format`]) and the host reference GEMMs ([`mod@reference`]).

mod config;
pub mod format;
pub mod reference;

pub use config::{Nf4Config, Nf4ShapeError};
pub use format::{
    dequantize, dequantize_absmax, quantize, quantize_absmax, Nf4DoubleQuant, Nf4FormatError,
    Nf4Weights, QuantizedAbsmax, NF4_CODE,
};
