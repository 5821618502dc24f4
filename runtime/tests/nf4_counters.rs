//! The NF4 kernels' memory behaviour, from the interpreter's counters (checks on). Global load
//! efficiency is distinct bytes read ÷ bytes of the 32-byte sectors fetched, request by request,
//! `ld.global` and `cp.async` together (lanes reading the same bytes count once).
//!
//! - GEMV (`m ≤ 8`): ≥ 0.9 with `k % 64 = 0`. The packed weights are read 16 bytes per lane,
//!   contiguous across the warp; activations 32 consecutive elements per request.
//! - Backward GEMV (`m ≤ 8`): packed bytes 32 consecutive per warp request, activations
//!   coalesced, conflict-free shared memory; blocks of 512 columns (at block 64) stage each
//!   weight row's 8 absmax, one sector, per window ([`backward_gemv_bound`]: 1 for plain
//!   absmax; under double quantisation the row's 8 code bytes fetch a sector, ≥ 0.92). Split
//!   over the rows of `W` (`backward_gemv_sliced`), the slices keep that bound and the reduce
//!   reads whole sectors (1.0).
//! - CUDA-core tiled forward and backward (sm_70; f32 without tf32): ≥ 0.9 when rows are whole
//!   sectors (the forward's 64-column slices and absmax staged `8 · block` columns at a time,
//!   the backward's 256-column tiles: per weight row and slice 128 packed bytes and one absmax
//!   sector; `G_C` 32 consecutive elements per request).
//! - Tiled forward and backward: ≤ 1.1 × the fewest shared-memory wavefronts the requests
//!   could take, over the whole launch (wide accesses counted per phase, see `sim`'s counters) (staging, code-table lookups and the inner loop are all designed for one; under
//!   double quantisation the tensor-core GEMMs' lookups of the shared absmax map take random
//!   codes, so those few requests may conflict).
//! - Tiled forward and backward on tensor cores (f16/bf16 and tf32): ≥ 0.9 when rows are whole
//!   sectors (packed codes staged by `cp.async`, absmax read a sector at a time; the backwards'
//!   256-column tiles stage 128 code bytes and 4 absmax of a sector per row: the tf32 backward
//!   at [`backward_tiled_bound`]).
//!
//! Cases below 0.9 for other reasons (rows off sector boundaries, per-row double-quant decodes)
//! are listed in [`GEMV_GAPS`], [`TILED_GAPS`] and [`CUDA_CORE_GAPS`] with today's floor and
//! cause.
#![cfg(feature = "sim")]

use half::{bf16, f16};
use ptxforge_runtime::arch::Arch;
use ptxforge_runtime::launch::{Backend, KernelArg, LaunchRecord, SimBackend};
use ptxforge_runtime::templates::nf4::launch::{
    self as nf4_launch, DeviceAbsmax, DeviceWeights, Nf4Activation, Slices,
};
use ptxforge_runtime::templates::nf4::{quantize, Nf4Config, Nf4DoubleQuant};
use ptxforge_runtime::templates::testing::{HostFloat, SplitMix64};
use ptxforge_runtime::templates::KernelFamily;
use ptxforge_runtime::DType;

/// What one launch log runs: forward and backward (`backward_input`, the automatic split),
/// the backward GEMV alone with a chosen split, the tiled forward alone with a chosen split
/// of `k`, or one unsplit tiled forward entry (`nf4_gemm` or `nf4_gemm_tall`, plain absmax)
/// on its own geometry.
#[derive(Debug, Clone, Copy)]
enum Run {
    Both,
    BackwardGemv(Slices),
    ForwardTiled(Slices),
    ForwardEntry(&'static str),
}

/// Runs `run` once on fresh data and returns the launch log.
fn launches<T: Nf4Activation + HostFloat>(cfg: &Nf4Config, m: u32, run: Run) -> Vec<LaunchRecord> {
    let ptx = cfg.compile().unwrap().ptx;
    let dev = SimBackend::new();
    let mut rng = SplitMix64::new(u64::from(cfg.k));
    let q = quantize(
        &rng.vec_f32((cfg.n * cfg.k) as usize, -1.0, 1.0),
        cfg.block as usize,
    )
    .unwrap();
    let w = if cfg.double_quant {
        DeviceWeights::upload_double_quant(&dev, &Nf4DoubleQuant::new(&q)).unwrap()
    } else {
        DeviceWeights::upload(&dev, &q).unwrap()
    };
    let values = |len: u32, rng: &mut SplitMix64| -> Vec<T> {
        rng.vec_f64(len as usize, -1.0, 1.0)
            .into_iter()
            .map(T::from_f64)
            .collect()
    };
    let a = dev.upload(&values(m * cfg.k, &mut rng)).unwrap();
    let mut c = dev.upload(&values(m * cfg.n, &mut rng)).unwrap();
    let mut g_a = dev.upload(&values(m * cfg.k, &mut rng)).unwrap();
    match run {
        Run::Both => {
            nf4_launch::forward(cfg, &dev, &ptx, m, &a, &w, &mut c).unwrap();
            nf4_launch::backward_input(cfg, &dev, &ptx, m, &c, &w, &mut g_a).unwrap();
        }
        Run::BackwardGemv(slices) => {
            nf4_launch::backward_gemv_sliced(cfg, &dev, &ptx, m, slices, &c, &w, &mut g_a).unwrap();
        }
        Run::ForwardTiled(slices) => {
            nf4_launch::forward_tiled_sliced(cfg, &dev, &ptx, m, slices, &a, &w, &mut c).unwrap();
        }
        Run::ForwardEntry(entry) => {
            let geometry = match entry {
                "nf4_gemm" => nf4_launch::gemm_launch_config(cfg, m),
                _ => nf4_launch::gemm_tall_launch_config(cfg, m),
            };
            let DeviceAbsmax::Plain(absmax) = &w.absmax else {
                panic!("{entry}: plain absmax only");
            };
            let args = [
                KernelArg::buffer(&a),
                KernelArg::buffer(&w.packed),
                KernelArg::buffer(absmax),
                KernelArg::buffer(&c),
                KernelArg::U32(m),
            ];
            dev.launch(&ptx, entry, geometry, &args).unwrap();
        }
    }
    dev.take_launch_log()
}

/// [`launches`] for `cfg`'s activation type.
fn launches_of(cfg: &Nf4Config, m: u32, run: Run) -> Vec<LaunchRecord> {
    match cfg.dtype {
        DType::F16 => launches::<f16>(cfg, m, run),
        DType::BF16 => launches::<bf16>(cfg, m, run),
        _ => launches::<f32>(cfg, m, run),
    }
}

/// Prints the per-launch figures the benchmarks quote: thread instructions per output, global
/// load efficiency, shared bank-conflict factor and ldmatrix wavefronts per 8×8 matrix.
fn report_tiled(label: &str, r: &LaunchRecord, outputs: u32) {
    let c = &r.counters;
    eprintln!(
        "{label} {}: instr/output {:.1}, global load eff {:.3} ({} requests), shared conflict \
         factor {:.3}, ldmatrix wf/matrix {:.2}, cp.async requests {}",
        r.entry,
        c.instructions.total() as f64 / f64::from(outputs),
        c.global_load_efficiency(),
        c.global_load_requests,
        c.shared_bank_conflict_factor(),
        c.ldmatrix_wavefronts_per_matrix(),
        c.cp_async_requests,
    );
    eprintln!(
        "    ld eff {:.3} ({} req, {} sectors, {} bytes), cp.async eff {:.3} ({} req, {} sectors)",
        c.ld_global_efficiency(),
        c.global_load_requests,
        c.global_load_sectors,
        c.global_load_bytes,
        c.cp_async_load_efficiency(),
        c.cp_async_requests,
        c.cp_async_sectors,
    );
}

fn report(label: &str, r: &LaunchRecord, outputs: u32) {
    let c = &r.counters;
    eprintln!(
        "{label} {}: global load requests {} sectors {} efficiency {:.3}; shared requests {} \
         wavefronts/request {:.3}, conflict factor {:.3}; instr/output {:.1}",
        r.entry,
        c.global_load_requests,
        c.global_load_sectors,
        c.global_load_efficiency(),
        c.shared_requests,
        c.shared_wavefronts_per_request(),
        c.shared_bank_conflict_factor(),
        c.instructions.total() as f64 / f64::from(outputs),
    );
}

/// The backward GEMV's bound at block 64 with `k % 512 = 0`: a block owns 512 columns, so per
/// weight row it reads 256 packed bytes (8 sectors, one request per warp's 32) and the row's
/// 8 absmax of those columns, staged by 8 threads: 32 bytes, one sector (under double
/// quantisation 8 code bytes of it; the map and the window's nested absmax are copied whole),
/// and per weight row `m` values of `G_C` (`a` bytes each, whole sectors):
/// `(256 + u + m·a) / (288 + m·a)` with `u` = 32 (plain: 1) or 8 (double quantisation:
/// 280 / 304 = 0.921 for bf16 at `m = 8`). It was 38 / 66 = 0.576 (f16, `m = 1`) with 64-column
/// blocks, each row's one absmax alone in its sector.
fn backward_gemv_bound(m: u32, dtype: DType, double_quant: bool) -> f64 {
    let act = f64::from(m * dtype.size_bytes());
    let absmax_used = if double_quant { 8.0 } else { 32.0 };
    (256.0 + absmax_used + act) / (288.0 + act)
}

/// GEMV cases below 0.9 at today's figures (a floor each, so a regression still fails), with
/// the cause. Ragged `k` (1002): packed rows of 501 bytes start anywhere in a sector.
const GEMV_GAPS: [Gap; 3] = [
    (
        "m=1 n=32 k=1002 f16 dq=false",
        "nf4_gemv",
        0.84,
        "ragged rows: the tail pieces of each 501-byte row",
    ),
    (
        "m=1 n=32 k=1002 f16 dq=false",
        "nf4_backward_gemv",
        0.50,
        "ragged rows: a warp's 32 packed bytes at any offset touch 2 sectors",
    ),
    (
        "m=4 n=32 k=1002 f32 dq=true",
        "nf4_backward_gemv",
        0.53,
        "ragged rows: 32 packed bytes touch 2 sectors, and a row's 8 absmax code bytes a third",
    ),
];

/// A case below 0.9: its label, entry, today's floor and why.
type Gap = (&'static str, &'static str, f64, &'static str);

/// `r`'s global load efficiency is at least 0.9, or its `bound` (less 1e-3 for rounding), or a
/// listed gap's floor (a gap must still be below 0.9, so the list shrinks when one is fixed).
fn assert_load_efficiency(
    gaps: &[Gap],
    (case, label): (&str, &str),
    r: &LaunchRecord,
    bound: Option<f64>,
) {
    let eff = r.counters.global_load_efficiency();
    let gap = gaps.iter().find(|g| g.0 == case && g.1 == r.entry);
    let bar = match (gap, bound) {
        (Some(&(.., floor, why)), _) => {
            assert!(
                eff < 0.9,
                "{label} {}: {eff:.3} reaches 0.9: drop the gap",
                r.entry
            );
            eprintln!("    below 0.9: {why}");
            floor
        }
        (None, Some(bound)) => bound - 1e-3,
        (None, None) => 0.9,
    };
    assert!(
        eff >= bar,
        "{label} {}: global load efficiency {eff:.3} < {bar:.3}",
        r.entry
    );
}

#[test]
fn gemv_loads_are_coalesced() {
    for (m, n, k, dtype, double_quant) in [
        (1, 32, 1024, DType::F16, false),
        (1, 32, 1024, DType::F32, false),
        (8, 32, 2048, DType::BF16, true),
        (1, 32, 1002, DType::F16, false),
        (4, 32, 1002, DType::F32, true),
        // BENCHMARKS.md's GEMV shape: N = K = 512, M = 1.
        (1, 512, 512, DType::F16, false),
    ] {
        let cfg = Nf4Config {
            dtype,
            double_quant,
            ..Nf4Config::new(n, k)
        };
        let log = launches_of(&cfg, m, Run::Both);
        assert_eq!(log[0].entry, "nf4_gemv");
        let label = format!("m={m} n={n} k={k} {dtype} dq={double_quant}");
        report(&label, &log[0], m * cfg.n);
        assert_load_efficiency(&GEMV_GAPS, (&label, &label), &log[0], None);
        assert!(log[0].counters.shared_bank_conflict_factor() <= 1.1);
        assert_backward_gemv_loads(&cfg, m, &label, &log[1..]);
    }
}

/// The backward GEMV's launches (the whole entry, or the slices then the reduce): each at
/// least its bar (the weight-row bound for the row walkers when `k % 512 = 0`, 0.9 for the
/// reduce's vector loads, or a listed gap), conflict-free shared memory.
fn assert_backward_gemv_loads(cfg: &Nf4Config, m: u32, label: &str, log: &[LaunchRecord]) {
    let entries: Vec<&str> = log.iter().map(|r| r.entry.as_str()).collect();
    assert!(
        entries == ["nf4_backward_gemv"]
            || entries == ["nf4_backward_gemv_split", "nf4_backward_gemv_reduce"],
        "{label}: {entries:?}"
    );
    for r in log {
        report(label, r, m * cfg.k);
        let walks_rows = r.entry != "nf4_backward_gemv_reduce";
        let bound = (walks_rows && cfg.k.is_multiple_of(512))
            .then(|| backward_gemv_bound(m, cfg.dtype, cfg.double_quant));
        assert_load_efficiency(&GEMV_GAPS, (label, label), r, bound);
        assert!(r.counters.shared_bank_conflict_factor() <= 1.1);
    }
}

/// The backward GEMV split over the rows of `W` (the slices' loads are the unsplit kernel's,
/// row by row, slices starting on whole sectors of `G_C`; the reduce reads each slice's f32
/// partials 16 bytes per lane), against the unsplit one on the same shape: instructions per
/// output of the split and reduce together (ragged `k` is covered by `GEMV_GAPS` above).
#[test]
fn split_backward_gemv_loads() {
    for (m, n, k, dtype, double_quant) in [
        (1, 512, 1024, DType::F16, false),
        (8, 384, 2048, DType::BF16, true),
        (3, 1000, 512, DType::F32, false),
    ] {
        let cfg = Nf4Config {
            dtype,
            double_quant,
            ..Nf4Config::new(n, k)
        };
        for slices in [Slices::Exactly(1), Slices::Exactly(3), Slices::Auto] {
            let label = format!("m={m} n={n} k={k} {dtype} dq={double_quant} {slices:?}");
            let log = launches_of(&cfg, m, Run::BackwardGemv(slices));
            assert_backward_gemv_loads(&cfg, m, &label, &log);
            let instructions: u64 = log.iter().map(|r| r.counters.instructions.total()).sum();
            let grid = log[0].config.grid;
            eprintln!(
                "{label}: grid ({}, {}), {} launch(es), instr/output {:.1} in all",
                grid.x,
                grid.y,
                log.len(),
                instructions as f64 / f64::from(m * k)
            );
        }
    }
}

/// The tiled forward split over `k` at prefill sizes (`m = 16`, `n = 512`: 8 blocks unsplit),
/// every path, against the unsplit entry on the same shape: the automatic split must run
/// `S = 4` times the blocks (512-column slices of `k = 2048`); each slice reads as the unsplit
/// entry does (global load efficiency within 0.02 of it: 1.0 with plain absmax, the unsplit
/// figure under double quantisation's per-row decodes), the reduce its 16-byte f32 vectors
/// (≥ 0.9); shared memory conflict-free (≤ 1.1 × the fewest wavefronts, as unsplit); and the
/// split and reduce together within 1.25 × the unsplit entry's instructions per output (four
/// times the blocks repeat their prologue, pipeline fill and tile store; the reduce adds `S`
/// vector loads per 4 outputs).
#[test]
fn split_forward_fills_the_grid() {
    for (dtype, arch, allow_tf32, double_quant) in [
        (DType::F16, Arch::Sm80, false, false),
        (DType::BF16, Arch::Sm90, false, true),
        (DType::F32, Arch::Sm80, true, false),
        (DType::F32, Arch::Sm80, false, false),
        (DType::F16, Arch::Sm70, false, true),
    ] {
        let (m, n, k) = (16, 512, 2048);
        let cfg = Nf4Config {
            dtype,
            arch,
            allow_tf32,
            double_quant,
            ..Nf4Config::new(n, k)
        };
        let label =
            format!("m={m} n={n} k={k} {dtype} {arch:?} tf32={allow_tf32} dq={double_quant}");
        let [whole, split] = [Slices::Exactly(1), Slices::Auto].map(|slices| {
            let log = launches_of(&cfg, m, Run::ForwardTiled(slices));
            let grid = log[0].config.grid;
            let instructions: u64 = log.iter().map(|r| r.counters.instructions.total()).sum();
            let per_output = instructions as f64 / f64::from(m * n);
            let blocks = grid.x * grid.y * grid.z;
            eprintln!("{label} {slices:?}: {blocks} blocks, instr/output {per_output:.1} in all");
            for r in &log {
                report(&label, r, m * n);
                let conflicts = r.counters.shared_bank_conflict_factor();
                assert!(conflicts <= 1.1, "{label} {}: {conflicts:.3}", r.entry);
            }
            (log, blocks, per_output)
        });
        let (whole_log, whole_blocks, whole_cost) = whole;
        let (split_log, split_blocks, split_cost) = split;
        let entries: Vec<&str> = split_log.iter().map(|r| r.entry.as_str()).collect();
        assert_eq!(entries, ["nf4_gemm_split", "nf4_gemm_reduce"], "{label}");
        assert_eq!(whole_log[0].entry, "nf4_gemm", "{label}");
        assert_eq!(
            split_blocks,
            4 * whole_blocks,
            "{label}: the automatic split's grid"
        );
        let unsplit_eff = whole_log[0].counters.global_load_efficiency();
        let slice_eff = split_log[0].counters.global_load_efficiency();
        assert!(
            slice_eff >= unsplit_eff.min(0.9) - 0.02,
            "{label}: the slices' load efficiency {slice_eff:.3}, unsplit {unsplit_eff:.3}"
        );
        assert_load_efficiency(&[], (&label, &label), &split_log[1], None);
        assert!(
            split_cost <= 1.25 * whole_cost,
            "{label}: {split_cost:.1} instructions per output split, {whole_cost:.1} unsplit"
        );
    }
}

/// The tall tiles' split (`m = 72` on f16 sm_80: one 128-row tile, `n = 256`: 4 blocks
/// unsplit): the automatic split runs `nf4_gemm_tall_split` on 3 K slices (`k / 16m`: the
/// partials' traffic within the code bytes; 12 blocks) where the unsplit forward runs
/// `nf4_gemm_tall`; the slices read as the unsplit
/// entry does (load efficiency within 0.02), shared memory stays conflict-free, and split and
/// reduce together stay within 1.25 × the unsplit instructions per output.
#[test]
fn tall_split_forward_fills_the_grid() {
    let (m, n, k) = (72, 256, 4096);
    let cfg = Nf4Config {
        dtype: DType::F16,
        arch: Arch::Sm80,
        ..Nf4Config::new(n, k)
    };
    let [(whole, whole_blocks, whole_cost), (split, split_blocks, split_cost)] =
        [Slices::Exactly(1), Slices::Auto].map(|slices| {
            let log = launches_of(&cfg, m, Run::ForwardTiled(slices));
            let grid = log[0].config.grid;
            let instructions: u64 = log.iter().map(|r| r.counters.instructions.total()).sum();
            let per_output = instructions as f64 / f64::from(m * n);
            eprintln!(
                "m={m} n={n} k={k} f16 sm_80 {slices:?}: {} blocks, instr/output {per_output:.1}",
                grid.x * grid.y * grid.z
            );
            for r in &log {
                assert!(
                    r.counters.shared_bank_conflict_factor() <= 1.1,
                    "{}",
                    r.entry
                );
            }
            (log, grid.x * grid.y * grid.z, per_output)
        });
    assert_eq!(whole[0].entry, "nf4_gemm_tall");
    let entries: Vec<&str> = split.iter().map(|r| r.entry.as_str()).collect();
    assert_eq!(entries, ["nf4_gemm_tall_split", "nf4_gemm_reduce"]);
    assert_eq!(split_blocks, 3 * whole_blocks);
    let unsplit_eff = whole[0].counters.global_load_efficiency();
    let slice_eff = split[0].counters.global_load_efficiency();
    assert!(
        slice_eff >= unsplit_eff.min(0.9) - 0.02,
        "the slices' load efficiency {slice_eff:.3}, unsplit {unsplit_eff:.3}"
    );
    assert!(
        split_cost <= 1.25 * whole_cost,
        "{split_cost:.1} instructions per output split, {whole_cost:.1} unsplit"
    );
}

#[test]
fn tiled_shared_memory_is_conflict_free() {
    for (dtype, double_quant) in [(DType::F32, false), (DType::BF16, true)] {
        let cfg = Nf4Config {
            dtype,
            double_quant,
            ..Nf4Config::new(96, 160)
        };
        let log = launches_of(&cfg, 80, Run::Both);
        // f32 runs the CUDA-core GEMM; bf16 on sm_80 the tall tensor-core one (m > 64).
        let forward = if dtype == DType::F32 {
            "nf4_gemm"
        } else {
            "nf4_gemm_tall"
        };
        assert_eq!(log[0].entry, forward);
        assert_eq!(log[1].entry, "nf4_backward_input");
        for r in &log {
            let outputs = if r.entry == forward {
                80 * 96
            } else {
                80 * 160
            };
            report(
                &format!("m=80 n=96 k=160 {dtype} dq={double_quant}"),
                r,
                outputs,
            );
            let wf = r.counters.shared_bank_conflict_factor();
            assert!(
                wf <= 1.1,
                "{}: {wf:.3} × the fewest shared wavefronts",
                r.entry
            );
        }
    }
}

/// The tf32 backward's bound with `k % 256 = 0`, `(k / block) % 8 = 0` and plain absmax: per
/// reduction row of a tile (256 columns, 4 B tiles of 64) and row block, the block copies 128
/// packed bytes (4 sectors) and the row's `256 / block` absmax (`1024 / block` bytes of one
/// sector); the `m` activation rows bring `a` bytes per column, in whole sectors. With
/// `rb = ⌈m / 64⌉` row blocks: `(m·a + rb·(128 + 1024 / block)) / (m·a + rb·160)`. At
/// `m = 80` (rb = 2), block 64: (320 + 288) / 640 = 0.95. With 64-column tiles it was
/// (320 + 72) / 448 = 0.875: each row's absmax alone in its sector.
fn backward_tiled_bound(m: u32, dtype: DType, block: u32) -> f64 {
    let act = f64::from(m * dtype.size_bytes());
    let row_blocks = f64::from(m.div_ceil(64));
    (act + row_blocks * (128.0 + 1024.0 / f64::from(block))) / (act + row_blocks * 160.0)
}

/// Tensor-core cases below 0.9 at today's figures (a floor each, so a regression still
/// fails), with the cause.
const TILED_GAPS: [Gap; 11] = [
    (
        "n=128 k=228 b=64 f16 dq=false",
        "nf4_gemm_tall",
        0.75,
        "packed rows of 114 bytes: a stage's 32 bytes of a row touch 2 sectors (9 covering words)",
    ),
    (
        "n=96 k=230 b=128 bf16 dq=false",
        "nf4_gemm_tall",
        0.75,
        "packed rows of 115 bytes (covering words) and A rows of 460 bytes",
    ),
    (
        "n=96 k=230 b=32 bf16 dq=true",
        "nf4_gemm_tall",
        0.72,
        "packed rows of 115 bytes (covering words), staged absmax rows off sectors",
    ),
    (
        "n=128 k=228 b=64 f16 dq=false",
        "nf4_gemm",
        0.71,
        "packed rows of 114 bytes: a stage's 32 bytes of a row touch 2 sectors (9 covering words)",
    ),
    (
        "n=128 k=228 b=64 f16 dq=false",
        "nf4_backward_input",
        0.85,
        "packed rows off sectors (covering words in two requests per row), plus the absmax sector per row",
    ),
    (
        "n=96 k=230 b=128 bf16 dq=false",
        "nf4_gemm",
        0.71,
        "packed rows of 115 bytes (covering words) and A rows of 460 bytes",
    ),
    (
        "n=96 k=230 b=128 bf16 dq=false",
        "nf4_backward_input",
        0.86,
        "packed rows off sectors (covering words in two requests per row), plus the absmax sector per row",
    ),
    (
        "n=96 k=230 b=32 bf16 dq=true",
        "nf4_gemm",
        0.67,
        "packed rows of 115 bytes (covering words), staged absmax rows off sectors",
    ),
    (
        "n=96 k=230 b=32 bf16 dq=true",
        "nf4_backward_input",
        0.78,
        "packed rows off sectors; per-block double-quant decodes (code byte, nested absmax)",
    ),
    (
        "n=128 k=228 b=64 f32 dq=false tf32=true",
        "nf4_gemm",
        0.73,
        "packed rows of 114 bytes: a copy's 32 bytes of a row touch 2 sectors (9 covering words)",
    ),
    (
        "n=128 k=228 b=64 f32 dq=false tf32=true",
        "nf4_backward_input",
        0.88,
        "packed rows of 114 bytes off sectors: a row's covering words touch an extra sector",
    ),
];

#[test]
fn tensor_core_tiled_loads_read_whole_sectors() {
    for (m, n, k, block, double_quant, dtype, allow_tf32) in [
        (80, 128, 512, 64, false, DType::F16, false),
        (80, 128, 228, 64, false, DType::F16, false), // k / 2 = 114: rows 2-byte aligned
        (80, 96, 230, 128, false, DType::BF16, false), // k / 2 = 115: rows byte aligned
        (80, 128, 512, 64, true, DType::F16, false),
        (80, 96, 230, 32, true, DType::BF16, false),
        // The same three on the 64-row `nf4_gemm` (`m = 80` runs `nf4_gemm_tall`).
        (64, 128, 228, 64, false, DType::F16, false),
        (64, 96, 230, 128, false, DType::BF16, false),
        (64, 96, 230, 32, true, DType::BF16, false),
        (80, 128, 512, 64, false, DType::F32, true),
        (80, 128, 228, 64, false, DType::F32, true),
        (80, 128, 512, 32, true, DType::F32, true),
        // BENCHMARKS.md's families table: M 64, N 256, K 512, block 64.
        (64, 256, 512, 64, false, DType::F16, false),
        (64, 256, 512, 64, false, DType::F32, true),
    ] {
        let cfg = Nf4Config {
            block,
            double_quant,
            dtype,
            allow_tf32,
            arch: Arch::Sm80,
            ..Nf4Config::new(n, k)
        };
        let log = launches_of(&cfg, m, Run::Both);
        let case = format!("n={n} k={k} b={block} {dtype} dq={double_quant}");
        let case = if allow_tf32 {
            format!("{case} tf32=true")
        } else {
            case
        };
        let label = format!("m={m} {case}");
        for (r, outputs) in log.iter().zip([m * n, m * k]) {
            report_tiled(&label, r, outputs);
            assert!(
                r.counters.mma_instructions > 0,
                "{label} {}: no mma",
                r.entry
            );
            let aligned = k.is_multiple_of(256) && (k / block).is_multiple_of(8);
            let bound = (r.entry == "nf4_backward_input" && aligned && !double_quant && allow_tf32)
                .then(|| backward_tiled_bound(m, dtype, block));
            assert_load_efficiency(&TILED_GAPS, (&case, &label), r, bound);
            // Wide accesses counted per phase (tf32's in-place rounding needs its chunks dealt
            // per quarter-warp for this: `tc_tf32::QUAD_STRIDE`).
            let banks = r.counters.shared_bank_conflict_factor();
            assert!(
                banks <= 1.05,
                "{label} {}: shared bank-conflict factor {banks:.3}",
                r.entry
            );
        }
    }
}

/// CUDA-core cases below 0.9 at today's figures (a floor each), with the cause.
const CUDA_CORE_GAPS: [Gap; 1] = [(
    "m=80 n=96 k=160 b=64 f32 dq=false sm_70",
    "nf4_backward_input",
    0.82,
    "packed rows of 80 bytes off sectors: a request's 32 bytes of a row touch 2 sectors",
)];

/// The CUDA-core tiled GEMMs (sm_70, and f32 without tf32): the forward stages 64-column K
/// tiles (32 packed bytes of a weight row per request) and each weight row's absmax `8 · block`
/// columns at a time (one sector), so it reads whole sectors when rows are; the backward's
/// 256-column tiles read 128 packed bytes and one absmax sector per weight row and slice, and
/// `G_C` 32 consecutive elements per request (rows off sectors: [`CUDA_CORE_GAPS`]).
#[test]
fn cuda_core_tiled_loads() {
    let sm70 = |dtype, n, k| Nf4Config {
        dtype,
        arch: Arch::Sm70,
        ..Nf4Config::new(n, k)
    };
    for (m, cfg) in [
        (64, sm70(DType::F16, 256, 512)),
        (64, sm70(DType::F32, 256, 512)),
        (
            80,
            Nf4Config {
                block: 32,
                double_quant: true,
                ..sm70(DType::F16, 128, 512)
            },
        ),
        (80, sm70(DType::F32, 96, 160)),
    ] {
        let label = format!(
            "m={m} n={} k={} b={} {} dq={} sm_70",
            cfg.n, cfg.k, cfg.block, cfg.dtype, cfg.double_quant
        );
        for (r, outputs) in launches_of(&cfg, m, Run::Both)
            .iter()
            .zip([m * cfg.n, m * cfg.k])
        {
            report_tiled(&label, r, outputs);
            assert_eq!(r.counters.mma_instructions, 0, "{label} {}", r.entry);
            assert_load_efficiency(&CUDA_CORE_GAPS, (&label, &label), r, None);
            assert!(r.counters.shared_bank_conflict_factor() <= 1.05);
        }
    }
}

/// Thread instructions per output of the f16 tensor-core forward (sm_80, block 64): the
/// families shape (M 64, N 256, K 512) and a small-`m` one (M 16, N 128, K 512: the four K
/// slices of a 64-row tile per block, rows 16.. past `m`), both on `nf4_gemm`. Bars from the
/// figures with the dequantisation in `T` (`kernels::half_dequant`: per pair of weights two
/// table lookups, one `prmt`, one packed `fma`; the block's absmax converted once per stage),
/// copies formed once, pair stores and the one-m16-tile branch: 81.8 and 277.5 with one warp
/// over all 64 rows; 122.9 and 286.3 with the 2 × 4 warps (each weight dequantised by both
/// warp rows, for half the `ldmatrix` traffic per `mma`; see
/// `tensor_core_forward_tall_instructions_per_output`); 119.1 and 279.0 with the codes looked
/// up by `prmt` from byte planes in registers (`half_dequant::CodeLookup::Registers`: 15
/// instructions per two B registers, where the shared table took 16). The
/// f32 dequantisation before (per weight a `mul.f32`, per pair a `cvt`, a copy's addresses
/// per stage) took 111.1 and 432.5.
#[test]
fn tensor_core_forward_instructions_per_output() {
    for (m, n, k, bar) in [(64, 256, 512, 122.0), (16, 128, 512, 284.0)] {
        let cfg = Nf4Config {
            dtype: DType::F16,
            arch: Arch::Sm80,
            ..Nf4Config::new(n, k)
        };
        let log = launches_of(&cfg, m, Run::Both);
        let forward = &log[0];
        assert_eq!(forward.entry, "nf4_gemm");
        assert!(forward.counters.mma_instructions > 0);
        let label = format!("m={m} n={n} k={k} f16 sm_80");
        report_tiled(&label, forward, m * n);
        report_classes(&label, forward, m * n);
        report_tiled(&label, &log[1], m * k);
        let per_output = forward.counters.instructions.total() as f64 / f64::from(m * n);
        assert!(
            per_output <= bar,
            "{label}: {per_output:.1} instructions per output (bar {bar})"
        );
    }
}

/// Prints instructions per output by class and the tensor-core share (`mma` ÷ all).
fn report_classes(label: &str, r: &LaunchRecord, outputs: u32) {
    let c = &r.counters.instructions;
    let classes: Vec<String> = c
        .fields()
        .iter()
        .filter(|(_, v)| *v > 0)
        .map(|(name, v)| format!("{name} {:.1}", *v as f64 / f64::from(outputs)))
        .collect();
    eprintln!(
        "{label} {}: {:.1} instr/output, tensor-core share {:.1}% ({})",
        r.entry,
        c.total() as f64 / f64::from(outputs),
        100.0 * c.tensor_core as f64 / c.total() as f64,
        classes.join(", ")
    );
}

/// The f16 tensor-core forward unsplit at large `m` (sm_80, block 64, N 256, K 1024):
/// `nf4_gemm_tall` (128-row tiles, what `forward_tiled` runs unsplit above 64 rows) against
/// `nf4_gemm` (64-row tiles) on the same shapes, at M 256 and at M 65 (the first `m` the tall
/// entry takes: one block of 65 live rows, against a full 64-row block and a one-m16-tile
/// one), and which entry the unsplit forward picks around the threshold and on a ragged `m`
/// (200: the tall entry's second row tile runs the one-m16-tile branch in its second warp
/// row). Both run their 8 warps 2 × 4: per 64-column stage a warp of the 64-row entry (32
/// rows, 16 columns) issues per lane 16 `mma` and 8 `ldmatrix` (4 matrices each: 2 shared
/// wavefronts per `mma`), one of the tall entry (64 rows, 16 columns) 32 `mma` and 16
/// `ldmatrix` (2 per `mma` too, and half the dequantisation per `mma`: 120 instructions, 15
/// per two B registers, `prmt` lookups in register byte planes and `fma`). Measured, shared
/// wavefronts per `mma` (ordinary, `ldmatrix` and `cp.async` writes) 64-row / tall: 3.62 /
/// 3.06 at M 256, instructions per output 225.5 / 129.5; with the codes looked up in a
/// 16-word shared table (two `ld.shared` per B register: 1 wavefront per `mma` of the tall
/// entry, 2 of the 64-row one) 5.63 / 4.07 and 233.3 / 133.4; with one warp over all the
/// tile's rows as well 6.13 / 5.32 and 154.0 / 97.8. Bars: the tall entry no more wavefronts
/// per `mma` and instructions per output than the 64-row one at M 256 and M 65, and at M 256
/// at most 3.2 and 3.8 wavefronts per `mma` (which the shared table's lookups fail).
#[test]
fn tensor_core_forward_tall_instructions_per_output() {
    let (n, k) = (256, 1024);
    let cfg = Nf4Config {
        dtype: DType::F16,
        arch: Arch::Sm80,
        ..Nf4Config::new(n, k)
    };
    for m in [256, 65] {
        let label = format!("m={m} n={n} k={k} f16 sm_80");
        let [short, tall] = ["nf4_gemm", "nf4_gemm_tall"].map(|entry| {
            let r = launches_of(&cfg, m, Run::ForwardEntry(entry)).remove(0);
            assert!(r.counters.mma_instructions > 0, "{entry}");
            report_tiled(&label, &r, m * n);
            report_classes(&label, &r, m * n);
            assert!(r.counters.shared_bank_conflict_factor() <= 1.05, "{entry}");
            // Code rows 12 words apart: copies dealt slot-fastest measured 1.20 here.
            let landing = r.counters.cp_async_bank_conflict_factor();
            assert!(
                landing <= 1.0 + 1e-9,
                "{entry}: cp.async factor {landing:.3}"
            );
            assert!(r.counters.global_load_efficiency() >= 0.9, "{entry}");
            let c = &r.counters;
            let wavefronts =
                c.shared_wavefronts + c.ldmatrix_wavefronts + c.cp_async_shared_wavefronts;
            let per_mma = wavefronts as f64 / c.mma_instructions as f64;
            eprintln!("{label} {entry}: {per_mma:.2} shared wavefronts per mma");
            (c.instructions.total() as f64 / f64::from(m * n), per_mma)
        });
        let (short_wf, tall_wf) = (short.1, tall.1);
        assert!(
            tall_wf <= short_wf,
            "{label}: nf4_gemm_tall {tall_wf:.2} shared wavefronts per mma, nf4_gemm {short_wf:.2}"
        );
        if m == 256 {
            // Shared-table lookups measured 4.07 (128 rows) and 5.63 (64).
            assert!(
                tall_wf <= 3.2,
                "{label}: nf4_gemm_tall {tall_wf:.2} per mma"
            );
            assert!(short_wf <= 3.8, "{label}: nf4_gemm {short_wf:.2} per mma");
        }
        let (short, tall) = (short.0, tall.0);
        assert!(
            tall <= short,
            "{label}: nf4_gemm_tall {tall:.1} per output, nf4_gemm {short:.1}"
        );
    }
    // `forward_tiled` unsplit runs the tall entry above 64 rows, the 64-row one up to 64.
    for (m, entry) in [
        (200, "nf4_gemm_tall"),
        (64, "nf4_gemm"),
        (65, "nf4_gemm_tall"),
    ] {
        let log = launches_of(&cfg, m, Run::ForwardTiled(Slices::Exactly(1)));
        assert_eq!(log[0].entry, entry, "m={m}");
        if m == 200 {
            report_classes(&format!("m={m} n={n} k={k} f16 sm_80"), &log[0], m * n);
        }
    }
}

/// Thread instructions per weight of the forward GEMV (`nf4_gemv`, N 128, block 64): every
/// instruction of the launch divided by the `n · k` weights (a warp walks its row once),
/// printed with the instruction classes for `m` = 1, 4, 8 and each dtype at K 1024, and for
/// `m = 1` at K 4096 (BENCHMARKS.md's decode shape, where the H100 model turns DRAM-bound at
/// about 6 per weight). Bars on `m = 1`, f16 and bf16, `k % 32 = 0`: 6.5 at K 1024 and 5.3 at
/// K 4096 (6.35 and 5.08 with the `prmt` code lookups, vector staging and `ld.shared.v4`
/// activations of `kernels::gemv`; 10.19 (f16) / 10.44 (bf16) at K 1024 before). Shared memory stays
/// conflict-free (the code table's 16 words in 16 banks, activation groups at banks `4l`).
#[test]
fn gemv_instructions_per_weight() {
    let mut cases = Vec::new();
    for dtype in [DType::F16, DType::BF16, DType::F32] {
        for m in [1, 4, 8] {
            cases.push((
                dtype,
                m,
                1024,
                (m == 1 && dtype != DType::F32).then_some(6.5),
            ));
        }
    }
    for dtype in [DType::F16, DType::BF16] {
        cases.push((dtype, 1, 4096, Some(5.3)));
    }
    for (dtype, m, k, bar) in cases {
        let cfg = Nf4Config {
            dtype,
            ..Nf4Config::new(128, k)
        };
        let log = launches_of(&cfg, m, Run::Both);
        let r = &log[0];
        assert_eq!(r.entry, "nf4_gemv");
        let c = &r.counters;
        let weights = f64::from(cfg.n * cfg.k);
        let per_weight = c.instructions.total() as f64 / weights;
        let label = format!("{dtype} m={m} k={k}");
        eprintln!(
            "{label}: {per_weight:.2} instructions per weight ({}), load eff {:.3}, shared \
             conflict factor {:.3}",
            classes_per(r, weights),
            c.global_load_efficiency(),
            c.shared_bank_conflict_factor(),
        );
        assert!(c.global_load_efficiency() >= 0.999, "{label}");
        assert!(c.shared_bank_conflict_factor() <= 1.05, "{label}");
        if let Some(bar) = bar {
            assert!(
                per_weight <= bar,
                "{label}: {per_weight:.2} instructions per weight (bar {bar})"
            );
        }
    }
}

/// The most instructions per weight [`backward_gemv_instructions_per_weight`] allows (5.21
/// measured).
const BACKWARD_GEMV_PER_WEIGHT: f64 = 5.4;

/// Thread instructions per weight of the backward GEMV at `m = 1` (split and reduce together,
/// every instruction of both launches over the `n · k` weights), shaped as one column block of
/// BENCHMARKS.md's N = K = 4096 row: 4 slices of 128 weight rows (as `Slices::Auto` cuts
/// 4096), k = 512, block 64; printed with the instruction classes per weight. 5.21 in every
/// dtype with a packed word per lane and row (`kernels::backward_gemv_words`; 14.89 with a
/// byte per lane, a `bfe`, table address and `mul` per weight and row checks, and 112-row
/// slices), under [`BACKWARD_GEMV_PER_WEIGHT`].
#[test]
fn backward_gemv_instructions_per_weight() {
    for dtype in [DType::F16, DType::BF16, DType::F32] {
        let cfg = Nf4Config {
            dtype,
            ..Nf4Config::new(512, 512)
        };
        let log = launches_of(&cfg, 1, Run::BackwardGemv(Slices::Exactly(4)));
        let weights = f64::from(cfg.n * cfg.k);
        for r in &log {
            eprintln!(
                "{dtype} {}: {:.2} instructions per weight ({})",
                r.entry,
                r.counters.instructions.total() as f64 / weights,
                classes_per(r, weights)
            );
        }
        let total: u64 = log.iter().map(|r| r.counters.instructions.total()).sum();
        let per_weight = total as f64 / weights;
        eprintln!("{dtype}: {per_weight:.2} per weight in all");
        assert!(
            per_weight <= BACKWARD_GEMV_PER_WEIGHT,
            "{dtype}: {per_weight:.2} instructions per weight (bar {BACKWARD_GEMV_PER_WEIGHT})"
        );
    }
}

/// `r`'s instruction classes that ran, each divided by `weights`.
fn classes_per(r: &LaunchRecord, weights: f64) -> String {
    let classes: Vec<String> = r
        .counters
        .instructions
        .fields()
        .iter()
        .filter(|(_, v)| *v > 0)
        .map(|(name, v)| format!("{name} {:.2}", *v as f64 / weights))
        .collect();
    classes.join(", ")
}
