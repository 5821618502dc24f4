//! The tensor-core block tile shared by the families whose GEMMs have both operands
//! contiguous along the reduction (conv's implicit GEMM, MoE's expert GEMMs): `C [M, N] +=
//! A [M, K] · Bᵀ` with `B [N, K]` stored n-major, f16/bf16 inputs (or f32 inputs on tf32
//! tensor cores, see [`tf32`]), f32 accumulators. Its shape is a [`Geometry`]: the 64 × 64
//! tile of the constants below ([`Geometry::SQUARE`]: NF4, every tf32 user, conv's element
//! gathers), [`Geometry::WIDE`] (128 × 128 with 64 × 64 warp quadrants: half the shared
//! memory per `mma`), or [`Geometry::TALL`] and [`Geometry::FLAT`] (128 × 64 and 64 × 128:
//! three quarters of it) — the larger ones for MoE's f16/bf16 expert GEMMs and conv's
//! chunked implicit GEMMs. The `_in` functions take the geometry; the others are the 64 × 64
//! tile.
//!
//! The geometry is fixed in **bytes**, so one layout serves every element width
//! ([`TileElem`]): a stage row holds 64 bytes of K (32 halves or 16 f32) padded to 80 bytes,
//! copies move 16-byte chunks, and an `ldmatrix` 8 × 8 b16 matrix is an 8 × 4 block of 32-bit
//! elements. The constants below without a `_BYTES` suffix are the f16/bf16 values.
//!
//! - **Block**: [`THREADS`] threads = 4 warps as 2 × 2; each warp owns a 32 × 32 quadrant as
//!   [`WARP_M_TILES`] × [`WARP_N_TILES`] `m16n8k16` accumulators (64 × 64 as 4 × 8 in
//!   [`Geometry::WIDE`], 64 × 32 as 4 × 4 in [`Geometry::TALL`]).
//! - **Shared layout**: both operand tiles are stored `[row][k]`, [`TILE_K`] deep, rows padded
//!   to [`ROW`] elements (80 bytes): the eight 16-byte rows one `ldmatrix` phase reads start
//!   20 words apart, in distinct bank groups, so every request is conflict-free.
//! - **Fragments**: A by `ldmatrix.x4`; B by untransposed `ldmatrix.x4` (its rows are the
//!   mma's columns, see [`KernelBuilder::ldmatrix_b_pair`]).
//! - **Operands staged by reduction index** ([`Staging::ByK`], f16/bf16 only): an operand
//!   whose global memory holds its *rows* contiguously and its reduction strided (NHWC
//!   backward-filter: channels of one pixel) is staged `[k][row]` instead, [`TILE_K`] rows of
//!   the tile rows' elements padded to [`k_row_bytes`] (144 bytes, 36 words for 64 rows: the
//!   eight 16-byte rows of an `ldmatrix` phase start in distinct 4-bank groups), filled by 16-byte
//!   chunks of 8 consecutive tile rows ([`by_k_chunks`]) and read by
//!   `ldmatrix.x4.trans`: each 8 × 8 block stored `[k][row]` lands transposed, lane `l`
//!   holding row `l / 4`, reduction pair `2·(l % 4)`, which is the A fragment (rows are
//!   `m`) or the B fragment (rows are `n`) of `mma.m16n8k16` ([`multiply_staged_tile`]).
//! - **Pipeline** ([`run_ring`], [`run_ring_of`] for a geometry's own depth): [`STAGES`] ring
//!   slots; K tiles `t + 1` and `t + 2` are being
//!   filled by `cp.async` while `t` is multiplied. Each step waits for its own group
//!   (`wait_group STAGES − 2`), synchronises, refills the slot freed by the previous step and
//!   commits one group even when empty, so the group count stays uniform.
//!
//! Callers fill a ring slot themselves (their addressing differs: im2col, gathered tokens) in
//! chunks of [`CHUNK`] elements, at byte offset [`chunk_slot_bytes`] of the stage, or in
//! narrower pieces at [`piece_slot_bytes`] ([`Geometry::piece_slot_bytes`] for other
//! geometries: the same dealing, only the rows per stage change); a piece of a row-major source with rows of `len`
//! elements is one [`staging::copy_piece`] of [`staging::copy_elems`]`(len)` elements (zero
//! past `len`, so the mma adds nothing for the reduction's ragged end).
//!
//! [`staging::copy_piece`]: crate::templates::staging::copy_piece
//! [`staging::copy_elems`]: crate::templates::staging::copy_elems

mod tf32;

use crate::builder::{
    FragA, FragB, FragC, KernelBuilder, MmaInput, MmaShapeKind, PackedHalf, Reg, Scalar, SharedArr,
    Val, BF16, F16, F32, M16N8K16, U16, U32, U64,
};

/// Output rows per block.
pub const TILE_M: u32 = 64;
/// Output columns per block.
pub const TILE_N: u32 = 64;
/// Bytes of the reduction each stage row holds.
pub const TILE_K_BYTES: u32 = 64;
/// Bytes per copy chunk (one `cp.async`, one `ldmatrix` row).
pub const CHUNK_BYTES: u32 = 16;
/// Padded shared row length in bytes: eight rows start 20 words apart, in distinct bank groups.
pub const ROW_BYTES: u32 = TILE_K_BYTES + CHUNK_BYTES;
/// Reduction depth per pipeline step (f16/bf16 elements).
pub const TILE_K: u32 = TILE_K_BYTES / 2;
/// Threads per block (4 warps).
pub const THREADS: u32 = 128;
/// Pipeline depth.
pub const STAGES: u32 = 3;
/// Elements per copy chunk (16 bytes of f16/bf16).
pub const CHUNK: u32 = CHUNK_BYTES / 2;
/// Padded shared row length in f16/bf16 elements.
pub const ROW: u32 = ROW_BYTES / 2;
/// Bytes of one stage of one operand.
pub const STAGE_BYTES: u32 = TILE_M * ROW_BYTES;
/// Each warp's quadrant edge.
pub const WARP_TILE: u32 = 32;
/// m16 accumulators per warp.
pub const WARP_M_TILES: u32 = 2;
/// n8 accumulators per warp.
pub const WARP_N_TILES: u32 = 4;
/// 16-byte chunks of one operand stage each thread copies.
pub const CHUNKS_PER_THREAD: u32 = TILE_M * (TILE_K / CHUNK) / THREADS;
/// Padded shared row length in bytes of a stage staged by reduction index ([`Staging::ByK`])
/// of 64 tile rows ([`k_row_bytes`]).
pub const K_ROW_BYTES: u32 = k_row_bytes(TILE_M);

/// Padded shared row length in bytes of a stage of `rows` tile rows staged by reduction index
/// ([`Staging::ByK`]): their f16/bf16 elements of one `k` and 16 bytes of padding, so the
/// eight rows of an `ldmatrix` phase start `rows / 2 + 4` words apart (36 for 64 rows, 68
/// for 128), in distinct 4-bank groups.
pub const fn k_row_bytes(rows: u32) -> u32 {
    rows * 2 + CHUNK_BYTES
}

const _: () = assert!(
    TILE_M == TILE_N
        && TILE_K * K_ROW_BYTES <= STAGE_BYTES
        && TILE_K * k_row_bytes(2 * TILE_M) <= 2 * STAGE_BYTES
);

/// A block tile's shape: warps along each output dimension, each warp's accumulators and the
/// ring's depth. Everything else — the 80-byte stage rows, the 16-byte copies, the fragments'
/// byte offsets — is the same for every geometry, so one layout and one set of copy and
/// fragment helpers serve them all; a geometry only changes how many rows an operand stage
/// holds, which quadrant a warp owns and how many slots the ring has.
///
/// Shared-memory traffic per `mma` (the limit of a tensor-core tile once its copies are
/// asynchronous): a warp quadrant of `m16 × n8` tiles `wm × wn` reads `4·wm + 2·wn` 8 × 8
/// matrices per 16-deep slice for `wm · wn` mma, and the block's copies write
/// `(block_m + block_n) · 32` bytes (128 bytes a wavefront) per slice for `warps · wm · wn`
/// mma.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Warps along the output rows.
    pub warps_m: u32,
    /// Warps along the output columns (a power of two).
    pub warps_n: u32,
    /// `m16` accumulator tiles per warp.
    pub warp_m_tiles: u32,
    /// `n8` accumulator tiles per warp (even: B fragments come in `ldmatrix.x4` pairs).
    pub warp_n_tiles: u32,
    /// Ring slots.
    pub stages: u32,
}

impl Geometry {
    /// The 64 × 64 tile of the constants above: 4 warps as 2 × 2 quadrants of 32 × 32
    /// (2 × 4 accumulators), 3 stages; 2 matrices read per mma plus 1 wavefront of copies.
    pub const SQUARE: Self = Self {
        warps_m: 2,
        warps_n: 2,
        warp_m_tiles: WARP_M_TILES,
        warp_n_tiles: WARP_N_TILES,
        stages: STAGES,
    };

    /// 128 × 128: 4 warps as 2 × 2 quadrants of 64 × 64 (4 × 8 accumulators, 128 f32
    /// registers a thread), 3 stages (60 KiB of rings: dynamic shared memory). Per 16-deep
    /// slice a warp reads 4 A and 4 B `ldmatrix.x4` (32 matrices) for 32 mma, 1.0 per mma,
    /// and the copies write 0.5 wavefronts per mma: half of [`Self::SQUARE`]'s traffic.
    pub const WIDE: Self = Self {
        warps_m: 2,
        warps_n: 2,
        warp_m_tiles: 4,
        warp_n_tiles: 8,
        stages: 3,
    };

    /// 128 × 64 for two B operands that share the A tile (two accumulator sets: 2 × 64 f32
    /// registers a thread, as [`Self::WIDE`]'s one set): 4 warps as 2 × 2 quadrants of
    /// 64 × 32 (4 × 4 accumulators per set). Per slice a warp reads 4 A and 2 + 2 B
    /// `ldmatrix.x4` for 32 mma (1.0 per mma) and the copies write 128 + 64 + 64 rows for
    /// 128 mma (0.5); a 64 × 128 tile would read 1.25 and copy 0.625.
    pub const TALL: Self = Self {
        warps_m: 2,
        warps_n: 2,
        warp_m_tiles: 4,
        warp_n_tiles: 4,
        stages: 3,
    };

    /// 64 × 128, [`Self::TALL`] turned on its side for GEMMs whose N side is the longer one
    /// (conv's backward-data over 128 input channels): 4 warps as 2 × 2 quadrants of 32 × 64
    /// (2 × 8 accumulators). Per slice a warp reads 2 A and 4 B `ldmatrix.x4` (24 matrices)
    /// for 16 mma (1.5 per mma) and the copies write 0.75 wavefronts per mma, as TALL's.
    pub const FLAT: Self = Self {
        warps_m: 2,
        warps_n: 2,
        warp_m_tiles: 2,
        warp_n_tiles: 8,
        stages: 3,
    };

    /// Warps per block.
    pub const fn warps(self) -> u32 {
        self.warps_m * self.warps_n
    }

    /// Threads per block.
    pub const fn threads(self) -> u32 {
        32 * self.warps()
    }

    /// Output rows of one warp's quadrant.
    pub const fn warp_rows(self) -> u32 {
        16 * self.warp_m_tiles
    }

    /// Output columns of one warp's quadrant.
    pub const fn warp_cols(self) -> u32 {
        8 * self.warp_n_tiles
    }

    /// Output rows per block (A tile rows).
    pub const fn block_m(self) -> u32 {
        self.warps_m * self.warp_rows()
    }

    /// Output columns per block (B tile rows).
    pub const fn block_n(self) -> u32 {
        self.warps_n * self.warp_cols()
    }

    /// Tile rows of operand `side`.
    pub const fn rows(self, side: Side) -> u32 {
        match side {
            Side::A => self.block_m(),
            Side::B => self.block_n(),
        }
    }

    /// Bytes of one stage of operand `side` (staged [`Staging::ByRow`]; a [`Staging::ByK`]
    /// stage takes less).
    pub const fn stage_bytes(self, side: Side) -> u32 {
        self.rows(side) * ROW_BYTES
    }

    /// Padded row length in bytes of operand `side` staged [`Staging::ByK`].
    pub const fn k_row_bytes(self, side: Side) -> u32 {
        k_row_bytes(self.rows(side))
    }

    /// Pieces of `piece_bytes` (16, 8, 4 or 2) of one stage of `rows` tile rows each thread
    /// copies ([`Self::piece_slot_bytes`]).
    pub const fn pieces_per_thread(self, rows: u32, piece_bytes: u32) -> u32 {
        rows * (TILE_K_BYTES / piece_bytes) / self.threads()
    }

    /// Tile rows from one piece of a thread to its next ([`Self::piece_slot_bytes`]).
    pub const fn piece_row_stride(self, piece_bytes: u32) -> u32 {
        self.threads() / (TILE_K_BYTES / piece_bytes)
    }

    /// Stage bytes from one piece of a thread to its next: the same for every piece, as
    /// every piece of a thread has the same column.
    pub const fn piece_stride_bytes(self, piece_bytes: u32) -> u32 {
        self.piece_row_stride(piece_bytes) * ROW_BYTES
    }

    /// Piece `i` of thread `tid` of a stage dealt in pieces of `piece_bytes`: its tile row,
    /// its first column and its byte offset within the stage. Piece `j = i · threads + tid`
    /// of the stage is piece `j mod (TILE_K_BYTES / piece_bytes)` of row `j / (TILE_K_BYTES /
    /// piece_bytes)` ([`staged_chunk`]), so the lanes of a warp copy whole row segments
    /// together: a request of 4-byte pieces reads two rows' 64 contiguous bytes (2 or 3
    /// sectors each) rather than 4 bytes at a 16-byte stride from each of eight rows. As the
    /// threads are a multiple of the pieces per row, every piece of a thread has the same
    /// column.
    pub fn piece_slot_bytes(
        self,
        k: &mut KernelBuilder,
        (tid, i): (Reg<U32>, u32),
        elem_bytes: u32,
        piece_bytes: u32,
    ) -> (Reg<U32>, Reg<U32>, Reg<U32>) {
        let per_row = TILE_K_BYTES / piece_bytes;
        let piece = k.add(tid, i * self.threads());
        let (row, in_row) = staged_chunk(k, piece, per_row);
        let col = k.mul_lo(in_row, piece_bytes / elem_bytes);
        let slot = k.mad_lo(row, ROW_BYTES / elem_bytes, col);
        let slot_bytes = k.mul_lo(slot, elem_bytes);
        (row, col, slot_bytes)
    }
}

const _: () = assert!(
    Geometry::SQUARE.block_m() == TILE_M
        && Geometry::SQUARE.block_n() == TILE_N
        && Geometry::SQUARE.threads() == THREADS
        && Geometry::SQUARE.warp_rows() == WARP_TILE
        && Geometry::SQUARE.warp_cols() == WARP_TILE
);

/// Which operand of the tile's GEMM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// `A` (tile rows are the output rows, `m`).
    A,
    /// `B` (tile rows are the output columns, `n`).
    B,
}

/// How an operand's ring stage holds its tile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Staging {
    /// `[row][k]`: each tile row holds its [`TILE_K_BYTES`] of reduction in a [`ROW_BYTES`]
    /// row; read by `ldmatrix` (A) and untransposed `ldmatrix` (B).
    ByRow,
    /// `[k][row]` (f16/bf16 only): each of the [`TILE_K`] reduction indices holds the tile
    /// rows' elements in a [`k_row_bytes`] row; both operands read by `ldmatrix.trans`.
    ByK,
}

/// A warp's accumulators `[mi][ni]` (of mma shape `S`: m16n8k16, or m16n8k8 for tf32).
pub type Accumulators<S = M16N8K16> = Vec<Vec<FragC<S, F32>>>;

/// An operand element type the tile multiplies: its mma shape, its tile depth in elements
/// and the warp's multiply of one staged K tile.
pub trait TileElem: Scalar {
    /// The mma shape its accumulators have.
    type Shape: MmaShapeKind;
    /// The unsigned type of its width, for element copies of raw bits.
    type Bits: Scalar;
    /// Reduction depth per pipeline step, in elements.
    const TILE_K: u32 = TILE_K_BYTES / Self::TYPE.bytes();

    /// The warp's accumulators of the [`Geometry::SQUARE`] tile, zero.
    fn zero_acc(k: &mut KernelBuilder) -> Accumulators<Self::Shape> {
        Self::zero_acc_in(k, Geometry::SQUARE)
    }

    /// The warp's accumulators of geometry `g`, zero.
    fn zero_acc_in(k: &mut KernelBuilder, g: Geometry) -> Accumulators<Self::Shape>;

    /// One K tile of the warp's 32 × 32 quadrant for every B operand (`b_at[o]` → `acc[o]`).
    fn multiply_tile(
        k: &mut KernelBuilder,
        acc: &mut [Accumulators<Self::Shape>],
        a_at: Reg<U32>,
        b_at: &[Reg<U32>],
    ) {
        Self::multiply_tile_in(k, Geometry::SQUARE, acc, a_at, b_at)
    }

    /// [`Self::multiply_tile`] of the warp's quadrant in geometry `g`.
    fn multiply_tile_in(
        k: &mut KernelBuilder,
        g: Geometry,
        acc: &mut [Accumulators<Self::Shape>],
        a_at: Reg<U32>,
        b_at: &[Reg<U32>],
    );

    /// Whether the mma needs its operands converted after they land in shared memory
    /// ([`Self::round_landed`], then [`Self::multiply_landed_tile_in`]): tf32 only.
    const ROUNDS_ON_LANDING: bool = false;

    /// Rewrites in place, in the form the mma takes, the `elems` elements at `[addr+offset]`
    /// this thread copied into a ring slot that has landed (tf32: `cvt.rna.tf32.f32` of each);
    /// nothing for f16/bf16.
    fn round_landed(_k: &mut KernelBuilder, _addr: Reg<U32>, _offset: i32, _elems: u32) {}

    /// [`Self::multiply_tile_in`] of tiles [`Self::round_landed`] already converted.
    fn multiply_landed_tile_in(
        k: &mut KernelBuilder,
        g: Geometry,
        acc: &mut [Accumulators<Self::Shape>],
        a_at: Reg<U32>,
        b_at: &[Reg<U32>],
    ) {
        Self::multiply_tile_in(k, g, acc, a_at, b_at)
    }

    /// Stores outputs `lo`, `hi`, rounded to `Self`, as the two elements at global byte
    /// address `addr + offset` (aligned to the pair).
    fn store_pair(k: &mut KernelBuilder, addr: Reg<U64>, offset: i32, lo: Reg<F32>, hi: Reg<F32>);

    /// Whether operands of this type may be staged [`Staging::ByK`] (`ldmatrix.trans` moves
    /// 16-bit elements only: f16/bf16).
    const STAGES_BY_K: bool = false;

    /// [`Self::multiply_tile_in`] of one B operand with each operand staged as `(at, staging)`
    /// says (the lane's fragment address from [`WarpPos::fragment_offset`]); only
    /// [`Staging::ByRow`] unless [`Self::STAGES_BY_K`].
    fn multiply_staged_tile(
        k: &mut KernelBuilder,
        g: Geometry,
        acc: &mut Accumulators<Self::Shape>,
        a: (Reg<U32>, Staging),
        b: (Reg<U32>, Staging),
    ) {
        assert!(
            a.1 == Staging::ByRow && b.1 == Staging::ByRow,
            "{:?} operands are staged by row only",
            Self::TYPE
        );
        Self::multiply_tile_in(k, g, std::slice::from_mut(acc), a.0, &[b.0])
    }
}

macro_rules! half_tile_elem {
    ($($t:ident),*) => {$(
        impl TileElem for $t {
            type Shape = M16N8K16;
            type Bits = U16;

            fn zero_acc_in(k: &mut KernelBuilder, g: Geometry) -> Accumulators {
                zero_acc_in::<$t>(k, g)
            }

            fn multiply_tile_in(
                k: &mut KernelBuilder,
                g: Geometry,
                acc: &mut [Accumulators],
                a_at: Reg<U32>,
                b_at: &[Reg<U32>],
            ) {
                multiply_tile_in::<$t>(k, g, acc, a_at, b_at)
            }

            const STAGES_BY_K: bool = true;

            fn multiply_staged_tile(
                k: &mut KernelBuilder,
                g: Geometry,
                acc: &mut Accumulators,
                a: (Reg<U32>, Staging),
                b: (Reg<U32>, Staging),
            ) {
                multiply_staged_tile::<$t>(k, g, acc, a, b)
            }

            /// One packed 32-bit word.
            fn store_pair(
                k: &mut KernelBuilder,
                addr: Reg<U64>,
                offset: i32,
                lo: Reg<F32>,
                hi: Reg<F32>,
            ) {
                let pair = k.pack_f32_pair::<$t>(lo, hi);
                let bits = k.pair_bits::<$t>(pair);
                k.st_global(addr, offset, bits);
            }
        }
    )*};
}

half_tile_elem!(F16, BF16);

/// The thread's place in the block: lane, and the warp's quadrant in its geometry.
#[derive(Clone, Copy)]
pub struct WarpPos {
    pub lane: Reg<U32>,
    pub warp_m: Reg<U32>,
    pub warp_n: Reg<U32>,
    /// The block tile the quadrant belongs to.
    pub geometry: Geometry,
}

impl WarpPos {
    /// Reads `tid.x` and splits it for the [`Geometry::SQUARE`] tile.
    pub fn of_thread(k: &mut KernelBuilder) -> (Reg<U32>, Self) {
        Self::of_thread_in(k, Geometry::SQUARE)
    }

    /// Reads `tid.x` and splits it for geometry `g`: warp `w` owns quadrant
    /// `(w / warps_n, w mod warps_n)`.
    pub fn of_thread_in(k: &mut KernelBuilder, g: Geometry) -> (Reg<U32>, Self) {
        assert!(
            g.warps_n.is_power_of_two(),
            "{g:?}: warps_n is a power of two"
        );
        let tid = k.tid_x();
        let lane = k.and(tid, 31u32);
        let warp = k.shr(tid, 5u32);
        let warp_m = k.shr(warp, g.warps_n.trailing_zeros());
        let warp_n = k.and(warp, g.warps_n - 1);
        (
            tid,
            Self {
                lane,
                warp_m,
                warp_n,
                geometry: g,
            },
        )
    }

    /// This lane's `ldmatrix` row addresses within a stage (bytes) of both operands staged
    /// [`Staging::ByRow`] ([`Self::fragment_offset`]).
    pub fn fragment_offsets(&self, k: &mut KernelBuilder, elem_bytes: u32) -> (Reg<U32>, Reg<U32>) {
        (
            self.fragment_offset(k, Side::A, Staging::ByRow, elem_bytes),
            self.fragment_offset(k, Side::B, Staging::ByRow, elem_bytes),
        )
    }

    /// This lane's `ldmatrix` row address within a stage (bytes) for operand `side` staged
    /// as `staging`. Columns count `elem_bytes`-wide elements: 8 halves or 4 f32 per 16-byte
    /// chunk.
    ///
    /// [`Staging::ByRow`]: A at row `wr·warp_m + l % 16`, column `8 · (l / 16)`; B (n-major)
    /// at row `wc·warp_n + 8 · (l / 16) + l % 8`, column `8 · ((l / 8) % 2)`, with `wr × wc`
    /// the geometry's quadrant (32 × 32 for [`Geometry::SQUARE`]).
    ///
    /// [`Staging::ByK`] (f16/bf16): `ldmatrix.x4.trans` matrix `j = l / 8` is 8 reduction
    /// rows × 8 tile rows. For A (registers `a0..a3`: tile rows `+0, +8, +0, +8`, k `+0,
    /// +0, +8, +8`) lane `l` points at k-row `8 · (l / 16) + l % 8`, tile row `32·warp_m +
    /// 8 · ((l / 8) % 2)`; for B (two n8 fragments side by side, each `b0, b1` at k `+0,
    /// +8`, the second 8 tile rows on) at k-row `l % 16`, tile row `32·warp_n + 8 · (l /
    /// 16)`.
    pub fn fragment_offset(
        &self,
        k: &mut KernelBuilder,
        side: Side,
        staging: Staging,
        elem_bytes: u32,
    ) -> Reg<U32> {
        let half = k.shr(self.lane, 4u32);
        let (warp_rows, warp_cols) = (self.geometry.warp_rows(), self.geometry.warp_cols());
        match staging {
            Staging::ByRow => {
                let (chunk, row) = (CHUNK_BYTES / elem_bytes, ROW_BYTES / elem_bytes);
                let (tile_row, col) = match side {
                    Side::A => {
                        let l16 = k.and(self.lane, 15u32);
                        let a_row = k.mad_lo(self.warp_m, warp_rows, l16);
                        (a_row, k.mul_lo(half, chunk))
                    }
                    Side::B => {
                        let l8 = k.and(self.lane, 7u32);
                        let b_row = k.mad_lo(half, 8u32, l8);
                        let b_row = k.mad_lo(self.warp_n, warp_cols, b_row);
                        let which = k.shr(self.lane, 3u32);
                        let which = k.and(which, 1u32);
                        (b_row, k.mul_lo(which, chunk))
                    }
                };
                let slot = k.mad_lo(tile_row, row, col);
                k.mul_lo(slot, elem_bytes)
            }
            Staging::ByK => {
                assert_eq!(elem_bytes, 2, "ldmatrix.trans moves 16-bit elements");
                let (k_row, tile_row) = match side {
                    Side::A => {
                        let l8 = k.and(self.lane, 7u32);
                        let k_row = k.mad_lo(half, 8u32, l8);
                        let right = k.shr(self.lane, 3u32);
                        let right = k.and(right, 1u32);
                        let right = k.mul_lo(right, 8u32);
                        (k_row, k.mad_lo(self.warp_m, warp_rows, right))
                    }
                    Side::B => {
                        let k_row = k.and(self.lane, 15u32);
                        let right = k.mul_lo(half, 8u32);
                        (k_row, k.mad_lo(self.warp_n, warp_cols, right))
                    }
                };
                let row_bytes = k.mul_lo(tile_row, elem_bytes);
                k.mad_lo(k_row, self.geometry.k_row_bytes(side), row_bytes)
            }
        }
    }

    /// The epilogue coordinates: accumulator `(mi, ni)` register `2·h + j` is the output at
    /// tile row `row0 + 16·mi + 8·h`, tile column `col0 + 8·ni + j`.
    pub fn output_origin(&self, k: &mut KernelBuilder) -> (Reg<U32>, Reg<U32>) {
        let quad_row = k.shr(self.lane, 2u32);
        let quad = k.and(self.lane, 3u32);
        let row0 = k.mad_lo(self.warp_m, self.geometry.warp_rows(), quad_row);
        let warp_col = k.mul_lo(self.warp_n, self.geometry.warp_cols());
        let col0 = k.mad_lo(quad, 2u32, warp_col);
        (row0, col0)
    }
}

/// Chunk `i` of [`CHUNKS_PER_THREAD`] of thread `tid`: its tile row, its first column and its
/// byte offset within a stage ([`piece_slot_bytes`] with 16-byte pieces).
pub fn chunk_slot_bytes(
    k: &mut KernelBuilder,
    (tid, i): (Reg<U32>, u32),
    elem_bytes: u32,
) -> (Reg<U32>, Reg<U32>, Reg<U32>) {
    piece_slot_bytes(k, (tid, i), elem_bytes, CHUNK_BYTES)
}

/// A thread's share of a stage staged [`Staging::ByK`] ([`by_k_chunks`]).
pub struct ByKChunks {
    /// The reduction row all its chunks lie in.
    pub k_row: Reg<U32>,
    /// Per chunk, its first tile row and its byte offset in the stage.
    pub chunks: Vec<(Reg<U32>, Reg<U32>)>,
}

/// Thread `tid`'s share (of [`THREADS`]) of a stage of `rows` tile rows (64 or 128) staged
/// [`Staging::ByK`]: its reduction row, and per chunk `i` of `rows / 32` the chunk's first
/// tile row and byte offset in the stage. All of a thread's chunks lie in one reduction row
/// (one address computation per operand and tile): four threads share a row, thread `t`
/// taking chunks `t mod 4 + 4i` (tile rows `8·(t mod 4 + 4i)..+8`), so a request reads 64
/// contiguous bytes (whole sectors) of each row it touches. A quarter-warp takes rows `r`
/// and `r + 4` (`r = (t / 8) mod 4 + 8·(t / 32)`): row `r + 1` starts `rows / 2 + 4` words
/// (4 banks) after row `r` ([`k_row_bytes`]), so its four chunks would share 12 banks with
/// row `r`'s, while row `r + 4` starts 16 banks on and its four chunks fill exactly the
/// banks the other four leave: every `cp.async` write phase is conflict-free.
pub fn by_k_chunks(k: &mut KernelBuilder, tid: Reg<U32>, rows: u32) -> ByKChunks {
    assert!(
        rows.is_multiple_of(64),
        "{rows} rows: rows r and r + 4 start 16 banks apart"
    );
    let quad = k.shr(tid, 3u32);
    let quad = k.and(quad, 3u32);
    let second = k.shr(tid, 2u32);
    let second = k.and(second, 1u32);
    let warp = k.shr(tid, 5u32);
    let k_row = k.mad_lo(second, 4u32, quad);
    let k_row = k.mad_lo(warp, 8u32, k_row);
    let row_at = k.mul_lo(k_row, k_row_bytes(rows));
    let in_row = k.and(tid, 3u32);
    let chunks = (0..rows / 32)
        .map(|i| {
            let chunk = k.add(in_row, 4 * i);
            let first_row = k.mul_lo(chunk, CHUNK);
            let slot_bytes = k.mad_lo(chunk, CHUNK_BYTES, row_at);
            (first_row, slot_bytes)
        })
        .collect();
    ByKChunks { k_row, chunks }
}

const _: () = assert!(
    THREADS == 4 * TILE_K,
    "by_k_chunks deals 4 threads per reduction row"
);

/// Piece `i` of thread `tid` of the [`Geometry::SQUARE`] tile: its tile row, its first column and its byte offset within a
/// stage ([`Geometry::piece_slot_bytes`]).
pub fn piece_slot_bytes(
    k: &mut KernelBuilder,
    (tid, i): (Reg<U32>, u32),
    elem_bytes: u32,
    piece_bytes: u32,
) -> (Reg<U32>, Reg<U32>, Reg<U32>) {
    Geometry::SQUARE.piece_slot_bytes(k, (tid, i), elem_bytes, piece_bytes)
}

/// Tile `(row, chunk column)` of 16-byte staging chunk `c` (`c % 32` the lane that copies it)
/// in a shared tile of `per_row` chunks per row.
///
/// A 16-byte shared access — a `cp.async` chunk's write, a `st.shared.v4`, an in-place
/// pass's `ld`/`st.shared.v4` — is served in quarter-warps of 8 lanes. Dealt row-major, a
/// tile narrower than 8 chunks would give a quarter-warp `8 / per_row` rows of one 16-byte
/// column span each, and with rows padded for `ldmatrix` (80 bytes: 20 words) two rows 20
/// words apart overlap in 4 banks: 2-way conflicts (the MoE expert GEMM's copies measured
/// 2.0 wavefronts per fewest). So there each warp's 32 chunks, still the same `32 / per_row`
/// whole rows (the same global sectors per request), are dealt column-major: lane `l` takes
/// row `l % (32 / per_row)`, chunk `l / (32 / per_row)`, and a quarter-warp reads one chunk
/// column of 8 consecutive rows, which start on 8 distinct 4-bank groups exactly when an
/// `ldmatrix` phase's rows do.
pub fn staged_chunk(k: &mut KernelBuilder, c: Reg<U32>, per_row: u32) -> (Reg<U32>, Reg<U32>) {
    if per_row >= 8 {
        return (k.div_int(c, per_row), k.rem(c, per_row));
    }
    let rows_per_warp = 32 / per_row;
    let lane = k.and(c, 31u32);
    let warp_first = k.sub(c, lane);
    let warp_row = k.div_int(warp_first, per_row);
    let row_in_warp = k.rem(lane, rows_per_warp);
    let row = k.add(warp_row, row_in_warp);
    (row, k.div_int(lane, rows_per_warp))
}

/// Shared byte address of ring slot `slot` of `tiles` ([`STAGES`] × [`STAGE_BYTES`]).
pub fn stage_base<T: Scalar>(
    k: &mut KernelBuilder,
    tiles: SharedArr<T>,
    slot: Reg<U32>,
) -> Reg<U32> {
    stage_base_of(k, tiles, slot, STAGE_BYTES)
}

/// Shared byte address of ring slot `slot` of `tiles`, slots `stage_bytes` apart.
pub fn stage_base_of<T: Scalar>(
    k: &mut KernelBuilder,
    tiles: SharedArr<T>,
    slot: Reg<U32>,
    stage_bytes: u32,
) -> Reg<U32> {
    let base = k.shared_base(tiles);
    k.mad_lo(slot, stage_bytes, base)
}

/// A ring of [`STAGES`] operand tiles.
pub fn ring<T: Scalar>(k: &mut KernelBuilder, name: &str) -> SharedArr<T> {
    ring_in::<T>(k, name, Geometry::SQUARE, Side::A)
}

/// The ring of operand `side`'s tiles in geometry `g` (`g.stages` slots of
/// [`Geometry::stage_bytes`]).
pub fn ring_in<T: Scalar>(
    k: &mut KernelBuilder,
    name: &str,
    g: Geometry,
    side: Side,
) -> SharedArr<T> {
    k.shared_array::<T>(name, g.stages * g.stage_bytes(side) / T::TYPE.bytes())
}

/// The warp's accumulators of geometry `g`, zero.
pub fn zero_acc_in<T: PackedHalf>(k: &mut KernelBuilder, g: Geometry) -> Accumulators
where
    M16N8K16: MmaInput<T>,
{
    (0..g.warp_m_tiles)
        .map(|_| {
            (0..g.warp_n_tiles)
                .map(|_| k.frag_c_zero::<M16N8K16, T, F32>())
                .collect()
        })
        .collect()
}

/// Fills ring slot `slot` (second argument) with K tile `tile` (first argument).
pub type FillFn<'a> = &'a dyn Fn(&mut KernelBuilder, Reg<U32>, Reg<U32>);

/// The ring around `multiply(k, slot)` over `k_tiles` K tiles (a block-uniform count,
/// compile-time or run-time): prologue, per-tile wait + barrier + refill
/// (`fill(k, tile, slot)`), final `wait_all`.
pub fn run_ring(
    k: &mut KernelBuilder,
    k_tiles: impl Into<Val<U32>>,
    fill: FillFn<'_>,
    multiply: &mut dyn FnMut(&mut KernelBuilder, Reg<U32>),
) {
    run_ring_landing(k, k_tiles, fill, None, multiply);
}

/// Works on ring slot `slot` once this thread's copies into it have landed.
pub type LandedFn<'a> = &'a dyn Fn(&mut KernelBuilder, Reg<U32>);

/// [`run_ring`] with `landed(k, slot)` run by every thread between the wait for the slot's
/// copies and the barrier that publishes it, where a thread may rewrite what it copied itself
/// (tf32 operands rounded once in shared memory: [`TileElem::round_landed`]).
pub fn run_ring_landing(
    k: &mut KernelBuilder,
    k_tiles: impl Into<Val<U32>>,
    fill: FillFn<'_>,
    landed: Option<LandedFn<'_>>,
    multiply: &mut dyn FnMut(&mut KernelBuilder, Reg<U32>),
) {
    run_ring_of(k, STAGES, k_tiles, fill, landed, multiply);
}

/// [`run_ring_landing`] with a ring of `stages` slots ([`Geometry::stages`]).
pub fn run_ring_of(
    k: &mut KernelBuilder,
    stages: u32,
    k_tiles: impl Into<Val<U32>>,
    fill: FillFn<'_>,
    landed: Option<LandedFn<'_>>,
    multiply: &mut dyn FnMut(&mut KernelBuilder, Reg<U32>),
) {
    assert!(stages >= 2, "a ring needs two slots");
    let k_tiles = k_tiles.into();
    k.comment("prologue: start the first stages");
    for s in 0..stages - 1 {
        let tile = k.var::<U32>(s);
        let present = k.setp_lt(tile, k_tiles);
        k.if_then(present, |k| fill(k, tile, tile));
        k.cp_async_commit();
    }
    k.for_range(0u32, k_tiles, 1u32, |k, tile| {
        k.comment("wait for this tile, then refill the slot freed last iteration");
        k.cp_async_wait_group(stages - 2);
        let landed_slot = landed.map(|landed| {
            let slot = k.rem(tile, stages);
            landed(k, slot);
            slot
        });
        k.bar_sync();
        let next = k.add(tile, stages - 1);
        let present = k.setp_lt(next, k_tiles);
        k.if_then(present, |k| {
            let slot = k.rem(next, stages);
            fill(k, next, slot);
        });
        k.cp_async_commit();
        k.comment("multiply the tile on the tensor cores");
        let slot = landed_slot.unwrap_or_else(|| k.rem(tile, stages));
        multiply(k, slot);
    });
    k.cp_async_wait_all();
}

/// One K tile of the warp's quadrant in geometry `g` with each operand staged as `(at,
/// staging)` says (`at`: the stage plus the lane's [`WarpPos::fragment_offset`]):
/// [`multiply_tile_in`] of one B operand, each fragment read by `ldmatrix.x4` untransposed
/// from a [`Staging::ByRow`] stage and `.trans` from a [`Staging::ByK`] one. The mma chain
/// per accumulator runs over `k` in the same order either way.
pub fn multiply_staged_tile<T: PackedHalf>(
    k: &mut KernelBuilder,
    g: Geometry,
    acc: &mut Accumulators,
    a: (Reg<U32>, Staging),
    (b_at, b_staging): (Reg<U32>, Staging),
) where
    M16N8K16: MmaInput<T>,
{
    multiply_staged::<T>(k, g, std::slice::from_mut(acc), a, (&[b_at], b_staging));
}

/// One K tile of the warp's quadrant in geometry `g` for every B operand (`b_at[o]` →
/// `acc[o]`; MoE's SwiGLU shares the A fragments between W1 and W3): per 16-deep slice `wm`
/// A fragments (`ldmatrix.x4`), `wn` B fragments per operand (`wn / 2` untransposed
/// `ldmatrix.x4`), `wm · wn` `mma.m16n8k16` per operand (2, 4 and 8 in the 32 × 32
/// quadrant of [`Geometry::SQUARE`]).
pub fn multiply_tile_in<T: PackedHalf>(
    k: &mut KernelBuilder,
    g: Geometry,
    acc: &mut [Accumulators],
    a_at: Reg<U32>,
    b_at: &[Reg<U32>],
) where
    M16N8K16: MmaInput<T>,
{
    multiply_staged::<T>(k, g, acc, (a_at, Staging::ByRow), (b_at, Staging::ByRow));
}

/// [`multiply_tile_in`] with the A stage and every B stage staged as given.
fn multiply_staged<T: PackedHalf>(
    k: &mut KernelBuilder,
    g: Geometry,
    acc: &mut [Accumulators],
    (a_at, a_staging): (Reg<U32>, Staging),
    (b_at, b_staging): (&[Reg<U32>], Staging),
) where
    M16N8K16: MmaInput<T>,
{
    let bytes = T::TYPE.bytes();
    // Byte offset of fragment (pair) `i` of operand `side`, 16 tile rows each, in K slice
    // `ks` (16 deep).
    let offset = |(side, staging), i: u32, ks: u32| -> i32 {
        let at = match staging {
            Staging::ByRow => (i * 16 * ROW + ks * 16) * bytes,
            Staging::ByK => ks * 16 * g.k_row_bytes(side) + i * 16 * bytes,
        };
        at as i32
    };
    for ks in 0..TILE_K / 16 {
        let a: Vec<FragA<M16N8K16, T>> = (0..g.warp_m_tiles)
            .map(|mi| match a_staging {
                Staging::ByRow => k.ldmatrix(a_at, offset((Side::A, a_staging), mi, ks)),
                Staging::ByK => k.ldmatrix_trans(a_at, offset((Side::A, a_staging), mi, ks)),
            })
            .collect();
        for (&b_at, acc) in b_at.iter().zip(acc.iter_mut()) {
            let b: Vec<FragB<M16N8K16, T>> = (0..g.warp_n_tiles / 2)
                .flat_map(|pair| {
                    let at = offset((Side::B, b_staging), pair, ks);
                    let (lo, hi) = match b_staging {
                        Staging::ByRow => k.ldmatrix_b_pair::<T>(b_at, at),
                        Staging::ByK => k.ldmatrix_b_pair_trans::<T>(b_at, at),
                    };
                    [lo, hi]
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
