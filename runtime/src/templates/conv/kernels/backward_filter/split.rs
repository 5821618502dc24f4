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
//!   partials[s][e])` in slice order ([`super::reduce`], the one builder of that entry).
//!   Modules with the tensor-core backward-filter already have it (f32 partials) and the
//!   CUDA-core split launches it; the others (f32 without `allow_tf32`, f64, halves before
//!   sm_80) get it over partials of the accumulation type.
//!
//! Every sum has a fixed order (each slice's own pixel order, then the slices in order): the
//! same bits on every run and under any block order, no atomics.

use super::super::common::{div_const, rem_const};
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
