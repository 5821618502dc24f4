//! Tensor-core GEMM samples: `C[M, N] (f32) = A[M, K] · B[K, N]`, A and B row-major f16/bf16
//! (here) or f32 on tf32 tensor cores ([`tf32_gemm`]), sharing the block setup, copy chunks and
//! `cp.async` K loop ([`BlockShape`], `Gemm`); one warp's tf32 `m16n8k8` tile
//! ([`mma_tf32_tile`]), fragments loaded lane by lane; one warp's f16-accumulating `m16n8k16`
//! tile ([`mma_f16_accumulate_tile`]); and the register packing the fragments need
//! ([`pack_f32_pairs`]).
//!
//! A block of [`TC_BLOCK_THREADS`] threads (4 warps, 2 × 2) computes a
//! [`TC_TILE_M`] × [`TC_TILE_N`] output tile; each warp a 32 × 32 quarter as 2 × 4 accumulators
//! of 16 × 8. K advances [`TC_TILE_K`] at a time.
//!
//! * **sm_80+** (`gemm_tc_{f16,bf16}_m16n8k16`): A and B tiles go global → shared by `cp.async`
//!   in a [`TC_STAGES`]-stage ring: tiles `t + 1` and `t + 2` are in flight while tile `t` is
//!   multiplied (`wait_group 1` + `bar.sync` before each tile, one commit per tile even when
//!   empty so the group count stays uniform). A fragments come from `ldmatrix.x4`, B fragments
//!   from `ldmatrix.x4.trans` (two n8 columns at once), then `mma.m16n8k16`.
//! * **sm_75** (`gemm_tc_f16_m16n8k8`): no `cp.async`, so each tile is loaded synchronously
//!   (`ld.global.v4` → `st.shared.v4`); `ldmatrix.x2` for A, `.x1.trans` for B, `mma.m16n8k8`.
//!
//! Shared rows are padded by 8 halves (16 bytes): A rows are 80 bytes apart, B rows 144, so the
//! eight 16-byte rows one `ldmatrix` phase reads start on eight distinct groups of four banks
//! (80 B = 20 words → offsets 0, 20, 8, 28, 16, 4, 24, 12 mod 32) and do not conflict.
//!
//! Ragged shapes: M is arbitrary; N and K must be multiples of 8, because every copy moves 16
//! aligned bytes (8 halves) of a row. A chunk past the matrix edge is zero-filled (`cp.async`
//! src-size 0, or zeros stored on sm_75) and reads from the matrix base so that no lane forms an
//! out-of-bounds address; outputs are stored only inside `M × N`.

mod tf32_gemm;

pub(super) use tf32_gemm::gemm_m16n8k8_tf32;
pub use tf32_gemm::TF32_TILING;

use super::index_bound::sample_kernel;
use super::{GemmParams, GemmTiling};
use crate::arch::Arch;
use crate::builder::{
    FragA, FragB, FragC, GlobalPtr, KernelBuilder, MmaInput, PackedHalf, Pred, Reg, Scalar,
    SharedArr, BF16, F16, F32, M16N8K16, M16N8K8, TF32, U32, U64,
};
use crate::ir::CacheLevel;
use crate::templates::warp_mma::staged_chunk;

/// Output rows per block.
pub const TC_TILE_M: u32 = 64;
/// Output columns per block.
pub const TC_TILE_N: u32 = 64;
/// K per pipeline step.
pub const TC_TILE_K: u32 = 32;
/// Threads per block (4 warps).
pub const TC_BLOCK_THREADS: u32 = 128;
/// Pipeline depth of the sm_80 kernels.
pub const TC_STAGES: u32 = 3;
/// Bytes of one copy chunk (one `cp.async`, one `ldmatrix` row).
const CHUNK_BYTES: u32 = 16;
/// Halves per 16-byte copy chunk.
const CHUNK: u32 = CHUNK_BYTES / 2;
/// Padded shared row lengths (halves).
const A_STRIDE: u32 = TC_TILE_K + 8;
const B_STRIDE: u32 = TC_TILE_N + 8;
/// Each warp's 32 × 32 output as 2 (m16) × 4 (n8) accumulators.
const WARP_M_TILES: u32 = 2;
const WARP_N_TILES: u32 = 4;
const WARP_TILE: u32 = 32;

/// How a GEMM sample's block tiles `C` and stages `A` and `B` (in elements of its input type).
struct BlockShape {
    /// Output rows and columns per block, K per pipeline step.
    tile_m: u32,
    tile_n: u32,
    tile_k: u32,
    threads: u32,
    /// Warps side by side along N (the others stack along M).
    warps_n: u32,
    /// Output rows and columns per warp.
    warp_m: u32,
    warp_n: u32,
    /// Padded shared row lengths of the A (`tile_m × tile_k`) and B (`tile_k × tile_n`) tiles.
    a_stride: u32,
    b_stride: u32,
    /// Ring slots of each tile.
    stages: u32,
}

impl BlockShape {
    const fn a_tile_elems(&self) -> u32 {
        self.tile_m * self.a_stride
    }

    const fn b_tile_elems(&self) -> u32 {
        self.tile_k * self.b_stride
    }

    /// The launch tiling callers see.
    const fn tiling(&self) -> GemmTiling {
        GemmTiling {
            tile_m: self.tile_m,
            tile_n: self.tile_n,
            threads: self.threads,
        }
    }
}

/// The f16/bf16 samples' shape on sm_80+ (see the module doc).
const HALF_SHAPE: BlockShape = BlockShape {
    tile_m: TC_TILE_M,
    tile_n: TC_TILE_N,
    tile_k: TC_TILE_K,
    threads: TC_BLOCK_THREADS,
    warps_n: 2,
    warp_m: WARP_TILE,
    warp_n: WARP_TILE,
    a_stride: A_STRIDE,
    b_stride: B_STRIDE,
    stages: TC_STAGES,
};

/// The sm_75 sample: the same tiles in a single slot.
const HALF_SHAPE_SM75: BlockShape = BlockShape {
    stages: 1,
    ..HALF_SHAPE
};

/// The launch tiling of the f16/bf16 tensor-core GEMM samples.
pub const TC_TILING: GemmTiling = HALF_SHAPE.tiling();

/// Everything the phases of one GEMM kernel share: parameters, shared tiles and this thread's
/// place in the block.
struct Gemm<T: Scalar> {
    p: GemmParams<T>,
    shape: &'static BlockShape,
    a_tiles: SharedArr<T>,
    b_tiles: SharedArr<T>,
    lane: Reg<U32>,
    warp_m: Reg<U32>,
    warp_n: Reg<U32>,
    block_row: Reg<U32>,
    block_col: Reg<U32>,
    a_chunks: Vec<ChunkPlace>,
    b_chunks: Vec<ChunkPlace>,
}

/// Where one of this thread's 16-byte copy chunks sits, fixed for the whole K loop: chunk
/// `c = tid + i · threads` of a tile with `per_row` chunks per row is at tile row
/// dealt by [`staged_chunk`] (a quarter-warp's 16-byte accesses, `cp.async` writes and
/// `st.shared.v4` alike, on one chunk column of 8 rows: no bank conflict).
struct ChunkPlace {
    /// The global coordinate that does not move with K (A: the row, B: the column).
    fixed: Reg<U32>,
    /// The coordinate along K within the tile (A: the column, B: the row).
    along_k: Reg<U32>,
    /// Byte offset of the chunk within a stage.
    slot_bytes: Reg<U32>,
}

impl ChunkPlace {
    /// This thread's chunks of a `tile_rows × tile_cols` tile stored with row `stride`;
    /// `fixed_is_row` says whether the row (A) or the column (B) is the non-K coordinate,
    /// offset by `fixed0`.
    fn all<T: Scalar>(
        k: &mut KernelBuilder,
        (tid, threads): (Reg<U32>, u32),
        (tile_rows, tile_cols, stride): (u32, u32, u32),
        fixed_is_row: bool,
        fixed0: Reg<U32>,
    ) -> Vec<Self> {
        let per_row = tile_cols / chunk_elems::<T>();
        (0..tile_rows * per_row / threads)
            .map(|i| {
                let c = k.add(tid, i * threads);
                let (row, chunk) = staged_chunk(k, c, per_row);
                let col = k.mul_lo(chunk, chunk_elems::<T>());
                let slot = k.mad_lo(row, stride, col);
                let slot_bytes = k.mul_lo(slot, T::TYPE.bytes());
                let (fixed, along_k) = if fixed_is_row { (row, col) } else { (col, row) };
                let fixed = k.add(fixed0, fixed);
                ChunkPlace {
                    fixed,
                    along_k,
                    slot_bytes,
                }
            })
            .collect()
    }
}

/// Elements of `T` per 16-byte chunk.
const fn chunk_elems<T: Scalar>() -> u32 {
    CHUNK_BYTES / T::TYPE.bytes()
}

/// One chunk copy's `(shared address, global address, in bounds)` for the chunk at global
/// `(row, col)` of a row-major `rows × cols` matrix.
fn chunk_copy<T: Scalar>(
    k: &mut KernelBuilder,
    src: GlobalPtr<T>,
    (rows, cols): (Reg<U32>, Reg<U32>),
    (row, col): (Reg<U32>, Reg<U32>),
    stage: Reg<U32>,
    slot_bytes: Reg<U32>,
) -> (Reg<U32>, Reg<U64>, Pred) {
    let dst = k.add(stage, slot_bytes);
    let row_ok = k.setp_lt(row, rows);
    let col_ok = k.setp_lt(col, cols);
    let ok = k.and_pred(row_ok, col_ok);
    let index = k.mad_lo(row, cols, col);
    let index = k.selp(index, 0u32, ok);
    (dst, k.elem_addr(src, index), ok)
}

impl<T: Scalar> Gemm<T> {
    /// Declares parameters and shared tiles (`shape.stages` copies of each) and locates the
    /// thread: warp `w` computes the warp tile at row `w / warps_n`, column `w % warps_n`.
    fn setup(k: &mut KernelBuilder, shape: &'static BlockShape) -> Self {
        debug_assert!(shape.warps_n.is_power_of_two());
        k.require_block([shape.threads, 1, 1]);
        let p = GemmParams::<T>::declare(k);
        let a_tiles = k.shared_array::<T>("a_tiles", shape.stages * shape.a_tile_elems());
        let b_tiles = k.shared_array::<T>("b_tiles", shape.stages * shape.b_tile_elems());
        let tid = k.tid_x();
        let lane = k.and(tid, 31u32);
        let warp = k.shr(tid, 5u32);
        let warp_m = k.shr(warp, shape.warps_n.trailing_zeros());
        let warp_n = k.and(warp, shape.warps_n - 1);
        let (bx, by) = (k.ctaid_x(), k.ctaid_y());
        let block_row = k.mul_lo(by, shape.tile_m);
        let block_col = k.mul_lo(bx, shape.tile_n);
        let threads = (tid, shape.threads);
        let a_tile = (shape.tile_m, shape.tile_k, shape.a_stride);
        let a_chunks = ChunkPlace::all::<T>(k, threads, a_tile, true, block_row);
        let b_tile = (shape.tile_k, shape.tile_n, shape.b_stride);
        let b_chunks = ChunkPlace::all::<T>(k, threads, b_tile, false, block_col);
        Self {
            p,
            shape,
            a_tiles,
            b_tiles,
            lane,
            warp_m,
            warp_n,
            block_row,
            block_col,
            a_chunks,
            b_chunks,
        }
    }

    /// `ceil(K / tile_k)`.
    fn k_tiles(&self, k: &mut KernelBuilder) -> Reg<U32> {
        let rounded = k.add(self.p.k, self.shape.tile_k - 1);
        k.div_int(rounded, self.shape.tile_k)
    }

    /// Shared byte address of stage `stage` of a tile array of `elems` per stage.
    fn stage_base(
        k: &mut KernelBuilder,
        tiles: SharedArr<T>,
        elems: u32,
        stage: Reg<U32>,
    ) -> Reg<U32> {
        let base = k.shared_base(tiles);
        k.mad_lo(stage, elems * T::TYPE.bytes(), base)
    }

    /// The chunks of the next tile this thread copies, as `(shared byte address, global
    /// address, in bounds)`: A chunks at `(block_row + row, k0 + col)` of the `M × K` matrix,
    /// B chunks at `(k0 + row, block_col + col)` of `K × N`. Out of bounds a chunk reads
    /// element 0 (and the copy is told to read nothing).
    fn both_tiles(
        &self,
        k: &mut KernelBuilder,
        k_tile: Reg<U32>,
        a_stage: Reg<U32>,
        b_stage: Reg<U32>,
    ) -> Vec<(Reg<U32>, Reg<U64>, Pred)> {
        let k0 = k.mul_lo(k_tile, self.shape.tile_k);
        let mut out = Vec::new();
        for c in &self.a_chunks {
            let gcol = k.add(k0, c.along_k);
            let at = (c.fixed, gcol);
            out.push(chunk_copy(
                k,
                self.p.a,
                (self.p.m, self.p.k),
                at,
                a_stage,
                c.slot_bytes,
            ));
        }
        for c in &self.b_chunks {
            let grow = k.add(k0, c.along_k);
            let at = (grow, c.fixed);
            out.push(chunk_copy(
                k,
                self.p.b,
                (self.p.k, self.p.n),
                at,
                b_stage,
                c.slot_bytes,
            ));
        }
        out
    }

    /// Issues the `cp.async` copies of K tile `k_tile` into ring slot `stage` (16 bytes per
    /// chunk, zero-filled outside the matrices).
    fn load_tile_async(&self, k: &mut KernelBuilder, k_tile: Reg<U32>, stage: Reg<U32>) {
        let (a_stage, b_stage) = self.stage_bases(k, stage);
        for (dst, src, ok) in self.both_tiles(k, k_tile, a_stage, b_stage) {
            let bytes = k.selp(CHUNK_BYTES, 0u32, ok);
            k.cp_async_zfill(CacheLevel::Cg, dst, src, CHUNK_BYTES, bytes);
        }
    }

    /// Shared byte addresses of ring slot `stage` of the A and B tiles.
    fn stage_bases(&self, k: &mut KernelBuilder, stage: Reg<U32>) -> (Reg<U32>, Reg<U32>) {
        let a_stage = Self::stage_base(k, self.a_tiles, self.shape.a_tile_elems(), stage);
        let b_stage = Self::stage_base(k, self.b_tiles, self.shape.b_tile_elems(), stage);
        (a_stage, b_stage)
    }

    /// The sm_80 K loop: the first `stages − 1` tiles start in a prologue; then per tile `t`
    /// in ring slot `t % stages`: `cp.async.wait_group stages − 2` (tile `t` has landed for
    /// this thread), `landed(slot)` (work on this thread's own chunks of it), `bar.sync`
    /// (every thread's chunks are in and every warp is done with tile `t − 1`), start tile
    /// `t + stages − 1` into the slot tile `t − 1` freed (one commit per tile, even empty, so
    /// the group count stays uniform), and `multiply(a_stage, b_stage)`.
    fn pipelined_k_loop(
        &self,
        k: &mut KernelBuilder,
        k_tiles: Reg<U32>,
        landed: impl Fn(&mut KernelBuilder, &Self, Reg<U32>),
        mut multiply: impl FnMut(&mut KernelBuilder, Reg<U32>, Reg<U32>),
    ) {
        let stages = self.shape.stages;
        debug_assert!(stages >= 2, "a ring of at least two slots");
        k.comment("prologue: start the first stages");
        for s in 0..stages - 1 {
            let tile = k.var::<U32>(s);
            let present = k.setp_lt(tile, k_tiles);
            k.if_then(present, |k| self.load_tile_async(k, tile, tile));
            k.cp_async_commit();
        }
        k.for_range(0u32, k_tiles, 1u32, |k, tile| {
            k.comment("wait for this tile, then refill the slot freed last iteration");
            let slot = k.rem(tile, stages);
            k.cp_async_wait_group(stages - 2);
            landed(k, self, slot);
            k.bar_sync();
            let next = k.add(tile, stages - 1);
            let present = k.setp_lt(next, k_tiles);
            k.if_then(present, |k| {
                let next_slot = k.rem(next, stages);
                self.load_tile_async(k, next, next_slot);
            });
            k.cp_async_commit();
            k.comment("multiply the tile on the tensor cores");
            let (a_stage, b_stage) = self.stage_bases(k, slot);
            multiply(k, a_stage, b_stage);
        });
        k.cp_async_wait_all();
    }

    /// Loads K tile `k_tile` into the single stage with ordinary loads and stores (sm_75).
    fn load_tile_sync(&self, k: &mut KernelBuilder, k_tile: Reg<U32>) {
        let zero = k.var::<U32>(0u32);
        let (a_stage, b_stage) = self.stage_bases(k, zero);
        for (dst, src, ok) in self.both_tiles(k, k_tile, a_stage, b_stage) {
            let vals = [
                k.var::<U32>(0u32),
                k.var::<U32>(0u32),
                k.var::<U32>(0u32),
                k.var::<U32>(0u32),
            ];
            k.if_then(ok, |k| {
                let loaded = k.ld_global_v4::<U32>(src, 0, true);
                for (v, l) in vals.iter().zip(loaded) {
                    k.assign(*v, l);
                }
            });
            k.st_shared_v4(dst, 0, vals);
        }
    }

    /// This lane's `ldmatrix` row address inside a tile for 16-row fragments: row
    /// `row0 + lane % 16`, column `col0 + (16 bytes) · (lane / 16)` of a row-major tile of
    /// `stride`.
    fn lane_matrix_offset(
        &self,
        k: &mut KernelBuilder,
        row0: Reg<U32>,
        col0: Reg<U32>,
        stride: u32,
    ) -> Reg<U32> {
        let lane_row = k.and(self.lane, 15u32);
        let half = k.shr(self.lane, 4u32);
        let row = k.add(row0, lane_row);
        let col = k.mad_lo(half, chunk_elems::<T>(), col0);
        let slot = k.mad_lo(row, stride, col);
        k.mul_lo(slot, T::TYPE.bytes())
    }

    /// Byte offset of this lane's A `ldmatrix` row within a stage (warp tile included):
    /// `[warp_m · warp rows + lane % 16][(16 bytes) · (lane / 16)]`.
    fn a_fragment_offset(&self, k: &mut KernelBuilder, zero: Reg<U32>) -> Reg<U32> {
        let a_row0 = k.mul_lo(self.warp_m, self.shape.warp_m);
        self.lane_matrix_offset(k, a_row0, zero, self.shape.a_stride)
    }

    /// Byte offsets of this lane's A and B `ldmatrix` rows within a stage (warp quadrant
    /// included): A at `[32·warp_m + lane % 16][8 · (lane / 16)]`, B at
    /// `[lane % 16][32·warp_n + 8 · (lane / 16)]`.
    fn fragment_offsets(&self, k: &mut KernelBuilder) -> (Reg<U32>, Reg<U32>) {
        let zero = k.var::<U32>(0u32);
        let a_off = self.a_fragment_offset(k, zero);
        let b_col0 = k.mul_lo(self.warp_n, WARP_TILE);
        let b_off = self.lane_matrix_offset(k, zero, b_col0, B_STRIDE);
        (a_off, b_off)
    }

    /// Bounds-checked stores of the warp's accumulators: accumulator `(mi, ni)` covers rows
    /// `block_row + 32·warp_m + 16·mi + {lane/4, lane/4 + 8}`, columns
    /// `block_col + 32·warp_n + 8·ni + 2·(lane % 4) + {0, 1}`.
    fn store(&self, k: &mut KernelBuilder, acc: &[Vec<FragC<impl Sized, F32>>]) {
        k.comment("store the accumulators inside M x N");
        let group = k.shr(self.lane, 2u32);
        let quad = k.and(self.lane, 3u32);
        let warp_row = k.mad_lo(self.warp_m, WARP_TILE, self.block_row);
        let row_base = k.add(warp_row, group);
        let warp_col = k.mad_lo(self.warp_n, WARP_TILE, self.block_col);
        let col_base = k.mad_lo(quad, 2u32, warp_col);
        for (mi, row_accs) in acc.iter().enumerate() {
            for (ni, frag) in row_accs.iter().enumerate() {
                let regs = frag.f32_regs();
                for half in 0..2u32 {
                    let row = k.add(row_base, mi as u32 * 16 + half * 8);
                    let row_ok = k.setp_lt(row, self.p.m);
                    for j in 0..2u32 {
                        let col = k.add(col_base, ni as u32 * 8 + j);
                        let col_ok = k.setp_lt(col, self.p.n);
                        let ok = k.and_pred(row_ok, col_ok);
                        let v = regs[(2 * half + j) as usize];
                        k.if_then(ok, |k| {
                            let index = k.mad_lo(row, self.p.n, col);
                            let addr = k.elem_addr(self.p.c, index);
                            k.st_global(addr, 0, v);
                        });
                    }
                }
            }
        }
    }
}

/// The warp's 2 × 4 f32 accumulators, zeroed.
fn zero_accumulators<S: MmaInput<T>, T: Scalar>(k: &mut KernelBuilder) -> Vec<Vec<FragC<S, F32>>> {
    (0..WARP_M_TILES)
        .map(|_| {
            (0..WARP_N_TILES)
                .map(|_| k.frag_c_zero::<S, T, F32>())
                .collect()
        })
        .collect()
}

/// The sm_80+ kernel: 3-stage `cp.async` pipeline, `ldmatrix`, `mma.m16n8k16`.
pub(super) fn gemm_m16n8k16<T: PackedHalf>(name: &str, arch: Arch) -> KernelBuilder
where
    M16N8K16: MmaInput<T>,
{
    let mut k = sample_kernel(name, arch);
    let g = Gemm::<T>::setup(&mut k, &HALF_SHAPE);
    let k_tiles = g.k_tiles(&mut k);
    let mut acc = zero_accumulators::<M16N8K16, T>(&mut k);
    let (a_off, b_off) = g.fragment_offsets(&mut k);
    let nothing_on_landing = |_: &mut KernelBuilder, _: &Gemm<T>, _| {};
    g.pipelined_k_loop(
        &mut k,
        k_tiles,
        nothing_on_landing,
        |k, a_stage, b_stage| {
            let a_lane = k.add(a_stage, a_off);
            let b_lane = k.add(b_stage, b_off);
            warp_tile_k16(k, &mut acc, a_lane, b_lane);
        },
    );
    g.store(&mut k, &acc);
    k
}

/// One K tile of the warp's 32 × 32 quadrant with m16n8k16 (`a_lane`/`b_lane`: this lane's
/// ldmatrix row addresses at k = 0).
fn warp_tile_k16<T: PackedHalf>(
    k: &mut KernelBuilder,
    acc: &mut [Vec<FragC<M16N8K16, F32>>],
    a_lane: Reg<U32>,
    b_lane: Reg<U32>,
) where
    M16N8K16: MmaInput<T>,
{
    let bytes = T::TYPE.bytes();
    for ks in 0..TC_TILE_K / 16 {
        let a: Vec<FragA<M16N8K16, T>> = (0..WARP_M_TILES)
            .map(|mi| {
                let off = (mi * 16 * A_STRIDE + ks * 16) * bytes;
                k.ldmatrix(a_lane, off as i32)
            })
            .collect();
        let b: Vec<FragB<M16N8K16, T>> = (0..WARP_N_TILES / 2)
            .flat_map(|pair| {
                let off = (ks * 16 * B_STRIDE + pair * 16) * bytes;
                let (lo, hi) = k.ldmatrix_b_pair_trans::<T>(b_lane, off as i32);
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

/// The sm_75 kernel: synchronous loads, `ldmatrix.x2` / `.x1.trans`, `mma.m16n8k8` (f16).
pub(super) fn gemm_m16n8k8_f16(name: &str, arch: Arch) -> KernelBuilder {
    let mut k = sample_kernel(name, arch);
    let g = Gemm::<F16>::setup(&mut k, &HALF_SHAPE_SM75);
    let k_tiles = g.k_tiles(&mut k);
    let mut acc = zero_accumulators::<M16N8K8, F16>(&mut k);
    let (a_off, b_off) = g.fragment_offsets(&mut k);
    let a_base = k.shared_base(g.a_tiles);
    let a_lane = k.add(a_base, a_off);
    let b_base = k.shared_base(g.b_tiles);
    let b_lane = k.add(b_base, b_off);
    k.for_range(0u32, k_tiles, 1u32, |k, tile| {
        k.comment("load the tile");
        g.load_tile_sync(k, tile);
        k.bar_sync();
        k.comment("multiply the tile on the tensor cores");
        let bytes = F16::TYPE.bytes();
        for ks in 0..TC_TILE_K / 8 {
            let a: Vec<FragA<M16N8K8, F16>> = (0..WARP_M_TILES)
                .map(|mi| k.ldmatrix(a_lane, ((mi * 16 * A_STRIDE + ks * 8) * bytes) as i32))
                .collect();
            // x1.trans reads rows from lanes 0-7 only: k-row `lane % 8` (lane % 16 for the
            // others, which are ignored), the n8 column block `ni`.
            let b: Vec<FragB<M16N8K8, F16>> = (0..WARP_N_TILES)
                .map(|ni| k.ldmatrix_trans(b_lane, ((ks * 8 * B_STRIDE + ni * 8) * bytes) as i32))
                .collect();
            for (mi, row) in acc.iter_mut().enumerate() {
                for (ni, c) in row.iter_mut().enumerate() {
                    k.mma_into(c, &a[mi], &b[ni], c);
                }
            }
        }
        k.bar_sync();
    });
    g.store(&mut k, &acc);
    k
}

/// One warp multiplies a 16 × 8 f32 A by an 8 × 8 f32 B (both row-major, rounded to tf32 with
/// `cvt.rna.tf32.f32`) into a 16 × 8 f32 C with `mma.m16n8k8.tf32`, each lane loading its own
/// fragment elements (PTX ISA "Matrix fragments for mma.m16n8k8", .tf32): with
/// `g = lane / 4`, `t = lane % 4`, A registers 0–3 hold `(g, t)`, `(g + 8, t)`, `(g, t + 4)`,
/// `(g + 8, t + 4)`; B registers 0–1 hold `(k = t, n = g)`, `(k = t + 4, n = g)`.
pub(super) fn mma_tf32_tile(name: &str, arch: Arch) -> KernelBuilder {
    let mut k = sample_kernel(name, arch);
    k.require_block([32, 1, 1]);
    let (a, b, c) = (
        k.param_ptr::<F32>("a"),
        k.param_ptr::<F32>("b"),
        k.param_ptr::<F32>("c"),
    );
    let (a, b, c) = (k.global_ptr(a), k.global_ptr(b), k.global_ptr(c));
    let lane = k.laneid();
    let g = k.shr(lane, 2u32);
    let t = k.and(lane, 3u32);
    let load_tf32 = |k: &mut KernelBuilder, ptr, row: Reg<U32>, col: Reg<U32>, cols: u32| {
        let index = k.mad_lo(row, cols, col);
        let addr = k.elem_addr(ptr, index);
        let v = k.ld_global_nc::<F32>(addr, 0);
        k.to_tf32(v)
    };
    let (g8, t4) = (k.add(g, 8u32), k.add(t, 4u32));
    let a_regs =
        [(g, t), (g8, t), (g, t4), (g8, t4)].map(|(r, col)| load_tf32(&mut k, a, r, col, 8));
    let b_regs = [t, t4].map(|row| load_tf32(&mut k, b, row, g, 8));
    let frag_a = FragA::<M16N8K8, TF32>::from_regs(&a_regs);
    let frag_b = FragB::<M16N8K8, TF32>::from_regs(&b_regs);
    let zero = k.frag_c_zero::<M16N8K8, TF32, F32>();
    let d = k.mma(&frag_a, &frag_b, &zero);
    let col = k.mul_lo(t, 2u32);
    for (i, v) in d.f32_regs().into_iter().enumerate() {
        let row = if i < 2 { g } else { g8 };
        let index = k.mad_lo(row, 8u32, col);
        let addr = k.elem_addr(c, index);
        k.st_global(addr, 4 * (i as i32 % 2), v);
    }
    k
}

/// One warp computes `D = A · B` (A 16 × 16, B 16 × 8 row-major K × N, f16) with f16
/// accumulators (`mma.m16n8k16.f16.f16.f16.f16`): the operands are staged in shared memory
/// element by element, A read back by `ldmatrix.x4`, B by `ldmatrix.x2.trans`, and each lane
/// stores its two `f16x2` accumulator registers: register 0 holds row `lane / 4`, register 1
/// row `lane / 4 + 8`, columns `2·(lane % 4)` (low half) and `+1` (high half).
pub(super) fn mma_f16_accumulate_tile(name: &str, arch: Arch) -> KernelBuilder {
    const A_ROW: u32 = 24;
    const B_ROW: u32 = 16;
    let mut k = sample_kernel(name, arch);
    k.require_block([32, 1, 1]);
    let (a, b, c) = (
        k.param_ptr::<F16>("a"),
        k.param_ptr::<F16>("b"),
        k.param_ptr::<F16>("c"),
    );
    let (a, b, c) = (k.global_ptr(a), k.global_ptr(b), k.global_ptr(c));
    let a_tile = k.shared_array::<F16>("a_tile", 16 * A_ROW);
    let b_tile = k.shared_array::<F16>("b_tile", 16 * B_ROW);
    let lane = k.laneid();
    k.comment("stage A (16 x 16) and B (16 x 8) in padded shared rows");
    for (src, tile, cols, stride, per_lane) in [(a, a_tile, 16, A_ROW, 8), (b, b_tile, 8, B_ROW, 4)]
    {
        for i in 0..per_lane {
            let e = k.mad_lo(lane, per_lane, i);
            let row = k.div_int(e, cols);
            let col = k.rem(e, cols);
            let addr = k.elem_addr(src, e);
            let v = k.ld_global_nc::<F16>(addr, 0);
            let slot = k.mad_lo(row, stride, col);
            let dst = k.shared_elem(tile, slot);
            k.st_shared(dst, 0, v);
        }
    }
    k.bar_sync();
    let row16 = k.and(lane, 15u32);
    let half = k.shr(lane, 4u32);
    let col = k.mul_lo(half, CHUNK);
    let a_slot = k.mad_lo(row16, A_ROW, col);
    let a_at = k.shared_elem(a_tile, a_slot);
    let b_slot = k.mul_lo(row16, B_ROW);
    let b_at = k.shared_elem(b_tile, b_slot);
    let frag_a: FragA<M16N8K16, F16> = k.ldmatrix(a_at, 0);
    let frag_b: FragB<M16N8K16, F16> = k.ldmatrix_trans(b_at, 0);
    let zero = k.frag_c_zero::<M16N8K16, F16, F16>();
    let d = k.mma(&frag_a, &frag_b, &zero);
    let g = k.shr(lane, 2u32);
    let t = k.and(lane, 3u32);
    let col = k.mul_lo(t, 2u32);
    for (i, packed) in d.packed_regs().into_iter().enumerate() {
        let row = k.add(g, 8 * i as u32);
        let index = k.mad_lo(row, 8u32, col);
        let addr = k.elem_addr(c, index);
        let (lo, hi) = k.unpack_halves::<F16>(packed);
        k.st_global(addr, 0, lo);
        k.st_global(addr, 2, hi);
    }
    k
}

/// For `i < n`, with `lo = x[2i]`, `hi = x[2i + 1]`: `f16x2[i] = cvt.rn.f16x2.f32(hi, lo)`,
/// `bf16x2[i]` likewise, `mixed[i] = prmt(f16x2, bf16x2, 0x5410)` (the low halves of both:
/// f16 `lo` in bits 0..16, bf16 `lo` in 16..32) and `swapped[i]` = the f16 pair unpacked and
/// repacked as `{hi, lo}`.
pub(super) fn pack_f32_pairs(name: &str, arch: Arch) -> KernelBuilder {
    let mut k = sample_kernel(name, arch);
    let x = k.param_ptr::<F32>("x");
    let outs = ["f16x2", "bf16x2", "mixed", "swapped"].map(|o| k.param_ptr::<U32>(o));
    let n = k.param::<U32>("n");
    let x = k.global_ptr(x);
    let [h_out, b_out, mixed_out, swapped_out] = outs.map(|o| k.global_ptr(o));
    let n = k.load_param(n);
    k.for_global_index(n, |k, i| {
        let pair = k.mul_lo(i, 2u32);
        let at = k.elem_addr(x, pair);
        let lo = k.ld_global::<F32>(at, 0);
        let hi = k.ld_global::<F32>(at, 4);
        let h = k.pack_f32_pair::<F16>(lo, hi);
        let b = k.pack_f32_pair::<BF16>(lo, hi);
        let (h_bits, b_bits) = (k.pair_bits::<F16>(h), k.pair_bits::<BF16>(b));
        let mixed = k.prmt(h_bits, b_bits, 0x5410u32);
        let (h_lo, h_hi) = k.unpack_halves::<F16>(h);
        let swapped = k.pack_halves::<F16>(h_hi, h_lo);
        let swapped = k.pair_bits::<F16>(swapped);
        for (out, v) in [
            (h_out, h_bits),
            (b_out, b_bits),
            (mixed_out, mixed),
            (swapped_out, swapped),
        ] {
            let addr = k.elem_addr(out, i);
            k.st_global(addr, 0, v);
        }
    });
    k
}
