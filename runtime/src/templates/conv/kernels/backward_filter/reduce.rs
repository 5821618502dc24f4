//! The reduce entries of the backward convolution's splits (project issue 11), built by the
//! crate's one split-reduce builder ([`crate::templates::split`]'s `reduce`, compile-time
//! length, one thread per output): `partials` holds `S` slices' sums of the same `len`
//! outputs, slice `s`'s part at `s·len .. (s + 1)·len`, unrounded in the accumulation type
//! (f32; f64 for f64); `out[e] = round(Σ_{s = 0..S} partials[s·len + e])`, the slices added
//! in order from 0, rounded once to the storage type (round to nearest even).
//!
//! `conv2d_bwd_filter_reduce` (`len = C_out·Cg·KH·KW`) runs after the tensor-core split (f32
//! partials) and after the CUDA-core split (partials of the accumulation type), and
//! `conv2d_bwd_bias_reduce` (`len = C_out`) after the bias gradient's split.

use super::super::common::ConvElem;
use crate::arch::Arch;
use crate::builder::KernelBuilder;
use crate::templates::conv::{Conv2dConfig, INDEX_BOUND};
use crate::templates::split::reduce::{Extent, SplitReduce};

pub use crate::templates::split::reduce::THREADS as REDUCE_THREADS;

/// The weight gradient's reduce entry name.
pub const ENTRY_REDUCE: &str = "conv2d_bwd_filter_reduce";

/// Builds `entry(partials, output, slices)`: `len` outputs of `T` from partials of `T::Acc`
/// (module docs). Grid `⌈len / 256⌉`.
pub(in crate::templates::conv::kernels) fn build<T: ConvElem>(
    (entry, output): (&'static str, &'static str),
    len: u32,
    arch: Arch,
) -> KernelBuilder {
    let reduce = SplitReduce {
        entry,
        output,
        extent: Extent::Fixed(len),
        bound: &INDEX_BOUND,
    };
    reduce.build::<T::Acc, T>(arch, T::narrow)
}

/// `conv2d_bwd_filter_reduce(partials, dw, slices)` over the `C_out·Cg·KH·KW` weights.
pub(in crate::templates::conv::kernels) fn weights<T: ConvElem>(
    cfg: &Conv2dConfig,
    arch: Arch,
) -> KernelBuilder {
    let len = u32::try_from(cfg.weight_elements()).expect("validate bounds the weight");
    build::<T>((ENTRY_REDUCE, "dw"), len, arch)
}
