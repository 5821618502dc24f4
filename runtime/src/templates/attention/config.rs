//! The attention configuration (`#[attention_kernel(..)]` arguments), tile defaults, the
//! shared-memory footprint and its validation rules.

use crate::arch::Arch;
use crate::dtype::DType;
use crate::lint::address::IndexBound;
use crate::templates::ConfigErrors;

/// The bound the attention kernels declare for the 32-bit address lint
/// ([`crate::lint::address`]): every element index they compute in `u32` and widen into an
/// address (`offset + b·batch + h·head + s·seq + d`, and the LSE row) is at most `u32::MAX`.
/// [`AttentionShape::validate`] proves it for the contiguous tensors and
/// [`AttentionLayouts::check`](super::AttentionLayouts::check) for any strided layout, both by
/// comparing against this `limit`.
pub const INDEX_BOUND: IndexBound = IndexBound {
    limit: u32::MAX as u64,
    proof: "AttentionShape::validate (B*H*S*D) and AttentionLayouts::check (strided max index)",
};

/// Configuration of one FlashAttention-2-style forward kernel: `#[attention_kernel(head_dim =
/// 128, causal = true, dtype = bf16, arch = sm_80)]`.
///
/// `block_m`/`block_n` of 0 (the default) mean "choose": see [`AttentionConfig::resolved`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AttentionConfig {
    /// Head dimension `D`: 32, 64, 96, 128 or 256. Required.
    pub head_dim: u32,
    /// Query rows per block tile: 0 (auto) or 16, 32, 64, 128.
    pub block_m: u32,
    /// Key/value rows per inner-loop tile: 0 (auto) or 16, 32, 64, 128.
    pub block_n: u32,
    /// Causal mask, aligned to the bottom-right when `Sq ≠ Skv`. Default false.
    pub causal: bool,
    /// Element type of Q, K, V and O: f16, bf16, f32 or f64 on every arch (bf16 converted in
    /// software before sm_80); LSE is always f32. Default f32.
    pub dtype: DType,
    /// Runs the f32 forward on tf32 tensor cores (`mma.m16n8k8`, f32 accumulation) on sm_80+;
    /// f32 only (another dtype with `allow_tf32 = true` is a configuration error), silently
    /// CUDA cores on older targets. Default false. See [`crate::templates::tf32`].
    pub allow_tf32: bool,
    /// Target architecture. Default sm_80.
    pub arch: Arch,
}

/// Which kernel a configuration builds.
///
/// f16/bf16 (and f32 with `allow_tf32`) on targets with `mma.sync`, `cp.async` and `ldmatrix`
/// (sm_80+) run on tensor cores; everything else (f32, f64, older targets) on CUDA cores. The choice is silent:
/// a target without tensor cores is never an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AttentionPath {
    /// One query row per `threads_per_row` threads, scalar FMAs, K/V staged as the accumulator
    /// type.
    CudaCores,
    /// One warp per 16 or 32 query rows ([`AttentionConfig::tc_warp_rows`]), `S = Q·Kᵀ` and
    /// `O += P·V` on `mma.m16n8k16`, K/V tiles
    /// streamed through a 2- or 3-stage `cp.async` ring in their storage type.
    TensorCores,
}

/// Pipeline stages of the K and V rings on the tensor-core path: three (two tiles in flight
/// while one is multiplied) where the footprint allows, else two (double buffering); see
/// [`AttentionConfig::tc_stages_for`].
pub const TC_MAX_STAGES: u32 = 3;
pub const TC_MIN_STAGES: u32 = 2;
/// Halves of padding after each shared row on the tensor-core path: 16 bytes, so the eight
/// 16-byte rows one `ldmatrix` phase reads (row stride `2·D + 16` bytes ≡ 16 or 80 mod 128)
/// start in eight distinct groups of four banks.
pub const TC_ROW_PAD: u32 = 8;

/// The `.maxnreg` every attention kernel declares for a block of `threads`: every register
/// the block can launch with (`registers per block / threads`, at most the per-thread
/// maximum). Without the cap ptxas may target fewer (measured: 64 at 256 threads, 96 or 128 at
/// 128 threads on the tensor-core path) and spill.
pub(crate) fn max_registers(arch: Arch, threads: u32) -> u32 {
    (arch.registers_per_block() / threads.max(1)).min(arch.max_registers_per_thread())
}

/// Where a kernel's shared memory lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SharedMemoryKind {
    /// `.shared` declared in the PTX: at most `arch.max_static_shared_bytes()` (48 KiB).
    Static,
    /// `.extern .shared`, sized at launch with the opt-in: at most
    /// `arch.max_dynamic_shared_bytes()`.
    Dynamic,
}

/// The resolved tiling of an attention kernel: tile sizes and the thread → data mapping.
///
/// On the [`AttentionPath::TensorCores`] path a warp owns 16 or 32 query rows
/// ([`AttentionConfig::tc_warp_rows`]); the fields then read: `threads_per_row` = 4 (the lanes
/// of an mma fragment sharing a row), `cols_per_thread` = `D / 4` (of each m16 tile's two
/// rows), `vector` = the elements of a 16-byte `cp.async` chunk (8, or 4 for tf32), `threads`
/// = `32 · block_m / warp rows`, `p_row_stride` = 0 (P stays in registers).
///
/// Each query row of the `block_m`-row tile is owned by `threads_per_row` adjacent threads (a
/// power of two, at most 16, so a row never straddles a warp); thread `g` of a row owns the
/// `cols_per_thread` columns `c · threads_per_row · vector + g · vector + e` (`e < vector`) of
/// Q and O, so one vector access of the row's threads covers consecutive addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AttentionTiles {
    pub path: AttentionPath,
    pub block_m: u32,
    pub block_n: u32,
    /// Threads sharing one query row: `max(next_pow2(⌈D / 16⌉), block_n / 16)`, so each thread
    /// owns at most 16 columns of D and at most 16 keys of a KV tile.
    pub threads_per_row: u32,
    /// Columns of D each thread owns: `D / threads_per_row`.
    pub cols_per_thread: u32,
    /// Elements per vector access of a thread's columns: 4 (8 or 16 bytes), 2 for f64.
    pub vector: u32,
    /// Threads per block: `block_m · threads_per_row`.
    pub threads: u32,
    /// Row stride of the shared P tile in elements: `block_n` padded so that
    /// `stride ≡ threads_per_row (mod 32)` (conflict-free P writes and broadcast reads).
    pub p_row_stride: u32,
    /// Shared memory per block, [`AttentionConfig::shared_bytes_for`].
    pub shared_bytes: u32,
    /// Static when `shared_bytes ≤ 48 KiB`, dynamic otherwise.
    pub shared_kind: SharedMemoryKind,
}

/// A run-time attention shape the kernels cannot handle.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AttentionShapeError {
    #[error("`{name}` = 0: every attention dimension must be at least 1")]
    ZeroDim { name: &'static str },
    #[error("heads_q = {heads_q} is not a multiple of heads_kv = {heads_kv}")]
    HeadsNotMultiple { heads_q: u32, heads_kv: u32 },
    #[error(
        "tensor `{tensor}` would have {elements} elements, more than the u32 index limit {limit}",
        limit = INDEX_BOUND.limit
    )]
    TooLarge {
        tensor: &'static str,
        elements: u128,
    },
}

/// Run-time sizes of one attention launch.
///
/// Layouts: `Q, O [batch, heads_q, seq_q, D]`, `K, V [batch, heads_kv, seq_kv, D]`,
/// `LSE [batch, heads_q, seq_q]`, row-major. Query head `h` reads kv head
/// `h / (heads_q / heads_kv)` (GQA; MHA when equal, MQA when `heads_kv = 1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AttentionShape {
    pub batch: u32,
    pub heads_q: u32,
    pub heads_kv: u32,
    pub seq_q: u32,
    pub seq_kv: u32,
}

impl AttentionShape {
    /// A shape from its five sizes, in field order.
    pub const fn new(batch: u32, heads_q: u32, heads_kv: u32, seq_q: u32, seq_kv: u32) -> Self {
        Self {
            batch,
            heads_q,
            heads_kv,
            seq_q,
            seq_kv,
        }
    }

    /// Checks the shape for `head_dim`: no zero dimension, `heads_q % heads_kv == 0`, and each
    /// tensor's element count within the kernels' u32 element indices (byte addresses are u64).
    pub fn validate(&self, head_dim: u32) -> Result<(), AttentionShapeError> {
        for (name, v) in [
            ("batch", self.batch),
            ("heads_q", self.heads_q),
            ("heads_kv", self.heads_kv),
            ("seq_q", self.seq_q),
            ("seq_kv", self.seq_kv),
            ("head_dim", head_dim),
        ] {
            if v == 0 {
                return Err(AttentionShapeError::ZeroDim { name });
            }
        }
        if !self.heads_q.is_multiple_of(self.heads_kv) {
            return Err(AttentionShapeError::HeadsNotMultiple {
                heads_q: self.heads_q,
                heads_kv: self.heads_kv,
            });
        }
        let d = u128::from(head_dim);
        let b = u128::from(self.batch);
        for (tensor, elements) in [
            (
                "q",
                b * u128::from(self.heads_q) * u128::from(self.seq_q) * d,
            ),
            (
                "k",
                b * u128::from(self.heads_kv) * u128::from(self.seq_kv) * d,
            ),
        ] {
            if elements > u128::from(INDEX_BOUND.limit) {
                return Err(AttentionShapeError::TooLarge { tensor, elements });
            }
        }
        Ok(())
    }

    /// Query heads per kv head, `heads_q / heads_kv`.
    pub const fn group_size(&self) -> u32 {
        self.heads_q / self.heads_kv
    }

    /// The kv head query head `h` reads.
    pub const fn kv_head(&self, h: u32) -> u32 {
        h / self.group_size()
    }

    /// Elements of Q and of O.
    pub const fn q_len(&self, head_dim: u32) -> usize {
        self.batch as usize * self.heads_q as usize * self.seq_q as usize * head_dim as usize
    }

    /// Elements of K and of V.
    pub const fn kv_len(&self, head_dim: u32) -> usize {
        self.batch as usize * self.heads_kv as usize * self.seq_kv as usize * head_dim as usize
    }

    /// Elements of LSE.
    pub const fn lse_len(&self) -> usize {
        self.batch as usize * self.heads_q as usize * self.seq_q as usize
    }
}

impl AttentionConfig {
    /// Every macro argument name.
    pub const FIELDS: &'static [&'static str] = &[
        "head_dim",
        "block_m",
        "block_n",
        "causal",
        "dtype",
        "allow_tf32",
        "arch",
    ];
    /// Arguments without a default.
    pub const REQUIRED: &'static [&'static str] = &["head_dim"];
    /// Accepted head dimensions.
    pub const HEAD_DIMS: [u32; 5] = [32, 64, 96, 128, 256];
    /// Accepted explicit tile sizes (0 = auto).
    pub const BLOCKS: [u32; 4] = [16, 32, 64, 128];
    /// Tile pairs `(block_m, block_n)` the defaults are picked from, in order of preference.
    pub const DEFAULT_TILE_CANDIDATES: [(u32, u32); 9] = [
        (64, 64),
        (64, 32),
        (32, 64),
        (32, 32),
        (64, 16),
        (32, 16),
        (16, 64),
        (16, 32),
        (16, 16),
    ];

    pub const DEFAULT_CAUSAL: bool = false;
    pub const DEFAULT_DTYPE: DType = DType::F32;
    pub const DEFAULT_ALLOW_TF32: bool = false;
    pub const DEFAULT_ARCH: Arch = Arch::Sm80;

    /// The required value, every other field at its default (tiles auto).
    pub const fn new(head_dim: u32) -> Self {
        Self {
            head_dim,
            block_m: 0,
            block_n: 0,
            causal: Self::DEFAULT_CAUSAL,
            dtype: Self::DEFAULT_DTYPE,
            allow_tf32: Self::DEFAULT_ALLOW_TF32,
            arch: Self::DEFAULT_ARCH,
        }
    }

    /// The default softmax scale `1/√D`.
    pub fn default_scale(&self) -> f64 {
        1.0 / f64::from(self.head_dim).sqrt()
    }

    /// The kernel this configuration builds (see [`AttentionPath`]).
    pub const fn path(&self) -> AttentionPath {
        let half = matches!(self.dtype, DType::F16 | DType::BF16);
        let tf32 = self.allow_tf32 && matches!(self.dtype, DType::F32);
        let arch = self.arch;
        if (half || tf32) && arch.has_mma_m16n8k16() && arch.has_cp_async() && arch.has_ldmatrix() {
            AttentionPath::TensorCores
        } else {
            AttentionPath::CudaCores
        }
    }

    /// Tile pairs the tensor-core defaults are picked from, in order of preference: 128 query
    /// rows as 4 warps of 32 ([`Self::tc_warp_rows`]; a 128-row candidate is taken only when
    /// its warps own 32 rows), else 64 rows (4 warps of 16), with the widest KV tile whose
    /// registers and shared memory fit.
    pub const TC_TILE_CANDIDATES: [(u32, u32); 6] =
        [(128, 64), (128, 32), (64, 64), (64, 32), (32, 32), (16, 16)];

    /// The tf32 candidates: at most 32 keys per tile, as S and P each take `block_n / 2`
    /// registers per lane (P twice the halves'; before the kernel declared `.maxnreg`, ptxas
    /// 12.9 held sm_80 at 128 registers with 64 keys and spilled at D = 64; with it, 64 × 64
    /// takes 168 and fits, but 32 keys leave room); and 32 × 16 before 16 × 16, which
    /// [`Self::validate`] rejects at D = 256 (one warp copies 32 chunk rounds of its own:
    /// ptxas spills at 255 registers) where sm_86/89 fit no 32 × 32 ring.
    pub const TF32_TILE_CANDIDATES: [(u32, u32); 4] = [(64, 32), (32, 32), (32, 16), (16, 16)];

    /// Registers a tensor-core thread needs beyond its fragments, copy geometry and mask
    /// (addresses, loop state, softmax state). With the other `TC_*` terms, fitted with ptxas
    /// 12.9 over every explicit tiling (`block_m`, `block_n` ∈ 16..128), head_dim, tensor-core
    /// dtype (f16, bf16, tf32), mask mode and target, 1,948 modules: the estimate is at most
    /// 251 on every tiling that assembles without spilling and at least 259 on every one that
    /// spills, so [`Self::validate`] accepts exactly the tilings that fit (the boundary
    /// cases are in the unit test `tensor_core_register_rule_boundary`).
    pub const TC_REGISTER_OVERHEAD: u32 = 43;

    /// Registers a tensor-core thread keeps per round of K/V chunk copies whose geometry is
    /// its own ([`Self::tc_chunk_rounds`]): the round's row, column and shared offset.
    pub const TC_REGISTERS_PER_CHUNK_ROUND: u32 = 3;

    /// Registers the causal mask adds on tensor cores (measured: D = 96 f16 with 32 × 128
    /// tiles fits sm_80 at 255 registers without the mask and spills with it).
    pub const TC_CAUSAL_REGISTERS: u32 = 8;

    /// Registers ptxas 12.9 adds on sm_90 targets (measured: 5 to 10 more than sm_80 for the
    /// same tensor-core tiling, e.g. 142 against 135 for D = 128 tf32 with 64 × 32 tiles).
    pub const TC_SM90_REGISTERS: u32 = 8;

    /// Rounds of 16-byte K/V chunk copies per thread and tile whose row, column and shared
    /// offset are registers of their own: none when the `D · size / 16` chunks of a row divide
    /// the block's threads (every round is round 0 shifted by constants), else
    /// `⌈block_n · chunks per row / threads⌉` (D = 96, and D = 256 tf32 on one warp).
    pub fn tc_chunk_rounds(&self, block_m: u32, block_n: u32) -> u32 {
        self.tc_chunk_rounds_for(self.threads_for(block_m, block_n), block_n)
    }

    /// [`Self::tc_chunk_rounds`] for a block of `threads`.
    fn tc_chunk_rounds_for(&self, threads: u32, block_n: u32) -> u32 {
        let per_row = self.head_dim * self.dtype.size_bytes() / 16;
        let threads = threads.max(1);
        if per_row == 0 || threads.is_multiple_of(per_row) {
            0
        } else {
            (block_n * per_row).div_ceil(threads)
        }
    }

    fn tensor_cores(&self) -> bool {
        matches!(self.path(), AttentionPath::TensorCores)
    }

    /// Threads sharing one query row for a KV tile of `block_n` keys (see [`AttentionTiles`]).
    pub fn threads_per_row_for(&self, block_n: u32) -> u32 {
        if self.tensor_cores() {
            return 4;
        }
        self.head_dim
            .div_ceil(16)
            .next_power_of_two()
            .max(block_n / 16)
            .clamp(1, 16)
    }

    /// Bytes of one accumulator element: f64 for f64, f32 otherwise.
    pub const fn acc_bytes(&self) -> u32 {
        match self.dtype {
            DType::F64 => 8,
            _ => 4,
        }
    }

    /// Elements per vector access of a thread's columns: 4 (16 bytes of f32 in shared memory;
    /// 8 bytes of f16/bf16, 16 of f32 in global memory), 2 for f64 (16 bytes).
    /// On tensor cores: one 16-byte `cp.async` chunk (8 halves, 4 f32 with tf32).
    pub const fn vector_elems(&self) -> u32 {
        if matches!(self.path(), AttentionPath::TensorCores) {
            return 16 / self.dtype.size_bytes();
        }
        match self.dtype {
            DType::F64 => 2,
            _ => 4,
        }
    }

    /// Row stride, in elements, of the P tile: `block_n` padded to `≡ threads_per_row (mod 32)`.
    /// 0 on tensor cores (no P tile).
    pub fn p_row_stride_for(&self, block_n: u32) -> u32 {
        if self.tensor_cores() {
            return 0;
        }
        let g = self.threads_per_row_for(block_n);
        block_n + (g + 32 - block_n % 32) % 32
    }

    /// Shared memory of one block, in bytes, for tiles `block_m × block_n`:
    ///
    /// ```text
    /// (2 · block_n · D + block_m · p_row_stride) · size(acc)   K, V and P tiles
    /// ```
    ///
    /// with `acc` = f64 for f64, else f32: K and V are converted to the accumulator type once,
    /// when the tile is staged, instead of once per reading thread. Q and O live in registers.
    /// This is exactly what the kernel allocates. Computed in u64; saturates at `u32::MAX`.
    ///
    /// On tensor cores, in the storage type with padded rows of `D + TC_ROW_PAD` halves:
    ///
    /// ```text
    /// (block_m + 2 · stages · block_n) · tc_row_bytes    Q tile, K and V rings
    /// ```
    ///
    /// with `stages` = [`Self::tc_stages_for`].
    pub fn shared_bytes_for(&self, block_m: u32, block_n: u32) -> u32 {
        if self.tensor_cores() {
            let stages = self.tc_stages_for(block_m, block_n);
            return self.tc_footprint(block_m, block_n, stages);
        }
        let acc = u64::from(self.acc_bytes());
        let (m, n, d) = (
            u64::from(block_m),
            u64::from(block_n),
            u64::from(self.head_dim),
        );
        let stride = u64::from(self.p_row_stride_for(block_n));
        let bytes = (2 * n * d + m * stride) * acc;
        u32::try_from(bytes).unwrap_or(u32::MAX)
    }

    /// Stages of the tensor-core K/V ring for tiles `block_m × block_n`: `TC_MAX_STAGES` when
    /// two blocks of that footprint fit the arch's dynamic shared memory (the registers of the
    /// default four-warp blocks, at most 255 per thread, leave room for two resident blocks,
    /// so a deeper ring must not halve occupancy), else `TC_MIN_STAGES`. With (64, 64) tiles: three for D ≤ 64 on
    /// sm_80, D ≤ 96 on sm_90 and D = 32 on sm_86/89, two otherwise.
    pub fn tc_stages_for(&self, block_m: u32, block_n: u32) -> u32 {
        let deep = self.tc_footprint(block_m, block_n, TC_MAX_STAGES);
        if u64::from(deep) * 2 <= u64::from(self.arch.max_dynamic_shared_bytes()) {
            TC_MAX_STAGES
        } else {
            TC_MIN_STAGES
        }
    }

    /// `(block_m + 2 · stages · block_n) · tc_row_bytes` bytes, saturating at `u32::MAX`.
    fn tc_footprint(&self, block_m: u32, block_n: u32, stages: u32) -> u32 {
        let rows = u64::from(block_m) + 2 * u64::from(stages) * u64::from(block_n);
        let bytes = rows * u64::from(self.tc_row_bytes());
        u32::try_from(bytes).unwrap_or(u32::MAX)
    }

    /// Bytes of one padded shared row on tensor cores: `D` elements of the storage type and
    /// `TC_ROW_PAD` halves (16 bytes): `(D + 8) · 2` for f16/bf16, `4 · D + 16` for tf32.
    pub const fn tc_row_bytes(&self) -> u32 {
        self.head_dim * self.dtype.size_bytes() + TC_ROW_PAD * 2
    }

    /// Whether a tensor-core warp keeps its Q fragments in registers for tiles `block_m ×
    /// block_n`: when one m16 tile's fragments take at most 64 registers (`D ≤ 128` halves,
    /// `D ≤ 64` for tf32) and, on a warp of 32 rows ([`Self::tc_warp_rows`]), both tiles'
    /// fragments still fit beside the doubled O accumulators and scores. Otherwise the warp
    /// re-reads them from the Q tile each KV tile.
    pub fn tc_q_in_registers(&self, block_m: u32, block_n: u32) -> bool {
        let small = self.head_dim * self.dtype.size_bytes() <= 256;
        small
            && match self.tc_warp_rows(block_m, block_n) {
                16 => true,
                rows => self.tc_fits(
                    block_m,
                    rows,
                    self.tc_registers(block_m, block_n, rows, true),
                ),
            }
    }

    /// Query rows one tensor-core warp owns for tiles `block_m × block_n`: 32 (two m16 tiles
    /// sharing every K and V fragment the warp loads, half the `ldmatrix` traffic per mma, as
    /// FlashAttention-2's 4 warps × 32 rows) when the storage type is f16/bf16, the block
    /// keeps at least [`Self::TC_WIDE_MIN_BLOCK_M`] / 32 warps and the registers of 32 rows
    /// fit without spilling (Q re-read from shared memory if need be); else 16. The choice
    /// follows from the tiling alone, and a tiling that fits at 32 rows also fits at 16, so
    /// the tilings [`Self::validate`] accepts are those that fit at 16 rows.
    pub fn tc_warp_rows(&self, block_m: u32, block_n: u32) -> u32 {
        let halves = matches!(self.dtype, DType::F16 | DType::BF16);
        let wide = halves
            && block_m >= Self::TC_WIDE_MIN_BLOCK_M
            && self.tc_fits(block_m, 32, self.tc_registers(block_m, block_n, 32, false));
        if wide {
            32
        } else {
            16
        }
    }

    /// The smallest `block_m` whose warps own 32 query rows ([`Self::tc_warp_rows`]): 128, so
    /// such a block still has four warps to share its copies and hide latency.
    pub const TC_WIDE_MIN_BLOCK_M: u32 = 128;

    /// Threads per block for tiles `block_m × block_n`.
    /// On tensor cores one warp per [`Self::tc_warp_rows`] query rows.
    pub fn threads_for(&self, block_m: u32, block_n: u32) -> u32 {
        if self.tensor_cores() {
            return block_m / self.tc_warp_rows(block_m, block_n) * 32;
        }
        block_m * self.threads_per_row_for(block_n)
    }

    /// A per-thread register estimate for tiles `block_m × block_n` (32-bit registers): the Q
    /// slice and O accumulators (`2 · cols_per_thread`), the live partial scores of the
    /// reduce-scatter (`log2 threads_per_row + 1`), the thread's scores of a KV tile
    /// (`block_n / threads_per_row`), all in accumulator words, plus
    /// [`Self::REGISTER_OVERHEAD`] for addresses, loop state and loaded values. Used to reject
    /// tilings that would spill.
    ///
    /// On tensor cores, per lane and m16 tile of the warp ([`Self::tc_warp_rows`]): the O
    /// accumulators (`D / 2` f32), the Q fragments (`D / 4` packed pairs or `D / 2` tf32, kept
    /// in registers per [`Self::tc_q_in_registers`]), the scores (`block_n / 2` f32; P takes
    /// no registers of its own, as each P register is made from scores that die with it: two
    /// packed halves or one tf32); then, per lane, [`Self::TC_WIDE_REGISTERS`] for a second
    /// tile, the K/V copy geometry
    /// ([`Self::TC_REGISTERS_PER_CHUNK_ROUND`] per [`Self::tc_chunk_rounds`]), the causal mask
    /// ([`Self::TC_CAUSAL_REGISTERS`]) and sm_90 ([`Self::TC_SM90_REGISTERS`]), plus
    /// [`Self::TC_REGISTER_OVERHEAD`].
    pub fn registers_estimate(&self, block_m: u32, block_n: u32) -> u32 {
        if self.tensor_cores() {
            let rows = self.tc_warp_rows(block_m, block_n);
            let q = self.tc_q_in_registers(block_m, block_n);
            return self.tc_registers(block_m, block_n, rows, q);
        }
        let g = self.threads_per_row_for(block_n);
        let words = self.acc_bytes() / 4;
        let live_partials = g.trailing_zeros() + 1;
        words * (2 * (self.head_dim / g) + live_partials + block_n / g) + Self::REGISTER_OVERHEAD
    }

    /// The tensor-core register estimate for warps of `warp_rows` query rows (`warp_rows /
    /// 16` m16 tiles, each with its O accumulators, scores and, when `q_in_registers`, Q
    /// fragments) in blocks of `block_m` rows.
    fn tc_registers(
        &self,
        block_m: u32,
        block_n: u32,
        warp_rows: u32,
        q_in_registers: bool,
    ) -> u32 {
        let row_tiles = warp_rows / 16;
        // Q fragments of one m16 tile, in 32-bit registers per lane: `D · size / 8`.
        let (d, size) = (self.head_dim, self.dtype.size_bytes());
        let q = if q_in_registers { d * size / 8 } else { 0 };
        let threads = block_m / warp_rows * 32;
        let copies =
            Self::TC_REGISTERS_PER_CHUNK_ROUND * self.tc_chunk_rounds_for(threads, block_n);
        let wide = row_tiles > 1;
        // Wide warps: the mask's limits are part of `TC_WIDE_REGISTERS` (measured: causal
        // kernels took no more registers than full ones at 32 rows).
        let mask = if self.causal && !wide {
            Self::TC_CAUSAL_REGISTERS
        } else {
            0
        };
        let target = if self.arch.at_least(Arch::Sm90) {
            Self::TC_SM90_REGISTERS
        } else {
            0
        };
        let wide = match (wide, q_in_registers) {
            (false, _) => 0,
            (true, true) => Self::TC_WIDE_REGISTERS,
            (true, false) => Self::TC_WIDE_REGISTERS + Self::TC_WIDE_Q_SHARED_REGISTERS,
        };
        row_tiles * (d / 2 + q + block_n / 2)
            + copies
            + mask
            + target
            + wide
            + Self::TC_REGISTER_OVERHEAD
    }

    /// Whether `registers` per thread fit the `.maxnreg` of a block of `block_m` rows in warps
    /// of `warp_rows`.
    fn tc_fits(&self, block_m: u32, warp_rows: u32, registers: u32) -> bool {
        registers <= max_registers(self.arch, block_m / warp_rows * 32)
    }

    /// Registers a 32-row warp needs beyond its two tiles' fragments (the second tile's
    /// softmax state and mask limits, the P fragments of both tiles live across `P·V`).
    /// Fitted with ptxas 12.9 over every 128-row f16/bf16 tiling on every target, with
    /// [`Self::TC_WIDE_Q_SHARED_REGISTERS`]: every 32-row tiling the estimate accepts
    /// assembles without spilling (measured spills at estimates of 256 and more: D = 96 with
    /// 64 keys, D = 128 with 64 keys, D = 64 with 128 keys, D = 128 with 32 keys on sm_90).
    pub const TC_WIDE_REGISTERS: u32 = 35;

    /// Registers a 32-row warp adds when it re-reads its Q fragments from shared memory each
    /// KV tile (both tiles' fragments of a step live at once, and their addresses).
    pub const TC_WIDE_Q_SHARED_REGISTERS: u32 = 10;

    /// Registers a thread needs beyond its data (addresses, indices, loaded vectors).
    pub const REGISTER_OVERHEAD: u32 = 40;

    /// Threads per block the default tiles aim for at most.
    pub const DEFAULT_MAX_THREADS: u32 = 256;

    /// The default tiles for this head_dim, dtype and arch: the first of
    /// [`Self::DEFAULT_TILE_CANDIDATES`] with at most [`Self::DEFAULT_MAX_THREADS`] threads whose
    /// footprint fits static shared memory (48 KiB), else the first that fits the arch's
    /// dynamic maximum, else `(16, 16)` (which `validate` rejects).
    ///
    /// On tensor cores: the first of [`Self::TC_TILE_CANDIDATES`] (tf32:
    /// [`Self::TF32_TILE_CANDIDATES`]) whose registers fit and whose
    /// footprint fits the arch's dynamic maximum.
    pub fn default_tiles(&self) -> (u32, u32) {
        if self.tensor_cores() {
            let candidates: &[(u32, u32)] = if self.dtype == DType::F32 {
                &Self::TF32_TILE_CANDIDATES
            } else {
                &Self::TC_TILE_CANDIDATES
            };
            return candidates
                .iter()
                .copied()
                .find(|&(m, n)| {
                    (m < Self::TC_WIDE_MIN_BLOCK_M || self.tc_warp_rows(m, n) == 32)
                        && self.registers_estimate(m, n)
                            <= self.register_limit(self.threads_for(m, n))
                        && self.shared_bytes_for(m, n) <= self.arch.max_dynamic_shared_bytes()
                })
                .unwrap_or((16, 16));
        }
        self.first_fitting(|_, _| true).unwrap_or((16, 16))
    }

    /// The first candidate accepted by `filter` that fits static shared memory, else dynamic.
    fn first_fitting(&self, filter: impl Fn(u32, u32) -> bool) -> Option<(u32, u32)> {
        let fits = |limit: u32| {
            Self::DEFAULT_TILE_CANDIDATES.into_iter().find(|&(m, n)| {
                filter(m, n)
                    && self.threads_for(m, n) <= Self::DEFAULT_MAX_THREADS
                    && self.shared_bytes_for(m, n) <= limit
            })
        };
        fits(self.arch.max_static_shared_bytes())
            .or_else(|| fits(self.arch.max_dynamic_shared_bytes()))
    }

    /// This config with `block_m`/`block_n` of 0 replaced by the defaults. When only one of the
    /// two is given, the other is the first candidate's with that value that fits (falling back
    /// to 16).
    pub fn resolved(&self) -> Self {
        let (block_m, block_n) = match (self.block_m, self.block_n) {
            (0, 0) => self.default_tiles(),
            (0, n) => (self.first_fitting(|_, cn| cn == n).map_or(16, |t| t.0), n),
            (m, 0) => (m, self.first_fitting(|cm, _| cm == m).map_or(16, |t| t.1)),
            (m, n) => (m, n),
        };
        Self {
            block_m,
            block_n,
            ..*self
        }
    }

    /// The resolved tiling: tile sizes, thread mapping and shared memory (and whether it must
    /// be dynamic).
    pub fn tiles(&self) -> AttentionTiles {
        let r = self.resolved();
        let shared_bytes = r.shared_bytes_for(r.block_m, r.block_n);
        let threads_per_row = r.threads_per_row_for(r.block_n);
        AttentionTiles {
            path: r.path(),
            block_m: r.block_m,
            block_n: r.block_n,
            threads_per_row,
            cols_per_thread: r.head_dim / threads_per_row,
            vector: r.vector_elems(),
            threads: r.threads_for(r.block_m, r.block_n),
            p_row_stride: r.p_row_stride_for(r.block_n),
            shared_bytes,
            // Tensor cores: always dynamic. With a static footprint ptxas caps registers to fit
            // as many blocks as that footprint allows per SM (measured: 128 registers and
            // spills for D = 64 on sm_90 at 46 KiB), and the fragments need more.
            shared_kind: if r.path() == AttentionPath::CudaCores
                && shared_bytes <= self.arch.max_static_shared_bytes()
            {
                SharedMemoryKind::Static
            } else {
                SharedMemoryKind::Dynamic
            },
        }
    }

    /// Registers per thread a block of `threads` may use without spilling. CUDA cores: ptxas
    /// allocates registers of a `.reqntid` block for two resident blocks per SM (measured: it
    /// spills to fit 64 registers at 512 threads), so the budget is half the register file
    /// per block. Tensor cores: the `.maxnreg` the kernel declares ([`max_registers`]), which
    /// ptxas 12.9 allocates up to (measured: 8 warps of 128 × 128 tiles at up to 255 registers
    /// without spilling).
    fn register_limit(&self, threads: u32) -> u32 {
        if self.tensor_cores() {
            return max_registers(self.arch, threads);
        }
        (self.arch.registers_per_block() / (2 * threads.max(1)))
            .min(self.arch.max_registers_per_thread())
    }

    /// Checks every rule; returns all violations, each tagged with the argument(s) at fault.
    pub fn validate(&self) -> Result<(), ConfigErrors> {
        let mut errs = ConfigErrors::default();
        let head_dim_ok = Self::HEAD_DIMS.contains(&self.head_dim);
        if !head_dim_ok {
            errs.push(
                &["head_dim"],
                format!(
                    "head_dim = {} is not one of 32, 64, 96, 128, 256",
                    self.head_dim
                ),
            );
        }
        let mut blocks_ok = true;
        for (name, v) in [("block_m", self.block_m), ("block_n", self.block_n)] {
            if v != 0 && !Self::BLOCKS.contains(&v) {
                blocks_ok = false;
                errs.push(
                    &[name],
                    format!("{name} = {v} is not one of 16, 32, 64, 128 (or 0 for automatic)"),
                );
            }
        }
        // dtype: f16, bf16 (software conversion before sm_80), f32 and f64 are all supported
        // on every arch; only allow_tf32 constrains it.
        if let Some(msg) = crate::templates::tf32::dtype_rule(self.allow_tf32, self.dtype) {
            errs.push(&["allow_tf32", "dtype"], msg);
        }
        if head_dim_ok && blocks_ok {
            let t = self.tiles();
            let max_threads = self.arch.max_threads_per_block();
            if t.threads > max_threads {
                errs.push(
                    &["block_m", "arch"],
                    format!(
                        "block_m = {} needs {} threads per block, more than {}'s {max_threads}",
                        t.block_m, t.threads, self.arch
                    ),
                );
            }
            let regs = self.registers_estimate(t.block_m, t.block_n);
            let reg_limit = self.register_limit(t.threads);
            if t.threads <= max_threads && regs > reg_limit {
                let fields: &[&'static str] = match (self.block_m, self.block_n) {
                    (0, _) => &["block_n", "head_dim", "dtype"],
                    _ => &["block_m", "block_n", "head_dim", "dtype"],
                };
                errs.push(
                    fields,
                    format!(
                        "tiles block_m = {}, block_n = {} with head_dim = {} and dtype = {} need \
                         about {regs} registers per thread, more than the limit of {reg_limit} \
                         for {} threads per block on {}: ptxas would spill",
                        t.block_m, t.block_n, self.head_dim, self.dtype, t.threads, self.arch
                    ),
                );
            }
            let max_dyn = self.arch.max_dynamic_shared_bytes();
            if t.shared_bytes > max_dyn {
                let fields: &[&'static str] = match (self.block_m, self.block_n) {
                    (0, 0) => &["head_dim", "dtype", "arch"],
                    (_, 0) => &["block_m", "head_dim", "dtype", "arch"],
                    _ => &["block_n", "block_m", "head_dim", "dtype", "arch"],
                };
                errs.push(
                    fields,
                    format!(
                        "tiles block_m = {}, block_n = {} with head_dim = {} and dtype = {} need \
                         {} bytes of shared memory, more than {}'s dynamic maximum {max_dyn}",
                        t.block_m, t.block_n, self.head_dim, self.dtype, t.shared_bytes, self.arch
                    ),
                );
            }
        }
        errs.into_result()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn footprint_formula() {
        let cfg = AttentionConfig::new(64);
        // G = 4 for D = 64, block_n = 64: P stride 64 + 4 = 68.
        // 2 · 64 · 64 · 4 (K, V) + 64 · 68 · 4 (P)
        assert_eq!(cfg.threads_per_row_for(64), 4);
        assert_eq!(cfg.p_row_stride_for(64), 68);
        assert_eq!(cfg.shared_bytes_for(64, 64), 32768 + 17408);
        // Half types on CUDA cores (before sm_80) stage K and V as f32.
        let f16 = AttentionConfig {
            dtype: DType::F16,
            arch: Arch::Sm75,
            ..cfg
        };
        assert_eq!(f16.shared_bytes_for(64, 64), 32768 + 17408);
        // On tensor cores: Q tile plus three stages of K and V, rows of 64 + 8 halves, while two
        // such blocks fit the arch (sm_80: 2 · 64512 ≤ 163 KiB; sm_86: 2 · 64512 > 99 KiB).
        let tc = AttentionConfig {
            dtype: DType::F16,
            arch: Arch::Sm80,
            ..cfg
        };
        assert_eq!(tc.path(), AttentionPath::TensorCores);
        assert_eq!(tc.tc_stages_for(64, 64), 3);
        assert_eq!(tc.shared_bytes_for(64, 64), (64 + 6 * 64) * 72 * 2);
        let sm86 = AttentionConfig {
            arch: Arch::Sm86,
            ..tc
        };
        assert_eq!(sm86.tc_stages_for(64, 64), 2);
        assert_eq!(sm86.shared_bytes_for(64, 64), (64 + 4 * 64) * 72 * 2);
        // D = 128 on sm_90: 2 · (64 + 384) · 136 · 2 = 243712 > 227 KiB.
        let d128 = AttentionConfig {
            head_dim: 128,
            arch: Arch::Sm90,
            ..tc
        };
        assert_eq!(d128.tc_stages_for(64, 64), 2);
        let f64 = AttentionConfig {
            dtype: DType::F64,
            ..cfg
        };
        // G = 4 (D / 16), stride 16 + (4 + 32 − 16) = 36.
        assert_eq!(f64.shared_bytes_for(16, 16), 2 * 16 * 64 * 8 + 16 * 36 * 8);
    }

    #[test]
    fn thread_mapping() {
        for (d, n, g) in [
            (32, 16, 2),
            (32, 128, 8),
            (96, 32, 8),
            (128, 64, 8),
            (256, 16, 16),
        ] {
            let cfg = AttentionConfig {
                block_m: 16,
                block_n: n,
                ..AttentionConfig::new(d)
            };
            let t = cfg.tiles();
            assert_eq!(t.threads_per_row, g, "d={d} n={n}");
            assert_eq!(t.cols_per_thread * g, d);
            assert_eq!(t.cols_per_thread % t.vector, 0);
            assert_eq!(t.threads, 16 * g);
            assert_eq!(t.p_row_stride % 32, g % 32);
            assert!(t.p_row_stride >= n);
        }
    }

    #[test]
    fn defaults_fit_static_when_possible() {
        for d in AttentionConfig::HEAD_DIMS {
            for (dtype, arch) in [
                (DType::F16, Arch::Sm75),
                (DType::BF16, Arch::Sm70),
                (DType::F32, Arch::Sm80),
            ] {
                let t = AttentionConfig {
                    dtype,
                    arch,
                    ..AttentionConfig::new(d)
                }
                .tiles();
                assert_eq!(t.shared_kind, SharedMemoryKind::Static, "d={d} {dtype}");
                assert!(t.shared_bytes <= 48 * 1024);
                assert!(t.threads <= AttentionConfig::DEFAULT_MAX_THREADS);
            }
        }
        let f32_256 = AttentionConfig::new(256).tiles();
        assert_eq!((f32_256.block_m, f32_256.block_n), (16, 16));
        let f16 = AttentionConfig {
            dtype: DType::F16,
            arch: Arch::Sm75,
            ..AttentionConfig::new(32)
        };
        assert_eq!((f16.tiles().block_m, f16.tiles().block_n), (64, 64));
    }

    #[test]
    fn tensor_core_path_and_defaults() {
        for arch in Arch::ALL {
            for dtype in DType::ALL {
                let cfg = AttentionConfig {
                    dtype,
                    arch,
                    ..AttentionConfig::new(64)
                };
                let tc = matches!(dtype, DType::F16 | DType::BF16) && arch.has_mma_m16n8k16();
                assert_eq!(
                    cfg.path() == AttentionPath::TensorCores,
                    tc,
                    "{arch} {dtype}"
                );
            }
        }
        // 128 query rows in 4 warps of 32 where their registers fit (D = 128: 32 keys, Q
        // re-read from shared memory; not on sm_90, whose 8 more registers would spill), else
        // 64 rows in 4 warps of 16; the widest KV tile that fits: D = 256 takes 32 keys where
        // 99 KiB of shared memory is the limit (sm_86) and 64 where 227 KiB is (sm_90).
        for (d, arch, tiles, warp_rows) in [
            (32, Arch::Sm80, (128, 64), 32),
            (64, Arch::Sm90, (128, 64), 32),
            (128, Arch::Sm86, (128, 32), 32),
            (128, Arch::Sm90, (64, 64), 16),
            (256, Arch::Sm80, (64, 32), 16),
            (256, Arch::Sm86, (64, 32), 16),
            (256, Arch::Sm90, (64, 64), 16),
        ] {
            let cfg = AttentionConfig {
                dtype: DType::BF16,
                arch,
                ..AttentionConfig::new(d)
            };
            let t = cfg.tiles();
            assert_eq!((t.block_m, t.block_n), tiles, "d={d} {arch}");
            assert_eq!(
                cfg.tc_warp_rows(t.block_m, t.block_n),
                warp_rows,
                "d={d} {arch}"
            );
            let q_in_registers = d <= 64 || (d == 128 && warp_rows == 16);
            assert_eq!(cfg.tc_q_in_registers(t.block_m, t.block_n), q_in_registers);
            assert_eq!(t.threads, 128);
            assert_eq!(t.vector, 8);
            assert_eq!(t.shared_kind, SharedMemoryKind::Dynamic);
            assert!(t.shared_bytes <= arch.max_dynamic_shared_bytes());
            assert_eq!(cfg.validate(), Ok(()));
        }
    }

    #[test]
    fn f64_head_dim_256_needs_dynamic_or_fails() {
        let mut cfg = AttentionConfig {
            dtype: DType::F64,
            ..AttentionConfig::new(256)
        };
        cfg.arch = Arch::Sm80;
        let t = cfg.tiles();
        assert_eq!(t.shared_kind, SharedMemoryKind::Dynamic);
        assert_eq!(cfg.validate(), Ok(()));
        cfg.arch = Arch::Sm75;
        let err = cfg.validate().unwrap_err();
        assert_eq!(err.0.len(), 1);
        assert_eq!(err.0[0].fields, vec!["head_dim", "dtype", "arch"]);
        assert!(err.0[0].message.contains("sm_75"), "{}", err.0[0].message);
    }

    #[test]
    fn explicit_tiles_report_threads_and_shared_memory() {
        let cfg = AttentionConfig {
            block_m: 128,
            block_n: 128,
            ..AttentionConfig::new(256)
        };
        let err = cfg.validate().unwrap_err();
        let firsts: Vec<_> = err.0.iter().map(|e| e.fields[0]).collect();
        // 128 rows × 16 threads = 2048 threads; 2 · 128 · 256 · 4 bytes of K/V.
        assert_eq!(firsts, vec!["block_m", "block_n"]);
        let half_auto = AttentionConfig {
            block_m: 32,
            ..AttentionConfig::new(128)
        };
        let r = half_auto.resolved();
        assert_eq!(r.block_m, 32);
        assert!(r.block_n > 0);
        assert_eq!(half_auto.validate(), Ok(()));
    }

    #[test]
    fn rejects_tiles_that_would_spill() {
        // 64 rows × 16 threads = 1024 threads leave 32 registers per thread.
        let cfg = AttentionConfig {
            block_m: 64,
            block_n: 16,
            ..AttentionConfig::new(256)
        };
        let err = cfg.validate().unwrap_err();
        assert_eq!(err.0.len(), 1);
        assert_eq!(
            err.0[0].fields,
            vec!["block_m", "block_n", "head_dim", "dtype"]
        );
        assert!(
            err.0[0].message.contains("registers"),
            "{}",
            err.0[0].message
        );
    }

    /// The tensor-core register rule at its boundary, on the tilings ptxas 12.9 fits or spills
    /// closest to 255 registers (`attention_ptxas`'s ignored sweep checks every accepted
    /// tiling; the figures in the comments are its `ptxas -v`).
    #[test]
    fn tensor_core_register_rule_boundary() {
        let tf32 = AttentionConfig {
            dtype: DType::F32,
            allow_tf32: true,
            block_m: 16,
            block_n: 16,
            ..AttentionConfig::new(256)
        };
        // D = 256 tf32: 64 chunks per row. One warp (32 threads) copies 16 · 64 / 32 = 32
        // rounds of its own: 128 + 8 + 3 · 32 + 43 = 275 > 255 (ptxas: 255 registers and 36
        // to 52 bytes of spills on every target). Two warps share round 0's geometry: 179
        // (ptxas: 190 to 192, no spill).
        for arch in [Arch::Sm80, Arch::Sm86, Arch::Sm89, Arch::Sm90] {
            let sm90 = if arch == Arch::Sm90 { 8 } else { 0 };
            let one_warp = AttentionConfig { arch, ..tf32 };
            assert_eq!(one_warp.tc_chunk_rounds(16, 16), 32);
            assert_eq!(one_warp.registers_estimate(16, 16), 275 + sm90);
            let err = one_warp.validate().unwrap_err();
            assert_eq!(err.0.len(), 1, "{arch}");
            assert_eq!(
                err.0[0].fields,
                vec!["block_m", "block_n", "head_dim", "dtype"]
            );
            assert_eq!(
                err.0[0].message,
                format!(
                    "tiles block_m = 16, block_n = 16 with head_dim = 256 and dtype = f32 need \
                     about {} registers per thread, more than the limit of 255 for 32 threads \
                     per block on {arch}: ptxas would spill",
                    275 + sm90
                )
            );
            let two_warps = AttentionConfig {
                block_m: 32,
                ..one_warp
            };
            assert_eq!(two_warps.tc_chunk_rounds(32, 16), 0);
            assert_eq!(two_warps.registers_estimate(32, 16), 179 + sm90);
            assert_eq!(two_warps.validate(), Ok(()), "{arch}");
        }
        // D = 96 f16: 12 chunks per row divide no thread count. 32 × 128 tiles: 24 rounds,
        // 48 + 24 + 64 + 72 + 43 = 251, which sm_80 fits (255 registers, no spill); the causal
        // mask (+8: 48 bytes of spills) or sm_90 (+8: 20 bytes) tip it over.
        let d96 = AttentionConfig {
            dtype: DType::F16,
            block_m: 32,
            block_n: 128,
            ..AttentionConfig::new(96)
        };
        assert_eq!(d96.tc_chunk_rounds(32, 128), 24);
        assert_eq!(d96.registers_estimate(32, 128), 251);
        assert_eq!(d96.validate(), Ok(()));
        for over in [
            AttentionConfig {
                causal: true,
                ..d96
            },
            AttentionConfig {
                arch: Arch::Sm90,
                ..d96
            },
        ] {
            assert_eq!(over.registers_estimate(32, 128), 259, "{over:?}");
            assert!(over.validate().is_err(), "{over:?}");
        }
        // One warp: 48 rounds, 323 (ptxas: 244 bytes of spills).
        let one_warp = AttentionConfig { block_m: 16, ..d96 };
        assert_eq!(one_warp.registers_estimate(16, 128), 323);
        assert!(one_warp.validate().is_err());
        // D = 96 tf32 on sm_90, 64 × 128: Q re-read from shared memory, 24 rounds, 235 (243
        // causal; ptxas: 254 registers, no spill).
        let d96_tf32 = AttentionConfig {
            head_dim: 96,
            block_m: 64,
            block_n: 128,
            arch: Arch::Sm90,
            ..tf32
        };
        for causal in [false, true] {
            let cfg = AttentionConfig { causal, ..d96_tf32 };
            assert_eq!(cfg.registers_estimate(64, 128), 235 + 8 * u32::from(causal));
            assert_eq!(cfg.validate(), Ok(()), "causal {causal}");
        }
        // Eight warps are held to the `.maxnreg` the kernel declares (255 at 256 threads), not
        // half of it: D = 96 f16 128 × 128 on sm_80, 197 (ptxas: 255 registers, no spill).
        let eight_warps = AttentionConfig {
            block_m: 128,
            ..d96
        };
        assert_eq!(eight_warps.registers_estimate(128, 128), 197);
        assert_eq!(eight_warps.validate(), Ok(()));
        // The tilings ptxas spilled before the tensor-core kernel declared `.maxnreg` fit now
        // and stay accepted: D = 64 causal tf32 64 × 64 on sm_80 (113 registers), D = 32 causal
        // tf32 32 × 32 on sm_86 (96).
        for (head_dim, block, arch) in [(64, 64, Arch::Sm80), (32, 32, Arch::Sm86)] {
            let cfg = AttentionConfig {
                head_dim,
                block_m: block,
                block_n: block,
                causal: true,
                arch,
                ..tf32
            };
            assert_eq!(cfg.tc_chunk_rounds(block, block), 0);
            assert_eq!(cfg.validate(), Ok(()), "d={head_dim} {arch}");
        }
    }

    #[test]
    fn rejects_bad_values_together() {
        let cfg = AttentionConfig {
            block_m: 48,
            block_n: 8,
            ..AttentionConfig::new(80)
        };
        let err = cfg.validate().unwrap_err();
        let fields: Vec<_> = err.0.iter().map(|e| e.fields.clone()).collect();
        assert_eq!(
            fields,
            vec![vec!["head_dim"], vec!["block_m"], vec!["block_n"]]
        );
        assert_eq!(
            err.0[0].message,
            "head_dim = 80 is not one of 32, 64, 96, 128, 256"
        );
    }

    #[test]
    fn shape_validation() {
        let s = AttentionShape {
            batch: 2,
            heads_q: 8,
            heads_kv: 2,
            seq_q: 5,
            seq_kv: 7,
        };
        assert_eq!(s.validate(64), Ok(()));
        assert_eq!(s.kv_head(5), 1);
        assert_eq!(s.q_len(64), 2 * 8 * 5 * 64);
        assert_eq!(s.kv_len(64), 2 * 2 * 7 * 64);
        assert_eq!(s.lse_len(), 80);
        assert_eq!(
            AttentionShape { heads_kv: 3, ..s }.validate(64),
            Err(AttentionShapeError::HeadsNotMultiple {
                heads_q: 8,
                heads_kv: 3
            })
        );
        assert_eq!(
            AttentionShape { seq_kv: 0, ..s }.validate(64),
            Err(AttentionShapeError::ZeroDim { name: "seq_kv" })
        );
        let big = AttentionShape {
            batch: 64,
            seq_q: 1 << 20,
            ..s
        };
        assert!(matches!(
            big.validate(128),
            Err(AttentionShapeError::TooLarge { tensor: "q", .. })
        ));
    }
}
