//! The final normalisation and the stores of O and LSE from the O fragments.

use super::super::ext::AttentionBuilderExt;
use super::super::output::log_sum_exp;
use super::super::plan::Params;
use super::elem::TcElem;
use super::plan::{LanePlace, TcPlan, TILE_ROWS};
use super::scores::{row_sum, FragState};
use crate::builder::{KernelBuilder, Reg, F32, U32};
use crate::ir::CmpOp;

/// Normalises and stores this lane's two rows of each m16 tile, per row half `h`:
///
/// ```text
/// ℓ        = Σ over the row's 4 lanes of their shares
/// O[row]   = ℓ > 0 ? O / ℓ : 0        (rounded to T)
/// LSE[row] = ℓ > 0 ? (m + log2 ℓ) · ln 2 : −∞
/// ```
///
/// A lane's O fragment holds column pairs (4 or 8 bytes), so the warp first stages its rows × D
/// tile in shared memory (no longer needed: every warp is past its last tile) at its own rows
/// of [`stage_row_bytes`], and then stores it in 16-byte row chunks: whole sectors instead of
/// half-used ones. Rows past `Sq` store nothing; the lane with
/// `quad = 0` stores the row's LSE.
pub(super) fn store_output<T: TcElem>(
    k: &mut KernelBuilder,
    plan: &TcPlan,
    p: &Params<T, F32>,
    lane: &LanePlace,
    states: &[FragState<T>],
    shared: Reg<U32>,
) {
    k.comment("normalise: O / l and LSE; O staged in the warp's Q rows");
    k.bar_sync();
    let stage_row = stage_row_bytes::<T>(plan);
    let own_row = k.add(lane.warp_row, lane.group);
    let quad_bytes = k.shl(lane.quad, (2 * T::BYTES).trailing_zeros());
    let stage = k.mad_lo(own_row, stage_row, quad_bytes);
    let stage = k.add(shared, stage);
    for (tile, state) in states.iter().enumerate() {
        normalise_tile(k, p, lane, state, tile as u32, stage, stage_row);
    }
    k.bar_sync();
    store_staged_rows(k, plan, p, lane, shared);
}

/// [`store_output`]'s normalisation of m16 tile `tile` (its state `state`): O pairs staged at
/// `stage` (this lane's first pair of the warp's first row) plus the tile's rows, LSE stored.
fn normalise_tile<T: TcElem>(
    k: &mut KernelBuilder,
    p: &Params<T, F32>,
    lane: &LanePlace,
    state: &FragState<T>,
    tile: u32,
    stage: Reg<U32>,
    stage_row: u32,
) {
    for h in 0..2u32 {
        let l = row_sum(k, state.l[h as usize]);
        let has_mass = k.setp(CmpOp::Gt, l, 0.0f32);
        let inv = k.recip(l);
        let inv = k.selp(inv, 0.0f32, has_mass);
        for (j, o) in state.o.iter().enumerate() {
            let regs = o.f32_regs();
            let lo = k.mul(regs[2 * h as usize], inv);
            let hi = k.mul(regs[2 * h as usize + 1], inv);
            let offset = (TILE_ROWS * tile + 8 * h) * stage_row + j as u32 * 8 * T::BYTES;
            T::stage_pair(k, stage, offset as i32, lo, hi);
        }
        let lse = log_sum_exp::<F32>(k, state.m[h as usize], l);
        let lse = k.selp(lse, f32::NEG_INFINITY, has_mass);
        let row = lane.row(k, tile, h);
        let valid = k.setp_lt(row, p.seq_q);
        let first_in_row = k.setp(CmpOp::Eq, lane.quad, 0u32);
        let stores_lse = k.and_pred(valid, first_in_row);
        k.if_then(stores_lse, |k| {
            // `(b · Hq + h) · Sq + row`: LSE is contiguous `[B, Hq, Sq]`.
            let (head, batch) = (k.ctaid_y(), k.ctaid_z());
            let bh = k.mad_lo(batch, p.heads_q, head);
            let index = k.mad_lo(bh, p.seq_q, row);
            let lse_ptr = k.global_ptr(p.lse);
            let addr = k.elem_addr(lse_ptr, index);
            k.st_global(addr, 0, lse);
        });
    }
}

/// Bytes between the rows of the staged O tile: `D` elements and
/// [`TcElem::STAGE_PAD_BYTES`] (conflict-free pair stores; [`staged_chunk`] keeps the 16-byte
/// reads conflict-free). The block's `block_m` staged rows fit in the footprint.
fn stage_row_bytes<T: TcElem>(plan: &TcPlan) -> u32 {
    let bytes = plan.head_dim * T::BYTES + T::STAGE_PAD_BYTES;
    assert!(
        plan.block_m * bytes <= plan.shared_bytes,
        "the staged O tile ({} rows of {bytes} bytes) exceeds the {} shared bytes",
        plan.block_m,
        plan.shared_bytes
    );
    bytes
}

/// The row and 16-byte chunk of the warp's staged rows × D tile that `lane` copies in round
/// `i` (`C` chunks per row, `rows · C / 32` rounds), chosen so that each quarter-warp of the 16-byte
/// reads (one phase) covers all 32 banks:
///
/// ```text
/// C mod 8 = 0:  c = lane + 32·i;       row = c / C,                  chunk = c mod C
/// otherwise:    r = lane / 8 + 4·i;    row = 8·(r / C) + lane mod 8, chunk = r mod C
/// ```
///
/// The first reads 8 consecutive chunks of one row. The second (f16/bf16 at D 32 and 96,
/// where a quarter-warp would straddle two rows) reads one chunk of 8 consecutive rows, at
/// distinct bank quads as a staged row is an odd number of 16-byte quads. Either way a warp
/// request covers whole 32-byte sectors of O.
fn staged_chunk(
    k: &mut KernelBuilder,
    lane: Reg<U32>,
    i: u32,
    per_row: u32,
    stage_row: u32,
) -> (Reg<U32>, Reg<U32>) {
    if per_row.is_multiple_of(8) {
        let c = k.add(lane, 32 * i);
        return (k.div_int(c, per_row), k.rem(c, per_row));
    }
    assert!(
        (stage_row / 16) % 2 == 1,
        "staged rows of {stage_row} bytes are not an odd number of 16-byte quads"
    );
    let quarter = k.shr(lane, 3u32);
    let r = k.add(quarter, 4 * i);
    let band = k.div_int(r, per_row);
    let row_in_band = k.and(lane, 7u32);
    (k.mad_lo(band, 8u32, row_in_band), k.rem(r, per_row))
}

/// Copies the warp's staged rows × D output tile to O in 16-byte chunks, lane by lane as
/// [`staged_chunk`] deals them (`E` elements per chunk: chunk `j` of a row holds columns
/// `E·j ..`).
fn store_staged_rows<T: TcElem>(
    k: &mut KernelBuilder,
    plan: &TcPlan,
    p: &Params<T, F32>,
    lane: &LanePlace,
    shared: Reg<U32>,
) {
    k.comment("O: 16-byte row chunks from the staged tile");
    let per_row = plan.chunks_per_row();
    let warp_first = k.add(lane.tile_start, lane.warp_row);
    let (head, batch) = (k.ctaid_y(), k.ctaid_z());
    let o_start = p.o_layout.head_start(k, batch, head);
    let o_seq = p.o_layout.seq(k);
    let o = k.global_ptr(p.o);
    let stage_row = stage_row_bytes::<T>(plan);
    for i in 0..plan.warp_rows() * per_row / 32 {
        let (row, chunk) = staged_chunk(k, lane.lane, i, per_row, stage_row);
        let tile_row = k.add(lane.warp_row, row);
        let chunk_bytes = k.shl(chunk, 4u32);
        let src = k.mad_lo(tile_row, stage_row, chunk_bytes);
        let src = k.add(shared, src);
        let words = k.ld_shared_v4::<U32>(src, 0);
        let global_row = k.add(warp_first, row);
        let valid = k.setp_lt(global_row, p.seq_q);
        k.if_then(valid, |k| {
            let start = k.mad_lo(global_row, o_seq, o_start);
            let col = k.shl(chunk, plan.chunk_elems().trailing_zeros());
            let index = k.add(start, col);
            let addr = k.elem_addr(o, index);
            k.st_global_v4(addr, 0, words);
        });
    }
}
