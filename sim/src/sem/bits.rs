//! Bit-manipulation and narrow-multiply instructions that nvcc emits for ordinary integer code
//! (PTX ISA "Integer Arithmetic" and "Logic and Shift" pages): `bfind.shiftamt`, `shf`,
//! `lop3`, `mul24`/`mad24`, `sad`, the carry chain `add.cc`/`addc`/`sub.cc`/`subc`/`mad.cc`/
//! `madc`, and `testp`.

use super::{F1, F2, F3};
use crate::types::Ty;

/// `bfind.shiftamt`: the left shift that brings the most significant non-sign bit to the top,
/// 0xffffffff when there is none.
pub fn bfind_shiftamt(ty: Ty) -> Option<F1> {
    fn f<const BITS: u32, const SIGNED: bool>(a: u64) -> u64 {
        let mask = u64::MAX >> (64 - BITS);
        let v = a & mask;
        let v = if SIGNED && (v >> (BITS - 1)) & 1 == 1 {
            !v & mask
        } else {
            v
        };
        if v == 0 {
            0xffff_ffff
        } else {
            u64::from(BITS - 1 - (63 - v.leading_zeros()))
        }
    }
    Some(match ty {
        Ty::U32 => f::<32, false>,
        Ty::S32 => f::<32, true>,
        Ty::U64 => f::<64, false>,
        Ty::S64 => f::<64, true>,
        _ => return None,
    })
}

/// `shf.{l,r}.{wrap,clamp}.b32 d, a, b, c`: shift the 64-bit `b:a` by `c` (wrap: `c & 31`,
/// clamp: `min(c, 32)`) and keep the upper (`.l`) or lower (`.r`) 32 bits.
pub fn shf(left: bool, clamp: bool) -> F3 {
    fn amount<const CLAMP: bool>(c: u64) -> u32 {
        let c = c as u32;
        if CLAMP {
            c.min(32)
        } else {
            c & 31
        }
    }
    fn l<const CLAMP: bool>(a: u64, b: u64, c: u64) -> u64 {
        let v = ((b & 0xffff_ffff) << 32) | (a & 0xffff_ffff);
        ((v << amount::<CLAMP>(c)) >> 32) & 0xffff_ffff
    }
    fn r<const CLAMP: bool>(a: u64, b: u64, c: u64) -> u64 {
        let v = ((b & 0xffff_ffff) << 32) | (a & 0xffff_ffff);
        (v >> amount::<CLAMP>(c)) & 0xffff_ffff
    }
    match (left, clamp) {
        (true, false) => l::<false>,
        (true, true) => l::<true>,
        (false, false) => r::<false>,
        (false, true) => r::<true>,
    }
}

/// `lop3.b32 d, a, b, c, lut`: bit `i` of `d` is bit `4a_i + 2b_i + c_i` of `lut`.
pub fn lop3(a: u64, b: u64, c: u64, lut: u64) -> u64 {
    let mut d = 0u64;
    for i in 0..32 {
        let idx = (((a >> i) & 1) << 2) | (((b >> i) & 1) << 1) | ((c >> i) & 1);
        d |= ((lut >> idx) & 1) << i;
    }
    d
}

/// The 48-bit product of the low 24 bits of `a` and `b` (sign-extended for `.s32`).
fn mul24_full<const SIGNED: bool>(a: u64, b: u64) -> i64 {
    let ext = |v: u64| {
        let v = (v & 0xff_ffff) as i64;
        if SIGNED && v & 0x80_0000 != 0 {
            v - 0x100_0000
        } else {
            v
        }
    };
    ext(a) * ext(b)
}

fn mul24_lo<const S: bool>(a: u64, b: u64) -> u64 {
    (mul24_full::<S>(a, b) as u64) & 0xffff_ffff
}
fn mul24_hi<const S: bool>(a: u64, b: u64) -> u64 {
    ((mul24_full::<S>(a, b) >> 16) as u64) & 0xffff_ffff
}
fn mad24_lo<const S: bool>(a: u64, b: u64, c: u64) -> u64 {
    mul24_lo::<S>(a, b).wrapping_add(c) & 0xffff_ffff
}
fn mad24_hi<const S: bool>(a: u64, b: u64, c: u64) -> u64 {
    mul24_hi::<S>(a, b).wrapping_add(c) & 0xffff_ffff
}

/// `mul24.{lo,hi}.{u32,s32}`: bits 0..32 or 16..48 of the 48-bit product.
pub fn mul24(hi: bool, ty: Ty) -> Option<F2> {
    Some(match (hi, ty) {
        (false, Ty::U32) => mul24_lo::<false>,
        (false, Ty::S32) => mul24_lo::<true>,
        (true, Ty::U32) => mul24_hi::<false>,
        (true, Ty::S32) => mul24_hi::<true>,
        _ => return None,
    })
}

/// `mad24.{lo,hi}.{u32,s32}`: [`mul24`] plus `c` (wrapping).
pub fn mad24(hi: bool, ty: Ty) -> Option<F3> {
    Some(match (hi, ty) {
        (false, Ty::U32) => mad24_lo::<false>,
        (false, Ty::S32) => mad24_lo::<true>,
        (true, Ty::U32) => mad24_hi::<false>,
        (true, Ty::S32) => mad24_hi::<true>,
        _ => return None,
    })
}

/// The low `BITS` bits of `v` as a (two's-complement when `SIGNED`) integer.
fn value<const BITS: u32, const SIGNED: bool>(v: u64) -> i128 {
    let v = v & (u64::MAX >> (64 - BITS));
    if SIGNED && (v >> (BITS - 1)) & 1 == 1 {
        i128::from(v) - (1i128 << BITS)
    } else {
        i128::from(v)
    }
}

/// `sad.type d, a, b, c`: `c + |a - b|` (wrapping to the type).
pub fn sad(ty: Ty) -> Option<F3> {
    fn f<const BITS: u32, const SIGNED: bool>(a: u64, b: u64, c: u64) -> u64 {
        let mask = u64::MAX >> (64 - BITS);
        let val = |v| value::<BITS, SIGNED>(v);
        let diff = (val(a) - val(b)).unsigned_abs() as u64;
        diff.wrapping_add(c) & mask
    }
    Some(match ty {
        Ty::U16 => f::<16, false>,
        Ty::S16 => f::<16, true>,
        Ty::U32 => f::<32, false>,
        Ty::S32 => f::<32, true>,
        Ty::U64 => f::<64, false>,
        Ty::S64 => f::<64, true>,
        _ => return None,
    })
}

/// One step of a carry chain: `(a, b, c, carry_in) -> (d, carry_out)`.
pub type CarryFn = fn(u64, u64, u64, bool) -> (u64, bool);

fn add_c<const BITS: u32>(a: u64, b: u64, _c: u64, cin: bool) -> (u64, bool) {
    let mask = u64::MAX >> (64 - BITS);
    let sum = u128::from(a & mask) + u128::from(b & mask) + u128::from(cin);
    ((sum as u64) & mask, sum >> BITS != 0)
}
/// `a - (b + borrow)`, borrow out when that is negative.
fn sub_c<const BITS: u32>(a: u64, b: u64, _c: u64, bin: bool) -> (u64, bool) {
    let mask = u64::MAX >> (64 - BITS);
    let sub = i128::from(a & mask) - i128::from(b & mask) - i128::from(bin);
    ((sub as u64) & mask, sub < 0)
}
/// `(a * b).{lo,hi} + c + carry`, carry out of the addition.
fn mad_c<const BITS: u32, const HI: bool, const SIGNED: bool>(
    a: u64,
    b: u64,
    c: u64,
    cin: bool,
) -> (u64, bool) {
    let mask = u64::MAX >> (64 - BITS);
    let p = value::<BITS, SIGNED>(a) * value::<BITS, SIGNED>(b);
    let part = if HI { (p >> BITS) as u64 } else { p as u64 } & mask;
    add_c::<BITS>(part, c, 0, cin)
}

/// The carry-chain function of `add`/`sub` (`sub` = true) or `mad` (`.hi` when `hi`).
pub fn carry_fn(op: &str, hi: bool, ty: Ty) -> Option<CarryFn> {
    let (bits64, signed) = match ty {
        Ty::U32 | Ty::B32 => (false, false),
        Ty::S32 => (false, true),
        Ty::U64 | Ty::B64 => (true, false),
        Ty::S64 => (true, true),
        _ => return None,
    };
    Some(match (op, bits64, hi, signed) {
        ("add", false, ..) => add_c::<32>,
        ("add", true, ..) => add_c::<64>,
        ("sub", false, ..) => sub_c::<32>,
        ("sub", true, ..) => sub_c::<64>,
        ("mad", false, false, _) => mad_c::<32, false, false>,
        ("mad", true, false, _) => mad_c::<64, false, false>,
        ("mad", false, true, false) => mad_c::<32, true, false>,
        ("mad", false, true, true) => mad_c::<32, true, true>,
        ("mad", true, true, false) => mad_c::<64, true, false>,
        ("mad", true, true, true) => mad_c::<64, true, true>,
        _ => return None,
    })
}

/// `testp.op.{f32,f64} p, a`.
pub fn testp(op: &str, ty: Ty) -> Option<F1> {
    /// `[finite, infinite, number, notanumber, normal, subnormal][OP]`.
    fn pick<const OP: u8>(class: [bool; 6]) -> u64 {
        u64::from(class[OP as usize])
    }
    macro_rules! classes {
        ($v:expr) => {
            [
                $v.is_finite(),
                $v.is_infinite(),
                !$v.is_nan(),
                $v.is_nan(),
                $v.is_normal(),
                $v.is_subnormal(),
            ]
        };
    }
    fn f32_<const OP: u8>(a: u64) -> u64 {
        pick::<OP>(classes!(f32::from_bits(a as u32)))
    }
    fn f64_<const OP: u8>(a: u64) -> u64 {
        pick::<OP>(classes!(f64::from_bits(a)))
    }
    let wide = match ty {
        Ty::F32 => false,
        Ty::F64 => true,
        _ => return None,
    };
    macro_rules! pick {
        ($n:literal) => {
            if wide {
                f64_::<$n> as F1
            } else {
                f32_::<$n> as F1
            }
        };
    }
    Some(match op {
        "finite" => pick!(0),
        "infinite" => pick!(1),
        "number" => pick!(2),
        "notanumber" => pick!(3),
        "normal" => pick!(4),
        "subnormal" => pick!(5),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lop3_tables_match_their_boolean_functions() {
        let (a, b, c) = (0xf0f0_1234u64, 0xcc33_5678, 0xaa55_9abc);
        assert_eq!(lop3(a, b, c, 0xf0), a);
        assert_eq!(lop3(a, b, c, 0x96), a ^ b ^ c);
        assert_eq!(lop3(a, b, c, 0x80), a & b & c);
        assert_eq!(lop3(a, b, c, 0xe8), (a & b) | (a & c) | (b & c));
    }

    #[test]
    fn carry_chain_adds_and_subtracts_128_bit_values() {
        let add = carry_fn("add", false, Ty::U32).unwrap();
        let (lo, c) = add(0xffff_ffff, 1, 0, false);
        assert_eq!((lo, c), (0, true));
        assert_eq!(add(5, 6, 0, c), (12, false));
        let sub = carry_fn("sub", false, Ty::U32).unwrap();
        let (lo, b) = sub(0, 1, 0, false);
        assert_eq!((lo, b), (0xffff_ffff, true));
        assert_eq!(sub(5, 2, 0, b), (2, false));
    }
}
