//! The tiled GEMM the expert kernels are made of: `Out[e·C + s, n] = Σ_h A_e[s, h] · B[e, n, h]`
//! for one `TILE_M × TILE_N` output tile of one expert's bin per block.
//!
//! Both operands are contiguous along the reduction dimension (`A` rows are token rows or
//! permuted rows, `B` rows are weight rows `W[e, n, :]`), so:
//! - **Loads**: a warp loads `TILE_K` consecutive elements of one row (f32: 128 bytes, f16/bf16:
//!   64 bytes, f64 with `TILE_K = 16`: two rows of 128 bytes): whole sectors, coalesced.
//!   Elements outside the matrices (rows past the bin's count or `N`, columns past the
//!   reduction length) load as zero by predication.
//! - **Shared layout**: tiles are stored transposed, `tile[kk][row]`, in the compute type, with
//!   rows padded to `TILE_M + 1` so the transposing stores of a warp (32 consecutive `kk`, one
//!   row) hit 32 different banks.
//! - **Inner loop**: thread `(tx, ty)` of the 16 × 16 block owns outputs
//!   `(ty + 16i, tx + 16j)`, `i, j < 4`. Per `kk` it reads 4 `A` values (two distinct words per
//!   warp: broadcast) and 4 `B` values (16 consecutive words per warp) — one wavefront each —
//!   and does 16 FMAs into register accumulators.
//!
//! Grouped: one launch covers every expert. Block `x` takes work item `x` of the list
//! `moe_schedule` built from the counts (see [`super::schedule`]), so only row tiles holding
//! routed rows are computed; the loop over the reduction dimension is block-uniform, and a block
//! past the list skips it and the stores as a whole (both barriers stay uniform).

use crate::builder::{Float, GlobalPtr, KernelBuilder, Pred, Reg, Scalar, SharedArr, U32};

use super::common::{narrow, widen, MoeElem};

/// Threads per expert-GEMM block (16 × 16).
pub const GEMM_THREADS: u32 = 256;
/// Output rows (bin slots) per block.
pub const TILE_M: u32 = 64;
/// Output columns per block.
pub const TILE_N: u32 = 64;
/// Outputs per thread along each dimension.
const PER_THREAD: u32 = 4;
/// Thread grid edge (16).
const EDGE: u32 = TILE_M / PER_THREAD;

/// Reduction step: 32 elements (16 for f64, to keep the swiglu kernel's three tiles small).
pub(crate) fn tile_k<T: MoeElem>() -> u32 {
    if T::Acc::TYPE.bytes() == 8 {
        16
    } else {
        32
    }
}

/// Where this block's tile sits and what each thread loads and computes.
pub(crate) struct Tile {
    pub expert: Reg<U32>,
    /// First slot of the tile in the bin.
    pub m0: Reg<U32>,
    /// First output column of the tile.
    pub n0: Reg<U32>,
    /// Routed rows in this expert's bin (`counts[e]`); 0 for a block past the work list, so
    /// such a block neither multiplies nor stores.
    pub count: Reg<U32>,
    /// Row stride of `token_ids [E, C]`.
    pub capacity: Reg<U32>,
    /// Permuted row of the bin's slot 0 (`offsets[e]`).
    pub out_start: Reg<U32>,
    tx: Reg<U32>,
    ty: Reg<U32>,
    /// Loader position: element `kk` of rows `r0 + i · rows_per_pass`.
    kk: Reg<U32>,
    r0: Reg<U32>,
    tile_k: u32,
}

impl Tile {
    fn rows_per_pass(&self) -> u32 {
        GEMM_THREADS / self.tile_k
    }

    fn passes(&self) -> u32 {
        TILE_M / self.rows_per_pass()
    }
}

/// The device-side schedule of the grouped GEMM (written by `moe_schedule`): bin offsets and
/// the `(expert, first slot)` work items.
#[derive(Clone, Copy)]
pub(crate) struct Schedule {
    pub counts: GlobalPtr<U32>,
    pub offsets: GlobalPtr<U32>,
    pub work_items: GlobalPtr<U32>,
}

/// One block's work: the `(expert, first slot)` item and its column tile.
#[derive(Clone, Copy)]
pub(crate) struct WorkItem {
    pub expert: Reg<U32>,
    /// First slot of the tile in the bin.
    pub m0: Reg<U32>,
    /// First output column of the tile.
    pub n0: Reg<U32>,
    /// Routed rows in this expert's bin (`counts[e]`); 0 for a block past the work list.
    pub count: Reg<U32>,
    /// Permuted row of the bin's slot 0 (`offsets[e]`).
    pub out_start: Reg<U32>,
}

/// Decodes the grid: `ctaid.x` = work item (blocks past `work_items[0]` get `count = 0`),
/// `ctaid.y` = column tile of [`TILE_N`] columns; reads the item, `counts[e]` and `offsets[e]`.
pub(crate) fn work_item(k: &mut KernelBuilder, schedule: Schedule) -> WorkItem {
    let item = k.ctaid_x();
    let items = k.ld_global::<U32>(schedule.work_items.addr, 0);
    let active = k.setp_lt(item, items);
    let (expert, m0, count, out_start) = (
        k.var::<U32>(0u32),
        k.var::<U32>(0u32),
        k.var::<U32>(0u32),
        k.var::<U32>(0u32),
    );
    k.if_then(active, |k| {
        let slot = k.mad_lo(item, 2u32, 1u32);
        let addr = k.elem_addr(schedule.work_items, slot);
        let e = k.ld_global::<U32>(addr, 0);
        let first = k.ld_global::<U32>(addr, 4);
        k.assign(expert, e);
        k.assign(m0, first);
        let count_addr = k.elem_addr(schedule.counts, e);
        let c = k.ld_global::<U32>(count_addr, 0);
        k.assign(count, c);
        let offset_addr = k.elem_addr(schedule.offsets, e);
        let o = k.ld_global::<U32>(offset_addr, 0);
        k.assign(out_start, o);
    });
    let by = k.ctaid_y();
    let n0 = k.mul_lo(by, TILE_N);
    WorkItem {
        expert,
        m0,
        n0,
        count,
        out_start,
    }
}

/// [`work_item`] plus the CUDA-core thread layout.
pub(crate) fn tile_coords(
    k: &mut KernelBuilder,
    schedule: Schedule,
    capacity: Reg<U32>,
    tile_k: u32,
) -> Tile {
    let tid = k.tid_x();
    let tx = k.and(tid, EDGE - 1);
    let ty = k.shr(tid, EDGE.trailing_zeros());
    let kk = k.and(tid, tile_k - 1);
    let r0 = k.shr(tid, tile_k.trailing_zeros());
    let WorkItem {
        expert,
        m0,
        n0,
        count,
        out_start,
    } = work_item(k, schedule);
    Tile {
        expert,
        m0,
        n0,
        count,
        capacity,
        out_start,
        tx,
        ty,
        kk,
        r0,
        tile_k,
    }
}

/// The rows one thread stages: element offset of each row start and whether the row exists.
pub(crate) struct LoaderRows {
    base: Vec<Reg<U32>>,
    valid: Vec<Pred>,
}

impl Tile {
    fn item(&self) -> WorkItem {
        WorkItem {
            expert: self.expert,
            m0: self.m0,
            n0: self.n0,
            count: self.count,
            out_start: self.out_start,
        }
    }

    /// The tile rows this thread stages, one per loader pass.
    fn loader_rows(
        &self,
        k: &mut KernelBuilder,
        mut row: impl FnMut(&mut KernelBuilder, Reg<U32>) -> (Reg<U32>, Pred),
    ) -> LoaderRows {
        let mut rows = LoaderRows {
            base: Vec::new(),
            valid: Vec::new(),
        };
        for i in 0..self.passes() {
            let r = k.add(self.r0, i * self.rows_per_pass());
            let (base, valid) = row(k, r);
            rows.base.push(base);
            rows.valid.push(valid);
        }
        rows
    }
}

/// `A` row `r` of the tile gathered by token: slot `s = m0 + r` of bin `e` holds token
/// `t = token_ids[e·C + s]` when `s < counts[e]` (and `t < T`); returns the element index
/// `t · len` of its row start and whether it exists.
pub(crate) fn gathered_row(
    k: &mut KernelBuilder,
    item: &WorkItem,
    bin_start: Reg<U32>,
    token_ids: GlobalPtr<U32>,
    tokens: Reg<U32>,
    len: u32,
    r: Reg<U32>,
) -> (Reg<U32>, Pred) {
    let slot = k.add(item.m0, r);
    let routed = k.setp_lt(slot, item.count);
    let token = k.var::<U32>(0u32);
    k.if_then(routed, |k| {
        let index = k.add(bin_start, slot);
        let addr = k.elem_addr(token_ids, index);
        let t = k.ld_global::<U32>(addr, 0);
        k.assign(token, t);
    });
    let known = k.setp_lt(token, tokens);
    let valid = k.and_pred(routed, known);
    (k.mul_lo(token, len), valid)
}

/// `A` row `r` of the permuted layout: slot `s = m0 + r` of bin `e` is row `offsets[e] + s`,
/// present when `s < counts[e]`.
pub(crate) fn permuted_row(
    k: &mut KernelBuilder,
    item: &WorkItem,
    len: u32,
    r: Reg<U32>,
) -> (Reg<U32>, Pred) {
    let slot = k.add(item.m0, r);
    let valid = k.setp_lt(slot, item.count);
    let row = k.add(item.out_start, slot);
    (k.mul_lo(row, len), valid)
}

/// `B` row `r`: output column `n = n0 + r` is weight row `W[e, n, :]`, present when `n < N`.
pub(crate) fn weight_row(
    k: &mut KernelBuilder,
    item: &WorkItem,
    n_total: u32,
    len: u32,
    r: Reg<U32>,
) -> (Reg<U32>, Pred) {
    let n = k.add(item.n0, r);
    let valid = k.setp_lt(n, n_total);
    let first_row = k.mul_lo(item.expert, n_total);
    let row = k.add(first_row, n);
    (k.mul_lo(row, len), valid)
}

/// The loader's `A` rows gathered by token ([`gathered_row`]).
pub(crate) fn gathered_rows(
    k: &mut KernelBuilder,
    tile: &Tile,
    token_ids: GlobalPtr<U32>,
    tokens: Reg<U32>,
    len: u32,
) -> LoaderRows {
    k.comment("gather: token of each staged row");
    let item = tile.item();
    let bin_start = k.mul_lo(tile.expert, tile.capacity);
    tile.loader_rows(k, |k, r| {
        gathered_row(k, &item, bin_start, token_ids, tokens, len, r)
    })
}

/// The loader's `A` rows of the permuted layout ([`permuted_row`]).
pub(crate) fn permuted_rows(k: &mut KernelBuilder, tile: &Tile, len: u32) -> LoaderRows {
    let item = tile.item();
    tile.loader_rows(k, |k, r| permuted_row(k, &item, len, r))
}

/// The loader's `B` rows ([`weight_row`]).
pub(crate) fn weight_rows(
    k: &mut KernelBuilder,
    tile: &Tile,
    n_total: u32,
    len: u32,
) -> LoaderRows {
    let item = tile.item();
    tile.loader_rows(k, |k, r| weight_row(k, &item, n_total, len, r))
}

/// A shared tile `[TILE_K][TILE_M + 1]` in the compute type.
pub(crate) fn shared_tile<A: Float>(
    k: &mut KernelBuilder,
    name: &str,
    tile_k: u32,
) -> SharedArr<A> {
    k.shared_array::<A>(name, tile_k * (TILE_M + 1))
}

/// Stages columns `k0 .. k0 + TILE_K` of the loader rows: `tile[kk][r] = src[base_r + k0 + kk]`,
/// zero outside the matrix.
pub(crate) fn stage_tile<T: MoeElem>(
    k: &mut KernelBuilder,
    tile: &Tile,
    src: GlobalPtr<T>,
    rows: &LoaderRows,
    smem: SharedArr<T::Acc>,
    k0: Reg<U32>,
    len: u32,
) {
    let col = k.add(k0, tile.kk);
    let col_ok = k.setp_lt(col, len);
    let slot = k.mad_lo(tile.kk, TILE_M + 1, tile.r0);
    let store = k.shared_elem(smem, slot);
    let elem = T::Acc::TYPE.bytes();
    for (i, (&base, &row_ok)) in rows.base.iter().zip(&rows.valid).enumerate() {
        let ok = k.and_pred(row_ok, col_ok);
        let value = super::common::constant::<T::Acc>(k, 0.0);
        k.if_then(ok, |k| {
            let index = k.add(base, col);
            let addr = k.elem_addr(src, index);
            let raw = k.ld_global_nc::<T>(addr, 0);
            let v = widen(k, raw);
            k.assign(value, v);
        });
        let offset = i as u32 * tile.rows_per_pass() * elem;
        k.st_shared(store, offset as i32, value);
    }
}

/// A 4 × 4 block of accumulators, zero.
pub(crate) fn zero_accumulators<A: Float>(k: &mut KernelBuilder) -> Vec<Vec<Reg<A>>> {
    (0..PER_THREAD)
        .map(|_| {
            (0..PER_THREAD)
                .map(|_| super::common::constant::<A>(k, 0.0))
                .collect()
        })
        .collect()
}

/// `acc_b[i][j] += Σ_kk a_tile[kk][ty + 16i] · b_tile_b[kk][tx + 16j]` for every `B` operand
/// (the swiglu up-projection shares the `A` values between two weight tiles).
pub(crate) fn multiply_tiles<A: Float>(
    k: &mut KernelBuilder,
    tile: &Tile,
    a_tile: SharedArr<A>,
    b_tiles: &[SharedArr<A>],
    accs: &[Vec<Vec<Reg<A>>>],
) {
    let elem = A::TYPE.bytes();
    let a_read = k.shared_elem(a_tile, tile.ty);
    let b_reads: Vec<Reg<U32>> = b_tiles.iter().map(|&b| k.shared_elem(b, tile.tx)).collect();
    for kk in 0..tile.tile_k {
        let row_offset = kk * (TILE_M + 1);
        let a: Vec<Reg<A>> = (0..PER_THREAD)
            .map(|i| k.ld_shared::<A>(a_read, ((row_offset + EDGE * i) * elem) as i32))
            .collect();
        for (&b_read, acc) in b_reads.iter().zip(accs) {
            let b: Vec<Reg<A>> = (0..PER_THREAD)
                .map(|j| k.ld_shared::<A>(b_read, ((row_offset + EDGE * j) * elem) as i32))
                .collect();
            for (i, &av) in a.iter().enumerate() {
                for (j, &bv) in b.iter().enumerate() {
                    let d = acc[i][j];
                    k.fma_into(d, av, bv, d);
                }
            }
        }
    }
}

/// The reduction loop over `len` in steps of `TILE_K`: stage `A` and every `B`, barrier,
/// multiply, barrier. Skipped as a whole by blocks whose slot tile has no routed row.
#[allow(clippy::too_many_arguments)]
pub(crate) fn reduction_loop<T: MoeElem>(
    k: &mut KernelBuilder,
    tile: &Tile,
    a_src: GlobalPtr<T>,
    a_rows: &LoaderRows,
    b_srcs: &[GlobalPtr<T>],
    b_rows: &LoaderRows,
    len: u32,
    accs: &[Vec<Vec<Reg<T::Acc>>>],
) {
    let a_tile = shared_tile::<T::Acc>(k, "a_tile", tile.tile_k);
    let b_tiles: Vec<SharedArr<T::Acc>> = (0..b_srcs.len())
        .map(|i| shared_tile::<T::Acc>(k, &format!("b_tile{i}"), tile.tile_k))
        .collect();
    let has_rows = k.setp_lt(tile.m0, tile.count);
    k.if_then(has_rows, |k| {
        k.for_range(0u32, len, tile.tile_k, |k, k0| {
            k.comment("stage A and B tiles (transposed, padded)");
            stage_tile(k, tile, a_src, a_rows, a_tile, k0, len);
            for (&src, &smem) in b_srcs.iter().zip(&b_tiles) {
                stage_tile(k, tile, src, b_rows, smem, k0, len);
            }
            k.bar_sync();
            k.comment("register-blocked multiply of the staged tiles");
            multiply_tiles(k, tile, a_tile, &b_tiles, accs);
            k.bar_sync();
        });
    });
}

/// Writes the thread's outputs `out[(offsets[e] + m0 + ty + 16i) · N + n0 + tx + 16j] = f(i, j)`
/// for routed slots (`< counts[e]`, so packed bins never write into their neighbours) and
/// in-range columns.
pub(crate) fn store_outputs<T: MoeElem>(
    k: &mut KernelBuilder,
    tile: &Tile,
    out: GlobalPtr<T>,
    n_total: u32,
    mut value: impl FnMut(&mut KernelBuilder, usize, usize) -> Reg<T::Acc>,
) {
    k.comment("store the output tile");
    let bin_start = tile.out_start;
    for i in 0..PER_THREAD {
        let m_in_tile = k.add(tile.ty, EDGE * i);
        let slot = k.add(tile.m0, m_in_tile);
        let slot_ok = k.setp_lt(slot, tile.count);
        let row = k.add(bin_start, slot);
        let row_start = k.mul_lo(row, n_total);
        for j in 0..PER_THREAD {
            let n_in_tile = k.add(tile.tx, EDGE * j);
            let n = k.add(tile.n0, n_in_tile);
            let n_ok = k.setp_lt(n, n_total);
            let ok = k.and_pred(slot_ok, n_ok);
            let v = value(k, i as usize, j as usize);
            k.if_then(ok, |k| {
                let stored = narrow::<T>(k, v);
                let index = k.add(row_start, n);
                let addr = k.elem_addr(out, index);
                k.st_global(addr, 0, stored);
            });
        }
    }
}

/// `silu(g) · u = g / (1 + e^(−g)) · u` in the compute type.
pub(crate) fn silu_times<A: Float>(k: &mut KernelBuilder, g: Reg<A>, u: Reg<A>) -> Reg<A> {
    use crate::ir::{Precision, Rounding};
    let neg = k.neg(g);
    let e = super::common::exp(k, neg);
    let one = super::common::constant::<A>(k, 1.0);
    let denom = k.add(e, one);
    let s = k.div(g, denom, Precision::Rounded(Rounding::Rn));
    k.mul(s, u)
}
