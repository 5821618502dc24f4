//! The split of the CUDA-core weight gradient's reduction over the `N·OH·OW` pixels into
//! `S` slices (project issue 11: the `(⌈Og / 64⌉, ⌈Cg·KH·KW / 64⌉, G)` grid alone is a few
//! dozen blocks at ResNet shapes).
//!
//! - `conv2d_bwd_filter_split(x, gy, partials, dims…, slice_tiles)`: grid `(⌈Og / 64⌉,
//!   ⌈Cg·KH·KW / 64⌉, S·G)`, block `z = s·G + g`. Slice `s` runs the unsplit kernel's
//!   reduction tiles `s·slice_tiles .. min((s + 1)·slice_tiles, ⌈N·OH·OW / K⌉)` (same staging,
//!   same products, in increasing pixel order) and stores its sums unrounded, in the
//!   accumulation type (f32; f64 for f64), to `partials[s][g·Og + o][f]` (`[S][C_out][Cg·KH·KW]`,
//!   every element of its slice; 0 for a slice past the end).
//! - `conv2d_bwd_filter_reduce(partials, dw, slices)`: `dw[e] = round(Σ_{s = 0..S}
//!   partials[s][e])` in slice order. Modules with the tensor-core backward-filter already
//!   have this entry (f32 partials, [`crate::templates::conv::kernels::ENTRY_BWD_FILTER_REDUCE`])
//!   and the CUDA-core split launches it; the others (f32 without `allow_tf32`, f64, halves
//!   before sm_80) get [`build_reduce`], the same entry over partials of the accumulation type.
//!
//! Every sum has a fixed order (each slice's own pixel order, then the slices in order): the
//! same bits on every run and under any block order, no atomics.

use super::super::common::{conv_kernel, div_const, rem_const, ConvElem};
use super::super::implicit_gemm::{ENTRY_REDUCE, REDUCE_THREADS};
use crate::arch::Arch;
use crate::builder::{KernelBuilder, Reg, U32};
use crate::templates::conv::Conv2dConfig;

/// The split weight-gradient entry name.
pub const ENTRY_SPLIT: &str = "conv2d_bwd_filter_split";

/// One block's slice of the pixels.
pub(super) struct Slice {
    /// The group `g` of `ctaid.z = s·G + g`.
    pub group: Reg<U32>,
    /// `s·C_out`: the slice's first row of `partials`, seen as `[S·C_out][Cg·KH·KW]`.
    pub first_row: Reg<U32>,
    /// The slice's pixels `start .. end`, whole reduction tiles (`end` clamped to `N·OH·OW`).
    pub start: Reg<U32>,
    pub end: Reg<U32>,
}

impl Slice {
    /// Slice `⌊ctaid.z / G⌋` of `slice_tiles` tiles of `depth` pixels, out of `pixels`.
    pub fn locate(
        k: &mut KernelBuilder,
        cfg: &Conv2dConfig,
        slice_tiles: Reg<U32>,
        depth: u32,
        pixels: Reg<U32>,
    ) -> Self {
        let z = k.ctaid_z();
        let index = div_const(k, z, cfg.groups);
        let group = rem_const(k, z, cfg.groups);
        let first_row = k.mul_lo(index, cfg.out_channels);
        let len = k.mul_lo(slice_tiles, depth);
        let start = k.mul_lo(index, len);
        let end = k.add(start, len);
        let end = k.min(end, pixels);
        Self {
            group,
            first_row,
            start,
            end,
        }
    }
}

/// Builds `conv2d_bwd_filter_reduce(partials, dw, slices)` over partials of the
/// accumulation type (module docs).
pub(super) fn build_reduce<T: ConvElem>(cfg: &Conv2dConfig, arch: Arch) -> KernelBuilder {
    let mut k = conv_kernel(ENTRY_REDUCE, arch);
    k.require_block([REDUCE_THREADS, 1, 1]);
    let partials = k.param_ptr::<T::Acc>("partials");
    let dw = k.param_ptr::<T>("dw");
    let slices = k.param::<U32>("slices");
    let (partials, dw) = (k.global_ptr(partials), k.global_ptr(dw));
    let slices = k.load_param(slices);
    let weights = u32::try_from(cfg.weight_elements()).expect("validate bounds the weight");
    k.for_global_index(weights, |k, e| {
        k.comment("add the slices in order, round once");
        let total = k.zero::<T::Acc>();
        k.for_range(0u32, slices, 1u32, |k, s| {
            let at = k.mad_lo(s, weights, e);
            let at = k.elem_addr(partials, at);
            let part = k.ld_global_nc::<T::Acc>(at, 0);
            k.add_into(total, total, part);
        });
        let rounded = T::narrow(k, total);
        let at = k.elem_addr(dw, e);
        k.st_global(at, 0, rounded);
    });
    k
}
