//! The CUDA-core f32 GEMM sample `gemm_tiled_f32`: `C[M, N] = A[M, K] · B[K, N]`, row-major.
//!
//! A block of [`GEMM_THREADS`] threads (an 8 × 8 grid, `tx = tid % 8`, `ty = tid / 8`) computes a
//! [`GEMM_TILE`] × [`GEMM_TILE`] output tile, each thread an 8 × 8 block of it held in registers:
//! rows `ty + 8·i` and columns `4·tx + {0..4}` and `32 + 4·tx + {0..4}`. K advances
//! [`GEMM_TILE_K`] at a time through shared tiles `As[64][16 + 4]` (A as it lies, rows padded)
//! and `Bs[16][64]`; per 4 steps of K a thread reads 8 A quads and 4 × 2 B quads with
//! `ld.shared.v4` and issues 256 FMAs (1 load per 16 FMAs).
//!
//! Bank use: a warp holds 4 consecutive `ty`; their A rows are 20 words apart, so the four
//! quads sit on bank groups 0, 20, 8, 28 (mod 32) and never conflict; the eight `tx` of a B read
//! cover 32 consecutive words. Staging stores are `st.shared.v4` at the 4-wavefront minimum:
//! a warp stages 8 whole A rows, each quarter-warp one quad column of all 8 (rows 20 words
//! apart start on 8 distinct bank groups), and B rows as they lie.
//!
//! Global traffic: every copy moves a 16-byte quad (`ld.global.nc.v4`) when the block's whole
//! tile lies inside the matrices and `K`, `N` are multiples of 4 (rows start 16-byte aligned);
//! otherwise the edge path loads element by element, zero outside the matrices. Outputs are
//! stored as quads under the same rule, element by element at the edges.

use super::index_bound::sample_kernel;
use super::GemmParams;
use crate::arch::Arch;
use crate::builder::{GlobalPtr, KernelBuilder, Pred, Reg, SharedArr, F32, U32, U64};
use crate::ir::CmpOp;
use crate::templates::warp_mma::staged_chunk;

/// Output rows and columns per block.
pub const GEMM_TILE: u32 = 64;
/// Threads per block (8 × 8, each an 8 × 8 block of outputs).
pub const GEMM_THREADS: u32 = 64;
/// K per shared tile.
pub const GEMM_TILE_K: u32 = 16;
/// Outputs per thread along each axis.
const THREAD_TILE: u32 = 8;
/// Threads along each axis of the block.
const THREADS_PER_AXIS: u32 = GEMM_TILE / THREAD_TILE;
/// Padded A row (floats): 20 words apart puts 4 consecutive rows on distinct bank groups.
const A_STRIDE: u32 = GEMM_TILE_K + 4;
/// Elements per 16-byte quad.
const QUAD: u32 = 4;
/// Quads each thread stages per tile of A and of B.
const QUADS_PER_THREAD: u32 = GEMM_TILE * GEMM_TILE_K / QUAD / GEMM_THREADS;

/// One staged quad: where it goes in shared memory and where it comes from.
struct Quad {
    /// Shared byte address of the quad's slot.
    slot: Reg<U32>,
    /// The quad's fixed coordinate (A: global row, B: global column of its first element).
    fixed: Reg<U32>,
    /// Its offset along K inside the tile (A: column of its first element, B: row).
    k_offset: u32,
}

/// Parameters and this thread's place, shared by the phases.
struct Gemm {
    p: GemmParams<F32>,
    a_tile: SharedArr<F32>,
    b_tile: SharedArr<F32>,
    a_quads: Vec<Quad>,
    b_quads: Vec<Quad>,
    /// This thread's K coordinate inside a staged tile: A quads start at column
    /// `4·(tid % 32 / 8)`, B quads at row `tid / 16` (plus each quad's `k_offset`).
    a_k: Reg<U32>,
    b_k: Reg<U32>,
    /// The block's tile lies inside C and K, N are multiples of 4: quads everywhere.
    interior: Pred,
    /// First output row of this thread (`block_row + ty`) and first column (`block_col + 4·tx`).
    row0: Reg<U32>,
    col0: Reg<U32>,
}

/// Builds `gemm_tiled_f32`.
pub(super) fn gemm_tiled(arch: Arch) -> KernelBuilder {
    let mut k = sample_kernel("gemm_tiled_f32", arch);
    k.require_block([GEMM_THREADS, 1, 1]);
    let g = setup(&mut k);
    let acc: Vec<Reg<F32>> = (0..THREAD_TILE * THREAD_TILE)
        .map(|_| k.var::<F32>(0.0f32))
        .collect();
    let a_read = a_read_base(&mut k, &g);
    let b_read = b_read_base(&mut k, &g);
    k.for_range(0u32, g.p.k, GEMM_TILE_K, |k, k0| {
        stage_tile(k, &g, k0);
        k.bar_sync();
        multiply_tile(k, a_read, b_read, &acc);
        k.bar_sync();
    });
    store_outputs(&mut k, &g, &acc);
    k
}

fn setup(k: &mut KernelBuilder) -> Gemm {
    let p = GemmParams::<F32>::declare(k);
    let (m, n, kk) = (p.m, p.n, p.k);
    let a_tile = k.shared_array::<F32>("a_tile", GEMM_TILE * A_STRIDE);
    let b_tile = k.shared_array::<F32>("b_tile", GEMM_TILE_K * GEMM_TILE);
    let tid = k.tid_x();
    let block_row = {
        let by = k.ctaid_y();
        k.mul_lo(by, GEMM_TILE)
    };
    let block_col = {
        let bx = k.ctaid_x();
        k.mul_lo(bx, GEMM_TILE)
    };
    // Quad `tid + 64·i` of the 64 × 16 A tile (4 quads per row, dealt column-major within
    // each warp: `staged_chunk`) and of the 16 × 64 B tile (16 quads per row).
    let a_per_row = GEMM_TILE_K / QUAD;
    let (a_row, a_quad) = staged_chunk(k, tid, a_per_row);
    let a_k = k.mul_lo(a_quad, QUAD);
    let b_per_row = GEMM_TILE / QUAD;
    let b_k = k.shr(tid, b_per_row.trailing_zeros());
    let b_quad = k.and(tid, b_per_row - 1);
    let b_col = k.mul_lo(b_quad, QUAD);
    let b_fixed = k.add(block_col, b_col);
    let a_quads = (0..QUADS_PER_THREAD)
        .map(|i| {
            let row = k.add(a_row, i * GEMM_THREADS / a_per_row);
            let slot_index = k.mad_lo(row, A_STRIDE, a_k);
            Quad {
                slot: k.shared_elem(a_tile, slot_index),
                fixed: k.add(block_row, row),
                k_offset: 0,
            }
        })
        .collect();
    let b_quads = (0..QUADS_PER_THREAD)
        .map(|i| {
            let tile_row = i * GEMM_THREADS / b_per_row;
            let row = k.add(b_k, tile_row);
            let slot_index = k.mad_lo(row, GEMM_TILE, b_col);
            Quad {
                slot: k.shared_elem(b_tile, slot_index),
                fixed: b_fixed,
                k_offset: tile_row,
            }
        })
        .collect();
    let interior = {
        let row_end = k.add(block_row, GEMM_TILE);
        let col_end = k.add(block_col, GEMM_TILE);
        let rows_in = k.setp(CmpOp::Le, row_end, m);
        let cols_in = k.setp(CmpOp::Le, col_end, n);
        let k_or_n = k.or(kk, n);
        let low_bits = k.and(k_or_n, QUAD - 1);
        let aligned = k.setp(CmpOp::Eq, low_bits, 0u32);
        let inside = k.and_pred(rows_in, cols_in);
        k.and_pred(inside, aligned)
    };
    let tx = k.and(tid, THREADS_PER_AXIS - 1);
    let ty = k.shr(tid, THREADS_PER_AXIS.trailing_zeros());
    let row0 = k.add(block_row, ty);
    let col0 = k.mad_lo(tx, QUAD, block_col);
    Gemm {
        p,
        a_tile,
        b_tile,
        a_quads,
        b_quads,
        a_k,
        b_k,
        interior,
        row0,
        col0,
    }
}

/// Copies the A tile `[block_row.., k0..k0+16]` and the B tile `[k0..k0+16, block_col..]` into
/// shared memory: quads when the whole tile is inside (`interior` and `k0 + 16 ≤ K`), element by
/// element (zero outside the matrices) otherwise.
fn stage_tile(k: &mut KernelBuilder, g: &Gemm, k0: Reg<U32>) {
    let a_k = k.add(g.a_k, k0);
    let b_k = k.add(g.b_k, k0);
    let tile_end = k.add(k0, GEMM_TILE_K);
    let k_inside = k.setp(CmpOp::Le, tile_end, g.p.k);
    let full = k.and_pred(g.interior, k_inside);
    k.if_else(
        full,
        |k| {
            for q in &g.a_quads {
                let index = k.mad_lo(q.fixed, g.p.k, a_k);
                let addr = k.elem_addr(g.p.a, index);
                let v = k.ld_global_v4::<F32>(addr, 0, true);
                k.st_shared_v4(q.slot, 0, v);
            }
            for q in &g.b_quads {
                let row = k.add(b_k, q.k_offset);
                let index = k.mad_lo(row, g.p.n, q.fixed);
                let addr = k.elem_addr(g.p.b, index);
                let v = k.ld_global_v4::<F32>(addr, 0, true);
                k.st_shared_v4(q.slot, 0, v);
            }
        },
        |k| {
            for q in &g.a_quads {
                let row_in = k.setp_lt(q.fixed, g.p.m);
                let v: [Reg<F32>; 4] = std::array::from_fn(|e| {
                    let col = k.add(a_k, e as u32);
                    let col_in = k.setp_lt(col, g.p.k);
                    let ok = k.and_pred(row_in, col_in);
                    let index = k.mad_lo(q.fixed, g.p.k, col);
                    load_or_zero(k, g.p.a, index, ok)
                });
                k.st_shared_v4(q.slot, 0, v);
            }
            for q in &g.b_quads {
                let row = k.add(b_k, q.k_offset);
                let row_in = k.setp_lt(row, g.p.k);
                let v: [Reg<F32>; 4] = std::array::from_fn(|e| {
                    let col = k.add(q.fixed, e as u32);
                    let col_in = k.setp_lt(col, g.p.n);
                    let ok = k.and_pred(row_in, col_in);
                    let index = k.mad_lo(row, g.p.n, col);
                    load_or_zero(k, g.p.b, index, ok)
                });
                k.st_shared_v4(q.slot, 0, v);
            }
        },
    );
}

/// `src[index]` where `ok`, else 0.
fn load_or_zero(k: &mut KernelBuilder, src: GlobalPtr<F32>, index: Reg<U32>, ok: Pred) -> Reg<F32> {
    let v = k.var::<F32>(0.0f32);
    k.if_then(ok, |k| {
        let addr = k.elem_addr(src, index);
        let x = k.ld_global_nc::<F32>(addr, 0);
        k.assign(v, x);
    });
    v
}

/// Shared address of this thread's first A row in the tile (`ty`).
fn a_read_base(k: &mut KernelBuilder, g: &Gemm) -> Reg<U32> {
    let tid = k.tid_x();
    let ty = k.shr(tid, THREADS_PER_AXIS.trailing_zeros());
    let index = k.mul_lo(ty, A_STRIDE);
    k.shared_elem(g.a_tile, index)
}

/// Shared address of this thread's first B column in the tile (`4·tx`).
fn b_read_base(k: &mut KernelBuilder, g: &Gemm) -> Reg<U32> {
    let tid = k.tid_x();
    let tx = k.and(tid, THREADS_PER_AXIS - 1);
    let index = k.mul_lo(tx, QUAD);
    k.shared_elem(g.b_tile, index)
}

/// `acc[i][j] += Σ_kk As[ty + 8i][kk] · Bs[kk][col_j]` over the staged tile, 4 K steps per
/// group: 8 A quads (one per row) and, per step, the thread's two B quads.
fn multiply_tile(k: &mut KernelBuilder, a_read: Reg<U32>, b_read: Reg<U32>, acc: &[Reg<F32>]) {
    let row_bytes = (THREADS_PER_AXIS * A_STRIDE * 4) as i32;
    let half_cols_bytes = (GEMM_TILE / 2 * 4) as i32;
    for group in 0..GEMM_TILE_K / QUAD {
        let a: Vec<[Reg<F32>; 4]> = (0..THREAD_TILE as i32)
            .map(|i| k.ld_shared_v4::<F32>(a_read, i * row_bytes + (group * QUAD * 4) as i32))
            .collect();
        for step in 0..QUAD {
            let kk = (group * QUAD + step) as i32;
            let row = kk * (GEMM_TILE * 4) as i32;
            let lo = k.ld_shared_v4::<F32>(b_read, row);
            let hi = k.ld_shared_v4::<F32>(b_read, row + half_cols_bytes);
            let b: Vec<Reg<F32>> = lo.into_iter().chain(hi).collect();
            for (i, a_row) in a.iter().enumerate() {
                for (j, &bv) in b.iter().enumerate() {
                    let d = acc[i * THREAD_TILE as usize + j];
                    k.fma_into(d, a_row[step as usize], bv, d);
                }
            }
        }
    }
}

/// Writes the thread's 8 × 8 block: two quads per row inside an interior tile, element by
/// element (inside `M × N` only) at the edges.
fn store_outputs(k: &mut KernelBuilder, g: &Gemm, acc: &[Reg<F32>]) {
    let t = THREAD_TILE as usize;
    let half = GEMM_TILE / 2;
    k.if_else(
        g.interior,
        |k| {
            let first = k.mad_lo(g.row0, g.p.n, g.col0);
            let mut addr: Reg<U64> = k.elem_addr(g.p.c, first);
            let row_step = k.mul_wide(g.p.n, THREADS_PER_AXIS * 4);
            for i in 0..t {
                if i > 0 {
                    addr = k.add(addr, row_step);
                }
                let quad = |h: usize| std::array::from_fn(|e| acc[i * t + h * 4 + e]);
                k.st_global_v4(addr, 0, quad(0));
                k.st_global_v4(addr, (half * 4) as i32, quad(1));
            }
        },
        |k| {
            for i in 0..t {
                let row = k.add(g.row0, i as u32 * THREADS_PER_AXIS);
                let row_in = k.setp_lt(row, g.p.m);
                for j in 0..t {
                    let col_offset = (j as u32 / QUAD) * half + j as u32 % QUAD;
                    let col = k.add(g.col0, col_offset);
                    let col_in = k.setp_lt(col, g.p.n);
                    let ok = k.and_pred(row_in, col_in);
                    k.if_then(ok, |k| {
                        let index = k.mad_lo(row, g.p.n, col);
                        let addr = k.elem_addr(g.p.c, index);
                        k.st_global(addr, 0, acc[i * t + j]);
                    });
                }
            }
        },
    );
}
