//! The tiled GEMM the expert kernels are made of: `Out[e·C + s, n] = Σ_h A_e[s, h] · B[e, n, h]`
//! for one `TILE_M × TILE_N` output tile of one expert's bin per block.
//!
//! Both operands are contiguous along the reduction dimension (`A` rows are token rows or
//! permuted rows, `B` rows are weight rows `W[e, n, :]`), so:
//! - **Loads**: each thread stages quads: `TILE_K / 8` consecutive elements of one row (f32:
//!   16 bytes, `ld.global.nc.v4`; f16/bf16: 8 bytes, `.v4.b16`; f64 with `TILE_K = 16`: 16
//!   bytes, `.v2`), 8 quads per tile row, two rows per thread. A warp reads one whole 32-byte
//!   sector of each of its rows (16 rows × 2 quads, or 8 rows × 4 quads for halves). When the reduction length is not a
//!   multiple of the quad, quads are loaded element by element. Elements outside the matrices
//!   (rows past the bin's count or `N`, columns past the reduction length) load as zero by
//!   predication.
//! - **Shared layout**: tiles are stored transposed, `tile[kk][row]`, in the compute type, with
//!   rows padded to `TILE_M + 4` (16-byte aligned rows for the quad reads). A warp's
//!   transposing stores of element `e` land on bank `(16·q + 4·e + row) mod 32` (f32 compute):
//!   32 different banks with 2 quads per row (`16·(l mod 2) + l / 2`, 16 rows per warp). With 4
//!   quads per row (f16/bf16, 8 rows per warp, whole 32-byte sectors per row) quads `q` and
//!   `q + 2` would meet on the same 16 banks, so those rows are padded to `TILE_M + 12` and
//!   row `kk` starts `kk & 8` elements further on (`SharedLayout`): bank `(16·(q mod 2) +
//!   8·(q / 2 mod 2) + 12·e + row) mod 32`, 32 different banks again. The shift is a multiple
//!   of 4 and a compile-time offset of each unrolled `kk`, so the inner loop's reads stay
//!   aligned `ld.shared.v4` with immediate offsets.
//! - **Inner loop**: thread `(tx, ty)` of the 16 × 16 block owns outputs
//!   `(4·ty + i, 4·tx + j)`, `i, j < 4` in f32 compute (`(ty + 16i, tx + 16j)` in f64, see
//!   [`own_step`]). Per `kk` it reads its 4 `A` values and 4 `B` values as one `ld.shared.v4`
//!   each (f64: 4 scalar reads, 16 consecutive doubles per warp) and does 16 FMAs into register
//!   accumulators. Outputs are stored as quads (`st.global.v4`) when `N` is a multiple of 4 and
//!   the columns are adjacent.
//!
//! Grouped: one launch covers every expert. Block `x` takes work item `x` of the list
//! `moe_schedule` built from the counts (see [`super::schedule`]), so only row tiles holding
//! routed rows are computed; the loop over the reduction dimension is block-uniform, and a block
//! past the list skips it and the stores as a whole (both barriers stay uniform).

use crate::builder::{Float, GlobalPtr, KernelBuilder, Pred, Reg, Scalar, SharedArr, U32, U64};

use super::common::{narrow, widen, MoeElem};
use super::schedule::NO_ITEM;
use crate::ir::CmpOp;

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
/// Padded row of a transposed shared tile (compute-type elements), 16-byte aligned.
const SHARED_STRIDE: u32 = TILE_M + 4;
/// The same with room for the 8-row shift of [`SharedLayout::quads_of_four`].
const SHIFTED_STRIDE: u32 = TILE_M + 12;
/// Quads per staged tile row (a quad is `TILE_K / 8` elements).
const QUADS_PER_ROW: u32 = 8;
/// Tile rows one loader pass covers.
const ROWS_PER_PASS: u32 = GEMM_THREADS / QUADS_PER_ROW;
/// Loader passes per tile.
const PASSES: u32 = TILE_M / ROWS_PER_PASS;

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
    /// First of this thread's 4 output rows and columns in the tile, and the distance between
    /// them (see [`own_step`]).
    row_in_tile: Reg<U32>,
    col_in_tile: Reg<U32>,
    own_step: u32,
    /// Loader position: the quad starting at element `kk` of rows `r0 + i · ROWS_PER_PASS`.
    kk: Reg<U32>,
    r0: Reg<U32>,
    tile_k: u32,
    /// Where the staged tiles' rows sit in shared memory.
    layout: SharedLayout,
    /// Element offset of the thread's first staged value, `layout.row_start(kk) + r0`.
    stage_slot: Reg<U32>,
}

/// Where tile row `kk` (reduction index) of a transposed shared tile starts: rows of `stride`
/// elements, row `kk` shifted by `kk & shift_mask` elements (a multiple of 4, so the inner
/// loop's `ld.shared.v4` stay aligned).
#[derive(Clone, Copy)]
struct SharedLayout {
    stride: u32,
    shift_mask: u32,
}

impl SharedLayout {
    /// The layout for a loader warp covering `lanes` adjacent quads of `quad` elements in each
    /// of its rows (see the module docs for the banks).
    fn of(lanes: u32, quad: u32) -> Self {
        if lanes == 4 {
            Self::quads_of_four(quad)
        } else {
            Self {
                stride: SHARED_STRIDE,
                shift_mask: 0,
            }
        }
    }

    /// Four quads per row, eight rows per warp (f16/bf16): quads `q` and `q + 2` would share
    /// banks (the stride moves 16 banks per quad), so rows of odd quad pairs (`kk` bit
    /// `log2(2·quad)` set) move 8 rows along, onto the other 8 banks of their half.
    fn quads_of_four(quad: u32) -> Self {
        Self {
            stride: SHIFTED_STRIDE,
            shift_mask: 2 * quad,
        }
    }

    /// Element offset of row `kk` (compile-time `kk`, for the inner loop's immediates).
    fn row_start(self, kk: u32) -> u32 {
        kk * self.stride + (kk & self.shift_mask)
    }
}

impl Tile {
    /// Elements per staged quad.
    fn quad(&self) -> u32 {
        self.tile_k / QUADS_PER_ROW
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

/// Decodes the grid: `ctaid.x` = work item (a block whose item is
/// [`NO_ITEM`](super::schedule::NO_ITEM), past the list, gets `count = 0`), `ctaid.y` = column
/// tile of `tile_n` columns ([`TILE_N`] here, the tile's width on tensor cores); reads the
/// item (one `ld.global.v2`), `counts[e]` and `offsets[e]`.
pub(crate) fn work_item(k: &mut KernelBuilder, schedule: Schedule, tile_n: u32) -> WorkItem {
    let item = k.ctaid_x();
    let at = k.mul_lo(item, 2u32);
    let addr = k.elem_addr(schedule.work_items, at);
    let [e, first] = k.ld_global_v2::<U32>(addr, 0, false);
    let active = k.setp(CmpOp::Ne, e, NO_ITEM);
    let (expert, m0, count, out_start) = (
        k.var::<U32>(0u32),
        k.var::<U32>(0u32),
        k.var::<U32>(0u32),
        k.var::<U32>(0u32),
    );
    k.if_then(active, |k| {
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
    let n0 = k.mul_lo(by, tile_n);
    WorkItem {
        expert,
        m0,
        n0,
        count,
        out_start,
    }
}

/// Distance between a thread's 4 output rows (and columns): adjacent (`4·ty + i`) in f32
/// compute, so 4 values are one `ld.shared.v4`; 16 apart (`ty + 16·i`) in f64 compute, where
/// there is no 4-wide load and adjacent 8-byte columns would put a warp's 16 `tx` 32 bytes
/// apart (a 4-way bank conflict) instead of on 16 consecutive doubles.
fn own_step<A: Float>() -> u32 {
    if A::TYPE.bytes() == 4 {
        1
    } else {
        EDGE
    }
}

/// [`work_item`] plus the CUDA-core thread layout for storage type `T`.
pub(crate) fn tile_coords<T: MoeElem>(
    k: &mut KernelBuilder,
    schedule: Schedule,
    capacity: Reg<U32>,
) -> Tile {
    let tile_k = tile_k::<T>();
    let own_step = own_step::<T::Acc>();
    let tid = k.tid_x();
    let tx = k.and(tid, EDGE - 1);
    let ty = k.shr(tid, EDGE.trailing_zeros());
    // First owned row/column: 4·ty when adjacent, ty when 16 apart.
    let spread = if own_step == 1 { PER_THREAD } else { 1 };
    let row_in_tile = k.mul_lo(ty, spread);
    let col_in_tile = k.mul_lo(tx, spread);
    // A warp covers one 32-byte sector of each of its rows: `lanes` adjacent quads per row
    // (2 of 16 bytes, or 4 of 8), `32 / lanes` rows; `QUADS_PER_ROW / lanes` warps side by side.
    // Lane l of warp w: quad `l mod lanes + lanes·(w mod side)`, row `l / lanes + rows·(w / side)`.
    let quad_bytes = tile_k / QUADS_PER_ROW * T::TYPE.bytes();
    let lanes = (32 / quad_bytes).clamp(1, QUADS_PER_ROW);
    let side = QUADS_PER_ROW / lanes;
    let lane = k.and(tid, 31u32);
    let warp = k.shr(tid, 5u32);
    let first_quad = {
        let w = k.and(warp, side - 1);
        k.mul_lo(w, lanes)
    };
    let lane_quad = k.and(lane, lanes - 1);
    let quad = k.add(first_quad, lane_quad);
    let kk = k.mul_lo(quad, tile_k / QUADS_PER_ROW);
    let first_row = {
        let w = k.shr(warp, side.trailing_zeros());
        k.mul_lo(w, 32 / lanes)
    };
    let lane_row = k.shr(lane, lanes.trailing_zeros());
    let r0 = k.add(first_row, lane_row);
    let layout = SharedLayout::of(lanes, tile_k / QUADS_PER_ROW);
    let stage_slot = {
        let slot = k.mad_lo(kk, layout.stride, r0);
        if layout.shift_mask == 0 {
            slot
        } else {
            let shift = k.and(kk, layout.shift_mask);
            k.add(slot, shift)
        }
    };
    let WorkItem {
        expert,
        m0,
        n0,
        count,
        out_start,
    } = work_item(k, schedule, TILE_N);
    Tile {
        expert,
        m0,
        n0,
        count,
        capacity,
        out_start,
        row_in_tile,
        col_in_tile,
        own_step,
        kk,
        r0,
        tile_k,
        layout,
        stage_slot,
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
        for i in 0..PASSES {
            let r = k.add(self.r0, i * ROWS_PER_PASS);
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

/// A shared tile `[TILE_K][stride]` in the compute type ([`SharedLayout`]).
fn shared_tile<A: Float>(k: &mut KernelBuilder, name: &str, tile: &Tile) -> SharedArr<A> {
    k.shared_array::<A>(name, tile.tile_k * tile.layout.stride)
}

/// Stages columns `k0 .. k0 + TILE_K` of the loader rows: `tile[kk + e][r] = src[base_r + k0 +
/// kk + e]` for the thread's quad, zero outside the matrix. One vector load per quad when `len`
/// is a multiple of the quad (so a quad starting inside a row ends inside it), else one load
/// per element.
pub(crate) fn stage_tile<T: MoeElem>(
    k: &mut KernelBuilder,
    tile: &Tile,
    src: GlobalPtr<T>,
    rows: &LoaderRows,
    smem: SharedArr<T::Acc>,
    k0: Reg<U32>,
    len: u32,
) {
    let quad = tile.quad();
    let col = k.add(k0, tile.kk);
    let col_ok = k.setp_lt(col, len);
    let store = k.shared_elem(smem, tile.stage_slot);
    let elem = T::Acc::TYPE.bytes();
    for (i, (&base, &row_ok)) in rows.base.iter().zip(&rows.valid).enumerate() {
        let values: Vec<Reg<T::Acc>> = (0..quad)
            .map(|_| super::common::constant::<T::Acc>(k, 0.0))
            .collect();
        let index = k.add(base, col);
        if len.is_multiple_of(quad) {
            let ok = k.and_pred(row_ok, col_ok);
            k.if_then(ok, |k| {
                let addr = k.elem_addr(src, index);
                let raw = load_quad::<T>(k, addr, quad);
                for (&d, r) in values.iter().zip(raw) {
                    let v = widen(k, r);
                    k.assign(d, v);
                }
            });
        } else {
            for (e, &d) in values.iter().enumerate() {
                let col_e = k.add(col, e as u32);
                let col_e_ok = k.setp_lt(col_e, len);
                let ok = k.and_pred(row_ok, col_e_ok);
                k.if_then(ok, |k| {
                    let addr = k.elem_addr(src, index);
                    let raw = k.ld_global_nc::<T>(addr, (e as u32 * T::TYPE.bytes()) as i32);
                    let v = widen(k, raw);
                    k.assign(d, v);
                });
            }
        }
        let row_offset = i as u32 * ROWS_PER_PASS * elem;
        for (e, &v) in values.iter().enumerate() {
            // `kk + e` has `kk`'s shift: `e` < quad leaves the shift bit alone.
            let offset = row_offset + e as u32 * tile.layout.stride * elem;
            k.st_shared(store, offset as i32, v);
        }
    }
}

/// `quad` (4 or 2) consecutive elements at `addr` with one `ld.global.nc.v4` / `.v2`.
fn load_quad<T: MoeElem>(k: &mut KernelBuilder, addr: Reg<U64>, quad: u32) -> Vec<Reg<T>> {
    if quad == 4 {
        k.ld_global_v4::<T>(addr, 0, true).to_vec()
    } else {
        k.ld_global_v2::<T>(addr, 0, true).to_vec()
    }
}

/// The thread's four values of a shared row ([`own_step`] apart): one `ld.shared.v4` when
/// adjacent, four loads otherwise.
fn read_four<A: Float>(
    k: &mut KernelBuilder,
    tile: &Tile,
    addr: Reg<U32>,
    offset: i32,
) -> Vec<Reg<A>> {
    if tile.own_step == 1 {
        k.ld_shared_v4::<A>(addr, offset).to_vec()
    } else {
        let step = (tile.own_step * A::TYPE.bytes()) as i32;
        (0..PER_THREAD as i32)
            .map(|e| k.ld_shared::<A>(addr, offset + e * step))
            .collect()
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

/// `acc_b[i][j] += Σ_kk a_tile[kk][row_i] · b_tile_b[kk][col_j]` for every `B` operand
/// (the swiglu up-projection shares the `A` values between two weight tiles).
pub(crate) fn multiply_tiles<A: Float>(
    k: &mut KernelBuilder,
    tile: &Tile,
    a_tile: SharedArr<A>,
    b_tiles: &[SharedArr<A>],
    accs: &[Vec<Vec<Reg<A>>>],
) {
    let elem = A::TYPE.bytes();
    let a_read = k.shared_elem(a_tile, tile.row_in_tile);
    let b_reads: Vec<Reg<U32>> = b_tiles
        .iter()
        .map(|&b| k.shared_elem(b, tile.col_in_tile))
        .collect();
    for kk in 0..tile.tile_k {
        let row_offset = (tile.layout.row_start(kk) * elem) as i32;
        let a = read_four::<A>(k, tile, a_read, row_offset);
        for (&b_read, acc) in b_reads.iter().zip(accs) {
            let b = read_four::<A>(k, tile, b_read, row_offset);
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
    let a_tile = shared_tile::<T::Acc>(k, "a_tile", tile);
    let b_tiles: Vec<SharedArr<T::Acc>> = (0..b_srcs.len())
        .map(|i| shared_tile::<T::Acc>(k, &format!("b_tile{i}"), tile))
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

/// Writes the thread's outputs `out[(offsets[e] + m0 + row_i) · N + n0 + col_j] = f(i, j)` for
/// routed slots (`< counts[e]`, so packed bins never write into their neighbours) and in-range
/// columns: one `st.global.v4` per row when the columns are adjacent and `N` a multiple of 4
/// (the 4 columns are then all inside or all outside), else element by element.
pub(crate) fn store_outputs<T: MoeElem>(
    k: &mut KernelBuilder,
    tile: &Tile,
    out: GlobalPtr<T>,
    n_total: u32,
    mut value: impl FnMut(&mut KernelBuilder, usize, usize) -> Reg<T::Acc>,
) {
    k.comment("store the output tile");
    let bin_start = tile.out_start;
    let step = tile.own_step;
    let vector = step == 1 && n_total.is_multiple_of(PER_THREAD);
    let n = k.add(tile.n0, tile.col_in_tile);
    let first_row = k.add(tile.m0, tile.row_in_tile);
    for i in 0..PER_THREAD {
        let slot = k.add(first_row, i * step);
        let slot_ok = k.setp_lt(slot, tile.count);
        let row = k.add(bin_start, slot);
        let index = k.mad_lo(row, n_total, n);
        let values: Vec<Reg<T::Acc>> = (0..PER_THREAD as usize)
            .map(|j| value(k, i as usize, j))
            .collect();
        if vector {
            let n_ok = k.setp_lt(n, n_total);
            let ok = k.and_pred(slot_ok, n_ok);
            k.if_then(ok, |k| {
                let stored: [Reg<T>; 4] = std::array::from_fn(|j| narrow::<T>(k, values[j]));
                let addr = k.elem_addr(out, index);
                k.st_global_v4(addr, 0, stored);
            });
        } else {
            for (j, &v) in values.iter().enumerate() {
                let column = j as u32 * step;
                let n_j = k.add(n, column);
                let n_ok = k.setp_lt(n_j, n_total);
                let ok = k.and_pred(slot_ok, n_ok);
                k.if_then(ok, |k| {
                    let stored = narrow::<T>(k, v);
                    let addr = k.elem_addr(out, index);
                    k.st_global(addr, (column * T::TYPE.bytes()) as i32, stored);
                });
            }
        }
    }
}

/// `silu(g) · u = g / (1 + e^(−g)) · u` in the compute type (f32: `e^(−g)` as
/// `ex2.approx(g · −log2 e)`, the same value as negating first).
pub(crate) fn silu_times<A: Float>(k: &mut KernelBuilder, g: Reg<A>, u: Reg<A>) -> Reg<A> {
    use crate::ir::{Precision, Rounding};
    let e = super::common::exp_neg(k, g);
    let denom = super::common::add_one(k, e);
    let s = k.div(g, denom, Precision::Rounded(Rounding::Rn));
    k.mul(s, u)
}
