//! Host reference GEMMs with NF4 weights.
//!
//! Both take the weight `W [n, k]` in the [`super::format`] layout, dequantise it once
//! (`Ŵ = NF4_CODE[code] · absmax`, f32) and multiply in f32 with sequential accumulation over the
//! reduction index. Activations are f32 here; f16/bf16 callers convert with `half` first (the
//! kernels also compute in f32).
//!
//! Tolerance: a kernel sums in a different order; compare with
//! `|c − ref| ≤ 1e-5 · Σ|a·ŵ| + 1e-6` for f32 activations and outputs, and about `1e-2 ·
//! Σ|a·ŵ|` (f16) or `2e-2 · Σ|a·ŵ|` (bf16) when the output is rounded to a half type.

use super::format::{dequantize, Nf4FormatError, Nf4Weights};

/// Shape mismatch between the arguments of a reference GEMM.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Nf4RefError {
    #[error(transparent)]
    Format(#[from] Nf4FormatError),
    #[error("`{name}` has {actual} elements, expected {expected}")]
    Length {
        name: &'static str,
        expected: usize,
        actual: usize,
    },
}

fn check(name: &'static str, expected: usize, actual: usize) -> Result<(), Nf4RefError> {
    if expected == actual {
        Ok(())
    } else {
        Err(Nf4RefError::Length {
            name,
            expected,
            actual,
        })
    }
}

/// Forward: `C [m, n] = A [m, k] · Ŵᵀ`, i.e. `C[i, j] = Σ_l A[i, l] · Ŵ[j, l]` (f32, `l`
/// ascending).
pub fn forward(
    a: &[f32],
    m: usize,
    w: &Nf4Weights,
    n: usize,
    k: usize,
) -> Result<Vec<f32>, Nf4RefError> {
    check("a", m * k, a.len())?;
    check("w", n * k, w.len)?;
    let wd = dequantize(w)?;
    let mut c = vec![0.0f32; m * n];
    for i in 0..m {
        let row = &a[i * k..(i + 1) * k];
        for j in 0..n {
            let wrow = &wd[j * k..(j + 1) * k];
            c[i * n + j] = row.iter().zip(wrow).fold(0.0f32, |s, (x, y)| s + x * y);
        }
    }
    Ok(c)
}

/// Backward with respect to the input: `G_A [m, k] = G_C [m, n] · Ŵ`, i.e.
/// `G_A[i, l] = Σ_j G_C[i, j] · Ŵ[j, l]` (f32, `j` ascending).
pub fn backward_input(
    g_c: &[f32],
    m: usize,
    w: &Nf4Weights,
    n: usize,
    k: usize,
) -> Result<Vec<f32>, Nf4RefError> {
    check("g_c", m * n, g_c.len())?;
    check("w", n * k, w.len)?;
    let wd = dequantize(w)?;
    let mut g_a = vec![0.0f32; m * k];
    for i in 0..m {
        for l in 0..k {
            let mut s = 0.0f32;
            for j in 0..n {
                s += g_c[i * n + j] * wd[j * k + l];
            }
            g_a[i * k + l] = s;
        }
    }
    Ok(g_a)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::templates::nf4::format::{quantize, NF4_CODE};
    use crate::templates::testing::SplitMix64;

    #[test]
    fn hand_computed_forward_and_backward() {
        // W [2, 4] = [[1, 0, -1, 0.5626…], [-1, 1, 0, 0]], block 4 (absmax 1, exact codes).
        let w = [1.0, 0.0, -1.0, NF4_CODE[13], -1.0, 1.0, 0.0, 0.0];
        let q = quantize(&w, 4).unwrap();
        let a = [1.0, 2.0, 3.0, 4.0];
        let c = forward(&a, 1, &q, 2, 4).unwrap();
        assert_eq!(c, vec![1.0 - 3.0 + 4.0 * NF4_CODE[13], 1.0]);
        let g = backward_input(&[1.0, 2.0], 1, &q, 2, 4).unwrap();
        assert_eq!(g, vec![-1.0, 2.0, -1.0, NF4_CODE[13]]);
    }

    #[test]
    fn adjoint_identity() {
        // ⟨A·Ŵᵀ, G⟩ = ⟨A, G·Ŵ⟩
        let (m, n, k) = (3, 5, 8);
        let mut rng = SplitMix64::new(3);
        let q = quantize(&rng.vec_f32(n * k, -1.0, 1.0), 8).unwrap();
        let a = rng.vec_f32(m * k, -1.0, 1.0);
        let g = rng.vec_f32(m * n, -1.0, 1.0);
        let c = forward(&a, m, &q, n, k).unwrap();
        let ga = backward_input(&g, m, &q, n, k).unwrap();
        let lhs: f64 = c
            .iter()
            .zip(&g)
            .map(|(x, y)| f64::from(*x) * f64::from(*y))
            .sum();
        let rhs: f64 = a
            .iter()
            .zip(&ga)
            .map(|(x, y)| f64::from(*x) * f64::from(*y))
            .sum();
        assert!((lhs - rhs).abs() < 1e-4, "{lhs} vs {rhs}");
    }

    #[test]
    fn shape_errors() {
        let q = quantize(&[1.0; 8], 4).unwrap();
        assert_eq!(
            forward(&[1.0; 3], 1, &q, 2, 4),
            Err(Nf4RefError::Length {
                name: "a",
                expected: 4,
                actual: 3
            })
        );
        assert!(matches!(
            backward_input(&[1.0; 2], 1, &q, 3, 4),
            Err(Nf4RefError::Length { name: "g_c", .. })
        ));
    }
}
