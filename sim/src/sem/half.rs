//! f16 and bf16 arithmetic (`.f16`, `.bf16`, and the packed `.f16x2`/`.bf16x2` forms): each
//! operation is computed exactly in f64 (plus the sign of any residual) and rounded once to the
//! 16-bit format, round-to-nearest-even as PTX specifies for these types.

use super::float::fcmp;
use super::{round_to, two_sum_err, Cmp, Fmt, Rnd, BF16, F1, F16, F2, F3};

#[inline]
fn fmt<const BF: bool>() -> Fmt {
    if BF {
        BF16
    } else {
        F16
    }
}

#[inline]
fn rd<const BF: bool, const FTZ: bool>(a: u64) -> f64 {
    let f = fmt::<BF>();
    let bits = a & 0xffff;
    let x = f.to_f64(bits);
    if FTZ && (bits & 0x7fff) != 0 && (bits >> f.mant) & ((1 << f.exp) - 1) == 0 {
        return if bits & 0x8000 != 0 { -0.0 } else { 0.0 };
    }
    x
}

#[inline]
fn wr<const BF: bool, const FTZ: bool, const SAT: bool>(x: f64, resid: i8) -> u64 {
    let f = fmt::<BF>();
    let (x, resid) = if SAT {
        if x.is_nan() {
            return 0;
        }
        if x <= 0.0 {
            (0.0, 0)
        } else if x >= 1.0 {
            (1.0, 0)
        } else {
            (x, resid)
        }
    } else {
        (x, resid)
    };
    let b = round_to(x, resid, f, Rnd::Rn);
    if FTZ && (b & 0x7fff) != 0 && (b >> f.mant) & ((1 << f.exp) - 1) == 0 {
        return b & 0x8000;
    }
    b
}

fn add<const BF: bool, const FTZ: bool, const SAT: bool>(a: u64, b: u64) -> u64 {
    let (x, y) = (rd::<BF, FTZ>(a), rd::<BF, FTZ>(b));
    let s = x + y;
    wr::<BF, FTZ, SAT>(s, two_sum_err(x, y, s))
}

fn sub<const BF: bool, const FTZ: bool, const SAT: bool>(a: u64, b: u64) -> u64 {
    add::<BF, FTZ, SAT>(a, b ^ 0x8000)
}

fn mul<const BF: bool, const FTZ: bool, const SAT: bool>(a: u64, b: u64) -> u64 {
    let (x, y) = (rd::<BF, FTZ>(a), rd::<BF, FTZ>(b));
    wr::<BF, FTZ, SAT>(x * y, 0)
}

fn fma<const BF: bool, const FTZ: bool, const SAT: bool>(a: u64, b: u64, c: u64) -> u64 {
    let (x, y, z) = (rd::<BF, FTZ>(a), rd::<BF, FTZ>(b), rd::<BF, FTZ>(c));
    let p = x * y;
    let s = p + z;
    wr::<BF, FTZ, SAT>(s, two_sum_err(p, z, s))
}

fn minmax<const BF: bool, const FTZ: bool, const NAN: bool>(a: u64, b: u64, is_min: bool) -> u64 {
    let (x, y) = (rd::<BF, FTZ>(a), rd::<BF, FTZ>(b));
    let canon = fmt::<BF>().canonical_nan();
    let pick = |v: f64| round_to(v, 0, fmt::<BF>(), Rnd::Rn);
    match (x.is_nan(), y.is_nan()) {
        (true, true) => canon,
        (true, false) | (false, true) if NAN => canon,
        (true, false) => pick(y),
        (false, true) => pick(x),
        _ => {
            let take_x = if x == y {
                is_min == x.is_sign_negative()
            } else {
                (x < y) == is_min
            };
            pick(if take_x { x } else { y })
        }
    }
}

fn min<const BF: bool, const FTZ: bool, const NAN: bool>(a: u64, b: u64) -> u64 {
    minmax::<BF, FTZ, NAN>(a, b, true)
}

fn max<const BF: bool, const FTZ: bool, const NAN: bool>(a: u64, b: u64) -> u64 {
    minmax::<BF, FTZ, NAN>(a, b, false)
}

fn neg<const BF: bool, const FTZ: bool, const SAT: bool>(a: u64) -> u64 {
    (a & 0xffff) ^ 0x8000
}

fn abs<const BF: bool, const FTZ: bool, const SAT: bool>(a: u64) -> u64 {
    a & 0x7fff
}

macro_rules! x2 {
    ($name:ident, $f:ident, 1) => {
        fn $name<const BF: bool, const FTZ: bool, const SAT: bool>(a: u64) -> u64 {
            $f::<BF, FTZ, SAT>(a & 0xffff) | ($f::<BF, FTZ, SAT>((a >> 16) & 0xffff) << 16)
        }
    };
    ($name:ident, $f:ident, 2) => {
        fn $name<const BF: bool, const FTZ: bool, const SAT: bool>(a: u64, b: u64) -> u64 {
            $f::<BF, FTZ, SAT>(a & 0xffff, b & 0xffff)
                | ($f::<BF, FTZ, SAT>((a >> 16) & 0xffff, (b >> 16) & 0xffff) << 16)
        }
    };
    ($name:ident, $f:ident, 3) => {
        fn $name<const BF: bool, const FTZ: bool, const SAT: bool>(a: u64, b: u64, c: u64) -> u64 {
            $f::<BF, FTZ, SAT>(a & 0xffff, b & 0xffff, c & 0xffff)
                | ($f::<BF, FTZ, SAT>((a >> 16) & 0xffff, (b >> 16) & 0xffff, (c >> 16) & 0xffff)
                    << 16)
        }
    };
}
x2!(add2, add, 2);
x2!(sub2, sub, 2);
x2!(mul2, mul, 2);
x2!(fma2, fma, 3);
x2!(min2, min, 2);
x2!(max2, max, 2);
x2!(neg2, neg, 1);
x2!(abs2, abs, 1);

macro_rules! inst {
    ($f:ident, $T:ty, $bf:expr, $ftz:expr, $sat:expr) => {
        match ($bf, $ftz, $sat) {
            (false, false, false) => $f::<false, false, false> as $T,
            (false, false, true) => $f::<false, false, true> as $T,
            (false, true, false) => $f::<false, true, false> as $T,
            (false, true, true) => $f::<false, true, true> as $T,
            (true, false, false) => $f::<true, false, false> as $T,
            (true, false, true) => $f::<true, false, true> as $T,
            (true, true, false) => $f::<true, true, false> as $T,
            (true, true, true) => $f::<true, true, true> as $T,
        }
    };
}

/// Binary op on a 16-bit float (`packed` for the x2 forms). `sat_or_nan` is `.sat` for
/// arithmetic and `.NaN` for min/max.
pub fn binary(op: &str, bf: bool, packed: bool, ftz: bool, sat_or_nan: bool) -> Option<F2> {
    let s = sat_or_nan;
    Some(match (op, packed) {
        ("add", false) => inst!(add, F2, bf, ftz, s),
        ("sub", false) => inst!(sub, F2, bf, ftz, s),
        ("mul", false) => inst!(mul, F2, bf, ftz, s),
        ("min", false) => inst!(min, F2, bf, ftz, s),
        ("max", false) => inst!(max, F2, bf, ftz, s),
        ("add", true) => inst!(add2, F2, bf, ftz, s),
        ("sub", true) => inst!(sub2, F2, bf, ftz, s),
        ("mul", true) => inst!(mul2, F2, bf, ftz, s),
        ("min", true) => inst!(min2, F2, bf, ftz, s),
        ("max", true) => inst!(max2, F2, bf, ftz, s),
        _ => return None,
    })
}

pub fn fma_fn(bf: bool, packed: bool, ftz: bool, sat: bool) -> F3 {
    if packed {
        inst!(fma2, F3, bf, ftz, sat)
    } else {
        inst!(fma, F3, bf, ftz, sat)
    }
}

pub fn unary(op: &str, bf: bool, packed: bool) -> Option<F1> {
    Some(match (op, packed) {
        ("neg", false) => inst!(neg, F1, bf, false, false),
        ("abs", false) => inst!(abs, F1, bf, false, false),
        ("neg", true) => inst!(neg2, F1, bf, false, false),
        ("abs", true) => inst!(abs2, F1, bf, false, false),
        _ => return None,
    })
}

fn cmp<const C: u8, const BF: bool>(a: u64, b: u64) -> bool {
    fcmp(C, rd::<BF, false>(a), rd::<BF, false>(b))
}

pub fn compare(op: &str, bf: bool) -> Option<Cmp> {
    let c = super::float::cmp_code(op)?;
    macro_rules! arm {
        ($($n:literal),*) => {
            match (c, bf) {
                $( ($n, false) => cmp::<$n, false> as Cmp, ($n, true) => cmp::<$n, true> as Cmp, )*
                _ => return None,
            }
        };
    }
    Some(arm!(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(x: f32) -> u64 {
        u64::from(half::f16::from_f32(x).to_bits())
    }
    fn bf(x: f32) -> u64 {
        u64::from(half::bf16::from_f32(x).to_bits())
    }

    #[test]
    fn f16_arith() {
        let add = binary("add", false, false, false, false).unwrap();
        assert_eq!(add(h(1.0), h(2.0)), h(3.0));
        assert_eq!(add(h(65504.0), h(32.0)), 0x7c00); // overflow to inf (tie to even)
        let fma = fma_fn(false, false, false, false);
        assert_eq!(fma(h(2.0), h(3.0), h(-1.0)), h(5.0));
        let add2 = binary("add", false, true, false, false).unwrap();
        assert_eq!(
            add2(h(1.0) | (h(2.0) << 16), h(0.5) | (h(0.25) << 16)),
            h(1.5) | (h(2.25) << 16)
        );
    }

    #[test]
    fn bf16_arith() {
        let mul = binary("mul", true, false, false, false).unwrap();
        assert_eq!(mul(bf(3.0), bf(-2.0)), bf(-6.0));
        let max = binary("max", true, false, false, false).unwrap();
        assert_eq!(max(0x7fc0, bf(1.0)), bf(1.0));
        assert!(compare("lt", true).unwrap()(bf(1.0), bf(2.0)));
        assert!(!compare("lt", true).unwrap()(0x7fc0, bf(2.0)));
    }
}
