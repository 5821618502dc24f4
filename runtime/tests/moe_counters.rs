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
//! | `moe_gating` | ≥ 0.9 | [`GATING_STORE_BOUND`] | ≤ 1.05 |
//! | `moe_permute` | ≥ 0.9 | [`PERMUTE_STORE_BOUND`] | ≤ 1.05 |
//! | `moe_schedule` | [`SCHEDULE_LOAD_BOUND`] | [`SCHEDULE_STORE_BOUND`] | – |
//! | `moe_unpermute` | ≥ 0.9 | ≥ 0.9 | ≤ 1.05 |

use half::bf16;
use ptxforge_runtime::arch::Arch;
use ptxforge_runtime::launch::{Backend, Element, LaunchRecord, SimBackend};
use ptxforge_runtime::templates::moe::launch::MoeLaunch;
use ptxforge_runtime::templates::moe::{Ffn, MoeConfig};
use ptxforge_runtime::templates::testing::SplitMix64;
use ptxforge_runtime::templates::KernelFamily;
use ptxforge_runtime::DType;

const TOKENS: u32 = 256;

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
         {:.2} sectors/req), store eff {:.3} ({} req), shared factor {:.3} ({} req), barriers {}",
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
        c.shared_bank_conflict_factor(),
        c.shared_requests,
        c.barriers,
    );
}

#[test]
fn routing_kernels_report() {
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
        }
    }
}
