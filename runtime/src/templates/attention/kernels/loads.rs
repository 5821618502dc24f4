//! Moving Q into registers and K/V tiles into shared memory.

use super::ext::{acc_imm, AttentionBuilderExt};
use super::plan::{HeadOffsets, Params, Plan, SharedTiles, ThreadPlace};
use crate::builder::{Float, KernelBuilder, Reg, U32, U64};

/// This thread's slice of its query row, pre-scaled for the exponential:
///
/// ```text
/// q̃[c] = Q[b, h, row, col(c)] · scale · log2 e     (f32 accumulators: scores in log2 units)
/// q̃[c] = Q[b, h, row, col(c)] · scale              (f64: natural units, accurate exp)
/// ```
///
/// with `col(chunk, e) = chunk · G · vector + g · vector + e`: the row's `G` threads read
/// consecutive vectors, so a warp's request covers whole 32-byte sectors. Rows past `Sq` are
/// zero (never stored).
pub(super) fn load_query_slice<T: Float, A: Float>(
    k: &mut KernelBuilder,
    plan: &Plan,
    p: &Params<T, A>,
    place: &ThreadPlace,
    heads: &HeadOffsets,
) -> Vec<Reg<A>> {
    k.comment("Q: this thread's columns of its query row, pre-scaled, in registers");
    let factor = match plan.elem_bytes {
        8 => p.scale,
        _ => k.mul(p.scale, acc_imm::<A>(std::f64::consts::LOG2_E)),
    };
    let q: Vec<Reg<A>> = (0..plan.tiles.cols_per_thread)
        .map(|_| {
            let r = k.reg::<A>();
            k.assign(r, acc_imm::<A>(0.0));
            r
        })
        .collect();
    let vector = plan.tiles.vector;
    let q_copy = q.clone();
    k.if_then(place.row_valid, |k| {
        let seq_stride = p.q_layout.seq(k);
        let row_addr = row_address(k, plan, p.q, heads.q_start, seq_stride, place);
        for c in 0..plan.chunks() {
            let offset = (plan.chunk_col(c) * plan.elem_bytes) as i32;
            let raw = k.ld_global_nc_n::<T>(row_addr, offset, vector as usize);
            for (e, x) in raw.into_iter().enumerate() {
                let wide = k.widen::<T, A>(x);
                let dst = q_copy[(c * vector) as usize + e];
                k.mul_into(dst, wide, factor);
            }
        }
    });
    q
}

/// Global address of this thread's first column in its query row of Q or O:
/// `base + (head_start + row · seq_stride + g · vector) · size(T)`.
pub(super) fn row_address<T: Float>(
    k: &mut KernelBuilder,
    plan: &Plan,
    base: crate::builder::GlobalPtr<T>,
    head_start: Reg<U32>,
    seq_stride: Reg<U32>,
    place: &ThreadPlace,
) -> Reg<U64> {
    let row_start = k.mad_lo(place.row, seq_stride, head_start);
    let index = k.mad_lo(place.lane_in_row, plan.tiles.vector, row_start);
    k.elem_addr(base, index)
}

/// Per-thread values of the cooperative K/V copy, fixed for the whole kernel: each step a
/// thread moves one vector (`vector` elements) of the tile.
#[derive(Debug, Clone, Copy)]
pub(super) struct CopyLane {
    pub tid: Reg<U32>,
    /// `tid · vector · size(acc)` (16 bytes per thread): byte offset into a shared tile.
    pub shared_offset: Reg<U32>,
}

pub(super) fn copy_lane(k: &mut KernelBuilder, plan: &Plan, place: &ThreadPlace) -> CopyLane {
    CopyLane {
        tid: place.tid,
        shared_offset: k.mul_lo(place.tid, plan.shared_vector_bytes()),
    }
}

/// Stages the K and V rows `kv0 .. kv0 + block_n` of this kv head in shared memory, converted
/// to the accumulator type:
///
/// ```text
/// Ks[j, :] = acc(K[b, kv, kv0 + j, :]),  Vs[j, :] = acc(V[b, kv, kv0 + j, :])   j < rows_valid
/// Ks[j, :] = Vs[j, :] = 0                                                        otherwise
/// ```
///
/// The tile is `block_n` rows of `D` contiguous elements, `seq` elements apart (the layout's
/// sequence stride). The block copies it vector by vector, vector `i = tid + step · threads` in
/// step `step`, from row `i / (D / vector)`, column vector `i mod (D / vector)`: consecutive
/// threads read consecutive 8- or 16-byte vectors of a row (coalesced) and write consecutive
/// 16-byte shared vectors (conflict-free). Converting here, once per element and block, keeps
/// conversions out of the inner loops. Rows past `Skv` are zero-filled so that `0 · V` stays 0
/// and no uninitialised shared memory is ever read.
pub(super) fn load_kv_tile<T: Float, A: Float>(
    k: &mut KernelBuilder,
    plan: &Plan,
    lane: &CopyLane,
    p: &Params<T, A>,
    heads: &HeadOffsets,
    smem: &SharedTiles,
    kv0: Reg<U32>,
) {
    k.comment("K and V tiles to shared memory, as the accumulator type (zero past Skv)");
    let vector = plan.tiles.vector;
    let vectors_per_row = plan.head_dim / vector;
    let rest = k.sub(p.seq_kv, kv0);
    let rows_valid = k.min(rest, plan.tiles.block_n);
    let valid_vectors = k.mul_lo(rows_valid, vectors_per_row);
    let k_dst = k.add(smem.k, lane.shared_offset);
    let v_dst = k.add(smem.v, lane.shared_offset);
    let threads = plan.tiles.threads;
    let total_vectors = plan.tiles.block_n * plan.head_dim / vector;
    for step in 0..total_vectors.div_ceil(threads) {
        let first = step * threads;
        let shared_offset = (first * plan.shared_vector_bytes()) as i32;
        let index = k.add(lane.tid, first);
        let valid = k.setp_lt(index, valid_vectors);
        let copy = |k: &mut KernelBuilder| {
            // Position `kv0 + i / (D / vector)`, column `(i mod (D / vector)) · vector`; the
            // strides are read from the parameters here (constant bank operands, no register
            // held across the loop).
            let row = k.div_int(index, vectors_per_row);
            let col = k.rem(index, vectors_per_row);
            let col = k.mul_lo(col, vector);
            let position = k.add(kv0, row);
            let sources = [
                (heads.k_head, &p.k_layout, k_dst),
                (heads.v_head, &p.v_layout, v_dst),
            ];
            for (head, layout, dst) in sources {
                let seq_stride = layout.seq(k);
                let elem = k.mad_lo(position, seq_stride, col);
                let bytes = k.mul_wide(elem, plan.elem_bytes);
                let src = k.add(head, bytes);
                let values: Vec<Reg<A>> = (0..vector)
                    .map(|_| {
                        let r = k.reg::<A>();
                        k.assign(r, acc_imm::<A>(0.0));
                        r
                    })
                    .collect();
                let values_in = values.clone();
                k.if_then(valid, |k| {
                    let raw = k.ld_global_nc_n::<T>(src, 0, vector as usize);
                    for (dst, x) in values_in.iter().zip(raw) {
                        let wide = k.widen::<T, A>(x);
                        k.assign(*dst, wide);
                    }
                });
                k.st_shared_n(dst, shared_offset, &values);
            }
        };
        if first + threads <= total_vectors {
            copy(k);
        } else {
            let in_tile = k.setp_lt(index, total_vectors);
            k.if_then(in_tile, copy);
        }
    }
}
