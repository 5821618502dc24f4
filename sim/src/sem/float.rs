//! f32/f64 semantics: arithmetic with `.rn/.rz/.rm/.rp`, `.ftz`, `.sat`; min/max with the PTX NaN
//! rules; the `.approx` special functions (computed accurately in f64, then rounded); float
//! comparisons for `setp` (ordered ops are false on NaN, `u`-suffixed ops are true on NaN).
//! Arithmetic NaN results are the canonical NaN (`0x7fffffff`, `0x7fffffffffffffff`).

use super::{round_to, sign_of, two_sum_err, Cmp, Rnd, F1, F2, F3, F32};

pub const NAN32: u32 = 0x7fff_ffff;
pub const NAN64: u64 = 0x7fff_ffff_ffff_ffff;

#[inline]
fn rd32<const FTZ: bool>(a: u64) -> f32 {
    let x = f32::from_bits(a as u32);
    if FTZ && x.is_subnormal() {
        0.0f32.copysign(x)
    } else {
        x
    }
}

#[inline]
fn wr32<const FTZ: bool, const SAT: bool>(x: f32) -> u64 {
    if x.is_nan() {
        return if SAT { 0 } else { u64::from(NAN32) };
    }
    let mut x = x;
    if FTZ && x.is_subnormal() {
        x = 0.0f32.copysign(x);
    }
    if SAT {
        x = x.clamp(0.0, 1.0);
        if x == 0.0 {
            x = 0.0;
        }
    }
    u64::from(x.to_bits())
}

#[inline]
fn round32(x: f64, resid: i8, r: u8) -> f32 {
    f32::from_bits(round_to(x, resid, F32, Rnd::from_code(r)) as u32)
}

#[inline]
fn rd64(a: u64) -> f64 {
    f64::from_bits(a)
}

#[inline]
fn wr64<const SAT: bool>(x: f64) -> u64 {
    if x.is_nan() {
        return if SAT { 0 } else { NAN64 };
    }
    if SAT {
        let y = x.clamp(0.0, 1.0);
        return if y == 0.0 { 0 } else { y.to_bits() };
    }
    x.to_bits()
}

fn next_up(x: f64) -> f64 {
    if x.is_nan() || x == f64::INFINITY {
        return x;
    }
    if x == 0.0 {
        return f64::from_bits(1);
    }
    let b = x.to_bits();
    f64::from_bits(if x > 0.0 { b + 1 } else { b - 1 })
}

fn next_down(x: f64) -> f64 {
    -next_up(-x)
}

/// Applies a directed rounding to an f64 result `s` (round-to-nearest) whose exact value is
/// `s + r` with `sign(r) == resid`.
#[inline]
pub(crate) fn dir64(s: f64, resid: i8, r: u8) -> f64 {
    if resid == 0 || !s.is_finite() {
        return s;
    }
    match r {
        1 => {
            if (resid < 0) != (s < 0.0) && s != 0.0 {
                if s > 0.0 {
                    next_down(s)
                } else {
                    next_up(s)
                }
            } else {
                s
            }
        }
        2 => {
            if resid < 0 {
                next_down(s)
            } else {
                s
            }
        }
        3 => {
            if resid > 0 {
                next_up(s)
            } else {
                s
            }
        }
        _ => s,
    }
}

// ---- f32 arithmetic ----

fn add32<const R: u8, const FTZ: bool, const SAT: bool>(a: u64, b: u64) -> u64 {
    let (x, y) = (rd32::<FTZ>(a), rd32::<FTZ>(b));
    let r = if R == 0 {
        x + y
    } else {
        let s = f64::from(x) + f64::from(y);
        round32(s, two_sum_err(f64::from(x), f64::from(y), s), R)
    };
    wr32::<FTZ, SAT>(r)
}

fn sub32<const R: u8, const FTZ: bool, const SAT: bool>(a: u64, b: u64) -> u64 {
    add32::<R, FTZ, SAT>(a, b ^ 0x8000_0000)
}

fn mul32<const R: u8, const FTZ: bool, const SAT: bool>(a: u64, b: u64) -> u64 {
    let (x, y) = (rd32::<FTZ>(a), rd32::<FTZ>(b));
    let r = if R == 0 {
        x * y
    } else {
        round32(f64::from(x) * f64::from(y), 0, R)
    };
    wr32::<FTZ, SAT>(r)
}

fn fma32<const R: u8, const FTZ: bool, const SAT: bool>(a: u64, b: u64, c: u64) -> u64 {
    let (x, y, z) = (rd32::<FTZ>(a), rd32::<FTZ>(b), rd32::<FTZ>(c));
    let r = if R == 0 {
        x.mul_add(y, z)
    } else {
        let p = f64::from(x) * f64::from(y);
        let s = p + f64::from(z);
        round32(s, two_sum_err(p, f64::from(z), s), R)
    };
    wr32::<FTZ, SAT>(r)
}

fn div32<const R: u8, const FTZ: bool, const SAT: bool>(a: u64, b: u64) -> u64 {
    let (x, y) = (rd32::<FTZ>(a), rd32::<FTZ>(b));
    let r = if R == 0 {
        x / y
    } else {
        let (xd, yd) = (f64::from(x), f64::from(y));
        let q = xd / yd;
        let resid = if q.is_finite() && yd != 0.0 {
            sign_of((-q).mul_add(yd, xd)) * sign_of(yd)
        } else {
            0
        };
        round32(q, resid, R)
    };
    wr32::<FTZ, SAT>(r)
}

fn sqrt32<const R: u8, const FTZ: bool, const SAT: bool>(a: u64) -> u64 {
    let x = rd32::<FTZ>(a);
    let r = if R == 0 {
        x.sqrt()
    } else {
        let xd = f64::from(x);
        let s = xd.sqrt();
        let resid = if s.is_finite() && s > 0.0 {
            sign_of((-s).mul_add(s, xd))
        } else {
            0
        };
        round32(s, resid, R)
    };
    wr32::<FTZ, SAT>(r)
}

fn rcp32<const R: u8, const FTZ: bool, const SAT: bool>(a: u64) -> u64 {
    div32::<R, FTZ, SAT>(u64::from(1.0f32.to_bits()), a)
}

macro_rules! approx32 {
    ($name:ident, |$x:ident| $e:expr) => {
        fn $name<const R: u8, const FTZ: bool, const SAT: bool>(a: u64) -> u64 {
            let $x = f64::from(rd32::<FTZ>(a));
            wr32::<FTZ, SAT>(($e) as f32)
        }
    };
}
approx32!(rsqrt32, |x| 1.0 / x.sqrt());
approx32!(ex2_32, |x| x.exp2());
approx32!(lg2_32, |x| x.log2());
approx32!(sin32, |x| x.sin());
approx32!(cos32, |x| x.cos());
approx32!(tanh32, |x| x.tanh());

fn min32<const R: u8, const FTZ: bool, const NAN: bool>(a: u64, b: u64) -> u64 {
    let (x, y) = (rd32::<FTZ>(a), rd32::<FTZ>(b));
    u64::from(minmax32::<NAN>(x, y, true))
}

fn max32<const R: u8, const FTZ: bool, const NAN: bool>(a: u64, b: u64) -> u64 {
    let (x, y) = (rd32::<FTZ>(a), rd32::<FTZ>(b));
    u64::from(minmax32::<NAN>(x, y, false))
}

fn minmax32<const NAN: bool>(x: f32, y: f32, is_min: bool) -> u32 {
    match (x.is_nan(), y.is_nan()) {
        (true, true) => NAN32,
        (true, false) | (false, true) if NAN => NAN32,
        (true, false) => y.to_bits(),
        (false, true) => x.to_bits(),
        _ => {
            if x == y {
                // -0.0 orders below +0.0.
                let neg = x.is_sign_negative();
                let pick_x = if is_min { neg } else { !neg };
                if pick_x {
                    x.to_bits()
                } else {
                    y.to_bits()
                }
            } else if (x < y) == is_min {
                x.to_bits()
            } else {
                y.to_bits()
            }
        }
    }
}

fn abs32<const R: u8, const FTZ: bool, const SAT: bool>(a: u64) -> u64 {
    u64::from(rd32::<FTZ>(a).to_bits() & 0x7fff_ffff)
}

fn neg32<const R: u8, const FTZ: bool, const SAT: bool>(a: u64) -> u64 {
    u64::from(rd32::<FTZ>(a).to_bits() ^ 0x8000_0000)
}

fn copysign32(a: u64, b: u64) -> u64 {
    (b & 0x7fff_ffff) | (a & 0x8000_0000)
}

// ---- f64 arithmetic ----

fn add64<const R: u8, const FTZ: bool, const SAT: bool>(a: u64, b: u64) -> u64 {
    let (x, y) = (rd64(a), rd64(b));
    let s = x + y;
    wr64::<SAT>(if R == 0 {
        s
    } else {
        dir64(s, two_sum_err(x, y, s), R)
    })
}

fn sub64<const R: u8, const FTZ: bool, const SAT: bool>(a: u64, b: u64) -> u64 {
    add64::<R, FTZ, SAT>(a, b ^ (1 << 63))
}

fn mul64<const R: u8, const FTZ: bool, const SAT: bool>(a: u64, b: u64) -> u64 {
    let (x, y) = (rd64(a), rd64(b));
    let p = x * y;
    wr64::<SAT>(if R == 0 {
        p
    } else {
        dir64(p, sign_of(x.mul_add(y, -p)), R)
    })
}

fn fma64<const R: u8, const FTZ: bool, const SAT: bool>(a: u64, b: u64, c: u64) -> u64 {
    let (x, y, z) = (rd64(a), rd64(b), rd64(c));
    let s = x.mul_add(y, z);
    if R == 0 {
        return wr64::<SAT>(s);
    }
    // Residual sign of x*y + z - s (exact up to rare cancellation cases; see crate docs).
    let p = x * y;
    let pe = x.mul_add(y, -p);
    let t = p + z;
    let te = {
        let bb = t - p;
        (p - (t - bb)) + (z - bb)
    };
    let resid = sign_of(((t - s) + te) + pe);
    wr64::<SAT>(dir64(s, resid, R))
}

fn div64<const R: u8, const FTZ: bool, const SAT: bool>(a: u64, b: u64) -> u64 {
    let (x, y) = (rd64(a), rd64(b));
    let q = x / y;
    if R == 0 {
        return wr64::<SAT>(q);
    }
    let resid = if q.is_finite() && y != 0.0 {
        sign_of((-q).mul_add(y, x)) * sign_of(y)
    } else {
        0
    };
    wr64::<SAT>(dir64(q, resid, R))
}

fn sqrt64<const R: u8, const FTZ: bool, const SAT: bool>(a: u64) -> u64 {
    let x = rd64(a);
    let s = x.sqrt();
    if R == 0 {
        return wr64::<SAT>(s);
    }
    let resid = if s.is_finite() && s > 0.0 {
        sign_of((-s).mul_add(s, x))
    } else {
        0
    };
    wr64::<SAT>(dir64(s, resid, R))
}

fn rcp64<const R: u8, const FTZ: bool, const SAT: bool>(a: u64) -> u64 {
    div64::<R, FTZ, SAT>(1.0f64.to_bits(), a)
}

fn rsqrt64<const R: u8, const FTZ: bool, const SAT: bool>(a: u64) -> u64 {
    wr64::<SAT>(1.0 / rd64(a).sqrt())
}

fn minmax64<const NAN: bool>(x: f64, y: f64, is_min: bool) -> u64 {
    match (x.is_nan(), y.is_nan()) {
        (true, true) => NAN64,
        (true, false) | (false, true) if NAN => NAN64,
        (true, false) => y.to_bits(),
        (false, true) => x.to_bits(),
        _ => {
            if x == y {
                let neg = x.is_sign_negative();
                if is_min == neg {
                    x.to_bits()
                } else {
                    y.to_bits()
                }
            } else if (x < y) == is_min {
                x.to_bits()
            } else {
                y.to_bits()
            }
        }
    }
}

fn min64<const R: u8, const FTZ: bool, const NAN: bool>(a: u64, b: u64) -> u64 {
    minmax64::<NAN>(rd64(a), rd64(b), true)
}

fn max64<const R: u8, const FTZ: bool, const NAN: bool>(a: u64, b: u64) -> u64 {
    minmax64::<NAN>(rd64(a), rd64(b), false)
}

fn abs64<const R: u8, const FTZ: bool, const SAT: bool>(a: u64) -> u64 {
    a & !(1 << 63)
}

fn neg64<const R: u8, const FTZ: bool, const SAT: bool>(a: u64) -> u64 {
    a ^ (1 << 63)
}

fn copysign64(a: u64, b: u64) -> u64 {
    (b & !(1 << 63)) | (a & (1 << 63))
}

/// Instantiates `$f::<R, FTZ, SAT>` for run-time flags.
macro_rules! inst {
    ($f:ident, $T:ty, $r:expr, $ftz:expr, $sat:expr) => {
        match ($r, $ftz, $sat) {
            (0, false, false) => $f::<0, false, false> as $T,
            (0, false, true) => $f::<0, false, true> as $T,
            (0, true, false) => $f::<0, true, false> as $T,
            (0, true, true) => $f::<0, true, true> as $T,
            (1, false, false) => $f::<1, false, false> as $T,
            (1, false, true) => $f::<1, false, true> as $T,
            (1, true, false) => $f::<1, true, false> as $T,
            (1, true, true) => $f::<1, true, true> as $T,
            (2, false, false) => $f::<2, false, false> as $T,
            (2, false, true) => $f::<2, false, true> as $T,
            (2, true, false) => $f::<2, true, false> as $T,
            (2, true, true) => $f::<2, true, true> as $T,
            (3, false, false) => $f::<3, false, false> as $T,
            (3, false, true) => $f::<3, false, true> as $T,
            (3, true, false) => $f::<3, true, false> as $T,
            _ => $f::<3, true, true> as $T,
        }
    };
}

/// Flags shared by the float selectors.
#[derive(Debug, Clone, Copy, Default)]
pub struct FFlags {
    pub rnd: u8,
    pub ftz: bool,
    pub sat: bool,
    /// `.NaN` on min/max.
    pub nan: bool,
}

pub fn binary32(op: &str, f: FFlags) -> Option<F2> {
    Some(match op {
        "add" => inst!(add32, F2, f.rnd, f.ftz, f.sat),
        "sub" => inst!(sub32, F2, f.rnd, f.ftz, f.sat),
        "mul" => inst!(mul32, F2, f.rnd, f.ftz, f.sat),
        "div" => inst!(div32, F2, f.rnd, f.ftz, f.sat),
        "min" => inst!(min32, F2, 0, f.ftz, f.nan),
        "max" => inst!(max32, F2, 0, f.ftz, f.nan),
        "copysign" => copysign32,
        _ => return None,
    })
}

pub fn binary64(op: &str, f: FFlags) -> Option<F2> {
    Some(match op {
        "add" => inst!(add64, F2, f.rnd, false, f.sat),
        "sub" => inst!(sub64, F2, f.rnd, false, f.sat),
        "mul" => inst!(mul64, F2, f.rnd, false, f.sat),
        "div" => inst!(div64, F2, f.rnd, false, f.sat),
        "min" => inst!(min64, F2, 0, false, f.nan),
        "max" => inst!(max64, F2, 0, false, f.nan),
        "copysign" => copysign64,
        _ => return None,
    })
}

pub fn fma32_fn(f: FFlags) -> F3 {
    inst!(fma32, F3, f.rnd, f.ftz, f.sat)
}

pub fn fma64_fn(f: FFlags) -> F3 {
    inst!(fma64, F3, f.rnd, false, f.sat)
}

/// Unary f32 ops; `approx` selects the `.approx` variants.
pub fn unary32(op: &str, f: FFlags) -> Option<F1> {
    Some(match op {
        "sqrt" => inst!(sqrt32, F1, f.rnd, f.ftz, f.sat),
        "rcp" => inst!(rcp32, F1, f.rnd, f.ftz, f.sat),
        "rsqrt" => inst!(rsqrt32, F1, 0, f.ftz, f.sat),
        "ex2" => inst!(ex2_32, F1, 0, f.ftz, f.sat),
        "lg2" => inst!(lg2_32, F1, 0, f.ftz, f.sat),
        "sin" => inst!(sin32, F1, 0, f.ftz, f.sat),
        "cos" => inst!(cos32, F1, 0, f.ftz, f.sat),
        "tanh" => inst!(tanh32, F1, 0, f.ftz, f.sat),
        "abs" => inst!(abs32, F1, 0, f.ftz, false),
        "neg" => inst!(neg32, F1, 0, f.ftz, false),
        _ => return None,
    })
}

pub fn unary64(op: &str, f: FFlags) -> Option<F1> {
    Some(match op {
        "sqrt" => inst!(sqrt64, F1, f.rnd, false, f.sat),
        "rcp" => inst!(rcp64, F1, f.rnd, false, f.sat),
        "rsqrt" => inst!(rsqrt64, F1, 0, false, false),
        "abs" => inst!(abs64, F1, 0, false, false),
        "neg" => inst!(neg64, F1, 0, false, false),
        _ => return None,
    })
}

// ---- comparisons ----

/// Comparison codes shared by f32/f64/f16/bf16 compare functions.
pub fn cmp_code(op: &str) -> Option<u8> {
    Some(match op {
        "eq" => 0,
        "ne" => 1,
        "lt" => 2,
        "le" => 3,
        "gt" => 4,
        "ge" => 5,
        "equ" => 6,
        "neu" => 7,
        "ltu" => 8,
        "leu" => 9,
        "gtu" => 10,
        "geu" => 11,
        "num" => 12,
        "nan" => 13,
        _ => return None,
    })
}

/// Evaluates compare `code` on two f64 values (exact images of the operands).
#[inline]
pub fn fcmp(code: u8, x: f64, y: f64) -> bool {
    let unordered = x.is_nan() || y.is_nan();
    match code {
        0 => x == y,
        1 => !unordered && x != y,
        2 => x < y,
        3 => x <= y,
        4 => x > y,
        5 => x >= y,
        6 => unordered || x == y,
        7 => x != y,
        8 => unordered || x < y,
        9 => unordered || x <= y,
        10 => unordered || x > y,
        11 => unordered || x >= y,
        12 => !unordered,
        _ => unordered,
    }
}

fn cmp32<const C: u8, const FTZ: bool>(a: u64, b: u64) -> bool {
    fcmp(C, f64::from(rd32::<FTZ>(a)), f64::from(rd32::<FTZ>(b)))
}

fn cmp64<const C: u8, const FTZ: bool>(a: u64, b: u64) -> bool {
    fcmp(C, rd64(a), rd64(b))
}

macro_rules! inst_cmp {
    ($f:ident, $c:expr, $ftz:expr, [$($n:literal),*]) => {
        match ($c, $ftz) {
            $( ($n, false) => $f::<$n, false> as Cmp, ($n, true) => $f::<$n, true> as Cmp, )*
            _ => return None,
        }
    };
}

pub fn compare32(op: &str, ftz: bool) -> Option<Cmp> {
    let c = cmp_code(op)?;
    Some(inst_cmp!(
        cmp32,
        c,
        ftz,
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]
    ))
}

pub fn compare64(op: &str) -> Option<Cmp> {
    let c = cmp_code(op)?;
    Some(inst_cmp!(
        cmp64,
        c,
        false,
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(x: f32) -> u64 {
        u64::from(x.to_bits())
    }
    fn g(b: u64) -> f32 {
        f32::from_bits(b as u32)
    }

    #[test]
    fn rounding_modes_add() {
        let one = f(1.0);
        let tiny = f(2f32.powi(-30));
        let rn = binary32("add", FFlags::default()).unwrap();
        let rp = binary32(
            "add",
            FFlags {
                rnd: 3,
                ..FFlags::default()
            },
        )
        .unwrap();
        let rz = binary32(
            "add",
            FFlags {
                rnd: 1,
                ..FFlags::default()
            },
        )
        .unwrap();
        assert_eq!(g(rn(one, tiny)), 1.0);
        assert_eq!(g(rp(one, tiny)), 1.0 + f32::EPSILON);
        assert_eq!(g(rz(f(-1.0), f(-(2f32.powi(-30))))), -1.0);
        // Directed rounding where the f64 sum itself is inexact.
        let big = f(2f32.powi(100));
        let rm = binary32(
            "sub",
            FFlags {
                rnd: 2,
                ..FFlags::default()
            },
        )
        .unwrap();
        assert_eq!(
            g(rm(big, f(2f32.powi(-100)))),
            2f32.powi(100) * (1.0 - f32::EPSILON / 2.0)
        );
    }

    #[test]
    fn ftz_and_sat() {
        let sub = f(1e-40);
        let mul_ftz = binary32(
            "mul",
            FFlags {
                ftz: true,
                ..FFlags::default()
            },
        )
        .unwrap();
        assert_eq!(mul_ftz(sub, f(1.0)), 0);
        let add_sat = binary32(
            "add",
            FFlags {
                sat: true,
                ..FFlags::default()
            },
        )
        .unwrap();
        assert_eq!(g(add_sat(f(0.75), f(0.5))), 1.0);
        assert_eq!(g(add_sat(f(-0.75), f(0.5))), 0.0);
        assert_eq!(add_sat(f(f32::NAN), f(0.5)), 0);
    }

    #[test]
    fn min_max_nan() {
        let min = binary32("min", FFlags::default()).unwrap();
        let min_nan = binary32(
            "min",
            FFlags {
                nan: true,
                ..FFlags::default()
            },
        )
        .unwrap();
        assert_eq!(g(min(f(f32::NAN), f(2.0))), 2.0);
        assert_eq!(min(f(f32::NAN), f(f32::NAN)), u64::from(NAN32));
        assert_eq!(min_nan(f(f32::NAN), f(2.0)), u64::from(NAN32));
        assert_eq!(min(f(0.0), f(-0.0)), f(-0.0));
        let max = binary32("max", FFlags::default()).unwrap();
        assert_eq!(max(f(-0.0), f(0.0)), f(0.0));
    }

    #[test]
    fn nan_compares() {
        let nan = f(f32::NAN);
        let one = f(1.0);
        for (op, expect) in [
            ("eq", false),
            ("ne", false),
            ("lt", false),
            ("ge", false),
            ("equ", true),
            ("neu", true),
            ("ltu", true),
            ("num", false),
            ("nan", true),
        ] {
            assert_eq!(compare32(op, false).unwrap()(nan, one), expect, "{op}");
        }
        assert!(compare32("ne", false).unwrap()(f(2.0), one));
        assert!(!compare32("neu", false).unwrap()(one, one));
    }

    #[test]
    fn f64_directed() {
        let rp = binary64(
            "div",
            FFlags {
                rnd: 3,
                ..FFlags::default()
            },
        )
        .unwrap();
        let rm = binary64(
            "div",
            FFlags {
                rnd: 2,
                ..FFlags::default()
            },
        )
        .unwrap();
        let one = 1.0f64.to_bits();
        let three = 3.0f64.to_bits();
        assert!(f64::from_bits(rp(one, three)) > f64::from_bits(rm(one, three)));
        let rn_fma = fma32_fn(FFlags::default());
        assert_eq!(g(rn_fma(f(2.0), f(3.0), f(1.0))), 7.0);
    }
}
