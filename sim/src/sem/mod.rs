//! Instruction semantics as pure functions on raw register bits (`u64`, value in the low bits of
//! the instruction type, zero-extended). `decode` picks one function per instruction, so the hot
//! loop calls a function pointer and never looks at modifiers.
//!
//! Rounding: `.rn` f32/f64 arithmetic uses the host's IEEE operations (correctly rounded); the
//! directed modes (`.rz/.rm/.rp`) and every narrowing to f32/f16/bf16 go through [`round_to`],
//! which rounds an f64 value plus the sign of its exact residual, so no double rounding occurs.

pub mod bits;
pub mod cvt;
pub mod float;
pub mod half;
pub mod int;
pub mod mma;

/// One-operand semantic function.
pub type F1 = fn(u64) -> u64;
/// Two-operand semantic function.
pub type F2 = fn(u64, u64) -> u64;
/// Three-operand semantic function.
pub type F3 = fn(u64, u64, u64) -> u64;
/// Comparison for `setp`.
pub type Cmp = fn(u64, u64) -> bool;

/// IEEE rounding direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rnd {
    /// To nearest, ties to even.
    Rn,
    /// Toward zero.
    Rz,
    /// Toward −∞.
    Rm,
    /// Toward +∞.
    Rp,
}

impl Rnd {
    pub const fn code(self) -> u8 {
        match self {
            Rnd::Rn => 0,
            Rnd::Rz => 1,
            Rnd::Rm => 2,
            Rnd::Rp => 3,
        }
    }

    pub const fn from_code(c: u8) -> Rnd {
        match c {
            1 => Rnd::Rz,
            2 => Rnd::Rm,
            3 => Rnd::Rp,
            _ => Rnd::Rn,
        }
    }
}

/// A binary floating-point format narrower than f64.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fmt {
    /// Explicit fraction bits.
    pub mant: u32,
    /// Exponent bits.
    pub exp: u32,
}

pub const F32: Fmt = Fmt { mant: 23, exp: 8 };
pub const F16: Fmt = Fmt { mant: 10, exp: 5 };
pub const BF16: Fmt = Fmt { mant: 7, exp: 8 };

impl Fmt {
    fn bias(self) -> i32 {
        (1 << (self.exp - 1)) - 1
    }

    pub fn canonical_nan(self) -> u64 {
        (1u64 << (self.mant + self.exp)) - 1
    }

    fn inf_bits(self) -> u64 {
        ((1u64 << self.exp) - 1) << self.mant
    }

    fn sign_bit(self) -> u64 {
        1u64 << (self.mant + self.exp)
    }

    /// Decodes `bits` of this format into an (exact) f64.
    pub fn to_f64(self, bits: u64) -> f64 {
        let sign = if bits & self.sign_bit() != 0 {
            -1.0
        } else {
            1.0
        };
        let e = ((bits >> self.mant) & ((1 << self.exp) - 1)) as i32;
        let m = bits & ((1u64 << self.mant) - 1);
        if e == (1 << self.exp) - 1 {
            return if m == 0 {
                sign * f64::INFINITY
            } else {
                f64::NAN
            };
        }
        let (mant, exp) = if e == 0 {
            (m as f64, 1 - self.bias())
        } else {
            ((m | (1 << self.mant)) as f64, e - self.bias())
        };
        sign * mant * 2f64.powi(exp - self.mant as i32)
    }
}

/// Rounds `x` (whose exact value is `x + r` with `r` tiny, of sign `resid`: −1, 0, +1) to `fmt`
/// with rounding `mode`; returns the bits of the result. NaN becomes the canonical NaN.
pub fn round_to(x: f64, resid: i8, fmt: Fmt, mode: Rnd) -> u64 {
    if x.is_nan() {
        return fmt.canonical_nan();
    }
    // Round to odd: replace (x, residual) by whichever of x and its f64 neighbour on the
    // residual's side has an odd last bit. Values of a narrower format and the midpoints between
    // them all end in an even f64 bit, so none lies between the exact value and the odd one, and
    // both round identically in every mode. (The neighbour alone is not enough: it can be a
    // midpoint itself, when x was rounded past one, as bf16 fma with far-apart operands does.)
    let x = if resid == 0 || x.is_infinite() || x.to_bits() & 1 == 1 {
        x
    } else {
        step(x, resid > 0)
    };
    let neg = x.is_sign_negative();
    let sign = if neg { fmt.sign_bit() } else { 0 };
    if x.is_infinite() {
        return sign | fmt.inf_bits();
    }
    if x == 0.0 {
        return sign;
    }
    // |x| = m * 2^e with m a 53-bit integer.
    let bits = x.abs().to_bits();
    let be = ((bits >> 52) & 0x7ff) as i32;
    let (m, e) = if be == 0 {
        (bits & ((1 << 52) - 1), -1074)
    } else {
        ((bits & ((1 << 52) - 1)) | (1 << 52), be - 1075)
    };
    let lz = m.leading_zeros() as i32 - 11;
    let (m, e) = (m << lz, e - lz);
    let top = e + 52; // exponent of the leading bit
    let emin = 1 - fmt.bias();
    let q_exp = if top < emin {
        emin - fmt.mant as i32
    } else {
        top - fmt.mant as i32
    };
    let shift = q_exp - e; // > 0 for every format narrower than f64
    let (mut q, r, half) = if shift > 60 {
        (0u64, 1u64, 2u64)
    } else {
        (m >> shift, m & ((1u64 << shift) - 1), 1u64 << (shift - 1))
    };
    let round_up = r != 0
        && match mode {
            Rnd::Rn => r > half || (r == half && q & 1 == 1),
            Rnd::Rz => false,
            Rnd::Rm => neg,
            Rnd::Rp => !neg,
        };
    if round_up {
        q += 1;
    }
    let v = q as f64 * 2f64.powi(q_exp);
    let max_exp = (1i32 << (fmt.exp - 1)) - 1;
    let max_finite = (2.0 - 2f64.powi(-(fmt.mant as i32))) * 2f64.powi(max_exp);
    if v > max_finite {
        let to_inf = match mode {
            Rnd::Rn => true,
            Rnd::Rz => false,
            Rnd::Rm => neg,
            Rnd::Rp => !neg,
        };
        return if to_inf {
            sign | fmt.inf_bits()
        } else {
            sign | (fmt.inf_bits() - 1)
        };
    }
    sign | encode_exact(v, fmt)
}

/// The next f64 above (`up`) or below `x`.
fn step(x: f64, up: bool) -> f64 {
    if x == 0.0 {
        let t = f64::from_bits(1);
        return if up { t } else { -t };
    }
    let b = x.to_bits();
    let away = (x > 0.0) == up;
    let y = f64::from_bits(if away { b + 1 } else { b - 1 });
    if y.is_infinite() {
        x
    } else {
        y
    }
}

fn encode_exact(v: f64, fmt: Fmt) -> u64 {
    if v == 0.0 {
        return 0;
    }
    let bits = v.to_bits();
    let be = ((bits >> 52) & 0x7ff) as i32 - 1023;
    let frac = bits & ((1 << 52) - 1);
    let emin = 1 - fmt.bias();
    if be < emin {
        // Subnormal in fmt: value / 2^(emin - mant).
        let q = v / 2f64.powi(emin - fmt.mant as i32);
        return q as u64;
    }
    let e = (be + fmt.bias()) as u64;
    (e << fmt.mant) | (frac >> (52 - fmt.mant))
}

/// Sign of the exact error of `a + b` relative to its rounded f64 sum `s`.
#[inline]
pub fn two_sum_err(a: f64, b: f64, s: f64) -> i8 {
    if !s.is_finite() {
        return 0;
    }
    let bb = s - a;
    let err = (a - (s - bb)) + (b - bb);
    sign_of(err)
}

#[inline]
pub fn sign_of(x: f64) -> i8 {
    if x > 0.0 {
        1
    } else if x < 0.0 {
        -1
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_to_f32_matches_native_rn() {
        for &x in &[
            1.0f64,
            1.0 + 1e-9,
            3.4e38,
            3.5e38,
            1e-40,
            -1e-45,
            0.1,
            -0.3,
            65504.0,
            1e300,
        ] {
            assert_eq!(
                round_to(x, 0, F32, Rnd::Rn),
                u64::from((x as f32).to_bits()),
                "{x}"
            );
        }
    }

    #[test]
    fn directed_rounding() {
        let x = 1.0 + 2f64.powi(-30);
        assert_eq!(f32::from_bits(round_to(x, 0, F32, Rnd::Rz) as u32), 1.0);
        assert_eq!(
            f32::from_bits(round_to(x, 0, F32, Rnd::Rp) as u32),
            1.0 + f32::EPSILON
        );
        assert_eq!(
            f32::from_bits(round_to(-x, 0, F32, Rnd::Rm) as u32),
            -1.0 - f32::EPSILON
        );
        // Exact 1.0 with a negative residual: just below one.
        assert_eq!(
            f32::from_bits(round_to(1.0, -1, F32, Rnd::Rz) as u32),
            1.0 - f32::EPSILON / 2.0
        );
        assert_eq!(f32::from_bits(round_to(1.0, -1, F32, Rnd::Rn) as u32), 1.0);
        // Overflow: rz gives the largest finite.
        assert_eq!(round_to(1e39, 0, F32, Rnd::Rz) as u32, f32::MAX.to_bits());
    }

    #[test]
    fn half_formats() {
        assert_eq!(round_to(1.0, 0, F16, Rnd::Rn), 0x3C00);
        assert_eq!(round_to(65520.0, 0, F16, Rnd::Rn), 0x7C00); // rounds to inf
        assert_eq!(round_to(65519.0, 0, F16, Rnd::Rn), 0x7BFF);
        assert_eq!(round_to(1.0 + 2f64.powi(-11), 0, F16, Rnd::Rn), 0x3C00); // tie to even
        assert_eq!(
            round_to(1.0 + 3.0 * 2f64.powi(-11), 0, F16, Rnd::Rn),
            0x3C02
        );
        assert_eq!(round_to(2f64.powi(-24), 0, F16, Rnd::Rn), 0x0001);
        assert_eq!(round_to(1.0 + 2f64.powi(-8), 0, BF16, Rnd::Rn), 0x3F80); // tie to even
        assert_eq!(round_to(f64::NAN, 0, BF16, Rnd::Rn), 0x7FFF);
        assert_eq!(F16.to_f64(0x3C00), 1.0);
        assert_eq!(F16.to_f64(0x0001), 2f64.powi(-24));
        assert_eq!(BF16.to_f64(0xC040), -3.0);
    }
}
