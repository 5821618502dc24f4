//! Host reference of the MoE layer, phase by phase, in f64.
//!
//! Data are `f64` slices (convert f16/bf16/f32 test data with `templates::testing::to_f64`);
//! layouts are row-major. `T` tokens, `E = experts`, `K = top_k`, `H = hidden`,
//! `F = expert_dim`, `C = capacity(T)`.
//!
//! Tolerance against kernels (which compute in f32, or f64 for f64): gating weights ≤ 1e-5
//! absolute (f32) / 1e-2 (half types); expert outputs ≤ 1e-5 relative to `Σ|terms|` for f32 and
//! ≤ 2e-2 for bf16 (1e-2 f16), more for swiglu whose intermediate `[E·C, F]` may be stored
//! rounded. Routing (indices, slots) must match exactly unless two logits of a token tie within
//! rounding; see [`gating`].

use super::config::{Ffn, MoeConfig};

/// Mismatched arguments to a reference phase.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MoeRefError {
    #[error("`{name}` has {actual} elements, expected {expected}")]
    Length {
        name: &'static str,
        expected: usize,
        actual: usize,
    },
    #[error("weights are for ffn = {given}, the config says ffn = {expected}")]
    FfnMismatch { expected: Ffn, given: Ffn },
    #[error("indices[{position}] = {expert} is not an expert index (experts = {experts})")]
    ExpertOutOfRange {
        position: usize,
        expert: u32,
        experts: u32,
    },
    #[error("token count {tokens} does not fit u32")]
    TooManyTokens { tokens: usize },
}

fn check(name: &'static str, expected: usize, actual: usize) -> Result<(), MoeRefError> {
    if expected == actual {
        Ok(())
    } else {
        Err(MoeRefError::Length {
            name,
            expected,
            actual,
        })
    }
}

/// Routing of every token: `indices [T, K]` (u32 expert ids) and `weights [T, K]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Gating {
    pub indices: Vec<u32>,
    pub weights: Vec<f64>,
}

/// Gating: `p[t] = softmax(logits[t])` over the `E` experts (max-subtracted:
/// `p_e = exp(l_e − max) / Σ exp(l − max)`), then the `K` most probable experts in descending
/// order, ties to the lower index, with weights `p_e / Σ_{selected} p` when
/// `normalize_topk` (sum 1) or the raw `p_e` otherwise. Never writes `logits`.
///
/// Selection compares logits, which orders experts exactly as the exact probabilities do (the
/// softmax is strictly increasing); probabilities rounded to f32 can collide for distinct
/// logits, so a kernel should also select on logits.
pub fn gating(cfg: &MoeConfig, logits: &[f64], tokens: usize) -> Result<Gating, MoeRefError> {
    let e = cfg.experts as usize;
    let k = cfg.top_k as usize;
    check("logits", tokens * e, logits.len())?;
    let mut indices = Vec::with_capacity(tokens * k);
    let mut weights = Vec::with_capacity(tokens * k);
    for row in logits.chunks(e.max(1)).take(tokens) {
        let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let exps: Vec<f64> = row.iter().map(|&l| (l - max).exp()).collect();
        let total: f64 = exps.iter().sum();
        // Stable sort by descending logit keeps ties in ascending index order.
        let mut order: Vec<usize> = (0..e).collect();
        order.sort_by(|&a, &b| row[b].total_cmp(&row[a]));
        let chosen = &order[..k.min(e)];
        let chosen_sum: f64 = chosen.iter().map(|&i| exps[i]).sum();
        for &i in chosen {
            indices.push(i as u32);
            weights.push(if cfg.normalize_topk {
                exps[i] / chosen_sum
            } else {
                exps[i] / total
            });
        }
    }
    Ok(Gating { indices, weights })
}

/// Slot assignment of the routed pairs to the experts' bins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permutation {
    /// Slots per bin `C` (`T` when dropless).
    pub capacity: u32,
    /// `[E]`: the first row of bin `e` in the permuted expert outputs: the exclusive prefix sum
    /// of `counts` when dropless (bins packed), `e·C` when capacity-limited.
    pub offsets: Vec<u32>,
    /// Rows of the permuted expert outputs: `T·K` when dropless, `E·C` otherwise.
    pub rows: u32,
    /// `[E, C]`: the token in each slot, `u32::MAX` for an empty slot.
    pub token_ids: Vec<u32>,
    /// `[E]`: pairs kept in each bin, `min(routed, C)`.
    pub counts: Vec<u32>,
    /// `[E]`: pairs routed to each expert, kept or not.
    pub routed: Vec<u32>,
    /// `[T, K]`: the slot of pair `(t, k)` in bin `indices[t, k]`, `u32::MAX` when dropped.
    pub slot_of: Vec<u32>,
    /// Pairs dropped because their bin was full, `Σ (routed − counts)`.
    pub dropped: u32,
}

/// Permute: pairs `(t, k)` are visited token-major (`t` ascending, then `k` ascending); pair
/// `(t, k)` routed to `e = indices[t, k]` gets slot `s` = the number of earlier pairs routed to
/// `e`, and is dropped when `s ≥ C` (`C = cfg.capacity(T)`, which is `T` when dropless, so
/// nothing is dropped there).
///
/// Kernels assigning slots with atomics produce some other order; such a kernel must be
/// compared per bin as a set, or assign slots deterministically (e.g. by a scan) to match this.
pub fn permute(
    cfg: &MoeConfig,
    indices: &[u32],
    tokens: usize,
) -> Result<Permutation, MoeRefError> {
    let e = cfg.experts as usize;
    let k = cfg.top_k as usize;
    check("indices", tokens * k, indices.len())?;
    let t32 = u32::try_from(tokens).map_err(|_| MoeRefError::TooManyTokens { tokens })?;
    let capacity = u32::try_from(cfg.capacity(t32)).unwrap_or(u32::MAX);
    let c = capacity as usize;
    let mut token_ids = vec![u32::MAX; e * c];
    let mut routed = vec![0u32; e];
    let mut slot_of = vec![u32::MAX; tokens * k];
    for (pair, &expert) in indices.iter().enumerate() {
        let ex = expert as usize;
        if ex >= e {
            return Err(MoeRefError::ExpertOutOfRange {
                position: pair,
                expert,
                experts: cfg.experts,
            });
        }
        let slot = routed[ex];
        routed[ex] += 1;
        if slot < capacity {
            token_ids[ex * c + slot as usize] = (pair / k) as u32;
            slot_of[pair] = slot;
        }
    }
    let counts: Vec<u32> = routed.iter().map(|&r| r.min(capacity)).collect();
    let dropped = routed.iter().zip(&counts).map(|(r, c)| r - c).sum();
    let (offsets, rows) = if cfg.is_dropless() {
        let offsets = counts
            .iter()
            .scan(0u32, |next, &count| {
                let start = *next;
                *next += count;
                Some(start)
            })
            .collect();
        (offsets, (tokens * k) as u32)
    } else {
        (
            (0..cfg.experts).map(|ex| ex * capacity).collect(),
            cfg.experts * capacity,
        )
    };
    Ok(Permutation {
        capacity,
        offsets,
        rows,
        token_ids,
        counts,
        routed,
        slot_of,
        dropped,
    })
}

impl Permutation {
    /// Whether each row of the permuted outputs holds a routed pair (`s < counts[e]` of its
    /// bin): the rows the expert kernels write.
    pub fn filled_rows(&self) -> Vec<bool> {
        let mut filled = vec![false; self.rows as usize];
        for (&start, &count) in self.offsets.iter().zip(&self.counts) {
            for row in start..start + count {
                filled[row as usize] = true;
            }
        }
        filled
    }
}

/// Expert weights, row-major, matching `cfg.ffn`.
#[derive(Debug, Clone, Copy)]
pub enum ExpertWeights<'a> {
    /// `w [E, F, H]`.
    Linear { w: &'a [f64] },
    /// `w1, w3 [E, F, H]`, `w2 [E, H, F]`.
    Swiglu {
        w1: &'a [f64],
        w3: &'a [f64],
        w2: &'a [f64],
    },
}

/// `silu(x) = x · σ(x) = x / (1 + e^(−x))`.
pub fn silu(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Expert compute in the permuted layout `Y [rows, out_width]`: for every filled slot `s` of
/// bin `e` with token `t = token_ids[e·C + s]` and `x = X[t]` (`X [T, H]`), row
/// `r = offsets[e] + s`:
/// - linear: `Y[r] = W[e] · x` (`[F]`);
/// - swiglu: `Y[r] = W2[e] · (silu(W1[e] · x) ⊙ (W3[e] · x))` (`[H]`).
///
/// Rows of empty slots are zero here; the kernels leave them unwritten (see
/// [`Permutation::filled_rows`]).
pub fn expert_forward(
    cfg: &MoeConfig,
    x: &[f64],
    tokens: usize,
    perm: &Permutation,
    weights: ExpertWeights<'_>,
) -> Result<Vec<f64>, MoeRefError> {
    let (e, h, f) = (
        cfg.experts as usize,
        cfg.hidden as usize,
        cfg.expert_dim as usize,
    );
    let c = perm.capacity as usize;
    let width = cfg.out_width() as usize;
    check("x", tokens * h, x.len())?;
    check("token_ids", e * c, perm.token_ids.len())?;
    match (cfg.ffn, weights) {
        (Ffn::Linear, ExpertWeights::Linear { w }) => check("w", e * f * h, w.len())?,
        (Ffn::Swiglu, ExpertWeights::Swiglu { w1, w3, w2 }) => {
            check("w1", e * f * h, w1.len())?;
            check("w3", e * f * h, w3.len())?;
            check("w2", e * h * f, w2.len())?;
        }
        (expected, ExpertWeights::Linear { .. }) => {
            return Err(MoeRefError::FfnMismatch {
                expected,
                given: Ffn::Linear,
            })
        }
        (expected, ExpertWeights::Swiglu { .. }) => {
            return Err(MoeRefError::FfnMismatch {
                expected,
                given: Ffn::Swiglu,
            })
        }
    }
    let mut y = vec![0.0; perm.rows as usize * width];
    for ex in 0..e {
        for s in 0..c {
            let t = perm.token_ids[ex * c + s];
            if t == u32::MAX || t as usize >= tokens {
                continue;
            }
            let xr = &x[t as usize * h..(t as usize + 1) * h];
            let r = perm.offsets[ex] as usize + s;
            let out = &mut y[r * width..(r + 1) * width];
            match weights {
                ExpertWeights::Linear { w } => {
                    for (j, o) in out.iter_mut().enumerate() {
                        let row = (ex * f + j) * h;
                        *o = dot(&w[row..row + h], xr);
                    }
                }
                ExpertWeights::Swiglu { w1, w3, w2 } => {
                    let inner: Vec<f64> = (0..f)
                        .map(|j| {
                            let row = (ex * f + j) * h;
                            silu(dot(&w1[row..row + h], xr)) * dot(&w3[row..row + h], xr)
                        })
                        .collect();
                    for (j, o) in out.iter_mut().enumerate() {
                        let row = (ex * h + j) * f;
                        *o = dot(&w2[row..row + f], &inner);
                    }
                }
            }
        }
    }
    Ok(y)
}

/// Unpermute: `out[t] = Σ_k weights[t, k] · Y[offsets[indices[t, k]] + slot_of[t, k]]` over the
/// non-dropped `k` (ascending `k`), `out [T, out_width]`; a token whose pairs were all dropped
/// gets a zero row.
pub fn unpermute(
    cfg: &MoeConfig,
    y: &[f64],
    gating: &Gating,
    perm: &Permutation,
    tokens: usize,
) -> Result<Vec<f64>, MoeRefError> {
    let e = cfg.experts as usize;
    let k = cfg.top_k as usize;
    let c = perm.capacity as usize;
    let width = cfg.out_width() as usize;
    check("y", perm.rows as usize * width, y.len())?;
    check("indices", tokens * k, gating.indices.len())?;
    check("weights", tokens * k, gating.weights.len())?;
    check("slot_of", tokens * k, perm.slot_of.len())?;
    let mut out = vec![0.0; tokens * width];
    for t in 0..tokens {
        let o = &mut out[t * width..(t + 1) * width];
        for j in 0..k {
            let pair = t * k + j;
            let slot = perm.slot_of[pair];
            let ex = gating.indices[pair] as usize;
            if slot == u32::MAX || ex >= e || slot as usize >= c {
                continue;
            }
            let row = (perm.offsets[ex] as usize + slot as usize) * width;
            let wgt = gating.weights[pair];
            for (d, yv) in o.iter_mut().zip(&y[row..row + width]) {
                *d += wgt * yv;
            }
        }
    }
    Ok(out)
}

/// Everything [`forward`] computes.
#[derive(Debug, Clone, PartialEq)]
pub struct MoeOutput {
    /// `[T, out_width]`.
    pub out: Vec<f64>,
    pub gating: Gating,
    pub permutation: Permutation,
    /// `[rows, out_width]`, the permuted expert outputs.
    pub expert_out: Vec<f64>,
}

impl MoeOutput {
    /// Per-expert kept counts.
    pub fn counts(&self) -> &[u32] {
        &self.permutation.counts
    }

    /// Total dropped pairs.
    pub fn dropped(&self) -> u32 {
        self.permutation.dropped
    }
}

/// The whole layer: gating → permute → expert compute → unpermute, for `x [T, H]` and
/// `logits [T, E]`.
pub fn forward(
    cfg: &MoeConfig,
    x: &[f64],
    logits: &[f64],
    weights: ExpertWeights<'_>,
    tokens: usize,
) -> Result<MoeOutput, MoeRefError> {
    let gating = gating(cfg, logits, tokens)?;
    let permutation = permute(cfg, &gating.indices, tokens)?;
    let expert_out = expert_forward(cfg, x, tokens, &permutation, weights)?;
    let out = unpermute(cfg, &expert_out, &gating, &permutation, tokens)?;
    Ok(MoeOutput {
        out,
        gating,
        permutation,
        expert_out,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::templates::testing::SplitMix64;

    fn cfg(e: u32, k: u32, h: u32, f: u32) -> MoeConfig {
        MoeConfig::new(e, k, h, f)
    }

    #[test]
    fn gating_hand_computed() {
        let c = cfg(3, 2, 1, 1);
        let logits = [0.0, (2.0f64).ln(), 0.0];
        let before = logits;
        let g = gating(&c, &logits, 1).unwrap();
        assert_eq!(logits, before);
        // p = [1/4, 1/2, 1/4]; top-2: expert 1, then the tie 0 vs 2 → 0.
        assert_eq!(g.indices, vec![1, 0]);
        assert!((g.weights[0] - 2.0 / 3.0).abs() < 1e-15);
        assert!((g.weights[1] - 1.0 / 3.0).abs() < 1e-15);
        let raw = MoeConfig {
            normalize_topk: false,
            ..c
        };
        let g = gating(&raw, &logits, 1).unwrap();
        assert!((g.weights[0] - 0.5).abs() < 1e-15 && (g.weights[1] - 0.25).abs() < 1e-15);
    }

    #[test]
    fn gating_ties_go_to_lower_index_and_weights_sum_to_one() {
        let c = cfg(4, 3, 1, 1);
        let g = gating(&c, &[5.0; 4], 1).unwrap();
        assert_eq!(g.indices, vec![0, 1, 2]);
        let mut rng = SplitMix64::new(4);
        let c = cfg(16, 4, 1, 1);
        let logits = rng.vec_f64(16 * 50, -8.0, 8.0);
        let g = gating(&c, &logits, 50).unwrap();
        for (t, w) in g.weights.chunks(4).enumerate() {
            assert!((w.iter().sum::<f64>() - 1.0).abs() < 1e-12);
            assert!(w.windows(2).all(|p| p[0] >= p[1]));
            let idx = &g.indices[t * 4..t * 4 + 4];
            let row = &logits[t * 16..t * 16 + 16];
            let min_sel = idx
                .iter()
                .map(|&i| row[i as usize])
                .fold(f64::INFINITY, f64::min);
            let unselected_max = (0..16u32)
                .filter(|i| !idx.contains(i))
                .map(|i| row[i as usize])
                .fold(f64::NEG_INFINITY, f64::max);
            assert!(min_sel >= unselected_max);
        }
        // Huge logits do not overflow thanks to max subtraction.
        let g = gating(&cfg(2, 1, 1, 1), &[1000.0, 999.0], 1).unwrap();
        assert_eq!(g.indices, vec![0]);
        assert_eq!(g.weights, vec![1.0]);
    }

    #[test]
    fn permute_is_token_major_and_counts_drops() {
        // E = 2, K = 2, T = 4, capacity_factor 0.5: C = ceil(0.5 · 4 · 2 / 2) = 2.
        let c = MoeConfig {
            capacity_factor: Some(0.5),
            ..cfg(2, 2, 1, 1)
        };
        let indices = [0, 1, 1, 0, 0, 1, 1, 0];
        let p = permute(&c, &indices, 4).unwrap();
        assert_eq!(p.capacity, 2);
        assert_eq!(p.token_ids, vec![0, 1, 0, 1]);
        assert_eq!(
            p.slot_of,
            vec![0, 0, 1, 1, u32::MAX, u32::MAX, u32::MAX, u32::MAX]
        );
        assert_eq!(p.counts, vec![2, 2]);
        assert_eq!(p.routed, vec![4, 4]);
        assert_eq!(p.dropped, 4);
        // Partly filled bins leave u32::MAX slots.
        let c = MoeConfig {
            capacity_factor: Some(1.25), // capacity 1.25 · 2 · 1 / 4 → 1
            ..cfg(4, 1, 1, 1)
        };
        let p = permute(&c, &[2, 2], 2).unwrap();
        assert_eq!(p.token_ids, vec![u32::MAX, u32::MAX, 0, u32::MAX]);
        assert_eq!(p.dropped, 1);
        assert_eq!(
            permute(&c, &[7, 0], 2),
            Err(MoeRefError::ExpertOutOfRange {
                position: 0,
                expert: 7,
                experts: 4
            })
        );
    }

    #[test]
    fn dropless_packs_bins_by_their_counts() {
        // E = 3, K = 2, T = 3, every token on expert 2: nothing dropped, bins packed.
        let c = cfg(3, 2, 1, 1);
        let p = permute(&c, &[2, 0, 2, 1, 0, 2], 3).unwrap();
        assert_eq!(p.capacity, 3);
        assert_eq!((p.dropped, p.rows), (0, 6));
        assert_eq!(p.counts, vec![2, 1, 3]);
        assert_eq!(p.offsets, vec![0, 2, 3]);
        assert_eq!(p.slot_of, vec![0, 0, 1, 0, 1, 2]);
        assert!(p.filled_rows().iter().all(|&f| f));
    }

    #[test]
    fn linear_layer_hand_computed() {
        // E = 2, K = 1, H = 2, F = 1; W[0] = [1, 0], W[1] = [0, 2]; cf 2 → C = T.
        let c = MoeConfig {
            capacity_factor: Some(2.0),
            ..cfg(2, 1, 2, 1)
        };
        let x = [1.0, 2.0, 3.0, 4.0];
        let logits = [1.0, 0.0, 0.0, 1.0];
        let w = [1.0, 0.0, 0.0, 2.0];
        let out = forward(&c, &x, &logits, ExpertWeights::Linear { w: &w }, 2).unwrap();
        assert_eq!(out.out, vec![1.0, 8.0]);
        assert_eq!(out.counts(), &[1, 1]);
        assert_eq!(out.dropped(), 0);
        // Y layout [E·C, F]: bin 0 slot 0 = token 0, bin 1 slot 0 = token 1, rest zero.
        assert_eq!(out.expert_out, vec![1.0, 0.0, 8.0, 0.0]);
    }

    #[test]
    fn swiglu_matches_dense_formula_without_drops() {
        let (e, k, h, f, t) = (4usize, 2usize, 3usize, 5usize, 6usize);
        let c = MoeConfig {
            ffn: Ffn::Swiglu,
            capacity_factor: Some(4.0), // C = 4 · 6 · 2 / 4 = 12 ≥ T: nothing dropped
            ..cfg(e as u32, k as u32, h as u32, f as u32)
        };
        let mut rng = SplitMix64::new(5);
        let x = rng.vec_f64(t * h, -1.0, 1.0);
        let logits = rng.vec_f64(t * e, -2.0, 2.0);
        let w1 = rng.vec_f64(e * f * h, -1.0, 1.0);
        let w3 = rng.vec_f64(e * f * h, -1.0, 1.0);
        let w2 = rng.vec_f64(e * h * f, -1.0, 1.0);
        let weights = ExpertWeights::Swiglu {
            w1: &w1,
            w3: &w3,
            w2: &w2,
        };
        let out = forward(&c, &x, &logits, weights, t).unwrap();
        assert_eq!(out.dropped(), 0);
        assert_eq!(out.counts().iter().sum::<u32>(), (t * k) as u32);
        for tok in 0..t {
            let xr = &x[tok * h..(tok + 1) * h];
            for j in 0..h {
                let mut want = 0.0;
                for kk in 0..k {
                    let ex = out.gating.indices[tok * k + kk] as usize;
                    let mut acc = 0.0;
                    for i in 0..f {
                        let a = dot(&w1[(ex * f + i) * h..(ex * f + i + 1) * h], xr);
                        let b = dot(&w3[(ex * f + i) * h..(ex * f + i + 1) * h], xr);
                        acc += w2[(ex * h + j) * f + i] * silu(a) * b;
                    }
                    want += out.gating.weights[tok * k + kk] * acc;
                }
                assert!((out.out[tok * h + j] - want).abs() < 1e-12);
            }
        }
    }

    #[test]
    fn argument_errors() {
        let c = cfg(2, 1, 2, 1);
        assert!(matches!(
            gating(&c, &[0.0; 3], 2),
            Err(MoeRefError::Length { name: "logits", .. })
        ));
        let p = permute(&c, &[0, 1], 2).unwrap();
        let swi = ExpertWeights::Swiglu {
            w1: &[],
            w3: &[],
            w2: &[],
        };
        assert_eq!(
            expert_forward(&c, &[0.0; 4], 2, &p, swi),
            Err(MoeRefError::FfnMismatch {
                expected: Ffn::Linear,
                given: Ffn::Swiglu
            })
        );
    }
}
