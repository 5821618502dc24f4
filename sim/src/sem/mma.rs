//! Warp-level matrix multiply-accumulate (`mma.sync.aligned.m16n8k{8,16}.row.col`) and the tf32
//! conversion it needs, as pure functions on the 32 lanes' fragment registers.
//!
//! Fragment ownership follows the PTX ISA section "Matrix Fragments for mma.m16n8k8 /
//! mma.m16n8k16" (floating-point types), with `g = lane >> 2` and `t = lane % 4`:
//! - A (16×K), f16/bf16: element `i` (bits `16·(i%2)` of register `i/2`) is at row
//!   `g + 8·((i/2)%2)`, column `2t + (i%2) + 8·(i≥4)`;
//!   tf32 (K = 8): element `i` (register `i`) at row `g + 8·(i%2)`, column `t + 4·(i/2)`.
//! - B (K×8), f16/bf16: element `i` (bits `16·(i%2)` of register `i/2`) at row
//!   `2t + (i%2) + 8·(i≥2)`, column `g`; tf32: element `i` (register `i`) at row `t + 4i`, column `g`.
//! - C/D (16×8): element `i` at row `g + 8·(i≥2)`, column `2t + (i%2)`; f32 element `i` in
//!   register `i`, f16 element `i` in bits `16·(i%2)` of register `i/2`.
//!
//! # Arithmetic
//! Every product `a·b` is exact (an f16, bf16 or tf32 significand has at most 11 bits, so the
//! product fits an f32 significand and is computed in f64 without error). Each `D[i][j]` starts
//! from `C[i][j]` (f16 accumulators are widened exactly to f32) and adds the K products in
//! increasing k order, rounding every partial sum to f32 with round-to-nearest-even, subnormals
//! kept. An f16 `D` is that f32 result rounded once to f16 (nearest even).
//! Hardware tensor cores add several products at once with wider internal precision and round
//! (often truncate) only at block boundaries, so results can differ from this order in the last
//! bit or two of f32 whenever partial sums round; sums of values that are exact in f32 (small
//! integers, powers of two) agree bit for bit. Hardware may also flush f32 subnormal
//! accumulators, and its NaN payloads may differ.
//!
//! tf32 operands are `.b32` registers. The ISA leaves the layout of tf32 data inside its `.b32`
//! implementation defined ("Alternate Floating-Point Data Formats") and defines `cvt ... .tf32.f32`
//! as the way to produce it. This interpreter's layout is the f32 bit pattern with the low 13
//! bits zero (what its `cvt` writes, [`to_tf32`]), and the mma reads the top 19 bits (sign, 8
//! exponent bits, 10 fraction bits). A register not produced by `cvt` (raw f32 bits, as
//! Triton's tf32 matmul passes) has no value the ISA defines; the interpreter reads it by
//! masking the low 13 bits (truncation), its own choice so that such PTX runs, not ISA
//! semantics.

use super::{round_to, two_sum_err, Rnd, BF16, F16, F32};

/// Lanes of a warp.
const LANES: usize = 32;
/// Rows of A, C and D.
pub const M: usize = 16;
/// Columns of B, C and D.
pub const N: usize = 8;

/// Element type of the A and B operands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MmaInput {
    F16,
    Bf16,
    Tf32,
}

impl MmaInput {
    pub fn name(self) -> &'static str {
        match self {
            MmaInput::F16 => "f16",
            MmaInput::Bf16 => "bf16",
            MmaInput::Tf32 => "tf32",
        }
    }
}

/// One supported `mma.sync.aligned.m16n8k{k}.row.col.{d}.{in}.{in}.{c}` form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MmaSpec {
    /// 8 or 16.
    pub k: u8,
    pub input: MmaInput,
    /// C is `.f16` (else `.f32`).
    pub c_f16: bool,
    /// D is `.f16` (else `.f32`).
    pub d_f16: bool,
}

/// One lane's fragment registers (unused slots are zero).
pub type Frag = [u32; 4];

impl MmaSpec {
    fn k(self) -> usize {
        usize::from(self.k)
    }

    /// 32-bit registers of one lane's A fragment.
    pub fn a_regs(self) -> usize {
        match self.input {
            MmaInput::Tf32 => self.k() / 2,
            _ => self.k() / 4,
        }
    }

    /// 32-bit registers of one lane's B fragment.
    pub fn b_regs(self) -> usize {
        match self.input {
            MmaInput::Tf32 => self.k() / 4,
            _ => self.k() / 8,
        }
    }

    /// 32-bit registers of one lane's C (or D, with `d`) fragment.
    pub fn acc_regs(self, d: bool) -> usize {
        if (d && self.d_f16) || (!d && self.c_f16) {
            2
        } else {
            4
        }
    }

    /// Floating-point operations of one warp-level mma: 2·M·N·K.
    pub fn flops(self) -> u64 {
        2 * (M * N * self.k()) as u64
    }

    /// Row and column of element `i` of `lane`'s A fragment.
    pub fn a_pos(self, lane: usize, i: usize) -> (usize, usize) {
        let (g, t) = (lane >> 2, lane % 4);
        match self.input {
            MmaInput::Tf32 => (g + 8 * (i % 2), t + 4 * (i / 2)),
            _ => (
                g + 8 * ((i / 2) % 2),
                2 * t + i % 2 + 8 * usize::from(i >= 4),
            ),
        }
    }

    /// Row and column of element `i` of `lane`'s B fragment.
    pub fn b_pos(self, lane: usize, i: usize) -> (usize, usize) {
        let (g, t) = (lane >> 2, lane % 4);
        match self.input {
            MmaInput::Tf32 => (t + 4 * i, g),
            _ => (2 * t + i % 2 + 8 * usize::from(i >= 2), g),
        }
    }

    /// Row and column of element `i` of `lane`'s C/D fragment.
    pub fn acc_pos(lane: usize, i: usize) -> (usize, usize) {
        let (g, t) = (lane >> 2, lane % 4);
        (g + 8 * usize::from(i >= 2), 2 * t + i % 2)
    }

    /// Value of an A/B element read from its fragment.
    fn input_elem(self, frag: &Frag, i: usize) -> f64 {
        match self.input {
            MmaInput::Tf32 => f64::from(f32::from_bits(frag[i] & TF32_MASK)),
            MmaInput::F16 => F16.to_f64(half_of(frag, i)),
            MmaInput::Bf16 => BF16.to_f64(half_of(frag, i)),
        }
    }

    /// `D = A·B + C` for a warp: `a`, `b`, `c` are every lane's fragment registers.
    pub fn compute(self, a: &[Frag; LANES], b: &[Frag; LANES], c: &[Frag; LANES]) -> [Frag; LANES] {
        let k = self.k();
        let mut am = [[0f64; 16]; M];
        let mut bm = [[0f64; N]; 16];
        let mut cm = [[0f32; N]; M];
        for lane in 0..LANES {
            for i in 0..k / 2 {
                let (r, col) = self.a_pos(lane, i);
                am[r][col] = self.input_elem(&a[lane], i);
            }
            for i in 0..k / 4 {
                let (r, col) = self.b_pos(lane, i);
                bm[r][col] = self.input_elem(&b[lane], i);
            }
            for i in 0..4 {
                let (r, col) = Self::acc_pos(lane, i);
                cm[r][col] = if self.c_f16 {
                    F16.to_f64(half_of(&c[lane], i)) as f32
                } else {
                    f32::from_bits(c[lane][i])
                };
            }
        }
        let mut d = [[0u32; 4]; LANES];
        for (lane, out) in d.iter_mut().enumerate() {
            for i in 0..4 {
                let (r, col) = Self::acc_pos(lane, i);
                let mut acc = cm[r][col];
                for kk in 0..k {
                    acc = add_f32(acc, am[r][kk] * bm[kk][col]);
                }
                if self.d_f16 {
                    let h = round_to(f64::from(acc), 0, F16, Rnd::Rn) as u32;
                    out[i / 2] |= h << (16 * (i % 2));
                } else {
                    out[i] = acc.to_bits();
                }
            }
        }
        d
    }
}

/// The bits of a tf32 value inside its `.b32` container.
const TF32_MASK: u32 = 0xffff_e000;

fn half_of(frag: &Frag, i: usize) -> u64 {
    u64::from((frag[i / 2] >> (16 * (i % 2))) & 0xffff)
}

/// `acc + p` rounded once to f32 (nearest even); `p` is an exact product.
fn add_f32(acc: f32, p: f64) -> f32 {
    let a = f64::from(acc);
    let s = a + p;
    f32::from_bits(round_to(s, two_sum_err(a, p, s), F32, Rnd::Rn) as u32)
}

/// How `cvt.{rna,rn,rz}{.satfinite}.tf32.f32` rounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tf32Round {
    /// Nearest, ties away from zero (`.rna`).
    NearestAway,
    /// Nearest, ties to even (`.rn`).
    NearestEven,
    /// Toward zero (`.rz`).
    Zero,
}

/// f32 → tf32 (an f32 bit pattern whose low 13 bits are zero). NaN stays a NaN; with
/// `satfinite`, infinities and results that round past the largest finite tf32 become that
/// largest value (NaN becomes the canonical NaN).
pub fn to_tf32(bits: u32, mode: Tf32Round, satfinite: bool) -> u32 {
    const LOW: u32 = !TF32_MASK;
    const MAX_FINITE: u32 = 0x7f7f_e000;
    let sign = bits & 0x8000_0000;
    let mag = bits & 0x7fff_ffff;
    if mag > 0x7f80_0000 {
        let nan = if satfinite {
            0x7fff_ffff
        } else {
            bits | 0x0040_0000
        };
        return nan & TF32_MASK;
    }
    if mag == 0x7f80_0000 {
        return if satfinite { sign | MAX_FINITE } else { bits };
    }
    let low = mag & LOW;
    let half = 1u32 << 12;
    let up = match mode {
        Tf32Round::NearestAway => low >= half,
        Tf32Round::NearestEven => low > half || (low == half && mag & (1 << 13) != 0),
        Tf32Round::Zero => false,
    };
    let r = (mag & TF32_MASK) + if up { 1 << 13 } else { 0 };
    if satfinite && r >= 0x7f80_0000 {
        return sign | MAX_FINITE;
    }
    sign | r
}

macro_rules! tf32_fns {
    ($($name:ident => $mode:expr, $sat:expr;)*) => {
        $(
            pub fn $name(a: u64) -> u64 {
                u64::from(to_tf32(a as u32, $mode, $sat))
            }
        )*
    };
}

tf32_fns! {
    tf32_rna => Tf32Round::NearestAway, false;
    tf32_rna_sat => Tf32Round::NearestAway, true;
    tf32_rn => Tf32Round::NearestEven, false;
    tf32_rn_sat => Tf32Round::NearestEven, true;
    tf32_rz => Tf32Round::Zero, false;
    tf32_rz_sat => Tf32Round::Zero, true;
}

/// The `cvt` function for a tf32 destination with rounding `mode`.
pub fn tf32_fn(mode: Tf32Round, satfinite: bool) -> super::F1 {
    match (mode, satfinite) {
        (Tf32Round::NearestAway, false) => tf32_rna,
        (Tf32Round::NearestAway, true) => tf32_rna_sat,
        (Tf32Round::NearestEven, false) => tf32_rn,
        (Tf32Round::NearestEven, true) => tf32_rn_sat,
        (Tf32Round::Zero, false) => tf32_rz,
        (Tf32Round::Zero, true) => tf32_rz_sat,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tf32_rounding() {
        // 1 + 2^-11 is a tie between 1 and 1 + 2^-10.
        let tie = 0x3f80_1000;
        assert_eq!(to_tf32(tie, Tf32Round::NearestAway, false), 0x3f80_2000);
        assert_eq!(to_tf32(tie, Tf32Round::NearestEven, false), 0x3f80_0000);
        assert_eq!(to_tf32(0x3f80_1fff, Tf32Round::Zero, false), 0x3f80_0000);
        assert_eq!(
            to_tf32(0xbf80_1000, Tf32Round::NearestAway, false),
            0xbf80_2000
        );
        // Rounds past the largest finite value.
        assert_eq!(
            to_tf32(0x7f7f_ffff, Tf32Round::NearestAway, false),
            0x7f80_0000
        );
        assert_eq!(
            to_tf32(0x7f7f_ffff, Tf32Round::NearestAway, true),
            0x7f7f_e000
        );
        assert!(f32::from_bits(to_tf32(0x7fc0_0001, Tf32Round::NearestAway, false)).is_nan());
        assert!(f32::from_bits(to_tf32(0x7f80_0001, Tf32Round::NearestAway, false)).is_nan());
    }

    #[test]
    fn every_matrix_element_is_owned_once() {
        for input in [MmaInput::F16, MmaInput::Bf16, MmaInput::Tf32] {
            for k in [8u8, 16] {
                if input == MmaInput::Tf32 && k == 16 {
                    continue;
                }
                let s = MmaSpec {
                    k,
                    input,
                    c_f16: false,
                    d_f16: false,
                };
                let mut a = vec![0; M * usize::from(k)];
                let mut b = vec![0; usize::from(k) * N];
                let mut c = [0; M * N];
                for lane in 0..LANES {
                    for i in 0..usize::from(k) / 2 {
                        let (r, col) = s.a_pos(lane, i);
                        a[r * usize::from(k) + col] += 1;
                    }
                    for i in 0..usize::from(k) / 4 {
                        let (r, col) = s.b_pos(lane, i);
                        b[r * N + col] += 1;
                    }
                    for i in 0..4 {
                        let (r, col) = MmaSpec::acc_pos(lane, i);
                        c[r * N + col] += 1;
                    }
                }
                assert!(
                    a.iter().chain(&b).chain(&c).all(|&n| n == 1),
                    "{input:?} k{k}"
                );
            }
        }
    }
}
