//! The 2-D convolution kernel family (NCHW): direct, 1×1, im2col + GEMM, backward-data and
//! backward-filter, all with groups, stride, padding and dilation.
//!
//! This module owns the configuration ([`Conv2dConfig`]), run-time shapes and output sizes
//! ([`ConvShape`], [`ConvDims`], [`output_len`]) and the host references ([`mod@reference`]).

mod config;
pub mod reference;
mod shapes;

pub use config::{Conv2dConfig, DirectTile};
pub use shapes::{output_len, ConvDims, ConvError, ConvShape};
