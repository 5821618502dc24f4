//! The block's shared tiles, its threads' outputs, the inner product and the epilogue.
//!
//! Both tiles hold 64 rows (pixels of the block, or the channels it computes: output
//! channels forward, input channels for backward-data) of one 128-byte row each: [`tile_k`] reduction indices in the accumulation type, as 8 *groups* of 16 bytes.
//! Group `q` of row `r` sits at group `q ⊕ s(r)` with `s(r) = (r ⊕ ⌊r / 8⌋) mod 8`.
//!
//! Thread `t` owns pixels `pl + 16i` (`i < 4`, `pl = ⌊t / 8⌋`) and channels `8·ol + j`
//! (`j < 8`, `ol = t mod 8`). Reading group `q`: the 8 lanes of a quarter-warp share `pl`
//! (one pixel row each: a broadcast) and read channel rows `8·ol + j`, whose swizzle
//! `s = j ⊕ ol` puts their 16 bytes on 8 different 4-bank groups; a thread's row `pl + 16i`
//! has `s = s(pl) ⊕ 2i`. So every read address is one of 8 per-thread registers plus an
//! immediate, and the quarter-warp phases never conflict.

use super::super::common::{bytes_of, div_const, load_or_zero, rem_const, Dims};
use super::super::vector::{load_chunk_or_zero, store_chunk, VectorElem, CHUNK_BYTES};
use crate::builder::{Float, GlobalPtr, KernelBuilder, Pred, Reg, SharedArr, Val, U32};

/// Threads per block.
pub const THREADS: u32 = 128;
/// Output pixels per block.
pub const TILE_M: u32 = 64;
/// Output channels (of one group) per block.
pub const TILE_N: u32 = 64;
/// Bytes of one staged row.
pub(super) const ROW_BYTES: u32 = 128;
/// 16-byte groups per staged row.
const GROUPS: u32 = ROW_BYTES / CHUNK_BYTES;
/// Lanes along the channels: a quarter-warp.
const CHANNEL_LANES: u32 = 8;
/// Lanes along the pixels.
const PIXEL_LANES: u32 = THREADS / CHANNEL_LANES;
/// Pixels per thread, [`PIXEL_LANES`] apart.
const PIXELS_PER_THREAD: u32 = TILE_M / PIXEL_LANES;
/// Consecutive channels per thread.
pub(super) const CHANNELS_PER_THREAD: u32 = TILE_N / CHANNEL_LANES;

const _: () = assert!(GROUPS == 8 && CHANNEL_LANES == GROUPS && PIXEL_LANES == 16);

/// Reduction indices per tile: one 128-byte row of the accumulation type (32 f32, 16 f64).
pub(crate) fn tile_k<A: Float>() -> u32 {
    ROW_BYTES / bytes_of::<A>()
}

/// Elements of the accumulation type per 16-byte group.
pub(crate) fn group_len<A: Float>() -> u32 {
    CHUNK_BYTES / bytes_of::<A>()
}

/// The two shared tiles.
#[derive(Clone, Copy)]
pub(crate) struct Tiles<A> {
    pub pixels: SharedArr<A>,
    pub filters: SharedArr<A>,
}

impl<A: Float> Tiles<A> {
    pub fn declare(k: &mut KernelBuilder) -> Self {
        let len = TILE_M * ROW_BYTES / bytes_of::<A>();
        Self {
            pixels: k.shared_array::<A>("pixel_tile", len),
            filters: k.shared_array::<A>("filter_tile", len),
        }
    }
}

/// Where the block works.
#[derive(Clone, Copy)]
pub(crate) struct Block {
    pub tid: Reg<U32>,
    /// First pixel of the tile.
    pub m0: Reg<U32>,
    /// First output channel of the tile within its group.
    pub n0: Reg<U32>,
    pub group: Reg<U32>,
    /// The tile's pixels are `m < pixels`.
    pub pixels: Reg<U32>,
    /// Pixel `m` is row `first_row + m` of the output.
    pub first_row: Option<Reg<U32>>,
}

impl Block {
    /// The forward's block: pixels `m < N·OH·OW` of the whole launch, group `ctaid.z`.
    pub fn locate(k: &mut KernelBuilder, d: &Dims) -> Self {
        let pixels = k.mul_lo(d.batch, d.ohw);
        let group = k.ctaid_z();
        Self::at(k, group, pixels, None)
    }

    /// Backward-data's block: pixels `m < H·W` of image `n`, group `g`, with `ctaid.z =
    /// n·G + g` (a tile never straddles two images, so no division by `H·W`).
    pub fn locate_in_image(k: &mut KernelBuilder, d: &Dims, groups: u32) -> (Self, Reg<U32>) {
        let z = k.ctaid_z();
        let image = div_const(k, z, groups);
        let group = rem_const(k, z, groups);
        let pixels = k.mul_lo(d.h, d.w);
        let first_row = k.mul_lo(image, pixels);
        (Self::at(k, group, pixels, Some(first_row)), image)
    }

    /// Tile `(ctaid.x, ctaid.y)`: rows `m0 = 64·ctaid.x ..` below `pixels`, columns
    /// `n0 = 64·ctaid.y ..` of `group`.
    pub(crate) fn at(
        k: &mut KernelBuilder,
        group: Reg<U32>,
        pixels: Reg<U32>,
        first_row: Option<Reg<U32>>,
    ) -> Self {
        let tid = k.tid_x();
        let bx = k.ctaid_x();
        let m0 = k.mul_lo(bx, TILE_M);
        let by = k.ctaid_y();
        let n0 = k.mul_lo(by, TILE_N);
        Self {
            tid,
            m0,
            n0,
            group,
            pixels,
            first_row,
        }
    }
}

/// The output tensor's rows: `width` channels per group, `stride` channels per pixel.
#[derive(Clone, Copy)]
pub(crate) struct Outputs {
    pub width: u32,
    pub stride: u32,
}

/// One staged row of a tile: its address and its swizzle `s(row)`.
#[derive(Clone, Copy)]
pub(crate) struct SwizzledRow {
    addr: Reg<U32>,
    swizzle: Reg<U32>,
}

impl SwizzledRow {
    /// Row `row` of `tile`: `tile + 128·row`, `s = (row ⊕ ⌊row / 8⌋) mod 8`.
    pub fn new<A: Float>(k: &mut KernelBuilder, tile: SharedArr<A>, row: Reg<U32>) -> Self {
        let high = k.shr(row, 3u32);
        let s = k.xor(row, high);
        let swizzle = k.and(s, GROUPS - 1);
        let base = k.shared_elem(tile, 0u32);
        let addr = k.mad_lo(row, ROW_BYTES, base);
        Self { addr, swizzle }
    }

    /// The address of the row's group `q`: `row + 16·(q ⊕ s)`.
    pub fn group(&self, k: &mut KernelBuilder, q: impl Into<Val<U32>>) -> Reg<U32> {
        let phys = k.xor(self.swizzle, q);
        k.mad_lo(phys, CHUNK_BYTES, self.addr)
    }
}

/// A thread's outputs and its read addresses: `pixel_reads[v]` is group `v ⊕ s(pl)` of pixel
/// row `pl`, `filter_reads[v]` group `v ⊕ ol` of channel row `8·ol`.
pub(crate) struct Lanes {
    /// `pl`: the thread's first pixel within the tile.
    pub pixel_lane: Reg<U32>,
    /// `8·ol`: the thread's first channel within the tile.
    pub first_channel: Reg<U32>,
    pixel_reads: Vec<Reg<U32>>,
    filter_reads: Vec<Reg<U32>>,
    elem_bytes: u32,
}

impl Lanes {
    pub fn new<A: Float>(k: &mut KernelBuilder, block: &Block, tiles: &Tiles<A>) -> Self {
        k.comment("the thread's pixel rows and channel rows, and their swizzled groups");
        let pixel_lane = k.shr(block.tid, CHANNEL_LANES.trailing_zeros());
        let channel_lane = k.and(block.tid, CHANNEL_LANES - 1);
        let first_channel = k.mul_lo(channel_lane, CHANNELS_PER_THREAD);
        let reads = |k: &mut KernelBuilder, tile: SharedArr<A>, row: Reg<U32>| -> Vec<Reg<U32>> {
            let row = SwizzledRow::new(k, tile, row);
            (0..GROUPS).map(|v| row.group(k, v)).collect()
        };
        let pixel_reads = reads(k, tiles.pixels, pixel_lane);
        let filter_reads = reads(k, tiles.filters, first_channel);
        Self {
            pixel_lane,
            first_channel,
            pixel_reads,
            filter_reads,
            elem_bytes: bytes_of::<A>(),
        }
    }
}

/// `acc[i][j]`: pixel `pl + 16i`, channel `8·ol + j`, all zero.
pub(crate) fn zero_accumulators<A: Float>(k: &mut KernelBuilder) -> Vec<Vec<Reg<A>>> {
    (0..PIXELS_PER_THREAD)
        .map(|_| (0..CHANNELS_PER_THREAD).map(|_| k.zero::<A>()).collect())
        .collect()
}

/// One 16-byte group of `A` at `addr + offset`: `ld.shared.v4.f32`, or two `ld.shared.f64`.
fn read_group<A: Float>(k: &mut KernelBuilder, addr: Reg<U32>, offset: u32) -> Vec<Reg<A>> {
    if group_len::<A>() == 4 {
        k.ld_shared_v4::<A>(addr, offset as i32).to_vec()
    } else {
        let step = bytes_of::<A>();
        (0..group_len::<A>())
            .map(|e| k.ld_shared::<A>(addr, (offset + e * step) as i32))
            .collect()
    }
}

/// Stores one 16-byte group of `A` at `addr`.
pub(super) fn write_group<A: Float>(k: &mut KernelBuilder, addr: Reg<U32>, values: &[Reg<A>]) {
    if let [a, b, c, d] = *values {
        k.st_shared_v4::<A>(addr, 0, [a, b, c, d]);
    } else {
        let step = bytes_of::<A>();
        for (e, &v) in values.iter().enumerate() {
            k.st_shared(addr, (e as u32 * step) as i32, v);
        }
    }
}

/// `acc[i][j] += Σ_kk A[pl + 16i, kk] · W[8·ol + j, kk]` over the staged tile, group by
/// group: pixel row `pl + 16i`'s group `q` is `pixel_reads[q ⊕ 2i] + 16·128·i`, channel row
/// `8·ol + j`'s is `filter_reads[q ⊕ j] + 128·j`.
pub(crate) fn multiply<A: Float>(
    k: &mut KernelBuilder,
    depth: u32,
    lanes: &Lanes,
    acc: &[Vec<Reg<A>>],
) {
    k.comment("multiply the staged tiles");
    debug_assert_eq!(lanes.elem_bytes, bytes_of::<A>());
    // A reduction shorter than a tile leaves the groups past it zero: skip them.
    let groups = GROUPS.min(depth.div_ceil(group_len::<A>()));
    for q in 0..groups {
        let pixel_values: Vec<Vec<Reg<A>>> = (0..PIXELS_PER_THREAD)
            .map(|i| {
                let addr = lanes.pixel_reads[(q ^ (2 * i)) as usize];
                read_group::<A>(k, addr, i * PIXEL_LANES * ROW_BYTES)
            })
            .collect();
        for j in 0..CHANNELS_PER_THREAD {
            let addr = lanes.filter_reads[(q ^ j) as usize];
            let filter_values = read_group::<A>(k, addr, j * ROW_BYTES);
            for (row, a) in acc.iter().zip(&pixel_values) {
                let c = row[j as usize];
                for (&av, &wv) in a.iter().zip(&filter_values) {
                    k.fma_into(c, av, wv, c);
                }
            }
        }
    }
}

/// `y[first_row + m, g·W + o] = acc (+ bias[g·W + o])` for the thread's pixels `m < pixels`
/// and channels `o < W` (`W` = [`Outputs::width`]), rounded to the storage type. A pixel's 8
/// channels go out as 16-byte chunks (and the bias comes in as such) when `W` is a multiple
/// of the chunk; one element at a time otherwise.
pub(crate) fn store_outputs<T: VectorElem>(
    k: &mut KernelBuilder,
    out: Outputs,
    block: &Block,
    lanes: &Lanes,
    acc: &[Vec<Reg<T::Acc>>],
    bias: Option<GlobalPtr<T>>,
    y: GlobalPtr<T>,
) {
    k.comment("store the tile (plus bias)");
    let piece = if out.width.is_multiple_of(T::CHUNK) {
        T::CHUNK
    } else {
        1
    };
    let local = k.add(block.n0, lanes.first_channel);
    let group_start = k.mul_lo(block.group, out.width);
    let channel = k.add(group_start, local);
    // Piece `q`: channels `local + piece·q ..`, inside the group when its first one is.
    let pieces: Vec<Pred> = (0..CHANNELS_PER_THREAD / piece)
        .map(|q| {
            let first = k.add(local, q * piece);
            k.setp_lt(first, out.width)
        })
        .collect();
    let biases: Vec<Reg<T::Acc>> = match bias {
        Some(b) => (0..)
            .zip(&pieces)
            .flat_map(|(q, &ok)| {
                let index = k.add(channel, q * piece);
                load_piece::<T>(k, b, index, ok, piece)
            })
            .collect(),
        None => Vec::new(),
    };
    let piece_bytes = piece * bytes_of::<T>();
    for (i, row) in acc.iter().enumerate() {
        let pixel = k.add(block.m0, lanes.pixel_lane);
        let pixel = k.add(pixel, i as u32 * PIXEL_LANES);
        let pixel_ok = k.setp_lt(pixel, block.pixels);
        // One address per pixel, the pieces at immediate offsets: 32 separate 64-bit
        // addresses were hoisted by ptxas above the k-loop when it ran once, and spilled.
        let out_row = match block.first_row {
            Some(first_row) => k.add(first_row, pixel),
            None => pixel,
        };
        let first = k.mad_lo(out_row, out.stride, channel);
        let addr = k.elem_addr(y, first);
        for (q, &channel_ok) in (0u32..).zip(&pieces) {
            let ok = k.and_pred(pixel_ok, channel_ok);
            let offset = q * piece_bytes;
            k.if_then(ok, |k| {
                let values: Vec<Reg<T::Acc>> = (q * piece..(q + 1) * piece)
                    .map(|j| match biases.get(j as usize) {
                        Some(&b) => k.add(row[j as usize], b),
                        None => row[j as usize],
                    })
                    .collect();
                if piece == 1 {
                    let out = T::narrow(k, values[0]);
                    k.st_global(addr, offset as i32, out);
                } else {
                    let words = T::narrow_words(k, &values);
                    store_chunk(k, addr, offset, &words);
                }
            });
        }
    }
}

/// `piece` elements of `ptr` from `index` (0 unless `ok`): one 16-byte chunk, or one element.
fn load_piece<T: VectorElem>(
    k: &mut KernelBuilder,
    ptr: GlobalPtr<T>,
    index: Reg<U32>,
    ok: Pred,
    piece: u32,
) -> Vec<Reg<T::Acc>> {
    if piece == 1 {
        vec![load_or_zero::<T>(k, ptr, index, ok)]
    } else {
        load_chunk_or_zero::<T>(k, ptr, index, ok)
    }
}
