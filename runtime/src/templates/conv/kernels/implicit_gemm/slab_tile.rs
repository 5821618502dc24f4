//! The f32 (tf32) backward-data B tile in slab order, where [`super::gather::Gather::Slabs`]
//! stores without bank conflicts.
//!
//! In the padded `[c][k]` rows of the shared tile (20 words, bank `20·c + col`) a slab store
//! (32 consecutive slab elements `q = T·c + tap` of one filter, `T = KH·KW` taps, at column
//! `col0 + tap`) is conflicted: bank mod 4 is the column mod 4, and 9 taps per row put 3
//! elements on one residue and 2 on the others (1.26 × the fewest wavefronts at 3 × 3).
//! Here tile element `(n, K)` (channel row `n < 64`, column `K < 16`) lives at word
//! `T·n + K + 64·T·⌊K / T⌋` of the stage: each run of `T` columns is laid out like the slab
//! itself (rows `T` words apart) and the runs are `64·T ≡ 0 (mod 32)` words apart, so the
//! bank is `(T·n + K) mod 32`. Slab element `q` of the filter whose tap 0 is column `col0`
//! lands at word `q + col0 + 64·T·⌊(col0 + tap) / T⌋`, bank `(q + col0) mod 32`: a warp's 32
//! consecutive slab elements hit 32 distinct banks, whichever column the filter starts at.
//!
//! The tile has no 16-byte rows for `ldmatrix`, so each lane reads its B registers with
//! `ld.shared.b32` (the tf32 `m16n8k8` B register `i` of lane `l` is `k = l % 4 + 4·i`,
//! `n = l / 4`; PTX ISA, "Matrix Fragments for mma.m16n8k8") and rounds them with
//! `cvt.rna.tf32.f32` as the `ldmatrix` path does. Eight consecutive rows `T` words apart
//! would share banks (`9·7 ≡ −1`), so the 8 columns of the warp's n-block `r` are the tile
//! rows `first(r) + s·j` (`j < 8`) with `s = 4` for odd `T` and `s = 2` for `T ≡ 2 (mod 4)`:
//! `T·s ≡ 4 (mod 8)`, so a read's lanes hit banks `T·s·(l / 4) + l % 4 + const`, all 32
//! distinct. The warp's four n-blocks still cover its 32 rows, and the epilogue maps the
//! accumulator columns back ([`SlabTile::column`]).

use crate::builder::{FragB, KernelBuilder, Reg, BF16, F16, F32, M16N8K8, TF32, U32};
use crate::templates::warp_mma::{
    Accumulators, TileElem, WarpPos, ROW_BYTES, STAGE_BYTES, TILE_N, WARP_M_TILES, WARP_N_TILES,
    WARP_TILE,
};

/// Columns of the stage (16 f32).
const COLUMNS: u32 = <F32 as TileElem>::TILE_K;
/// Bytes of K one `m16n8k8` consumes (8 f32).
const SLICE_BYTES: u32 = 8 * 4;
/// Columns one B register set of a lane spans (`k = l % 4 + 4·i`).
const QUAD: u32 = 4;

/// The slab-ordered layout for `taps` filter taps.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SlabTile {
    taps: u32,
    /// Row step `s` between an n-block's columns.
    step: u32,
}

/// One of a lane's B columns `k = l % 4 + 4·j`: which of [`SlabReads::bases`] it reads from
/// and the byte offset past it (before the n-block's rows).
type Column = (usize, u32);

/// A lane's read addresses, fixed for the whole reduction: byte offsets within a stage (one
/// per distinct run boundary the lane's columns straddle) and, per column `j`, the base and
/// immediate it reads at.
pub(crate) struct SlabReads {
    tile: SlabTile,
    bases: Vec<Reg<U32>>,
    columns: Vec<Column>,
}

impl SlabTile {
    /// The layout for `taps` taps where it fits a stage and its reads can be conflict-free
    /// (`taps` not a multiple of 4: those gather 16-byte chunks instead).
    pub fn new(taps: u32) -> Option<Self> {
        let step = match taps % 4 {
            1 | 3 => 4,
            2 => 2,
            _ => return None,
        };
        let tile = Self { taps, step };
        let last = tile.word(TILE_N - 1, COLUMNS - 1);
        (last < STAGE_BYTES / 4).then_some(tile)
    }

    /// The word of tile element `(n, col)`.
    const fn word(&self, n: u32, col: u32) -> u32 {
        self.taps * n + col + self.run_words() * (col / self.taps)
    }

    /// Words between two runs of `taps` columns.
    const fn run_words(&self) -> u32 {
        TILE_N * self.taps
    }

    /// Bytes between the stores of consecutive filters of one slab element (its column moves
    /// by `taps`, and into the next run).
    pub fn filter_bytes(&self) -> u32 {
        4 * (self.taps + self.run_words())
    }

    /// Bytes a slab element moves when its column crosses into the next run.
    pub fn run_bytes(&self) -> u32 {
        4 * self.run_words()
    }

    /// The first tile row of n-block `r` (its rows are `first + s·j`).
    fn first_row(&self, r: u32) -> u32 {
        r % self.step + 8 * self.step * (r / self.step)
    }

    /// The tile column (GEMM `n` within the warp's 32) of accumulator column `2·(l % 4) + j`
    /// of n-block `ni`, past `2·s·(l % 4)` ([`Self::lane_column_step`]).
    pub fn column(&self, ni: u32, j: u32) -> u32 {
        self.first_row(ni) + self.step * j
    }

    /// The step of a lane's output columns per `l % 4`: `2·s` (the `ldmatrix` layout's 2).
    pub fn lane_column_step(&self) -> u32 {
        2 * self.step
    }

    /// The lane's read bases: row `32·warp_n + s·(l / 4)`, column `l % 4`, plus one run
    /// where a column `l % 4 + 4·j` crosses a run boundary for some lanes only.
    pub fn lane_reads(self, k: &mut KernelBuilder, pos: &WarpPos) -> SlabReads {
        let group = k.shr(pos.lane, 2u32);
        let quad = k.and(pos.lane, QUAD - 1);
        let warp_row = k.mul_lo(pos.warp_n, WARP_TILE);
        let row = k.mad_lo(group, self.step, warp_row);
        let word = k.mad_lo(row, self.taps, quad);
        let mut bases = vec![k.shl(word, 2u32)];
        let mut crossings: Vec<(u32, usize)> = Vec::new();
        let columns = (0..COLUMNS / QUAD)
            .map(|j| {
                let first = QUAD * j;
                let run = first / self.taps;
                let immediate = 4 * (first + self.run_words() * run);
                if (first + QUAD - 1) / self.taps == run {
                    return (0, immediate);
                }
                // Lanes with `l % 4 ≥ threshold` are in the next run.
                let threshold = (run + 1) * self.taps - first;
                let base = match crossings.iter().find(|c| c.0 == threshold) {
                    Some(&(_, base)) => base,
                    None => {
                        let next = k.setp_ge(quad, threshold);
                        let extra = k.selp(self.run_bytes(), 0u32, next);
                        bases.push(k.add(bases[0], extra));
                        crossings.push((threshold, bases.len() - 1));
                        bases.len() - 1
                    }
                };
                (base, immediate)
            })
            .collect();
        SlabReads {
            tile: self,
            bases,
            columns,
        }
    }
}

/// Element types whose backward-data B tile may be staged in slab order: f32 (tf32) only;
/// halves keep the `ldmatrix` tile, conflict-free for them already.
pub(crate) trait SlabStaged: TileElem {
    /// One K tile of the warp's 32 × 32 quadrant: A by `ldmatrix` at `a_at`, B from the
    /// slab-ordered stage at `b_stage`.
    fn multiply_slab_tile(
        k: &mut KernelBuilder,
        acc: &mut Accumulators<Self::Shape>,
        a_at: Reg<U32>,
        b_stage: Reg<U32>,
        reads: &SlabReads,
    );
}

impl SlabStaged for F32 {
    fn multiply_slab_tile(
        k: &mut KernelBuilder,
        acc: &mut Accumulators<M16N8K8>,
        a_at: Reg<U32>,
        b_stage: Reg<U32>,
        reads: &SlabReads,
    ) {
        let tile = reads.tile;
        let at: Vec<Reg<U32>> = reads.bases.iter().map(|&b| k.add(b_stage, b)).collect();
        for ks in 0..COLUMNS * 4 / SLICE_BYTES {
            let a: Vec<_> = (0..WARP_M_TILES)
                .map(|mi| k.ldmatrix_tf32_a(a_at, (mi * 16 * ROW_BYTES + ks * SLICE_BYTES) as i32))
                .collect();
            let b: Vec<FragB<M16N8K8, TF32>> = (0..WARP_N_TILES)
                .map(|ni| {
                    let rows = 4 * tile.taps * tile.first_row(ni);
                    let regs: Vec<Reg<TF32>> = (0..2)
                        .map(|i| {
                            let (base, immediate) = reads.columns[(2 * ks + i) as usize];
                            let raw = k.ld_shared::<F32>(at[base], (immediate + rows) as i32);
                            k.to_tf32(raw)
                        })
                        .collect();
                    FragB::from_regs(&regs)
                })
                .collect();
            for (mi, row) in acc.iter_mut().enumerate() {
                for (ni, c) in row.iter_mut().enumerate() {
                    k.mma_into(c, &a[mi], &b[ni], c);
                }
            }
        }
    }
}

macro_rules! ldmatrix_only {
    ($($t:ty),*) => {$(
        impl SlabStaged for $t {
            fn multiply_slab_tile(
                _: &mut KernelBuilder,
                _: &mut Accumulators<Self::Shape>,
                _: Reg<U32>,
                _: Reg<U32>,
                _: &SlabReads,
            ) {
                unreachable!("only f32 stages backward-data B in slab order")
            }
        }
    )*};
}

ldmatrix_only!(F16, BF16);

#[cfg(test)]
mod tests {
    use super::*;

    /// Bank of tile element `(n, col)`.
    fn bank(tile: &SlabTile, n: u32, col: u32) -> u32 {
        tile.word(n, col) % 32
    }

    /// Every tile element has its own word inside the stage, for every tap count that fits.
    #[test]
    fn layout_is_a_stage_sized_bijection() {
        let fits: Vec<u32> = (2..=16).filter(|&t| SlabTile::new(t).is_some()).collect();
        assert_eq!(fits, [2, 3, 6, 9]);
        for taps in fits {
            let tile = SlabTile::new(taps).unwrap();
            let mut words: Vec<u32> = (0..TILE_N)
                .flat_map(|n| (0..COLUMNS).map(move |c| (n, c)))
                .map(|(n, c)| tile.word(n, c))
                .collect();
            words.sort_unstable();
            words.dedup();
            assert_eq!(words.len() as u32, TILE_N * COLUMNS, "{taps} taps");
            assert!(*words.last().unwrap() < STAGE_BYTES / 4);
        }
    }

    /// A store of 32 consecutive slab elements of one filter (any first column) and a B
    /// register read (8 rows of an n-block × 4 columns) each hit 32 distinct banks.
    #[test]
    fn slab_stores_and_fragment_reads_are_conflict_free() {
        for taps in [2, 3, 6, 9] {
            let tile = SlabTile::new(taps).unwrap();
            for col0 in 0..taps {
                for first in (0..TILE_N * taps - 32).step_by(32) {
                    let mut banks: Vec<u32> = (first..first + 32)
                        .map(|q| (q / taps, col0 + q % taps))
                        .filter(|&(_, col)| col < COLUMNS)
                        .map(|(n, col)| bank(&tile, n, col))
                        .collect();
                    let len = banks.len();
                    banks.sort_unstable();
                    banks.dedup();
                    assert_eq!(banks.len(), len, "{taps} taps, col0 {col0}, q {first}");
                }
            }
            for ni in 0..WARP_N_TILES {
                for k0 in (0..COLUMNS).step_by(4) {
                    let mut banks: Vec<u32> = (0..32)
                        .map(|l| bank(&tile, tile.column(ni, 0) + tile.step * (l / 4), k0 + l % 4))
                        .collect();
                    banks.sort_unstable();
                    banks.dedup();
                    assert_eq!(banks.len(), 32, "{taps} taps, n-block {ni}, k0 {k0}");
                }
            }
        }
    }
}
