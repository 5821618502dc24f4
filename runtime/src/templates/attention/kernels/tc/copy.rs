//! Asynchronous tile copies: rows of Q, K and V go global → shared by 16-byte `cp.async`
//! chunks, zero-filled past the sequence end, into the padded rows of [`TcPlan`].

use super::super::plan::{HeadOffsets, Params};
use super::elem::TcElem;
use super::plan::TcPlan;
use crate::builder::{KernelBuilder, Pred, Reg, F32, U32, U64};
use crate::ir::CacheLevel;

/// One round of this thread's chunks of a tile: chunk `c = tid + i · threads` of a
/// `rows × D` tile sits at row `c / C`, column `E · (c mod C)` (`E` elements per 16-byte chunk,
/// `C = D / E` chunks per row). When `C` divides
/// the thread count (every head_dim but 96) all rounds share round 0's registers and differ by
/// constants, so the copy geometry costs three registers for the whole kernel.
#[derive(Debug, Clone, Copy)]
pub(super) struct ChunkPlace {
    row: Reg<U32>,
    col: Reg<U32>,
    /// Byte offset of the chunk in the padded shared tile.
    shared_offset: Reg<U32>,
    /// Constant rows and bytes added to `row` and `shared_offset`.
    row_delta: u32,
    offset_delta: u32,
    /// `c < rows · D / 8` when the last round of chunks does not fill the block.
    in_tile: Option<Pred>,
}

/// This thread's chunk rounds of a tile of `rows` rows.
pub(super) fn chunk_places(
    k: &mut KernelBuilder,
    plan: &TcPlan,
    tid: Reg<U32>,
    rows: u32,
) -> Vec<ChunkPlace> {
    let per_row = plan.chunks_per_row();
    let total = rows * per_row;
    let threads = plan.threads;
    let place = |k: &mut KernelBuilder, c: Reg<U32>| {
        let row = k.div_int(c, per_row);
        let chunk = k.rem(c, per_row);
        let col = k.shl(chunk, plan.chunk_elems().trailing_zeros());
        let chunk_bytes = k.shl(chunk, 4u32);
        let shared_offset = k.mad_lo(row, plan.row_bytes(), chunk_bytes);
        (row, col, shared_offset)
    };
    let uniform = threads.is_multiple_of(per_row);
    let first = place(k, tid);
    (0..total.div_ceil(threads))
        .map(|i| {
            let c = k.add(tid, i * threads);
            let in_tile = ((i + 1) * threads > total).then(|| k.setp_lt(c, total));
            let ((row, col, shared_offset), row_delta) = if uniform {
                (first, i * threads / per_row)
            } else {
                (place(k, c), 0)
            };
            ChunkPlace {
                row,
                col,
                shared_offset,
                row_delta,
                offset_delta: row_delta * plan.row_bytes(),
                in_tile,
            }
        })
        .collect()
}

/// One tensor's head: row `r`, column `col` is element `r · seq_stride + col` past `head`.
#[derive(Debug, Clone, Copy)]
pub(super) struct RowSource {
    pub head: Reg<U64>,
    pub seq_stride: Reg<U32>,
    /// Bytes of one element.
    pub elem_bytes: u32,
}

/// Issues the copies of one tile from each `(source, shared destination)` pair, sharing the
/// chunk geometry (K and V tiles move together):
///
/// ```text
/// dst[row, col .. col + E] = src[first_row + row, col .. col + E]   first_row + row < rows
/// dst[row, col .. col + E] = 0                                       otherwise (src-size 0)
/// ```
///
/// A chunk past the end reads from the head's first element, so no lane forms an address
/// outside the tensor.
pub(super) fn copy_tile_async(
    k: &mut KernelBuilder,
    chunks: &[ChunkPlace],
    first_row: Reg<U32>,
    rows: Reg<U32>,
    pairs: &[(RowSource, Reg<U32>)],
) {
    for c in chunks {
        let copy = |k: &mut KernelBuilder| {
            let global_row = k.add(first_row, c.row);
            let global_row = k.add(global_row, c.row_delta);
            let ok = k.setp_lt(global_row, rows);
            let bytes = k.selp(16u32, 0u32, ok);
            for (src, dst) in pairs {
                let elem = k.mad_lo(global_row, src.seq_stride, c.col);
                let elem = k.selp(elem, 0u32, ok);
                let offset = k.mul_wide(elem, src.elem_bytes);
                let from = k.add(src.head, offset);
                let to = k.add(*dst, c.shared_offset);
                let to = k.add(to, c.offset_delta);
                k.cp_async_zfill(CacheLevel::Cg, to, from, 16, bytes);
            }
        };
        match c.in_tile {
            Some(p) => k.if_then(p, copy),
            None => copy(k),
        }
    }
}

/// The Q tile of the block: rows `tile_start ..` of the query head into the Q region.
pub(super) fn copy_q_tile<T: TcElem>(
    k: &mut KernelBuilder,
    chunks: &[ChunkPlace],
    p: &Params<T, F32>,
    heads: &HeadOffsets,
    tile_start: Reg<U32>,
    shared: Reg<U32>,
) {
    k.comment("Q tile: cp.async to shared (zero past Sq)");
    let src = RowSource {
        head: k.elem_addr(p.q, heads.q_start),
        seq_stride: p.q_layout.seq(k),
        elem_bytes: T::BYTES,
    };
    copy_tile_async(k, chunks, tile_start, p.seq_q, &[(src, shared)]);
}

/// KV tile `tile` (keys `tile · block_n ..`) into ring slot `tile mod kv_stages` of K and V.
pub(super) fn copy_kv_tile<T: TcElem>(
    k: &mut KernelBuilder,
    plan: &TcPlan,
    chunks: &[ChunkPlace],
    p: &Params<T, F32>,
    heads: &HeadOffsets,
    shared: Reg<U32>,
    tile: Reg<U32>,
) {
    k.comment("K and V tiles: cp.async into the free ring slot (zero past Skv)");
    let kv0 = k.mul_lo(tile, plan.block_n);
    let slot = plan.kv_slot(k, tile);
    let slot_base = k.mad_lo(slot, plan.kv_tile_bytes(), shared);
    let k_dst = k.add(slot_base, plan.k_ring());
    let v_dst = k.add(slot_base, plan.v_ring());
    let (k_seq, v_seq) = (p.k_layout.seq(k), p.v_layout.seq(k));
    let source = |head, seq_stride| RowSource {
        head,
        seq_stride,
        elem_bytes: T::BYTES,
    };
    let pairs = [
        (source(heads.k_head, k_seq), k_dst),
        (source(heads.v_head, v_seq), v_dst),
    ];
    copy_tile_async(k, chunks, kv0, p.seq_kv, &pairs);
}

/// One tensor's part of [`KvStreams`].
#[derive(Debug, Clone, Copy)]
struct Stream {
    /// Global address of this thread's round-0 chunk in key row 0 of the head.
    lane: Reg<U64>,
    /// Bytes from one round's chunk to the next: `threads / C` rows.
    round: Reg<U64>,
    /// Elements from one KV tile to the next: `block_n` rows.
    tile_elems: Reg<U32>,
}

/// This thread's K and V sources for whole KV tiles, set up once per kernel. When `C` divides
/// the thread count every chunk round shares round 0's registers ([`ChunkPlace`]), so the round
/// `i` chunk of tile `t` sits at `lane + t · tile_elems · E_bytes + i · round`: a whole tile
/// costs one pointer per tensor, then one add and one `cp.async` per round (the general
/// [`copy_kv_tile`] spends a bounds check, a row and an address per chunk).
#[derive(Debug, Clone, Copy)]
pub(super) struct KvStreams {
    k: Stream,
    v: Stream,
    /// KV tiles entirely below `Skv` (`⌊Skv / block_n⌋`): the tiles the streams may copy.
    pub full_tiles: Reg<U32>,
}

impl KvStreams {
    /// The streams, or `None` when the chunk rounds do not share registers (`D = 96`).
    pub fn new<T: TcElem>(
        k: &mut KernelBuilder,
        plan: &TcPlan,
        chunks: &[ChunkPlace],
        p: &Params<T, F32>,
        heads: &HeadOffsets,
    ) -> Option<Self> {
        let per_row = plan.chunks_per_row();
        if !plan.threads.is_multiple_of(per_row) {
            return None;
        }
        let first = chunks.first()?;
        let rows_per_round = plan.threads / per_row;
        let stream = |k: &mut KernelBuilder, head: Reg<U64>, seq_stride: Reg<U32>| {
            let elem = k.mad_lo(first.row, seq_stride, first.col);
            let offset = k.mul_wide(elem, T::BYTES);
            let round_elems = k.mul_lo(seq_stride, rows_per_round);
            Stream {
                lane: k.add(head, offset),
                round: k.mul_wide(round_elems, T::BYTES),
                tile_elems: k.mul_lo(seq_stride, plan.block_n),
            }
        };
        let k_seq = p.k_layout.seq(k);
        let k_stream = stream(k, heads.k_head, k_seq);
        let v_seq = p.v_layout.seq(k);
        let v_stream = stream(k, heads.v_head, v_seq);
        Some(Self {
            k: k_stream,
            v: v_stream,
            full_tiles: k.shr(p.seq_kv, plan.block_n.trailing_zeros()),
        })
    }
}

/// KV tile `tile` (`tile < full_tiles`: no key past `Skv`) into ring slot `tile mod kv_stages`
/// of K and V from the [`KvStreams`]: the same bytes as [`copy_kv_tile`], without its checks.
pub(super) fn copy_full_kv_tile<T: TcElem>(
    k: &mut KernelBuilder,
    plan: &TcPlan,
    chunks: &[ChunkPlace],
    streams: &KvStreams,
    shared: Reg<U32>,
    tile: Reg<U32>,
) {
    k.comment("K and V tiles below Skv: cp.async from the streams into the free ring slot");
    let slot = plan.kv_slot(k, tile);
    let slot_base = k.mad_lo(slot, plan.kv_tile_bytes(), shared);
    let lane_dst = k.add(slot_base, chunks[0].shared_offset);
    for (stream, ring) in [(streams.k, plan.k_ring()), (streams.v, plan.v_ring())] {
        let elems = k.mul_lo(tile, stream.tile_elems);
        let offset = k.mul_wide(elems, T::BYTES);
        let mut src = k.add(stream.lane, offset);
        for (i, c) in chunks.iter().enumerate() {
            if i > 0 {
                src = k.add(src, stream.round);
            }
            let dst_offset = (ring + c.offset_delta) as i32;
            let copy = |k: &mut KernelBuilder| {
                k.cp_async_at(CacheLevel::Cg, lane_dst, dst_offset, src, 16);
            };
            match c.in_tile {
                Some(p) => k.if_then(p, copy),
                None => copy(k),
            }
        }
    }
}

/// KV tile `tile`: from the streams when it lies below `Skv`, else by [`copy_kv_tile`]
/// (zero-filled past `Skv`). The choice is the same in every thread of the block.
#[allow(clippy::too_many_arguments)]
pub(super) fn copy_kv_tile_fast<T: TcElem>(
    k: &mut KernelBuilder,
    plan: &TcPlan,
    chunks: &[ChunkPlace],
    streams: Option<&KvStreams>,
    p: &Params<T, F32>,
    heads: &HeadOffsets,
    shared: Reg<U32>,
    tile: Reg<U32>,
) {
    match streams {
        Some(streams) => {
            let full = k.setp_lt(tile, streams.full_tiles);
            k.if_else(
                full,
                |k| copy_full_kv_tile::<T>(k, plan, chunks, streams, shared, tile),
                |k| copy_kv_tile(k, plan, chunks, p, heads, shared, tile),
            );
        }
        None => copy_kv_tile(k, plan, chunks, p, heads, shared, tile),
    }
}

/// Flips the sign of every Q element this thread copied (its chunks of the Q tile, after its
/// own `cp.async` group has landed and before the barrier that publishes the tile): `Q·Kᵀ` then
/// carries the scale's sign, and the softmax scales by `|scale|` ([`super::scores`]).
pub(super) fn negate_q_tile<T: TcElem>(
    k: &mut KernelBuilder,
    chunks: &[ChunkPlace],
    shared: Reg<U32>,
) {
    k.comment("negative scale: Q <- -Q (sign bits of this thread's chunks)");
    for c in chunks {
        let flip = |k: &mut KernelBuilder| {
            let at = k.add(shared, c.shared_offset);
            let offset = c.offset_delta as i32;
            let words = k.ld_shared_v4::<U32>(at, offset);
            let flipped = words.map(|w| k.xor(w, T::SIGN_BITS));
            k.st_shared_v4(at, offset, flipped);
        };
        match c.in_tile {
            Some(p) => k.if_then(p, flip),
            None => flip(k),
        }
    }
}
