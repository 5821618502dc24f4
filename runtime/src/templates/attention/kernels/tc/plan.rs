//! Build-time geometry of the tensor-core forward kernel (tile sizes, the shared layout) and
//! each lane's fixed place: its warp's query rows and its `ldmatrix` row addresses.

use super::elem::TcElem;
use crate::builder::{KernelBuilder, Reg, U32};
use crate::templates::attention::config::{AttentionConfig, SharedMemoryKind};

/// Query rows of one m16 tile (the `m` of the mma); a warp owns `row_tiles` of them.
pub(super) const TILE_ROWS: u32 = 16;

/// Everything about the tensor-core kernel's shape that is fixed at build time.
///
/// Shared memory, in the storage type, rows padded by 16 bytes
/// ([`AttentionConfig::tc_row_bytes`]):
///
/// ```text
/// [ Q: block_m rows | K: kv_stages × block_n rows | V: kv_stages × block_n rows ]
/// ```
#[derive(Debug, Clone, Copy)]
pub(in crate::templates::attention::kernels) struct TcPlan {
    pub head_dim: u32,
    /// Bytes of one element of the storage type (2, or 4 for tf32).
    pub elem_bytes: u32,
    row_bytes: u32,
    pub causal: bool,
    pub block_m: u32,
    pub block_n: u32,
    pub threads: u32,
    pub shared_bytes: u32,
    pub shared_kind: SharedMemoryKind,
    /// Depth of the K/V `cp.async` ring ([`AttentionConfig::tc_stages_for`]).
    pub kv_stages: u32,
    /// Whether the warp keeps its Q fragments in registers or re-reads them from the Q tile
    /// each KV tile ([`AttentionConfig::tc_q_in_registers`]: large Q fragments would spill next
    /// to the `D / 2` O accumulators of each m16 tile).
    pub q_in_registers: bool,
    /// m16 tiles of query rows per warp, 1 or 2 ([`AttentionConfig::tc_warp_rows`]): the
    /// tiles share every K and V fragment the warp loads.
    pub row_tiles: u32,
}

impl TcPlan {
    pub fn new(cfg: &AttentionConfig) -> Self {
        let t = cfg.tiles();
        Self {
            head_dim: cfg.head_dim,
            elem_bytes: cfg.dtype.size_bytes(),
            row_bytes: cfg.tc_row_bytes(),
            causal: cfg.causal,
            block_m: t.block_m,
            block_n: t.block_n,
            threads: t.threads,
            shared_bytes: t.shared_bytes,
            shared_kind: t.shared_kind,
            kv_stages: cfg.tc_stages_for(t.block_m, t.block_n),
            q_in_registers: cfg.tc_q_in_registers(t.block_m, t.block_n),
            row_tiles: cfg.tc_warp_rows(t.block_m, t.block_n) / TILE_ROWS,
        }
    }

    /// Query rows one warp owns: `16 · row_tiles`.
    pub fn warp_rows(&self) -> u32 {
        TILE_ROWS * self.row_tiles
    }

    /// Byte offset of m16 tile `tile`'s rows from the warp's first row in a tile of rows.
    pub fn tile_offset(&self, tile: u32) -> u32 {
        tile * TILE_ROWS * self.row_bytes()
    }

    /// Bytes between consecutive shared rows: `D` elements and 16 bytes of padding.
    pub fn row_bytes(&self) -> u32 {
        self.row_bytes
    }

    /// 16-byte chunks in one row of `D` elements.
    pub fn chunks_per_row(&self) -> u32 {
        self.head_dim * self.elem_bytes / 16
    }

    /// Elements in one 16-byte chunk (8 halves, 4 f32).
    pub fn chunk_elems(&self) -> u32 {
        16 / self.elem_bytes
    }

    /// Bytes of one K or V stage.
    pub fn kv_tile_bytes(&self) -> u32 {
        self.block_n * self.row_bytes()
    }

    /// Offset of the K ring from the start of shared memory.
    pub fn k_ring(&self) -> u32 {
        self.block_m * self.row_bytes()
    }

    /// Offset of the V ring.
    pub fn v_ring(&self) -> u32 {
        self.k_ring() + self.kv_stages * self.kv_tile_bytes()
    }

    /// Ring slot of KV tile `tile`: `tile mod kv_stages`.
    pub fn kv_slot(&self, k: &mut KernelBuilder, tile: Reg<U32>) -> Reg<U32> {
        if self.kv_stages.is_power_of_two() {
            k.and(tile, self.kv_stages - 1)
        } else {
            k.rem(tile, self.kv_stages)
        }
    }

    /// 32-byte steps over the head dimension: the mma `k` steps of Q·Kᵀ (16 halves or 8 f32),
    /// and for halves the `n16` pairs of O columns of P·V.
    pub fn d_steps(&self) -> u32 {
        self.head_dim * self.elem_bytes / 32
    }

    /// `k16` steps over the keys of a tile (P·V) and `n16` pairs of S columns (Q·Kᵀ).
    pub fn key_steps(&self) -> u32 {
        self.block_n / 16
    }
}

/// Allocates the whole footprint as one array (static up to 48 KiB, else dynamic) and returns
/// its shared base address.
pub(super) fn allocate_shared(k: &mut KernelBuilder, plan: &TcPlan) -> Reg<U32> {
    let all = match plan.shared_kind {
        SharedMemoryKind::Static => k.shared_array::<U32>("tiles", plan.shared_bytes / 4),
        SharedMemoryKind::Dynamic => k.dynamic_shared::<U32>(plan.shared_bytes),
    };
    k.shared_base(all)
}

/// This lane's fixed place in the block.
#[derive(Debug, Clone, Copy)]
pub(super) struct LanePlace {
    pub tid: Reg<U32>,
    /// `tid mod 32`.
    pub lane: Reg<U32>,
    /// `lane / 4`: the fragment row (and `+ 8`) this lane holds.
    pub group: Reg<U32>,
    /// `lane % 4`: the fragment column pair `2 · quad, 2 · quad + 1` this lane holds.
    pub quad: Reg<U32>,
    /// First query row of the block, `ctaid.x · block_m`.
    pub tile_start: Reg<U32>,
    /// The warp's first query row in the block tile, `warp_rows · warp`.
    pub warp_row: Reg<U32>,
    /// Byte offset in the Q tile of this lane's `ldmatrix.x4` row for an A fragment of the
    /// warp's first m16 tile: row `warp_rows · warp + lane % 16`, byte `16 · (lane / 16)` (8
    /// halves or 4 f32 in); tile `i` is [`TcPlan::tile_offset`] further.
    pub q_ldm: Reg<U32>,
    /// Byte offset in a K stage of this lane's row for two B fragments of `Kᵀ` (no `.trans`:
    /// keys are the B columns): key `lane % 8 + 8 · (lane / 16)`, byte `16 · ((lane / 8) % 2)`.
    pub k_ldm: Reg<U32>,
    /// Byte offset in a V stage of this lane's address for the B fragments of V
    /// ([`TcElem::v_lane`]).
    pub v_ldm: Reg<U32>,
}

impl LanePlace {
    pub fn new<T: TcElem>(k: &mut KernelBuilder, plan: &TcPlan) -> Self {
        let row_bytes = plan.row_bytes();
        let tid = k.tid_x();
        let lane = k.and(tid, 31u32);
        let warp = k.shr(tid, 5u32);
        let half = k.shr(lane, 4u32);
        let half_bytes = k.shl(half, 4u32);
        let warp_row = k.mul_lo(warp, plan.warp_rows());
        let lane16 = k.and(lane, 15u32);
        let q_row = k.add(warp_row, lane16);
        let q_ldm = k.mad_lo(q_row, row_bytes, half_bytes);
        let lane8 = k.and(lane, 7u32);
        let key_high = k.shl(half, 3u32);
        let key = k.or(lane8, key_high);
        let k_col = k.shr(lane, 3u32);
        let k_col = k.and(k_col, 1u32);
        let k_col_bytes = k.shl(k_col, 4u32);
        let k_ldm = k.mad_lo(key, row_bytes, k_col_bytes);
        let v_ldm = T::v_lane(k, plan, lane, lane16, half_bytes);
        let block = k.ctaid_x();
        Self {
            tid,
            lane,
            group: k.shr(lane, 2u32),
            quad: k.and(lane, 3u32),
            tile_start: k.mul_lo(block, plan.block_m),
            warp_row,
            q_ldm,
            k_ldm,
            v_ldm,
        }
    }

    /// Global query row of fragment row half `h` (0: `lane / 4`, 1: `lane / 4 + 8`) of the
    /// warp's m16 tile `tile`.
    pub fn row(&self, k: &mut KernelBuilder, tile: u32, h: u32) -> Reg<U32> {
        let r = k.add(self.tile_start, self.warp_row);
        let r = k.add(r, self.group);
        k.add(r, TILE_ROWS * tile + 8 * h)
    }
}
