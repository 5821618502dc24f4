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
