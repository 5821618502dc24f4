//! Asynchronous tile copies: rows of Q, K and V go global → shared by 16-byte `cp.async`
//! chunks, zero-filled past the sequence end, into the padded rows of [`TcPlan`].

use super::super::plan::{HeadOffsets, Params};
use super::elem::TcElem;
use super::plan::TcPlan;
use crate::builder::{KernelBuilder, Pred, Reg, F32, U32, U64};
use crate::ir::CacheLevel;

/// One round of this thread's chunks of a tile of `C = D / E` 16-byte chunks per row (`E`
/// elements per chunk): a round copies `R` whole rows ([`Round`]), thread `t` the chunk
/// [`deal`] gives it, so every round's chunk is round 0's `i · R` rows on: all rounds share
/// round 0's registers and differ by constants, and the copy geometry costs three registers for
/// the whole kernel.
#[derive(Debug, Clone, Copy)]
pub(super) struct ChunkPlace {
    row: Reg<U32>,
    col: Reg<U32>,
    /// Byte offset of the chunk in the padded shared tile.
    shared_offset: Reg<U32>,
    /// Constant rows and bytes added to `row` and `shared_offset`.
    row_delta: u32,
    offset_delta: u32,
    /// Whether this thread has a chunk in the round, when some thread has none (threads past
    /// `R · C`, rows past the tile in its last round).
    in_tile: Option<Pred>,
}

/// How one round deals its chunks ([`deal`]).
#[derive(Debug, Clone, Copy)]
struct Round {
    /// Rows `R` it covers.
    rows: u32,
    /// Whether the last four chunks of rows `r` and `r + 4` share a quarter-warp.
    paired_tails: bool,
}

impl Round {
    /// As many rows as the threads allow; a multiple of 8 when `C ≡ 4 (mod 8)` and the threads
    /// cover 8 rows (the paired deal), else row-major.
    fn new(per_row: u32, threads: u32) -> Self {
        let rows = threads / per_row;
        assert!(
            rows > 0,
            "{threads} threads cannot deal whole rows of {per_row} chunks"
        );
        if per_row % 8 == 4 && rows >= 8 {
            Self {
                rows: rows / 8 * 8,
                paired_tails: true,
            }
        } else {
            Self {
                rows,
                paired_tails: false,
            }
        }
    }
}

/// Thread `t`'s `(row, chunk)` in round 0 (`R` rows of `C` chunks), dealt so that each
/// quarter-warp's 16-byte shared writes (one phase of `cp.async`, `ld/st.shared.v4`) are
/// conflict-free. A padded row is `C + 1` four-bank groups long, so chunk `(r, j)` starts in
/// group `(r·(C + 1) + j) mod 8`. `C` is 4, 8, 12, 16, 24, 32 or 64 (`D` ∈ {32, 64, 96, 128,
/// 256} in 2 or 4 bytes): each row's first `8·⌊C / 8⌋` chunks are dealt row-major, eight
/// consecutive chunks of one row per quarter-warp (eight groups); when `C ≡ 4 (mod 8)`, the
/// last four chunks of rows `r` and `r + 4` (within each 8 rows) go to one quarter-warp, their
/// groups `4·(C + 1) ≡ 4 (mod 8)` apart, so disjoint. Dealt row-major instead, a quarter-warp
/// straddling two rows would put two chunks in one group (`D = 96` halves measured 1.333
/// wavefronts per fewest, `D = 32` 2.000); blocks of fewer than `8 · C` threads keep it.
/// Threads past `R · C` get a row past `R`.
fn deal(k: &mut KernelBuilder, tid: Reg<U32>, per_row: u32, round: Round) -> (Reg<U32>, Reg<U32>) {
    let heads = per_row / 8 * 8;
    if !round.paired_tails {
        return (k.div_int(tid, per_row), k.rem(tid, per_row));
    }
    assert_eq!(per_row - heads, 4, "rows are whole 64-byte runs");
    let dealt_heads = round.rows * heads;
    let tail = k.sub(tid, dealt_heads);
    let quarter = k.shr(tail, 3u32);
    let in_quarter = k.and(tail, 7u32);
    let eight = k.shr(quarter, 2u32);
    let pair = k.and(quarter, 3u32);
    let lower = k.mad_lo(eight, 8u32, pair);
    let second = k.shr(in_quarter, 2u32);
    let tail_row = k.mad_lo(second, 4u32, lower);
    let tail_chunk = k.and(in_quarter, 3u32);
    let tail_chunk = k.add(tail_chunk, heads);
    if heads == 0 {
        return (tail_row, tail_chunk);
    }
    let head = k.setp_lt(tid, dealt_heads);
    let head_row = k.div_int(tid, heads);
    let head_chunk = k.rem(tid, heads);
    (
        k.selp(head_row, tail_row, head),
        k.selp(head_chunk, tail_chunk, head),
    )
}

/// This thread's chunk rounds of a tile of `rows` rows.
pub(super) fn chunk_places(
    k: &mut KernelBuilder,
    plan: &TcPlan,
    tid: Reg<U32>,
    rows: u32,
) -> Vec<ChunkPlace> {
    let per_row = plan.chunks_per_row();
    let threads = plan.threads;
    let round = Round::new(per_row, threads);
    let rows_per_round = round.rows;
    let idle = rows_per_round * per_row < threads;
    let (row, chunk) = deal(k, tid, per_row, round);
    let col = k.shl(chunk, plan.chunk_elems().trailing_zeros());
    let chunk_bytes = k.shl(chunk, 4u32);
    let shared_offset = k.mad_lo(row, plan.row_bytes(), chunk_bytes);
    (0..rows.div_ceil(rows_per_round))
        .map(|i| {
            let row_delta = i * rows_per_round;
            // Round 0's rows below this bound have a chunk in round `i`.
            let bound = rows_per_round.min(rows - row_delta);
            let in_tile = (idle || bound < rows_per_round).then(|| k.setp_lt(row, bound));
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
    /// Bytes from one round's chunk to the next: `R` rows ([`Round`]).
    round: Reg<U64>,
    /// Elements from one KV tile to the next: `block_n` rows.
    tile_elems: Reg<U32>,
}

/// This thread's K and V sources for whole KV tiles, set up once per kernel. Every chunk round
/// shares round 0's registers ([`ChunkPlace`]), so the round
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
    /// The streams of the kernel's K and V heads.
    pub fn new<T: TcElem>(
        k: &mut KernelBuilder,
        plan: &TcPlan,
        chunks: &[ChunkPlace],
        p: &Params<T, F32>,
        heads: &HeadOffsets,
    ) -> Self {
        let first = chunks.first().expect("a tile has chunks");
        let rows_per_round = Round::new(plan.chunks_per_row(), plan.threads).rows;
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
        Self {
            k: k_stream,
            v: v_stream,
            full_tiles: k.shr(p.seq_kv, plan.block_n.trailing_zeros()),
        }
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
    streams: &KvStreams,
    p: &Params<T, F32>,
    heads: &HeadOffsets,
    shared: Reg<U32>,
    tile: Reg<U32>,
) {
    let full = k.setp_lt(tile, streams.full_tiles);
    k.if_else(
        full,
        |k| copy_full_kv_tile::<T>(k, plan, chunks, streams, shared, tile),
        |k| copy_kv_tile(k, plan, chunks, p, heads, shared, tile),
    );
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
