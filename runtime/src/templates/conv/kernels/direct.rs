//! `conv2d_direct`: the forward convolution with the input patch staged in shared memory.
//!
//! Block `(16, 16)` = one 16 × 16 tile of output pixels of one image, for `OCB` output
//! channels of one group (see [`DirectTile`]); grid `(tiles_h · tiles_w, groups · ceil(Og /
//! OCB), batch)`. For each input channel of the group the block stages the input patch under
//! its tile (coalesced: consecutive threads load consecutive columns) and the `OCB` filters'
//! taps of that channel, then every thread runs the kernel window over the staged patch for all
//! `OCB` channels: each staged value is read by up to `KH · KW` threads and reused for `OCB`
//! output channels.

use super::common::{
    both_below, bytes_of, conv_kernel, div_const, load_or_zero, rem_const, ConvElem, DimParams,
    Dims, Problem,
};
use crate::arch::Arch;
use crate::builder::{GlobalPtr, KernelBuilder, Reg, SharedArr, U32};
use crate::templates::attention::SharedMemoryKind;
use crate::templates::conv::{Conv2dConfig, DirectTile};

/// The entry name.
pub const ENTRY: &str = "conv2d_direct";

/// Kernel windows up to this many taps are fully unrolled (immediate shared offsets).
const UNROLL_TAPS: u32 = 64;

/// Where one block works.
#[derive(Clone, Copy)]
struct BlockPos {
    n: Reg<U32>,
    g: Reg<U32>,
    /// First output channel of the block within its group.
    oc0_local: Reg<U32>,
    /// First output channel of the block, `g · Og + oc0_local`.
    oc0: Reg<U32>,
    /// Top-left output pixel of the tile.
    oh0: Reg<U32>,
    ow0: Reg<U32>,
}

/// Builds the entry: `conv2d_direct(x, w, [bias,] y, batch, height, width, out_height,
/// out_width)`.
pub(crate) fn build<T: ConvElem>(cfg: &Conv2dConfig, arch: Arch) -> KernelBuilder {
    let p = Problem::new(cfg);
    let tile = cfg.direct_tile();
    let mut k = conv_kernel(ENTRY, arch);
    k.require_block([tile.out_w, tile.out_h, 1]);
    let x = k.param_ptr::<T>("x");
    let w = k.param_ptr::<T>("w");
    let bias = p.bias.then(|| k.param_ptr::<T>("bias"));
    let y = k.param_ptr::<T>("y");
    let dims = DimParams::declare(&mut k);
    let (x, w, y) = (k.global_ptr(x), k.global_ptr(w), k.global_ptr(y));
    let bias = bias.map(|b| k.global_ptr(b));
    let dims = dims.load(&mut k);
    let smem: SharedArr<T::Acc> = match tile.shared_kind {
        SharedMemoryKind::Static => {
            k.shared_array("direct_stage", tile.shared_bytes / bytes_of::<T::Acc>())
        }
        SharedMemoryKind::Dynamic => k.dynamic_shared(tile.shared_bytes),
    };
    let pos = locate_block(&mut k, &p, &tile);
    let (tx, ty) = (k.tid_x(), k.tid_y());
    let tid = k.mad_lo(ty, tile.out_w, tx);
    let acc: Vec<Reg<T::Acc>> = (0..tile.out_channels).map(|_| k.zero()).collect();
    k.comment("for each input channel of the group: stage, sync, accumulate, sync");
    k.for_range(0u32, p.cg, 1u32, |k, ci| {
        stage_input::<T>(k, &p, &tile, &dims, pos, ci, x, smem, tid);
        stage_weights::<T>(k, &p, &tile, pos, ci, w, smem, tid);
        k.bar_sync();
        accumulate_window(k, &p, &tile, smem, tx, ty, &acc);
        k.bar_sync();
    });
    store_outputs::<T>(&mut k, &p, &dims, pos, tx, ty, &acc, bias, y);
    k
}

/// Block coordinates: `ctaid.x = tile_col`, `ctaid.y = tile_row · channel_blocks + cb` with
/// `channel_blocks = groups · ceil(Og / OCB)` and `cb = g · ceil(Og / OCB) + ob` (channels
/// `ob · OCB ..` of group `g`), `ctaid.z = n`. Only compile-time divisors.
fn locate_block(k: &mut KernelBuilder, p: &Problem, tile: &DirectTile) -> BlockPos {
    k.comment("locate the block: tile, group and output channels, image");
    let oc_blocks = p.og.div_ceil(tile.out_channels);
    let channel_blocks = p.c_out / p.og * oc_blocks;
    let tile_col = k.ctaid_x();
    let by = k.ctaid_y();
    let tile_row = div_const(k, by, channel_blocks);
    let cb = rem_const(k, by, channel_blocks);
    let oh0 = k.mul_lo(tile_row, tile.out_h);
    let ow0 = k.mul_lo(tile_col, tile.out_w);
    let g = div_const(k, cb, oc_blocks);
    let ob = rem_const(k, cb, oc_blocks);
    let oc0_local = k.mul_lo(ob, tile.out_channels);
    let oc0 = k.mad_lo(g, p.og, oc0_local);
    let n = k.ctaid_z();
    BlockPos {
        n,
        g,
        oc0_local,
        oc0,
        oh0,
        ow0,
    }
}

/// `stage[r, pos(s)] = x[n, g·Cg + ci, oh0·SH − PH + r, ow0·SW − PW + s]` for `r < in_h`,
/// `s < in_w`, 0 outside the image, with `pos(s) = (s mod SW)·segment + s / SW` (see
/// [`DirectTile`]). Thread `tid` takes elements `tid, tid + 256, …` of the row-major patch, so
/// a warp loads consecutive input columns.
#[allow(clippy::too_many_arguments)]
fn stage_input<T: ConvElem>(
    k: &mut KernelBuilder,
    p: &Problem,
    tile: &DirectTile,
    d: &Dims,
    pos: BlockPos,
    ci: Reg<U32>,
    x: GlobalPtr<T>,
    smem: SharedArr<T::Acc>,
    tid: Reg<U32>,
) {
    k.comment("stage the input patch of channel ci");
    let c = k.mad_lo(pos.g, p.cg, ci);
    let plane = k.mad_lo(pos.n, p.c_in, c);
    let hw = k.mul_lo(d.h, d.w);
    let x_plane = k.mul_lo(plane, hw);
    // Wrapping: positions left of / above the image become huge and fail `< H`/`< W`.
    let row0 = k.mul_lo(pos.oh0, p.sh);
    let row0 = k.sub(row0, p.ph);
    let col0 = k.mul_lo(pos.ow0, p.sw);
    let col0 = k.sub(col0, p.pw);
    let total = tile.in_h * tile.in_w;
    let threads = tile.threads;
    k.for_range(tid, total, threads, |k, e| {
        let r = div_const(k, e, tile.in_w);
        let s = rem_const(k, e, tile.in_w);
        let ih = k.add(row0, r);
        let iw = k.add(col0, s);
        let ok = both_below(k, ih, d.h, iw, d.w);
        let idx = k.mad_lo(ih, d.w, iw);
        let idx = k.add(idx, x_plane);
        let v = load_or_zero::<T>(k, x, idx, ok);
        let column = if p.sw == 1 {
            s
        } else {
            let phase = rem_const(k, s, p.sw);
            let within = div_const(k, s, p.sw);
            k.mad_lo(phase, tile.segment, within)
        };
        let slot = k.mad_lo(r, tile.pitch, column);
        let addr = k.shared_elem(smem, slot);
        k.st_shared(addr, 0, v);
    });
}

/// `stage[weight_offset + o·KH·KW + t] = w[oc0 + o, ci, t]` for `o < OCB`, 0 past the group's
/// last channel. The `OCB` filters of channel `ci` are `OCB` runs of `KH·KW` elements
/// `Cg·KH·KW` apart; element `e = o·KH·KW + t` of the stage comes from
/// `w[(oc0 + o)·Cg·KH·KW + ci·KH·KW + t]`.
#[allow(clippy::too_many_arguments)]
fn stage_weights<T: ConvElem>(
    k: &mut KernelBuilder,
    p: &Problem,
    tile: &DirectTile,
    pos: BlockPos,
    ci: Reg<U32>,
    w: GlobalPtr<T>,
    smem: SharedArr<T::Acc>,
    tid: Reg<U32>,
) {
    k.comment("stage the block's filter taps of channel ci");
    let remaining = k.sub(p.og, pos.oc0_local);
    let channels = k.min(remaining, tile.out_channels);
    let valid = k.mul_lo(channels, p.taps);
    let filter = k.mul_lo(pos.oc0, p.filter_len());
    let total = tile.out_channels * p.taps;
    k.for_range(tid, total, tile.threads, |k, e| {
        let o = div_const(k, e, p.taps);
        let t = rem_const(k, e, p.taps);
        let row = k.mul_lo(o, p.filter_len());
        let idx = k.mad_lo(ci, p.taps, t);
        let idx = k.add(idx, row);
        let idx = k.add(idx, filter);
        let ok = k.setp_lt(e, valid);
        let v = load_or_zero::<T>(k, w, idx, ok);
        let slot = k.add(e, tile.weight_offset);
        let addr = k.shared_elem(smem, slot);
        k.st_shared(addr, 0, v);
    });
}

/// `acc[o] += Σ_{kh, kw} stage[ty·SH + kh·DH, pos(tx·SW + kw·DW)] · stage_w[o, kh, kw]`.
/// With the de-interleaved columns, tap `(kh, kw)` of thread `(tx, ty)` reads element
/// `(ty·SH + kh·DH)·pitch + ((kw·DW) mod SW)·segment + tx + (kw·DW) / SW`: a half-warp reads
/// 16 consecutive elements; the weight reads are warp-uniform (broadcast).
#[allow(clippy::too_many_arguments)]
fn accumulate_window<A: crate::builder::Float>(
    k: &mut KernelBuilder,
    p: &Problem,
    tile: &DirectTile,
    smem: SharedArr<A>,
    tx: Reg<U32>,
    ty: Reg<U32>,
    acc: &[Reg<A>],
) {
    k.comment("run the kernel window over the staged patch");
    let esz = bytes_of::<A>();
    let row = k.mul_lo(ty, p.sh * tile.pitch);
    let first = k.add(row, tx);
    let in_base = k.shared_elem(smem, first);
    let w_base = k.shared_elem(smem, tile.weight_offset);
    let column = |kw: u32| ((kw * p.dw) % p.sw) * tile.segment + (kw * p.dw) / p.sw;
    let tap =
        |k: &mut KernelBuilder, in_addr: Reg<U32>, in_off: u32, w_addr: Reg<U32>, w_off: u32| {
            let v = k.ld_shared::<A>(in_addr, (in_off * esz) as i32);
            for (o, a) in acc.iter().enumerate() {
                let wv = k.ld_shared::<A>(w_addr, ((o as u32 * p.taps + w_off) * esz) as i32);
                k.fma_into(*a, v, wv, *a);
            }
        };
    if p.taps <= UNROLL_TAPS {
        for kh in 0..p.kh {
            for kw in 0..p.kw {
                let in_off = kh * p.dh * tile.pitch + column(kw);
                tap(k, in_base, in_off, w_base, kh * p.kw + kw);
            }
        }
    } else {
        k.for_range(0u32, p.kh, 1u32, |k, kh| {
            let in_row = k.mad_lo(kh, p.dh * tile.pitch * esz, in_base);
            let w_row = k.mad_lo(kh, p.kw * esz, w_base);
            if p.kw <= UNROLL_TAPS {
                for kw in 0..p.kw {
                    tap(k, in_row, column(kw), w_row, kw);
                }
            } else {
                k.for_range(0u32, p.kw, 1u32, |k, kw| {
                    let t = k.mul_lo(kw, p.dw);
                    let phase = rem_const(k, t, p.sw);
                    let within = div_const(k, t, p.sw);
                    let col = k.mad_lo(phase, tile.segment, within);
                    let in_addr = k.mad_lo(col, esz, in_row);
                    let w_addr = k.mad_lo(kw, esz, w_row);
                    tap(k, in_addr, 0, w_addr, 0);
                });
            }
        });
    }
}

/// `y[n, oc0 + o, oh0 + ty, ow0 + tx] = acc[o] (+ bias[oc0 + o])`, rounded to the storage
/// type, for pixels inside the output and channels inside the group (consecutive threads store
/// consecutive columns).
#[allow(clippy::too_many_arguments)]
fn store_outputs<T: ConvElem>(
    k: &mut KernelBuilder,
    p: &Problem,
    d: &Dims,
    pos: BlockPos,
    tx: Reg<U32>,
    ty: Reg<U32>,
    acc: &[Reg<T::Acc>],
    bias: Option<GlobalPtr<T>>,
    y: GlobalPtr<T>,
) {
    k.comment("store the tile (plus bias)");
    let oh = k.add(pos.oh0, ty);
    let ow = k.add(pos.ow0, tx);
    let pixel_ok = both_below(k, oh, d.oh, ow, d.ow);
    let ohw = k.mul_lo(d.oh, d.ow);
    let pixel = k.mad_lo(oh, d.ow, ow);
    let image = k.mul_lo(pos.n, p.c_out);
    for (o, a) in acc.iter().enumerate() {
        let o = o as u32;
        let local = k.add(pos.oc0_local, o);
        let channel_ok = k.setp_lt(local, p.og);
        let ok = k.and_pred(pixel_ok, channel_ok);
        k.if_then(ok, |k| {
            let oc = k.add(pos.oc0, o);
            let value = match bias {
                Some(b) => {
                    let addr = k.elem_addr(b, oc);
                    let raw = k.ld_global_nc::<T>(addr, 0);
                    let wide = T::widen(k, raw);
                    k.add(*a, wide)
                }
                None => *a,
            };
            let plane = k.add(image, oc);
            let idx = k.mad_lo(plane, ohw, pixel);
            let out = T::narrow(k, value);
            let addr = k.elem_addr(y, idx);
            k.st_global(addr, 0, out);
        });
    }
}
