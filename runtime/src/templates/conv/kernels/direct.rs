//! `conv2d_direct`: the forward convolution on CUDA cores with the input patch and the weights
//! staged in shared memory and register blocking over pixels and output channels.
//!
//! Block `(16, 16)` = one `out_h × out_w` tile of output pixels of one image (32 × 32, or
//! 16 × 16 when the larger tile does not fit the arch's shared memory), for `OCB ≤ 16` output
//! channels of one group (see [`DirectTile`]); grid `(tiles_w, min(batch · tiles_h · groups ·
//! ceil(Og / OCB), 65535), 1)`: each block walks the linear tile indices `ctaid.y, ctaid.y +
//! nctaid.y, …` (image outermost), one whole tile after another, so every shape within the
//! index limits launches and every output still has exactly one block (the result does not
//! depend on the grid; [`BlockWalk`]). Thread `(tx, ty)`
//! accumulates pixels `(ty + 16·i, tx + 16·j)` of all `OCB` channels.
//!
//! For each input channel of the group the block stages the input patch under its tile: each
//! patch row is read in chunks aligned to 16 bytes of the image row (8 for f16/bf16), one
//! `ld.global.v4`/`.v2` per chunk where the image width and the buffer allow it, so a warp
//! moves whole sectors except at the patch's two ends (element by element, still whole
//! sectors, for depthwise-like blocks of < 4 channels and for horizontal strides, where
//! 16-byte staging stores would cost more shared wavefronts than they save). The bias is
//! staged once per block. Every `weight_channels` input channels
//! it stages those channels' filter runs (contiguous in global memory) as rows of
//! (input channel, tap) with the output channel fastest. Each tap then costs a thread one
//! input read per pixel (a half-warp reads 16 consecutive elements, conflict-free),
//! `ceil(OCB / 4)` broadcast `ld.shared.v4` weight reads (`OCB` scalar ones for f64) and
//! `pixels · OCB` FMAs. When the tile's second 16-row or 16-column
//! half lies wholly past the output (images smaller than the tile) the block runs the window
//! for the pixels that exist only, so no thread works for nothing.
//!
//! The body ([`build_tiled`]) also runs the NCHW backward-data ([`super::backward_data`]) as
//! a forward of `gy` with its own weight stager and, at strides above 1, one stride phase of
//! `dx` per block ([`Phases`]).

use super::common::{
    both_below, bytes_of, conv_kernel, div_const, load_or_zero, rem_const, ConvElem, DimParams,
    Dims, FastDiv, Problem,
};
use crate::arch::Arch;
use crate::builder::{Float, GlobalPtr, KernelBuilder, Pred, Reg, SharedArr, Val, U32, U64};
use crate::ir::{CmpOp, SpecialReg};
use crate::templates::attention::SharedMemoryKind;
use crate::templates::conv::phases::{PhaseAxis, PhaseTap};
use crate::templates::conv::{Conv2dConfig, DirectTile};

/// The entry name.
pub const ENTRY: &str = "conv2d_direct";

/// Kernel windows up to this many taps are fully unrolled (immediate shared offsets).
const UNROLL_TAPS: u32 = 64;

/// Threads along each block axis (output rows per tile, and columns per pixel step).
const EDGE: u32 = Conv2dConfig::DIRECT_TILE;

/// Where one block works.
#[derive(Clone, Copy)]
pub(super) struct BlockPos {
    pub n: Reg<U32>,
    pub g: Reg<U32>,
    /// First output channel of the block within its group.
    pub oc0_local: Reg<U32>,
    /// First output channel of the block, `g · Og + oc0_local`.
    pub oc0: Reg<U32>,
    /// Top-left output pixel of the tile (on its phase's grid with [`Phases`]).
    pub oh0: Reg<U32>,
    pub ow0: Reg<U32>,
    /// The block's phase `ρh·SW + ρw` with [`Phases`].
    pub phase: Option<Reg<U32>>,
}

/// The run-time extents a tiled convolution reads and writes: `batch` images, the input
/// image `h × w`, the output grid `oh × ow` the tiles cover, the output image `image_h ×
/// image_w` and its plane `ohw` (the forward: the grid itself; with [`Phases`]: each phase's
/// grid is the strided subset `(a·SH + ρh, b·SW + ρw)` of the image, `oh = ⌈image_h / SH⌉`).
#[derive(Clone, Copy)]
pub(super) struct Extents {
    pub batch: Reg<U32>,
    pub h: Reg<U32>,
    pub w: Reg<U32>,
    pub oh: Reg<U32>,
    pub ow: Reg<U32>,
    pub image_h: Reg<U32>,
    pub image_w: Reg<U32>,
    pub ohw: Reg<U32>,
    /// Division by `w` (the flat staging of full-width patches, [`FlatPatch`]).
    pub w_div: FastDiv,
}

impl Extents {
    /// The forward's: `x` in, `y` out.
    fn of(d: &Dims) -> Self {
        Self {
            batch: d.batch,
            h: d.h,
            w: d.w,
            oh: d.oh,
            ow: d.ow,
            image_h: d.oh,
            image_w: d.ow,
            ohw: d.ohw,
            w_div: d.w_div,
        }
    }
}

/// Backward-data's phase decomposition along the rows and the columns (stride above 1 on
/// either): the block walk gains the phase index, each block runs its phase's taps over the
/// dense window and stores its phase's pixels of the output image (see [`PhaseAxis`]).
pub(super) type Phases = [PhaseAxis; 2];

/// Stages the weights of `weight_channels` input channels from `c0` for the block at `pos`
/// (see [`stage_weights`] for the layout every stager writes).
pub(super) type WeightStager<T> = fn(
    &mut KernelBuilder,
    &Problem,
    &DirectTile,
    BlockPos,
    Reg<U32>,
    GlobalPtr<T>,
    SharedArr<<T as ConvElem>::Acc>,
    Reg<U32>,
);

/// What a tiled convolution computes: its problem (stride 1 and the window's padding with
/// phases), tiling, phases and weight stager.
pub(super) struct TiledConv<T: ConvElem> {
    pub p: Problem,
    pub tile: DirectTile,
    pub phases: Option<Phases>,
    pub stage_weights: WeightStager<T>,
}

/// The buffers of a tiled convolution.
pub(super) struct TiledBuffers<T: ConvElem> {
    pub x: GlobalPtr<T>,
    pub w: GlobalPtr<T>,
    pub bias: Option<GlobalPtr<T>>,
    pub y: GlobalPtr<T>,
}

/// Builds the entry: `conv2d_direct(x, w, [bias,] y, batch, height, width, out_height,
/// out_width)`.
pub(crate) fn build<T: ConvElem>(cfg: &Conv2dConfig, arch: Arch) -> KernelBuilder {
    let p = Problem::new(cfg);
    let tile = cfg.direct_tile();
    let mut k = conv_kernel(ENTRY, arch);
    k.require_block([EDGE, EDGE, 1]);
    let x = k.param_ptr::<T>("x");
    let w = k.param_ptr::<T>("w");
    let bias = p.bias.then(|| k.param_ptr::<T>("bias"));
    let y = k.param_ptr::<T>("y");
    let dims = DimParams::declare(&mut k);
    let (x, w, y) = (k.global_ptr(x), k.global_ptr(w), k.global_ptr(y));
    let bias = bias.map(|b| k.global_ptr(b));
    let dims = dims.load(&mut k);
    let conv = TiledConv {
        p,
        tile,
        phases: None,
        stage_weights: stage_weights::<T>,
    };
    let buffers = TiledBuffers { x, w, bias, y };
    build_tiled(&mut k, &conv, &Extents::of(&dims), buffers);
    k
}

/// The tiled body (module doc) of `conv` on `buffers`, in `k` (its block `(16, 16)`).
pub(super) fn build_tiled<T: ConvElem>(
    k: &mut KernelBuilder,
    conv: &TiledConv<T>,
    dims: &Extents,
    buffers: TiledBuffers<T>,
) {
    let (p, tile) = (conv.p, conv.tile);
    let TiledBuffers { x, w, bias, y } = buffers;
    let smem: SharedArr<T::Acc> = match tile.shared_kind {
        SharedMemoryKind::Static => {
            k.shared_array("direct_stage", tile.shared_bytes / bytes_of::<T::Acc>())
        }
        SharedMemoryKind::Dynamic => k.dynamic_shared(tile.shared_bytes),
    };
    let (tx, ty) = (k.tid_x(), k.tid_y());
    let tid = k.mad_lo(ty, EDGE, tx);
    let vector_ok = loads_of_allowed(k, tile.vector, x, dims);
    let tiles = BlockWalk {
        p: &p,
        tile: &tile,
        d: dims,
        phases: conv
            .phases
            .map_or(1, |[rows, cols]| rows.stride * cols.stride),
    };
    tiles.walk(k, |k, pos| {
        if let Some(b) = bias {
            stage_bias::<T>(k, &p, &tile, pos, b, smem, tid);
        }
        let halves = SecondHalves::of(k, &tile, pos, dims);
        let pixels: Vec<Pixel<T::Acc>> = (0..tile.pixels)
            .flat_map(|i| (0..tile.pixels).map(move |j| (i, j)))
            .map(|(row, col)| Pixel {
                row,
                col,
                acc: (0..tile.out_channels).map(|_| k.zero()).collect(),
            })
            .collect();
        let mut channels = ChannelLoop {
            p: &p,
            tile: &tile,
            dims,
            pos,
            x,
            w,
            smem,
            tid,
            stage_weights: conv.stage_weights,
            vector_ok,
            patch_items: None,
            flat: None,
        };
        match (&conv.phases, pos.phase) {
            (Some(axes), Some(phase)) => {
                let phased = PhasedWindow::new(axes);
                // A phase's grid is small where the image is (a quarter of it at stride 2):
                // the patch rows below the grid's last row's window are not staged, and
                // threads whose first pixel lies outside it skip the taps.
                // No flat run: a phase reads its staged elements once per tap of that phase
                // (1 to 4 of a 3 × 3 filter at stride 2), too few to hide the run's row-end
                // store conflicts (`FLAT_MIN_TAPS`).
                let live_rows = live_patch_rows(k, &tile, pos, dims);
                channels.patch_items = Some(k.mul_lo(live_rows, tile.chunks));
                let row = k.add(pos.oh0, ty);
                let col = k.add(pos.ow0, tx);
                let inside = both_below(k, row, dims.oh, col, dims.ow);
                let run = |k: &mut KernelBuilder| {
                    channels.run(k, |k, j| {
                        k.if_then(inside, |k| {
                            let window = Window::at(k, &p, &tile, smem, tx, ty, j);
                            phased.accumulate(k, &window, phase, &halves, &pixels);
                        })
                    })
                };
                match phased.any_taps(k, phase) {
                    Some(live) => k.if_then(live, run),
                    None => run(k),
                }
            }
            _ => {
                channels.flat = FlatPatch::wanted::<T>(k, (&p, &tile), pos, dims, vector_ok);
                channels.run(k, |k, j| {
                    let window = Window::at(k, &p, &tile, smem, tx, ty, j);
                    halves.select(k, &pixels, |k, live| window.accumulate(k, live));
                })
            }
        }
        let staged_bias = bias.map(|_| k.shared_elem(smem, tile.bias_offset));
        let out = OutputGrid::at(k, conv.phases.as_ref(), pos);
        store_outputs::<T>(k, &p, dims, pos, out, tx, ty, &pixels, staged_bias, y);
        if bias.is_some() {
            // The next tile's bias stage overwrites the values just read.
            k.bar_sync();
        }
    });
}

/// The reduction over the group's input channels of one block position: every
/// `weight_channels` channels stage their weights, then per channel stage its input patch,
/// sync, accumulate, sync.
struct ChannelLoop<'a, T: ConvElem> {
    p: &'a Problem,
    tile: &'a DirectTile,
    dims: &'a Extents,
    pos: BlockPos,
    x: GlobalPtr<T>,
    w: GlobalPtr<T>,
    smem: SharedArr<T::Acc>,
    tid: Reg<U32>,
    stage_weights: WeightStager<T>,
    vector_ok: Pred,
    /// The patch's work items to stage when fewer than all (see [`stage_input`]).
    patch_items: Option<Reg<U32>>,
    /// Whether the tile's patch is staged as a flat run ([`FlatPatch::wanted`]; the run's
    /// registers are formed per channel: held across the loop they spill on sm_70).
    flat: Option<Pred>,
}

impl<T: ConvElem> ChannelLoop<'_, T> {
    /// Runs the loop with `accumulate(k, j)` for channel `j` of the weight chunk.
    fn run(&self, k: &mut KernelBuilder, accumulate: impl Fn(&mut KernelBuilder, Reg<U32>)) {
        let (p, tile, pos) = (self.p, self.tile, self.pos);
        k.comment("for each chunk of input channels: stage its weights, then per channel stage, sync, accumulate, sync");
        k.for_range(0u32, p.cg, tile.weight_channels, |k, c0| {
            (self.stage_weights)(k, p, tile, pos, c0, self.w, self.smem, self.tid);
            let left = k.sub(p.cg, c0);
            let count = k.min(left, tile.weight_channels);
            k.for_range(0u32, count, 1u32, |k, j| {
                let ci = k.add(c0, j);
                stage_input::<T>(
                    k,
                    p,
                    tile,
                    self.dims,
                    pos,
                    self.x,
                    ci,
                    self.smem,
                    self.tid,
                    self.vector_ok,
                    self.patch_items,
                    self.flat,
                );
                k.bar_sync();
                accumulate(k, j);
                k.bar_sync();
            });
        });
    }
}

/// The patch rows the tile's live grid rows read (their [`stage_input`] work items are these
/// times `chunks`): `min(oh − oh0, out_h) + in_h − out_h`.
fn live_patch_rows(
    k: &mut KernelBuilder,
    tile: &DirectTile,
    pos: BlockPos,
    d: &Extents,
) -> Reg<U32> {
    let left = k.sub(d.oh, pos.oh0);
    let live = k.min(left, tile.out_h);
    k.add(live, tile.in_h - tile.out_h)
}

/// The phases that have taps (see [`Phases`]), as `(phase index, row taps, column taps)`.
struct PhasedWindow {
    live: Vec<(u32, Vec<PhaseTap>, Vec<PhaseTap>)>,
    phases: u32,
    /// `(k step, offset step)` between consecutive row taps.
    row_steps: (u32, u32),
}

impl PhasedWindow {
    fn new([rows, cols]: &Phases) -> Self {
        let live = (0..rows.stride)
            .flat_map(|rho_h| (0..cols.stride).map(move |rho_w| (rho_h, rho_w)))
            .map(|(rho_h, rho_w)| {
                (
                    rho_h * cols.stride + rho_w,
                    rows.taps(rho_h),
                    cols.taps(rho_w),
                )
            })
            .filter(|(_, r, c)| !r.is_empty() && !c.is_empty())
            .collect();
        Self {
            live,
            phases: rows.stride * cols.stride,
            row_steps: rows.steps(),
        }
    }

    /// Whether the block's `phase` has any tap (uniform in the block); `None` when every
    /// phase has.
    fn any_taps(&self, k: &mut KernelBuilder, phase: Reg<U32>) -> Option<Pred> {
        if self.live.len() as u32 == self.phases {
            return None;
        }
        let mut tests = self.live.iter().map(|(index, ..)| *index);
        let first = tests.next()?;
        let any = k.setp(CmpOp::Eq, phase, first);
        Some(tests.fold(any, |any, index| {
            let this = k.setp(CmpOp::Eq, phase, index);
            k.or_pred(any, this)
        }))
    }

    /// Runs the block's `phase`'s taps of `window` for the live `pixels` (one branch per
    /// phase with taps, uniform in the block).
    fn accumulate<A: Float>(
        &self,
        k: &mut KernelBuilder,
        window: &Window<'_, A>,
        phase: Reg<U32>,
        halves: &SecondHalves,
        pixels: &[Pixel<A>],
    ) {
        for (index, rows, cols) in &self.live {
            let this = k.setp(CmpOp::Eq, phase, *index);
            k.if_then(this, |k| {
                halves.select(k, pixels, |k, live| {
                    window.accumulate_phase(k, live, rows, cols, self.row_steps)
                })
            });
        }
    }
}

/// Where a tile's grid positions land in the output image: the positions themselves, or
/// with [`Phases`] `(a·SH + ρh, b·SW + ρw)` for the block's phase `ρh·SW + ρw`.
struct OutputGrid {
    /// `[(SH, ρh), (SW, ρw)]`.
    phase: Option<[(u32, Reg<U32>); 2]>,
}

impl OutputGrid {
    fn at(k: &mut KernelBuilder, phases: Option<&Phases>, pos: BlockPos) -> Self {
        let phase = match (phases, pos.phase) {
            (Some([rows, cols]), Some(phase)) => {
                let rho_h = div_const(k, phase, cols.stride);
                let rho_w = rem_const(k, phase, cols.stride);
                Some([(rows.stride, rho_h), (cols.stride, rho_w)])
            }
            _ => None,
        };
        Self { phase }
    }

    /// The image position of grid position `(row, col)`.
    fn place(&self, k: &mut KernelBuilder, row: Reg<U32>, col: Reg<U32>) -> (Reg<U32>, Reg<U32>) {
        match self.phase {
            None => (row, col),
            Some([(sh, rho_h), (sw, rho_w)]) => {
                (k.mad_lo(row, sh, rho_h), k.mad_lo(col, sw, rho_w))
            }
        }
    }
}

/// `stage[bias_offset + o] = bias[oc0 + o]` for `o < OCB` (0 past the group's last channel),
/// by threads `0 .. OCB`: one coalesced request instead of a broadcast per thread and channel.
/// The channel loop's first barrier orders it before the reads in [`store_outputs`].
fn stage_bias<T: ConvElem>(
    k: &mut KernelBuilder,
    p: &Problem,
    tile: &DirectTile,
    pos: BlockPos,
    bias: GlobalPtr<T>,
    smem: SharedArr<T::Acc>,
    tid: Reg<U32>,
) {
    k.comment("stage the block's bias values");
    let stager = k.setp_lt(tid, tile.out_channels);
    k.if_then(stager, |k| {
        let local = k.add(pos.oc0_local, tid);
        let ok = k.setp_lt(local, p.og);
        let oc = k.add(pos.oc0, tid);
        let value = load_or_zero::<T>(k, bias, oc, ok);
        let slot = k.add(tid, tile.bias_offset);
        let addr = k.shared_elem(smem, slot);
        k.st_shared(addr, 0, value);
    });
}

/// One output pixel of a thread, `(oh0 + ty + 16·row, ow0 + tx + 16·col)`, and its `OCB`
/// accumulators.
struct Pixel<A> {
    row: u32,
    col: u32,
    acc: Vec<Reg<A>>,
}

/// Whether the tile's second 16 rows and second 16 columns hold any output (`None` for a
/// 16 × 16 tile): the same in the whole block.
struct SecondHalves {
    rows: Option<Pred>,
    cols: Option<Pred>,
}

impl SecondHalves {
    fn of(k: &mut KernelBuilder, tile: &DirectTile, pos: BlockPos, d: &Extents) -> Self {
        let half = |k: &mut KernelBuilder, start: Reg<U32>, end: Reg<U32>| {
            (tile.pixels > 1).then(|| {
                let second = k.add(start, EDGE);
                k.setp_lt(second, end)
            })
        };
        Self {
            rows: half(k, pos.oh0, d.oh),
            cols: half(k, pos.ow0, d.ow),
        }
    }

    /// Runs `body` once, on the pixels whose 16-row and 16-column halves hold output (one
    /// branch per combination, uniform in the block).
    fn select<A>(
        &self,
        k: &mut KernelBuilder,
        pixels: &[Pixel<A>],
        body: impl Fn(&mut KernelBuilder, &[&Pixel<A>]),
    ) {
        let run = |k: &mut KernelBuilder, rows: bool, cols: bool| {
            let live: Vec<&Pixel<A>> = pixels
                .iter()
                .filter(|px| (rows || px.row == 0) && (cols || px.col == 0))
                .collect();
            body(k, &live);
        };
        let by_cols = |k: &mut KernelBuilder, rows: bool| match self.cols {
            Some(c) => k.if_else(c, |k| run(k, rows, true), |k| run(k, rows, false)),
            None => run(k, rows, true),
        };
        match self.rows {
            Some(r) => k.if_else(r, |k| by_cols(k, true), |k| by_cols(k, false)),
            None => by_cols(k, true),
        }
    }
}

/// The tiles a block computes: column tile `ctaid.x`; linear index `b = n · Y + by` over the
/// images and `Y = ceil(OH / out_h) · channel_blocks` y indices, walked from `ctaid.y` below
/// `batch · Y` in steps of `nctaid.y` (the host clamps the grid's y extent to 65535), with
/// `by = tile_row · channel_blocks + cb`, `channel_blocks = groups · ceil(Og / OCB) · phases`
/// and `cb = (g · ceil(Og / OCB) + ob) · phases + phase` (channels `ob · OCB ..` of group `g`;
/// `phases = SH·SW` with [`Phases`], else 1 and no phase). The bounds and steps are the same
/// in the whole block, so the walk may hold barriers.
struct BlockWalk<'a> {
    p: &'a Problem,
    tile: &'a DirectTile,
    d: &'a Extents,
    phases: u32,
}

impl BlockWalk<'_> {
    fn channel_blocks(&self) -> u32 {
        let p = self.p;
        p.c_out / p.og * p.og.div_ceil(self.tile.out_channels) * self.phases
    }

    /// `Y = ceil(OH / out_h) · channel_blocks`.
    fn y_extent(&self, k: &mut KernelBuilder) -> Reg<U32> {
        let rows = k.add(self.d.oh, self.tile.out_h - 1);
        let tiles_h = div_const(k, rows, self.tile.out_h);
        k.mul_lo(tiles_h, self.channel_blocks())
    }

    /// Runs `body` at every block position of the walk: `b = ctaid.y, ctaid.y + nctaid.y, …
    /// < batch · Y`. `ctaid.y < batch · Y` in every block of the host's grid (its extent never
    /// exceeds the walked one), so the first trip needs no test; `batch · Y + 65535` stays
    /// below 2³² (`batch · Y ≤` the output's elements `≤`
    /// [`INDEX_LIMIT`](crate::templates::conv::INDEX_LIMIT)). The bound and step are formed
    /// after the body, so they hold no register across it.
    fn walk(&self, k: &mut KernelBuilder, body: impl FnOnce(&mut KernelBuilder, BlockPos)) {
        k.comment("walk the block's tiles: ctaid.y + k * nctaid.y");
        let first = k.ctaid_y();
        let b = k.var::<U32>(first);
        let head = k.label("walk");
        k.place(head);
        let pos = self.locate(k, b);
        body(k, pos);
        let step = k.special(SpecialReg::NctaidY);
        k.add_into(b, b, step);
        let y_extent = self.y_extent(k);
        let end = k.mul_lo(self.d.batch, y_extent);
        let more = k.setp_lt(b, end);
        k.bra_if(more, false, head);
    }

    /// The block position of linear index `b`.
    fn locate(&self, k: &mut KernelBuilder, b: Reg<U32>) -> BlockPos {
        k.comment("locate the tile: image, row, group and output channels");
        let (p, tile) = (self.p, self.tile);
        let y_extent = self.y_extent(k);
        let n = k.div_int(b, y_extent);
        let by = k.rem(b, y_extent);
        let oc_blocks = p.og.div_ceil(tile.out_channels);
        let channel_blocks = self.channel_blocks();
        let tile_col = k.ctaid_x();
        let tile_row = div_const(k, by, channel_blocks);
        let cb = rem_const(k, by, channel_blocks);
        let (cb, phase) = match self.phases {
            1 => (cb, None),
            phases => (div_const(k, cb, phases), Some(rem_const(k, cb, phases))),
        };
        let oh0 = k.mul_lo(tile_row, tile.out_h);
        let ow0 = k.mul_lo(tile_col, tile.out_w);
        let g = div_const(k, cb, oc_blocks);
        let ob = rem_const(k, cb, oc_blocks);
        let oc0_local = k.mul_lo(ob, tile.out_channels);
        let oc0 = k.mad_lo(g, p.og, oc0_local);
        BlockPos {
            n,
            g,
            oc0_local,
            oc0,
            oh0,
            ow0,
            phase,
        }
    }
}

/// Whether the patch may be read in chunks of `v` elements: the image width is a multiple of
/// `v` (every row, and every plane, starts on a chunk boundary) and `x` is aligned to a whole
/// chunk. The same in every thread of the launch.
fn loads_of_allowed<T: ConvElem>(
    k: &mut KernelBuilder,
    v: u32,
    x: GlobalPtr<T>,
    d: &Extents,
) -> Pred {
    let zero = k.var::<U32>(0u32);
    let base: Reg<U64> = k.elem_addr(x, zero);
    let low: Reg<U32> = k.cvt(base, None);
    let misaligned = k.and(low, v * bytes_of::<T>() - 1);
    let ragged = k.and(d.w, v - 1);
    let either = k.or(misaligned, ragged);
    k.setp(CmpOp::Eq, either, 0u32)
}

/// `stage[r, pos(s)] = x[n, g·Cg + ci, oh0·SH − PH + r, ow0·SW − PW + s]` for `r < in_h`,
/// `s < in_w`, 0 outside the image, with `pos(s) = (s mod SW)·segment + s / SW` (see
/// [`DirectTile`]). Work item `e = r·chunks + c` covers image columns `first + c·V ..` of
/// patch row `r`, `first = ow0·SW − PW − lead` (on a sector): one vector load when the whole
/// chunk lies in the image, holds a patch column and vector loads are allowed, else element by
/// element (only the elements inside both the image and the patch). Consecutive threads take consecutive
/// chunks, so a warp reads consecutive 16-byte pieces of a row. With `items`, only the work
/// items below it (the first rows of the patch). With `flat`, a patch holding whole image rows
/// ([`FlatPatch`]) loads its image part as one flat run instead, the row chunks only storing
/// the zeros around it.
#[allow(clippy::too_many_arguments)]
fn stage_input<T: ConvElem>(
    k: &mut KernelBuilder,
    p: &Problem,
    tile: &DirectTile,
    d: &Extents,
    pos: BlockPos,
    x: GlobalPtr<T>,
    ci: Reg<U32>,
    smem: SharedArr<T::Acc>,
    tid: Reg<U32>,
    vector_ok: Pred,
    items: Option<Reg<U32>>,
    flat: Option<Pred>,
) {
    k.comment("stage the input patch of channel ci");
    let c = k.mad_lo(pos.g, p.cg, ci);
    let plane = k.mad_lo(pos.n, p.c_in, c);
    let hw = k.mul_lo(d.h, d.w);
    let x_plane = k.mul_lo(plane, hw);
    let rows = PatchRows {
        p,
        tile,
        d,
        pos,
        x,
        x_plane,
        smem,
        tid,
        items,
    };
    match flat {
        Some(full) => k.if_else(
            full,
            |k| {
                let flat = FlatPatch::at::<T>(k, (p, tile), pos, d);
                let by = |k: &mut KernelBuilder, v: u32| {
                    rows.stage_chunks(k, v, Chunks::OutsideImage);
                    flat.stage(k, p, tile, (x, x_plane), smem, (tid, v));
                };
                // Without whole vectors, pairs where the width is even (half the trips).
                let narrower = |k: &mut KernelBuilder| {
                    if tile.vector > 2 {
                        let pairs_ok = loads_of_allowed(k, 2, x, d);
                        k.if_else(pairs_ok, |k| by(k, 2), |k| by(k, 1));
                    } else {
                        by(k, 1);
                    }
                };
                k.if_else(vector_ok, |k| by(k, tile.vector), narrower);
            },
            |k| rows.stage(k, vector_ok),
        ),
        None => rows.stage(k, vector_ok),
    }
}

/// Which chunks [`PatchRows::stage`] stores.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Chunks {
    /// Every chunk holding a patch column.
    All,
    /// Only those outside the image (zeros): the [`FlatPatch`] run stores the rest.
    OutsideImage,
}

/// The patch of one input channel, staged row by row (see [`stage_input`]).
struct PatchRows<'a, T: ConvElem> {
    p: &'a Problem,
    tile: &'a DirectTile,
    d: &'a Extents,
    pos: BlockPos,
    x: GlobalPtr<T>,
    /// `x`'s element index of the channel's plane.
    x_plane: Reg<U32>,
    smem: SharedArr<T::Acc>,
    tid: Reg<U32>,
    items: Option<Reg<U32>>,
}

impl<T: ConvElem> PatchRows<'_, T> {
    /// Vector chunks where the image and buffer allow them, else single elements (`V = 1`,
    /// consecutive threads on consecutive columns: whole sectors of each row).
    fn stage(&self, k: &mut KernelBuilder, vector_ok: Pred) {
        let v = self.tile.vector;
        if v == 1 {
            return self.stage_chunks(k, v, Chunks::All);
        }
        k.if_else(
            vector_ok,
            |k| self.stage_chunks(k, v, Chunks::All),
            |k| self.stage_chunks(k, 1, Chunks::All),
        );
    }

    /// Work item `e = r·(chunks·vector / v) + c`: `v` columns from `first + c·v` of patch row
    /// `r`; with `v > 1` one vector load (vector loads allowed: a chunk lies wholly in or out
    /// of the image), with `v = 1` one element. `Chunks::OutsideImage` stores only the zeros
    /// of the chunks outside the image (a [`FlatPatch`] loads the rest).
    fn stage_chunks(&self, k: &mut KernelBuilder, v: u32, which: Chunks) {
        let (p, tile, d, pos, x, smem) = (self.p, self.tile, self.d, self.pos, self.x, self.smem);
        // Wrapping: positions left of / above the image become huge and fail `< H`/`< W`.
        let row0 = k.mul_lo(pos.oh0, p.sh);
        let row0 = k.sub(row0, p.ph);
        let col0 = k.mul_lo(pos.ow0, p.sw);
        let first = k.sub(col0, p.pw.wrapping_add(tile.lead));
        let per_row = tile.chunks * tile.vector / v;
        let total: Val<U32> = match self.items {
            Some(items) if v == tile.vector => items.into(),
            Some(items) => k.mul_lo(items, tile.vector / v).into(),
            None => (tile.in_h * per_row).into(),
        };
        // The chunks holding patch columns: `first_chunk ..= first_chunk + patch_chunks − 1`.
        let first_chunk = tile.lead / v;
        let patch_chunks = (tile.lead + tile.in_w - 1) / v + 1 - first_chunk;
        k.for_range(self.tid, total, tile.threads, |k, e| {
            let r = div_const(k, e, per_row);
            let chunk = rem_const(k, e, per_row);
            let from_patch = k.sub(chunk, first_chunk);
            let in_patch = k.setp_lt(from_patch, patch_chunks);
            k.if_then(in_patch, |k| {
                let ih = k.add(row0, r);
                let iw = k.mad_lo(chunk, v, first);
                // Patch column of the chunk's first element (wraps for the lead columns).
                let s0 = k.mul_lo(chunk, v);
                let s0 = k.sub(s0, tile.lead);
                let row_slot = k.mul_lo(r, tile.pitch);
                let store = |k: &mut KernelBuilder, values: &[Reg<T::Acc>]| {
                    store_patch_chunk(k, p, tile, smem, row_slot, (chunk, v), s0, values)
                };
                if which == Chunks::OutsideImage {
                    let above_or_below = k.setp_ge(ih, d.h);
                    let beside = k.setp_ge(iw, d.w);
                    let outside = k.or_pred(above_or_below, beside);
                    k.if_then(outside, |k| {
                        let zero = k.zero();
                        store(k, &vec![zero; v as usize]);
                    });
                    return;
                }
                let idx = k.mad_lo(ih, d.w, iw);
                let idx = k.add(idx, self.x_plane);
                let inside = both_below(k, ih, d.h, iw, d.w);
                if v == 1 {
                    let value = load_or_zero::<T>(k, x, idx, inside);
                    return store(k, &[value]);
                }
                k.if_else(
                    inside,
                    |k| {
                        let addr = k.elem_addr(x, idx);
                        let values: Vec<Reg<T::Acc>> = load_vector::<T>(k, addr, v)
                            .into_iter()
                            .map(|raw| T::widen(k, raw))
                            .collect();
                        store(k, &values);
                    },
                    |k| {
                        let zero = k.zero();
                        store(k, &vec![zero; v as usize]);
                    },
                );
            });
        });
    }
}

/// The fewest filter taps a [`FlatPatch`] is used with. Its run crosses row ends inside a
/// quarter-warp's 16-byte staging stores, where the shared row pitch (not the image width)
/// follows, so such a store may take 2 wavefronts; every staged element is then read once per
/// tap, which keeps the kernel's shared wavefronts within 1.05 × the fewest from 3 × 3 on with
/// 4-byte staged elements (measured 1.002–1.016 at widths 4 to 28), while a 1 × 1 window's
/// stores would be a third of its traffic (1.40 measured, f64 14 × 14). f64, whose 16-byte
/// chunks are two columns (a quarter-warp spans 16: a row end in nearly every phase), keeps
/// the row chunks (1.086 measured flat at 3 × 3, 14 × 14).
const FLAT_MIN_TAPS: u32 = 9;

/// A patch that holds every column of its image rows (the tile's first column at stride 1,
/// the image at most `in_w − PW` wide; the same in the whole block): its image part, rows
/// `lo .. hi` of the plane, is one contiguous run of `(hi − lo)·W` elements. Staged as such —
/// chunk `q` of `V` elements (`V = 1` where vector loads are not allowed) at plane element
/// `f = first + q·V` (`first` the run's start rounded down to a 32-byte sector; chunks before
/// the start load nothing), at patch row `f / W − row0`, column `f mod W + PW` — a warp's
/// requests are whole sectors whatever the row width (per-row chunks split a sector at every
/// row end that is not on one, e.g. 28 halves: 56 bytes, and narrow rows leave most of a
/// warp's lanes on columns outside the image), and no chunk crosses a row (`W mod V = 0`).
struct FlatPatch {
    /// The patch's first image row `oh0·SH − PH` (wrapping above the image).
    row0: Reg<U32>,
    /// The run `[start, end)` of plane elements, and `first ≤ start` on a sector.
    start: Reg<U32>,
    end: Reg<U32>,
    first: Reg<U32>,
    w_div: FastDiv,
}

impl FlatPatch {
    /// Whether the block at `pos` stages its patch as a flat run (the same in the whole
    /// block): it holds whole image rows that the row chunks would split at sectors (rows
    /// ending inside one, or element loads). `None` where the layout cannot take a run
    /// (strided columns, 8-byte elements, few taps ([`FLAT_MIN_TAPS`]), or a padding that
    /// wraps: backward-data's flipped window).
    fn wanted<T: ConvElem>(
        k: &mut KernelBuilder,
        (p, tile): (&Problem, &DirectTile),
        pos: BlockPos,
        d: &Extents,
        vector_ok: Pred,
    ) -> Option<Pred> {
        if p.sw != 1 || tile.elem_bytes != 4 || p.pw > tile.in_w || p.taps < FLAT_MIN_TAPS {
            return None;
        }
        let left = k.setp(CmpOp::Eq, pos.ow0, 0u32);
        let narrow = k.setp(CmpOp::Le, d.w, tile.in_w - p.pw);
        let full = k.and_pred(left, narrow);
        // `W mod sector ≠ 0 || !vector_ok`: whole-sector rows loaded by vectors already move
        // whole sectors per request.
        let tail = k.and(d.w, 32 / bytes_of::<T>() - 1);
        let elements = k.selp(0u32, 1u32, vector_ok);
        let split = k.or(tail, elements);
        let helps = k.setp(CmpOp::Ne, split, 0u32);
        Some(k.and_pred(full, helps))
    }

    /// The run of the block at `pos` (its `in_h` patch rows), where [`Self::wanted`].
    fn at<T: ConvElem>(
        k: &mut KernelBuilder,
        (p, tile): (&Problem, &DirectTile),
        pos: BlockPos,
        d: &Extents,
    ) -> Self {
        let row0 = k.mul_lo(pos.oh0, p.sh);
        let row0 = k.sub(row0, p.ph);
        let past = k.add(row0, tile.in_h);
        // Sizes stay below 2³¹ (the launch checks every index), so a set top bit is a
        // position above the image.
        let above = k.setp(CmpOp::Ge, row0, 1u32 << 31);
        let lo = k.selp(0u32, row0, above);
        let none = k.setp(CmpOp::Ge, past, 1u32 << 31);
        let below = k.min(past, d.h);
        let hi = k.selp(0u32, below, none);
        let start = k.mul_lo(lo, d.w);
        let end = k.mul_lo(hi, d.w);
        let first = k.and(start, !(32 / bytes_of::<T>() - 1));
        Self {
            row0,
            start,
            end,
            first,
            w_div: d.w_div,
        }
    }

    /// The run's chunks of `v` elements (`v = 1` where vector loads are not allowed), thread
    /// `tid` taking `q ≡ tid (mod threads)`.
    fn stage<T: ConvElem>(
        &self,
        k: &mut KernelBuilder,
        p: &Problem,
        tile: &DirectTile,
        (x, x_plane): (GlobalPtr<T>, Reg<U32>),
        smem: SharedArr<T::Acc>,
        (tid, v): (Reg<U32>, u32),
    ) {
        let from = k.mad_lo(tid, v, self.first);
        k.for_range(from, self.end, v * tile.threads, |k, f| {
            let started = k.setp_ge(f, self.start);
            k.if_then(started, |k| {
                let idx = k.add(x_plane, f);
                let addr = k.elem_addr(x, idx);
                let values: Vec<Reg<T::Acc>> = load_vector::<T>(k, addr, v)
                    .into_iter()
                    .map(|raw| T::widen(k, raw))
                    .collect();
                let (row, col) = self.w_div.divmod(k, f);
                let r = k.sub(row, self.row0);
                let slot = k.mad_lo(r, tile.pitch, col);
                let slot = k.add(slot, p.pw + tile.origin);
                let at = k.shared_elem(smem, slot);
                store_chunk(k, at, &values);
            });
        });
    }
}

/// Stores chunk `chunk` of `v` elements of patch row `r` (`row_slot = r · pitch`), whose
/// first element is patch column `s0`: for stride 1 the whole chunk at `chunk · v` (`origin =
/// lead`: the lead and tail elements land in columns no tap reads), otherwise each patch
/// column at its de-interleaved place.
#[allow(clippy::too_many_arguments)]
fn store_patch_chunk<A: Float>(
    k: &mut KernelBuilder,
    p: &Problem,
    tile: &DirectTile,
    smem: SharedArr<A>,
    row_slot: Reg<U32>,
    (chunk, v): (Reg<U32>, u32),
    s0: Reg<U32>,
    values: &[Reg<A>],
) {
    if p.sw == 1 {
        let slot = k.mad_lo(chunk, v, row_slot);
        let addr = k.shared_elem(smem, slot);
        store_chunk(k, addr, values);
        return;
    }
    for (i, value) in values.iter().enumerate() {
        let s = k.add(s0, i as u32);
        let in_patch = k.setp_lt(s, tile.in_w);
        k.if_then(in_patch, |k| {
            let phase = rem_const(k, s, p.sw);
            let within = div_const(k, s, p.sw);
            let column = k.mad_lo(phase, tile.segment, within);
            let slot = k.add(row_slot, column);
            let addr = k.shared_elem(smem, slot);
            k.st_shared(addr, 0, *value);
        });
    }
}

/// `values` at consecutive elements from `addr` (aligned to their size): one `st.shared.v4`
/// for four 4-byte values, `.v2` for two, element by element otherwise.
fn store_chunk<A: Float>(k: &mut KernelBuilder, addr: Reg<U32>, values: &[Reg<A>]) {
    let esz = bytes_of::<A>();
    match values {
        [a, b, c, d] if esz == 4 => k.st_shared_v4(addr, 0, [*a, *b, *c, *d]),
        [a, b] if esz == 4 => k.st_shared_v2(addr, 0, [*a, *b]),
        _ => {
            for (i, value) in values.iter().enumerate() {
                k.st_shared(addr, (i as u32 * esz) as i32, *value);
            }
        }
    }
}

/// `V` consecutive elements at `addr` with one `ld.global.nc.v4` (`V = 4`), `.v2` (`V = 2`)
/// or scalar load.
fn load_vector<T: ConvElem>(k: &mut KernelBuilder, addr: Reg<U64>, v: u32) -> Vec<Reg<T>> {
    match v {
        4 => k.ld_global_v4::<T>(addr, 0, true).to_vec(),
        2 => k.ld_global_v2::<T>(addr, 0, true).to_vec(),
        1 => vec![k.ld_global_nc::<T>(addr, 0)],
        other => panic!("no {other}-element vector load"),
    }
}

/// `stage_w[(j·KH·KW + t)·weight_pitch + o] = w[oc0 + o, c0 + j, t]` for `j < weight_channels`,
/// `o < 4·ceil(OCB / 4)`, 0 past the group's last input or output channel. Output channel `o`'s
/// run for the stage is `w[(oc0 + o)·Cg·KH·KW + c0·KH·KW + rest]`, `rest < weight_channels ·
/// KH·KW`, contiguous: work item `e = q·run + rest` reads `rest` of channels `4q .. 4q + 4`
/// (consecutive threads read consecutive elements of each run) and stores them as one 16-byte
/// row piece (four scalar stores for f64).
#[allow(clippy::too_many_arguments)]
fn stage_weights<T: ConvElem>(
    k: &mut KernelBuilder,
    p: &Problem,
    tile: &DirectTile,
    pos: BlockPos,
    c0: Reg<U32>,
    w: GlobalPtr<T>,
    smem: SharedArr<T::Acc>,
    tid: Reg<U32>,
) {
    k.comment("stage the block's filter taps of the input channel chunk");
    let remaining = k.sub(p.og, pos.oc0_local);
    let channels = k.min(remaining, tile.out_channels);
    let channels_left = k.sub(p.cg, c0);
    let valid_run = k.mul_lo(channels_left, p.taps);
    let filter = k.mul_lo(pos.oc0, p.filter_len());
    let start = k.mad_lo(c0, p.taps, filter);
    let run = tile.weight_channels * p.taps;
    let quads = tile.out_channels.div_ceil(4);
    k.for_range(tid, quads * run, tile.threads, |k, e| {
        let q = div_const(k, e, run);
        let rest = rem_const(k, e, run);
        let in_run = k.setp_lt(rest, valid_run);
        let o0 = k.mul_lo(q, 4u32);
        let first = k.mad_lo(o0, p.filter_len(), start);
        let first = k.add(first, rest);
        let values: Vec<Reg<T::Acc>> = (0..4u32)
            .map(|i| {
                let o = k.add(o0, i);
                let real = k.setp_lt(o, channels);
                let ok = k.and_pred(real, in_run);
                let idx = k.add(first, i * p.filter_len());
                load_or_zero::<T>(k, w, idx, ok)
            })
            .collect();
        let row = k.mad_lo(rest, tile.weight_pitch, tile.weight_offset);
        let slot = k.add(row, o0);
        let addr = k.shared_elem(smem, slot);
        store_chunk(k, addr, &values);
    });
}

/// One thread's view of the staged tile for input channel `j` of the weight chunk.
struct Window<'a, A> {
    p: &'a Problem,
    tile: &'a DirectTile,
    /// Shared address of the thread's first tap input, `stage[ty·SH, tx]`.
    inputs: Reg<U32>,
    /// Shared address of the chunk channel's first weight row.
    weights: Reg<U32>,
    _acc: std::marker::PhantomData<A>,
}

impl<'a, A: Float> Window<'a, A> {
    fn at(
        k: &mut KernelBuilder,
        p: &'a Problem,
        tile: &'a DirectTile,
        smem: SharedArr<A>,
        tx: Reg<U32>,
        ty: Reg<U32>,
        j: Reg<U32>,
    ) -> Self {
        let row = k.mad_lo(ty, p.sh * tile.pitch, tile.origin);
        let first = k.add(row, tx);
        let inputs = k.shared_elem(smem, first);
        let rows = k.mul_lo(j, p.taps * tile.weight_pitch);
        let w_first = k.add(rows, tile.weight_offset);
        let weights = k.shared_elem(smem, w_first);
        Self {
            p,
            tile,
            inputs,
            weights,
            _acc: std::marker::PhantomData,
        }
    }

    /// `acc[i, j][o] += Σ_{kh, kw} stage[(ty + 16i)·SH + kh·DH, pos((tx + 16j)·SW + kw·DW)]
    /// · stage_w[c, kh, kw, o]` (input channel `c` of the weight chunk) for the pixels `acc`
    /// holds. Tap `(kh, kw)` of pixel `(i, j)` reads element `((ty + 16i)·SH + kh·DH)·pitch +
    /// origin + ((kw·DW) mod SW)·segment + tx + 16j + (kw·DW) / SW`: a half-warp reads 16
    /// consecutive elements; the weight reads are warp-uniform (broadcast).
    fn accumulate(&self, k: &mut KernelBuilder, acc: &[&Pixel<A>]) {
        k.comment("run the kernel window over the staged patch");
        let (p, tile) = (self.p, self.tile);
        let esz = bytes_of::<A>();
        let column = |kw: u32| ((kw * p.dw) % p.sw) * tile.segment + (kw * p.dw) / p.sw;
        let w_row = tile.weight_pitch * esz;
        if p.taps <= UNROLL_TAPS {
            for kh in 0..p.kh {
                for kw in 0..p.kw {
                    let in_off = kh * p.dh * tile.pitch + column(kw);
                    let t = kh * p.kw + kw;
                    self.tap(k, acc, self.inputs, in_off, self.weights, t * w_row);
                }
            }
            return;
        }
        k.for_range(0u32, p.kh, 1u32, |k, kh| {
            let in_row = k.mad_lo(kh, p.dh * tile.pitch * esz, self.inputs);
            let w_first = k.mad_lo(kh, p.kw * w_row, self.weights);
            if p.kw <= UNROLL_TAPS {
                for kw in 0..p.kw {
                    self.tap(k, acc, in_row, column(kw), w_first, kw * w_row);
                }
            } else {
                k.for_range(0u32, p.kw, 1u32, |k, kw| {
                    let t = k.mul_lo(kw, p.dw);
                    let phase = rem_const(k, t, p.sw);
                    let within = div_const(k, t, p.sw);
                    let col = k.mad_lo(phase, tile.segment, within);
                    let in_addr = k.mad_lo(col, esz, in_row);
                    let w_addr = k.mad_lo(kw, w_row, w_first);
                    self.tap(k, acc, in_addr, 0, w_addr, 0);
                });
            }
        });
    }

    /// `acc[i, j][o] += Σ stage[ty + 16i + r.offset, tx + 16j + c.offset] · stage_w[c, T − 1
    /// − (r.k·KW + c.k), o]` over a phase's row taps `r` and column taps `c` (see
    /// [`PhaseAxis`]) in decreasing `k`, the order the flipped filter runs them in. Fully
    /// unrolled up to [`UNROLL_TAPS`] taps; beyond, a loop over the row taps (consecutive
    /// ones `row_steps = (k step, offset step)` apart) with the column taps unrolled.
    fn accumulate_phase(
        &self,
        k: &mut KernelBuilder,
        acc: &[&Pixel<A>],
        rows: &[PhaseTap],
        cols: &[PhaseTap],
        row_steps: (u32, u32),
    ) {
        k.comment("run the phase's taps over the staged window");
        let (p, tile) = (self.p, self.tile);
        let esz = bytes_of::<A>();
        let w_row = tile.weight_pitch * esz;
        let flipped = |kh: u32, kw: u32| p.taps - 1 - (kh * p.kw + kw);
        if rows.len() * cols.len() <= UNROLL_TAPS as usize {
            for r in rows.iter().rev() {
                for c in cols.iter().rev() {
                    let in_off = r.offset * tile.pitch + c.offset;
                    let w_off = flipped(r.k, c.k) * w_row;
                    self.tap(k, acc, self.inputs, in_off, self.weights, w_off);
                }
            }
            return;
        }
        // Row tap `count − 1 − j`: `k = last.k − j·k_step`, offset `last.offset +
        // j·offset_step`; its weights from row `flipped(k, kw_max)`, `kw_max − kw` further.
        let (last, kw_max) = (rows[rows.len() - 1], cols[cols.len() - 1].k);
        let (k_step, offset_step) = row_steps;
        let in_first = k.add(self.inputs, last.offset * tile.pitch * esz);
        let w_first = k.add(self.weights, flipped(last.k, kw_max) * w_row);
        k.for_range(0u32, rows.len() as u32, 1u32, |k, j| {
            let in_row = k.mad_lo(j, offset_step * tile.pitch * esz, in_first);
            let w_addr = k.mad_lo(j, k_step * p.kw * w_row, w_first);
            for c in cols.iter().rev() {
                self.tap(k, acc, in_row, c.offset, w_addr, (kw_max - c.k) * w_row);
            }
        });
    }

    /// One tap: each pixel's input at element `in_off` (+ its row and column offset) from
    /// `in_addr`, the `OCB` weights at byte `w_off` from `w_addr`, `pixels · OCB` FMAs.
    fn tap(
        &self,
        k: &mut KernelBuilder,
        acc: &[&Pixel<A>],
        in_addr: Reg<U32>,
        in_off: u32,
        w_addr: Reg<U32>,
        w_off: u32,
    ) {
        let esz = bytes_of::<A>();
        let (p, tile) = (self.p, self.tile);
        let inputs: Vec<Reg<A>> = acc
            .iter()
            .map(|px| {
                let at = in_off + px.row * EDGE * p.sh * tile.pitch + px.col * EDGE;
                k.ld_shared::<A>(in_addr, (at * esz) as i32)
            })
            .collect();
        let weights = load_weights(k, tile.out_channels, w_addr, w_off);
        for (o, wv) in weights.iter().enumerate() {
            for (input, pixel) in inputs.iter().zip(acc) {
                k.fma_into(pixel.acc[o], *input, *wv, pixel.acc[o]);
            }
        }
    }
}

/// The `channels` weights of one tap from byte `w_off` of `w_addr` (16-byte aligned, staged
/// for `4·ceil(channels / 4)` channels): one `ld.shared.v4` per 4 channels for 4-byte
/// elements (a broadcast, one wavefront each), element by element for f64.
fn load_weights<A: Float>(
    k: &mut KernelBuilder,
    channels: u32,
    w_addr: Reg<U32>,
    w_off: u32,
) -> Vec<Reg<A>> {
    let esz = bytes_of::<A>();
    if esz != 4 {
        return (0..channels)
            .map(|o| k.ld_shared::<A>(w_addr, (w_off + o * esz) as i32))
            .collect();
    }
    let mut weights = Vec::new();
    for q in 0..channels.div_ceil(4) {
        weights.extend(k.ld_shared_v4::<A>(w_addr, (w_off + 16 * q) as i32));
    }
    weights.truncate(channels as usize);
    weights
}

/// `y[n, oc0 + o, out(oh0 + ty + 16i, ow0 + tx + 16j)] = acc[i, j][o] (+ the staged bias at
/// shared address `bias`, `+ 4o` or `+ 8o`), rounded to the storage type, for pixels inside
/// the output image and channels inside the group, with `out` the [`OutputGrid`]'s placing
/// (consecutive threads store consecutive grid columns).
#[allow(clippy::too_many_arguments)]
fn store_outputs<T: ConvElem>(
    k: &mut KernelBuilder,
    p: &Problem,
    d: &Extents,
    pos: BlockPos,
    out: OutputGrid,
    tx: Reg<U32>,
    ty: Reg<U32>,
    acc: &[Pixel<T::Acc>],
    bias: Option<Reg<U32>>,
    y: GlobalPtr<T>,
) {
    k.comment("store the tile (plus bias)");
    let oh = k.add(pos.oh0, ty);
    let ow = k.add(pos.ow0, tx);
    let image = k.mul_lo(pos.n, p.c_out);
    let pixels: Vec<(Pred, Reg<U32>)> = acc
        .iter()
        .map(|px| {
            let row = k.add(oh, px.row * EDGE);
            let col = k.add(ow, px.col * EDGE);
            let (row, col) = out.place(k, row, col);
            let ok = both_below(k, row, d.image_h, col, d.image_w);
            (ok, k.mad_lo(row, d.image_w, col))
        })
        .collect();
    for o in 0..acc.first().map_or(0, |px| px.acc.len()) {
        let o32 = o as u32;
        let local = k.add(pos.oc0_local, o32);
        let channel_ok = k.setp_lt(local, p.og);
        let oc = k.add(pos.oc0, o32);
        let esz = bytes_of::<T::Acc>();
        let bias_value = bias.map(|b| k.ld_shared::<T::Acc>(b, (o32 * esz) as i32));
        let plane = k.add(image, oc);
        let start = k.mul_lo(plane, d.ohw);
        for ((pixel_ok, pixel), values) in pixels.iter().zip(acc) {
            let ok = k.and_pred(*pixel_ok, channel_ok);
            k.if_then(ok, |k| {
                let value = match bias_value {
                    Some(b) => k.add(values.acc[o], b),
                    None => values.acc[o],
                };
                let idx = k.add(start, *pixel);
                let out = T::narrow(k, value);
                let addr = k.elem_addr(y, idx);
                k.st_global(addr, 0, out);
            });
        }
    }
}
