//! `conv2d_nhwc`: the CUDA-core forward of the NHWC layout (f32/f64, f32 without `allow_tf32`,
//! and f16/bf16 on targets without `mma.m16n8k16`), an implicit GEMM per group
//! `Y_g[m, o] = Σ_k A_g[m, k] · W_g[o, k] (+ bias)` with `m = (n·OH + oh)·OW + ow` the output
//! pixel, `o < Og` the output channel of group `g` and `k = (kh·KW + kw)·Cg + ci` the
//! reduction index in the filter's own `[KH, KW, Cg]` order, so
//! `A_g[m, k] = x[n, oh·SH − PH + kh·DH, ow·SW − PW + kw·DW, g·Cg + ci]` (0 in the padding)
//! runs along the input's contiguous channels and `W_g[o, k] = w[g·Og + o, k]` along a
//! filter row. Accumulated in f32 (f64 for f64) in increasing `k`.
//!
//! Block [`THREADS`] = one [`TILE_M`] pixels × [`TILE_N`] channels tile of one group; grid
//! `(⌈N·OH·OW / 64⌉, ⌈Og / 64⌉, G)`. Per reduction tile of [`tile`]`::tile_k` indices (one
//! 128-byte shared row per pixel or channel) the block stages both operands in shared memory
//! ([`gather`]: 16-byte chunks of 8 halves / 4 f32 / 2 f64, one `ld.global.nc.v4`/`.v2`
//! each, where `Cg` (A) or `Cg·KH·KW` (W) is a multiple of the chunk; element by element
//! otherwise), then each thread accumulates its 4 pixels × 8 consecutive channels
//! ([`tile::multiply`]: 16-byte shared reads, conflict-free by an XOR swizzle). The epilogue
//! adds the bias and stores each thread's 8 channels of a pixel as 16-byte chunks where `Og`
//! is a multiple of the chunk.
//!
//! The NHWC module's CUDA-core `conv2d_bwd_data` ([`build_backward_data`]) is the same tiled
//! GEMM with the roles of [`transposed`]: the input pixels of one image, the group's input
//! channels, the reduction `(kh, kw, o)`. The k-loop and epilogue are shared.

mod gather;
pub(super) mod tile;
mod transposed;

use super::common::{conv_kernel, DimParams, Dims, Problem};
use super::vector::VectorElem;
use crate::arch::Arch;
use crate::builder::{Float, KernelBuilder, Reg, U32};
use crate::templates::conv::Conv2dConfig;

pub use tile::{THREADS, TILE_M, TILE_N};

/// The entry name.
pub const ENTRY: &str = "conv2d_nhwc";

/// Builds `conv2d_nhwc(x, w, [bias,] y, dims…)`.
pub(crate) fn build<T: VectorElem>(cfg: &Conv2dConfig, arch: Arch) -> KernelBuilder {
    let p = Problem::new(cfg);
    let mut k = tiled_kernel(ENTRY, arch);
    let x = k.param_ptr::<T>("x");
    let w = k.param_ptr::<T>("w");
    let bias = p.bias.then(|| k.param_ptr::<T>("bias"));
    let y = k.param_ptr::<T>("y");
    let dims = DimParams::declare(&mut k);
    let (x, w, y) = (k.global_ptr(x), k.global_ptr(w), k.global_ptr(y));
    let bias = bias.map(|b| k.global_ptr(b));
    let d = dims.load(&mut k);
    let tiles = tile::Tiles::<T::Acc>::declare(&mut k);
    let block = tile::Block::locate(&mut k, &d);
    let pixels = gather::PixelRows::locate::<T>(&mut k, &p, &d, &block, tiles.pixels);
    let filters = gather::FilterRows::locate::<T>(&mut k, &p, &block, tiles.filters);
    let lanes = tile::Lanes::new(&mut k, &block, &tiles);
    let acc = reduce(&mut k, &d, &lanes, p.filter_len(), |k, k0| {
        pixels.stage(k, &p, &d, x, k0);
        filters.stage(k, &p, w, k0);
    });
    let outputs = tile::Outputs {
        width: p.og,
        stride: p.c_out,
    };
    tile::store_outputs::<T>(&mut k, outputs, &block, &lanes, &acc, bias, y);
    k
}

/// Builds backward-data in the NHWC layout, `conv2d_bwd_data(gy, w, dx, dims…)`: the same
/// tiled GEMM over the input pixels `m < H·W` of image `n` (block `(⌈H·W / 64⌉, ⌈Cg / 64⌉,
/// N·G)`), the reduction `(kh, kw, o)` and the group's input channels ([`transposed`]).
pub(crate) fn build_backward_data<T: VectorElem>(cfg: &Conv2dConfig, arch: Arch) -> KernelBuilder {
    let p = Problem::new(cfg);
    let mut k = tiled_kernel(super::ENTRY_BWD_DATA, arch);
    let (gy, w, dx, d) = super::backward_data::declare_params::<T>(&mut k);
    let tiles = tile::Tiles::<T::Acc>::declare(&mut k);
    let groups = p.c_in / p.cg;
    let (block, image) = tile::Block::locate_in_image(&mut k, &d, groups);
    let gradients =
        transposed::GradientRows::locate::<T>(&mut k, &p, &d, (&block, image), tiles.pixels);
    let filters = transposed::FilterColumns::locate::<T>(&mut k, &p, &block, tiles.filters);
    let lanes = tile::Lanes::new(&mut k, &block, &tiles);
    let acc = reduce(&mut k, &d, &lanes, p.taps * p.og, |k, k0| {
        gradients.stage(k, &p, &d, gy, k0);
        filters.stage(k, &p, w, k0);
    });
    let outputs = tile::Outputs {
        width: p.cg,
        stride: p.c_in,
    };
    tile::store_outputs::<T>(&mut k, outputs, &block, &lanes, &acc, None, dx);
    k
}

/// A tiled entry: block [`THREADS`], `.maxnreg` at the block's budget (without it ptxas
/// targets 128 registers at 128 threads and spilled the f32 and f64 tiles: measured 4 and 16
/// bytes on sm_80 / sm_90).
pub(super) fn tiled_kernel(name: &str, arch: Arch) -> KernelBuilder {
    let mut k = conv_kernel(name, arch);
    k.require_block([THREADS, 1, 1]);
    k.max_registers((arch.registers_per_block() / THREADS).min(arch.max_registers_per_thread()));
    k
}

/// The k-loop over a reduction of `depth`: `stage` fills both tiles, then sync, multiply,
/// sync. Returns the accumulators.
///
/// The loop runs to `max(min(N, depth), depth)`: a bound ptxas cannot fold. With a literal
/// bound and a single tile it removed the loop and sank each accumulator's FMAs into its
/// store's branch, holding the whole staged tile in registers (measured: 40-240 bytes of
/// spills for f64 with a reduction of at most 16 and an odd channel count).
fn reduce<A: Float>(
    k: &mut KernelBuilder,
    d: &Dims,
    lanes: &tile::Lanes,
    depth: u32,
    stage: impl FnOnce(&mut KernelBuilder, Reg<U32>),
) -> Vec<Vec<Reg<A>>> {
    let acc = tile::zero_accumulators::<A>(k);
    k.comment("k-loop: stage both tiles, sync, multiply, sync");
    let fewer = k.min(d.batch, depth);
    let bound = k.max(fewer, depth);
    k.for_range(0u32, bound, tile::tile_k::<A>(), |k, k0| {
        stage(k, k0);
        k.bar_sync();
        tile::multiply(k, depth, lanes, &acc);
        k.bar_sync();
    });
    acc
}
