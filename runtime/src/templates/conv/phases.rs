//! Backward-data's phase (sub-pixel) decomposition of one axis: which taps reach which `dx`
//! positions at a stride above 1, so the NCHW CUDA-core `conv2d_bwd_data` multiplies only the
//! `gy` elements that contribute.
//!
//! Along an axis of stride `S`, dilation `D`, padding `P` and `K` taps, `dx[i]` receives
//! `gy[o]·w[k]` where `o·S = i + P − k·D`. Write `i = a·S + ρ` with the *phase* `ρ = i mod
//! S`: tap `k` reaches phase `ρ` only when `S` divides `ρ + P − k·D`, and then `o = a +
//! e(k)` with `e(k) = ceil((P − k·D) / S)` (the same for every `a`). So each phase is a
//! stride-1 correlation of the dense `gy` with its own taps, and every tap belongs to exactly
//! one phase (`ρ = (k·D − P) mod S`): the phases together run each tap once. A phase may have
//! no tap (when `S` and `D` share a factor, or `K < S`): its `dx` is 0.

/// One tap of a phase: kernel index `k` and the row (or column) of the phase's window it
/// reads, `offset = e(k) − e(K − 1) ≥ 0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PhaseTap {
    pub k: u32,
    pub offset: u32,
}

/// The phases of one axis (module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PhaseAxis {
    pub kernel: u32,
    pub stride: u32,
    pub padding: u32,
    pub dilation: u32,
}

impl PhaseAxis {
    /// `e(k) = ceil((P − k·D) / S)`: `gy` position `a + e(k)` feeds `dx` position `a·S + ρ`.
    fn reach(&self, k: u32) -> i64 {
        let num = i64::from(self.padding) - i64::from(k) * i64::from(self.dilation);
        -(-num).div_euclid(i64::from(self.stride.max(1)))
    }

    /// The lowest `e(k)`, `e(K − 1)`: a window for `dx` positions `a0·S + ρ ..` starts at
    /// `gy` position `a0 + low` for every phase.
    pub fn low(&self) -> i64 {
        self.reach(self.kernel.saturating_sub(1))
    }

    /// `gy` positions one `dx` position's window spans over all phases, `e(0) − e(K − 1) + 1`.
    pub fn extent(&self) -> u64 {
        (self.reach(0) - self.low()) as u64 + 1
    }

    /// The taps of phase `rho` in increasing `k` (their offsets decrease).
    pub fn taps(&self, rho: u32) -> Vec<PhaseTap> {
        let stride = i64::from(self.stride.max(1));
        (0..self.kernel)
            .filter(|&k| {
                (i64::from(k) * i64::from(self.dilation) - i64::from(self.padding))
                    .rem_euclid(stride)
                    == i64::from(rho)
            })
            .map(|k| PhaseTap {
                k,
                offset: (self.reach(k) - self.low()) as u32,
            })
            .collect()
    }

    /// The steps between a phase's consecutive taps: `k` grows by `S / gcd(S, D)` and the
    /// offset falls by `D / gcd(S, D)`.
    pub fn steps(&self) -> (u32, u32) {
        let (s, d) = (self.stride.max(1), self.dilation.max(1));
        let g = gcd(s, d);
        (s / g, d / g)
    }
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `(i, k)` pair of the definition, by brute force, against the phase tables.
    #[test]
    fn phases_hold_exactly_the_contributing_taps() {
        for (kernel, stride, padding, dilation) in [
            (3, 2, 1, 1),
            (3, 2, 0, 1),
            (1, 2, 0, 1),
            (3, 2, 2, 2),
            (5, 3, 2, 1),
            (4, 2, 2, 2),
            (2, 3, 0, 1),
            (7, 2, 3, 1),
            (3, 3, 4, 2),
            (3, 1, 1, 1),
        ] {
            let axis = PhaseAxis {
                kernel,
                stride,
                padding,
                dilation,
            };
            let (k_step, offset_step) = axis.steps();
            let mut seen = 0;
            for rho in 0..stride {
                let taps = axis.taps(rho);
                seen += taps.len();
                for pair in taps.windows(2) {
                    assert_eq!(pair[1].k - pair[0].k, k_step);
                    assert_eq!(pair[0].offset - pair[1].offset, offset_step);
                }
                for a in 0..6i64 {
                    let i = a * i64::from(stride) + i64::from(rho);
                    for k in 0..kernel {
                        let num = i + i64::from(padding) - i64::from(k * dilation);
                        let tap = taps.iter().find(|t| t.k == k);
                        if num.rem_euclid(i64::from(stride)) != 0 {
                            assert!(tap.is_none(), "{axis:?} rho {rho} k {k}");
                            continue;
                        }
                        let o = num.div_euclid(i64::from(stride));
                        let tap = tap.unwrap_or_else(|| panic!("{axis:?} rho {rho} k {k}"));
                        assert_eq!(o, a + axis.low() + i64::from(tap.offset));
                        assert!(u64::from(tap.offset) < axis.extent());
                    }
                }
            }
            assert_eq!(seen, kernel as usize, "{axis:?}: each tap in one phase");
        }
    }
}
