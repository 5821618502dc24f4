//! Binary floating point from the IEEE 754 definitions alone, with integers: a value is
//! `(-1)^neg · sig · 2^exp` and rounding looks at the discarded bits. Written for the test oracle,
//! deliberately sharing nothing with the interpreter (which computes in f64 plus a residual sign)
//! or with the `half` crate.

/// An IEEE binary interchange format: `exp_bits` exponent bits, `frac_bits` stored fraction bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Format {
    pub exp_bits: u32,
    pub frac_bits: u32,
}

pub const F16: Format = Format {
    exp_bits: 5,
    frac_bits: 10,
};
pub const BF16: Format = Format {
    exp_bits: 8,
    frac_bits: 7,
};
pub const F32: Format = Format {
    exp_bits: 8,
    frac_bits: 23,
};
pub const F64: Format = Format {
    exp_bits: 11,
    frac_bits: 52,
};

/// The four rounding-direction attributes of IEEE 754 (PTX `.rn`, `.rz`, `.rm`, `.rp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    NearestEven,
    TowardZero,
    Down,
    Up,
}

pub const MODES: [(Mode, &str); 4] = [
    (Mode::NearestEven, "rn"),
    (Mode::TowardZero, "rz"),
    (Mode::Down, "rm"),
    (Mode::Up, "rp"),
];

/// A decoded datum: NaN, an infinity, or the exact finite value `(-1)^neg · sig · 2^exp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value {
    Nan,
    Inf { neg: bool },
    Finite { neg: bool, sig: u128, exp: i32 },
}

impl Format {
    pub fn bits(self) -> u32 {
        1 + self.exp_bits + self.frac_bits
    }

    fn bias(self) -> i32 {
        (1 << (self.exp_bits - 1)) - 1
    }

    fn all_ones_exp(self) -> u64 {
        (1 << self.exp_bits) - 1
    }

    fn frac_mask(self) -> u64 {
        (1 << self.frac_bits) - 1
    }

    fn sign_bit(self) -> u64 {
        1 << (self.exp_bits + self.frac_bits)
    }

    /// Exponent of one unit in the last place for subnormals and the smallest normal binade.
    fn min_quantum_exp(self) -> i32 {
        1 - self.bias() - self.frac_bits as i32
    }

    /// The NaN PTX produces: sign clear, exponent and fraction all ones.
    pub fn canonical_nan(self) -> u64 {
        self.sign_bit() - 1
    }

    pub fn inf(self, neg: bool) -> u64 {
        (if neg { self.sign_bit() } else { 0 }) | (self.all_ones_exp() << self.frac_bits)
    }

    fn max_finite(self, neg: bool) -> u64 {
        self.inf(neg) - 1
    }

    pub fn decode(self, bits: u64) -> Value {
        let neg = bits & self.sign_bit() != 0;
        let biased = (bits >> self.frac_bits) & self.all_ones_exp();
        let frac = u128::from(bits & self.frac_mask());
        if biased == self.all_ones_exp() {
            return if frac == 0 {
                Value::Inf { neg }
            } else {
                Value::Nan
            };
        }
        if biased == 0 {
            return Value::Finite {
                neg,
                sig: frac,
                exp: self.min_quantum_exp(),
            };
        }
        Value::Finite {
            neg,
            sig: frac | (1 << self.frac_bits),
            exp: biased as i32 - self.bias() - self.frac_bits as i32,
        }
    }

    /// The finite magnitude just above `bits` (a positive finite encoding): the next encoding, or
    /// `2^(emax+1)` above the largest finite value, where rounding decides between max and ∞.
    pub fn next_up_magnitude(self, bits: u64) -> (u128, i32) {
        let next = bits + 1;
        match self.decode(next) {
            Value::Finite { sig, exp, .. } => (sig, exp),
            _ => (1, self.all_ones_exp() as i32 - self.bias()),
        }
    }

    /// Encodes the exact value `(-1)^neg · sig · 2^exp` (exact: panics if it is not representable).
    pub fn exact(self, neg: bool, sig: u128, exp: i32) -> u64 {
        let a = self.round(neg, sig, exp, false, Mode::Down);
        let b = self.round(neg, sig, exp, false, Mode::Up);
        assert_eq!(a, b, "value not representable");
        a
    }

    /// Rounds `(-1)^neg · (sig + s) · 2^exp` to this format, where `s` is 0 when `sticky` is false
    /// and some number strictly between 0 and 1 when it is true. A non-zero `sig` is required.
    pub fn round(self, neg: bool, sig: u128, exp: i32, sticky: bool, mode: Mode) -> u64 {
        let sign = if neg { self.sign_bit() } else { 0 };
        if sig == 0 {
            assert!(!sticky, "sticky bits need a non-zero significand");
            return sign;
        }
        let top = 127 - sig.leading_zeros() as i32 + exp;
        // One unit in the last place of the result: set by the binade, never below subnormals'.
        let quantum = (top - self.frac_bits as i32).max(self.min_quantum_exp());
        let shift = quantum - exp;
        let (keep, above_half, at_half, inexact) = if shift <= 0 {
            assert!(
                !sticky,
                "sticky bits must lie below the result's last place"
            );
            (sig << -shift, false, false, false)
        } else if shift > 127 {
            // Value below one quantum: above or at half only in the binade just below it.
            let pow2 = sig.is_power_of_two() && !sticky;
            let near = top == quantum - 1;
            (0, near && !pow2, near && pow2, true)
        } else {
            let rem = sig & ((1u128 << shift) - 1);
            let half = 1u128 << (shift - 1);
            assert!(
                !sticky || shift > 1,
                "need a guard bit below the last place"
            );
            (
                sig >> shift,
                rem > half || (rem == half && sticky),
                rem == half && !sticky,
                rem != 0 || sticky,
            )
        };
        let up = match mode {
            Mode::NearestEven => above_half || (at_half && keep & 1 == 1),
            Mode::TowardZero => false,
            Mode::Down => neg && inexact,
            Mode::Up => !neg && inexact,
        };
        self.encode(neg, keep + u128::from(up), quantum, mode)
    }

    /// Packs `keep · 2^quantum` (at most one binade carry above `frac_bits + 1` bits).
    fn encode(self, neg: bool, mut keep: u128, mut quantum: i32, mode: Mode) -> u64 {
        let sign = if neg { self.sign_bit() } else { 0 };
        if keep == 0 {
            return sign;
        }
        if keep >> (self.frac_bits + 1) != 0 {
            keep >>= 1;
            quantum += 1;
        }
        let biased = if keep >> self.frac_bits == 0 {
            0
        } else {
            i64::from(quantum) + i64::from(self.frac_bits) + i64::from(self.bias())
        };
        if biased >= self.all_ones_exp() as i64 {
            let to_inf = match mode {
                Mode::NearestEven => true,
                Mode::TowardZero => false,
                Mode::Down => neg,
                Mode::Up => !neg,
            };
            return if to_inf {
                self.inf(neg)
            } else {
                self.max_finite(neg)
            };
        }
        sign | ((biased as u64) << self.frac_bits) | (keep as u64 & self.frac_mask())
    }
}

/// `cvt` from `src` to `dst`: exact decode, one rounding; NaN becomes the canonical NaN.
pub fn convert(src: Format, dst: Format, bits: u64, mode: Mode) -> u64 {
    match src.decode(bits) {
        Value::Nan => dst.canonical_nan(),
        Value::Inf { neg } => dst.inf(neg),
        Value::Finite { neg, sig, exp } => dst.round(neg, sig, exp, false, mode),
    }
}

fn top_bit(sig: u128) -> i32 {
    127 - sig.leading_zeros() as i32
}

/// Rounds the exact sum of two finite values (significands below 2^64).
fn sum(f: Format, a: (bool, u128, i32), b: (bool, u128, i32), mode: Mode) -> u64 {
    let ((na, ma, ea), (nb, mb, eb)) = (a, b);
    if ma == 0 && mb == 0 {
        // Exact zero: IEEE 754 §6.3 gives the common sign, else +0 (−0 when rounding down).
        return f.round(
            if na == nb { na } else { mode == Mode::Down },
            0,
            0,
            false,
            mode,
        );
    }
    if ma == 0 {
        return f.round(nb, mb, eb, false, mode);
    }
    if mb == 0 {
        return f.round(na, ma, ea, false, mode);
    }
    assert!(ma >> 64 == 0 && mb >> 64 == 0);
    let lo = ea.min(eb);
    let top = (top_bit(ma) + ea).max(top_bit(mb) + eb);
    if top - lo <= 125 {
        let signed = |n: bool, m: u128, e: i32| {
            let v = (m << (e - lo)) as i128;
            if n {
                -v
            } else {
                v
            }
        };
        let s = signed(na, ma, ea) + signed(nb, mb, eb);
        if s == 0 {
            return f.round(mode == Mode::Down, 0, 0, false, mode);
        }
        return f.round(s < 0, s.unsigned_abs(), lo, false, mode);
    }
    // Far apart: the smaller operand lies wholly below a unit of the larger one's widened
    // significand, so it only decides the sticky bit (and a borrow when it is subtracted).
    let ((nbig, mbig, ebig), (nsmall, _, _)) = if top_bit(ma) + ea > top_bit(mb) + eb {
        (a, b)
    } else {
        (b, a)
    };
    let widen = (f.frac_bits as i32 + 4 - top_bit(mbig)).max(0);
    let wide = mbig << widen;
    let sig = if nbig == nsmall { wide } else { wide - 1 };
    f.round(nbig, sig, ebig - widen, true, mode)
}

/// Sum `a + b` of two encodings of `f`.
pub fn add(f: Format, a: u64, b: u64, mode: Mode) -> u64 {
    match (f.decode(a), f.decode(b)) {
        (Value::Nan, _) | (_, Value::Nan) => f.canonical_nan(),
        (Value::Inf { neg: x }, Value::Inf { neg: y }) if x != y => f.canonical_nan(),
        (Value::Inf { neg }, _) | (_, Value::Inf { neg }) => f.inf(neg),
        (
            Value::Finite {
                neg: na,
                sig: ma,
                exp: ea,
            },
            Value::Finite {
                neg: nb,
                sig: mb,
                exp: eb,
            },
        ) => sum(f, (na, ma, ea), (nb, mb, eb), mode),
    }
}

/// The exact product of two decoded values (`None`: NaN), as an infinity or a finite triple.
fn product(x: Value, y: Value) -> Option<Value> {
    match (x, y) {
        (Value::Nan, _) | (_, Value::Nan) => None,
        (Value::Inf { .. }, Value::Finite { sig: 0, .. })
        | (Value::Finite { sig: 0, .. }, Value::Inf { .. }) => None,
        (Value::Inf { neg: a }, Value::Inf { neg: b })
        | (Value::Inf { neg: a }, Value::Finite { neg: b, .. })
        | (Value::Finite { neg: a, .. }, Value::Inf { neg: b }) => Some(Value::Inf { neg: a != b }),
        (
            Value::Finite {
                neg: a,
                sig: ma,
                exp: ea,
            },
            Value::Finite {
                neg: b,
                sig: mb,
                exp: eb,
            },
        ) => Some(Value::Finite {
            neg: a != b,
            sig: ma * mb,
            exp: ea + eb,
        }),
    }
}

/// Product `a · b`, rounded once.
pub fn mul(f: Format, a: u64, b: u64, mode: Mode) -> u64 {
    match product(f.decode(a), f.decode(b)) {
        None => f.canonical_nan(),
        Some(Value::Inf { neg }) => f.inf(neg),
        Some(Value::Finite { neg, sig, exp }) => f.round(neg, sig, exp, false, mode),
        Some(Value::Nan) => unreachable!(),
    }
}

/// Fused `a · b + c`, rounded once.
pub fn fma(f: Format, a: u64, b: u64, c: u64, mode: Mode) -> u64 {
    let p = product(f.decode(a), f.decode(b));
    match (p, f.decode(c)) {
        (None, _) | (_, Value::Nan) | (Some(Value::Nan), _) => f.canonical_nan(),
        (Some(Value::Inf { neg: x }), Value::Inf { neg: y }) if x != y => f.canonical_nan(),
        (Some(Value::Inf { neg }), _) | (_, Value::Inf { neg }) => f.inf(neg),
        (
            Some(Value::Finite {
                neg: np,
                sig: mp,
                exp: ep,
            }),
            Value::Finite {
                neg: nc,
                sig: mc,
                exp: ec,
            },
        ) => sum(f, (np, mp, ep), (nc, mc, ec), mode),
    }
}

#[test]
fn oracle_self_checks_against_hand_values() {
    // 1.0 + 2^-11 in f32 is the halfway point between f16 1.0 and its successor: ties to even.
    let x = 0x3f80_1000;
    assert_eq!(convert(F32, F16, x, Mode::NearestEven), 0x3c00);
    assert_eq!(convert(F32, F16, x, Mode::Up), 0x3c01);
    assert_eq!(convert(F32, F16, 0x3f80_3000, Mode::NearestEven), 0x3c02);
    // 65520 rounds to ∞ in f16 under round-to-nearest, to 65504 toward zero.
    assert_eq!(convert(F32, F16, 0x477f_f000, Mode::NearestEven), 0x7c00);
    assert_eq!(convert(F32, F16, 0x477f_f000, Mode::TowardZero), 0x7bff);
    // Smallest f16 subnormal is 2^-24; 2^-25 ties to zero, 3·2^-26 rounds up to it.
    assert_eq!(convert(F32, F16, 0x3300_0000, Mode::NearestEven), 0x0000);
    assert_eq!(convert(F32, F16, 0x3340_0000, Mode::NearestEven), 0x0001);
    assert_eq!(convert(F32, BF16, 0x3f80_8000, Mode::NearestEven), 0x3f80);
    assert_eq!(add(F16, 0x3c00, 0xbc00, Mode::NearestEven), 0x0000);
    assert_eq!(add(F16, 0x3c00, 0xbc00, Mode::Down), 0x8000);
    assert_eq!(mul(F16, 0x4000, 0x4200, Mode::NearestEven), 0x4600); // 2·3 = 6
    assert_eq!(fma(F16, 0x4000, 0x4200, 0xbc00, Mode::NearestEven), 0x4500); // 2·3−1 = 5
                                                                             // 1 + 2^-24 (far below half an f16 ulp) stays 1 nearest, steps up when rounding up.
    assert_eq!(add(F16, 0x3c00, 0x0001, Mode::NearestEven), 0x3c00);
    assert_eq!(add(F16, 0x3c00, 0x0001, Mode::Up), 0x3c01);
    assert_eq!(add(F16, 0x3c00, 0x8001, Mode::TowardZero), 0x3bff);
}
