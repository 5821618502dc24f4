//! The compile-time plan of one attention kernel (tile sizes, thread → data mapping, shared
//! layout) and the per-thread values every phase starts from (indices, addresses).

use crate::arch::Arch;
use crate::builder::{
    Float, GlobalPtr, KernelBuilder, ParamHandle, Pred, Reg, Scalar, F32, S32, U32, U64,
};
use crate::ir::CmpOp;
use crate::templates::attention::config::{
    max_registers, AttentionConfig, AttentionTiles, SharedMemoryKind,
};

/// Everything about the kernel's shape that is fixed at build time.
#[derive(Debug, Clone, Copy)]
pub(super) struct Plan {
    pub head_dim: u32,
    pub causal: bool,
    pub tiles: AttentionTiles,
    /// Bytes of one Q/K/V/O element in global memory.
    pub elem_bytes: u32,
    /// Bytes of one accumulator element (scores, P, O, and K/V staged in shared memory).
    pub acc_bytes: u32,
}

impl Plan {
    pub fn new(cfg: &AttentionConfig) -> Self {
        let r = cfg.resolved();
        Self {
            head_dim: r.head_dim,
            causal: r.causal,
            tiles: r.tiles(),
            elem_bytes: r.dtype.size_bytes(),
            acc_bytes: r.acc_bytes(),
        }
    }

    /// Threads sharing one query row (`G`).
    pub fn group(&self) -> u32 {
        self.tiles.threads_per_row
    }

    /// Vector accesses per thread to cover its columns of one row.
    pub fn chunks(&self) -> u32 {
        self.tiles.cols_per_thread / self.tiles.vector
    }

    /// Column offset (relative to the thread's first column) of its chunk `c`: `c · G · vector`.
    pub fn chunk_col(&self, c: u32) -> u32 {
        c * self.group() * self.tiles.vector
    }

    /// Bytes of one row of the K or V tile in shared memory (accumulator type).
    pub fn shared_row_bytes(&self) -> u32 {
        self.head_dim * self.acc_bytes
    }

    /// Bytes of one K or V tile in shared memory.
    pub fn kv_tile_bytes(&self) -> u32 {
        self.tiles.block_n * self.shared_row_bytes()
    }

    /// Bytes of one vector of a thread's columns in shared memory (always 16).
    pub fn shared_vector_bytes(&self) -> u32 {
        self.tiles.vector * self.acc_bytes
    }

    /// Bytes of the P tile.
    pub fn p_tile_bytes(&self) -> u32 {
        self.tiles.block_m * self.tiles.p_row_stride * self.acc_bytes
    }

    /// `log2` of a power of two.
    pub fn log2(v: u32) -> u32 {
        debug_assert!(v.is_power_of_two());
        v.trailing_zeros()
    }
}

/// The kernel's parameters, loaded.
#[derive(Debug, Clone, Copy)]
pub(super) struct Params<T: Scalar, A: Scalar> {
    pub q: GlobalPtr<T>,
    pub k: GlobalPtr<T>,
    pub v: GlobalPtr<T>,
    /// O and LSE are only written at the end: their parameters are read there, not held in
    /// registers through the tile loop.
    pub o: ParamHandle<GlobalPtr<T>>,
    pub lse: ParamHandle<GlobalPtr<F32>>,
    pub seq_q: Reg<U32>,
    pub seq_kv: Reg<U32>,
    pub heads_q: Reg<U32>,
    pub heads_kv: Reg<U32>,
    pub scale: Reg<A>,
    /// Offsets and strides (elements) of Q, K, V, O (see [`crate::templates::attention::layout`]).
    pub q_layout: Layout,
    pub k_layout: Layout,
    pub v_layout: Layout,
    pub o_layout: Layout,
}

/// One tensor's `offset, batch, head, seq` (elements) parameters. They are loaded where they are
/// used (`ld.param` reads the constant bank), never held in registers across the kernel: the
/// tile loop is register-bound.
#[derive(Debug, Clone, Copy)]
pub(super) struct Layout {
    offset: ParamHandle<U32>,
    batch: ParamHandle<U32>,
    head: ParamHandle<U32>,
    seq: ParamHandle<U32>,
}

impl Layout {
    /// Declares tensor `t`'s four parameters, in launch order.
    fn declare(k: &mut KernelBuilder, t: &str) -> Self {
        let [offset, batch, head, seq] =
            ["offset", "batch", "head", "seq"].map(|f| k.param::<U32>(&format!("{t}_{f}")));
        Self {
            offset,
            batch,
            head,
            seq,
        }
    }

    /// Element index of head `(b, h)`'s first element: `offset + b · batch + h · head`.
    pub fn head_start(&self, k: &mut KernelBuilder, b: Reg<U32>, h: Reg<U32>) -> Reg<U32> {
        let (offset, batch, head) = (
            k.load_param(self.offset),
            k.load_param(self.batch),
            k.load_param(self.head),
        );
        let start = k.mad_lo(b, batch, offset);
        k.mad_lo(h, head, start)
    }

    /// The sequence stride.
    pub fn seq(&self, k: &mut KernelBuilder) -> Reg<U32> {
        k.load_param(self.seq)
    }
}

/// Declares the parameters, in launch order: `q, k, v, o, lse, seq_q, seq_kv, heads_q,
/// heads_kv, scale` (scale in the accumulator type), then `offset, batch, head, seq` (u32
/// elements) of each of q, k, v, o.
pub(super) fn declare_params<T: Float, A: Float>(k: &mut KernelBuilder) -> Params<T, A> {
    let (q, kk, v, o) = (
        k.param_ptr::<T>("q"),
        k.param_ptr::<T>("k"),
        k.param_ptr::<T>("v"),
        k.param_ptr::<T>("o"),
    );
    let lse = k.param_ptr::<F32>("lse");
    let (seq_q, seq_kv) = (k.param::<U32>("seq_q"), k.param::<U32>("seq_kv"));
    let (heads_q, heads_kv) = (k.param::<U32>("heads_q"), k.param::<U32>("heads_kv"));
    let scale = k.param::<A>("scale");
    let [q_layout, k_layout, v_layout, o_layout] =
        ["q", "k", "v", "o"].map(|t| Layout::declare(k, t));
    Params {
        q: k.global_ptr(q),
        k: k.global_ptr(kk),
        v: k.global_ptr(v),
        o,
        lse,
        seq_q: k.load_param(seq_q),
        seq_kv: k.load_param(seq_kv),
        heads_q: k.load_param(heads_q),
        heads_kv: k.load_param(heads_kv),
        scale: k.load_param(scale),
        q_layout,
        k_layout,
        v_layout,
        o_layout,
    }
}

/// Declares the block shape `.reqntid threads` and `.maxnreg` at every register the block can
/// launch with ([`max_registers`]): the budget `validate` checks a tensor-core tiling against
/// (a CUDA-core tiling is checked against half of it).
pub(super) fn declare_block(k: &mut KernelBuilder, arch: Arch, threads: u32) {
    k.require_block([threads, 1, 1]);
    k.max_registers(max_registers(arch, threads));
}

/// Shared-memory base addresses of the K, V and P tiles.
#[derive(Debug, Clone, Copy)]
pub(super) struct SharedTiles {
    pub k: Reg<U32>,
    pub v: Reg<U32>,
    pub p: Reg<U32>,
}

/// Allocates `K [block_n, D]`, `V [block_n, D]` and `P [block_m, p_row_stride]`, all in the
/// accumulator type: three static arrays, or one dynamic array carved in that order when the
/// total exceeds static shared memory.
pub(super) fn allocate_shared(k: &mut KernelBuilder, plan: &Plan) -> SharedTiles {
    let kv = plan.kv_tile_bytes();
    match plan.tiles.shared_kind {
        SharedMemoryKind::Static => {
            let k_tile = k.shared_array::<U32>("k_tile", kv / 4);
            let v_tile = k.shared_array::<U32>("v_tile", kv / 4);
            let p_tile = k.shared_array::<U32>("p_tile", plan.p_tile_bytes() / 4);
            SharedTiles {
                k: k.shared_base(k_tile),
                v: k.shared_base(v_tile),
                p: k.shared_base(p_tile),
            }
        }
        SharedMemoryKind::Dynamic => {
            let all = k.dynamic_shared::<U32>(plan.tiles.shared_bytes);
            let base = k.shared_base(all);
            SharedTiles {
                k: base,
                v: k.add(base, kv),
                p: k.add(base, 2 * kv),
            }
        }
    }
}

/// Where this thread sits: its query row and its place among the row's threads.
#[derive(Debug, Clone)]
pub(super) struct ThreadPlace {
    pub tid: Reg<U32>,
    /// `g`: this thread's index among the `G` threads of its row.
    pub lane_in_row: Reg<U32>,
    /// Row of the query tile, `tid / G`.
    pub row_in_tile: Reg<U32>,
    /// First query row of the block's tile, `ctaid.x · block_m`.
    pub tile_start: Reg<U32>,
    /// Global query row, `tile_start + row_in_tile`.
    pub row: Reg<U32>,
    /// `row < seq_q`.
    pub row_valid: Pred,
    /// `(g & h) ≠ 0` for `h = G/2, G/4, …, 1`: the halves this thread keeps in the score
    /// reduce-scatter.
    pub keeps_upper: Vec<(u32, Pred)>,
}

pub(super) fn thread_place(k: &mut KernelBuilder, plan: &Plan, seq_q: Reg<U32>) -> ThreadPlace {
    let g = plan.group();
    let tid = k.tid_x();
    let lane_in_row = k.and(tid, g - 1);
    let row_in_tile = k.shr(tid, Plan::log2(g));
    let block = k.ctaid_x();
    let tile_start = k.mul_lo(block, plan.tiles.block_m);
    let row = k.add(tile_start, row_in_tile);
    let row_valid = k.setp_lt(row, seq_q);
    let mut keeps_upper = Vec::new();
    let mut h = g / 2;
    while h >= 1 {
        let bit = k.and(lane_in_row, h);
        keeps_upper.push((h, k.setp(CmpOp::Ne, bit, 0u32)));
        h /= 2;
    }
    ThreadPlace {
        tid,
        lane_in_row,
        row_in_tile,
        tile_start,
        row,
        row_valid,
        keeps_upper,
    }
}

/// Where this block's (batch, head) starts in Q, K and V.
#[derive(Debug, Clone, Copy)]
pub(super) struct HeadOffsets {
    /// Element index of the head's first Q element (layout offset and strides applied).
    pub q_start: Reg<U32>,
    /// Global addresses of the kv head's first K and V elements, kv head `h / (Hq / Hkv)`.
    pub k_head: Reg<U64>,
    pub v_head: Reg<U64>,
}

/// `b = ctaid.z`, `h = ctaid.y`, kv head `h / (Hq / Hkv)` (GQA).
pub(super) fn head_offsets<T: Scalar, A: Scalar>(
    k: &mut KernelBuilder,
    p: &Params<T, A>,
) -> HeadOffsets {
    let (h, b) = (k.ctaid_y(), k.ctaid_z());
    let group_size = k.div_int(p.heads_q, p.heads_kv);
    let kv_head = k.div_int(h, group_size);
    let k_start = p.k_layout.head_start(k, b, kv_head);
    let v_start = p.v_layout.head_start(k, b, kv_head);
    HeadOffsets {
        q_start: p.q_layout.head_start(k, b, h),
        k_head: k.elem_addr(p.k, k_start),
        v_head: k.elem_addr(p.v, v_start),
    }
}

/// The KV tiles this block visits: `⌈kv_end / block_n⌉` with `kv_end = Skv`, or with the
/// bottom-right causal mask `kv_end = clamp(min(tile_start + block_m, Sq) + Skv − Sq, 0, Skv)`
/// (later keys are masked for every row of the tile, so those tiles are skipped). The same in
/// every thread of the block, so the tile loop may contain barriers. `tile_start` is the
/// block's first query row; `(block_m, block_n)` its tile sizes.
pub(super) fn kv_tile_count(
    k: &mut KernelBuilder,
    causal: bool,
    (block_m, block_n): (u32, u32),
    tile_start: Reg<U32>,
    (seq_q, seq_kv): (Reg<U32>, Reg<U32>),
) -> Reg<U32> {
    let kv_end = if causal {
        let tile_end = k.add(tile_start, block_m);
        let last_row_end = k.min(tile_end, seq_q);
        let shift = signed_diff(k, seq_kv, seq_q);
        let last_row_end = k.cvt::<S32, U32>(last_row_end, None);
        let end = k.add(last_row_end, shift);
        let skv = k.cvt::<S32, U32>(seq_kv, None);
        let end = k.min(end, skv);
        let end = k.max(end, 0i32);
        k.cvt::<U32, S32>(end, None)
    } else {
        seq_kv
    };
    let rounded = k.add(kv_end, block_n - 1);
    k.shr(rounded, Plan::log2(block_n))
}

/// `a − b` as s32 (both below 2³¹: shapes are validated to u32 element counts).
fn signed_diff(k: &mut KernelBuilder, a: Reg<U32>, b: Reg<U32>) -> Reg<S32> {
    let a = k.cvt::<S32, U32>(a, None);
    let b = k.cvt::<S32, U32>(b, None);
    k.sub(a, b)
}

/// One past the last key query row `row` may see: `Skv`, or with the causal mask
/// `min(Skv, row + 1 + Skv − Sq)` (≤ 0 for fully masked rows).
pub(super) fn row_visible_end(
    k: &mut KernelBuilder,
    causal: bool,
    row: Reg<U32>,
    (seq_q, seq_kv): (Reg<U32>, Reg<U32>),
) -> Reg<S32> {
    let skv = k.cvt::<S32, U32>(seq_kv, None);
    if !causal {
        return skv;
    }
    let shift = signed_diff(k, seq_kv, seq_q);
    let row = k.cvt::<S32, U32>(row, None);
    let end = k.add(row, shift);
    let end = k.add(end, 1i32);
    k.min(end, skv)
}

/// Running softmax state of one query row, kept by each of the row's threads: the running
/// maximum `m` (identical in the row's threads), this thread's share `ℓ` of the running sum of
/// exponentials (the shares add up to the row's sum), and its `cols_per_thread` output
/// accumulators.
#[derive(Debug, Clone)]
pub(super) struct RowState<A: Scalar> {
    pub m: Reg<A>,
    pub l: Reg<A>,
    pub acc: Vec<Reg<A>>,
}

impl<A: Float> RowState<A> {
    /// `m = −∞`, `ℓ = 0`, `O = 0`.
    pub fn new(k: &mut KernelBuilder, plan: &Plan) -> Self {
        let m = k.reg::<A>();
        k.assign(m, super::ext::acc_imm::<A>(f64::NEG_INFINITY));
        let l = k.reg::<A>();
        k.assign(l, super::ext::acc_imm::<A>(0.0));
        let acc = (0..plan.tiles.cols_per_thread)
            .map(|_| {
                let r = k.reg::<A>();
                k.assign(r, super::ext::acc_imm::<A>(0.0));
                r
            })
            .collect();
        Self { m, l, acc }
    }
}
