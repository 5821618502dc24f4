//! `conv2d_bwd_filter` (and `conv2d_bwd_bias`): weight and bias gradients, deterministically.
//!
//! `dw[oc, ci, kh, kw] = Σ_{n, oh, ow} gy[n, oc, oh, ow] · x[n, g·Cg + ci, oh·SH + kh·DH − PH,
//! ow·SW + kw·DW − PW]` (padding taps contribute 0) and `db[oc] = Σ_{n, oh, ow} gy[n, oc, oh,
//! ow]`. NHWC (`x [N, H, W, C_in]`, `gy [N, OH, OW, C_out]`) writes `dw [C_out, KH, KW, Cg]`.
//!
//! The weight gradient is a CUDA-core GEMM per group, `dw_g[o, f] = Σ_p Gy_g[o, p] ·
//! X_g[f, p]` with `M = Og` output channels, `N = Cg·KH·KW` filter rows (in the layout's
//! weight order) and the reduction over the `N·OH·OW` pixels ([`operands`]). Block 128 =
//! one 64 × 64 tile of `dw_g`, grid `(⌈Og / 64⌉, ⌈Cg·KH·KW / 64⌉, G)`; per reduction tile of
//! 32 pixels (16 for f64) the block stages both operands in shared memory ([`staging`]:
//! coalesced, 16-byte loads of NHWC channels where `Og` / `Cg` are multiples of 16 bytes),
//! then each thread accumulates 4 output channels × 8 consecutive filter rows with the
//! forward's swizzled tile product (`nhwc::tile::multiply`, in f32; f64 in f64), in
//! increasing pixel order: the same bits on every run, no float atomics. Where that grid is
//! small for the GPU, [`split`] cuts the pixels into slices (`conv2d_bwd_filter_split` into
//! partials of the accumulation type, then `conv2d_bwd_filter_reduce` in slice order).
//!
//! The bias gradient ([`bias`]) runs blocks of 256 threads over a channel tile (one NCHW
//! channel, 32 NHWC channels) and, where those are few for the GPU, the same kind of split
//! over the pixels (`conv2d_bwd_bias_split`, then `conv2d_bwd_bias_reduce`). Every split's
//! second pass is [`reduce`]'s one builder.

mod bias;
mod operands;
mod reduce;
mod split;
mod staging;

use super::common::{ConvElem, DimParams, Problem};
use super::nhwc::tile::{
    multiply, store_outputs, tile_k, zero_accumulators, Block, Lanes, Outputs, Tiles,
};
use super::nhwc::tiled_kernel;
use super::vector::VectorElem;
use crate::arch::Arch;
use crate::builder::{GlobalPtr, KernelBuilder, Val, BF16, F16, F32, F64, U32};
use crate::templates::conv::Conv2dConfig;
use operands::{Gradient, Input};
use split::Slice;

pub(crate) use bias::build as build_bias;
pub use bias::{
    bias_block_channels, bias_block_pixels, BIAS_THREADS, ENTRY_BIAS, ENTRY_BIAS_REDUCE,
    ENTRY_BIAS_SPLIT,
};
pub(super) use reduce::weights as reduce_weights;
pub use reduce::{ENTRY_REDUCE, REDUCE_THREADS};
pub use split::ENTRY_SPLIT;
use staging::Staging;

/// The weight-gradient entry name.
pub const ENTRY_FILTER: &str = "conv2d_bwd_filter";

/// A storage type of the weight gradient and the type its split stores partial sums in:
/// the accumulation type (f32 for halves and f32, f64 for f64).
pub(crate) trait FilterElem: VectorElem {
    type Partial: VectorElem + ConvElem<Acc = <Self as ConvElem>::Acc>;
}

impl FilterElem for F16 {
    type Partial = F32;
}

impl FilterElem for BF16 {
    type Partial = F32;
}

impl FilterElem for F32 {
    type Partial = F32;
}

impl FilterElem for F64 {
    type Partial = F64;
}

/// Builds `conv2d_bwd_filter(x, gy, dw, dims…)`.
pub(crate) fn build_filter<T: FilterElem>(cfg: &Conv2dConfig, arch: Arch) -> KernelBuilder {
    build_entry::<T>(cfg, arch, false)
}

/// Builds the split's entries ([`split`]): `conv2d_bwd_filter_split(x, gy, partials, dims…,
/// slice_tiles)`, then `conv2d_bwd_filter_reduce(partials, dw, slices)` unless the module
/// has it already (with the tensor-core backward-filter).
pub(crate) fn build_split<T: FilterElem>(
    cfg: &Conv2dConfig,
    arch: Arch,
) -> (KernelBuilder, Option<KernelBuilder>) {
    let reduce = (!cfg.has_tensor_core_backward_filter()).then(|| reduce_weights::<T>(cfg, arch));
    (build_entry::<T>(cfg, arch, true), reduce)
}

/// Where a block's sums go: `dw` rounded to the storage type, or (split) its slice of the
/// partials unrounded.
enum Sums<T: FilterElem> {
    Weights(GlobalPtr<T>),
    Partials(GlobalPtr<T::Partial>),
}

/// The weight-gradient entry, whole (`split == false`) or one slice of the pixels per block.
fn build_entry<T: FilterElem>(cfg: &Conv2dConfig, arch: Arch, split: bool) -> KernelBuilder {
    let p = Problem::new(cfg);
    let mut k = tiled_kernel(if split { ENTRY_SPLIT } else { ENTRY_FILTER }, arch);
    let x = k.param_ptr::<T>("x");
    let gy = k.param_ptr::<T>("gy");
    let sums = if split {
        let partials = k.param_ptr::<T::Partial>("partials");
        Sums::Partials(k.global_ptr(partials))
    } else {
        let dw = k.param_ptr::<T>("dw");
        Sums::Weights(k.global_ptr(dw))
    };
    let dims = DimParams::declare(&mut k);
    let slice_tiles = split.then(|| k.param::<U32>("slice_tiles"));
    let (x, gy) = (k.global_ptr(x), k.global_ptr(gy));
    let d = dims.load(&mut k);
    let depth = tile_k::<T::Acc>();
    let pixels = k.mul_lo(d.batch, d.ohw);
    let slice = slice_tiles.map(|tiles| {
        let tiles = k.load_param(tiles);
        Slice::locate(&mut k, cfg, tiles, depth, pixels)
    });
    // The forward's tiles: `pixels` (the product's M side) holds gradient rows, `filters`
    // (N side) input rows.
    let tiles = Tiles::<T::Acc>::declare(&mut k);
    k.comment("tile (ctaid.x, ctaid.y) of group g: dw rows g*Og + m0, columns n0");
    let group = slice.as_ref().map_or_else(|| k.ctaid_z(), |s| s.group);
    // The group selects `dw`'s rows (`first_row`), not a column offset: column group 0.
    let columns_group = k.var(0u32);
    let out_channels = k.var(p.og);
    let first_row = k.mul_lo(group, p.og);
    let first_row = match &slice {
        Some(s) => k.add(s.first_row, first_row),
        None => first_row,
    };
    let block = Block::at(&mut k, columns_group, out_channels, Some(first_row));
    let gradient = Gradient::new(&mut k, &p, &d, group);
    let input = Input::new(&mut k, &p, &d, group);
    k.comment("the thread's staged gradient and input rows");
    let gradient_rows = Staging::new::<T>(
        &mut k,
        p.layout,
        &gradient,
        tiles.pixels,
        block.tid,
        block.m0,
    );
    let input_rows =
        Staging::new::<T>(&mut k, p.layout, &input, tiles.filters, block.tid, block.n0);
    let lanes = Lanes::new(&mut k, &block, &tiles);
    let acc = zero_accumulators::<T::Acc>(&mut k);
    let (start, end): (Val<U32>, _) = match &slice {
        Some(s) => (s.start.into(), s.end),
        None => (0u32.into(), pixels),
    };
    k.comment("pixel loop: stage both tiles, sync, multiply, sync");
    k.for_range(start, end, depth, |k, k0| {
        gradient_rows.stage(k, &gradient, gy, k0);
        input_rows.stage(k, &input, x, k0);
        k.bar_sync();
        multiply(k, depth, &lanes, &acc);
        k.bar_sync();
    });
    let outputs = Outputs {
        width: p.filter_len(),
        stride: p.filter_len(),
    };
    match sums {
        Sums::Weights(dw) => store_outputs::<T>(&mut k, outputs, &block, &lanes, &acc, None, dw),
        Sums::Partials(partials) => {
            store_outputs::<T::Partial>(&mut k, outputs, &block, &lanes, &acc, None, partials);
        }
    }
    k
}
