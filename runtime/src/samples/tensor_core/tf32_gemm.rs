//! `gemm_tc_tf32_m16n8k8` (sm_80+): `C[M, N] = A[M, K] · B[K, N]`, all f32 and row-major, on
//! tf32 tensor cores (`mma.m16n8k8.row.col.f32.tf32.tf32.f32`) with the numerics of the
//! `allow_tf32` kernels (`templates/tf32.rs`): every operand rounded by `cvt.rna.tf32.f32`,
//! exact products, f32 accumulation.
//!
//! * **Tiles.** A block of 256 threads (8 warps, 4 along M × 2 along N) computes a 128 × 128
//!   output tile, each warp 32 × 64 as 2 (m16) × 8 (n8) accumulators; K advances 16 at a time
//!   through the shared `cp.async` ring (`Gemm::pipelined_k_loop`) with two slots: a padded
//!   slot of A and B takes 18.5 KiB, so two fit the 48 KiB of static shared memory and three
//!   would not; the one tile in flight while another is multiplied is as many bytes as the two
//!   8-deep tiles a three-slot ring would keep in flight.
//! * **Rounding once.** After `cp.async.wait_group`, each thread rounds the 16-byte chunks it
//!   copied itself, in place (`ld.shared.v4`, four `cvt.rna.tf32.f32`, `st.shared.v4`), before
//!   the barrier that publishes the slot. Every element is rounded once per block instead of
//!   once per warp fragment that reads it; fragments then load tf32 values as they are. A's
//!   chunks are dealt one chunk column of 8 rows per quarter-warp
//!   ([`staged_chunk`](crate::templates::warp_mma::staged_chunk)), so those `v4` accesses
//!   meet no bank conflict (two rows of 20 words per quarter-warp would be 2-way).
//! * **A fragments** come from `ldmatrix.x4` (an 8 × 8 b16 matrix is an 8 × 4 f32 one, which is
//!   the tf32 A layout; see `builder/tensor/tf32.rs`). A rows are padded to 20 f32 (80 bytes),
//!   so an `ldmatrix` phase's eight 16-byte rows start on eight distinct 4-bank groups.
//! * **B fragments** cannot use `ldmatrix`: B is K-major here and `.trans` moves 16-bit
//!   elements. Lane `l` (`g = l / 4`, `t = l % 4`) needs k-rows `t` and `t + 4`, one column
//!   per n8 tile. The warp's 64 columns are dealt to its eight n8 tiles interleaved: tile
//!   `4j + q` takes columns `32j + 4c + q` (`c` its column 0..8), so one `ld.shared.v4` at
//!   k-row `t + 4i`, columns `32j + 4g ..+4` holds register `i` of tiles `4j .. 4j + 4`.
//!   B rows are padded to 136 f32 (8 mod 32 words): the eight lanes of a quarter-warp
//!   (`t` 0..4, `g` 0..2) read 16 bytes at word `8t + 4g` mod 32: no bank conflict.
//! * **Stores.** With that interleave, accumulator column `2t + e` of tile `4j + q` is column
//!   `32j + 8t + 4e + q`: each lane holds eight consecutive columns of a row per `j`, stored as
//!   two `st.global.v4`.
//!
//! Ragged shapes: M is arbitrary; N and K must be multiples of 4 (each copy and store moves 16
//! aligned bytes of a row). Chunks past the matrix edge are zero-filled, stores stay inside
//! `M × N`.

use super::{chunk_elems, BlockShape, Gemm, GemmTiling};
use crate::arch::Arch;
use crate::builder::{FragA, FragB, FragC, KernelBuilder, Pred, Reg, F32, M16N8K8, TF32, U32};
use crate::samples::index_bound::sample_kernel;

/// The block shape (f32 elements).
const SHAPE: BlockShape = BlockShape {
    tile_m: 128,
    tile_n: 128,
    tile_k: 16,
    threads: 256,
    warps_n: 2,
    warp_m: 32,
    warp_n: 64,
    a_stride: 16 + 4,
    b_stride: 128 + 8,
    stages: 2,
};

/// The launch tiling of `gemm_tc_tf32_m16n8k8`.
pub const TF32_TILING: GemmTiling = SHAPE.tiling();

/// Bytes per f32.
const F32_BYTES: u32 = 4;
/// m16 and n8 accumulator tiles per warp.
const M_TILES: u32 = SHAPE.warp_m / 16;
const N_TILES: u32 = SHAPE.warp_n / 8;
/// n8 tiles one `ld.shared.v4` of B serves (columns interleaved four ways).
const B_INTERLEAVE: u32 = 4;
/// Warp columns one interleaved group of [`B_INTERLEAVE`] n8 tiles spans.
const B_GROUP_COLS: u32 = 8 * B_INTERLEAVE;

/// The warp's accumulators: `acc[mi][ni]` covers rows `16·mi ..`, n8 tile `ni` of the
/// interleave in the module doc.
type Accumulators = Vec<Vec<FragC<M16N8K8, F32>>>;

/// The sm_80+ kernel.
pub(in crate::samples) fn gemm_m16n8k8_tf32(name: &str, arch: Arch) -> KernelBuilder {
    let mut k = sample_kernel(name, arch);
    let g = Gemm::<F32>::setup(&mut k, &SHAPE);
    let k_tiles = g.k_tiles(&mut k);
    let mut acc: Accumulators = (0..M_TILES)
        .map(|_| {
            (0..N_TILES)
                .map(|_| k.frag_c_zero::<M16N8K8, TF32, F32>())
                .collect()
        })
        .collect();
    let zero = k.var::<U32>(0u32);
    let a_off = g.a_fragment_offset(&mut k, zero);
    let b_off = b_fragment_offset(&mut k, &g);
    g.pipelined_k_loop(&mut k, k_tiles, round_own_chunks, |k, a_stage, b_stage| {
        let a_lane = k.add(a_stage, a_off);
        let b_lane = k.add(b_stage, b_off);
        multiply_tile(k, &mut acc, a_lane, b_lane);
    });
    store(&mut k, &g, &acc);
    k
}

/// Rounds this thread's own chunks of ring slot `slot` to tf32 in place: for each 16-byte
/// chunk, `ld.shared.v4`, `cvt.rna.tf32.f32` × 4, `st.shared.v4`. Only this thread wrote
/// those bytes (its `cp.async` has completed) and no thread reads them before the barrier
/// that follows.
fn round_own_chunks(k: &mut KernelBuilder, g: &Gemm<F32>, slot: Reg<U32>) {
    k.comment("round this thread's chunks of the landed tile to tf32, once");
    let (a_stage, b_stage) = g.stage_bases(k, slot);
    let a = g.a_chunks.iter().map(|c| (a_stage, c));
    let b = g.b_chunks.iter().map(|c| (b_stage, c));
    for (stage, chunk) in a.chain(b) {
        let at = k.add(stage, chunk.slot_bytes);
        let raw = k.ld_shared_v4::<F32>(at, 0);
        let rounded = raw.map(|v| k.to_tf32(v));
        k.st_shared_v4(at, 0, rounded);
    }
}

/// Byte offset of this lane's B row within a stage: k-row `t`, column
/// `warp_n · 64 + 4g` (`g = lane / 4`, `t = lane % 4`).
fn b_fragment_offset(k: &mut KernelBuilder, g: &Gemm<F32>) -> Reg<U32> {
    let group = k.shr(g.lane, 2u32);
    let quad = k.and(g.lane, 3u32);
    let warp_col = k.mul_lo(g.warp_n, SHAPE.warp_n);
    let col = k.mad_lo(group, B_INTERLEAVE, warp_col);
    let slot = k.mad_lo(quad, SHAPE.b_stride, col);
    k.mul_lo(slot, F32_BYTES)
}

/// One K tile of the warp's 32 × 64 tile: per 8-deep slice, two `ldmatrix.x4` for A, four
/// `ld.shared.v4` for B (k-rows `t`, `t + 4` × two column groups), sixteen `mma.m16n8k8`.
fn multiply_tile(
    k: &mut KernelBuilder,
    acc: &mut Accumulators,
    a_lane: Reg<U32>,
    b_lane: Reg<U32>,
) {
    for ks in 0..SHAPE.tile_k / 8 {
        let a: Vec<FragA<M16N8K8, TF32>> = (0..M_TILES)
            .map(|mi| {
                let off = (mi * 16 * SHAPE.a_stride + ks * 8) * F32_BYTES;
                k.ldmatrix_tf32_a_stored(a_lane, off as i32)
            })
            .collect();
        // rows[i][j][q]: register i of n8 tile 4j + q.
        let rows: Vec<Vec<[Reg<TF32>; 4]>> = (0..2u32)
            .map(|i| {
                (0..N_TILES / B_INTERLEAVE)
                    .map(|j| {
                        let row = ks * 8 + 4 * i;
                        let off = (row * SHAPE.b_stride + j * B_GROUP_COLS) * F32_BYTES;
                        k.ld_shared_v4::<TF32>(b_lane, off as i32)
                    })
                    .collect()
            })
            .collect();
        let b: Vec<FragB<M16N8K8, TF32>> = (0..N_TILES as usize)
            .map(|ni| {
                let (j, q) = (ni / B_INTERLEAVE as usize, ni % B_INTERLEAVE as usize);
                FragB::from_regs(&[rows[0][j][q], rows[1][j][q]])
            })
            .collect();
        for (mi, row) in acc.iter_mut().enumerate() {
            for (ni, c) in row.iter_mut().enumerate() {
                k.mma_into(c, &a[mi], &b[ni], c);
            }
        }
    }
}

/// Stores the warp's accumulators inside `M × N`: row `block_row + 32·warp_m + 16·mi +
/// 8·h + g` (`h` the accumulator's row half), columns `block_col + 64·warp_n + 32j + 8t +
/// 4e .. +4` from register `2h + e` of tiles `4j .. 4j + 4`, one `st.global.v4` each (N is a
/// multiple of 4, so a vector starting inside a row ends inside it).
fn store(k: &mut KernelBuilder, g: &Gemm<F32>, acc: &Accumulators) {
    k.comment("store the accumulators inside M x N, eight consecutive columns per lane");
    let group = k.shr(g.lane, 2u32);
    let quad = k.and(g.lane, 3u32);
    let warp_row = k.mad_lo(g.warp_m, SHAPE.warp_m, g.block_row);
    let row_base = k.add(warp_row, group);
    let warp_col = k.mad_lo(g.warp_n, SHAPE.warp_n, g.block_col);
    let col_base = k.mad_lo(quad, 2 * B_INTERLEAVE, warp_col);
    // (j, e, first column, whether it is inside N) of this lane's four column vectors.
    let cols: Vec<(usize, usize, Reg<U32>, Pred)> = (0..N_TILES / B_INTERLEAVE)
        .flat_map(|j| [(j, 0), (j, 1)])
        .map(|(j, e)| {
            let col = k.add(col_base, j * B_GROUP_COLS + e * 4);
            let col_ok = k.setp_lt(col, g.p.n);
            (j as usize, e as usize, col, col_ok)
        })
        .collect();
    for (mi, tiles) in acc.iter().enumerate() {
        for h in 0..2 {
            let row = k.add(row_base, mi as u32 * 16 + h as u32 * 8);
            let row_ok = k.setp_lt(row, g.p.m);
            for &(j, e, col, col_ok) in &cols {
                let group = &tiles[j * B_INTERLEAVE as usize..][..B_INTERLEAVE as usize];
                let regs: [Reg<F32>; 4] = std::array::from_fn(|q| group[q].f32_regs()[2 * h + e]);
                let ok = k.and_pred(row_ok, col_ok);
                k.if_then(ok, |k| {
                    let index = k.mad_lo(row, g.p.n, col);
                    let addr = k.elem_addr(g.p.c, index);
                    k.st_global_v4(addr, 0, regs);
                });
            }
        }
    }
}

// One copy chunk is four f32, and the B interleave spans whole warp tiles.
const _: () = assert!(
    chunk_elems::<F32>() == 4
        && SHAPE.warp_n.is_multiple_of(B_GROUP_COLS)
        && SHAPE.tile_m == 4 * SHAPE.warp_m
        && SHAPE.tile_n == SHAPE.warps_n * SHAPE.warp_n
        && SHAPE.threads == 32 * 4 * SHAPE.warps_n
);
