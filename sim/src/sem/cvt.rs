//! `cvt` between every integer and float type: integer rounding (`.rni/.rzi/.rmi/.rpi`), float
//! rounding (`.rn/.rz/.rm/.rp`), `.sat`, `.ftz`, `.relu`. Float-to-integer conversions saturate to
//! the destination range and map NaN to 0, as the PTX ISA specifies.

use super::float::{dir64, NAN32, NAN64};
use super::{round_to, Rnd, BF16, F16, F32};
use crate::types::{extend, Ty};

/// A decoded `cvt` instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CvtSpec {
    pub dst: Ty,
    pub src: Ty,
    pub rnd: Rnd,
    /// `.rni`-style rounding to an integral value.
    pub integral: bool,
    pub sat: bool,
    pub ftz: bool,
    pub relu: bool,
}

fn int_range(ty: Ty) -> (i128, i128) {
    let bits = ty.bits();
    if ty.is_signed() {
        (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
    } else {
        (0, (1i128 << bits) - 1)
    }
}

fn read_float(ty: Ty, a: u64, ftz: bool) -> f64 {
    match ty {
        Ty::F32 => {
            let x = f32::from_bits(a as u32);
            if ftz && x.is_subnormal() {
                0.0f64.copysign(f64::from(x))
            } else {
                f64::from(x)
            }
        }
        Ty::F64 => f64::from_bits(a),
        Ty::F16 => F16.to_f64(a & 0xffff),
        Ty::Bf16 => BF16.to_f64(a & 0xffff),
        _ => 0.0,
    }
}

fn round_integral(x: f64, r: Rnd) -> f64 {
    match r {
        Rnd::Rn => x.round_ties_even(),
        Rnd::Rz => x.trunc(),
        Rnd::Rm => x.floor(),
        Rnd::Rp => x.ceil(),
    }
}

/// Encodes `x` (exact value `x + r`, `sign(r) == resid`) in float type `ty` with rounding `r`.
fn write_float(ty: Ty, x: f64, resid: i8, r: Rnd, ftz: bool) -> u64 {
    match ty {
        Ty::F64 => {
            if x.is_nan() {
                NAN64
            } else {
                dir64(x, resid, r.code()).to_bits()
            }
        }
        Ty::F32 => {
            if x.is_nan() {
                return u64::from(NAN32);
            }
            let b = round_to(x, resid, F32, r);
            if ftz && f32::from_bits(b as u32).is_subnormal() {
                b & 0x8000_0000
            } else {
                b
            }
        }
        Ty::F16 => round_to(x, resid, F16, r),
        Ty::Bf16 => round_to(x, resid, BF16, r),
        _ => 0,
    }
}

/// Converts one value.
pub fn convert(s: &CvtSpec, a: u64) -> u64 {
    let dst_mask = s.dst.mask();
    if s.src.is_int() {
        let v = extend(a, s.src.bits(), s.src.is_signed()) as i64;
        let v: i128 = if s.src.is_signed() {
            i128::from(v)
        } else {
            i128::from(v as u64)
        };
        if s.dst.is_int() {
            let v = if s.sat {
                let (lo, hi) = int_range(s.dst);
                v.clamp(lo, hi)
            } else {
                v
            };
            return (v as u64) & dst_mask;
        }
        // Integer to float: round the exact integer once.
        let approx = v as f64;
        let diff = v - approx as i128;
        let resid = diff.signum() as i8;
        let mut x = approx;
        if s.sat {
            x = x.clamp(0.0, 1.0);
            if x != approx {
                return write_float(s.dst, x, 0, s.rnd, s.ftz);
            }
        }
        if s.relu && x < 0.0 {
            x = 0.0;
        }
        return write_float(s.dst, x, resid, s.rnd, s.ftz);
    }
    let x = read_float(s.src, a, s.ftz);
    if s.dst.is_int() {
        if x.is_nan() {
            return 0;
        }
        let r = if s.integral { s.rnd } else { Rnd::Rz };
        let i = round_integral(x, r);
        let (lo, hi) = int_range(s.dst);
        let v = if i <= lo as f64 {
            lo
        } else if i >= hi as f64 {
            hi
        } else {
            i as i128
        };
        return (v as u64) & dst_mask;
    }
    if x.is_nan() {
        if s.sat {
            return 0;
        }
        return match s.dst {
            Ty::F64 => NAN64,
            Ty::F32 => u64::from(NAN32),
            _ => 0x7fff,
        };
    }
    let mut y = if s.integral {
        round_integral(x, s.rnd)
    } else {
        x
    };
    if s.sat {
        y = y.clamp(0.0, 1.0);
        if y == 0.0 {
            y = 0.0;
        }
    }
    if s.relu && y < 0.0 {
        y = 0.0;
    }
    write_float(s.dst, y, 0, if s.integral { Rnd::Rn } else { s.rnd }, s.ftz)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(dst: Ty, src: Ty, rnd: Rnd, integral: bool) -> CvtSpec {
        CvtSpec {
            dst,
            src,
            rnd,
            integral,
            sat: false,
            ftz: false,
            relu: false,
        }
    }
    fn f(x: f32) -> u64 {
        u64::from(x.to_bits())
    }

    #[test]
    fn float_to_int() {
        let rni = spec(Ty::S32, Ty::F32, Rnd::Rn, true);
        assert_eq!(convert(&rni, f(2.5)), 2);
        assert_eq!(convert(&rni, f(3.5)), 4);
        assert_eq!(convert(&rni, f(-2.5)) as u32 as i32, -2);
        let rzi = spec(Ty::S32, Ty::F32, Rnd::Rz, true);
        assert_eq!(convert(&rzi, f(-2.7)) as u32 as i32, -2);
        assert_eq!(convert(&rzi, f(f32::NAN)), 0);
        assert_eq!(convert(&rzi, f(1e20)), 0x7fff_ffff);
        assert_eq!(convert(&rzi, f(-1e20)), 0x8000_0000);
        let u = spec(Ty::U32, Ty::F32, Rnd::Rz, true);
        assert_eq!(convert(&u, f(-5.0)), 0);
        let rmi = spec(Ty::S32, Ty::F32, Rnd::Rm, true);
        assert_eq!(convert(&rmi, f(-2.1)) as u32 as i32, -3);
    }

    #[test]
    fn int_conversions() {
        let s = spec(Ty::S64, Ty::S32, Rnd::Rn, false);
        assert_eq!(convert(&s, 0xffff_ffff), u64::MAX);
        let u = spec(Ty::U64, Ty::U32, Rnd::Rn, false);
        assert_eq!(convert(&u, 0xffff_ffff), 0xffff_ffff);
        let mut sat = spec(Ty::U8, Ty::S32, Rnd::Rn, false);
        sat.sat = true;
        assert_eq!(convert(&sat, 300), 255);
        assert_eq!(convert(&sat, (-3i32) as u32 as u64), 0);
        let f = spec(Ty::F32, Ty::U32, Rnd::Rn, false);
        assert_eq!(convert(&f, 16_777_217), u64::from(16_777_216f32.to_bits()));
        let fp = spec(Ty::F32, Ty::U32, Rnd::Rp, false);
        assert_eq!(convert(&fp, 16_777_217), u64::from(16_777_218f32.to_bits()));
    }

    #[test]
    fn float_to_float() {
        let h = spec(Ty::F16, Ty::F32, Rnd::Rn, false);
        assert_eq!(convert(&h, f(1.0)), 0x3c00);
        assert_eq!(convert(&h, f(1.0 + 2f32.powi(-11))), 0x3c00);
        assert_eq!(convert(&h, f(70000.0)), 0x7c00);
        let hz = spec(Ty::F16, Ty::F32, Rnd::Rz, false);
        assert_eq!(convert(&hz, f(70000.0)), 0x7bff);
        let b = spec(Ty::Bf16, Ty::F32, Rnd::Rn, false);
        assert_eq!(convert(&b, f(1.0 + 2f32.powi(-8))), 0x3f80);
        assert_eq!(convert(&b, f(1.0 + 3.0 * 2f32.powi(-8))), 0x3f82);
        let w = spec(Ty::F32, Ty::F16, Rnd::Rn, false);
        assert_eq!(convert(&w, 0x3c00), f(1.0));
        let mut sat = spec(Ty::F32, Ty::F32, Rnd::Rn, false);
        sat.sat = true;
        assert_eq!(convert(&sat, f(2.0)), f(1.0));
        assert_eq!(convert(&sat, f(f32::NAN)), 0);
        let rni = spec(Ty::F32, Ty::F32, Rnd::Rn, true);
        assert_eq!(convert(&rni, f(0.5)), f(0.0));
        assert_eq!(convert(&rni, f(1.5)), f(2.0));
        let d = spec(Ty::F32, Ty::F64, Rnd::Rn, false);
        assert_eq!(convert(&d, 0.1f64.to_bits()), f(0.1));
    }
}
