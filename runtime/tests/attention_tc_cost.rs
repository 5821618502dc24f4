//! Instruction cost of the tensor-core attention forward (f16/bf16 on sm_80, default tiles),
//! from the interpreter's counters, every check on: the work of 16 query rows on 64 keys, by
//! instruction class, measured as the difference between two launches that differ only in
//! their key count (`Sq = 128`, `Skv = 256` and `512`: 256 more keys, none masked), so that
//! warps of 16 and of 32 rows (`AttentionConfig::tc_warp_rows`) compare in the same unit;
//! the work of one warp on one KV tile is printed beside it.
//!
//! Per 16 rows and 64 keys the kernel cannot do less than the mmas of `Q·Kᵀ` and `P·V`
//! (`2 · (64 / 8) · (D / 16)`), their `ldmatrix.x4` (half as many for a warp of 16 rows; a
//! quarter for a warp of 32, whose two m16 tiles share each K and V fragment, plus the Q
//! fragments where they are re-read per KV tile), the online softmax on 16 × 64 scores (an
//! `fma` and an `ex2` per score, the row maxima and sums, P packed by one `cvt` per pair, O
//! rescaled) and the `cp.async` of 64 keys (`2 · 64 · D · 2 / 16` chunks per block, over its
//! `block_m / 16` m16 tiles). The bars keep the rest (addresses, masks, loop) from coming
//! back: a regression of a few instructions per tile fails them.

#![cfg(feature = "sim")]

use half::{bf16, f16};
use ptxforge_runtime::arch::Arch;
use ptxforge_runtime::dtype::DType;
use ptxforge_runtime::launch::{Backend, Element, SimBackend};
use ptxforge_runtime::templates::attention::launch::{forward, AttentionBuffers};
use ptxforge_runtime::templates::attention::{AttentionConfig, AttentionPath, AttentionShape};
use ptxforge_runtime::templates::testing::{HostFloat, SplitMix64};
use ptxforge_runtime::templates::KernelFamily;
use ptxforge_sim::InstructionCounts;

/// Runs one launch (B = 1, one head) and returns its instruction counts.
fn launch<T: HostFloat + Element>(
    cfg: &AttentionConfig,
    seq_q: u32,
    seq_kv: u32,
) -> InstructionCounts {
    let dev = SimBackend::new();
    let d = cfg.head_dim;
    let shape = AttentionShape {
        batch: 1,
        heads_q: 1,
        heads_kv: 1,
        seq_q,
        seq_kv,
    };
    let ptx = cfg.compile().expect("compiles").ptx;
    let mut rng = SplitMix64::new(5);
    let mut gen = |n: u32| -> Vec<T> {
        rng.vec_f64(n as usize, -1.0, 1.0)
            .into_iter()
            .map(T::from_f64)
            .collect()
    };
    let q = dev.upload(&gen(seq_q * d)).unwrap();
    let k = dev.upload(&gen(seq_kv * d)).unwrap();
    let v = dev.upload(&gen(seq_kv * d)).unwrap();
    let o = dev.alloc::<T>((seq_q * d) as usize).unwrap();
    let lse = dev.alloc::<f32>(seq_q as usize).unwrap();
    let bufs = AttentionBuffers {
        q: &q,
        k: &k,
        v: &v,
        o: &o,
        lse: &lse,
    };
    forward(cfg, &dev, &ptx, &shape, &bufs, None).expect("launch without findings");
    let counters = &dev.take_launch_log()[0].counters;
    // The chunk deal keeps every quarter-warp's 16-byte shared writes in distinct bank groups,
    // whatever the row length (D = 32 and 96 measured 2.000 and 1.333 dealt row-major).
    assert_eq!(
        counters.cp_async_bank_conflict_factor(),
        1.0,
        "D={d}: cp.async shared writes conflict"
    );
    assert_eq!(
        counters.ldmatrix_wavefronts_per_matrix(),
        1.0,
        "D={d}: ldmatrix"
    );
    counters.instructions
}

fn config(head_dim: u32, dtype: DType, causal: bool) -> AttentionConfig {
    let cfg = AttentionConfig {
        dtype,
        causal,
        arch: Arch::Sm80,
        ..AttentionConfig::new(head_dim)
    };
    assert_eq!(cfg.path(), AttentionPath::TensorCores);
    cfg
}

/// Warp instructions by class of 16 query rows on 64 unmasked keys, and the warp
/// instructions of one warp on one KV tile.
fn per_rows_and_keys(cfg: &AttentionConfig) -> (Vec<(&'static str, f64)>, f64) {
    let tiles = cfg.tiles();
    assert!(tiles.block_m <= 128, "{cfg:?}");
    let (short, long) = match cfg.dtype {
        DType::BF16 => (launch::<bf16>(cfg, 128, 256), launch::<bf16>(cfg, 128, 512)),
        _ => (launch::<f16>(cfg, 128, 256), launch::<f16>(cfg, 128, 512)),
    };
    // 128 rows are 8 m16 tiles; 256 more keys are 4 units of 64.
    let units = 8.0 * 4.0;
    let classes: Vec<_> = short
        .fields()
        .iter()
        .zip(long.fields())
        .map(|(&(name, a), (_, b))| (name, (b - a) as f64 / 32.0 / units))
        .collect();
    let total: f64 = classes.iter().map(|c| c.1).sum();
    let warp_rows = cfg.tc_warp_rows(tiles.block_m, tiles.block_n);
    let per_warp_tile = total * f64::from(warp_rows / 16) * f64::from(tiles.block_n) / 64.0;
    (classes, per_warp_tile)
}

/// `(head_dim, most warp instructions per 16 rows and 64 keys)`: measured 264.5 (D = 32), 335
/// (D = 64), 412.6 (D = 96) and 479 (D = 128) with warps of 16 rows and 64 × 64 tiles, down
/// from 517 (D = 64) and 717 (D = 128) before the tile copies went through precomputed
/// streams, S started from a shared zero accumulator, the scale was folded into the
/// exponent's `fma` and unmasked tiles lost their mask, and from 486.6 (D = 96) before its
/// copies took the streams too. With the default tiles in warps of 32 rows: 242.0 (D = 32,
/// 128 × 64), 300.6 (D = 64, 128 × 64), 443.0 (D = 96, 128 × 32) and 509.5 (D = 128, 128 ×
/// 32): at D = 96 and 128 the 32-key tiles pay the softmax's per-tile work and the O rescale
/// twice per 64 keys, and Q is re-read each tile, for a quarter fewer `ldmatrix` (the shared
/// wavefronts that bound these rows). (These early tiles of random scores nearly always bring
/// some row of the warp a new maximum, so the skipped O rescale seldom shows here; it pays on
/// long rows.)
const BARS: [(u32, f64); 4] = [(32, 246.0), (64, 305.0), (96, 448.0), (128, 515.0)];

#[test]
fn kv_tile_cost_per_warp() {
    for (head_dim, bar) in BARS {
        for dtype in [DType::F16, DType::BF16] {
            let cfg = config(head_dim, dtype, false);
            let t = cfg.tiles();
            let row_tiles = f64::from(cfg.tc_warp_rows(t.block_m, t.block_n) / 16);
            let (classes, per_warp_tile) = per_rows_and_keys(&cfg);
            let get = |name: &str| classes.iter().find(|c| c.0 == name).unwrap().1;
            let total: f64 = classes.iter().map(|c| c.1).sum();
            let shown: Vec<String> = classes
                .iter()
                .filter(|c| c.1 != 0.0)
                .map(|(n, v)| format!("{n} {v:.1}"))
                .collect();
            println!(
                "D={head_dim} {dtype:?} {}x{} tiles, {} rows per warp: {total:.1} per 16 rows \
                 per 64 keys ({}); {per_warp_tile:.1} per warp per KV tile",
                t.block_m,
                t.block_n,
                16.0 * row_tiles,
                shown.join(", ")
            );
            let d = f64::from(head_dim);
            // mmas: 2 · 8 · D / 16. ldmatrix.x4 of K and V: D / 2 per warp per 64 keys, shared
            // by its m16 tiles; Q re-read per KV tile: D / 16 per m16 tile. cp.async: 16 · D
            // chunks per block per 64 keys, 32 per warp instruction, over block_m / 16 tiles.
            assert_eq!(get("tensor_core"), d, "D={head_dim} mmas");
            let q_reads = if cfg.tc_q_in_registers(t.block_m, t.block_n) {
                0.0
            } else {
                d / 16.0 * 64.0 / f64::from(t.block_n)
            };
            assert_eq!(
                get("mem_shared"),
                d / 2.0 / row_tiles + q_reads,
                "D={head_dim} ldmatrix"
            );
            let copies = 16.0 * d / 32.0 / f64::from(t.block_m / 16);
            assert!(get("async_copy") <= copies + 2.0, "D={head_dim} cp.async");
            // S from a shared zero accumulator, no per-score masks: no moves or selects (at
            // most 4 per KV tile).
            let kv_tiles = 64.0 / f64::from(t.block_n);
            assert!(get("movement") <= 4.0 * kv_tiles, "D={head_dim} moves");
            assert!(total <= bar, "D={head_dim} {dtype:?}: {total:.1} > {bar}");
        }
    }
}

/// The causal kernel masks only the tiles on the diagonal (and past `Skv`); the others run
/// the unmasked loop. At `D = 128, S = 512` (8 query blocks, 36 of 64 tiles visible, 8 of them
/// diagonal) it measured 45.8 instructions per output against the full kernel's 69.8 (0.656:
/// the tile work scales by 36 / 64, the prologue and the O store do not) with 64 × 64 tiles
/// in warps of 16 rows; 52.0 against 73.7 (0.706) with 128 × 32 tiles in warps of 32 (4 query
/// blocks, 40 of 64 tiles visible, 16 of them masked).
#[test]
fn causal_masks_only_the_diagonal_tiles() {
    let full = launch::<f16>(&config(128, DType::F16, false), 512, 512).total() as f64;
    let causal = launch::<f16>(&config(128, DType::F16, true), 512, 512).total() as f64;
    let per_output = |x: f64| x / (512.0 * 128.0);
    println!(
        "D=128 S=512: full {:.1}, causal {:.1} instructions per output ({:.3} of full)",
        per_output(full),
        per_output(causal),
        causal / full
    );
    assert!(per_output(full) <= 75.0, "full: {}", per_output(full));
    assert!(per_output(causal) <= 53.0, "causal: {}", per_output(causal));
}
