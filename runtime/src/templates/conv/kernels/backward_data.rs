//! `conv2d_bwd_data` (NCHW, CUDA cores): the input gradient as the tiled forward of
//! [`super::direct`] on the flipped problem, one stride phase of `dx` per block.
//!
//! `dx[n, c, ih, iw] = Σ_{kh, kw} Σ_{oc ∈ group(c)} gy[n, oc, oh, ow] · w[oc, c − g·Cg, kh, kw]`
//! over the taps with `oh·SH = ih + PH − kh·DH` and `ow·SW = iw + PW − kw·DW` exactly, `0 ≤ oh <
//! OH`, `0 ≤ ow < OW`. At stride 1 this is a forward convolution
//! ([`Conv2dConfig::flipped_forward`]): input `gy`, output `dx`, filter `w'[c, oc, t'] = w[oc,
//! c, T − 1 − t']` (taps reversed, channel axes swapped), dilation kept, padding `D·(K − 1) −
//! P` (wrapping when negative: the tile origin then lies right of / below the image origin,
//! which the direct kernel's wrapping position arithmetic handles).
//!
//! At a stride above 1 only the taps with `kh·DH ≡ ih + PH (mod SH)` (and likewise for the
//! columns) reach `dx[ih, iw]`: the `SH·SW` phases `(ih mod SH, iw mod SW)` are each a stride-1
//! correlation of the dense `gy` with the phase's taps ([`PhaseAxis`](crate::templates::conv::phases::PhaseAxis)),
//! and every tap belongs to one phase, so no zero of a stride-spread `gy` is staged or
//! multiplied. Phase `(ρh, ρw)`'s pixels `(a·SH + ρh, b·SW + ρw)` form a `⌈H / SH⌉ × ⌈W /
//! SW⌉` grid (at most); a tile of `a0.., b0..` reads `gy` rows `a0 + low ..` for every phase
//! ([`Conv2dConfig::backward_data_window`]), so the staged window is the same dense one
//! whichever phase the block runs, and the weight stage is phase-independent.
//!
//! So the block is the direct kernel's (see [`Conv2dConfig::backward_data_tile`]): `(16, 16)`
//! threads over a 32 × 32 tile of one phase's `dx` pixels of one image (16 × 16 when the
//! larger tile does not fit) × `CB = min(Cg, 16)` input channels of one group, the phase an
//! extra factor `SH·SW` of the direct kernel's walked y indices; per output channel of the
//! group it stages the dense `gy` window under the tile (rows from a sector-aligned origin
//! in 16-byte chunks where the width and buffer allow), and every `ceil(144 / (KH·KW))`
//! output channels it stages their flipped filter taps ([`stage_flipped_weights`]). The
//! phase selects (block-uniform branches) which taps run; a phase without taps (stride and
//! dilation sharing a factor, or `K < S`) skips the channel loop and stores zeros. Each
//! thread accumulates its 2 × 2 pixels × `CB` channels in registers, summing over output
//! channels, then taps in the flipped filter's order (decreasing `kh`, then `kw`), in a
//! fixed order: deterministic, no atomics. These are the terms, in the order, the former
//! spread-`gy` kernel summed, less its products with the zeros it staged between `gy`'s rows
//! and columns (phases of more than 64 taps loop over their row taps in the same order).
//!
//! The NHWC module's `conv2d_bwd_data` is the tiled GEMM of [`super::nhwc`] (its parameters
//! are the same, [`declare_params`]).

use super::common::{
    conv_kernel, div_const, load_or_zero, rem_const, ConvElem, DimParams, Dims, Problem,
};
use super::direct::{build_tiled, BlockPos, Extents, TiledBuffers, TiledConv};
use crate::arch::Arch;
use crate::builder::{GlobalPtr, KernelBuilder, Reg, SharedArr, U32};
use crate::templates::conv::{Conv2dConfig, DirectTile, Layout};

/// The entry name.
pub const ENTRY: &str = "conv2d_bwd_data";

/// The entry's parameters `(gy, w, dx, dims…)`, loaded (the NHWC tiled entry of the same
/// name takes the same ones).
#[allow(clippy::type_complexity)]
pub(crate) fn declare_params<T: ConvElem>(
    k: &mut KernelBuilder,
) -> (GlobalPtr<T>, GlobalPtr<T>, GlobalPtr<T>, Dims) {
    let gy = k.param_ptr::<T>("gy");
    let w = k.param_ptr::<T>("w");
    let dx = k.param_ptr::<T>("dx");
    let dims = DimParams::declare(k);
    let (gy, w, dx) = (k.global_ptr(gy), k.global_ptr(w), k.global_ptr(dx));
    (gy, w, dx, dims.load(k))
}

/// Builds `conv2d_bwd_data(gy, w, dx, batch, height, width, out_height, out_width)`.
pub(crate) fn build<T: ConvElem>(cfg: &Conv2dConfig, arch: Arch) -> KernelBuilder {
    debug_assert_eq!(cfg.layout, Layout::Nchw);
    let mut k = conv_kernel(ENTRY, arch);
    let edge = Conv2dConfig::DIRECT_TILE;
    k.require_block([edge, edge, 1]);
    let (gy, w, dx, d) = declare_params::<T>(&mut k);
    let conv = TiledConv {
        p: Problem::new(&cfg.backward_data_window()),
        tile: cfg.backward_data_tile(),
        phases: (cfg.stride_h * cfg.stride_w > 1).then(|| cfg.phase_axes()),
        stage_weights: stage_flipped_weights::<T>,
    };
    // The flipped problem reads `gy` (OH × OW) and writes `dx` (H × W), tiling each phase's
    // `⌈H / SH⌉ × ⌈W / SW⌉` grid.
    let dx_plane = k.mul_lo(d.h, d.w);
    let extents = Extents {
        batch: d.batch,
        h: d.oh,
        w: d.ow,
        oh: phase_extent(&mut k, d.h, cfg.stride_h),
        ow: phase_extent(&mut k, d.w, cfg.stride_w),
        image_h: d.h,
        image_w: d.w,
        ohw: dx_plane,
        w_div: d.ow_div,
    };
    let buffers = TiledBuffers {
        x: gy,
        w,
        bias: None,
        y: dx,
    };
    build_tiled(&mut k, &conv, &extents, buffers);
    k
}

/// The positions of phase 0 along an axis of `len` positions and stride `stride`, `⌈len /
/// stride⌉` (the most of any phase).
fn phase_extent(k: &mut KernelBuilder, len: Reg<U32>, stride: u32) -> Reg<U32> {
    if stride == 1 {
        return len;
    }
    let end = k.add(len, stride - 1);
    div_const(k, end, stride)
}

/// The direct kernel's weight stage for the flipped problem `p` (`p.cg = Og` output channels
/// reduced over, `p.og = Cg` input channels produced): `stage_w[(j·T + t')·weight_pitch + o] =
/// w[g·Og + c0 + j, c0' + o, T − 1 − t']` for `j < weight_channels`, `o < CB`, `t' < T` with
/// `c0'` the block's first input channel in the group, 0 past the group's last channels.
/// For one output channel those `CB` filter rows are one contiguous run of `CB·T` elements,
/// so work item `e = j·CB·T + rest` loads element `rest` of channel `j`'s run (consecutive
/// threads, consecutive elements: whole sectors) and stores it at its reversed tap.
#[allow(clippy::too_many_arguments)]
fn stage_flipped_weights<T: ConvElem>(
    k: &mut KernelBuilder,
    p: &Problem,
    tile: &DirectTile,
    pos: BlockPos,
    c0: Reg<U32>,
    w: GlobalPtr<T>,
    smem: SharedArr<T::Acc>,
    tid: Reg<U32>,
) {
    k.comment("stage the flipped filter taps of the output channel chunk");
    let taps = p.taps;
    // Channels `CB .. 4·ceil(CB / 4)` are staged as zeros (the window reads whole quads).
    let run = tile.out_channels.next_multiple_of(4) * taps;
    // Input channels of the block, and output channels of the chunk, that exist.
    let remaining = k.sub(p.og, pos.oc0_local);
    let channels = k.min(remaining, tile.out_channels);
    let valid_run = k.mul_lo(channels, taps);
    let chunk_channels = k.sub(p.cg, c0);
    // Element 0 of output channel `g·Og + c0`'s run: `(g·Og + c0)·Cg·T + c0'·T`.
    let first_oc = k.mad_lo(pos.g, p.cg, c0);
    let run_start = k.mul_lo(pos.oc0_local, taps);
    let start = k.mad_lo(first_oc, p.og * taps, run_start);
    k.for_range(tid, tile.weight_channels * run, tile.threads, |k, e| {
        let j = div_const(k, e, run);
        let rest = rem_const(k, e, run);
        let o = div_const(k, rest, taps);
        let t = rem_const(k, rest, taps);
        let in_run = k.setp_lt(rest, valid_run);
        let in_chunk = k.setp_lt(j, chunk_channels);
        let ok = k.and_pred(in_run, in_chunk);
        let idx = k.mad_lo(j, p.og * taps, start);
        let idx = k.add(idx, rest);
        let value = load_or_zero::<T>(k, w, idx, ok);
        // Row `j·T + T − 1 − t`, column `o`.
        let row = k.mad_lo(j, taps, taps - 1);
        let row = k.sub(row, t);
        let slot = k.mad_lo(row, tile.weight_pitch, tile.weight_offset);
        let slot = k.add(slot, o);
        let addr = k.shared_elem(smem, slot);
        k.st_shared(addr, 0, value);
    });
}
