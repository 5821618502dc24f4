//! MoE launch code without running anything: a recording backend checks the launch sequence,
//! grids and argument kinds against the compiled entries, and that bad input is a typed error
//! before any launch.

use half::bf16;
use ptxforge_runtime::arch::Arch;
use ptxforge_runtime::launch::{
    Backend, DeviceBuffer, LaunchConfig, LaunchError, ParamKind, RecordedLaunch, RecordingBackend,
    ScalarKind,
};
use ptxforge_runtime::templates::moe::kernels::{
    EXPERT_LINEAR, EXPERT_SWIGLU_DOWN, EXPERT_SWIGLU_UP, GATING, PERMUTE, SCHEDULE, UNPERMUTE,
};
use ptxforge_runtime::templates::moe::launch::{forward, ExpertWeights, MoeLaunch};
use ptxforge_runtime::templates::moe::{Ffn, MoeConfig};
use ptxforge_runtime::templates::{CompiledFamily, KernelFamily};
use ptxforge_runtime::DType;

type Recorder = RecordingBackend;

fn mixtral_bf16() -> MoeConfig {
    MoeConfig {
        dtype: DType::BF16,
        ffn: Ffn::Swiglu,
        capacity_factor: Some(1.25),
        ..MoeConfig::new(8, 2, 64, 96)
    }
}

/// Zeroed buffers of every input for `cfg` and `tokens` (element type `T`).
struct Inputs {
    x: DeviceBuffer<Recorder, bf16>,
    logits: DeviceBuffer<Recorder, bf16>,
    w1: DeviceBuffer<Recorder, bf16>,
    w3: DeviceBuffer<Recorder, bf16>,
    w2: DeviceBuffer<Recorder, bf16>,
    out: DeviceBuffer<Recorder, bf16>,
}

fn inputs(dev: &Recorder, cfg: &MoeConfig, tokens: usize) -> Inputs {
    let (e, h, f) = (
        cfg.experts as usize,
        cfg.hidden as usize,
        cfg.expert_dim as usize,
    );
    Inputs {
        x: dev.alloc(tokens * h).unwrap(),
        logits: dev.alloc(tokens * e).unwrap(),
        w1: dev.alloc(e * f * h).unwrap(),
        w3: dev.alloc(e * f * h).unwrap(),
        w2: dev.alloc(e * h * f).unwrap(),
        out: dev.alloc(tokens * cfg.out_width() as usize).unwrap(),
    }
}

fn swiglu(i: &Inputs) -> ExpertWeights<'_, Recorder, bf16> {
    ExpertWeights::Swiglu {
        w1: &i.w1,
        w3: &i.w3,
        w2: &i.w2,
    }
}

/// Grid and block of a launch.
type Dims = ([u32; 3], [u32; 3]);

fn dims(config: LaunchConfig) -> Dims {
    let (g, b) = (config.grid, config.block);
    ([g.x, g.y, g.z], [b.x, b.y, b.z])
}

/// Every recorded launch passes arguments of the kinds its entry declares, and the dynamic
/// shared memory its entry was built for (the 128-row tiles' rings; 0 for static-only
/// entries).
fn assert_args_match(compiled: &CompiledFamily, launches: &[RecordedLaunch]) {
    for launch in launches {
        let entry = compiled
            .entry(&launch.entry)
            .unwrap_or_else(|| panic!("no entry {}", launch.entry));
        let declared: Vec<Option<ScalarKind>> = entry
            .params
            .iter()
            .map(|(_, kind)| match kind {
                ParamKind::Pointer(_) => None,
                ParamKind::Scalar(s) => Some(*s),
            })
            .collect();
        assert_eq!(declared, launch.args, "arguments of {}", launch.entry);
        if let Some(block) = entry.required_block {
            assert_eq!(dims(launch.config).1, block, "block of {}", launch.entry);
        }
        assert_eq!(
            launch.config.dynamic_shared_bytes, entry.max_dynamic_shared_bytes,
            "dynamic shared memory of {}",
            launch.entry
        );
    }
}

#[test]
fn forward_launches_every_phase_in_order_with_its_grid() {
    let cfg = mixtral_bf16();
    let compiled = cfg.compile().unwrap();
    let dev = Recorder::default();
    let tokens = 100u32;
    let i = inputs(&dev, &cfg, tokens as usize);
    let stats = forward(
        &cfg,
        &dev,
        &compiled.ptx,
        tokens,
        &i.x,
        &i.logits,
        swiglu(&i),
        &i.out,
    )
    .unwrap();
    assert_eq!(stats.capacity, 32); // ceil(1.25 · 100 · 2 / 8)
    assert_eq!(stats.counts.len(), 8);
    let launches = dev.launches();
    let seen: Vec<(&str, Dims)> = launches
        .iter()
        .map(|l| (l.entry.as_str(), dims(l.config)))
        .collect();
    assert_eq!(
        seen,
        vec![
            (GATING, ([1, 1, 1], [128, 1, 1])), // 8 experts: a thread per token
            (PERMUTE, ([1, 1, 1], [256, 1, 1])), // 8 experts: one block for all
            (SCHEDULE, ([1, 1, 1], [32, 1, 1])),
            // 8 bins of ≤ 32 rows: at most one 128-row tile each; bf16 on sm_80 with H and
            // F multiples of 8: the tensor-core GEMMs, 4 warps per block, 128 × 64 tiles
            // (up: two weight sets; down: N = 64).
            (EXPERT_SWIGLU_UP, ([8, 2, 1], [128, 1, 1])),
            (EXPERT_SWIGLU_DOWN, ([8, 1, 1], [128, 1, 1])),
            // 16 tokens per block (top-2): ceil(100 / 16).
            (UNPERMUTE, ([7, 1, 1], [256, 1, 1])),
        ]
    );
    assert_args_match(&compiled, &launches);
    // Up's rings (3 stages of 128 + 64 + 64 rows of 80 bytes) exceed the static 48 KiB;
    // down's (128 + 64 rows) do not.
    let shared: Vec<u32> = launches
        .iter()
        .map(|l| l.config.dynamic_shared_bytes)
        .collect();
    assert_eq!(shared, [0, 0, 0, 3 * 256 * 80, 0, 0]);
}

/// Dropless (the default): the grouped GEMM grid is bounded by the routed rows, not by
/// `E · ceil(T / 128)`: 200 rows in 8 bins of 128-row tiles need at most `min(8 · ceil(100 /
/// 128), (200 + 127 · 8) / 128) = 8` row tiles (11 with the 64-row tiles of the CUDA-core
/// entries, sm_75).
#[test]
fn dropless_grid_is_bounded_by_the_routed_rows() {
    let cfg = MoeConfig {
        capacity_factor: None,
        ..mixtral_bf16()
    };
    let compiled = cfg.compile().unwrap();
    let dev = Recorder::default();
    let tokens = 100u32;
    let i = inputs(&dev, &cfg, tokens as usize);
    let launch = MoeLaunch::new(&cfg, &dev, &compiled.ptx, tokens).unwrap();
    assert_eq!((launch.shape().capacity, launch.shape().rows), (100, 200));
    let ws = launch.workspace::<bf16>().unwrap();
    assert_eq!(ws.expert_out.len(), 200 * 64);
    assert_eq!(ws.work_items.len(), 2 * 8);
    launch
        .forward_with(&ws, &i.x, &i.logits, swiglu(&i), &i.out)
        .unwrap();
    let launches = dev.launches();
    let up = launches
        .iter()
        .find(|l| l.entry == EXPERT_SWIGLU_UP)
        .unwrap();
    assert_eq!(dims(up.config).0, [8, 2, 1]);
    assert_args_match(&compiled, &launches);
    let cuda_cores = MoeConfig {
        arch: Arch::Sm75,
        ..cfg
    };
    let compiled = cuda_cores.compile().unwrap();
    let launch = MoeLaunch::new(&cuda_cores, &dev, &compiled.ptx, tokens).unwrap();
    assert_eq!(launch.workspace::<bf16>().unwrap().work_items.len(), 2 * 11);
}

#[test]
fn linear_forward_uses_the_linear_entry() {
    let cfg = MoeConfig {
        dtype: DType::BF16,
        capacity_factor: Some(1.25),
        ..MoeConfig::new(64, 6, 48, 200)
    };
    let compiled = cfg.compile().unwrap();
    let dev = Recorder::default();
    let i = inputs(&dev, &cfg, 333);
    let launch = MoeLaunch::new(&cfg, &dev, &compiled.ptx, 333).unwrap();
    let capacity = launch.shape().capacity; // ceil(1.25 · 333 · 6 / 64) = 40
    assert_eq!(capacity, 40);
    launch
        .forward(&i.x, &i.logits, ExpertWeights::Linear { w: &i.w1 }, &i.out)
        .unwrap();
    let launches = dev.launches();
    let names: Vec<&str> = launches.iter().map(|l| l.entry.as_str()).collect();
    assert_eq!(
        names,
        vec![GATING, PERMUTE, SCHEDULE, EXPERT_LINEAR, UNPERMUTE]
    );
    // Permute: a block per group of 32 experts.
    assert_eq!(dims(launches[1].config).0, [2, 1, 1]);
    // 64 experts × 1 slot tile, ceil(200 / 128) = 2 column tiles of the 128 × 128 tile.
    assert_eq!(dims(launches[3].config).0, [64, 2, 1]);
    // 16 tokens per unpermute block (top-6 → 96 pairs staged), whole rows: ceil(333 / 16).
    assert_eq!(dims(launches[4].config).0, [21, 1, 1]);
    assert_args_match(&compiled, &launches);
}

/// Runs `f` on a fresh recorder and checks it fails with `want` before any launch.
fn fails_before_launch(
    cfg: &MoeConfig,
    tokens: u32,
    f: impl FnOnce(&Recorder, &str) -> Result<(), LaunchError>,
    want: impl Fn(&LaunchError) -> bool,
) {
    let dev = Recorder::default();
    let ptx = cfg.compile().map(|c| c.ptx).unwrap_or_default();
    let err = f(&dev, &ptx).expect_err("must fail");
    assert!(want(&err), "unexpected error for tokens = {tokens}: {err}");
    assert!(dev.launches().is_empty(), "launched despite {err}");
}

#[test]
fn mismatched_buffer_lengths_are_rejected() {
    let cfg = mixtral_bf16();
    let tokens = 7;
    fails_before_launch(
        &cfg,
        tokens,
        |dev, ptx| {
            let mut i = inputs(dev, &cfg, 7);
            i.logits = dev.alloc(7 * 8 - 1).unwrap();
            forward(&cfg, dev, ptx, 7, &i.x, &i.logits, swiglu(&i), &i.out).map(|_| ())
        },
        |e| {
            matches!(
                e,
                LaunchError::BufferLength {
                    name: "logits",
                    expected: 56,
                    actual: 55
                }
            )
        },
    );
    for bad in ["x", "w1", "w3", "w2", "out"] {
        fails_before_launch(
            &cfg,
            tokens,
            |dev, ptx| {
                let mut i = inputs(dev, &cfg, 7);
                let short = |len: usize| dev.alloc::<bf16>(len - 1).unwrap();
                match bad {
                    "x" => i.x = short(i.x.len()),
                    "w1" => i.w1 = short(i.w1.len()),
                    "w3" => i.w3 = short(i.w3.len()),
                    "w2" => i.w2 = short(i.w2.len()),
                    _ => i.out = short(i.out.len()),
                }
                forward(&cfg, dev, ptx, 7, &i.x, &i.logits, swiglu(&i), &i.out).map(|_| ())
            },
            |e| matches!(e, LaunchError::BufferLength { name, .. } if *name == bad),
        );
    }
    // A workspace for another token count is caught before the first phase runs.
    fails_before_launch(
        &cfg,
        tokens,
        |dev, ptx| {
            let i = inputs(dev, &cfg, 7);
            let other = MoeLaunch::new(&cfg, dev, ptx, 8)?.workspace::<bf16>()?;
            MoeLaunch::new(&cfg, dev, ptx, 7)?
                .forward_with(&other, &i.x, &i.logits, swiglu(&i), &i.out)
                .map(|_| ())
        },
        |e| {
            matches!(
                e,
                LaunchError::BufferLength {
                    name: "weights",
                    ..
                }
            )
        },
    );
}

#[test]
fn zero_tokens_and_index_overflow_are_rejected() {
    let cfg = mixtral_bf16();
    fails_before_launch(
        &cfg,
        0,
        |dev, ptx| MoeLaunch::new(&cfg, dev, ptx, 0).map(|_| ()),
        |e| {
            matches!(
                e,
                LaunchError::InvalidDim {
                    name: "tokens",
                    value: 0,
                    ..
                }
            )
        },
    );
    // [E·C, max(H, F)] permuted rows exceed u32 indices.
    let big = MoeConfig::new(8, 2, 4096, 14336);
    fails_before_launch(
        &big,
        1 << 20,
        |dev, ptx| MoeLaunch::new(&big, dev, ptx, 1 << 20).map(|_| ()),
        |e| {
            matches!(e, LaunchError::InvalidDim { name: "tokens", reason, .. }
                if reason.contains("permuted"))
        },
    );
    // T·K fits u32 but leaves no headroom for the permute scan's loop counter.
    let thin = MoeConfig {
        capacity_factor: Some(0.5),
        ..MoeConfig::new(1, 1, 1, 1)
    };
    let tokens = u32::MAX - 10;
    fails_before_launch(
        &thin,
        tokens,
        |dev, ptx| MoeLaunch::new(&thin, dev, ptx, tokens).map(|_| ()),
        |e| {
            matches!(e, LaunchError::InvalidDim { name: "tokens", reason, .. }
                if reason.contains("headroom"))
        },
    );
    // An expert GEMM grid with more than 65535 column tiles.
    let wide = MoeConfig::new(1, 1, 1, 5_000_000);
    fails_before_launch(
        &wide,
        1,
        |dev, ptx| MoeLaunch::new(&wide, dev, ptx, 1).map(|_| ()),
        |e| {
            matches!(e, LaunchError::InvalidDim { name: "tokens", reason, .. }
                if reason.contains("grid"))
        },
    );
}

#[test]
fn invalid_config_dtype_and_ffn_mismatches_are_rejected() {
    let bad = MoeConfig::new(8, 9, 4, 4);
    fails_before_launch(
        &bad,
        4,
        |dev, ptx| MoeLaunch::new(&bad, dev, ptx, 4).map(|_| ()),
        |e| {
            matches!(
                e,
                LaunchError::InvalidDim {
                    name: "top_k",
                    value: 9,
                    ..
                }
            )
        },
    );
    // f32 buffers for a bf16 configuration.
    let cfg = mixtral_bf16();
    fails_before_launch(
        &cfg,
        4,
        |dev, ptx| {
            let logits = dev.alloc::<f32>(4 * 8)?;
            let weights = dev.alloc::<f32>(4 * 2)?;
            let indices = dev.alloc::<u32>(4 * 2)?;
            let routing = ptxforge_runtime::templates::moe::launch::Routing {
                indices: &indices,
                weights: &weights,
            };
            MoeLaunch::new(&cfg, dev, ptx, 4)?.gating(&logits, routing)
        },
        |e| {
            matches!(
                e,
                LaunchError::ArgumentType {
                    entry,
                    expected: ParamKind::Pointer(ScalarKind::BF16),
                    ..
                } if entry == GATING
            )
        },
    );
    // Linear weights for a swiglu configuration.
    fails_before_launch(
        &cfg,
        4,
        |dev, ptx| {
            let i = inputs(dev, &cfg, 4);
            let w = ExpertWeights::Linear { w: &i.w1 };
            forward(&cfg, dev, ptx, 4, &i.x, &i.logits, w, &i.out).map(|_| ())
        },
        |e| matches!(e, LaunchError::Shape(m) if m.contains("ffn = linear")),
    );
    // The swiglu intermediate is required.
    fails_before_launch(
        &cfg,
        4,
        |dev, ptx| {
            let i = inputs(dev, &cfg, 4);
            let launch = MoeLaunch::new(&cfg, dev, ptx, 4)?;
            let ws = launch.workspace::<bf16>()?;
            launch.experts(&i.x, ws.bins(), swiglu(&i), None, &ws.expert_out)
        },
        |e| matches!(e, LaunchError::BufferLength { name: "gated", .. }),
    );
}
