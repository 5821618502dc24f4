//! The split of backward-filter's reduction over the `M = N·OH·OW` output pixels into `S`
//! slices (project issue 11: the `(⌈Og / 64⌉, ⌈Cg·KH·KW / 64⌉, G)` grid alone leaves most SMs
//! idle at ResNet shapes).
//!
//! - `conv2d_bwd_filter_implicit_gemm_split(x, gy, partials, dims…, slice_tiles)`: grid
//!   `(⌈Og / 64⌉, ⌈Cg·KH·KW / 64⌉, S·G)`, block `z = s·G + g`. Slice `s` runs the K tiles
//!   `s·slice_tiles .. min((s + 1)·slice_tiles, ⌈M / K⌉)` of the unsplit kernel (the same
//!   gathers, ring and `mma` chain) and stores its f32 sums unrounded to
//!   `partials[s][g·Og + o][f]` (`[S][C_out][Cg·KH·KW]`, every element of its slice).
//! - `conv2d_bwd_filter_reduce(partials, dw, slices)`: one thread per `dw` element `e`,
//!   `dw[e] = round(Σ_{s = 0..S} partials[s][e])` summed in slice order in f32, nothing
//!   added, rounded once to the storage type: built by the crate's one split-reduce builder
//!   (`templates::split`'s `reduce`, through `backward_filter::reduce`), which the CUDA-core
//!   split, the bias gradient and NF4's splits share.
//!
//! Every sum has a fixed order (each slice's own `mma` chain, then the slices in order), so
//! the result is the same bits run to run and under any block order; no atomics. The host
//! picks `S` ([`crate::templates::conv::Conv2dConfig::backward_filter_slices`]).

use super::super::backward_filter::reduce_weights;
use super::super::common::{div_const, rem_const, ConvElem};
use crate::arch::Arch;
use crate::builder::{KernelBuilder, Reg, Val, F32, U32};
use crate::templates::conv::Conv2dConfig;

pub use super::super::backward_filter::{ENTRY_REDUCE, REDUCE_THREADS};

/// The split backward-filter entry name.
pub const ENTRY_SPLIT: &str = "conv2d_bwd_filter_implicit_gemm_split";

/// One block's slice of the reduction.
#[derive(Clone, Copy)]
pub(super) struct Slice {
    /// The slice `s`.
    pub index: Reg<U32>,
    /// K tiles per slice (the last may have fewer), a launch parameter.
    pub tiles: Reg<U32>,
}

impl Slice {
    /// Splits `ctaid.z = s·groups + g` into the slice and the group.
    pub fn locate(
        k: &mut KernelBuilder,
        z: Reg<U32>,
        groups: u32,
        tiles: Reg<U32>,
    ) -> (Self, Reg<U32>) {
        let index = div_const(k, z, groups);
        let group = rem_const(k, z, groups);
        (Self { index, tiles }, group)
    }

    /// This slice's first K tile and its tile count out of `total`: `first = s·slice_tiles`,
    /// `count = min(first + slice_tiles, total) − min(first, total)` (0 past the end).
    pub fn range(&self, k: &mut KernelBuilder, total: Val<U32>) -> (Reg<U32>, Reg<U32>) {
        let first = k.mul_lo(self.index, self.tiles);
        let end = k.add(first, self.tiles);
        let end = k.min(end, total);
        let start = k.min(first, total);
        (first, k.sub(end, start))
    }
}

/// Builds `conv2d_bwd_filter_reduce(partials, dw, slices)` over f32 partials (module docs).
pub(crate) fn build_reduce<T: ConvElem<Acc = F32>>(
    cfg: &Conv2dConfig,
    arch: Arch,
) -> KernelBuilder {
    reduce_weights::<T>(cfg, arch)
}
