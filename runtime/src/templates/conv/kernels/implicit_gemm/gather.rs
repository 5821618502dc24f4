//! How the [`THREADS`] threads fill one ring slot of an operand tile ([`TILE_M`] rows ×
//! `K = T::TILE_K` reduction indices: 32 halves or 16 f32; [`Strategy::Chunks`] also the
//! 128-row A tiles of [`Geometry::TALL`]), chosen per operand so that a warp's global
//! requests cover whole 32-byte sectors. `E = 64·K / 128` (16 halves or 8 f32) is each
//! thread's share of a 64-row tile.
//!
//! - [`Gather::Chunks`]: 16-byte `cp.async` of one chunk (8 halves or 4 f32) of consecutive
//!   reduction indices of one row (zero-filled, `src-size 0`, outside the problem or in the
//!   padding), where those elements are contiguous and 16-byte aligned in global memory; the
//!   warp_mma piece assignment of the block's geometry ([`Geometry::piece_slot_bytes`]:
//!   the only gather that also fills the 128-row A tiles of [`Geometry::TALL`]).
//! - [`Gather::ChunksByK`] (halves; NHWC operands whose tile rows are contiguous
//!   channels: backward-filter's `gy` and `x`, backward-data's weight), the stage staged
//!   by reduction index ([`Staging::ByK`], `[k][row]`): 16-byte `cp.async` of 8
//!   consecutive tile rows (channels) at one reduction index (pixel, or weight tap),
//!   zero-filled outside; each thread's two chunks share one reduction index
//!   ([`tile::by_k_chunks`]), so it locates that pixel (its window, for `x`) once per tile.
//! - [`Gather::Rows`]: lane → row. Thread `t` owns row `t mod 64` and reduction indices
//!   `E·⌊t / 64⌋ ..+ E`; one warp request is 32 consecutive rows at one index, consecutive
//!   addresses where rows are pixels along `ow` (NCHW windows, backward-data's `gy`). The
//!   thread's `E` elements (32 bytes of its row) are packed into words and stored 16 bytes
//!   at a time (`st.shared.v4.b32`): the 8 lanes of a quarter-warp phase hit 8 consecutive
//!   80-byte (20-word) rows, whose 4-word pieces fall in 8 disjoint groups of banks.
//! - [`Strategy::Windows`] (NCHW operands read along input-like rows without dilation
//!   along `w`, `KW` > 1: forward A and backward-filter B at stride 1 or 2 along `w`,
//!   backward-data A at any stride for halves and at stride 1 for f32): lane → pixel,
//!   each `(channel, kh)` row the warp (f32 backward-filter: half-warp) needs read once as
//!   a run of whole sectors, two elements per lane, and each lane taking its taps from it
//!   with `shfl.sync.idx` (at stride 2 each lane loads one unit of two elements of its
//!   output row's run and takes the lower ones from its left neighbours with
//!   `shfl.sync.up`) ([`super::window`]).
//! - [`Gather::Columns`]: lane → reduction index. Thread `t` owns index `t mod K` and rows
//!   `r₀ + (128 / K)·e`; one warp request is 32 (halves) or twice 16 (f32) consecutive
//!   indices of a row, consecutive addresses where the reduction runs along memory (weight
//!   rows, backward-filter's pixels). For halves `r₀` is the warp; for f32 a warp's two
//!   half-warps take rows 4 apart (`r₀ = warp + 4·half`), 80 words ≡ 16 banks apart, so
//!   their 16-word pieces share no bank (adjacent rows, 20 words apart, would share 4).
//! - [`Gather::Slabs`] (backward-data's B, `KH·KW` > 1 and not a multiple of the chunk): lane
//!   → consecutive `(c, kh, kw)` of one filter slab `w[g·Og + o, block_n.., .., ..]`, which is
//!   contiguous; thread `t` owns slab offsets `q = t + 128·i`, i.e. row `c = q / (KH·KW)`
//!   and tap `q mod (KH·KW)`. Each tile loads the whole slabs of the filters that start in
//!   it, so a warp request is a run of 32 slab elements (whole sectors), and stores the taps
//!   inside the tile; the taps past the tile's end wait in registers (`carry`) for the next
//!   tile, which the same thread fills next (the ring fills tiles in order). Every slab
//!   element is loaded once and every tile element stored once. In f32 the stage is in slab
//!   order where that fits ([`super::slab_tile`]: 2, 3, 6 or 9 taps), so each store's 32
//!   lanes hit 32 banks; halves and other tap counts store into the padded rows.
//!
//! Element gathers load the element's raw bits ([`TileElem::Bits`]: 16- or 32-bit words)
//! under their predicate (0 outside) and store them into the slot, which is free because
//! every thread has passed the barrier after its last use.

use super::super::common::{div_const, rem_const, ConvElem};
use super::addressing::{Coord, Side};
use super::slab_tile::SlabTile;
use super::window::WindowLane;
use super::Conv;
use crate::builder::{GlobalPtr, KernelBuilder, Pred, Reg, Scalar, Val, U32};
use crate::ir::{CacheLevel, Imm};
use crate::templates::warp_mma::{
    self as tile, Geometry, Staging, TileElem, CHUNK_BYTES, ROW_BYTES, THREADS, TILE_M, TILE_N,
};
use std::marker::PhantomData;

/// Threads per warp.
const WARP: u32 = 32;

const _: () = assert!(TILE_M == TILE_N && TILE_M == 2 * WARP && THREADS == 2 * TILE_M);

/// Which thread assignment an operand uses (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Strategy {
    Chunks,
    ChunksByK,
    Rows,
    Columns,
    Slabs,
    Windows,
}

impl Strategy {
    /// How the operand's stage holds its tile: `[k][row]` for [`Strategy::ChunksByK`],
    /// `[row][k]` for every other.
    pub(super) fn staging(self) -> Staging {
        match self {
            Strategy::ChunksByK => Staging::ByK,
            _ => Staging::ByRow,
        }
    }
}

/// A thread's share of one operand slot, with what stays fixed along the reduction (`B`: the
/// elements' raw bits).
pub(super) enum Gather<B: Scalar> {
    /// `(row, first column, byte offset in the stage)` per chunk.
    Chunks(Vec<(Coord, Reg<U32>, Reg<U32>)>),
    /// The thread's reduction row, and per chunk `(the first of its 8 tile rows, byte offset
    /// in the stage)`.
    ChunksByK {
        k_row: Reg<U32>,
        chunks: Vec<(Coord, Reg<U32>)>,
    },
    /// The owned row, its first loaded column and the byte offset of the `E` columns it
    /// stores.
    Rows {
        row: Coord,
        col0: Reg<U32>,
        slot_bytes: Reg<U32>,
    },
    /// The owned column, the first row and the byte offset of the first store.
    Columns {
        lane: Reg<U32>,
        row0: Reg<U32>,
        slot_bytes: Reg<U32>,
    },
    /// The thread's first slab offset `(block_n·KH·KW + t)`, and its elements of the filter
    /// the last filled tile cut, kept for the next tile; `Some` where the stage is in slab
    /// order ([`SlabTile`], f32), with the thread's byte offset `4·t` in it.
    Slabs {
        first: Reg<U32>,
        tid: Reg<U32>,
        carry: Vec<Reg<B>>,
        staged: Option<(SlabTile, Reg<U32>)>,
    },
    /// [`Strategy::Windows`] ([`super::window`]).
    Windows(WindowLane),
}

/// One operand: where it comes from, its ring and the thread's share.
pub(super) struct Operand<T: TileElem> {
    pub side: Side,
    pub src: GlobalPtr<T>,
    pub gather: Gather<T::Bits>,
    pub staging: Staging,
}

impl<T: ConvElem + TileElem> Conv<T> {
    /// Elements of one operand slot each thread moves (16 halves or 8 f32).
    pub(super) const ELEMS_PER_THREAD: u32 = TILE_M * T::TILE_K / THREADS;
    /// The row step of [`Gather::Columns`]: rows one block request covers (4 for halves, 8
    /// for f32).
    const COLUMN_ROWS: u32 = THREADS / T::TILE_K;
    /// Padded shared row length in elements.
    pub(super) const ROW: u32 = ROW_BYTES / T::TYPE.bytes();

    /// The thread's share of `side` under `strategy`; row coordinates fixed for the whole
    /// reduction are computed here once.
    pub(super) fn gather(
        &self,
        k: &mut KernelBuilder,
        tid: Reg<U32>,
        side: Side,
        strategy: Strategy,
    ) -> Gather<T::Bits> {
        let bytes = T::TYPE.bytes();
        let g = self.geometry;
        // Only the chunk gathers are dealt by the geometry; the others assume 64-row tiles
        // of 128 threads ([`super::tile_geometry`]).
        assert!(
            g == Geometry::SQUARE || matches!(strategy, Strategy::Chunks | Strategy::ChunksByK),
            "{strategy:?} gathers fill 64-row tiles"
        );
        match strategy {
            Strategy::Chunks => Gather::Chunks(
                (0..g.pieces_per_thread(g.rows(side), CHUNK_BYTES))
                    .map(|i| {
                        // Quarter-warp chunk columns: the gathered chunks are stored with
                        // `st.shared.v4`, conflict-free per quarter-warp only that way.
                        let piece = (tid, i);
                        let (row, col, slot_bytes) =
                            g.piece_slot_bytes(k, piece, bytes, CHUNK_BYTES);
                        (self.row_coord(k, side, row), col, slot_bytes)
                    })
                    .collect(),
            ),
            Strategy::ChunksByK => {
                assert_eq!(g.threads(), THREADS, "by_k_chunks deals 128 threads");
                let tile::ByKChunks { k_row, chunks } = tile::by_k_chunks(k, tid, g.rows(side));
                let chunks = chunks
                    .into_iter()
                    .map(|(first_row, slot_bytes)| (self.row_coord(k, side, first_row), slot_bytes))
                    .collect();
                Gather::ChunksByK { k_row, chunks }
            }
            Strategy::Rows => {
                let row = k.and(tid, TILE_M - 1);
                let part = k.shr(tid, TILE_M.trailing_zeros());
                let col0 = k.mul_lo(part, Self::ELEMS_PER_THREAD);
                let slot = k.mad_lo(row, Self::ROW, col0);
                Gather::Rows {
                    row: self.row_coord(k, side, row),
                    col0,
                    slot_bytes: k.mul_lo(slot, bytes),
                }
            }
            Strategy::Columns => {
                let (lane, row0) = self.column_owner(k, tid);
                let slot = k.mad_lo(row0, Self::ROW, lane);
                Gather::Columns {
                    lane,
                    row0,
                    slot_bytes: k.mul_lo(slot, bytes),
                }
            }
            Strategy::Windows => Gather::Windows(self.window_lane(k, tid)),
            Strategy::Slabs => Gather::Slabs {
                first: k.mad_lo(self.block_n, self.p.taps, tid),
                tid,
                carry: (0..Self::slab_parts(self.p.taps))
                    .map(|_| k.var::<T::Bits>(zero()))
                    .collect(),
                staged: self.slab_tile().map(|tile| (tile, k.mul_lo(tid, bytes))),
            },
        }
    }

    /// [`Strategy::Columns`]: thread `t`'s column `t mod K` and first row (the warp; for f32
    /// `warp + 4·half`).
    fn column_owner(&self, k: &mut KernelBuilder, tid: Reg<U32>) -> (Reg<U32>, Reg<U32>) {
        let lane = k.and(tid, T::TILE_K - 1);
        let warp = k.shr(tid, WARP.trailing_zeros());
        let row0 = match WARP / T::TILE_K {
            1 => warp,
            rows_per_warp => {
                let sub = k.shr(tid, T::TILE_K.trailing_zeros());
                let sub = k.and(sub, rows_per_warp - 1);
                k.mad_lo(sub, THREADS / WARP, warp)
            }
        };
        (lane, row0)
    }

    /// Fills ring slot `slot` with reduction tile `k_tile` of both operands.
    pub(super) fn fill(&self, k: &mut KernelBuilder, k_tile: Reg<U32>, slot: Reg<U32>) {
        let k0 = k.mul_lo(k_tile, T::TILE_K);
        for op in [&self.a, &self.b] {
            self.fill_operand(k, op, k0, slot);
        }
    }

    fn fill_operand(&self, k: &mut KernelBuilder, op: &Operand<T>, k0: Reg<U32>, slot: Reg<U32>) {
        let bytes = T::TYPE.bytes();
        let stage = self.rings.stage(k, op.side, slot);
        let bits = k.cast_ptr::<T, T::Bits>(op.src);
        match &op.gather {
            Gather::Chunks(chunks) => {
                for (row, col, slot_bytes) in chunks {
                    let first = k.add(k0, *col);
                    let col = self.column_coord(k, op.side, first);
                    self.copy_chunk(k, op, (row, &col), stage, *slot_bytes);
                }
            }
            Gather::ChunksByK { k_row, chunks } => {
                let kk = k.add(k0, *k_row);
                let col = self.column_coord(k, op.side, kk);
                for (row, slot_bytes) in chunks {
                    self.copy_chunk(k, op, (row, &col), stage, *slot_bytes);
                }
            }
            Gather::Rows {
                row,
                col0,
                slot_bytes,
            } => {
                let first = k.add(k0, *col0);
                let elems = self.load_row(k, op.side, bits, row, first);
                let words = pack_words(k, &elems);
                let dst = k.add(stage, *slot_bytes);
                store_words(k, dst, &words);
            }
            Gather::Columns {
                lane,
                row0,
                slot_bytes,
            } => {
                let kk = k.add(k0, *lane);
                let col = self.column_coord(k, op.side, kk);
                let dst = k.add(stage, *slot_bytes);
                let row_bytes = Self::ROW * bytes;
                for e in 0..Self::ELEMS_PER_THREAD {
                    let r = k.add(*row0, e * Self::COLUMN_ROWS);
                    let row = self.row_coord(k, op.side, r);
                    let (index, ok) = self.element(k, op.side, &row, &col);
                    let v = load_bits(k, bits, index, ok);
                    k.st_shared(dst, (e * Self::COLUMN_ROWS * row_bytes) as i32, v);
                }
            }
            Gather::Slabs {
                first,
                tid,
                carry,
                staged,
            } => self.fill_slabs(k, bits, (stage, k0), (*first, *tid), carry, *staged),
            Gather::Windows(lane) => self.fill_windows(k, op, (stage, k0), lane),
        }
    }

    /// One 16-byte `cp.async` of the chunk at `(row, col)` of `op` to `stage + slot_bytes`
    /// (zero-filled outside the problem).
    fn copy_chunk(
        &self,
        k: &mut KernelBuilder,
        op: &Operand<T>,
        (row, col): (&Coord, &Coord),
        stage: Reg<U32>,
        slot_bytes: Reg<U32>,
    ) {
        let (index, ok) = self.element(k, op.side, row, col);
        let index = k.selp(index, 0u32, ok);
        let addr = k.elem_addr(op.src, index);
        let src_bytes = k.selp(16u32, 0u32, ok);
        let dst = k.add(stage, slot_bytes);
        k.cp_async_zfill(CacheLevel::Cg, dst, addr, 16, src_bytes);
    }

    /// The `E` elements of tile row `row` at reduction indices `first + e` (0 outside).
    fn load_row(
        &self,
        k: &mut KernelBuilder,
        side: Side,
        bits: GlobalPtr<T::Bits>,
        row: &Coord,
        first: Reg<U32>,
    ) -> Vec<Reg<T::Bits>> {
        (0..Self::ELEMS_PER_THREAD)
            .map(|e| {
                let kk = k.add(first, e);
                let col = self.column_coord(k, side, kk);
                let (index, ok) = self.element(k, side, row, &col);
                load_bits(k, bits, index, ok)
            })
            .collect()
    }

    /// Slab offsets each thread owns in [`Gather::Slabs`]: `⌈64·KH·KW / 128⌉`.
    fn slab_parts(taps: u32) -> u32 {
        (TILE_N * taps).div_ceil(THREADS)
    }

    /// [`Gather::Slabs`]: with `taps = KH·KW` (at most `K`, so a filter spans at most two
    /// tiles), reduction tile `k0..k0 + K` holds the filters that start in it, `o =
    /// ⌈k0 / taps⌉ + s` for `s < ⌈K / taps⌉` (column `o·taps − k0 < K`), and the tail of
    /// the one before, which the previous tile cut. Slab offset `q` of filter `o` is
    /// `w[(g·Og + o)·Cg·taps + block_n·taps + q]` (the thread's `first + 128·i +
    /// s·Cg·taps`: one address per tile, immediate offsets), tile row `q / taps`, column
    /// `o·taps + q mod taps − k0`. Each thread loads every slab element it owns once (0 where
    /// `o ≥ Og` or the row `≥ Cg`), stores the taps inside the tile and keeps those of the
    /// filter that crosses the tile's end in `carry` for the next fill, which stores them:
    /// the ring fills tiles in order, and a warp's loads are whole slab runs.
    ///
    /// Where the stage is in slab order ([`SlabTile`]) the element of filter `s` (`−1` for
    /// the cut one) lands at byte `4·(q + col0) + 4·(taps + 64·taps)·s` plus one run
    /// (`4·64·taps`) where `col0 + tap ≥ taps` ([`SlabTile::filter_bytes`],
    /// [`SlabTile::run_bytes`]): one base per part, immediate offsets per filter.
    fn fill_slabs(
        &self,
        k: &mut KernelBuilder,
        bits: GlobalPtr<T::Bits>,
        (stage, k0): (Reg<U32>, Reg<U32>),
        (first, tid): (Reg<U32>, Reg<U32>),
        carry: &[Reg<T::Bits>],
        staged: Option<(SlabTile, Reg<U32>)>,
    ) {
        let p = &self.p;
        let bytes = T::TYPE.bytes();
        let slab = p.cg * p.taps;
        let last = k.add(k0, p.taps - 1);
        let o_first = div_const(k, last, p.taps);
        let filter = k.mad_lo(self.group, p.og, o_first);
        let start = k.mad_lo(filter, slab, first);
        let src = k.elem_addr(bits, start);
        // Column of tap 0 of filter `o_first` (in `0..taps`).
        let col0 = k.mul_lo(o_first, p.taps);
        let col0 = k.sub(col0, k0);
        // Slab order: the thread's element of filter `o_first` at word `q + col0` (part 0),
        // and one run further.
        let staged = staged.map(|(tile, tid_bytes)| {
            let at = k.mad_lo(col0, bytes, stage);
            let at = k.add(at, tid_bytes);
            let next_run = k.add(at, tile.run_bytes());
            (tile, at, next_run)
        });
        // Columns below `limit` belong to filters that start in this tile and exist
        // (`o < Og`: column `< Og·taps − k0`).
        let left = k.sub(p.og * p.taps, k0);
        let limit = k.min(left, T::TILE_K);
        // Per filter starting here: its first column, and whether the tile cuts it (it
        // starts in the last `taps − 1` columns).
        let filters: Vec<(Reg<U32>, Pred)> = (0..T::TILE_K.div_ceil(p.taps))
            .map(|s| {
                let col = k.add(col0, s * p.taps);
                let from_edge = k.sub(col, T::TILE_K + 1 - p.taps);
                (col, k.setp_lt(from_edge, p.taps - 1))
            })
            .collect();
        for (i, &carried) in (0u32..).zip(carry) {
            let q = k.add(tid, i * THREADS);
            let row = div_const(k, q, p.taps);
            let tap = rem_const(k, q, p.taps);
            let in_rows = k.setp_lt(q, TILE_N * p.taps);
            let c = k.add(self.block_n, row);
            let c_ok = k.setp_lt(c, p.cg);
            let row_ok = k.and_pred(in_rows, c_ok);
            let part_bytes = i * THREADS * bytes;
            // The element's column in filter `o_first`.
            let first_col = k.add(col0, tap);
            // Where filter `s` of this part lands: its row's byte base and immediate.
            let dest = match staged {
                None => SlabDest::Rows(k.mad_lo(row, Self::ROW * bytes, stage)),
                Some((tile, at, next_run)) => {
                    let crosses = k.setp_ge(first_col, p.taps);
                    let base = k.selp(next_run, at, crosses);
                    SlabDest::Staged(base, tile.filter_bytes())
                }
            };
            let store_at = |k: &mut KernelBuilder, s: i32, v: Reg<T::Bits>| {
                // Below 0 for the cut filter: wrapping, so one unsigned compare against `K`
                // checks both ends.
                let col = match s {
                    -1 => k.sub(first_col, p.taps),
                    0 => first_col,
                    _ => k.add(first_col, s as u32 * p.taps),
                };
                let in_tile = k.setp_lt(col, T::TILE_K);
                let store = k.and_pred(in_tile, in_rows);
                k.if_then(store, |k| match dest {
                    SlabDest::Rows(row_at) => {
                        let dst = k.mad_lo(col, bytes, row_at);
                        k.st_shared(dst, 0, v);
                    }
                    SlabDest::Staged(base, filter_bytes) => {
                        let offset = part_bytes as i32 + s * filter_bytes as i32;
                        k.st_shared(base, offset, v);
                    }
                });
            };
            store_at(k, -1, carried);
            for (s, &(col, cut)) in (0u32..).zip(&filters) {
                let v = k.var::<T::Bits>(zero());
                let exists = k.setp_lt(col, limit);
                let ok = k.and_pred(exists, row_ok);
                k.if_then(ok, |k| {
                    let offset = (i * THREADS + s * slab) * bytes;
                    let loaded = k.ld_global_nc::<T::Bits>(src, offset as i32);
                    k.assign(v, loaded);
                });
                store_at(k, s as i32, v);
                k.if_then(cut, |k| k.assign(carried, v));
            }
        }
    }
}

/// Where [`Gather::Slabs`] stores one part's elements: the padded tile row (byte address of
/// column 0), or in slab order ([`SlabTile`]) a byte base and the bytes between filters.
#[derive(Clone, Copy)]
enum SlabDest {
    Rows(Reg<U32>),
    Staged(Reg<U32>, u32),
}

/// `ok ? bits[index] : 0`, the load only where `ok` holds.
fn load_bits<B: Scalar>(
    k: &mut KernelBuilder,
    bits: GlobalPtr<B>,
    index: Reg<U32>,
    ok: Pred,
) -> Reg<B> {
    let v = k.var::<B>(zero());
    k.if_then(ok, |k| {
        let addr = k.elem_addr(bits, index);
        let loaded = k.ld_global_nc::<B>(addr, 0);
        k.assign(v, loaded);
    });
    v
}

/// Packs `elems` (raw bits of consecutive elements) into 32-bit words: two 16-bit elements
/// per word (the first in the low half), or one 32-bit element.
fn pack_words<B: Scalar>(k: &mut KernelBuilder, elems: &[Reg<B>]) -> Vec<Reg<U32>> {
    match B::TYPE.bits() {
        16 => elems
            .chunks_exact(2)
            .map(|pair| k.pack_u16_pair(pair[0].retype(), pair[1].retype()))
            .collect(),
        32 => elems.iter().map(|e| e.retype()).collect(),
        bits => unreachable!("tile elements are 16 or 32 bits, not {bits}"),
    }
}

/// Stores `words` from the 16-byte aligned `dst`, four per `st.shared.v4.b32`.
pub(super) fn store_words(k: &mut KernelBuilder, dst: Reg<U32>, words: &[Reg<U32>]) {
    for (i, quad) in words.chunks_exact(4).enumerate() {
        let offset = i as u32 * CHUNK_BYTES;
        k.st_shared_v4(dst, offset as i32, [quad[0], quad[1], quad[2], quad[3]]);
    }
}

/// Integer zero of the bits type `B`.
fn zero<B: Scalar>() -> Val<B> {
    Val::Imm(Imm::Int(0), PhantomData)
}
