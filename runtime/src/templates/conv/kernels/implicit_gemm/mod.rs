//! `conv2d_implicit_gemm`, `conv2d_bwd_data_implicit_gemm` and
//! `conv2d_bwd_filter_implicit_gemm`: the forward convolution, its input gradient and its
//! weight gradient as implicit GEMMs on tensor cores (f16 and bf16 on targets with
//! `mma.m16n8k16`, and f32 with `allow_tf32` on tf32 `mma.m16n8k8`; f32 accumulation), generic
//! over the tile's element ([`TileElem`]: the stage holds 32 halves or 16 f32 of reduction per
//! row, a 16-byte chunk 8 halves or 4 f32). All three share everything below but the operand
//! addressing ([`addressing`]), the choice of gather per operand ([`gather`]) and the output
//! indexing ([`epilogue`]), per [`Pass`].
//!
//! **Forward.**
//! Per group `g`, `Y_g [M, Og] = A [M, K] · W_gᵀ` with `M = N·OH·OW` output pixels and
//! `K = Cg·KH·KW`. Row `m = (n·OH + oh)·OW + ow` of A is the receptive field of that pixel,
//! gathered straight from `x` with im2col addressing (no `cols` buffer): reduction index `k`
//! is `(ci, kh, kw)` in the weight's order — `ci·KH·KW + kh·KW + kw` for NCHW,
//! `(kh·KW + kw)·Cg + ci` for NHWC — and reads `x[n, g·Cg + ci, oh·SH − PH + kh·DH,
//! ow·SW − PW + kw·DW]`, 0 in the padding. The weight rows `W[g·Og + o, 0..K]` are already
//! contiguous in `k`, i.e. the column-major B operand, so B fragments come from plain
//! (untransposed) `ldmatrix`.
//!
//! The block tile is the shared [`crate::templates::warp_mma`] one (MoE's expert GEMMs run
//! the same): [`tile::THREADS`] threads (4 warps, 2 × 2) compute a tile of pixels × output
//! channels of one group, [`Geometry::WIDE`]'s 128 × 128 or [`Geometry::TALL`]'s 128 × 64
//! where both operands move in 16-byte `cp.async` chunks (NHWC halves with channel counts
//! multiples of 8, the channels-last entries and the pointwise one), else
//! [`Geometry::SQUARE`]'s 64 × 64 ([`tile_geometry`]; the backward passes' tiles likewise);
//! grid `(⌈M / rows⌉, ⌈Og / columns⌉, groups)`. The `cp.async` ring, the `ldmatrix` fragment
//! loads from padded rows and the `mma` loop are that module's; this one only fills ring
//! slots (the im2col addressing) and stores.
//!
//! A ring slot is filled per operand by the gather that makes its global loads coalesce
//! ([`gather`]): 16-byte `cp.async` chunks where a chunk's consecutive reduction indices (8
//! halves or 4 f32) are contiguous and aligned (NHWC A with `Cg` and `C_in` multiples of the
//! chunk; B when `K` is a multiple of it), else element loads with consecutive lanes on
//! consecutive addresses: lane → pixel for NCHW's A (consecutive pixels are consecutive `iw`
//! of one tap; at stride 1 or 2 without dilation along `w` each `(ci, kh)` input row is read
//! once as whole sectors and the taps handed out by shuffles, [`window`]), lane → reduction
//! index for B and for NHWC windows of few channels.
//!
//! The epilogue adds the bias in f32, rounds once to the storage type and stores inside
//! `M × Og` only.
//!
//! **NCHW through channels-last copies** (`conv2d_implicit_gemm_channels_last`, halves with
//! `Cg` and `C_in` multiples of 8). NCHW's element-wise A gathers cost an NCHW
//! forward about four times the instructions per output of NHWC's 16-byte chunks (measured
//! on ResNet-50's 3 × 3 128 → 128: 571 vs 137). So, as cuDNN does for NCHW tensor-core
//! convolutions, the host first copies `x` to NHWC and `w` to `[C_out, KH, KW, Cg]`
//! (`conv2d_to_channels_last`: 8 × 8 register blocks, 16-byte loads and stores;
//! `conv2d_filter_to_channels_last`: a conflict-free shared-memory transpose; a 1 × 1 `w` is
//! channels-last already) and this entry is then the NHWC forward — same gathers, tiles, grid
//! and reduction order `(kh, kw, ci)` per output — with NCHW's epilogue indexing
//! (`y[n, g·Og + o, oh, ow]`): where `OH·OW` is a multiple of 8 the rounded tile is staged
//! in the free ring and stored as 16-byte runs along the pixels ([`staged_store`]), else
//! element by element. A 1 × 1 filter takes this route at stride 1 only (at larger strides
//! the copy would move pixels the GEMM never reads), and without padding only where `OH·OW`
//! is not a multiple of 8 (ResNet's 14 × 14 and 7 × 7): elsewhere its NCHW A needs no copy
//! (below), which would add `x`'s bytes twice (32.2 → 45.4 MB of DRAM traffic on ResNet-50's
//! 1 × 1 128 → 512).
//!
//! **NCHW 1 × 1 over chunks of pixels** (`conv2d_implicit_gemm_pointwise`, halves with `Cg` a
//! multiple of 8, stride 1, no padding). Output pixel `m` of image `n` reads input pixel
//! `m − n·H·W` of the same image, so A's column `ci` is `x[n, g·Cg + ci, ..]` itself,
//! contiguous along the tile's rows: where `H·W` is a multiple of 8 (the launch's
//! condition) 8 consecutive pixels of one channel are one aligned 16-byte chunk inside one
//! image. A is then staged by reduction index ([`Staging::ByK`]: `[ci][pixel]`, the
//! backward-filter's stage, read by `ldmatrix.trans`), filled by `cp.async` chunks with no
//! copy, and the tile is the NHWC forward's (128 × 128 or 128 × 64,
//! [`pointwise_tile_geometry`]); the NCHW `y` is staged through the free rings and stored as
//! 16-byte runs ([`staged_store`]). ResNet-50's 1 × 1 128 → 512 on 28 × 28 at batch 32:
//! 76.1 → 14.7 instructions per output, modelled at its DRAM bound (29.2 → 9.62 µs). The
//! GEMM's rows and reduction order per output are `conv2d_implicit_gemm`'s. Where `H·W` is
//! not a multiple of 8 the host takes the channels-last copies (above).
//!
//! **NCHW backward through channels-last copies** (halves with `Cg`, `C_in`, `Og` and
//! `C_out` multiples of 8, any filter). The NCHW backward GEMMs gather `gy` (and, for the
//! weight gradient, `x`) element by element, about five times the instructions per output of
//! the NHWC passes, whose operands all move in 16-byte `cp.async` chunks (3 × 3 64 → 64 on
//! 16 × 16, f16: backward-data 468.0 vs 86.0, backward-filter at batch 2 381.6 vs 71.2; 1 × 1
//! at batch 2, copies included: 59.5 vs 18.8 and 378.0 vs 94.2). So the host copies the
//! operands channels-last as the forward does — `gy` by `conv2d_gradient_to_channels_last`
//! (the input copy's kernel over `C_out` channels and `OH·OW` pixels), `w` and `x` by the
//! forward's copies (in the module for the backward alone for a 1 × 1 at a stride above 1;
//! a 1 × 1 `w` is channels-last already and is read as it is) — and
//! `conv2d_bwd_data_implicit_gemm_channels_last` and
//! `conv2d_bwd_filter_implicit_gemm_channels_last` (and its split) are the NHWC passes with
//! NCHW outputs: `dx[n, g·Cg + c, pixel]`, and `dw` in the NCHW weight's order, the NHWC
//! filter column `tap·Cg + ci` stored at `ci·KH·KW + tap` (`Conv::output_column`); the
//! reduction order per output is the NHWC pass's.
//!
//! **Backward-data.** Per image `n` and group `g`, `dX [M, Cg] = A [M, K] · B [K, Cg]`
//! with `M = H·W` input pixels, `K = Og·KH·KW` and `k = o·KH·KW + kh·KW + kw`:
//! `A[(h, w), k] = gy[n, g·Og + o, oh, ow]` where `oh·SH = h + PH − kh·DH` exactly and
//! `0 ≤ oh < OH` (likewise `ow`), 0 otherwise (the taps that skip this pixel under the
//! stride, or fall outside the output); `B[k, c] = w[g·Og + o, c, kh, kw]`, stored `[c][k]`
//! like the forward's B so the same untransposed `ldmatrix` reads it (f32 B gathered by
//! filter slabs: in slab order instead, read by `ld.shared`, [`slab_tile`]). The grid is
//! `(⌈H·W / rows⌉, ⌈Cg / columns⌉, N·G)` (the NHWC chunked passes' 128 × 64 tile, else
//! 64 × 64): a tile never spans two images, so no run-time division
//! by `H·W` is needed. A is gathered lane → pixel (consecutive `w`, consecutive `ow` of one
//! tap; without dilation along `w`, for halves at any stride and f32 at stride 1, each `(o,
//! kh)` row of `gy` read once as whole sectors, [`window`]); B in 16-byte chunks when `KH·KW` is a multiple of the chunk (8 halves, 4 f32: a
//! chunk then stays within one `o` and is aligned), lane → channel for 1 × 1 filters, else
//! by filter slabs (the `[Cg-tile, KH, KW]` block of one `o` is contiguous, loaded whole
//! once, the taps past a tile's end kept in registers for the next tile). Every `dx`
//! element is one dot product summed in `k` order by one warp's `mma` chain: deterministic,
//! no atomics.
//!
//! **Backward-filter.** Per group `g`, `dW_g [Og, Cg·KH·KW] = A [Og, M] · B [M,
//! Cg·KH·KW]` reduced over the `M = N·OH·OW` output pixels (a run-time length: the ring runs
//! `⌈M / 32⌉` tiles, `⌈M / 16⌉` for f32): `A[o, m] = gy[n, g·Og + o, oh, ow]`,
//! `B[m, f] = x[n, g·Cg + ci, oh·SH − PH + kh·DH, ow·SW − PW + kw·DW]` (0 in the padding)
//! with `f = (ci, kh, kw)` in the weight's order, read with im2col addressing on the fly (no
//! `cols` buffer) and stored `[f][m]` so the same untransposed `ldmatrix` reads it. Both are
//! gathered lane → pixel (consecutive `m`: consecutive `ow`; at stride 1 or 2 without
//! dilation along `w`, B's `(ci, kh)` rows each read once per tile as whole sectors,
//! [`window`]). Grid `(⌈Og / 64⌉,
//! ⌈Cg·KH·KW / 64⌉, G)`; each `dw` element is summed over all pixels in order by one warp's
//! `mma` chain in f32 (no atomics: deterministic), then rounded once. Where that grid is
//! too small for the GPU, [`split`] cuts the pixels into `S` slices, each summed this way into
//! f32 partials, which a second entry adds in slice order (still deterministic).
//!
//! **Channels-last backward** (NHWC: `x`/`dx [N, H, W, C_in]`, `gy [N, OH, OW, C_out]`, the
//! forward's weight `w`/`dw [C_out, KH, KW, Cg]`). The same GEMMs, tiles, grids and
//! reduction order per output, with the indices in the NHWC weight's order and every
//! activation position `p` at `p·C + channel` ([`addressing`]):
//! - backward-data reduces over `k = (kh·KW + kw)·Og + o` (tap-major, so consecutive `k` are
//!   consecutive channels of one `gy` pixel): A in 16-byte `cp.async` chunks when `Og` and
//!   `C_out` are multiples of the chunk (a chunk then stays within one tap, shares its
//!   stride/bounds predicate and is aligned), else lane → reduction index (consecutive
//!   channels); `B[k, c] = w[g·Og + o, kh, kw, c]` is contiguous along `c`, the tile's
//!   rows: for halves with `Cg` a multiple of 8 it is staged by reduction index
//!   ([`Staging::ByK`]: `[k][c]`, 16-byte `cp.async` chunks of 8 consecutive `c` of one
//!   `(o, kh, kw)`, read by `ldmatrix.trans`), else lane → channel (a warp reads 32
//!   consecutive `c`); `dx[n, h, w, g·Cg + c]`.
//! - backward-filter computes `dW_g [Og, KH·KW·Cg]` with filter columns
//!   `f = (kh·KW + kw)·Cg + ci` (the `dw` layout itself) reduced over pixels `m`:
//!   `A[o, m] = gy[m, g·Og + o]` and `B[m, f] = x[n, ih, iw, g·Cg + ci]`. Channels are the
//!   tile *rows* here and the reduction runs across pixels, `C` elements apart, so the
//!   `[row][k]` stage the untransposed `ldmatrix` reads would take element gathers. For
//!   halves each operand whose channels allow 16-byte chunks (A: `Og` and `C_out`, B: `Cg`
//!   and `C_in` multiples of 8; a chunk of B then stays within one tap, so it shares one
//!   window position and bounds predicate) is instead staged pixel-major ([`Staging::ByK`],
//!   as CUTLASS's NHWC weight gradient does): stage row `m` holds the tile's 64 channels
//!   of pixel `m` (of its tap for B), filled by `cp.async` chunks of 8 consecutive
//!   channels (zero-filled past `M`, past the tile's channels and in the padding), and the
//!   fragments come from `ldmatrix.trans` ([`tile::multiply_staged_tile`]). The other
//!   operands (tf32, whose `ldmatrix` has no transpose, and channels not multiples of 8)
//!   are gathered lane → channel (a warp reads 32 consecutive channels of one pixel). Either
//!   way each `dw` element is one warp's `mma` chain over the pixels in order.

mod addressing;
mod epilogue;
mod gather;
mod rings;
mod slab_tile;
mod split;
mod staged_store;
mod window;

use super::common::{conv_kernel, div_const, rem_const, ConvElem, DimParams, Dims, Problem};
use crate::arch::Arch;
use crate::builder::{GlobalPtr, KernelBuilder, Reg, Val, F32, U32};
use crate::dtype::DType;
use crate::templates::conv::{Conv2dConfig, Layout};
use crate::templates::warp_mma::{self as tile, Geometry, Staging, TileElem, WarpPos, CHUNK_BYTES};
use addressing::Side;
use epilogue::Output;
use gather::{Operand, Strategy};
pub(crate) use rings::dynamic_shared_bytes;
use rings::Rings;
use slab_tile::{SlabStaged, SlabTile};
use split::Slice;

pub use split::{ENTRY_REDUCE, ENTRY_SPLIT, REDUCE_THREADS};

/// The forward entry name.
pub const ENTRY: &str = "conv2d_implicit_gemm";
/// The NCHW forward over channels-last copies of `x` and `w` (the layout pre-pass,
/// `conv2d_to_channels_last`), storing `y` in NCHW.
pub const ENTRY_CHANNELS_LAST: &str = "conv2d_implicit_gemm_channels_last";
/// The NCHW forward of a 1 × 1 filter at stride 1 without padding (halves, `Cg` a multiple of
/// 8) whose A is read in 16-byte `cp.async` chunks of 8 consecutive pixels of one channel
/// ([`Conv2dConfig::has_pointwise_implicit_gemm`]); a launch needs `OH·OW` a multiple of 8.
pub const ENTRY_POINTWISE: &str = "conv2d_implicit_gemm_pointwise";
/// The backward-data entry name.
pub const ENTRY_BWD_DATA: &str = "conv2d_bwd_data_implicit_gemm";
/// The backward-filter entry name.
pub const ENTRY_BWD_FILTER: &str = "conv2d_bwd_filter_implicit_gemm";
/// The NCHW backward-data over channels-last copies of `gy` and `w`, storing `dx` in NCHW.
pub const ENTRY_BWD_DATA_CHANNELS_LAST: &str = "conv2d_bwd_data_implicit_gemm_channels_last";
/// The NCHW backward-filter over channels-last copies of `x` and `gy`, storing `dw` in NCHW.
pub const ENTRY_BWD_FILTER_CHANNELS_LAST: &str = "conv2d_bwd_filter_implicit_gemm_channels_last";
/// The split form of [`ENTRY_BWD_FILTER_CHANNELS_LAST`] (f32 partials in NCHW weight order,
/// summed by [`ENTRY_REDUCE`]).
pub const ENTRY_SPLIT_CHANNELS_LAST: &str = "conv2d_bwd_filter_implicit_gemm_channels_last_split";

/// The largest filter (`KH·KW`) whose backward-data B is gathered by filter slabs: each
/// thread keeps `⌈64·KH·KW / 128⌉` carried slab elements live across the K loop (ptxas gave
/// a 7 × 7 filter's 25 slab offsets 220 registers). At most the shallowest tile (16 f32),
/// so a filter spans at most two K tiles.
const MAX_SLAB_TAPS: u32 = 16;

const _: () = assert!(MAX_SLAB_TAPS <= <F32 as TileElem>::TILE_K);

/// Which implicit GEMM a kernel computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pass {
    /// `y` from `x` and `w` (NCHW or NHWC), with the bias.
    Forward,
    /// `dx` from `gy` and `w` (NCHW or NHWC).
    BackwardData,
    /// `dw` from `x` and `gy` (NCHW or NHWC).
    BackwardFilter,
}

impl Pass {
    /// The entry name.
    const fn entry(self) -> &'static str {
        match self {
            Pass::Forward => ENTRY,
            Pass::BackwardData => ENTRY_BWD_DATA,
            Pass::BackwardFilter => ENTRY_BWD_FILTER,
        }
    }

    /// The entry over channels-last copies of the operands with the output in NCHW.
    const fn channels_last_entry(self) -> &'static str {
        match self {
            Pass::Forward => ENTRY_CHANNELS_LAST,
            Pass::BackwardData => ENTRY_BWD_DATA_CHANNELS_LAST,
            Pass::BackwardFilter => ENTRY_BWD_FILTER_CHANNELS_LAST,
        }
    }

    /// The buffer parameters in order (the CUDA-core entries' order) and the output.
    const fn buffers(self) -> [&'static str; 3] {
        match self {
            Pass::Forward => ["x", "w", "y"],
            Pass::BackwardData => ["gy", "w", "dx"],
            Pass::BackwardFilter => ["x", "gy", "dw"],
        }
    }
}

/// Everything the phases share.
struct Conv<T: ConvElem + TileElem> {
    p: Problem,
    pass: Pass,
    reads: Reads,
    /// The operands' layout.
    layout: Layout,
    /// The output's layout: the operands' except for [`ENTRY_CHANNELS_LAST`] (NCHW `y`).
    out_layout: Layout,
    d: Dims,
    bias: Option<GlobalPtr<T>>,
    /// The output: `y`, `dx` or `dw`, or the split backward-filter's f32 partials.
    out: Output<T>,
    /// The GEMM's M extent: `N·OH·OW` (forward), `H·W` of this block's image
    /// (backward-data), `Og` (backward-filter).
    m_len: Val<U32>,
    /// The reduction length: `Cg·KH·KW` (forward), `Og·KH·KW` (backward-data), `N·OH·OW`
    /// (backward-filter, known at run time only).
    reduction: Val<U32>,
    /// Backward-data: this block's image.
    image: Option<Reg<U32>>,
    /// The split backward-filter: this block's slice of the pixels.
    slice: Option<Slice>,
    group: Reg<U32>,
    block_m: Reg<U32>,
    block_n: Reg<U32>,
    /// The block tile: [`Geometry::TALL`] or [`Geometry::SQUARE`] ([`tile_geometry`]).
    geometry: Geometry,
    /// The thread's lane and warp quadrant.
    pos: WarpPos,
    /// Both operands' rings.
    rings: Rings<T>,
    a: Operand<T>,
    b: Operand<T>,
}

/// Whether this configuration has the tensor-core entries (every [`Pass`], both layouts):
/// f16/bf16, or f32 with `allow_tf32` (tf32 `mma.m16n8k8`), on a target with `mma.m16n8k16`
/// (sm_80+; other dtypes and older targets keep the CUDA-core entries).
pub(crate) fn available(cfg: &Conv2dConfig) -> bool {
    let tensor_dtype = match cfg.dtype {
        DType::F16 | DType::BF16 => true,
        DType::F32 => cfg.allow_tf32,
        DType::F64 => false,
    };
    tensor_dtype && cfg.arch.has_mma_m16n8k16()
}

/// The block tile of `pass` over `cfg`'s operands (for the `…_channels_last` entries, the
/// NHWC view of the config: [`channels_last_operands`]). A 128 × 64 or 64 × 128 tile (4
/// warps of 64 × 32 or 32 × 64, 4 × 4 or 2 × 8 accumulators; 46080 bytes of rings) where
/// both operands of halves move in 16-byte `cp.async` chunks: per 16-deep slice a warp
/// reads 24 `ldmatrix` matrices for 16 mma (1.5 per mma against [`Geometry::SQUARE`]'s 2.0)
/// and the copies write 0.75 wavefronts per mma against 1.0, the shared traffic that bounds
/// these GEMMs. The long side goes where it pads no more than 64 would:
/// - forward (A in [`Strategy::Chunks`], B in chunks): [`Geometry::WIDE`], 128 pixels × 128
///   output channels where `Og` pads to 128 no further than to 64, else
///   [`Geometry::TALL`], 128 × 64 (the pixels run across images: at most one ragged tile;
///   [`pointwise_tile_geometry`] likewise);
/// - backward-data (A in chunks, B staged [`Strategy::ChunksByK`]): [`Geometry::FLAT`], 64
///   pixels × 128 input channels, where `Cg` pads to 128 no further than to 64 (a pixel
///   tile stays in one image, so 128 pixels would double the work of a 7 × 7 image);
/// - backward-filter (both staged by reduction index): [`Geometry::TALL`], 128 output
///   channels × 64 filter columns, where `Og` pads to 128 no further than to 64.
///
/// Everything else keeps [`Geometry::SQUARE`] (the other gathers' thread assignments are
/// written for 64-row tiles).
pub(crate) fn tile_geometry(cfg: &Conv2dConfig, pass: Pass) -> Geometry {
    let halves = matches!(cfg.dtype, DType::F16 | DType::BF16);
    let p = Problem::new(cfg);
    let strategy = |side| strategy(&p, pass, cfg.layout, (2, true), side);
    let chunks = |side| strategy(side) == Strategy::Chunks;
    let by_k = |side| strategy(side) == Strategy::ChunksByK;
    let g = match pass {
        _ if !(halves && available(cfg)) => None,
        Pass::Forward if chunks(Side::A) && chunks(Side::B) => Some(forward_chunks_geometry(&p)),
        Pass::Forward => None,
        Pass::BackwardData => {
            (chunks(Side::A) && by_k(Side::B) && long_fits(p.cg)).then_some(Geometry::FLAT)
        }
        Pass::BackwardFilter => {
            (by_k(Side::A) && by_k(Side::B) && long_fits(p.og)).then_some(Geometry::TALL)
        }
    };
    g.unwrap_or(Geometry::SQUARE)
}

/// Whether `len` rows pad to 128-row tiles no further than to 64-row ones.
fn long_fits(len: u32) -> bool {
    2 * len.div_ceil(128) == len.div_ceil(64)
}

/// The tile of a forward whose operands both move in 16-byte chunks: [`Geometry::WIDE`] where
/// the output channels pad to 128 no further than to 64, else [`Geometry::TALL`].
fn forward_chunks_geometry(p: &Problem) -> Geometry {
    match long_fits(p.og) {
        true => Geometry::WIDE,
        false => Geometry::TALL,
    }
}

/// The block tile of [`ENTRY_POINTWISE`] (both operands in 16-byte chunks, A staged by
/// channel): [`forward_chunks_geometry`].
pub(crate) fn pointwise_tile_geometry(cfg: &Conv2dConfig) -> Geometry {
    forward_chunks_geometry(&Problem::new(cfg))
}

/// [`tile_geometry`] of `pass`'s `…_channels_last` entry of an NCHW `cfg`.
pub(crate) fn channels_last_tile_geometry(cfg: &Conv2dConfig, pass: Pass) -> Geometry {
    tile_geometry(&channels_last_operands(cfg), pass)
}

/// Builds `conv2d_implicit_gemm(x, w, [bias,] y, dims…)`,
/// `conv2d_bwd_data_implicit_gemm(gy, w, dx, dims…)` or
/// `conv2d_bwd_filter_implicit_gemm(x, gy, dw, dims…)`.
pub(crate) fn build<T: ConvElem + SlabStaged>(
    cfg: &Conv2dConfig,
    arch: Arch,
    pass: Pass,
) -> KernelBuilder {
    build_entry::<T>(cfg, arch, pass, false)
}

/// Whether an NCHW configuration has [`ENTRY_POINTWISE`]: halves on tensor cores, a 1 × 1
/// filter at stride 1 without padding (output pixel `p` reads input pixel `p`, so 8
/// consecutive pixels of one channel are contiguous wherever `OH·OW` is a multiple of 8, the
/// launch's condition) and `Cg` a multiple of 8 (the weight rows in 16-byte chunks).
pub(crate) fn pointwise_available(cfg: &Conv2dConfig) -> bool {
    let halves = matches!(cfg.dtype, DType::F16 | DType::BF16);
    available(cfg)
        && halves
        && cfg.layout == Layout::Nchw
        && cfg.has_pointwise()
        && (cfg.stride_h, cfg.stride_w) == (1, 1)
        && (cfg.padding_h, cfg.padding_w) == (0, 0)
        && cfg.in_per_group().is_multiple_of(CHUNK_BYTES / 2)
}

/// Whether an NCHW configuration has [`ENTRY_CHANNELS_LAST`]: `x` copies channels-last
/// ([`input_channels_last`]) and the copy pays: every filter of more than one tap, and a
/// 1 × 1 only at stride 1 — at larger strides it would move pixels the GEMM never reads (a
/// 1 × 1 stride-2 128 → 128 on 56 × 56 modelled about 19 µs at batch 32 through the copy,
/// DRAM-bound, against 7.3 issue-bound on the element gathers).
pub(crate) fn channels_last_available(cfg: &Conv2dConfig) -> bool {
    let stride_one = (cfg.stride_h, cfg.stride_w) == (1, 1);
    input_channels_last(cfg) && (!cfg.has_pointwise() || stride_one)
}

/// Whether an NCHW configuration of halves on tensor cores has `Cg` and `C_in` multiples of
/// 8, so its `x` copies channels-last in 16-byte chunks of one group and the channels-last
/// A is gathered in chunks.
fn input_channels_last(cfg: &Conv2dConfig) -> bool {
    let halves = matches!(cfg.dtype, DType::F16 | DType::BF16);
    let chunk = CHUNK_BYTES / 2;
    let cg = cfg.in_per_group();
    available(cfg)
        && halves
        && cfg.layout == Layout::Nchw
        && cg > 0
        && cg.is_multiple_of(chunk)
        && cfg.in_channels.is_multiple_of(chunk)
}

/// Whether an NCHW configuration has the channels-last backward entries
/// ([`ENTRY_BWD_DATA_CHANNELS_LAST`], [`ENTRY_BWD_FILTER_CHANNELS_LAST`] and its split):
/// halves on tensor cores with `Cg`, `C_in`, `Og` and `C_out` multiples of 8, so every
/// operand of both NHWC backward GEMMs moves in 16-byte `cp.async` chunks (backward-data's
/// `gy` A and `w` B, both of backward-filter's operands staged by pixel) — 1 × 1 filters
/// included, whose NCHW backward GEMMs have no `cp.async` operand at all.
pub(crate) fn channels_last_backward_available(cfg: &Conv2dConfig) -> bool {
    let chunk = CHUNK_BYTES / 2;
    input_channels_last(cfg)
        && cfg.out_per_group().is_multiple_of(chunk)
        && cfg.out_channels.is_multiple_of(chunk)
}

/// Builds `pass` over channels-last operands (`x`/`dx [N, H, W, C_in]`, `gy [N, OH, OW,
/// C_out]`, `w [C_out, KH, KW, Cg]`) with the output in NCHW:
/// `conv2d_implicit_gemm_channels_last(x, w, [bias,] y, dims…)`,
/// `conv2d_bwd_data_implicit_gemm_channels_last(gy, w, dx, dims…)` or
/// `conv2d_bwd_filter_implicit_gemm_channels_last(x, gy, dw, dims…)` (`dw` in the NCHW
/// weight's order `[C_out, Cg, KH, KW]`).
pub(crate) fn build_channels_last<T: ConvElem + SlabStaged>(
    cfg: &Conv2dConfig,
    arch: Arch,
    pass: Pass,
) -> KernelBuilder {
    build_with::<T>(&channels_last_operands(cfg), arch, pass, None, Layout::Nchw)
}

/// The NCHW channels-last forward's entries, in module order: the `x` copy
/// (`conv2d_to_channels_last`), the `w` copy (`conv2d_filter_to_channels_last`; a filter of
/// one tap is channels-last already and has none) and the GEMM over them
/// ([`ENTRY_CHANNELS_LAST`]).
pub(crate) fn build_channels_last_forward<T: ConvElem + SlabStaged>(
    cfg: &Conv2dConfig,
    arch: Arch,
) -> Vec<KernelBuilder> {
    use super::channels_last::{build as copy, build_filter, ENTRY};
    let mut entries = vec![copy::<T>(ENTRY, cfg.in_channels, arch)];
    if !cfg.has_pointwise() {
        entries.push(build_filter::<T>(cfg, arch));
    }
    entries.push(build_channels_last::<T>(cfg, arch, Pass::Forward));
    entries
}

/// The NCHW channels-last backward's entries, in module order (after the forward's, whose
/// copies of `x` and `w` it shares): the `x` copy where the module has no channels-last
/// forward to bring it (a 1 × 1 at a stride above 1; its `w` is channels-last already), the
/// `gy` copy (`conv2d_gradient_to_channels_last`), backward-data, backward-filter and its
/// split (`conv2d_bwd_filter_implicit_gemm_channels_last_split(x, gy, partials, dims…,
/// slice_tiles)`, partials in the NCHW weight's order).
pub(crate) fn build_channels_last_backward<T: ConvElem + SlabStaged>(
    cfg: &Conv2dConfig,
    arch: Arch,
) -> Vec<KernelBuilder> {
    use super::channels_last::{build as copy, ENTRY, ENTRY_GRADIENT};
    let operands = channels_last_operands(cfg);
    let split = Some(ENTRY_SPLIT_CHANNELS_LAST);
    let input_copy =
        (!channels_last_available(cfg)).then(|| copy::<T>(ENTRY, cfg.in_channels, arch));
    input_copy
        .into_iter()
        .chain([
            copy::<T>(ENTRY_GRADIENT, cfg.out_channels, arch),
            build_channels_last::<T>(cfg, arch, Pass::BackwardData),
            build_channels_last::<T>(cfg, arch, Pass::BackwardFilter),
            build_with::<T>(&operands, arch, Pass::BackwardFilter, split, Layout::Nchw),
        ])
        .collect()
}

/// `cfg` with the operands in NHWC (the channels-last entries' view of an NCHW config).
fn channels_last_operands(cfg: &Conv2dConfig) -> Conv2dConfig {
    Conv2dConfig {
        layout: Layout::Nhwc,
        ..*cfg
    }
}

/// The split backward-filter's entries ([`split`]): `conv2d_bwd_filter_implicit_gemm_split(x,
/// gy, partials, dims…, slice_tiles)` and `conv2d_bwd_filter_reduce(partials, dw, slices)`.
pub(crate) fn build_split<T: ConvElem<Acc = F32> + SlabStaged>(
    cfg: &Conv2dConfig,
    arch: Arch,
) -> [KernelBuilder; 2] {
    [
        build_entry::<T>(cfg, arch, Pass::BackwardFilter, true),
        split::build_reduce::<T>(cfg, arch),
    ]
}

fn build_entry<T: ConvElem + SlabStaged>(
    cfg: &Conv2dConfig,
    arch: Arch,
    pass: Pass,
    split: bool,
) -> KernelBuilder {
    let split = split.then_some(ENTRY_SPLIT);
    build_with::<T>(cfg, arch, pass, split, cfg.layout)
}

/// Builds [`ENTRY_POINTWISE`]: `conv2d_implicit_gemm_pointwise(x, w, [bias,] y, dims…)`.
pub(crate) fn build_pointwise<T: ConvElem + SlabStaged>(
    cfg: &Conv2dConfig,
    arch: Arch,
) -> KernelBuilder {
    let mut k = conv_kernel(ENTRY_POINTWISE, arch);
    let c = Conv::<T>::setup(&mut k, (cfg, arch), Pass::Forward, Reads::PixelChunks);
    multiply_and_store(&mut k, c);
    k
}

/// Builds `pass` (the split backward-filter where `split` names its entry) with the output in
/// `out_layout`.
fn build_with<T: ConvElem + SlabStaged>(
    cfg: &Conv2dConfig,
    arch: Arch,
    pass: Pass,
    split: Option<&str>,
    out_layout: Layout,
) -> KernelBuilder {
    let entry = match split {
        Some(entry) => entry,
        None if out_layout != cfg.layout => pass.channels_last_entry(),
        None => pass.entry(),
    };
    let mut k = conv_kernel(entry, arch);
    let reads = match split {
        Some(_) => Reads::Split,
        None => Reads::Whole,
    };
    let mut c = Conv::<T>::setup(&mut k, (cfg, arch), pass, reads);
    c.out_layout = out_layout;
    multiply_and_store(&mut k, c);
    k
}

/// The K loop over `c`'s ring and the epilogue.
fn multiply_and_store<T: ConvElem + SlabStaged>(k: &mut KernelBuilder, c: Conv<T>) {
    let g = c.geometry;
    let mut acc = [T::zero_acc_in(k, g)];
    let bytes = T::TYPE.bytes();
    let a_lane = c.pos.fragment_offset(k, Side::A, c.a.staging, bytes);
    let b_lane = c.pos.fragment_offset(k, Side::B, c.b.staging, bytes);
    let slab_reads = c.slab_tile().map(|tile| tile.lane_reads(k, &c.pos));
    let k_tiles: Val<U32> = match c.reduction {
        Val::Reg(len) => {
            let padded = k.add(len, T::TILE_K - 1);
            k.shr(padded, T::TILE_K.trailing_zeros()).into()
        }
        Val::Imm(..) => c.k_len().div_ceil(T::TILE_K).into(),
    };
    let (first_tile, k_tiles) = match c.slice {
        Some(slice) => {
            let (first, count) = slice.range(k, k_tiles);
            (Some(first), count.into())
        }
        None => (None, k_tiles),
    };
    let fill = |k: &mut KernelBuilder, k_tile: Reg<U32>, slot: Reg<U32>| {
        let k_tile = first_tile.map_or(k_tile, |first| k.add(k_tile, first));
        c.fill(k, k_tile, slot)
    };
    tile::run_ring(k, k_tiles, &fill, &mut |k, slot| {
        let a_stage = c.rings.stage(k, Side::A, slot);
        let b_stage = c.rings.stage(k, Side::B, slot);
        let a_at = k.add(a_stage, a_lane);
        match &slab_reads {
            Some(reads) => T::multiply_slab_tile(k, &mut acc[0], a_at, b_stage, reads),
            None => {
                let b_at = k.add(b_stage, b_lane);
                let (a, b) = ((a_at, c.a.staging), (b_at, c.b.staging));
                T::multiply_staged_tile(k, g, &mut acc[0], a, b);
            }
        }
    });
    c.store(k, &acc[0]);
}

/// What a kernel reads beyond its pass: the whole reduction, one slice of it (the split
/// backward-filter's f32 partials, a `slice_tiles` parameter), or, for
/// [`ENTRY_POINTWISE`], the whole reduction with A in chunks of pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reads {
    Whole,
    Split,
    PixelChunks,
}

impl<T: ConvElem + TileElem> Conv<T> {
    /// Declares the parameters and shared tiles and locates the block, the thread and its
    /// share of both operand tiles.
    fn setup(
        k: &mut KernelBuilder,
        (cfg, arch): (&Conv2dConfig, Arch),
        pass: Pass,
        reads: Reads,
    ) -> Self {
        let p = Problem::new(cfg);
        let split = reads == Reads::Split;
        let geometry = match reads {
            Reads::PixelChunks => pointwise_tile_geometry(cfg),
            _ => tile_geometry(cfg, pass),
        };
        let g = geometry;
        k.require_block([g.threads(), 1, 1]);
        let [first, second, out_name] = pass.buffers();
        let first = k.param_ptr::<T>(first);
        let second = k.param_ptr::<T>(second);
        let bias = (pass == Pass::Forward && p.bias).then(|| k.param_ptr::<T>("bias"));
        let out = Output::declare(k, out_name, split);
        let dims = DimParams::declare(k);
        let slice_tiles = split.then(|| k.param::<U32>("slice_tiles"));
        let (first, second) = (k.global_ptr(first), k.global_ptr(second));
        let (a_src, b_src) = match pass {
            Pass::BackwardFilter => (second, first),
            _ => (first, second),
        };
        let bias = bias.map(|b| k.global_ptr(b));
        let d = dims.load(k);
        let rings = Rings::declare(k, g, arch);
        let (tid, pos) = WarpPos::of_thread_in(k, g);
        let bx = k.ctaid_x();
        let block_m = k.mul_lo(bx, g.block_m());
        let by = k.ctaid_y();
        let block_n = k.mul_lo(by, g.block_n());
        let z = k.ctaid_z();
        let groups = p.c_in / p.cg;
        let (slice, z) = match slice_tiles {
            Some(tiles) => {
                let tiles = k.load_param(tiles);
                let (slice, group) = Slice::locate(k, z, groups, tiles);
                (Some(slice), group)
            }
            None => (None, z),
        };
        let out = out.locate(k, slice, cfg.weight_elements());
        let (m_len, image, group): (Val<U32>, _, _) = match pass {
            Pass::Forward => (k.mul_lo(d.batch, d.ohw).into(), None, z),
            Pass::BackwardData => {
                let image = div_const(k, z, groups);
                let group = rem_const(k, z, groups);
                (k.mul_lo(d.h, d.w).into(), Some(image), group)
            }
            Pass::BackwardFilter => (p.og.into(), None, z),
        };
        let reduction: Val<U32> = match pass {
            Pass::Forward => p.filter_len().into(),
            Pass::BackwardData => (p.og * p.taps).into(),
            Pass::BackwardFilter => k.mul_lo(d.batch, d.ohw).into(),
        };
        let placeholder = |side, src| Operand {
            side,
            src,
            gather: gather::Gather::Chunks(Vec::new()),
            staging: Staging::ByRow,
        };
        let mut c = Self {
            p,
            pass,
            reads,
            layout: cfg.layout,
            out_layout: cfg.layout,
            d,
            bias,
            out,
            m_len,
            reduction,
            image,
            slice,
            group,
            block_m,
            block_n,
            geometry,
            pos,
            rings,
            a: placeholder(Side::A, a_src),
            b: placeholder(Side::B, b_src),
        };
        k.comment("this thread's share of the operand tiles");
        for side in [Side::A, Side::B] {
            let strategy = c.strategy(side);
            let gather = c.gather(k, tid, side, strategy);
            let op = match side {
                Side::A => &mut c.a,
                Side::B => &mut c.b,
            };
            (op.gather, op.staging) = (gather, strategy.staging());
        }
        c
    }

    /// How `side` is gathered: [`strategy`], but [`ENTRY_POINTWISE`]'s A in chunks of 8
    /// pixels staged by channel ([`Strategy::ChunksByK`]).
    fn strategy(&self, side: Side) -> Strategy {
        if self.reads == Reads::PixelChunks && side == Side::A {
            return Strategy::ChunksByK;
        }
        let elem = (T::TYPE.bytes(), T::STAGES_BY_K);
        strategy(&self.p, self.pass, self.layout, elem, side)
    }

    /// The slab-ordered B stage ([`slab_tile`]) where B is gathered by filter slabs in f32
    /// and the layout fits a stage.
    fn slab_tile(&self) -> Option<SlabTile> {
        let slabs = self.strategy(Side::B) == Strategy::Slabs && T::TYPE.bytes() == 4;
        slabs.then(|| SlabTile::new(self.p.taps)).flatten()
    }

    /// The GEMM's N extent: `Og` (forward), `Cg` (backward-data), `Cg·KH·KW`
    /// (backward-filter).
    fn n_len(&self) -> u32 {
        match self.pass {
            Pass::Forward => self.p.og,
            Pass::BackwardData => self.p.cg,
            Pass::BackwardFilter => self.p.filter_len(),
        }
    }

    /// The compile-time reduction depth of forward (`Cg·KH·KW`) and backward-data
    /// (`Og·KH·KW`); backward-filter's is `N·OH·OW`, a run-time value.
    fn k_len(&self) -> u32 {
        match self.pass {
            Pass::Forward => self.p.filter_len(),
            Pass::BackwardData => self.p.og * self.p.taps,
            Pass::BackwardFilter => unreachable!("backward-filter reduces over N·OH·OW"),
        }
    }
}

/// How `side` of `pass` is gathered (see [`gather`]) for elements of `elem_bytes`
/// (`stages_by_k`: whether they may be staged [`Staging::ByK`]): 16-byte chunks where a
/// chunk's consecutive reduction indices (8 halves, 4 f32) are contiguous and aligned (NHWC
/// forward A with `Cg` and `C_in`, NHWC backward-data A with `Og` and `C_out` multiples of
/// the chunk;
/// NCHW forward B with `K`, NCHW backward-data B with `KH·KW` a multiple of it); for
/// halves, 16-byte chunks of 8 consecutive tile rows staged by reduction index
/// ([`Strategy::ChunksByK`]) where the rows are contiguous channels (NHWC backward-data B
/// with `Cg`, NHWC backward-filter A with `Og` and `C_out`, B with `Cg` and `C_in`
/// multiples of 8); lane →
/// row where consecutive rows are consecutive addresses (NCHW forward A and backward-data
/// A: pixels along `ow`, and without dilation along `w` — forward of stride 1 or 2,
/// backward-data of halves at any stride and of f32 at stride 1, whose `gy` runs need
/// consecutive pixels on consecutive elements — each `(channel, kh)` row read once as
/// whole sectors and regrouped by shuffles, [`window`]); NCHW
/// backward-data B of a 1 × 1 filter and every NHWC backward operand with channel rows:
/// channels); filter slabs for NCHW backward-data B of up to [`MAX_SLAB_TAPS`] taps; lane
/// → reduction index otherwise (forward weights, NHWC windows and `gy` pixels of few
/// channels, NCHW backward-filter's pixel-indexed operands, NCHW backward-data B of
/// larger filters, whose runs of taps fill most of a warp), with backward-filter B's `(ci,
/// kh)` rows read once per tile as whole sectors ([`window`]) without dilation along `w`
/// at stride 1 or 2.
fn strategy(
    p: &Problem,
    pass: Pass,
    layout: Layout,
    (elem_bytes, stages_by_k): (u32, bool),
    side: Side,
) -> Strategy {
    let nhwc = layout == Layout::Nhwc;
    let chunk = CHUNK_BYTES / elem_bytes;
    // Tile rows that are `per_group` contiguous channels of a tensor of `channels` per
    // position may be staged by reduction index: 16-byte chunks stay in one group and
    // are aligned.
    let by_k = |per_group: u32, channels: u32| {
        nhwc && stages_by_k && per_group.is_multiple_of(chunk) && channels.is_multiple_of(chunk)
    };
    match (pass, side) {
        (Pass::Forward, Side::A)
            if nhwc && p.cg.is_multiple_of(chunk) && p.c_in.is_multiple_of(chunk) =>
        {
            Strategy::Chunks
        }
        (Pass::Forward, Side::A) if nhwc => Strategy::Columns,
        (Pass::BackwardData, Side::A)
            if nhwc && p.og.is_multiple_of(chunk) && p.c_out.is_multiple_of(chunk) =>
        {
            Strategy::Chunks
        }
        (Pass::BackwardData, Side::A) if nhwc => Strategy::Columns,
        (Pass::BackwardData, Side::B) if by_k(p.cg, p.cg) => Strategy::ChunksByK,
        (Pass::BackwardFilter, Side::A) if by_k(p.og, p.c_out) => Strategy::ChunksByK,
        (Pass::BackwardFilter, Side::B) if by_k(p.cg, p.c_in) => Strategy::ChunksByK,
        (Pass::BackwardData, Side::B) | (Pass::BackwardFilter, _) if nhwc => Strategy::Rows,
        (Pass::Forward, Side::A) if p.sw <= 2 && p.dw == 1 && p.kw > 1 => Strategy::Windows,
        (Pass::BackwardData, Side::A)
            if p.dw == 1 && p.kw > 1 && (elem_bytes == 2 || p.sw == 1) =>
        {
            Strategy::Windows
        }
        (Pass::Forward | Pass::BackwardData, Side::A) => Strategy::Rows,
        (Pass::Forward, Side::B) if p.filter_len().is_multiple_of(chunk) => Strategy::Chunks,
        (Pass::BackwardData, Side::B) if p.taps.is_multiple_of(chunk) => Strategy::Chunks,
        (Pass::BackwardData, Side::B) if p.taps == 1 => Strategy::Rows,
        (Pass::BackwardData, Side::B) if p.taps <= MAX_SLAB_TAPS => Strategy::Slabs,
        (Pass::BackwardFilter, Side::B) if p.sw <= 2 && p.dw == 1 && p.kw > 1 => Strategy::Windows,
        _ => Strategy::Columns,
    }
}
