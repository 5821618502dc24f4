//! The 2-D convolution kernel family: direct, 1×1, im2col + GEMM (NCHW), backward-data and
//! backward-filter (both layouts), all with groups, stride, padding and dilation; the
//! tensor-core implicit GEMMs (forward, backward-data, backward-filter) for f16/bf16, and f32
//! with `allow_tf32`, on sm_80+ in both layouts; and the CUDA-core NHWC forward for everything
//! else in the channels-last layout ([`Layout`]).
//!
//! This module owns the configuration ([`Conv2dConfig`]), run-time shapes and output sizes
//! ([`ConvShape`], [`ConvDims`], [`output_len`]), the host references ([`mod@reference`]),
//! the kernels ([`mod@kernels`]: `impl KernelFamily for Conv2dConfig`) and the host launch
//! functions ([`mod@launch`]).

mod config;
mod geometry;
pub mod kernels;
pub mod launch;
mod phases;
pub mod reference;
mod shapes;

pub use config::{Conv2dConfig, DirectTile, GemmTile, Layout, INDEX_BOUND};
pub use geometry::{
    INDEX_LIMIT, MAX_GRID_X, MAX_GRID_YZ, MIN_SLICE_TILES, POINTWISE_PIXEL_RUN, SPLIT_TARGET_SMS,
    SPLIT_WAVES,
};
pub use kernels::matrix_configs;
pub use shapes::{output_len, ConvDims, ConvError, ConvShape};
