//! Backward-input GEMM on tensor cores (sm_80+, f16/bf16): `G_A[i, l] = Σ_j G_C[i, j] · Ŵ[j, l]`.
//!
//! A block computes 64 rows × [`COLS`] = 256 columns of `G_A` (grid `(ceil(k / 256),
//! ceil(m / 64))`), fed by the [`super::tc`] ring ([`SHAPE`]: 2 stages): the activation tile is
//! `G_C[m_base.., j0..]` and the code window is reduction rows `j0 .. j0 + 64` of `W`, packed
//! bytes `l_base / 2 .. + 128` (the block's 256 columns: four whole sectors per row), with
//! each row's absmax of those columns staged beside them ([`super::absmax_stage`]: 16 bytes of
//! one sector at block 64, one value per thread). Wide tiles are what make the weight's loads efficient: per
//! reduction row a block reads 128 code bytes and `4 · 256 / block` absmax bytes, where 64
//! columns read 32 and 4 of a sector of their own. Warp `w` owns columns `l_base + 32w .. + 32`
//! (four n8 tiles `ni`, columns `32w + 8ni ..`) and all 64 rows: 16 accumulators.
//!
//! B fragments: here `B[j][l] = Ŵ[j, l]` (the reduction runs over `W`'s rows), so lane
//! (`g = lane / 4`, `t = lane % 4`) needs column `l = l_base + 32w + 8ni + g` of rows
//! `j0 + 16s + {2t, 2t+1}` (register 0) and `{2t+8, 2t+9}` (register 1): one nibble from each of
//! four rows. An n8 tile's eight columns are one 4-byte word of each staged row (word
//! `4w + ni`), so a lane reads words `4w .. 4w + 4` of each of its four rows, the four n8
//! tiles' at once (`ld.shared.v4.u32`; one word per tile, `ld.shared.u32`, when rows are off
//! words; the four even or odd rows of a request are 72 words apart: banks 8 apart, the other
//! lanes broadcast) and takes nibble `g` by `bfe` (element `2b` is the high nibble of byte `b`: shift `8·⌊g/2⌋ + 4·(1 − g mod 2)`).
//! When packed rows are not 4-byte multiples a staged row starts `lead` bytes into its first
//! word ([`super::code_stage`]; one `lead` per row parity for a lane): the lane reads word
//! `4w + ni + (g/2 + lead) / 4` and byte `(g/2 + lead) mod 4` of it (a row's lanes read at most
//! two adjacent words; the four rows stay in distinct banks).
//! Every element is `NF4_CODE[code] · absmax` of its own block in `T` ([`super::half_dequant`]:
//! a pair's two rows may lie in different blocks, so its scale packs both absmax); with
//! `k % block = 0` a warp's 32 columns share one block per row (block ≥ 32), so one staged
//! value serves its four n8 tiles.

use super::absmax_stage::AbsmaxStage;
use super::slice_reduce::SumRange;
use super::tc::{CodeLookup, CodeWindow, Pipeline, Shape, TileSpan, TC_K};
use super::{entry_prologue_table, CodeTable, BACKWARD_INPUT_ENTRY, THREADS};
use crate::builder::{Float, KernelBuilder, MmaInput, PackedHalf, Reg, M16N8K16, U32};
use crate::templates::nf4::Nf4Config;

/// Columns of `G_A` per block.
pub const COLS: u32 = 256;
/// n8 tiles per warp (8 warps × 4 × 8 = [`COLS`]).
const N_TILES: u32 = COLS / 8 / super::WARPS;
/// The ring: 2 stages of 64 rows × 128 bytes of codes, rows 144 bytes apart (36 words: the
/// four rows `2t` one request reads fall 8 banks apart, and ≥ 132 bytes leave room for the
/// covering word of rows off words); 2 stages keep the activation, code and absmax rings
/// within 48 KiB of static shared memory.
const SHAPE: Shape = Shape {
    stages: 2,
    rows: 64,
    warp_rows: 1,
    short_tiles: 1,
    code_width: COLS / 2,
    code_stride: COLS / 2 + 16,
    lookup: CodeLookup::Shared,
};
/// Words between staged absmax rows for `per_row` slots a row: 4 up to 4 slots, else
/// `per_row + 4` (12 or 20), so the rows `2t` one request reads start 8 banks apart (`8t`,
/// `24t` or `40t` words mod 32): no conflict up to 8 slots.
fn absmax_row_words(per_row: u32) -> u32 {
    if per_row <= 4 {
        4
    } else {
        per_row + 4
    }
}

/// Builds the tensor-core `nf4_backward_input` entry (grid `(ceil(k / 256), ceil(m / 64))`).
pub(super) fn build<T: PackedHalf + Float>(cfg: &Nf4Config) -> KernelBuilder
where
    M16N8K16: MmaInput<T, Packed = T::Pair>,
{
    let mut k = KernelBuilder::new(BACKWARD_INPUT_ENTRY, cfg.arch);
    k.require_block([THREADS, 1, 1]);
    let e = entry_prologue_table::<T>(&mut k, cfg, ("g_c", "g_a"), THREADS, CodeTable::Absent);
    let mut p = Pipeline::<T>::setup(&mut k, (cfg, &e), cfg.n, SHAPE);
    let per_row = AbsmaxStage::per_row(cfg, COLS);
    p.stage_absmax(&mut k, (cfg, &e), absmax_row_words(per_row));
    let bx = k.ctaid_x();
    let l_base = k.mul_lo(bx, COLS);
    let byte0 = k.shr(l_base, 1u32);
    let warp_col = k.mad_lo(p.warp, 8 * N_TILES, p.group);
    let l_col = k.add(l_base, warp_col);
    // Nibble of column g within its tile's word: 8·(g / 2) + 4 − 4·(g % 2).
    let pair = k.shr(p.group, 1u32);
    let odd = k.and(p.group, 1u32);
    let byte_bits = k.mad_lo(pair, 8u32, 4u32);
    let odd_bits = k.shl(odd, 2u32);
    let nibble_shift = k.sub(byte_bits, odd_bits);
    // This lane's word of reduction row 2t: byte 16w of row 2t (tile ni adds 4·ni).
    let word = k.mul_lo(p.warp, 4 * N_TILES);
    let lane_row = k.shl(p.quad, 1u32);
    let lane_word = k.mad_lo(lane_row, SHAPE.code_stride, word);
    // Rows not 4-byte multiples: row `2t + d` starts `lead` bytes into its staged row, the
    // same for every `d` of one parity (`j0`, `16s` and 8 rows are 4-byte multiples), so the
    // lane reads word `4w + ni + (g/2 + lead) / 4` at byte `(g/2 + lead) mod 4` of it.
    let parity_reads: Vec<(Option<Reg<U32>>, Reg<U32>)> = (0..2u32)
        .map(|parity| {
            let rel = k.add(lane_row, parity);
            match p.codes.lead(&mut k, rel, byte0) {
                None => (None, nibble_shift),
                Some(lead) => {
                    let pos = k.add(pair, lead);
                    let step = k.shr(pos, 2u32);
                    let word_off = k.shl(step, 2u32);
                    let byte = k.and(pos, 3u32);
                    let bits = k.mad_lo(byte, 8u32, 4u32);
                    (Some(word_off), k.sub(bits, odd_bits))
                }
            }
        })
        .collect();
    let absmax = p.absmax.as_ref().expect("staged absmax");
    let reader = absmax.reader(&mut k, l_base, l_col, lane_row);
    // The n8 tiles' columns, right of the first one's: with `k % block = 0` all in its block
    // (a warp's 32 columns start a multiple of 32 from a block's start, block ≥ 32).
    let tile_cols: Vec<u32> = (0..N_TILES).map(|ni| 8 * ni).collect();
    let acc: Vec<_> = (0..N_TILES).map(|_| p.zero_acc(&mut k)).collect();
    let window = |k: &mut KernelBuilder, tile: Reg<U32>| CodeWindow {
        row0: k.mul_lo(tile, TC_K),
        byte0,
    };
    let aligned = p.codes.word_aligned();
    let mut multiply = |k: &mut KernelBuilder, tile: Reg<U32>, slot: Reg<U32>| {
        k.comment("dequantise this lane's columns of four rows per step into B fragments");
        let codes = p.code_slot(k, slot);
        let at = k.add(codes, lane_word);
        let reads: Vec<(Reg<U32>, Reg<U32>)> = parity_reads
            .iter()
            .map(|&(word_off, shift)| match word_off {
                None => (at, shift),
                Some(off) => (k.add(at, off), shift),
            })
            .collect();
        let j0 = k.mul_lo(tile, TC_K);
        let lane_j = k.add(j0, lane_row);
        let a_lane = p.a_lane(k, slot);
        let absmax_slot = absmax.slot(k, slot);
        let lane = absmax.lane_tile(k, &reader, absmax_slot, lane_j);
        for s in 0..TC_K / 16 {
            // The step's four rows `16s + d`: register 0 pairs rows `2t, 2t + 1`, register 1
            // rows `2t + 8, 2t + 9`.
            let rows = [0u32, 1, 8, 9].map(|d| 16 * s + d);
            let columns = rows.map(|r| absmax.read_columns(k, &lane, r, &tile_cols));
            // Scale of register `reg` of tile `ni`: index `2 · ni + reg`.
            let pairs: Vec<_> = (0..N_TILES as usize)
                .flat_map(|ni| [(0, 1), (2, 3)].map(|(a, b)| (columns[a][ni], columns[b][ni])))
                .collect();
            let scales = p.half.scales(k, &pairs);
            // Each row's words of the four n8 tiles: one 16-byte load when rows are word
            // aligned (4 consecutive words at a 16-byte multiple), else one word per tile.
            let words = rows.map(|r| {
                let (at, _) = reads[(r % 2) as usize];
                let offset = (r * SHAPE.code_stride) as i32;
                if aligned {
                    k.ld_shared_v4::<U32>(at, offset).to_vec()
                } else {
                    (0..N_TILES)
                        .map(|ni| k.ld_shared::<U32>(at, offset + 4 * ni as i32))
                        .collect()
                }
            });
            let n_tiles: Vec<_> = (0..N_TILES as usize)
                .map(|ni| {
                    let regs = [[0usize, 1], [2, 3]]
                        .into_iter()
                        .enumerate()
                        .map(|(reg, pair)| {
                            let [lo, hi] = pair.map(|i| {
                                let (_, shift) = reads[(rows[i] % 2) as usize];
                                k.bit_field(words[i][ni], shift, 4u32)
                            });
                            p.half.pair(k, (lo, hi), scales[2 * ni + reg])
                        })
                        .collect();
                    (regs, acc[ni].as_slice())
                })
                .collect();
            p.mma_steps(k, a_lane, s, &[n_tiles]);
        }
    };
    p.run(
        &mut k,
        &e,
        TileSpan::All(cfg.n.div_ceil(TC_K)),
        &window,
        &mut multiply,
    );
    let whole = SumRange::all(cfg.n);
    for (ni, acc) in acc.iter().enumerate() {
        let tile_col = k.mad_lo(p.warp, 8 * N_TILES, l_base);
        let tile_col = k.add(tile_col, 8 * ni as u32);
        p.store(&mut k, (&e, &whole), (tile_col, cfg.k), acc);
    }
    k
}
