//! Global → shared staging of one reduction tile `k0 .. k0 + tile_k` of both operands.
//!
//! A row's `tile_k` indices are `C = tile_k / E` chunks of `E` elements (16 bytes of the
//! storage type: `C` = 4 for halves, 8 for f32 and f64). Thread `t` owns chunk column
//! `t mod C` of rows `⌊t / C⌋ + (128 / C)·i`, so a warp request covers `32 / C` rows × the
//! row's whole 64 or 128 contiguous bytes (whole sectors). Where the chunk's `E` elements
//! are contiguous and 16-byte aligned (A: `Cg` a multiple of `E`, so a chunk never crosses a
//! tap; W: `Cg·KH·KW` a multiple of `E`) it is one `ld.global.nc.v4`/`.v2` under one
//! predicate; otherwise `E` element loads, each with its own tap and bounds. The widened
//! values are stored 16 bytes at a time into the swizzled groups ([`super::tile`]): the 8
//! lanes of a quarter-warp write 8 distinct groups (one row's 8 chunks, or two rows' 4 chunks
//! of two groups each, whose swizzles differ in bit 0).

use super::super::common::{
    both_below, div_const, load_or_zero, rem_const, window_origin, Dims, Problem,
};
use super::super::vector::{load_chunk_or_zero, VectorElem};
use super::tile::{group_len, tile_k, write_group, Block, SwizzledRow, THREADS, TILE_M, TILE_N};
use crate::builder::{Float, GlobalPtr, KernelBuilder, Pred, Reg, SharedArr, U32};

/// A thread's share of one operand tile: its chunk column and, per owned row, the shared
/// addresses of the chunk's groups.
pub(super) struct Share {
    /// `E·(t mod C)`: the thread's first reduction index within a tile.
    column: Reg<U32>,
    /// Rows within the tile, `⌊t / C⌋ + (128 / C)·i`.
    rows: Vec<Reg<U32>>,
    /// Per row, the addresses of the chunk's groups (2 for halves, 1 otherwise).
    slots: Vec<Vec<Reg<U32>>>,
    /// Elements per chunk.
    chunk: u32,
}

impl Share {
    pub fn new<T: VectorElem>(
        k: &mut KernelBuilder,
        tile: SharedArr<T::Acc>,
        tid: Reg<U32>,
        rows: u32,
    ) -> Self {
        let chunk = T::CHUNK;
        let per_row = tile_k::<T::Acc>() / chunk;
        let groups_per_chunk = chunk / group_len::<T::Acc>();
        let chunk_column = k.and(tid, per_row - 1);
        let column = k.mul_lo(chunk_column, chunk);
        let first_group = k.mul_lo(chunk_column, groups_per_chunk);
        let first_row = k.shr(tid, per_row.trailing_zeros());
        let rows_per_pass = THREADS / per_row;
        let rows: Vec<Reg<U32>> = (0..rows / rows_per_pass)
            .map(|i| k.add(first_row, i * rows_per_pass))
            .collect();
        let slots = rows
            .iter()
            .map(|&row| {
                let row = SwizzledRow::new(k, tile, row);
                (0..groups_per_chunk)
                    .map(|h| {
                        let q = k.add(first_group, h);
                        row.group(k, q)
                    })
                    .collect()
            })
            .collect();
        Self {
            column,
            rows,
            slots,
            chunk,
        }
    }

    /// Each owned row's pixel `m0 + row` and whether it is inside the block's pixels.
    pub fn pixels(&self, k: &mut KernelBuilder, block: &Block) -> Vec<(Reg<U32>, Pred)> {
        self.rows
            .iter()
            .map(|&row| {
                let m = k.add(block.m0, row);
                (m, k.setp_lt(m, block.pixels))
            })
            .collect()
    }

    /// Stores each row's chunk of widened values into its groups.
    pub fn write<A: Float>(&self, k: &mut KernelBuilder, values: &[Vec<Reg<A>>]) {
        let len = group_len::<A>() as usize;
        for (slots, row) in self.slots.iter().zip(values) {
            for (&slot, group) in slots.iter().zip(row.chunks_exact(len)) {
                write_group(k, slot, group);
            }
        }
    }

    /// Each row's chunk at reduction index `kk = k0 + column`: one vector load per row when
    /// `vector`, else one load per element. `decode(kk)` is the per-index work shared by the
    /// rows; `locate(decoded, row)` gives the element index and its predicate.
    pub fn gather<T: VectorElem, D>(
        &self,
        k: &mut KernelBuilder,
        src: GlobalPtr<T>,
        k0: Reg<U32>,
        vector: bool,
        mut decode: impl FnMut(&mut KernelBuilder, Reg<U32>) -> D,
        mut locate: impl FnMut(&mut KernelBuilder, &D, usize) -> (Reg<U32>, Pred),
    ) -> Vec<Vec<Reg<T::Acc>>> {
        let kk = k.add(k0, self.column);
        let mut values = vec![Vec::new(); self.rows.len()];
        let elements = if vector { 1 } else { self.chunk };
        for e in 0..elements {
            let kk_e = if e == 0 { kk } else { k.add(kk, e) };
            let decoded = decode(k, kk_e);
            for (row, out) in values.iter_mut().enumerate() {
                let (index, ok) = locate(k, &decoded, row);
                if vector {
                    out.extend(load_chunk_or_zero::<T>(k, src, index, ok));
                } else {
                    out.push(load_or_zero::<T>(k, src, index, ok));
                }
            }
        }
        values
    }
}

/// One pixel row the thread stages: pixel `m0 + row`, decomposed once.
struct PixelRow {
    ok: Pred,
    /// `oh·SH − PH` and `ow·SW − PW` (wrapping: left of / above the image is huge).
    ih0: Reg<U32>,
    iw0: Reg<U32>,
    /// `n·H`: the image's first input row.
    image_row: Reg<U32>,
}

/// Reduction index `kk` of the pixel operand: tap `(kh, kw)` and channel `ci`.
struct Tap {
    ok: Pred,
    /// `kh·DH`, `kw·DW`.
    dh: Reg<U32>,
    dw: Reg<U32>,
    /// `g·Cg + ci`.
    channel: Reg<U32>,
}

/// The pixel (A) operand's staging.
pub(super) struct PixelRows {
    share: Share,
    rows: Vec<PixelRow>,
    /// `g·Cg`.
    first_channel: Reg<U32>,
}

impl PixelRows {
    pub fn locate<T: VectorElem>(
        k: &mut KernelBuilder,
        p: &Problem,
        d: &Dims,
        block: &Block,
        tile: SharedArr<T::Acc>,
    ) -> Self {
        k.comment("the thread's staged pixel rows");
        let share = Share::new::<T>(k, tile, block.tid, TILE_M);
        let rows = share
            .pixels(k, block)
            .into_iter()
            .map(|(m, ok)| {
                let (image, ih0, iw0) = window_origin(k, p, d, m);
                let image_row = k.mul_lo(image, d.h);
                PixelRow {
                    ok,
                    ih0,
                    iw0,
                    image_row,
                }
            })
            .collect();
        let first_channel = k.mul_lo(block.group, p.cg);
        Self {
            share,
            rows,
            first_channel,
        }
    }

    /// `tile[row, kk] = A_g[m0 + row, k0 + kk]`.
    pub fn stage<T: VectorElem>(
        &self,
        k: &mut KernelBuilder,
        p: &Problem,
        d: &Dims,
        x: GlobalPtr<T>,
        k0: Reg<U32>,
    ) {
        k.comment("stage the pixel tile");
        let vector = p.cg.is_multiple_of(T::CHUNK);
        let decode = |k: &mut KernelBuilder, kk: Reg<U32>| {
            let ok = k.setp_lt(kk, p.filter_len());
            let tap = div_const(k, kk, p.cg);
            let ci = rem_const(k, kk, p.cg);
            let kh = div_const(k, tap, p.kw);
            let kw = rem_const(k, tap, p.kw);
            Tap {
                ok,
                dh: k.mul_lo(kh, p.dh),
                dw: k.mul_lo(kw, p.dw),
                channel: k.add(self.first_channel, ci),
            }
        };
        let locate = |k: &mut KernelBuilder, tap: &Tap, row: usize| {
            let row = &self.rows[row];
            let ih = k.add(row.ih0, tap.dh);
            let iw = k.add(row.iw0, tap.dw);
            let inside = both_below(k, ih, d.h, iw, d.w);
            let ok = k.and_pred(row.ok, tap.ok);
            let ok = k.and_pred(ok, inside);
            let input_row = k.add(row.image_row, ih);
            let position = k.mad_lo(input_row, d.w, iw);
            (k.mad_lo(position, p.c_in, tap.channel), ok)
        };
        let values = self.share.gather(k, x, k0, vector, decode, locate);
        self.share.write(k, &values);
    }
}

/// The filter (W) operand's staging: channel rows `n0 + row` of group `g`.
pub(super) struct FilterRows {
    share: Share,
    /// Per row: `(g·Og + n0 + row)·K` and `n0 + row < Og`.
    rows: Vec<(Reg<U32>, Pred)>,
}

impl FilterRows {
    pub fn locate<T: VectorElem>(
        k: &mut KernelBuilder,
        p: &Problem,
        block: &Block,
        tile: SharedArr<T::Acc>,
    ) -> Self {
        k.comment("the thread's staged filter rows");
        let share = Share::new::<T>(k, tile, block.tid, TILE_N);
        let first = k.mad_lo(block.group, p.og, block.n0);
        let rows = share
            .rows
            .iter()
            .map(|&row| {
                let local = k.add(block.n0, row);
                let ok = k.setp_lt(local, p.og);
                let oc = k.add(first, row);
                (k.mul_lo(oc, p.filter_len()), ok)
            })
            .collect();
        Self { share, rows }
    }

    /// `tile[row, kk] = W_g[n0 + row, k0 + kk]`.
    pub fn stage<T: VectorElem>(
        &self,
        k: &mut KernelBuilder,
        p: &Problem,
        w: GlobalPtr<T>,
        k0: Reg<U32>,
    ) {
        k.comment("stage the filter tile");
        let vector = p.filter_len().is_multiple_of(T::CHUNK);
        let decode = |k: &mut KernelBuilder, kk: Reg<U32>| (kk, k.setp_lt(kk, p.filter_len()));
        let locate = |k: &mut KernelBuilder, &(kk, k_ok): &(Reg<U32>, Pred), row: usize| {
            let (start, row_ok) = self.rows[row];
            let ok = k.and_pred(row_ok, k_ok);
            (k.add(start, kk), ok)
        };
        let values = self.share.gather(k, w, k0, vector, decode, locate);
        self.share.write(k, &values);
    }
}
