//! Global → shared staging of one reduction tile, pixels `k0 .. k0 + K`, of an [`Operand`]'s
//! 64 rows (`K` = [`tile_k`]: one 128-byte shared row of the accumulation type, 32 f32 or 16
//! f64; group `q` of row `r` at group `q ⊕ s(r)`, `s(r) = (r ⊕ ⌊r / 8⌋) mod 8`, as in
//! [`crate::templates::conv::kernels::nhwc::tile`]). Pixel `kk` of a row is word `kk mod G`
//! of its group `⌊kk / G⌋` (`G` = 4 f32, 2 f64 per 16 bytes).
//!
//! - [`Staging::AlongPixels`] (NCHW: a row's pixels are contiguous in memory): thread `t`
//!   stages pixel `kk = t mod K` of rows `⌊t / K⌋ + (128 / K)·i`. A warp request reads 32
//!   consecutive pixels of one row (16 of two rows for f64) and writes them as that row's
//!   whole 128 bytes: conflict-free.
//! - [`Staging::AlongRows`] (NHWC: a pixel's rows, the channels, are contiguous): rows come
//!   in bands of `8E` (`E` = elements per 16 bytes of storage: 8 halves, 4 f32, 2 f64);
//!   thread `t` owns chunk `c = t mod 8` of `E` rows `E·c .. E·c + E` of every band, at
//!   pixels `⌊t / 8⌋ + 16·b`. A warp request reads 4 pixels × a band's `8E` contiguous rows
//!   (128 bytes each; one `ld.global.nc.v4`/`.v2` per lane where [`Operand::chunked`], else
//!   `E` element loads), then stores every element into its own row: per store the 8 lanes
//!   of one pixel write rows `E·c + e`, whose swizzles are 8 different groups (with
//!   `r = 8E·a + E·c + e`, `s(r) = s(E·c + e) ⊕ (E·a mod 8)`), and the pixels of one
//!   phase (4 for 4-byte f32 stores, 2 for 8-byte f64: one group) different words: every
//!   shared phase conflict-free.

use super::super::common::{bytes_of, load_or_zero};
use super::super::nhwc::tile::{group_len, tile_k, SwizzledRow, THREADS, TILE_M};
use super::super::vector::{load_chunk_or_zero, VectorElem};
use super::operands::Operand;
use crate::builder::{Float, GlobalPtr, KernelBuilder, Reg, SharedArr, U32};
use crate::templates::conv::Layout;

/// Lanes sharing one pixel in [`Staging::AlongRows`]: a quarter-warp.
const CHUNK_LANES: u32 = 8;
/// Pixels one pass of [`Staging::AlongRows`] covers.
const CHUNK_PIXELS: u32 = THREADS / CHUNK_LANES;

/// A thread's share of one operand tile.
pub(super) enum Staging<O: Operand> {
    AlongPixels(AlongPixels),
    AlongRows(AlongRows<O>),
}

/// [`Staging::AlongPixels`]: one pixel column, many rows.
pub(super) struct AlongPixels {
    /// `kk`: the thread's pixel within the tile.
    column: Reg<U32>,
    /// The operand row of the thread's first row; row `i` is `step·i` further.
    first_row: Reg<U32>,
    /// Row `i`'s shared slot at pixel `kk`.
    slots: Vec<Reg<U32>>,
    /// Rows between two of the thread's rows, `128 / K`.
    step: u32,
}

/// One band of [`Staging::AlongRows`]: the thread's chunk of `E` rows.
struct Band<O: Operand> {
    /// The chunk's first row when it loads as one vector, else each of its rows.
    rows: Vec<O::Row>,
    /// `slots[b][e]`: the shared address of row `e` of the chunk at pixel column `b`.
    slots: Vec<Vec<Reg<U32>>>,
}

/// [`Staging::AlongRows`]: chunks of rows at a few pixel columns.
pub(super) struct AlongRows<O: Operand> {
    /// The thread's pixels within the tile, `⌊t / 8⌋ + 16·b`.
    columns: Vec<Reg<U32>>,
    bands: Vec<Band<O>>,
    vector: bool,
}

/// The shared address of pixel `column` of row `row` of `tile`.
fn slot<A: Float>(
    k: &mut KernelBuilder,
    tile: SharedArr<A>,
    row: Reg<U32>,
    column: Reg<U32>,
) -> Reg<U32> {
    let per_group = group_len::<A>();
    let group = k.shr(column, per_group.trailing_zeros());
    let word = k.and(column, per_group - 1);
    let at = SwizzledRow::new(k, tile, row).group(k, group);
    k.mad_lo(word, bytes_of::<A>(), at)
}

impl<O: Operand> Staging<O> {
    /// The share of thread `tid` in `tile`, whose rows are the operand's `first_row ..
    /// first_row + 64`: along the pixels in NCHW, along the rows in NHWC.
    pub fn new<T: VectorElem>(
        k: &mut KernelBuilder,
        layout: Layout,
        operand: &O,
        tile: SharedArr<T::Acc>,
        tid: Reg<U32>,
        first_row: Reg<U32>,
    ) -> Self {
        let depth = tile_k::<T::Acc>();
        match layout {
            Layout::Nchw => {
                let column = k.and(tid, depth - 1);
                let first = k.shr(tid, depth.trailing_zeros());
                let step = THREADS / depth;
                let slots = (0..TILE_M / step)
                    .map(|i| {
                        let row = k.add(first, i * step);
                        slot(k, tile, row, column)
                    })
                    .collect();
                let first_row = k.add(first_row, first);
                Self::AlongPixels(AlongPixels {
                    column,
                    first_row,
                    slots,
                    step,
                })
            }
            Layout::Nhwc => {
                let chunk = T::CHUNK;
                let vector = operand.chunked(chunk);
                let lane = k.and(tid, CHUNK_LANES - 1);
                let first_column = k.shr(tid, CHUNK_LANES.trailing_zeros());
                let columns: Vec<Reg<U32>> = (0..depth / CHUNK_PIXELS)
                    .map(|b| k.add(first_column, b * CHUNK_PIXELS))
                    .collect();
                let band_rows = CHUNK_LANES * chunk;
                let bands = (0..TILE_M / band_rows)
                    .map(|a| {
                        let first = k.mad_lo(lane, chunk, a * band_rows);
                        let rows: Vec<Reg<U32>> = (0..chunk).map(|e| k.add(first, e)).collect();
                        let slots = columns
                            .iter()
                            .map(|&column| rows.iter().map(|&r| slot(k, tile, r, column)).collect())
                            .collect();
                        let decoded = if vector { &rows[..1] } else { &rows[..] };
                        let rows = decoded
                            .iter()
                            .map(|&r| {
                                let global = k.add(first_row, r);
                                operand.row(k, global)
                            })
                            .collect();
                        Band { rows, slots }
                    })
                    .collect();
                Self::AlongRows(AlongRows {
                    columns,
                    bands,
                    vector,
                })
            }
        }
    }

    /// `tile[row, kk] = operand[first_row + row, k0 + kk]` for the thread's share.
    pub fn stage<T: VectorElem>(
        &self,
        k: &mut KernelBuilder,
        operand: &O,
        src: GlobalPtr<T>,
        k0: Reg<U32>,
    ) {
        match self {
            Self::AlongPixels(s) => {
                let p = k.add(k0, s.column);
                let pixel = operand.pixel(k, p);
                // Rows decoded per tile: kept across the loop, 16 decoded filter taps took
                // ptxas to 254 registers.
                for (i, &at) in (0u32..).zip(&s.slots) {
                    let global = k.add(s.first_row, i * s.step);
                    let row = operand.row(k, global);
                    let (index, ok) = operand.locate(k, &row, &pixel);
                    let v = load_or_zero::<T>(k, src, index, ok);
                    k.st_shared(at, 0, v);
                }
            }
            Self::AlongRows(s) => {
                for (b, &column) in s.columns.iter().enumerate() {
                    let p = k.add(k0, column);
                    let pixel = operand.pixel(k, p);
                    for band in &s.bands {
                        let values: Vec<Reg<T::Acc>> = if s.vector {
                            let (index, ok) = operand.locate(k, &band.rows[0], &pixel);
                            load_chunk_or_zero::<T>(k, src, index, ok)
                        } else {
                            band.rows
                                .iter()
                                .map(|row| {
                                    let (index, ok) = operand.locate(k, row, &pixel);
                                    load_or_zero::<T>(k, src, index, ok)
                                })
                                .collect()
                        };
                        for (&at, v) in band.slots[b].iter().zip(values) {
                            k.st_shared(at, 0, v);
                        }
                    }
                }
            }
        }
    }
}
