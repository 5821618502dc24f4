//! Tiled forward GEMM on tensor cores (sm_80+, f16/bf16): `C[i, j] = Σ_l A[i, l] · Ŵ[j, l]`.
//!
//! Same grid and tile as the CUDA-core [`super::gemm`] (64 × 64 of `C` per block of 256
//! threads), fed by the [`super::tc`] ring ([`TC_K`] = 64 reduction elements per stage), its 8
//! warps 2 × 4 ([`Shape::FORWARD`]): warp `w` owns rows `32 · (w / 4) ..` (2 m16 accumulators
//! per n8 tile) and columns `n_base + 16 · (w mod 4) .. + 16` (two n8 tiles `j`, a lane
//! dequantising one weight row of each), so every weight is dequantised by both warp rows and
//! each warp reads only its half of the activation tile: per k16 step 2 `ldmatrix.x4` serve 4
//! `mma` (2 shared wavefronts per `mma`, where one warp over all 64 rows read 4). At `m ≤ 32`
//! the second warp row's rows all lie past `m` and it skips the slices' work.
//!
//! The tall entry (`nf4_gemm_tall`, [`build_tall`]) runs 128 rows × 64 columns per block
//! ([`Shape::FORWARD_TALL`], 2 stages) for large `m`, its 8 warps 2 × 4: warp `w` owns rows
//! `64 · (w / 4) ..` (4 m16 accumulators per n8 tile) and columns `n_base + 16 · (w mod 4) ..
//! + 16` (two n8 tiles `j`, a lane dequantising one weight row of each). Per k16 step a warp's
//! 4 `ldmatrix.x4` of A serve 8 `mma` and each of its 2 × 2 B registers serves 4: 2 shared
//! wavefronts of A per `mma`, where one warp over all 128 rows and 8 columns read 4 (its B
//! fragments served 8 `mma`, but the 8 warps each re-read the whole A tile, which bounded the
//! kernel by shared memory), at twice the dequantisation per `mma` (each weight is
//! dequantised by both warp rows). The launcher picks it for unsplit launches of more than 64
//! rows, and its split, `nf4_gemm_tall_split`, for split ones.
//!
//! B fragments straight from the codes (PTX ISA, `mma.m16n8k16` B layout): B's column `n` is
//! `Ŵ` row `n`, so lane (`g = lane / 4`, `t = lane % 4`) needs `Ŵ[n_base + c + g, k]` (`c` the
//! n8 tile's first column `16 · (w mod 4) + 8j`) at
//! `k = 16s + 2t, 2t + 1` (register 0) and `16s + 2t + 8, 2t + 9` (register 1) of step `s`:
//! one packed byte each (high nibble = the even `k`). Those are bytes `t + 4q` (`q = 2s, 2s+1`)
//! of the row's 32 staged bytes, i.e. byte `t` of word `q`: one pair of 16-byte shared loads
//! per lane and stage gives all eight bytes (eight rows 48 bytes apart: no bank conflict).
//! When packed rows are not 4-byte multiples the staged row starts `lead` bytes into its first
//! word ([`super::code_stage`]): the lane's bytes are byte `(t + lead) mod 4` of words
//! `q + (t + lead) / 4`, eight 4-byte loads (a quad reads at most two words of its row, the
//! eight rows' words in distinct banks).
//! Each pair of codes becomes one B register in the activation type ([`super::half_dequant`]:
//! a k16 step's two bytes (words `2s`, `2s + 1`) gathered by one `prmt` and looked up in byte
//! planes of the codes rounded to `T` held in registers, `prmt` only, then one packed `fma` by
//! the block's absmax rounded to `T` once per stage); no shared table, and nothing
//! dequantised is written back.
//!
//! Absmax: each quad keeps a sliding two-sector window of its row's absmax in registers
//! ([`AbsmaxWindow`]: whole-sector loads, values shuffled within the quad). Under double
//! quantisation, when `k % block = 0` a row's 64-element slice lies in one block (two for block
//! 32), decoded by the lane; otherwise blocks may start at any even element, and each window's
//! ≤ 3 blocks per row are decoded once per stage into shared memory with the codes
//! ([`super::absmax_stage`]: one value per thread, not three decodes per lane), each byte
//! reading its block's slot.

use super::absmax_window::AbsmaxWindow;
use super::slice_reduce::SumRange;
use super::tc::{absmax_clamped, CodeWindow, Pipeline, Shape, TileSpan, TC_K, W_STRIDE};
use super::{
    entry_prologue_table, gemm_split_prologue, CodeTable, Entry, GEMM_ENTRY, GEMM_SPLIT_ENTRY,
    GEMM_TALL_ENTRY, GEMM_TALL_SPLIT_ENTRY, THREADS, TILE_N,
};
use crate::builder::{Float, KernelBuilder, MmaInput, PackedHalf, Reg, F32, M16N8K16, U32};
use crate::templates::nf4::Nf4Config;

/// Builds the tensor-core `nf4_gemm` entry (grid `(ceil(n / 64), ceil(m / 64))`).
pub(super) fn build<T: PackedHalf + Float>(cfg: &Nf4Config) -> KernelBuilder
where
    M16N8K16: MmaInput<T, Packed = T::Pair>,
{
    build_whole::<T>(cfg, GEMM_ENTRY, Shape::FORWARD)
}

/// Builds the tensor-core `nf4_gemm_tall` entry (grid `(ceil(n / 64), ceil(m / 128))`): the
/// same parameters as `nf4_gemm`, 128 rows per block.
pub(super) fn build_tall<T: PackedHalf + Float>(cfg: &Nf4Config) -> KernelBuilder
where
    M16N8K16: MmaInput<T, Packed = T::Pair>,
{
    build_whole::<T>(cfg, GEMM_TALL_ENTRY, Shape::FORWARD_TALL)
}

fn build_whole<T: PackedHalf + Float>(cfg: &Nf4Config, name: &str, shape: Shape) -> KernelBuilder
where
    M16N8K16: MmaInput<T, Packed = T::Pair>,
{
    let mut k = new_kernel(name, cfg, shape);
    let e = entry_prologue_table::<T>(&mut k, cfg, ("a", "c"), THREADS, CodeTable::Absent);
    multiply_range(&mut k, cfg, &e, SumRange::all(cfg.k), shape);
    k
}

/// Builds the tensor-core `nf4_gemm_split` (`super::gemm_split_prologue`; grid `(ceil(n / 64),
/// ceil(m / 64), S)`): block `z = s` runs the ring over K slice `s`'s [`TC_K`]-column stages
/// (its first column a multiple of [`split_align`]) and stores its f32 partial tile.
pub(super) fn build_split<T: PackedHalf + Float>(cfg: &Nf4Config) -> KernelBuilder
where
    M16N8K16: MmaInput<T, Packed = T::Pair>,
{
    build_sliced::<T>(cfg, GEMM_SPLIT_ENTRY, Shape::FORWARD)
}

/// Builds `nf4_gemm_tall_split`: [`build_split`] on 128-row tiles (grid `(ceil(n / 64),
/// ceil(m / 128), S)`), the split of what `nf4_gemm_tall` runs whole.
pub(super) fn build_tall_split<T: PackedHalf + Float>(cfg: &Nf4Config) -> KernelBuilder
where
    M16N8K16: MmaInput<T, Packed = T::Pair>,
{
    build_sliced::<T>(cfg, GEMM_TALL_SPLIT_ENTRY, Shape::FORWARD_TALL)
}

fn build_sliced<T: PackedHalf + Float>(cfg: &Nf4Config, name: &str, shape: Shape) -> KernelBuilder
where
    M16N8K16: MmaInput<T, Packed = T::Pair>,
{
    let mut k = new_kernel(name, cfg, shape);
    let (e, range) = gemm_split_prologue::<T>(&mut k, cfg, THREADS, CodeTable::Absent);
    multiply_range(&mut k, cfg, &e, range, shape);
    k
}

/// The K split alignment of this path: whole [`TC_K`] stages starting on a block.
pub(super) fn split_align(cfg: &Nf4Config) -> u32 {
    TC_K.max(cfg.block)
}

fn new_kernel(name: &str, cfg: &Nf4Config, shape: Shape) -> KernelBuilder {
    let mut k = KernelBuilder::new(name, cfg.arch);
    k.require_block([THREADS, 1, 1]);
    k.max_registers(max_registers(shape));
    k
}

/// The register cap of the forward on `shape`. One warp row (64 rows, one weight row per
/// lane): 64 × 256 threads, 4 blocks per SM's 64 K registers, without spills. Two warp rows
/// (two weight rows' codes, scales and absmax windows per lane) on 64 rows: ptxas spills at
/// 64, so 80 (3 blocks per SM); on 128 rows, with 32 accumulators per thread, it spills at
/// 80 and 96, so 128, which still leaves 2 blocks per SM (their 42–46 KiB of shared memory
/// fit too).
const fn max_registers(shape: Shape) -> u32 {
    if shape.rows > 64 {
        128
    } else if shape.warp_rows > 1 {
        80
    } else {
        64
    }
}

/// The block's `shape.rows` × 64 tile over the reduction columns `range`, stored rounded to `O` or as
/// the slice's f32 partials.
fn multiply_range<T: PackedHalf + Float, O: Float>(
    k: &mut KernelBuilder,
    cfg: &Nf4Config,
    e: &Entry<T, O>,
    range: SumRange,
    shape: Shape,
) where
    M16N8K16: MmaInput<T, Packed = T::Pair>,
{
    let mut p = Pipeline::<T>::setup(k, (cfg, e), cfg.k, shape);
    if cfg.double_quant && !cfg.k.is_multiple_of(cfg.block) {
        p.stage_absmax(k, (cfg, e), 4);
    }
    let bx = k.ctaid_x();
    let n_base = k.mul_lo(bx, TILE_N);
    p.fix_code_rows(k, n_base);
    // The warp's n8 tiles: columns `n_base + n8 · 8 · warp_col + 8j ..` of the block.
    let n8 = TILE_N / 8 / shape.warp_cols();
    let warp_first = k.mul_lo(p.warp_col, 8 * n8);
    let cols: Vec<_> = (0..n8)
        .map(|j| LaneCodes::new(k, (cfg, e), &p, (n_base, warp_first, j), range.offset()))
        .collect();
    let aligned = p.codes.word_aligned();
    let acc: Vec<_> = cols.iter().map(|_| p.zero_acc(k)).collect();
    let window = |k: &mut KernelBuilder, tile: Reg<U32>| CodeWindow {
        row0: n_base,
        byte0: k.mul_lo(tile, TC_K / 2),
    };
    let mut multiply = |k: &mut KernelBuilder, tile: Reg<U32>, slot: Reg<U32>| {
        p.busy_warp(k, |k| {
            k.comment("dequantise this lane's codes into B fragments; mma over the slice");
            let col0 = k.mul_lo(tile, TC_K);
            let slices: Vec<_> = cols
                .iter()
                .map(|c| c.slice(k, (cfg, e), &p, (col0, slot), aligned))
                .collect();
            let a_lane = p.a_lane(k, slot);
            let steps: Vec<_> = (0..TC_K / 16)
                .map(|s| {
                    slices
                        .iter()
                        .zip(&acc)
                        .map(|(c, acc)| (c.step(k, &p, s), acc.as_slice()))
                        .collect()
                })
                .collect();
            p.mma_steps(k, a_lane, 0, &steps);
        });
    };
    let tiles = TileSpan::of(k, &range, cfg.k);
    p.run(k, e, tiles, &window, &mut multiply);
    for (j, acc) in (0..n8).zip(&acc) {
        let first = k.add(warp_first, 8 * j);
        let tile_col = k.add(n_base, first);
        p.store(k, (e, &range), (tile_col, cfg.n), acc);
    }
}

/// One lane's weight row of one of its warp's n8 tiles: where its staged codes are and how
/// its bytes' nibbles are extracted, and its absmax window.
struct LaneCodes {
    /// The row within the block's 64 (`8 · n8 · warp_col + 8j + g`) and in the weight.
    block_row: Reg<U32>,
    n_row: Reg<U32>,
    /// Shared byte of the lane's first code word in slot 0 of the code ring.
    code_lane: Reg<U32>,
    /// The `prmt` selector taking the lane's byte of two words
    /// ([`HalfCodes::pairs_of_bytes`](super::half_dequant::HalfCodes::pairs_of_bytes)).
    gather: Reg<U32>,
    absmax_window: Option<AbsmaxWindow>,
}

impl LaneCodes {
    /// The lane's row of n8 tile `j` of the warp whose tiles start at block column
    /// `warp_first`, for the reduction columns from `first_col` on.
    fn new<T: PackedHalf + Float, O: Float>(
        k: &mut KernelBuilder,
        (cfg, e): (&Nf4Config, &Entry<T, O>),
        p: &Pipeline<T>,
        (n_base, warp_first, j): (Reg<U32>, Reg<U32>, u32),
        first_col: Option<Reg<U32>>,
    ) -> Self
    where
        M16N8K16: MmaInput<T, Packed = T::Pair>,
    {
        let tile_first = k.add(warp_first, 8 * j);
        let block_row = k.add(tile_first, p.group);
        let n_row = k.add(n_base, block_row);
        // This lane's bytes `t + 4q` of the window sit at `lead + t + 4q` of its staged row:
        // word `q + (lead + t) / 4`, byte `(lead + t) mod 4` (`lead` = 0 for rows of 4-byte
        // multiples).
        let code_row = k.mul_lo(block_row, W_STRIDE);
        let (code_row, byte) = match p.codes.lead(k, n_row, 0u32) {
            None => (code_row, p.quad),
            Some(lead) => {
                let pos = k.add(p.quad, lead);
                let step = k.shr(pos, 2u32);
                let row_at = k.mad_lo(step, 4u32, code_row);
                (row_at, k.and(pos, 3u32))
            }
        };
        let code_lane = p.code_lane(k, code_row);
        // Byte `byte` of the first word (selector nibble 0) and of the second (nibble 1: `4 +
        // byte`).
        let gather = k.mad_lo(byte, 0x11u32, 0x40u32);
        let absmax_window = AbsmaxWindow::new(k, (cfg, e), (n_row, first_col), (p.lane, p.quad, 1));
        Self {
            block_row,
            n_row,
            code_lane,
            gather,
            absmax_window,
        }
    }

    /// The row's code words and scales of the slice from column `col0` (ring slot `slot`).
    fn slice<T: PackedHalf + Float, O: Float>(
        &self,
        k: &mut KernelBuilder,
        (cfg, e): (&Nf4Config, &Entry<T, O>),
        p: &Pipeline<T>,
        (col0, slot): (Reg<U32>, Reg<U32>),
        aligned: bool,
    ) -> SliceCodes<T>
    where
        M16N8K16: MmaInput<T, Packed = T::Pair>,
    {
        let at = p.code_slot_at(k, self.code_lane, slot);
        let words: Vec<Reg<U32>> = if aligned {
            let lo = k.ld_shared_v4::<U32>(at, 0);
            let hi = k.ld_shared_v4::<U32>(at, 16);
            lo.into_iter().chain(hi).collect()
        } else {
            // The lane's first word may be the row's second: not 16-byte aligned.
            (0..8).map(|q| k.ld_shared::<U32>(at, 4 * q)).collect()
        };
        let absmax = match (&self.absmax_window, &p.absmax) {
            (Some(w), _) => w.slice(k, cfg, col0),
            (None, Some(stage)) => {
                let base = stage.slot(k, slot);
                let row_at = stage.row_at(k, base, self.block_row);
                let slice_start = k.mad_lo(self.n_row, cfg.k, col0);
                let lane_start = k.mad_lo(p.quad, 2u32, slice_start);
                let first = k.shr(slice_start, e.weights.block_shift);
                (0..8)
                    .map(|q| {
                        let elem = k.add(lane_start, 8 * q);
                        stage.read_element(k, row_at, (elem, first), 0)
                    })
                    .collect()
            }
            (None, None) => slice_absmax(k, cfg, e, self.n_row, col0),
        };
        let both: Vec<_> = absmax.iter().map(|&a| (a, a)).collect();
        let scales = p.half.scales(k, &both);
        SliceCodes {
            words,
            scales,
            gather: self.gather,
        }
    }
}

/// One lane's codes of one row for a slice: its eight words (byte `t` of word `q` is the pair
/// at `k = 8q + 2t`) and their scales.
struct SliceCodes<T: PackedHalf> {
    words: Vec<Reg<U32>>,
    scales: Vec<Reg<T::Pair>>,
    gather: Reg<U32>,
}

impl<T: PackedHalf> SliceCodes<T> {
    /// The two B registers of k16 step `s` (words `2s`, `2s + 1`).
    fn step(&self, k: &mut KernelBuilder, p: &Pipeline<T>, s: u32) -> Vec<Reg<T::Pair>>
    where
        M16N8K16: MmaInput<T, Packed = T::Pair>,
    {
        let q = 2 * s as usize;
        let words = (self.words[q], self.words[q + 1]);
        let scales = (self.scales[q], self.scales[q + 1]);
        p.half
            .pairs_of_bytes(k, words, self.gather, scales)
            .to_vec()
    }
}

/// The absmax of each of this lane's eight bytes `q` (elements `col0 + 2t + 8q`) of weight
/// row `row` under double quantisation with `k % block = 0`: row starts are block-aligned and
/// `col0` a multiple of 64, so the slice is runs of `min(block, 64)` elements sharing a block,
/// each decoded once.
fn slice_absmax<T: crate::builder::Scalar, O: crate::builder::Scalar>(
    k: &mut KernelBuilder,
    cfg: &Nf4Config,
    e: &Entry<T, O>,
    row: Reg<U32>,
    col0: Reg<U32>,
) -> Vec<Reg<F32>> {
    let run = cfg.block.min(TC_K);
    let runs: Vec<Reg<F32>> = (0..TC_K / run)
        .map(|r| {
            let col = k.add(col0, r * run);
            absmax_clamped(k, cfg, e, row, col)
        })
        .collect();
    (0..8).map(|q| runs[(8 * q / run) as usize]).collect()
}
