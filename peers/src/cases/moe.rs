//! oxicuda-ptx MoE phase kernels against `templates::moe::reference` (`ffn = linear`, f32).
//!
//! Each phase runs on its own, fed with the *reference's* outputs of the earlier phases, so a
//! fault in one phase does not hide or fake the behaviour of the next. Conventions read from
//! the generated PTX and adapted to:
//! - gating: `logits [T, E] → indices [T, K]` (u32), `weights [T, K]`, softmax + top-k +
//!   renormalisation as ptxforge's gating;
//! - permute: atomics assign slots, so bins are compared as sets; `counts[e]` is the number of
//!   pairs routed to `e` (not clamped to the capacity), i.e. ptxforge's `routed`;
//! - expert GEMM: `Y = X · W[e]ᵀ` with `W [E, F, H]`, output documented as
//!   `[total_tokens, expert_dim]` and indexed by *token id* (ptxforge: the permuted layout
//!   `[E·C, F]`), so each output row is compared with the results of that token's experts;
//! - unpermute: `out[t] = Σ_k w[t, k] · Y[e_k·C + slot]` with `Y` in the permuted layout, the
//!   slot found by scanning the bin (no `slot_of` input); `counts` as the permute kernel writes
//!   them.

use ptxforge_runtime::templates::moe::reference::{self, ExpertWeights, Gating, Permutation};
use ptxforge_runtime::templates::moe::MoeConfig;
use ptxforge_runtime::templates::testing::SplitMix64;
use ptxforge_sim::{Arg, Device, Module, Options};

use super::{abs, narrow, reference_error, HarnessError, Launch, Outcome, Tolerance, Verdict};
use crate::generate::{
    MOE_CAPACITY_FACTOR, MOE_EXPERTS, MOE_EXPERT_DIM, MOE_HIDDEN, MOE_TOKENS, MOE_TOP_K,
};

/// Threads per block for the one-thread-per-token / per-element kernels.
const BLOCK: u32 = 256;
/// The expert GEMM's tile (hard-coded in the generator): block 16×16.
const GEMM_TILE: u32 = 16;

struct Data {
    cfg: MoeConfig,
    tokens: usize,
    x: Vec<f64>,
    logits: Vec<f64>,
    w: Vec<f64>,
    gating: Gating,
    perm: Permutation,
    /// Reference expert outputs, permuted layout `[E·C, F]`.
    y: Vec<f64>,
}

/// f32-representable values, so the f64 reference sees exactly the kernel's inputs.
fn f32_values(v: Vec<f64>) -> Vec<f64> {
    v.into_iter().map(|x| f64::from(x as f32)).collect()
}

fn data() -> Result<Data, HarnessError> {
    let mut cfg = MoeConfig::new(MOE_EXPERTS, MOE_TOP_K, MOE_HIDDEN, MOE_EXPERT_DIM);
    cfg.capacity_factor = Some(MOE_CAPACITY_FACTOR);
    let t = MOE_TOKENS as usize;
    let (e, h, f) = (
        MOE_EXPERTS as usize,
        MOE_HIDDEN as usize,
        MOE_EXPERT_DIM as usize,
    );
    let mut rng = SplitMix64::new(0x30E);
    let x = f32_values(rng.vec_f64(t * h, -1.0, 1.0));
    let logits = f32_values(rng.vec_f64(t * e, -3.0, 3.0));
    let w = f32_values(rng.vec_f64(e * f * h, -1.0, 1.0));
    let gating = reference::gating(&cfg, &logits, t).map_err(reference_error)?;
    let perm = reference::permute(&cfg, &gating.indices, t).map_err(reference_error)?;
    let y = reference::expert_forward(&cfg, &x, t, &perm, ExpertWeights::Linear { w: &w })
        .map_err(reference_error)?;
    Ok(Data {
        cfg,
        tokens: t,
        x,
        logits,
        w,
        gating,
        perm,
        y,
    })
}

/// Gating: one thread per token.
pub fn gating(module: &Module, entry: &str) -> Result<Outcome, HarnessError> {
    let d = data()?;
    let k = MOE_TOP_K as usize;
    let mut dev = Device::new();
    let logits_in = narrow(&d.logits);
    let logits = dev.upload(&logits_in);
    let indices = dev.alloc(d.tokens * k * 4);
    let weights = dev.alloc(d.tokens * k * 4);
    let launch = Launch {
        entry,
        grid: [MOE_TOKENS.div_ceil(BLOCK), 1, 1],
        block: [BLOCK, 1, 1],
        args: vec![
            Arg::Buffer(logits),
            Arg::Buffer(indices),
            Arg::Buffer(weights),
            Arg::U32(MOE_TOKENS),
        ],
    };
    let report = launch.run(&mut dev, module)?;
    let got_idx: Vec<u32> = dev.download(indices)?;
    let got_w: Vec<f32> = dev.download(weights)?;
    let logits_after: Vec<f32> = dev.download(logits)?;

    let wrong_idx = got_idx
        .iter()
        .zip(&d.gating.indices)
        .filter(|(a, b)| a != b)
        .count();
    let verdict = if wrong_idx > 0 {
        Verdict::Mismatch(format!(
            "{wrong_idx} of {} expert indices differ from the reference",
            got_idx.len()
        ))
    } else {
        // Weights are probabilities in [0, 1]: absolute tolerance.
        let tol = Tolerance {
            rtol: 0.0,
            atol: 1e-5,
        };
        match tol.verdict("weights", &got_w, &d.gating.weights, &d.gating.weights) {
            Verdict::Match { worst, tolerance } => Verdict::Match {
                worst,
                tolerance: format!("indices exact, weights {tolerance}"),
            },
            other => other,
        }
    };
    let mut observations = Vec::new();
    let clobbered = logits_after
        .iter()
        .zip(&logits_in)
        .filter(|(a, b)| a.to_bits() != b.to_bits())
        .count();
    if clobbered > 0 {
        observations.push(format!(
            "writes its input: {clobbered} of {} logits overwritten with −inf (the selected \
             experts'); ptxforge's gating never writes `logits`",
            logits_in.len()
        ));
    }
    Ok(Outcome {
        report,
        outputs: (d.tokens * k) as u64,
        verdict,
        observations,
        launch: launch.describe(),
    })
}

/// Permute: one thread per token; bins compared as sets (slot order depends on atomics).
pub fn permute(module: &Module, entry: &str) -> Result<Outcome, HarnessError> {
    let d = data()?;
    let (e, c) = (MOE_EXPERTS as usize, d.perm.capacity as usize);
    let mut dev = Device::new();
    let indices = dev.upload(&d.gating.indices);
    // Pre-filled with u32::MAX so a slot the kernel never writes cannot pass as a token.
    let token_ids = dev.upload(&vec![u32::MAX; e * c]);
    let counts = dev.upload(&vec![0u32; e]);
    let launch = Launch {
        entry,
        grid: [MOE_TOKENS.div_ceil(BLOCK), 1, 1],
        block: [BLOCK, 1, 1],
        args: vec![
            Arg::Buffer(indices),
            Arg::Buffer(token_ids),
            Arg::Buffer(counts),
            Arg::U32(MOE_TOKENS),
            Arg::U32(d.perm.capacity),
        ],
    };
    let report = launch.run(&mut dev, module)?;
    let got_counts: Vec<u32> = dev.download(counts)?;
    let got_ids: Vec<u32> = dev.download(token_ids)?;

    let mut problems = Vec::new();
    if got_counts != d.perm.routed {
        problems.push(format!(
            "counts {got_counts:?} ≠ routed pairs {:?}",
            d.perm.routed
        ));
    }
    let k = MOE_TOP_K as usize;
    // Full bins whose kept tokens differ from the reference's (first-come by token order).
    let mut other_drops = 0;
    for ex in 0..e {
        let kept = d.perm.counts[ex] as usize;
        let mut bin: Vec<u32> = got_ids[ex * c..ex * c + kept].to_vec();
        bin.sort_unstable();
        let distinct = bin.windows(2).all(|p| p[0] != p[1]);
        let routed_here = bin.iter().all(|&t| {
            (t as usize) < d.tokens
                && d.gating.indices[t as usize * k..(t as usize + 1) * k].contains(&(ex as u32))
        });
        let mut want: Vec<u32> = d.perm.token_ids[ex * c..ex * c + kept].to_vec();
        want.sort_unstable();
        if !(distinct && routed_here) {
            problems.push(format!("bin {ex} holds tokens not routed to it: {bin:?}"));
        } else if bin != want {
            if d.perm.routed[ex] as usize <= c {
                problems.push(format!("bin {ex} = {bin:?}, reference {want:?}"));
            } else {
                other_drops += 1;
            }
        }
    }
    let verdict = if problems.is_empty() {
        Verdict::Match {
            worst: None,
            tolerance: format!(
                "bins equal the reference's as sets, except that which of the {} pairs over \
                 capacity {c} are dropped depends on atomic order ({other_drops} full bins \
                 kept other tokens, each kept set valid); counts = routed",
                d.perm.dropped
            ),
        }
    } else {
        Verdict::Mismatch(problems.join("; "))
    };
    Ok(Outcome {
        report,
        outputs: (d.tokens * k) as u64,
        verdict,
        observations: Vec::new(),
        launch: launch.describe(),
    })
}

/// Expert GEMM: block 16×16, grid `(⌈C / 16⌉, F / 16, E)`.
pub fn expert_gemm(module: &Module, entry: &str) -> Result<Outcome, HarnessError> {
    let d = data()?;
    let (c, f, k) = (
        d.perm.capacity as usize,
        MOE_EXPERT_DIM as usize,
        MOE_TOP_K as usize,
    );
    let scale = reference::expert_forward(
        &d.cfg,
        &abs(&d.x),
        d.tokens,
        &d.perm,
        ExpertWeights::Linear { w: &abs(&d.w) },
    )
    .map_err(reference_error)?;
    let run = |options: &Options| -> Result<(ptxforge_sim::LaunchReport, Vec<f32>, String), HarnessError> {
        let mut dev = Device::new();
        let x = dev.upload(&narrow(&d.x));
        let w = dev.upload(&narrow(&d.w));
        // The documented `[total_tokens, expert_dim]` with total_tokens = T; zeroed so rows
        // nobody writes read as 0 rather than tripping initcheck on the host side.
        let out = dev.upload(&vec![0.0f32; d.tokens * f]);
        let token_ids = dev.upload(&d.perm.token_ids);
        let counts = dev.upload(&d.perm.routed);
        let launch = Launch {
            entry,
            grid: [
                d.perm.capacity.div_ceil(GEMM_TILE),
                MOE_EXPERT_DIM.div_ceil(GEMM_TILE),
                MOE_EXPERTS,
            ],
            block: [GEMM_TILE, GEMM_TILE, 1],
            args: vec![
                Arg::Buffer(x),
                Arg::Buffer(w),
                Arg::Buffer(out),
                Arg::Buffer(token_ids),
                Arg::Buffer(counts),
                Arg::U32(d.perm.capacity),
            ],
        };
        let report = launch.run_with(&mut dev, module, options)?;
        Ok((report, dev.download(out)?, launch.describe()))
    };
    let (report, got, launch) = run(&Options::default())?;
    let shuffled = Options {
        shuffle_blocks: Some(0x5EED),
        ..Options::default()
    };
    let (_, got_shuffled, _) = run(&shuffled)?;

    // Which of its experts' results (if any) each token row holds.
    let tol = Tolerance::F32_SUM;
    let mut holds = vec![0usize; k + 1]; // [k] = none
    let mut worst = 0.0f64;
    for t in 0..d.tokens {
        let row = &got[t * f..(t + 1) * f];
        let row_error = |j: usize| -> Option<f64> {
            let slot = d.perm.slot_of[t * k + j];
            if slot == u32::MAX {
                return None;
            }
            let base = (d.gating.indices[t * k + j] as usize * c + slot as usize) * f;
            let r = row
                .iter()
                .enumerate()
                .map(|(i, &g)| tol.ratio(f64::from(g), d.y[base + i], scale[base + i]))
                .fold(0.0, f64::max);
            (r <= 1.0).then_some(r)
        };
        match (0..k).find_map(|j| row_error(j).map(|r| (j, r))) {
            Some((j, r)) => {
                holds[j] += 1;
                worst = worst.max(r);
            }
            None => holds[k] += 1,
        }
    }
    let kept_pairs: usize = d.perm.counts.iter().map(|&n| n as usize).sum();
    let lost = kept_pairs - (d.tokens - holds[k]);
    let verdict = if lost == 0 && holds[k] == 0 {
        Verdict::Match {
            worst: Some(worst),
            tolerance: format!("every row = its expert's result, {}", tol.describe()),
        }
    } else {
        let per_k: Vec<String> = (0..k)
            .map(|j| format!("{} rows hold their k={j} expert's result", holds[j]))
            .collect();
        Verdict::Mismatch(format!(
            "output is indexed by token id, so a token's {k} experts write the same row: {}, \
             {} rows neither; {lost} of {kept_pairs} kept (token, expert) results are lost",
            per_k.join(", "),
            holds[k]
        ))
    };
    let differing = got
        .chunks(f)
        .zip(got_shuffled.chunks(f))
        .filter(|(a, b)| a != b)
        .count();
    let mut observations = Vec::new();
    if differing > 0 {
        observations.push(format!(
            "result depends on block order: {differing} of {} output rows differ between \
             linear and shuffled block order (a write-write race on hardware)",
            d.tokens
        ));
    }
    Ok(Outcome {
        report,
        outputs: (kept_pairs * f) as u64,
        verdict,
        observations,
        launch,
    })
}

/// Unpermute: one thread per output element, `T·F / 256` blocks.
pub fn unpermute(module: &Module, entry: &str) -> Result<Outcome, HarnessError> {
    let d = data()?;
    let f = MOE_EXPERT_DIM as usize;
    let want = reference::unpermute(&d.cfg, &d.y, &d.gating, &d.perm, d.tokens)
        .map_err(reference_error)?;
    let abs_gating = Gating {
        indices: d.gating.indices.clone(),
        weights: abs(&d.gating.weights),
    };
    let scale = reference::unpermute(&d.cfg, &abs(&d.y), &abs_gating, &d.perm, d.tokens)
        .map_err(reference_error)?;
    let mut dev = Device::new();
    let y = dev.upload(&narrow(&d.y));
    let out = dev.alloc(d.tokens * f * 4);
    let indices = dev.upload(&d.gating.indices);
    // Weights rounded to f32 as a kernel would store them; the reference keeps f64.
    let weights = dev.upload(&narrow(&d.gating.weights));
    let token_ids = dev.upload(&d.perm.token_ids);
    let counts = dev.upload(&d.perm.routed);
    let elements = MOE_TOKENS * MOE_EXPERT_DIM;
    let launch = Launch {
        entry,
        grid: [elements.div_ceil(BLOCK), 1, 1],
        block: [BLOCK, 1, 1],
        args: vec![
            Arg::Buffer(y),
            Arg::Buffer(out),
            Arg::Buffer(indices),
            Arg::Buffer(weights),
            Arg::Buffer(token_ids),
            Arg::Buffer(counts),
            Arg::U32(MOE_TOKENS),
            Arg::U32(d.perm.capacity),
        ],
    };
    let report = launch.run(&mut dev, module)?;
    let got: Vec<f32> = dev.download(out)?;
    Ok(Outcome {
        verdict: Tolerance::F32_SUM.verdict("out", &got, &want, &scale),
        report,
        outputs: u64::from(elements),
        observations: Vec::new(),
        launch: launch.describe(),
    })
}
