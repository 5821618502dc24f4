//! The bias gradient `db[c] = Σ_{n, oh, ow} gy[n, c, oh, ow]` over the `P = N·OH·OW` output
//! pixels, at GPU width (project issue 11: one warp per channel was `⌈C_out / 8⌉` blocks, 16
//! at ResNet's 128 channels, and strided by `C` in NHWC).
//!
//! Blocks of 256 threads (8 warps) own a tile of channels, the whole tile's loads coalesced:
//! - NCHW: one channel per block (grid x `C_out`); thread `t` reads pixels `t, t + 256, …` of
//!   the block's pixels (`n·OH·OW + p`, each image's run contiguous), or, where `OH·OW` is a
//!   multiple of 16 bytes of elements, 16-byte chunks `t, t + 256, …` (4 f32, 8 halves, 2
//!   f64 each): a warp reads 128 (512) consecutive bytes.
//! - NHWC: 32 consecutive channels per block (grid x `⌈C_out / 32⌉`); lane `l` owns channel
//!   `32·ctaid.x + l` and warp `w` pixels `w, w + 8, …`: a warp reads 32 consecutive channels
//!   of one pixel.
//!
//! Each thread sums its elements in increasing pixel order (f32; f64 for f64), the 8 warps'
//! sums go through shared memory and warp 0 adds them in warp order (NCHW then adds its 32
//! lanes by the butterfly of `warp_sum`): a fixed order, no atomics, the same bits on every
//! run and under any block order.
//!
//! - `conv2d_bwd_bias(gy, db, dims…)`: grid `(tiles, 1)`, every pixel, `db` rounded once.
//! - `conv2d_bwd_bias_split(gy, partials, dims…, slice_pixels)`: grid `(tiles, S)`; block
//!   `(x, s)` reduces pixels `s·slice_pixels .. min((s + 1)·slice_pixels, P)` into
//!   `partials[s·C_out + c]`, unrounded in the accumulation type.
//! - `conv2d_bwd_bias_reduce(partials, db, slices)`: the slices added in order, rounded once
//!   ([`super::reduce`], the same builder as `conv2d_bwd_filter_reduce`).
//!
//! The host picks `S`
//! ([`Conv2dConfig::backward_bias_slices`](crate::templates::conv::Conv2dConfig::backward_bias_slices)).

use super::super::common::{
    bytes_of, conv_kernel, div_const, rem_const, warp_sum, ConvElem, DimParams, Dims,
};
use super::super::vector::{load_chunk, VectorElem};
use super::reduce;
use crate::arch::Arch;
use crate::builder::{GlobalPtr, KernelBuilder, Reg, U32};
use crate::ir::CmpOp;
use crate::templates::conv::{Conv2dConfig, Layout};

/// The bias-gradient entry name (only in modules of configurations with a bias).
pub const ENTRY_BIAS: &str = "conv2d_bwd_bias";
/// The bias gradient's split entry: one slice of the pixels per block, into partials.
pub const ENTRY_BIAS_SPLIT: &str = "conv2d_bwd_bias_split";
/// The entry adding the bias split's slices in order.
pub const ENTRY_BIAS_REDUCE: &str = "conv2d_bwd_bias_reduce";
/// Threads per block of the bias entries.
pub const BIAS_THREADS: u32 = 256;
/// Warps per block of the bias entries.
const WARPS: u32 = BIAS_THREADS / 32;

/// Channels one bias block owns: 1 in NCHW (its pixels are contiguous), 32 in NHWC (a
/// warp's worth of consecutive channels).
pub const fn bias_block_channels(layout: Layout) -> u32 {
    match layout {
        Layout::Nchw => 1,
        Layout::Nhwc => 32,
    }
}

/// Pixels a bias block reads per round, one element per thread: 256 in NCHW, 8 in NHWC (one
/// per warp).
pub const fn bias_block_pixels(layout: Layout) -> u32 {
    BIAS_THREADS / bias_block_channels(layout)
}

/// The bias entries: whole, split, and the split's reduce (module docs).
pub(crate) fn build<T: VectorElem>(cfg: &Conv2dConfig, arch: Arch) -> [KernelBuilder; 3] {
    let names = (ENTRY_BIAS_REDUCE, "db");
    [
        build_entry::<T>(cfg, arch, false),
        build_entry::<T>(cfg, arch, true),
        reduce::build::<T>(names, cfg.out_channels, arch),
    ]
}

/// Where a block's sum goes: `db` rounded, or its slice's row of the partials unrounded.
enum Sums<T: ConvElem> {
    Bias(GlobalPtr<T>),
    Partials(GlobalPtr<T::Acc>),
}

/// A block's pixels `start .. end` (flattened `n·OH·OW + oh·OW + ow`) and its row of the
/// partials, `s·C_out`.
struct Slice {
    start: Reg<U32>,
    end: Reg<U32>,
    first_row: Reg<U32>,
}

/// The thread's place in the block: its channel (`< C_out` when `valid`), warp and lane.
struct Place {
    channel: Reg<U32>,
    warp: Reg<U32>,
    lane: Reg<U32>,
}

fn build_entry<T: VectorElem>(cfg: &Conv2dConfig, arch: Arch, split: bool) -> KernelBuilder {
    let entry = if split { ENTRY_BIAS_SPLIT } else { ENTRY_BIAS };
    let mut k = conv_kernel(entry, arch);
    k.require_block([BIAS_THREADS, 1, 1]);
    let gy = k.param_ptr::<T>("gy");
    let sums = if split {
        let partials = k.param_ptr::<T::Acc>("partials");
        Sums::<T>::Partials(k.global_ptr(partials))
    } else {
        let db = k.param_ptr::<T>("db");
        Sums::Bias(k.global_ptr(db))
    };
    let dims = DimParams::declare(&mut k);
    let slice_pixels = split.then(|| k.param::<U32>("slice_pixels"));
    let gy = k.global_ptr(gy);
    let d = dims.load(&mut k);
    let pixels = k.mul_lo(d.batch, d.ohw);
    let slice = match slice_pixels {
        Some(len) => {
            let len = k.load_param(len);
            let s = k.ctaid_y();
            let start = k.mul_lo(s, len);
            let end = k.add(start, len);
            Slice {
                start,
                end: k.min(end, pixels),
                first_row: k.mul_lo(s, cfg.out_channels),
            }
        }
        None => Slice {
            start: k.var(0u32),
            end: pixels,
            first_row: k.var(0u32),
        },
    };
    let place = locate(&mut k, cfg.layout);
    let c_out = cfg.out_channels;
    let valid = k.setp_lt(place.channel, c_out);
    let sum = k.zero::<T::Acc>();
    k.comment("the thread's elements of its channel, in pixel order");
    k.if_then(valid, |k| match cfg.layout {
        Layout::Nchw => sum_planes::<T>(k, c_out, &d, gy, &slice, &place, sum),
        Layout::Nhwc => sum_pixels::<T>(k, c_out, gy, &slice, &place, sum),
    });
    let total = block_sum::<T>(&mut k, cfg.layout, &place, sum);
    let lanes_storing = match cfg.layout {
        Layout::Nchw => k.setp(CmpOp::Eq, place.lane, 0u32),
        Layout::Nhwc => valid,
    };
    let storing = k.setp(CmpOp::Eq, place.warp, 0u32);
    let storing = k.and_pred(storing, lanes_storing);
    k.if_then(storing, |k| match sums {
        Sums::Bias(db) => {
            let value = T::narrow(k, total);
            let at = k.elem_addr(db, place.channel);
            k.st_global(at, 0, value);
        }
        Sums::Partials(partials) => {
            let row = k.add(slice.first_row, place.channel);
            let at = k.elem_addr(partials, row);
            k.st_global(at, 0, total);
        }
    });
    k
}

/// The thread's channel, warp and lane (module docs: NCHW `ctaid.x`, NHWC `32·ctaid.x + l`).
fn locate(k: &mut KernelBuilder, layout: Layout) -> Place {
    let tid = k.tid_x();
    let lane = rem_const(k, tid, 32);
    let warp = div_const(k, tid, 32);
    let block = k.ctaid_x();
    let channel = match layout {
        Layout::Nchw => block,
        Layout::Nhwc => k.mad_lo(block, bias_block_channels(layout), lane),
    };
    Place {
        channel,
        warp,
        lane,
    }
}

/// NCHW: `sum += Σ gy[n, c, p]` over the slice's pixels `q = n·OH·OW + p`, thread `t`
/// taking `q = start + t, start + t + 256, …`; where `OH·OW` is a multiple of the 16-byte
/// chunk (so are the slice bounds, whole rounds of 256 pixels, and no chunk straddles two
/// images) it takes chunks at `q = start + CHUNK·t, start + CHUNK·(t + 256), …` instead, one
/// `ld.global.nc.v4` / `.v2` each. Element `q` of channel `c` sits at `(n·C + c)·OH·OW + p =
/// q + n·(C − 1)·OH·OW + c·OH·OW`: one division by `OH·OW` per load.
fn sum_planes<T: VectorElem>(
    k: &mut KernelBuilder,
    c_out: u32,
    d: &Dims,
    gy: GlobalPtr<T>,
    slice: &Slice,
    place: &Place,
    sum: Reg<T::Acc>,
) {
    let tid = k.mad_lo(place.warp, 32u32, place.lane);
    let image_stride = k.mul_lo(d.ohw, c_out - 1);
    let plane = k.mul_lo(place.channel, d.ohw);
    let ragged = k.and(d.ohw, T::CHUNK - 1);
    let whole_chunks = k.setp(CmpOp::Eq, ragged, 0u32);
    let walk = |k: &mut KernelBuilder, width: u32| {
        let first = k.mad_lo(tid, width, slice.start);
        k.for_range(first, slice.end, BIAS_THREADS * width, |k, q| {
            let n = d.ohw_div.div(k, q);
            let at = k.mad_lo(n, image_stride, q);
            let at = k.add(at, plane);
            if width == 1 {
                add_element::<T>(k, gy, at, sum);
            } else {
                for value in load_chunk(k, gy, at) {
                    k.add_into(sum, sum, value);
                }
            }
        });
    };
    k.if_else(whole_chunks, |k| walk(k, T::CHUNK), |k| walk(k, 1));
}

/// NHWC: `sum += Σ gy[q, c]` over the slice's pixels `q = start + w, start + w + 8, …`.
fn sum_pixels<T: ConvElem>(
    k: &mut KernelBuilder,
    c_out: u32,
    gy: GlobalPtr<T>,
    slice: &Slice,
    place: &Place,
    sum: Reg<T::Acc>,
) {
    let first = k.add(slice.start, place.warp);
    k.for_range(first, slice.end, WARPS, |k, q| {
        let at = k.mad_lo(q, c_out, place.channel);
        add_element::<T>(k, gy, at, sum);
    });
}

/// `sum += widen(gy[at])`.
fn add_element<T: ConvElem>(
    k: &mut KernelBuilder,
    gy: GlobalPtr<T>,
    at: Reg<U32>,
    sum: Reg<T::Acc>,
) {
    let addr = k.elem_addr(gy, at);
    let raw = k.ld_global_nc::<T>(addr, 0);
    let value = T::widen(k, raw);
    k.add_into(sum, sum, value);
}

/// The block's total for the thread's channel, valid in warp 0: `sums[w][l]` through shared
/// memory, added over `w = 0..8` in order by warp 0's lane `l` (NCHW: then over the 32 lanes
/// by the butterfly, every lane of warp 0 ending with the channel's total).
fn block_sum<T: ConvElem>(
    k: &mut KernelBuilder,
    layout: Layout,
    place: &Place,
    sum: Reg<T::Acc>,
) -> Reg<T::Acc> {
    k.comment("the 8 warps' sums, added in warp order by warp 0");
    let sums = k.shared_array::<T::Acc>("warp_sums", BIAS_THREADS);
    let mine = k.mad_lo(place.warp, 32u32, place.lane);
    let mine = k.shared_elem(sums, mine);
    k.st_shared(mine, 0, sum);
    k.bar_sync();
    let total = k.zero::<T::Acc>();
    let first_warp = k.setp(CmpOp::Eq, place.warp, 0u32);
    k.if_then(first_warp, |k| {
        let column = k.shared_elem(sums, place.lane);
        let row_bytes = 32 * bytes_of::<T::Acc>();
        for w in 0..WARPS {
            let part = k.ld_shared::<T::Acc>(column, (w * row_bytes) as i32);
            k.add_into(total, total, part);
        }
        if layout == Layout::Nchw {
            let all = warp_sum(k, total);
            k.assign(total, all);
        }
    });
    total
}
