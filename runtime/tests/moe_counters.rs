#![cfg(feature = "sim")]
//! The MoE routing kernels' memory behaviour, from the interpreter's counters (every check on),
//! on the shapes BENCHMARKS.md's "Interpreter counters" table reports (8 experts, top-2,
//! H = F = 128, 256 tokens, capacity factor 1.25, sm_80; swiglu f32 and linear bf16), plus the
//! dropless layout of the same shape. Numerics are checked in `moe_numerics`; here gating and
//! permute run on random logits and unpermute on random expert outputs (the expert GEMMs are
//! measured in `moe_expert_cost`).
//!
//! Global efficiency is distinct bytes moved ÷ bytes of the 32-byte sectors touched, request by
//! request; the shared factor is wavefronts ÷ the fewest the same requests could take.
//!
//! | entry | load eff. | store eff. | shared factor |
//! |---|---|---|---|
//! | `moe_gating` | ≥ 0.9 | ≥ 0.9 | ≤ 1.05 (every `E < 32`) |
//! | `moe_permute` | ≥ 0.9 | ≥ [`PERMUTE_STORE_FLOOR`] | ≤ 1.05 (measured 1.000) |
//! | `moe_schedule` | ≥ 0.9 | ≥ [`SCHEDULE_STORE_FLOOR`] | – |
//! | `moe_unpermute` | ≥ 0.9 | ≥ 0.9 | ≤ 1.05 |
//!
//! The bounds below 0.9 are today's figures with their cause, so a regression still fails.

use half::bf16;
use ptxforge_runtime::arch::Arch;
use ptxforge_runtime::launch::{Backend, Element, LaunchRecord, SimBackend};
use ptxforge_runtime::templates::moe::launch::MoeLaunch;
use ptxforge_runtime::templates::moe::{Ffn, MoeConfig};
use ptxforge_runtime::templates::testing::SplitMix64;
use ptxforge_runtime::templates::KernelFamily;
use ptxforge_runtime::DType;

#[path = "moe_support/permute.rs"]
mod permute_support;
use permute_support::{permute_checked, skewed_indices};

const TOKENS: u32 = 256;

/// `moe_permute` writes `slot_of` whole (1.0) and `token_ids` as one run per expert per
/// 256-pair chunk, each run on its own requests (32 consecutive slots of one bin per request):
/// at E = 8, K = 2 a run is about 32 words (128 bytes) starting at any word of a sector, so it
/// touches 4 sectors one time in 8 and 5 otherwise, and the capacity-limited runs are cut at
/// `C`; the empty slots are one coalesced run over all bins. Measured 0.912–0.961 over the
/// four scenarios (0.887–0.918 when each bin's empty slots were filled on their own requests,
/// 0.854–0.877 when the chunk's bin list was written in 32-entry windows that straddle two
/// bins).
const PERMUTE_STORE_FLOOR: f64 = 0.90;

/// `moe_schedule` writes the offsets (E = 8: 32 bytes, one whole sector) and all `n_max`
/// work items, 8-byte `(e, m0)` vectors on consecutive lanes, the ones after the real ones
/// `(u32::MAX, 0)`. With 64-row items (f32 on CUDA cores) `n_max` = 15: 120 bytes over 4
/// sectors, 152 / (5 · 32) = 0.95; with the tensor-core entries' 128-row items (bf16,
/// dropless) `n_max` = 11: 88 bytes over 3 sectors, 120 / (4 · 32) = 0.9375; the rest is the
/// last sector's tail past the buffer. (The interleaved layout at odd word offsets behind a
/// count word measured 0.275.)
const SCHEDULE_STORE_FLOOR: f64 = 0.93;

/// The bench's configuration for `ffn`/`dtype`, capacity-limited at 1.25 or dropless.
fn config(ffn: Ffn, dtype: DType, capacity_factor: Option<f32>) -> MoeConfig {
    MoeConfig {
        ffn,
        dtype,
        capacity_factor,
        arch: Arch::Sm80,
        ..MoeConfig::new(8, 2, 128, 128)
    }
}

/// Runs gating, permute (+ schedule) and unpermute (on random expert outputs) once and returns
/// their launch records.
fn routing_launches<T: Element>(cfg: &MoeConfig, cast: fn(f32) -> T) -> Vec<LaunchRecord> {
    let ptx = cfg.compile().expect("compiles").ptx;
    let dev = SimBackend::new();
    let launch = MoeLaunch::new(cfg, &dev, &ptx, TOKENS).expect("launch");
    let ws = launch.workspace::<T>().expect("workspace");
    let mut rng = SplitMix64::new(11);
    let mut values =
        |n: usize, r: f32| -> Vec<T> { rng.vec_f32(n, -r, r).into_iter().map(cast).collect() };
    let logits = dev
        .upload(&values((TOKENS * cfg.experts) as usize, 2.0))
        .expect("upload");
    let y = dev
        .upload(&values(ws.expert_out.len(), 1.0))
        .expect("upload");
    let out = dev
        .alloc::<T>((TOKENS * cfg.out_width()) as usize)
        .expect("alloc");
    launch.gating(&logits, ws.routing()).expect("gating");
    launch.permute(&ws.indices, ws.bins()).expect("permute");
    launch
        .unpermute(&y, ws.routing(), ws.bins(), &out)
        .expect("unpermute");
    dev.take_launch_log()
}

fn report(label: &str, r: &LaunchRecord) {
    let c = &r.counters;
    eprintln!(
        "{label} {:<14} {:?}x{:?}: instructions {} ({:.2}/token), load eff {:.3} ({} req, \
         {:.2} sectors/req), store eff {:.3} ({} req, {} B / {} sectors), shared factor {:.3} ({} req), barriers {}",
        r.entry,
        (r.config.grid.x, r.config.grid.y),
        r.config.block.x,
        c.instructions.total(),
        c.instructions.total() as f64 / f64::from(TOKENS),
        c.global_load_efficiency(),
        c.global_load_requests,
        c.global_load_sectors as f64 / c.global_load_requests.max(1) as f64,
        c.global_store_efficiency(),
        c.global_store_requests,
        c.global_store_bytes,
        c.global_store_sectors,
        c.shared_bank_conflict_factor(),
        c.shared_requests,
        c.barriers,
    );
}

/// Logs for the bench's two scenarios, capacity-limited and dropless.
fn bench_scenarios() -> Vec<(String, Vec<LaunchRecord>)> {
    let mut out = Vec::new();
    for (name, ffn, dtype) in [
        ("swiglu f32", Ffn::Swiglu, DType::F32),
        ("linear bf16", Ffn::Linear, DType::BF16),
    ] {
        for capacity in [Some(1.25), None] {
            let cfg = config(ffn, dtype, capacity);
            let log = match dtype {
                DType::BF16 => routing_launches(&cfg, bf16::from_f32),
                _ => routing_launches(&cfg, |v| v),
            };
            let label = format!("{name} cap={capacity:?}");
            for r in &log {
                report(&label, r);
            }
            out.push((label, log));
        }
    }
    out
}

/// `moe_unpermute`'s thread-instructions per output element: with 16-byte vectors a thread's
/// `K` routing reads and address arithmetic are shared by 4 (f32) or 8 (bf16) outputs;
/// measured 16.0 (f32) and 20.3 (bf16, which also unpacks and converts each element), where
/// element-wise loads and per-thread routing took 99.0 and 112.0.
const UNPERMUTE_INSTRUCTIONS_PER_OUTPUT: f64 = 22.0;

/// `(load floor, store floor, shared ceiling)` of `entry`.
fn bounds(entry: &str) -> (f64, f64, f64) {
    match entry {
        "moe_gating" | "moe_unpermute" => (0.9, 0.9, 1.05),
        "moe_permute" => (0.9, PERMUTE_STORE_FLOOR, 1.05),
        "moe_schedule" => (0.9, SCHEDULE_STORE_FLOOR, 1.05),
        other => panic!("unexpected entry {other}"),
    }
}

#[test]
fn routing_kernels_move_whole_sectors_without_bank_conflicts() {
    for (label, log) in bench_scenarios() {
        let entries: Vec<&str> = log.iter().map(|r| r.entry.as_str()).collect();
        assert_eq!(
            entries,
            ["moe_gating", "moe_permute", "moe_schedule", "moe_unpermute"]
        );
        for r in &log {
            let c = &r.counters;
            let (load, store, shared) = bounds(&r.entry);
            let what = format!("{label} {}", r.entry);
            let got = c.global_load_efficiency();
            assert!(got >= load, "{what}: load efficiency {got:.3} < {load}");
            let got = c.global_store_efficiency();
            assert!(got >= store, "{what}: store efficiency {got:.3} < {store}");
            let got = c.shared_bank_conflict_factor();
            assert!(got <= shared, "{what}: shared factor {got:.3} > {shared}");
            if r.entry == "moe_unpermute" {
                let outputs = f64::from(TOKENS * 128);
                let got = c.instructions.total() as f64 / outputs;
                let bound = UNPERMUTE_INSTRUCTIONS_PER_OUTPUT;
                assert!(
                    got <= bound,
                    "{what}: {got:.1} instructions per output > {bound}"
                );
            }
        }
    }
}

/// The thread-per-token gating's swizzled stage is conflict-free for every `E < 32` (odd,
/// powers of two and mixed `2^a · m`), with 4-byte (f32 compute) and 8-byte (f64) stage
/// elements, and its routing rows are one vector store for `K = 2`.
#[test]
fn gating_stage_is_conflict_free_for_every_small_expert_count() {
    for experts in [3, 6, 8, 12, 16, 20, 24, 31] {
        for dtype in [DType::F32, DType::F64] {
            let cfg = MoeConfig {
                arch: Arch::Sm80,
                dtype,
                ..MoeConfig::new(experts, 2, 8, 8)
            };
            let log = match dtype {
                DType::F64 => routing_launches(&cfg, f64::from),
                _ => routing_launches(&cfg, |v: f32| v),
            };
            let gating = &log[0];
            assert_eq!(gating.entry, "moe_gating");
            report(&format!("E={experts} K=2 {dtype}"), gating);
            let c = &gating.counters;
            let factor = c.shared_bank_conflict_factor();
            assert!(
                factor <= 1.05,
                "E = {experts} {dtype}: shared factor {factor:.3}"
            );
            let store = c.global_store_efficiency();
            assert!(
                store >= 0.9,
                "E = {experts} {dtype}: store efficiency {store:.3}"
            );
        }
    }
}

/// Runs `moe_permute` alone on [`skewed_indices`] (capacity factor 1.0), checked against the
/// host reference, and returns its launch record.
fn permute_alone(experts: u32, top_k: u32, tokens: u32) -> LaunchRecord {
    let cfg = MoeConfig {
        arch: Arch::Sm80,
        capacity_factor: Some(1.0),
        ..MoeConfig::new(experts, top_k, 8, 8)
    };
    let indices = skewed_indices(experts, top_k, tokens, u64::from(experts * 1000 + tokens));
    permute_checked(&cfg, tokens, &indices)
}

/// `moe_permute` per routing shape `(E, K, T)`: thread-instructions per routed pair (ceiling),
/// store efficiency (floor), measured on [`skewed_indices`] with capacity factor 1.0. Load
/// efficiency is 1.000 and the shared factor 1.000 for all of them.
///
/// Each block scans every pair and ballots once per pair step and expert of its group (5
/// instructions per lane), so the instructions grow as `E` (E = 8 to 32 on one block) and the
/// blocks as `⌈E / 32⌉`. Measured 149.0, 210.2, 312.7, 588.7, 1127.6 at T = 256 and 563.5,
/// 1090.0 at T = 4096 (a block per expert took 4677 and 9158 at E = 64 and 128, T = 256).
/// The stores: `token_ids` as one run per expert per 256-pair chunk, shorter as `E` grows
/// (0.929, 0.857, 0.763 for E = 8, 16, 32), and from 64 experts `slot_of` is written by the
/// block of each pair's group, `1 / ⌈E / 32⌉` of each request's words (0.491 and 0.334 at
/// T = 256, 0.480 and 0.319 at T = 4096; a block per expert measured 0.159 and 0.151).
const PERMUTE_BOUNDS: [((u32, u32, u32), f64, f64); 7] = [
    ((8, 2, 256), 165.0, 0.90),
    ((16, 2, 256), 235.0, 0.83),
    ((32, 4, 256), 345.0, 0.74),
    ((64, 6, 256), 650.0, 0.46),
    ((128, 8, 256), 1250.0, 0.31),
    ((64, 6, 4096), 620.0, 0.45),
    ((128, 8, 4096), 1200.0, 0.30),
];

#[test]
fn permute_counters_per_expert_count() {
    for ((e, k, t), instructions, store) in PERMUTE_BOUNDS {
        let r = permute_alone(e, k, t);
        let c = &r.counters;
        let what = format!("moe_permute E = {e} K = {k} T = {t}");
        let got = c.instructions.total() as f64 / f64::from(t * k);
        eprintln!(
            "{what}: grid {}, {got:.1} instructions per pair, load eff {:.3}, store eff {:.3}, \
             shared factor {:.3}",
            r.config.grid.x,
            c.global_load_efficiency(),
            c.global_store_efficiency(),
            c.shared_bank_conflict_factor()
        );
        assert!(
            got <= instructions,
            "{what}: {got:.1} instructions per pair > {instructions}"
        );
        let got = c.global_load_efficiency();
        assert!(got >= 0.99, "{what}: load efficiency {got:.3}");
        let got = c.global_store_efficiency();
        assert!(got >= store, "{what}: store efficiency {got:.3} < {store}");
        let got = c.shared_bank_conflict_factor();
        assert!(got <= 1.05, "{what}: shared factor {got:.3} > 1.05");
    }
}
