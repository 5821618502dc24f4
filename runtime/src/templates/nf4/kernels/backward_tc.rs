//! Backward-input GEMM on tensor cores (sm_80+, f16/bf16): `G_A[i, l] = Σ_j G_C[i, j] · Ŵ[j, l]`.
//!
//! Same grid and tile as the CUDA-core [`super::backward`] (64 × 64 of `G_A` per block), fed by
//! the [`super::tc`] ring: the activation tile is `G_C[m_base.., j0..]` and the code window is
//! reduction rows `j0 .. j0 + 64` of `W`, packed bytes `l_base / 2 .. + 32` (the block's 64
//! columns). Warp `w` owns columns `l_base + 8w .. + 8` and all 64 rows.
//!
//! B fragments: here `B[j][l] = Ŵ[j, l]` (the reduction runs over `W`'s rows), so lane
//! (`g = lane / 4`, `t = lane % 4`) needs column `l = l_base + 8w + g` of rows
//! `j0 + 16s + {2t, 2t+1}` (register 0) and `{2t+8, 2t+9}` (register 1): one nibble from each of
//! four rows. The warp's eight columns are one 4-byte word of each staged row (word `w`), so a
//! lane reads that word of its four rows (`ld.shared.u32`; the four even or odd rows of a
//! request are 12 words apart: distinct banks, the other lanes broadcast) and takes nibble `g`
//! (element `2b` is the high nibble of byte `b`: shift `8·⌊g/2⌋ + 4·(1 − g mod 2)`).
//! When packed rows are not 4-byte multiples a staged row starts `lead` bytes into its first
//! word ([`super::code_stage`]; one `lead` per row parity for a lane): the lane reads word
//! `w + (g/2 + lead) / 4` and byte `(g/2 + lead) mod 4` of it (a row's lanes read at most two
//! adjacent words; the four rows stay in distinct banks).
//! Every element is `NF4_CODE[code] · absmax` of its own block, rounded once to `T`; the
//! absmax come from the stage's [`super::absmax_stage`] slot (the window's rows × the block's
//! ≤ 3 blocks of those 64 columns), copied with the codes.

use super::tc::{CodeWindow, Pipeline, TC_K, W_STRIDE};
use super::{entry_prologue, MapCopy, BACKWARD_INPUT_ENTRY, THREADS, TILE_N};
use crate::builder::{Float, KernelBuilder, MmaInput, PackedHalf, Reg, M16N8K16, U32};
use crate::templates::nf4::Nf4Config;

/// Builds the tensor-core `nf4_backward_input` entry (grid `(ceil(k / 64), ceil(m / 64))`).
pub(super) fn build<T: PackedHalf + Float>(cfg: &Nf4Config) -> KernelBuilder
where
    M16N8K16: MmaInput<T, Packed = T::Pair>,
{
    let mut k = KernelBuilder::new(BACKWARD_INPUT_ENTRY, cfg.arch);
    k.require_block([THREADS, 1, 1]);
    let e = entry_prologue::<T>(
        &mut k,
        cfg,
        ("g_c", "g_a"),
        MapCopy::Shared { threads: THREADS },
    );
    let mut p = Pipeline::<T>::setup(&mut k, cfg, &e, cfg.n);
    p.stage_absmax(&mut k, cfg, &e);
    let bx = k.ctaid_x();
    let l_base = k.mul_lo(bx, TILE_N);
    let byte0 = k.shr(l_base, 1u32);
    let warp_col = k.mad_lo(p.warp, 8u32, p.group);
    let l_col = k.add(l_base, warp_col);
    // Nibble of column g within the warp's word: 8·(g / 2) + 4 − 4·(g % 2).
    let pair = k.shr(p.group, 1u32);
    let odd = k.and(p.group, 1u32);
    let byte_bits = k.mad_lo(pair, 8u32, 4u32);
    let odd_bits = k.shl(odd, 2u32);
    let nibble_shift = k.sub(byte_bits, odd_bits);
    // This lane's word of reduction row 2t: byte 4w of row 2t.
    let word = k.shl(p.warp, 2u32);
    let lane_row = k.shl(p.quad, 1u32);
    let lane_word = k.mad_lo(lane_row, W_STRIDE, word);
    // Rows not 4-byte multiples: row `2t + d` starts `lead` bytes into its staged row, the
    // same for every `d` of one parity (`j0`, `16s` and 8 rows are 4-byte multiples), so the
    // lane reads word `w + (g/2 + lead) / 4` at byte `(g/2 + lead) mod 4` of it.
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
    let absmax_reader = absmax.reader(&mut k, l_base, l_col, lane_row);
    let acc = Pipeline::<T>::zero_acc(&mut k);
    let window = |k: &mut KernelBuilder, tile: Reg<U32>| CodeWindow {
        row0: k.mul_lo(tile, TC_K),
        byte0,
    };
    let mut multiply = |k: &mut KernelBuilder, tile: Reg<U32>, slot: Reg<U32>| {
        k.comment("dequantise this lane's column of four rows per step into B fragments");
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
        let absmax_lane = absmax.lane_tile(k, &absmax_reader, absmax_slot, lane_j);
        for s in 0..TC_K / 16 {
            let regs: Vec<_> = [[0u32, 1], [8, 9]]
                .into_iter()
                .map(|rows| {
                    let [lo, hi] = rows.map(|d| {
                        let r = 16 * s + d;
                        let (at, shift) = reads[(d % 2) as usize];
                        let w = k.ld_shared::<U32>(at, (r * W_STRIDE) as i32);
                        let shifted = k.shr(w, shift);
                        let code = k.and(shifted, 0xFu32);
                        (code, absmax.read(k, &absmax_lane, r))
                    });
                    Pipeline::<T>::dequant_pair(k, &e, lo, hi)
                })
                .collect();
            p.mma_step(k, a_lane, s, &regs, &acc);
        }
    };
    p.run(&mut k, &e, cfg.n.div_ceil(TC_K), &window, &mut multiply);
    p.store(&mut k, &e, l_base, cfg.k, &acc);
    k
}
