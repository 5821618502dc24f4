//! The expert GEMMs on tensor cores (f16/bf16 on sm_80+, and f32 on tf32 tensor cores when
//! the configuration sets `allow_tf32`): the same grouped GEMMs as
//! [`super::expert`] — same entries and parameters, a work list built the same way — computed
//! by the shared `mma.m16n8k16` block tile of [`crate::templates::warp_mma`] (4 warps,
//! 3-stage `cp.async` ring, padded rows, `ldmatrix`, f32 accumulators).
//!
//! - **Tile** ([`wide`], [`geometry`]): f16/bf16 with every reduction length a whole number of
//!   16-byte pieces take 128-row work items and the 128 × 128 tile ([`Geometry::WIDE`]: per
//!   `mma` 1 `ldmatrix` matrix and 0.5 wavefronts of copies, where the 64 × 64 tile reads 2
//!   and copies 1; shared memory bounds these GEMMs), or 128 × 64 ([`Geometry::TALL`]) for
//!   SwiGLU's up-projection (two accumulator sets: 128 × 128 would need 256 registers a
//!   thread) and for outputs that 128 columns would pad more than 64. Their rings (60 KiB at
//!   most, 3 stages) go in dynamic shared memory when over the static 48 KiB, and the launch
//!   passes the same bytes ([`dynamic_shared_bytes`]). tf32 and ragged lengths keep the
//!   64 × 64 tile and 64-row items ([`wide`] says why). Grid `(n_max, ceil(N / block_n))`.
//! - **A** (the bin's rows, `block_m` slots from `m0`): `moe_expert_linear` and
//!   `moe_expert_swiglu_up` gather `X[token_ids[e·C + s]]` (the token id read once per staged
//!   row, outside the K loop); `moe_expert_swiglu_down` reads the permuted rows
//!   `G[offsets[e] + s]`. Rows past `counts[e]` are zero-filled (`cp.async` src-size 0).
//! - **B** (`W[e]`, `[N, len]` row-major): weight rows are the mma's columns and are contiguous
//!   along the reduction, so they stage like A and give B fragments by untransposed `ldmatrix`.
//!   SwiGLU's up-projection stages `W1[e]` and `W3[e]` beside one `X` tile and keeps two
//!   accumulator sets; the epilogue forms `silu(h1) ⊙ h3` in f32.
//! - **Rings**: every operand's ring lives in one shared array (slot-major), so each of a
//!   thread's pieces sits at a constant offset from its first one, and 16-byte pieces keep
//!   their global address outside the K loop (one `mad.wide` per piece and K tile). tf32
//!   operands are rounded once where they land (each thread its own pieces, after
//!   `cp.async.wait_group` and before the publishing barrier), not per fragment and warp.
//! - **Copies** ([`copy_piece_from`]) are 16-byte `cp.async` pieces when the reduction length
//!   (`H` for linear and up, `F` for down) is a multiple of 8, 8- or 4-byte ones when it is a
//!   multiple of 4 or 2 (each copy aligned and wholly inside or outside its row), and element
//!   by element for odd lengths; past the length the ring slot is zero, so ragged lengths stay
//!   on the tensor cores. Whatever the piece size, a warp's lanes copy whole rows' pieces
//!   together ([`tile::piece_slot_bytes`]: 16-byte pieces as one chunk column of 8
//!   rows per quarter-warp, so their shared writes, and tf32's in-place rounding of them, are
//!   conflict-free; narrower pieces consecutive along a row), so a request reads whole 64-byte
//!   row segments: at `H = 70`
//!   (4-byte pieces) the copies use 0.625 of the sectors they touch, the most 64-byte
//!   segments of 140-byte rows allow (0.19 with each lane's four pieces 16 bytes apart);
//!   16-byte copies of 16-byte aligned rows use 1.0.
//! - **Epilogue**: `out[offsets[e] + m0 + r, n0 + c]` for routed slots and in-range columns,
//!   rounded once; column pairs are stored as one packed 32-bit word when `N` is even.

use crate::builder::{GlobalPtr, KernelBuilder, Pred, Reg, F32, U32, U64};
use crate::dtype::DType;
use crate::ir::VoteMode;
use crate::templates::moe::Ffn;
use crate::templates::moe::MoeConfig;
use crate::templates::staging::{copy_elems, copy_piece_from};
use crate::templates::warp_mma::{
    self as tile, Accumulators, Geometry, LandedFn, Side, TileElem, WarpPos,
};

use super::common::{narrow, MoeElem};
use super::gemm::{gathered_row, permuted_row, silu_times, weight_row, work_item, Schedule};
use super::gemm::{TILE_M as GEMM_TILE_M, TILE_N as GEMM_TILE_N};
use super::{MoeShape, EXPERT_SWIGLU_DOWN, EXPERT_SWIGLU_UP};

/// Threads per tensor-core expert-GEMM block (every geometry: 4 warps).
pub const TC_THREADS: u32 = tile::THREADS;

/// Rows per work item when the tensor-core entries take the 128-row tiles (see
/// [`item_rows`](super::item_rows)).
pub const WIDE_ITEM_ROWS: u32 = Geometry::WIDE.block_m();

const _: () = assert!(
    Geometry::WIDE.threads() == TC_THREADS
        && Geometry::TALL.threads() == TC_THREADS
        && Geometry::TALL.block_m() == WIDE_ITEM_ROWS
        && Geometry::SQUARE.block_m() == GEMM_TILE_M
        && Geometry::SQUARE.block_n() == GEMM_TILE_N
);

/// Whether the tensor-core entries of `cfg` take the 128-row tiles ([`Geometry::WIDE`],
/// [`Geometry::TALL`]): f16/bf16, with every expert GEMM's reduction length (`H`; and `F`
/// for SwiGLU) a whole number of 16-byte pieces. Ragged lengths copy 8-, 4- or 2-byte
/// pieces, up to 16 times as many per thread, each with its own row address and predicate,
/// beside 128 accumulator registers; tf32's SwiGLU down-projection spills at 128 × 128
/// (ptxas: 255 registers, 60 to 72 bytes of spill stores on sm_80 to sm_89). Those
/// configurations keep the 64 × 64 tile ([`Geometry::SQUARE`]) for every entry (the work
/// list has one row-tile size per configuration).
pub fn wide(cfg: &MoeConfig) -> bool {
    if !matches!(cfg.dtype, DType::F16 | DType::BF16) {
        return false;
    }
    let per_chunk = tile::CHUNK_BYTES / cfg.dtype.size_bytes();
    let lens: &[u32] = match cfg.ffn {
        Ffn::Linear => &[cfg.hidden],
        Ffn::Swiglu => &[cfg.hidden, cfg.expert_dim],
    };
    lens.iter().all(|len| len.is_multiple_of(per_chunk))
}

/// The block tile of tensor-core expert entry `entry` of `width` output columns when the
/// configuration's tiles are `wide`: [`Geometry::TALL`] (128 × 64) for the SwiGLU
/// up-projection, whose two accumulator sets (W1, W3) would need 256 registers a thread at
/// 128 × 128, and for widths that 128-column tiles would pad more than 64-column ones (`N =
/// 64`: half of every block's columns); [`Geometry::WIDE`] (128 × 128) for the others;
/// [`Geometry::SQUARE`] when not `wide`.
pub(crate) fn geometry(wide: bool, entry: &str, width: u32) -> Geometry {
    let wide_pads_more =
        2 * width.div_ceil(Geometry::WIDE.block_n()) > width.div_ceil(Geometry::TALL.block_n());
    match (wide, entry) {
        (false, _) => Geometry::SQUARE,
        (true, EXPERT_SWIGLU_UP) => Geometry::TALL,
        (true, _) if wide_pads_more => Geometry::TALL,
        (true, _) => Geometry::WIDE,
    }
}

/// Output columns of expert entry `entry` of `cfg`: `H` for the SwiGLU down-projection, `F`
/// for the others.
pub(crate) fn entry_width(cfg: &MoeConfig, entry: &str) -> u32 {
    if entry == EXPERT_SWIGLU_DOWN {
        cfg.hidden
    } else {
        cfg.expert_dim
    }
}

/// B operands (weights) of tensor-core entry `entry`: W1 and W3 for the SwiGLU
/// up-projection, one otherwise.
fn weight_operands(entry: &str) -> u32 {
    if entry == EXPERT_SWIGLU_UP {
        2
    } else {
        1
    }
}

/// Bytes of the rings of geometry `g` with `weights` B operands: `stages` slots of one A
/// stage and `weights` B stages.
pub(crate) fn ring_bytes(g: Geometry, weights: u32) -> u32 {
    g.stages * (g.stage_bytes(Side::A) + weights * g.stage_bytes(Side::B))
}

/// The dynamic shared memory a launch of tensor-core entry `entry` passes: its rings' bytes
/// when they exceed the static limit (the 128-row tiles' 60 KiB), else 0.
pub(crate) fn dynamic_shared_bytes(cfg: &MoeConfig, entry: &str) -> u32 {
    let g = geometry(wide(cfg), entry, entry_width(cfg, entry));
    let bytes = ring_bytes(g, weight_operands(entry));
    if bytes > cfg.arch.max_static_shared_bytes() {
        bytes
    } else {
        0
    }
}

/// Whether expert entry `entry` of `cfg` runs on tensor cores: f16/bf16, or f32 with
/// `allow_tf32` (tf32 `mma.m16n8k8`, see `warp_mma/tf32.rs`), on a target with `mma.m16n8k16`,
/// `cp.async`, `ldmatrix` and packed f32 → f16x2/bf16x2/tf32 conversion (sm_80+), whatever the
/// reduction length, for every expert entry. Everything else keeps the CUDA-core entry,
/// silently.
pub fn takes(cfg: &MoeConfig, _entry: &str) -> bool {
    let a = cfg.arch;
    let tensor_dtype = match cfg.dtype {
        DType::F16 | DType::BF16 => true,
        DType::F32 => cfg.allow_tf32,
        DType::F64 => false,
    };
    tensor_dtype
        && a.has_mma_m16n8k16()
        && a.has_cp_async()
        && a.has_ldmatrix()
        && a.has_packed_f32_conversion()
}

/// The epilogue's value of one output from the matching output of every accumulator set.
type Epilogue<'a> = &'a dyn Fn(&mut KernelBuilder, &[Reg<F32>]) -> Reg<F32>;

/// One staged row of an operand: element index of its start and whether it exists.
type Row = (Reg<U32>, Pred);

/// One piece this thread copies into every stage of one operand, to `[dst + offset]` of the
/// slot ([`Ring`]).
struct Piece {
    source: Source,
    row_ok: Pred,
    /// `row_ok ? piece bytes : 0`, when every piece of the row lies inside it (whole K tiles).
    src_bytes: Option<Reg<U32>>,
    offset: i32,
}

/// Where a piece reads K tile `t`.
enum Source {
    /// 16-byte pieces (at most four per operand and thread), addressing hoisted out of the K
    /// loop: `from + t · TILE_K_BYTES`. A missing row reads the operand's first row instead,
    /// with source size 0: in bounds for every tile the column test lets through, and the
    /// step stays an immediate (a register per piece fewer beside the 128-row tiles'
    /// accumulators).
    Hoisted { from: Reg<U64> },
    /// Narrower pieces (up to 16 per operand and thread: hoisting them all would cost about
    /// three registers each): element `base + t · TILE_K + col`, formed each stage.
    Row { base: Reg<U32> },
}

/// The operands' rings in one shared array: ring slot `s` holds the A tile at byte
/// `s · slot_bytes` and B operand `o`'s tile `a_bytes + o · b_bytes` further on, so every
/// piece of every operand sits at a constant offset from this thread's first piece (`dst`)
/// within a slot.
struct Ring {
    geometry: Geometry,
    weights: u32,
    dst: Reg<U32>,
}

impl Ring {
    /// Bytes of one ring slot (every operand's tile).
    fn slot_bytes(&self) -> u32 {
        ring_bytes(self.geometry, self.weights) / self.geometry.stages
    }

    /// Offset of B operand `o`'s tile within a slot.
    fn weight_offset(&self, o: u32) -> u32 {
        let g = self.geometry;
        g.stage_bytes(Side::A) + o * g.stage_bytes(Side::B)
    }

    /// This thread's first piece in ring slot `slot`.
    fn piece_base(&self, k: &mut KernelBuilder, slot: Reg<U32>) -> Reg<U32> {
        k.mad_lo(slot, self.slot_bytes(), self.dst)
    }
}

/// Whether pieces of `piece_bytes` take [`Source::Hoisted`].
fn hoisted(piece_bytes: u32) -> bool {
    piece_bytes == tile::CHUNK_BYTES
}

/// The pieces this thread copies per stage of one operand whose rows are `rows`:
/// piece `i` of row `rows[i]` at columns `col..`, byte `offset` of the slot.
#[allow(clippy::too_many_arguments)]
fn pieces<T: TileElem>(
    k: &mut KernelBuilder,
    g: Geometry,
    src: GlobalPtr<T>,
    rows: &[Row],
    col: Reg<U32>,
    piece_bytes: u32,
    whole_tiles: bool,
    operand_offset: u32,
) -> Vec<Piece> {
    rows.iter()
        .enumerate()
        .map(|(i, &(base, row_ok))| {
            let source = if hoisted(piece_bytes) {
                let index = k.add(base, col);
                let index = k.selp(index, col, row_ok);
                Source::Hoisted {
                    from: k.elem_addr(src, index),
                }
            } else {
                Source::Row { base }
            };
            let offset = operand_offset + i as u32 * g.piece_stride_bytes(piece_bytes);
            Piece {
                source,
                row_ok,
                src_bytes: whole_tiles.then(|| k.selp(piece_bytes, 0u32, row_ok)),
                offset: offset as i32,
            }
        })
        .collect()
}

/// The grouped GEMM of one work item: `acc[o] = A · B_oᵀ` over `len`, A rows from `a_row(r)`,
/// B rows `W_o[e, n0 + r, :]`, in the block tile of `pos.geometry`. Blocks whose tile holds
/// no routed row (past the work list) skip the loop (a block-uniform branch). tf32 operands
/// are rounded once where they land ([`TileElem::round_landed`]: each thread its own pieces,
/// before the publishing barrier).
#[allow(clippy::too_many_arguments)]
fn grouped_gemm<T: MoeElem + TileElem>(
    k: &mut KernelBuilder,
    tid: Reg<U32>,
    pos: &WarpPos,
    item: &super::gemm::WorkItem,
    a_src: GlobalPtr<T>,
    a_row: &mut dyn FnMut(&mut KernelBuilder, Reg<U32>) -> Row,
    b_srcs: &[GlobalPtr<T>],
    n_total: u32,
    len: u32,
) -> Vec<Accumulators<T::Shape>> {
    let g = pos.geometry;
    let bytes = T::TYPE.bytes();
    let elems = copy_elems(len, tile::CHUNK_BYTES / bytes);
    let piece_bytes = elems * bytes;
    let (row0, col, at) = g.piece_slot_bytes(k, (tid, 0), bytes, piece_bytes);
    // Both operands deal their rows alike, B's (block_n ≤ block_m) being A's first ones.
    let b_pieces = g.pieces_per_thread(g.block_n(), piece_bytes) as usize;
    let rows: Vec<Reg<U32>> = (0..g.pieces_per_thread(g.block_m(), piece_bytes))
        .map(|i| match i {
            0 => row0,
            _ => k.add(row0, i * g.piece_row_stride(piece_bytes)),
        })
        .collect();
    let whole_tiles = len.is_multiple_of(T::TILE_K);
    let hoisted = hoisted(piece_bytes);
    k.comment("staged rows: gathered A rows, weight rows");
    let a_rows: Vec<Row> = rows.iter().map(|&r| a_row(k, r)).collect();
    let mut copies = vec![(
        a_src,
        pieces(k, g, a_src, &a_rows, col, piece_bytes, whole_tiles, 0),
    )];
    let weights = b_srcs.len() as u32;
    let ring_bytes = ring_bytes(g, weights);
    let rings = if ring_bytes > k.arch().max_static_shared_bytes() {
        k.dynamic_shared::<T>(ring_bytes)
    } else {
        k.shared_array::<T>("rings", ring_bytes / bytes)
    };
    let rings = k.shared_base(rings);
    let ring = Ring {
        geometry: g,
        weights,
        dst: k.add(rings, at),
    };
    for (o, &src) in b_srcs.iter().enumerate() {
        let b_rows: Vec<Row> = rows[..b_pieces]
            .iter()
            .map(|&r| weight_row(k, item, n_total, len, r))
            .collect();
        let offset = ring.weight_offset(o as u32);
        let b = pieces(k, g, src, &b_rows, col, piece_bytes, whole_tiles, offset);
        copies.push((src, b));
    }
    let mut acc: Vec<Accumulators<T::Shape>> =
        b_srcs.iter().map(|_| T::zero_acc_in(k, g)).collect();
    let (a_lane, b_lane) = pos.fragment_offsets(k, bytes);
    let a_lane = k.add(rings, a_lane);
    let b_lanes: Vec<Reg<U32>> = (0..weights)
        .map(|o| {
            let lane = k.add(rings, b_lane);
            k.add(lane, ring.weight_offset(o))
        })
        .collect();
    let fill = |k: &mut KernelBuilder, k_tile: Reg<U32>, slot: Reg<U32>| {
        let dst = ring.piece_base(k, slot);
        // The tile's first column, for narrow pieces and the column test; with whole K
        // tiles every piece lies inside its row: no column test.
        let first = (!whole_tiles || !hoisted).then(|| k.mad_lo(k_tile, T::TILE_K, col));
        let col_ok = first
            .filter(|_| !whole_tiles)
            .map(|first| k.setp_lt(first, len));
        for (src, pieces) in &copies {
            for p in pieces {
                let ok = match col_ok {
                    Some(col_ok) => k.and_pred(p.row_ok, col_ok),
                    None => p.row_ok,
                };
                let from = match p.source {
                    Source::Hoisted { from } => {
                        let from = k.mad_wide(k_tile, tile::TILE_K_BYTES, from);
                        match col_ok {
                            Some(_) => k.selp(from, src.addr, ok),
                            None => from,
                        }
                    }
                    Source::Row { base } => {
                        let first = first.expect("narrow pieces form their column each stage");
                        let index = k.add(base, first);
                        let index = k.selp(index, 0u32, ok);
                        k.elem_addr(*src, index)
                    }
                };
                copy_piece_from::<T>(k, from, ok, p.src_bytes, dst, p.offset, elems);
            }
        }
    };
    let round = |k: &mut KernelBuilder, slot: Reg<U32>| {
        k.comment("round this thread's landed pieces to tf32");
        let at = ring.piece_base(k, slot);
        for p in copies.iter().flat_map(|(_, pieces)| pieces) {
            T::round_landed(k, at, p.offset, elems);
        }
    };
    let landed: Option<LandedFn<'_>> = T::ROUNDS_ON_LANDING.then_some(&round);
    // The item was read from global memory, so the validator cannot know every lane holds the
    // same one; `vote.any` of a predicate that is in fact block-uniform restates it as a
    // visibly warp-uniform value for the branch around the mma loop.
    let has_rows = k.setp_lt(item.m0, item.count);
    let has_rows = k.vote(VoteMode::Any, has_rows);
    k.if_then(has_rows, |k| {
        let k_tiles = len.div_ceil(T::TILE_K);
        tile::run_ring_of(k, g.stages, k_tiles, &fill, landed, &mut |k, slot| {
            let slot_at = k.mul_lo(slot, ring.slot_bytes());
            let a_at = k.add(a_lane, slot_at);
            let b_at: Vec<Reg<U32>> = b_lanes.iter().map(|&b| k.add(b, slot_at)).collect();
            T::multiply_landed_tile_in(k, g, &mut acc, a_at, &b_at);
        });
    });
    acc
}

/// Stores `value(outputs of every accumulator set)` at `out[(offsets[e] + m0 + r) · N + n0 +
/// c]` for routed slots and columns `< N`: packed pairs when `N` is even (then `c` even and
/// `c + 1 < N` together), single elements otherwise. The column tests are made once per
/// column (they do not depend on the row) and each row's stores share one address.
fn store<T: MoeElem + TileElem>(
    k: &mut KernelBuilder,
    pos: &WarpPos,
    item: &super::gemm::WorkItem,
    out: GlobalPtr<T>,
    n_total: u32,
    acc: &[Accumulators<T::Shape>],
    value: Epilogue<'_>,
) {
    k.comment("epilogue: round and store routed rows");
    let (row0, col0) = pos.output_origin(k);
    let col0 = k.add(item.n0, col0);
    let regs: Vec<Vec<Vec<Vec<Reg<F32>>>>> = acc
        .iter()
        .map(|set| {
            set.iter()
                .map(|row| row.iter().map(|frag| frag.f32_regs()).collect())
                .collect()
        })
        .collect();
    // Columns `col0 + 8·ni + j` stored separately: j = 0 only for packed pairs.
    let singles = if n_total.is_multiple_of(2) { 1 } else { 2 };
    let g = pos.geometry;
    let col_ok: Vec<Vec<Pred>> = (0..g.warp_n_tiles)
        .map(|ni| {
            (0..singles)
                .map(|j| {
                    let c = k.add(col0, 8 * ni + j);
                    k.setp_lt(c, n_total)
                })
                .collect()
        })
        .collect();
    let bytes = T::TYPE.bytes() as i32;
    for mi in 0..g.warp_m_tiles as usize {
        for h in 0..2usize {
            let r = k.add(row0, 16 * mi as u32 + 8 * h as u32);
            let slot = k.add(item.m0, r);
            let slot_ok = k.setp_lt(slot, item.count);
            let row = k.add(item.out_start, slot);
            let first = k.mad_lo(row, n_total, col0);
            let addr = k.elem_addr(out, first);
            for (ni, col_ok) in col_ok.iter().enumerate() {
                // Outputs are formed only where they are stored: the tile's padding rows and
                // columns skip the epilogue's arithmetic.
                let output = |k: &mut KernelBuilder, j: usize| {
                    let set: Vec<Reg<F32>> = regs.iter().map(|s| s[mi][ni][2 * h + j]).collect();
                    value(k, &set)
                };
                let at = |j: usize| (8 * ni + j) as i32 * bytes;
                if singles == 1 {
                    let ok = k.and_pred(slot_ok, col_ok[0]);
                    k.if_then(ok, |k| {
                        let (lo, hi) = (output(k, 0), output(k, 1));
                        T::store_pair(k, addr, at(0), lo, hi);
                    });
                } else {
                    for (j, &col_ok) in col_ok.iter().enumerate() {
                        let ok = k.and_pred(slot_ok, col_ok);
                        k.if_then(ok, |k| {
                            let v = output(k, j);
                            let stored = narrow::<T>(k, v.retype());
                            k.st_global(addr, at(j), stored);
                        });
                    }
                }
            }
        }
    }
}

/// The schedule pointers every expert entry takes.
fn schedule(k: &mut KernelBuilder) -> Schedule {
    let counts = k.param_ptr::<U32>("counts");
    let offsets = k.param_ptr::<U32>("offsets");
    let work_items = k.param_ptr::<U32>("work_items");
    Schedule {
        counts: k.global_ptr(counts),
        offsets: k.global_ptr(offsets),
        work_items: k.global_ptr(work_items),
    }
}

/// The gathering entries (linear, swiglu up): `x`, `token_ids`, schedule, the weights, the
/// output, `tokens`, `capacity`; returns `acc[o] = X_gathered · W_o[e]ᵀ` and the store target.
fn gathering<T: MoeElem + TileElem>(
    shape: &MoeShape,
    k: &mut KernelBuilder,
    weights: &[&str],
    output: &str,
    value: Epilogue<'_>,
) {
    k.require_block([TC_THREADS, 1, 1]);
    let g = geometry(shape.wide_tiles, k.name(), shape.expert_dim);
    let x = k.param_ptr::<T>("x");
    let token_ids = k.param_ptr::<U32>("token_ids");
    let schedule = schedule(k);
    let ws: Vec<_> = weights.iter().map(|w| k.param_ptr::<T>(w)).collect();
    let y = k.param_ptr::<T>(output);
    let tokens = k.param::<U32>("tokens");
    let capacity = k.param::<U32>("capacity");
    let (x, token_ids, y) = (k.global_ptr(x), k.global_ptr(token_ids), k.global_ptr(y));
    let ws: Vec<GlobalPtr<T>> = ws.into_iter().map(|w| k.global_ptr(w)).collect();
    let tokens = k.load_param(tokens);
    let capacity = k.load_param(capacity);
    let (tid, pos) = WarpPos::of_thread_in(k, g);
    let item = work_item(k, schedule, g.block_n());
    let bin_start = k.mul_lo(item.expert, capacity);
    let hidden = shape.hidden;
    let acc = grouped_gemm(
        k,
        tid,
        &pos,
        &item,
        x,
        &mut |k, r| gathered_row(k, &item, bin_start, token_ids, tokens, hidden, r),
        &ws,
        shape.expert_dim,
        hidden,
    );
    store(k, &pos, &item, y, shape.expert_dim, &acc, value);
}

/// `moe_expert_linear` on tensor cores (parameters as [`super::expert::build_linear`]).
pub(crate) fn build_linear<T: MoeElem + TileElem>(shape: &MoeShape, k: &mut KernelBuilder) {
    gathering::<T>(shape, k, &["w"], "y", &|_, v| v[0]);
}

/// `moe_expert_swiglu_up` on tensor cores (parameters as [`super::expert::build_swiglu_up`]).
pub(crate) fn build_swiglu_up<T: MoeElem + TileElem>(shape: &MoeShape, k: &mut KernelBuilder) {
    gathering::<T>(shape, k, &["w1", "w3"], "gated", &|k, v| {
        silu_times(k, v[0], v[1])
    });
}

/// `moe_expert_swiglu_down` on tensor cores (parameters as
/// [`super::expert::build_swiglu_down`]).
pub(crate) fn build_swiglu_down<T: MoeElem + TileElem>(shape: &MoeShape, k: &mut KernelBuilder) {
    k.require_block([TC_THREADS, 1, 1]);
    let g = geometry(shape.wide_tiles, k.name(), shape.hidden);
    let gated = k.param_ptr::<T>("gated");
    let schedule = schedule(k);
    let w2 = k.param_ptr::<T>("w2");
    let y = k.param_ptr::<T>("y");
    let (gated, w2, y) = (k.global_ptr(gated), k.global_ptr(w2), k.global_ptr(y));
    let (tid, pos) = WarpPos::of_thread_in(k, g);
    let item = work_item(k, schedule, g.block_n());
    let len = shape.expert_dim;
    let acc = grouped_gemm(
        k,
        tid,
        &pos,
        &item,
        gated,
        &mut |k, r| permuted_row(k, &item, len, r),
        &[w2],
        shape.hidden,
        len,
    );
    store(k, &pos, &item, y, shape.hidden, &acc, &|_, v| v[0]);
}
