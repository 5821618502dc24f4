//! Host reference of attention forward: naive `softmax(Q·Kᵀ·scale) · V` in f64.
//!
//! Data are `f64` slices (convert test data with `templates::testing::to_f64`). Layouts (see
//! [`AttentionShape`]): `Q, O [B, Hq, Sq, D]`, `K, V [B, Hkv, Skv, D]`, `LSE [B, Hq, Sq]`.
//!
//! Tolerance against the online-softmax kernels: O within `1e-5` relative (f32; scores and
//! accumulators in f32), `2e-2` (bf16) / `1e-2` (f16) after rounding the output, `1e-12` for
//! f64; LSE within `1e-5 · max(1, |lse|)` (it is stored as f32 for every dtype).

use super::config::{AttentionShape, AttentionShapeError};

/// Mismatched arguments.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AttentionRefError {
    #[error(transparent)]
    Shape(#[from] AttentionShapeError),
    #[error("`{name}` has {actual} elements, expected {expected}")]
    Length {
        name: &'static str,
        expected: usize,
        actual: usize,
    },
}

/// The reference outputs.
#[derive(Debug, Clone, PartialEq)]
pub struct AttentionOutput {
    /// `O [B, Hq, Sq, D]`.
    pub o: Vec<f64>,
    /// `LSE [B, Hq, Sq]`, f32.
    pub lse: Vec<f32>,
}

impl AttentionOutput {
    /// Checks a kernel's LSE (and O of fully masked rows) against this reference: a fully
    /// masked row must be exactly `LSE = −∞` with `O = 0`, any other LSE within
    /// `tol · max(1, |LSE|)`. Returns the first mismatch.
    pub fn check_lse(&self, head_dim: u32, o: &[f64], lse: &[f32], tol: f64) -> Result<(), String> {
        let d = head_dim as usize;
        for (i, (&got, &exp)) in lse.iter().zip(&self.lse).enumerate() {
            if exp == f32::NEG_INFINITY {
                if got != exp || o[i * d..(i + 1) * d].iter().any(|&x| x != 0.0) {
                    return Err(format!("row {i} is fully masked: LSE {got}, O not all 0"));
                }
            } else {
                let (got, exp) = (f64::from(got), f64::from(exp));
                if (got - exp).abs() > tol * exp.abs().max(1.0) {
                    return Err(format!("LSE[{i}] = {got}, expected {exp}"));
                }
            }
        }
        Ok(())
    }
}

/// Whether query `i` may attend to key `j` under the causal mask, aligned to the bottom-right:
/// `j ≤ i + (seq_kv − seq_q)` (with `seq_q = seq_kv` the usual lower triangle; with
/// `seq_q = 1` the one query sees every key). Computed in i64, no underflow.
pub fn causal_visible(i: u32, j: u32, seq_q: u32, seq_kv: u32) -> bool {
    i64::from(j) <= i64::from(i) + i64::from(seq_kv) - i64::from(seq_q)
}

/// Attention forward, for every batch `b`, query head `h` (kv head `h / (Hq / Hkv)`) and query
/// row `i`:
///
/// ```text
/// s_j   = scale · Σ_d Q[b,h,i,d] · K[b,kv,j,d]         over visible keys j
/// LSE   = ln Σ_j exp(s_j)                               (natural log, max-subtracted)
/// O[i]  = Σ_j exp(s_j − LSE) · V[b,kv,j,:]
/// ```
///
/// A row with no visible key (causal with `seq_q > seq_kv`: rows `i < seq_q − seq_kv`) has
/// `O = 0` and `LSE = −∞`; the kernels must write exactly that.
pub fn forward(
    shape: &AttentionShape,
    head_dim: u32,
    q: &[f64],
    k: &[f64],
    v: &[f64],
    causal: bool,
    scale: f64,
) -> Result<AttentionOutput, AttentionRefError> {
    shape.validate(head_dim)?;
    let d = head_dim as usize;
    for (name, expected, actual) in [
        ("q", shape.q_len(head_dim), q.len()),
        ("k", shape.kv_len(head_dim), k.len()),
        ("v", shape.kv_len(head_dim), v.len()),
    ] {
        if expected != actual {
            return Err(AttentionRefError::Length {
                name,
                expected,
                actual,
            });
        }
    }
    let (sq, skv) = (shape.seq_q as usize, shape.seq_kv as usize);
    let mut o = vec![0.0; shape.q_len(head_dim)];
    let mut lse = vec![0.0f32; shape.lse_len()];
    let mut scores = vec![0.0; skv];
    for b in 0..shape.batch as usize {
        for h in 0..shape.heads_q as usize {
            let kv = shape.kv_head(h as u32) as usize;
            let kv_base = (b * shape.heads_kv as usize + kv) * skv * d;
            let q_row = (b * shape.heads_q as usize + h) * sq;
            for i in 0..sq {
                let qi = &q[(q_row + i) * d..(q_row + i + 1) * d];
                let visible = |j: usize| {
                    !causal || causal_visible(i as u32, j as u32, shape.seq_q, shape.seq_kv)
                };
                let mut max = f64::NEG_INFINITY;
                for (j, s) in scores.iter_mut().enumerate() {
                    if visible(j) {
                        let kj = &k[kv_base + j * d..kv_base + (j + 1) * d];
                        *s = scale * qi.iter().zip(kj).map(|(a, b)| a * b).sum::<f64>();
                        max = max.max(*s);
                    }
                }
                let out = &mut o[(q_row + i) * d..(q_row + i + 1) * d];
                if max == f64::NEG_INFINITY {
                    lse[q_row + i] = f32::NEG_INFINITY;
                    continue;
                }
                let total: f64 = (0..skv)
                    .filter(|&j| visible(j))
                    .map(|j| (scores[j] - max).exp())
                    .sum();
                let l = max + total.ln();
                lse[q_row + i] = l as f32;
                for j in (0..skv).filter(|&j| visible(j)) {
                    let p = (scores[j] - l).exp();
                    let vj = &v[kv_base + j * d..kv_base + (j + 1) * d];
                    for (x, y) in out.iter_mut().zip(vj) {
                        *x += p * y;
                    }
                }
            }
        }
    }
    Ok(AttentionOutput { o, lse })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::templates::testing::SplitMix64;

    fn shape(b: u32, hq: u32, hkv: u32, sq: u32, skv: u32) -> AttentionShape {
        AttentionShape {
            batch: b,
            heads_q: hq,
            heads_kv: hkv,
            seq_q: sq,
            seq_kv: skv,
        }
    }

    #[test]
    fn hand_computed_two_keys() {
        // D = 1 is not a kernel head_dim but the reference accepts any D ≥ 1.
        // q = 1, keys 0 and ln 3 (scale 1): p = [1/4, 3/4]; V = [4, 8] → 7; LSE = ln 4.
        let s = shape(1, 1, 1, 1, 2);
        let out = forward(&s, 1, &[1.0], &[0.0, 3f64.ln()], &[4.0, 8.0], false, 1.0).unwrap();
        assert!((out.o[0] - 7.0).abs() < 1e-12);
        assert!((f64::from(out.lse[0]) - 4f64.ln()).abs() < 1e-6);
    }

    #[test]
    fn rows_are_convex_combinations() {
        let s = shape(2, 4, 2, 5, 7);
        let d = 8;
        let mut rng = SplitMix64::new(6);
        let q = rng.vec_f64(s.q_len(d), -2.0, 2.0);
        let k = rng.vec_f64(s.kv_len(d), -2.0, 2.0);
        let ones = vec![1.0; s.kv_len(d)];
        for causal in [false, true] {
            let out = forward(&s, d, &q, &k, &ones, causal, 0.3).unwrap();
            assert!(out.o.iter().all(|x| (x - 1.0).abs() < 1e-12));
        }
    }

    #[test]
    fn causal_mask_alignment() {
        assert!(causal_visible(0, 0, 3, 3) && !causal_visible(0, 1, 3, 3));
        assert!(causal_visible(0, 4, 1, 5)); // decode: one query sees everything
        assert!(!causal_visible(0, 0, 5, 3) && causal_visible(2, 0, 5, 3));
        // Sq = 4 > Skv = 2: rows 0, 1 fully masked → O = 0, LSE = −inf.
        let s = shape(1, 1, 1, 4, 2);
        let mut rng = SplitMix64::new(7);
        let q = rng.vec_f64(s.q_len(2), -1.0, 1.0);
        let k = rng.vec_f64(s.kv_len(2), -1.0, 1.0);
        let v = rng.vec_f64(s.kv_len(2), -1.0, 1.0);
        let out = forward(&s, 2, &q, &k, &v, true, 1.0).unwrap();
        assert_eq!(&out.o[..4], &[0.0; 4]);
        assert_eq!(&out.lse[..2], &[f32::NEG_INFINITY; 2]);
        // Row 2 sees key 0 only: O = V[0], LSE = s_0.
        assert!((out.o[4] - v[0]).abs() < 1e-12 && (out.o[5] - v[1]).abs() < 1e-12);
        let s0 = q[4] * k[0] + q[5] * k[1];
        assert!((f64::from(out.lse[2]) - s0).abs() < 1e-6);
        // Row 3 sees both keys: same as the unmasked row.
        let full = forward(&s, 2, &q, &k, &v, false, 1.0).unwrap();
        assert_eq!(&out.o[6..], &full.o[6..]);
    }

    #[test]
    fn gqa_equals_mha_with_repeated_kv() {
        let (hq, hkv, skv, d) = (6u32, 2u32, 5u32, 4u32);
        let s = shape(1, hq, hkv, 3, skv);
        let mut rng = SplitMix64::new(8);
        let q = rng.vec_f64(s.q_len(d), -1.0, 1.0);
        let k = rng.vec_f64(s.kv_len(d), -1.0, 1.0);
        let v = rng.vec_f64(s.kv_len(d), -1.0, 1.0);
        let head = (skv * d) as usize;
        let repeat = |t: &[f64]| -> Vec<f64> {
            (0..hq as usize)
                .flat_map(|h| t[(h / 3) * head..(h / 3 + 1) * head].to_vec())
                .collect()
        };
        let mha = shape(1, hq, hq, 3, skv);
        let a = forward(&s, d, &q, &k, &v, true, 0.5).unwrap();
        let b = forward(&mha, d, &q, &repeat(&k), &repeat(&v), true, 0.5).unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn lse_matches_direct_sum() {
        let s = shape(1, 1, 1, 2, 3);
        let mut rng = SplitMix64::new(9);
        let q = rng.vec_f64(s.q_len(4), -1.0, 1.0);
        let k = rng.vec_f64(s.kv_len(4), -1.0, 1.0);
        let v = rng.vec_f64(s.kv_len(4), -1.0, 1.0);
        let out = forward(&s, 4, &q, &k, &v, false, 0.5).unwrap();
        for i in 0..2 {
            let sum: f64 = (0..3)
                .map(|j| {
                    let dot: f64 = (0..4).map(|x| q[i * 4 + x] * k[j * 4 + x]).sum();
                    (0.5 * dot).exp()
                })
                .sum();
            assert!((f64::from(out.lse[i]) - sum.ln()).abs() < 1e-6);
        }
    }

    #[test]
    fn argument_errors() {
        let s = shape(1, 2, 2, 1, 1);
        assert_eq!(
            forward(&s, 2, &[0.0; 3], &[0.0; 4], &[0.0; 4], false, 1.0),
            Err(AttentionRefError::Length {
                name: "q",
                expected: 4,
                actual: 3
            })
        );
        assert!(matches!(
            forward(&shape(1, 3, 2, 1, 1), 2, &[], &[], &[], false, 1.0),
            Err(AttentionRefError::Shape(_))
        ));
    }
}
