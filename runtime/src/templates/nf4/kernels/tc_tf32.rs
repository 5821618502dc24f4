//! The tiled NF4 GEMMs for f32 activations on tf32 tensor cores (`allow_tf32`, sm_80+), on the
//! shared 64 × 64 block tile of [`crate::templates::warp_mma`] (4 warps, 3-stage ring, 16 f32
//! of reduction per stage, `ldmatrix` + `cvt.rna.tf32.f32`, `mma.m16n8k8`, f32 accumulators):
//!
//! - forward `nf4_gemm`: `C [m, n] = A · Ŵᵀ`; A tile `A[m_base.., k0..]`, B tile `Ŵ[n_base + r,
//!   k0 + c]` (Ŵ rows are the mma's columns and contiguous along the reduction);
//! - backward `nf4_backward_input`: `G_A [m, k] = G_C · Ŵ`; A tile `G_C[m_base.., j0..]` against
//!   [`BACKWARD_COLS`] / 64 = 4 B tiles `Ŵ[j0 + c, l_base + 64·o + r]` (the transpose, written
//!   so by the dequantisation), 4 × 32 accumulators per thread.
//!
//! Same entry names and parameters as the CUDA-core GEMMs, the same grid for the forward and
//! `(⌈k / 256⌉, ⌈m / 64⌉)` for the backward ([`super::backward_input_cols`]); blocks of
//! [`tile::THREADS`] threads ([`super::gemm_threads`]). The activation rows go by 16-byte
//! `cp.async` (zero-filled past the edge), so their length (`k` forward, `n` backward) must be a
//! multiple of 4 ([`takes`]).
//!
//! The packed codes ride the same 3-stage ring: fills also start the `cp.async` of the code
//! windows ([`CodeRing`]), so no thread waits on a weight load. The backward stages 16 weight
//! rows × 128 bytes (the block's 256 columns: whole sectors of codes, and each row's absmax of
//! them 16 bytes of one sector at block 64) with each tile; a forward tile needs only 8 bytes
//! (16 codes) of each of its 64 weight rows, a quarter sector, so the forward copies 32 bytes
//! per row (a whole sector when `k / 2` is a multiple of 32) with every fourth tile, into a ring
//! of two windows, and each step reads its 8-byte slice. Each
//! step, once its slot has landed, the block dequantises the window into its f32 B tiles
//! (`NF4_CODE[code] · absmax`, exactly the host's `mul.rn.f32`; zero outside the weight; each
//! thread two 4-element chunks per B tile, one `st.shared.v4` each), synchronises, and
//! multiplies. The B tiles are rewritten only after the next step's first barrier, which every
//! reader of the previous ones has passed. Absmax: the forward's quads share a weight row and keep its
//! [`AbsmaxWindow`] (whole-sector loads); under double quantisation (the map in shared memory)
//! with `k % block = 0` a quad's lanes decode four consecutive blocks of their row at once
//! ([`QuadDecode`]), otherwise each chunk decodes its own; with `k % block = 0` the source is
//! consulted only on the first tile of each block and held in between ([`RowAbsmax`]). The
//! backward stages each window's absmax with its codes ([`AbsmaxStage`]: 16 rows of
//! `256 / block` values, one more when `k % block ≠ 0`, one value per thread). In the
//! backward's last column block, B tiles that start past `k` are not multiplied
//! ([`multiply_existing`]).

use super::absmax_stage::{AbsmaxReader, AbsmaxStage, LaneTile};
use super::absmax_window::{quad_first_lane, quad_member_lane, AbsmaxWindow};
use super::code_stage::{CodeRing, CodeStage, CodeWindow};
use super::slice_reduce::SumRange;
use super::tc::absmax_clamped;
use super::{absmax_at, both_below, dequant, entry_prologue, gemm_split_prologue, nibble};
use super::{CodeTable, Entry, U8};
use super::{BACKWARD_INPUT_ENTRY, GEMM_ENTRY, GEMM_SPLIT_ENTRY, TILE_M, TILE_N};
use crate::builder::{KernelBuilder, Reg, Val, F32, U16, U32};
use crate::ir::{CacheLevel, CmpOp};
use crate::templates::nf4::Nf4Config;
use crate::templates::warp_mma::{self as tile, TileElem, WarpPos, CHUNK_BYTES};

/// f32 per 16-byte chunk.
const CHUNK: u32 = CHUNK_BYTES / 4;

/// Whether the tiled GEMMs of `cfg` run on tf32 tensor cores: f32 activations with
/// `allow_tf32`, a target with tf32 `mma`, `cp.async`, `ldmatrix` and `cvt.rna.tf32` (sm_80+),
/// and both reduction lengths (`k` forward, `n` backward) multiples of 4 (whole 16-byte
/// copies). Otherwise the CUDA-core GEMMs run, silently.
pub fn takes(cfg: &Nf4Config) -> bool {
    cfg.allow_tf32
        && cfg.dtype == crate::dtype::DType::F32
        && super::tc::tensor_cores(cfg)
        && cfg.k.is_multiple_of(CHUNK)
        && cfg.n.is_multiple_of(CHUNK)
}

/// Which GEMM: where the weight tile comes from.
#[derive(Clone, Copy)]
enum Gemm {
    /// B tile `[r][c] = Ŵ[n_base + r, k0 + c]`.
    Forward,
    /// B tile `[r][c] = Ŵ[j0 + c, l_base + r]`.
    BackwardInput,
}

/// K tiles whose codes one forward copy stages: 4 × 8 bytes = one 32-byte sector per row.
const FORWARD_SPAN: u32 = 4;

/// Columns of `G_A` per backward block: [`BACKWARD_TILES`] B tiles of 64 beside one A tile, so
/// each reduction row's staged window is 128 code bytes (four whole sectors) and its absmax
/// 16 bytes of one sector at block 64 (64 columns would use 4 bytes of a sector per row).
pub const BACKWARD_COLS: u32 = BACKWARD_TILES * TILE_N;
/// B tiles (and accumulator sets) of the backward: 4 × 32 accumulators per thread.
const BACKWARD_TILES: u32 = 4;

/// Staged code window per copy: forward 64 rows × 32 bytes (64 codes, [`FORWARD_SPAN`] K
/// tiles), rows 48 bytes apart (the eight rows a request reads, 12 words apart, in distinct
/// banks); backward 16 rows × 128 bytes ([`BACKWARD_COLS`] codes, one K tile), rows 136 bytes
/// apart (34 words: the four rows a request reads, 4 apart, 8 banks apart; ≥ 132 leaves room
/// for the covering word of rows off words).
fn code_ring(k: &mut KernelBuilder, cfg: &Nf4Config, gemm: Gemm) -> CodeRing {
    match gemm {
        Gemm::Forward => {
            let codes = CodeStage::new(cfg, TILE_N, FORWARD_SPAN * F32::TILE_K / 2, 48);
            CodeRing::new(k, codes, (FORWARD_SPAN, tile::STAGES))
        }
        Gemm::BackwardInput => {
            let codes = CodeStage::new(cfg, F32::TILE_K, BACKWARD_COLS / 2, BACKWARD_COLS / 2 + 8);
            CodeRing::new(k, codes, (1, tile::STAGES))
        }
    }
}

/// Builds the tf32 `nf4_gemm` entry (grid `(ceil(n / 64), ceil(m / 64))`).
pub(super) fn build_gemm(cfg: &Nf4Config) -> KernelBuilder {
    let mut k = new_kernel(GEMM_ENTRY, cfg);
    let e = entry_prologue::<F32>(&mut k, cfg, ("a", "c"), tile::THREADS);
    build(&mut k, (cfg, &e), Gemm::Forward, SumRange::all(cfg.k));
    k
}

/// Builds the tf32 `nf4_gemm_split` (`super::gemm_split_prologue`; grid `(ceil(n / 64),
/// ceil(m / 64), S)`): block `z = s` runs the ring over K slice `s`'s tiles (its first column
/// a multiple of [`split_align`]) and stores its f32 partial tile.
pub(super) fn build_gemm_split(cfg: &Nf4Config) -> KernelBuilder {
    let mut k = new_kernel(GEMM_SPLIT_ENTRY, cfg);
    let (e, range) = gemm_split_prologue::<F32>(&mut k, cfg, tile::THREADS, CodeTable::Shared);
    build(&mut k, (cfg, &e), Gemm::Forward, range);
    k
}

/// The forward's K split alignment: whole code windows ([`FORWARD_SPAN`] tiles, 64 columns)
/// starting on a group of 4 blocks ([`QuadDecode`]).
pub(super) fn split_align(cfg: &Nf4Config) -> u32 {
    (FORWARD_SPAN * F32::TILE_K).max(4 * cfg.block)
}

/// Builds the tf32 `nf4_backward_input` entry (grid `(ceil(k / 256), ceil(m / 64))`).
pub(super) fn build_backward(cfg: &Nf4Config) -> KernelBuilder {
    let mut k = new_kernel(BACKWARD_INPUT_ENTRY, cfg);
    let e = entry_prologue::<F32>(&mut k, cfg, ("g_c", "g_a"), tile::THREADS);
    build(&mut k, (cfg, &e), Gemm::BackwardInput, SumRange::all(cfg.n));
    k
}

fn new_kernel(name: &str, cfg: &Nf4Config) -> KernelBuilder {
    let mut k = KernelBuilder::new(name, cfg.arch);
    k.require_block([tile::THREADS, 1, 1]);
    k
}

/// The GEMM's tile over the reduction indices `range`, stored to the output or, for a K
/// slice, its part of the workspace.
fn build(k: &mut KernelBuilder, (cfg, e): (&Nf4Config, &Entry<F32>), gemm: Gemm, range: SumRange) {
    let (len, cols) = match gemm {
        Gemm::Forward => (cfg.k, cfg.n),
        Gemm::BackwardInput => (cfg.n, cfg.k),
    };
    // B tiles beside each A tile: the backward's block is `BACKWARD_TILES` tiles wide.
    let b_tiles = match gemm {
        Gemm::Forward => 1,
        Gemm::BackwardInput => BACKWARD_TILES,
    };
    let (tid, pos) = WarpPos::of_thread(k);
    let bx = k.ctaid_x();
    let by = k.ctaid_y();
    let col_base = k.mul_lo(bx, b_tiles * TILE_N);
    let m_base = k.mul_lo(by, TILE_M);
    let a_ring = tile::ring::<F32>(k, "a_ring");
    let code_ring = code_ring(k, cfg, gemm);
    let codes = code_ring.codes;
    let b_tile = k.shared_array::<F32>("b_tile", b_tiles * tile::STAGE_BYTES / 4);
    let absmax_stage = matches!(gemm, Gemm::BackwardInput).then(|| {
        // Rows `per_row + 1` words apart (odd, or 2): the four rows 4 apart that a request
        // reads fall in distinct banks.
        let per_row = AbsmaxStage::per_row(cfg, BACKWARD_COLS);
        let shape = (tile::STAGES, F32::TILE_K, per_row + 1);
        AbsmaxStage::new(k, (cfg, e, BACKWARD_COLS), shape, (tid, tile::THREADS))
    });
    let chunks: Vec<_> = (0..tile::CHUNKS_PER_THREAD)
        .map(|i| tile::chunk_slot_bytes(k, (tid, i), 4))
        .collect();
    let window = |k: &mut KernelBuilder, k_tile: Reg<U32>| match gemm {
        Gemm::Forward => CodeWindow {
            row0: col_base,
            byte0: k.mul_lo(k_tile, F32::TILE_K / 2),
        },
        Gemm::BackwardInput => CodeWindow {
            row0: k.mul_lo(k_tile, F32::TILE_K),
            byte0: k.shr(col_base, 1u32),
        },
    };
    // The K tiles of the range: all, or the slice's (its start a multiple of 64).
    let (first_tile, tiles): (_, Val<U32>) = match range.offset() {
        None => (None, len.div_ceil(F32::TILE_K).into()),
        Some(start) => {
            let first = k.shr(start, F32::TILE_K.trailing_zeros());
            let span = k.sub(range.end, start);
            let span = k.add(span, F32::TILE_K - 1);
            let count = k.shr(span, F32::TILE_K.trailing_zeros());
            (Some(first), count.into())
        }
    };
    let fill = |k: &mut KernelBuilder, local: Reg<U32>, slot: Reg<U32>| {
        let k_tile = match first_tile {
            Some(first) => k.add(first, local),
            None => local,
        };
        let k0 = k.mul_lo(k_tile, F32::TILE_K);
        let a_stage = tile::stage_base(k, a_ring, slot);
        for &(row, col, at) in &chunks {
            k.comment("cp.async four activations");
            let grow = k.add(m_base, row);
            let gcol = k.add(k0, col);
            let inside = both_below(k, grow, e.m, gcol, len);
            let index = k.mad_lo(grow, len, gcol);
            let index = k.selp(index, 0u32, inside);
            let src = k.elem_addr(e.input, index);
            let dst = k.add(a_stage, at);
            let src_bytes = k.selp(CHUNK_BYTES, 0u32, inside);
            k.cp_async_zfill(CacheLevel::Cg, dst, src, CHUNK_BYTES, src_bytes);
        }
        let w = window(k, k_tile);
        code_ring.fill(k, (k_tile, slot), |k, stage| {
            codes.copy(k, e.weights.packed, (tid, tile::THREADS), &w, stage);
        });
        if let Some(absmax) = &absmax_stage {
            absmax.fill(k, &e.weights, &w, slot);
        }
    };
    let dequantise = Dequantise::new(
        k,
        (cfg, e),
        gemm,
        &codes,
        (&chunks, pos.lane),
        (col_base, range.offset(), absmax_stage.as_ref()),
    );
    let mut acc: Vec<_> = (0..b_tiles).map(|_| F32::zero_acc(k)).collect();
    let (a_lane, b_lane) = pos.fragment_offsets(k, 4);
    let b_base = k.shared_base(b_tile);
    let b_at = k.add(b_base, b_lane);
    let b_ats: Vec<_> = (0..b_tiles)
        .map(|o| k.add(b_at, o * tile::STAGE_BYTES))
        .collect();
    // The ring multiplies the tiles in order; this counts them.
    let k_tile = k.var::<U32>(first_tile.map_or(Val::from(0u32), Val::from));
    tile::run_ring(k, tiles, &fill, &mut |k, slot| {
        let stage = code_ring.tile_codes(k, (k_tile, slot));
        dequantise.tile(k, (k_tile, slot), stage, b_base);
        k.bar_sync();
        let a_stage = tile::stage_base(k, a_ring, slot);
        let a_at = k.add(a_stage, a_lane);
        multiply_existing(k, (col_base, cols), a_at, (&b_ats, &mut acc));
        k.add_into(k_tile, k_tile, 1u32);
    });
    for (o, acc) in acc.iter().enumerate() {
        let tile_base = k.add(col_base, o as u32 * TILE_N);
        store(k, (&pos, e, &range), (m_base, tile_base, cols), acc);
    }
}

/// One K tile into every B tile's accumulators (`b_ats[o]` → `acc[o]`, tile `o` at columns
/// `col_base + 64·o ..`), the A fragments loaded once; in a block whose last B tiles start past
/// `cols` (the backward's last column block when `k % 256 ≠ 0`, a block-uniform branch) only
/// the tiles that start inside, each with its own A loads.
fn multiply_existing(
    k: &mut KernelBuilder,
    (col_base, cols): (Reg<U32>, u32),
    a_at: Reg<U32>,
    (b_ats, acc): (
        &[Reg<U32>],
        &mut [tile::Accumulators<<F32 as TileElem>::Shape>],
    ),
) {
    let width = TILE_N * b_ats.len() as u32;
    if cols.is_multiple_of(width) {
        F32::multiply_tile(k, acc, a_at, b_ats);
        return;
    }
    let end = k.add(col_base, width);
    let whole = k.setp(CmpOp::Le, end, cols);
    // Register handles: both branches accumulate into the same registers.
    let mut every = acc.to_vec();
    k.if_else(
        whole,
        |k| F32::multiply_tile(k, &mut every, a_at, b_ats),
        |k| {
            for (o, (b_at, acc)) in b_ats.iter().zip(acc.chunks_mut(1)).enumerate() {
                let first = k.add(col_base, o as u32 * TILE_N);
                let starts_inside = k.setp_lt(first, cols);
                k.if_then(starts_inside, |k| {
                    F32::multiply_tile(k, acc, a_at, std::slice::from_ref(b_at))
                });
            }
        },
    );
}

/// A thread's chunk of a stage: tile row, first column, byte offset ([`tile::chunk_slot_bytes`]).
type TileChunk = (Reg<U32>, Reg<U32>, Reg<U32>);

/// Lanes between a row's four chunks: chunks are dealt per quarter-warp
/// ([`tile::staged_chunk`]: a quarter-warp takes one chunk column of 8 rows),
/// so the in-place tf32 rounding's `ld`/`st.shared.v4` are conflict-free per phase, and a
/// row's chunks sit on lanes `r, r + 8, r + 16, r + 24`.
const QUAD_STRIDE: u32 = 8;

/// One thread's share of turning a staged code window into the f32 B tile: its chunks (tile
/// row `r`, columns `c .. c + 4`, byte offset in the tile), and what it precomputes for them.
struct Dequantise<'a> {
    cfg: &'a Nf4Config,
    e: &'a Entry<F32>,
    gemm: Gemm,
    stride: u32,
    col_base: Reg<U32>,
    /// B tiles written per step: their chunks share the first tile's registers (tile `o` is
    /// `64·o` columns right, `32·o` code bytes, `o` B tiles further).
    b_tiles: u32,
    chunks: Vec<Chunk>,
    /// The backward's staged absmax.
    absmax_stage: Option<&'a AbsmaxStage>,
}

/// One 4-element chunk of the B tile and where its codes sit in a staged window.
struct Chunk {
    row: Reg<U32>,
    col: Reg<U32>,
    at: Reg<U32>,
    /// Byte offset of its codes in the stage: forward `r · stride + lead_r + c/2` (one `u16`);
    /// backward `c · stride + r/2` (plus `i · stride + lead_i` for its element `i`).
    code_at: Reg<U32>,
    /// The forward row's absmax when it has a source of its own (else decoded per chunk).
    absmax: Option<RowAbsmax>,
    /// The backward column's reader of the staged absmax.
    staged: Option<AbsmaxReader>,
}

/// Where a forward chunk's absmax comes from: its row's window (plain absmax), or under
/// double quantisation with `k % block = 0` the quad's decodes ([`QuadDecode`]).
enum AbsmaxFrom {
    Window(AbsmaxWindow),
    Quad(QuadDecode),
}

/// Double-quantised absmax of one weight row when rows start on block boundaries: the quad's
/// lanes share the row, so lane `t` decodes block `4i + t` of the row together (the row's
/// codes are consecutive bytes: one request reads 4 of each row's bytes, not 1) and each of
/// the four blocks reaches the quad by `shfl.sync.idx`.
struct QuadDecode {
    row: Reg<U32>,
    /// `t`, the row's chunk, and `lane − t·QUAD_STRIDE`.
    quad: Reg<U32>,
    quad_lane: Reg<U32>,
    /// Block `4i + t` of the row, for the current `i`.
    decoded: Reg<F32>,
}

impl QuadDecode {
    /// The absmax of the row's block `j` (every lane of the quad, a block-uniform `j`):
    /// decoded with blocks `j .. j + 4` when `j % 4 = 0` (past the weight: clamped, unused).
    fn block(
        &self,
        k: &mut KernelBuilder,
        (cfg, e): (&Nf4Config, &Entry<F32>),
        j: Reg<U32>,
    ) -> Reg<F32> {
        let holder = k.and(j, 3u32);
        let first = k.setp(CmpOp::Eq, holder, 0u32);
        k.if_then(first, |k| {
            let own = k.add(j, self.quad);
            let col = k.mul_lo(own, cfg.block);
            let v = absmax_clamped(k, cfg, e, self.row, col);
            k.assign(self.decoded, v);
        });
        let src = quad_member_lane(k, self.quad_lane, holder, QUAD_STRIDE);
        k.shfl_idx(self.decoded, src)
    }
}

/// A forward chunk's absmax source and, when `k % block = 0`, the value it gave last. Rows
/// then start on block boundaries, so the block changes only at tiles whose first column is a
/// multiple of `block`, the same tiles for every thread: the source is consulted there (a
/// block-uniform branch, so the window's shuffles see the whole warp) and its value kept in
/// between.
struct RowAbsmax {
    from: AbsmaxFrom,
    held: Option<Reg<F32>>,
}

impl RowAbsmax {
    /// The row's source: its window (plain absmax), or with `k % block = 0` the quad's held
    /// decodes; `None` (decode each chunk) otherwise. Its first tile starts at column
    /// `first_col` (a K slice's; `None`: 0).
    fn new(
        k: &mut KernelBuilder,
        (cfg, e): (&Nf4Config, &Entry<F32>),
        (row, first_col): (Reg<U32>, Option<Reg<U32>>),
        (lane, quad): (Reg<U32>, Reg<U32>),
    ) -> Option<Self> {
        let held = cfg
            .k
            .is_multiple_of(cfg.block)
            .then(|| k.var::<F32>(0.0f32));
        let quad_lanes = (lane, quad, QUAD_STRIDE);
        let from = match (
            AbsmaxWindow::new(k, (cfg, e), (row, first_col), quad_lanes),
            held,
        ) {
            (Some(window), _) => AbsmaxFrom::Window(window),
            (None, Some(_)) => AbsmaxFrom::Quad(QuadDecode {
                row,
                quad,
                quad_lane: quad_first_lane(k, lane, quad, QUAD_STRIDE),
                decoded: k.var::<F32>(0.0f32),
            }),
            (None, None) => return None,
        };
        Some(Self { from, held })
    }

    /// The absmax of the chunk at column `col` of K tile `k_tile` (first column `k0`).
    fn at(
        &self,
        k: &mut KernelBuilder,
        (cfg, e): (&Nf4Config, &Entry<F32>),
        (k_tile, k0): (Reg<U32>, Reg<U32>),
        col: Reg<U32>,
    ) -> Reg<F32> {
        let tiles_per_block = cfg.block / F32::TILE_K;
        let value = |k: &mut KernelBuilder| match &self.from {
            AbsmaxFrom::Window(w) => w.chunk(k, cfg, k0, col),
            AbsmaxFrom::Quad(quad) => {
                let j = k.shr(k_tile, tiles_per_block.trailing_zeros());
                quad.block(k, (cfg, e), j)
            }
        };
        let Some(held) = self.held else {
            return value(k);
        };
        let phase = k.and(k_tile, tiles_per_block - 1);
        let new_block = k.setp(CmpOp::Eq, phase, 0u32);
        k.if_then(new_block, |k| {
            let v = value(k);
            k.assign(held, v);
        });
        held
    }
}

impl<'a> Dequantise<'a> {
    fn new(
        k: &mut KernelBuilder,
        (cfg, e): (&'a Nf4Config, &'a Entry<F32>),
        gemm: Gemm,
        codes: &CodeStage,
        (chunks, lane): (&[TileChunk], Reg<U32>),
        (col_base, first_col, absmax_stage): (Reg<U32>, Option<Reg<U32>>, Option<&'a AbsmaxStage>),
    ) -> Self {
        let stride = codes.stride();
        let chunks = chunks
            .iter()
            .map(|&(row, col, at)| {
                let staged = absmax_stage.map(|a| {
                    let out = k.add(col_base, row);
                    a.reader(k, col_base, out, col)
                });
                let (code_at, absmax) = match gemm {
                    Gemm::Forward => {
                        // Window byte `c/2` of weight row `n_base + r`, `lead` bytes in (the
                        // window's `byte0` is a multiple of 8, so `lead` is the row's alone).
                        let out_row = k.add(col_base, row);
                        let half = k.shr(col, 1u32);
                        let off = k.mad_lo(row, stride, half);
                        let off = match codes.lead(k, out_row, 0u32) {
                            Some(lead) => k.add(off, lead),
                            None => off,
                        };
                        let piece = k.shr(col, 2u32);
                        let absmax =
                            RowAbsmax::new(k, (cfg, e), (out_row, first_col), (lane, piece));
                        (off, absmax)
                    }
                    Gemm::BackwardInput => {
                        let half = k.shr(row, 1u32);
                        (k.mad_lo(col, stride, half), None)
                    }
                };
                Chunk {
                    row,
                    col,
                    at,
                    code_at,
                    absmax,
                    staged,
                }
            })
            .collect();
        let b_tiles = match gemm {
            Gemm::Forward => 1,
            Gemm::BackwardInput => BACKWARD_TILES,
        };
        Self {
            cfg,
            e,
            gemm,
            stride,
            col_base,
            b_tiles,
            chunks,
            absmax_stage,
        }
    }

    /// `b_tile = Ŵ`'s tile of K tile `k_tile` (ring slot `slot`), from the staged codes at
    /// shared byte `stage`.
    fn tile(
        &self,
        k: &mut KernelBuilder,
        (k_tile, slot): (Reg<U32>, Reg<U32>),
        stage: Reg<U32>,
        b_tile: Reg<U32>,
    ) {
        k.comment("dequantise the staged codes into the B tile");
        let k0 = k.mul_lo(k_tile, F32::TILE_K);
        let absmax_slot = self.absmax_stage.map(|a| a.slot(k, slot));
        for chunk in &self.chunks {
            let code_at = k.add(stage, chunk.code_at);
            let out = k.add(chunk.row, self.col_base);
            let red = k.add(k0, chunk.col);
            let dst = k.add(b_tile, chunk.at);
            let lane = self.gemm_is_backward().then(|| {
                let staged = self
                    .absmax_stage
                    .zip(chunk.staged.as_ref())
                    .zip(absmax_slot);
                let ((stage, reader), base) = staged.expect("the backward stages its absmax");
                (stage, stage.lane_tile(k, reader, base, red))
            });
            for o in 0..self.b_tiles {
                let values = match &lane {
                    None => {
                        let absmax = chunk
                            .absmax
                            .as_ref()
                            .map(|a| a.at(k, (self.cfg, self.e), (k_tile, k0), chunk.col));
                        self.forward_chunk(k, code_at, (out, red), absmax)
                    }
                    Some((stage, lane)) => {
                        let tile_out = k.add(out, o * TILE_N);
                        let absmax = (*stage, lane, o * TILE_N);
                        self.backward_chunk(k, (code_at, o), (red, tile_out), (chunk.row, absmax))
                    }
                };
                let offset = (o * tile::STAGE_BYTES) as i32;
                k.st_shared_v4(dst, offset, [values[0], values[1], values[2], values[3]]);
            }
        }
    }

    fn gemm_is_backward(&self) -> bool {
        matches!(self.gemm, Gemm::BackwardInput)
    }

    /// `Ŵ[row, col .. col + 4]` (zero outside the weight): four codes in the staged `u16` at
    /// `code_at` (little-endian: elements 0, 1 are the high and low nibble of its first byte),
    /// one block (`col` a multiple of 4, blocks ≥ 32 elements); `absmax` from the row's
    /// [`RowAbsmax`], or decoded here.
    fn forward_chunk(
        &self,
        k: &mut KernelBuilder,
        code_at: Reg<U32>,
        (row, col): (Reg<U32>, Reg<U32>),
        absmax: Option<Reg<F32>>,
    ) -> Vec<Reg<F32>> {
        let values: Vec<Reg<F32>> = (0..CHUNK).map(|_| k.var::<F32>(0.0f32)).collect();
        let inside = both_below(k, row, self.cfg.n, col, self.cfg.k);
        k.if_then(inside, |k| {
            let pair = k.ld_shared::<U16>(code_at, 0);
            let bits = k.cvt::<U32, U16>(pair, None);
            let absmax = absmax.unwrap_or_else(|| {
                let element = k.mad_lo(row, self.cfg.k, col);
                absmax_at(k, &self.e.weights, element)
            });
            for (&value, shift) in values.iter().zip([4, 0, 12, 8]) {
                let code = nibble(k, bits, shift);
                let w = dequant(k, &self.e.weights, code, absmax);
                k.assign(value, w);
            }
        });
        values
    }

    /// `Ŵ[red + i, col]` for `i < 4` (zero outside the weight) in B tile `o`: staged row
    /// `c + i` (`code_at` points at row `c`'s byte `col_in_tile / 2` of the first tile, tile `o`
    /// is `32·o` bytes further), `lead_i` bytes in (a constant: `j0`, `c` and `byte0` are
    /// multiples of 4); element `2b` is the high nibble of byte `b`; the absmax of row
    /// `red + i` from the lane's place in the stage's absmax slot, `64·o` columns right.
    fn backward_chunk(
        &self,
        k: &mut KernelBuilder,
        (code_at, o): (Reg<U32>, u32),
        (red, col): (Reg<U32>, Reg<U32>),
        (tile_col, (stage, absmax, col_offset)): (Reg<U32>, (&AbsmaxStage, &LaneTile, u32)),
    ) -> Vec<Reg<F32>> {
        let odd = k.and(tile_col, 1u32);
        let low_bits = k.shl(odd, 2u32);
        let shift = k.sub(4u32, low_bits);
        let row_bytes = self.cfg.k / 2;
        (0..CHUNK)
            .map(|i| {
                let value = k.var::<F32>(0.0f32);
                let j = k.add(red, i);
                let inside = both_below(k, j, self.cfg.n, col, self.cfg.k);
                k.if_then(inside, |k| {
                    let lead = (i * row_bytes) % 4;
                    let offset = i * self.stride + lead + o * TILE_N / 2;
                    let byte = k.ld_shared::<U8>(code_at, offset as i32);
                    let byte = k.cvt::<U32, U16>(byte.retype(), None);
                    let code = k.bit_field(byte, shift, 4u32);
                    let absmax = stage.read_offset(k, absmax, i, col_offset);
                    let w = dequant(k, &self.e.weights, code, absmax);
                    k.assign(value, w);
                });
                value
            })
            .collect()
    }
}

/// `out[m_base + r, col_base + c] = acc` inside `m × cols` (f32, one store per element; a K
/// slice's into its part of the workspace).
fn store(
    k: &mut KernelBuilder,
    (pos, e, range): (&WarpPos, &Entry<F32>, &SumRange),
    (m_base, col_base, cols): (Reg<U32>, Reg<U32>, u32),
    acc: &tile::Accumulators<<F32 as TileElem>::Shape>,
) {
    k.comment("store the output tile");
    let (row0, col0) = pos.output_origin(k);
    let row0 = k.add(m_base, row0);
    let col0 = k.add(col_base, col0);
    for (mi, frags) in acc.iter().enumerate() {
        for (ni, frag) in frags.iter().enumerate() {
            for (i, v) in frag.f32_regs().into_iter().enumerate() {
                let i = i as u32;
                let row = k.add(row0, 16 * mi as u32 + 8 * (i / 2));
                let col = k.add(col0, 8 * ni as u32 + i % 2);
                let inside = both_below(k, row, e.m, col, cols);
                k.if_then(inside, |k| {
                    let index = k.mad_lo(row, cols, col);
                    let index = range.output_index(k, index);
                    super::store_output(k, e.output, index, v);
                });
            }
        }
    }
}
