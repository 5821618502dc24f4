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

mod gather;
mod tile;

use super::common::{conv_kernel, DimParams, Problem};
use super::vector::VectorElem;
use crate::arch::Arch;
use crate::builder::KernelBuilder;
use crate::templates::conv::Conv2dConfig;

pub use tile::{THREADS, TILE_M, TILE_N};

/// The entry name.
pub const ENTRY: &str = "conv2d_nhwc";

/// Builds `conv2d_nhwc(x, w, [bias,] y, dims…)`.
pub(crate) fn build<T: VectorElem>(cfg: &Conv2dConfig, arch: Arch) -> KernelBuilder {
    let p = Problem::new(cfg);
    let mut k = conv_kernel(ENTRY, arch);
    k.require_block([THREADS, 1, 1]);
    // Without a cap ptxas targets 128 registers at 128 threads and spills the f32 and f64
    // tiles (measured: 4 and 16 bytes on sm_80 / sm_90); the block has room for more.
    k.max_registers((arch.registers_per_block() / THREADS).min(arch.max_registers_per_thread()));
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
    let acc = tile::zero_accumulators::<T::Acc>(&mut k);
    k.comment("k-loop: stage the pixel and filter tiles, sync, multiply, sync");
    let step = tile::tile_k::<T::Acc>();
    // The loop runs to `K = max(min(N, K), K)`: a bound ptxas cannot fold. With a literal
    // bound and a single tile it removed the loop and sank each accumulator's FMAs into its
    // store's branch, holding the whole staged tile in registers (measured: 40-240 bytes of
    // spills for f64 with `K ≤ 16` and an odd `Og`).
    let fewer = k.min(d.batch, p.filter_len());
    let depth = k.max(fewer, p.filter_len());
    k.for_range(0u32, depth, step, |k, k0| {
        pixels.stage(k, &p, &d, x, k0);
        filters.stage(k, &p, w, k0);
        k.bar_sync();
        tile::multiply(k, &p, &lanes, &acc);
        k.bar_sync();
    });
    tile::store_outputs::<T>(&mut k, &p, &block, &lanes, &acc, bias, y);
    k
}
