//! Integer and bitwise semantics (PTX `add`..`prmt` on `.u/.s/.b` 16/32/64-bit types). Results
//! wrap unless `.sat`; shifts clamp amounts at the type width; division by zero gives the
//! all-ones value (quotient) and the dividend (remainder), as NVIDIA hardware does.

use super::{Cmp, F1, F2, F3};
use crate::types::Ty;

/// An integer register type the generic semantics are instantiated for.
pub trait Int: Copy + Ord + 'static {
    const BITS: u32;
    const SIGNED: bool;
    fn from_bits(v: u64) -> Self;
    fn to_bits(self) -> u64;
    fn wadd(self, o: Self) -> Self;
    fn wsub(self, o: Self) -> Self;
    fn wmul(self, o: Self) -> Self;
    fn sat_add(self, o: Self) -> Self;
    fn sat_sub(self, o: Self) -> Self;
    fn as_i128(self) -> i128;
    fn from_i128(v: i128) -> Self;
    fn max_v() -> Self;
    fn min_v() -> Self;
}

macro_rules! impl_int {
    ($t:ty, $ut:ty, $signed:expr) => {
        impl Int for $t {
            const BITS: u32 = <$t>::BITS;
            const SIGNED: bool = $signed;
            #[inline]
            fn from_bits(v: u64) -> Self {
                v as $ut as $t
            }
            #[inline]
            fn to_bits(self) -> u64 {
                u64::from(self as $ut)
            }
            #[inline]
            fn wadd(self, o: Self) -> Self {
                self.wrapping_add(o)
            }
            #[inline]
            fn wsub(self, o: Self) -> Self {
                self.wrapping_sub(o)
            }
            #[inline]
            fn wmul(self, o: Self) -> Self {
                self.wrapping_mul(o)
            }
            #[inline]
            fn sat_add(self, o: Self) -> Self {
                self.saturating_add(o)
            }
            #[inline]
            fn sat_sub(self, o: Self) -> Self {
                self.saturating_sub(o)
            }
            #[inline]
            fn as_i128(self) -> i128 {
                self as i128
            }
            #[inline]
            fn from_i128(v: i128) -> Self {
                v as $t
            }
            fn max_v() -> Self {
                <$t>::MAX
            }
            fn min_v() -> Self {
                <$t>::MIN
            }
        }
    };
}

impl_int!(u8, u8, false);
impl_int!(i8, u8, true);
impl_int!(u16, u16, false);
impl_int!(i16, u16, true);
impl_int!(u32, u32, false);
impl_int!(i32, u32, true);
impl_int!(u64, u64, false);
impl_int!(i64, u64, true);

/// Instantiates a generic semantic function for the integer type `ty` (16/32/64-bit).
macro_rules! by_ty {
    ($ty:expr, $f:ident, $fty:ty) => {
        match $ty {
            Ty::U16 | Ty::B16 => Some($f::<u16> as $fty),
            Ty::S16 => Some($f::<i16> as $fty),
            Ty::U32 | Ty::B32 => Some($f::<u32> as $fty),
            Ty::S32 => Some($f::<i32> as $fty),
            Ty::U64 | Ty::B64 => Some($f::<u64> as $fty),
            Ty::S64 => Some($f::<i64> as $fty),
            _ => None,
        }
    };
}

fn add<T: Int>(a: u64, b: u64) -> u64 {
    T::from_bits(a).wadd(T::from_bits(b)).to_bits()
}
fn sub<T: Int>(a: u64, b: u64) -> u64 {
    T::from_bits(a).wsub(T::from_bits(b)).to_bits()
}
fn add_sat<T: Int>(a: u64, b: u64) -> u64 {
    T::from_bits(a).sat_add(T::from_bits(b)).to_bits()
}
fn sub_sat<T: Int>(a: u64, b: u64) -> u64 {
    T::from_bits(a).sat_sub(T::from_bits(b)).to_bits()
}
fn mul_lo<T: Int>(a: u64, b: u64) -> u64 {
    T::from_bits(a).wmul(T::from_bits(b)).to_bits()
}
fn mul_hi<T: Int>(a: u64, b: u64) -> u64 {
    let p = T::from_bits(a)
        .as_i128()
        .wrapping_mul(T::from_bits(b).as_i128());
    T::from_i128(p >> T::BITS).to_bits()
}
/// Full product, written at twice the width.
fn mul_wide<T: Int>(a: u64, b: u64) -> u64 {
    let p = T::from_bits(a).as_i128() * T::from_bits(b).as_i128();
    (p as u64) & wide_mask::<T>()
}
fn wide_mask<T: Int>() -> u64 {
    if T::BITS >= 32 {
        u64::MAX
    } else {
        (1u64 << (2 * T::BITS)) - 1
    }
}
fn mad_lo<T: Int>(a: u64, b: u64, c: u64) -> u64 {
    T::from_bits(a)
        .wmul(T::from_bits(b))
        .wadd(T::from_bits(c))
        .to_bits()
}
fn mad_hi<T: Int>(a: u64, b: u64, c: u64) -> u64 {
    let hi = T::from_bits(mul_hi::<T>(a, b));
    hi.wadd(T::from_bits(c)).to_bits()
}
fn mad_wide<T: Int>(a: u64, b: u64, c: u64) -> u64 {
    mul_wide::<T>(a, b).wrapping_add(c) & wide_mask::<T>()
}
fn div<T: Int>(a: u64, b: u64) -> u64 {
    let (x, y) = (T::from_bits(a).as_i128(), T::from_bits(b).as_i128());
    if y == 0 {
        return T::from_i128(-1).to_bits();
    }
    T::from_i128(x / y).to_bits()
}
fn rem<T: Int>(a: u64, b: u64) -> u64 {
    let (x, y) = (T::from_bits(a).as_i128(), T::from_bits(b).as_i128());
    if y == 0 {
        return T::from_bits(a).to_bits();
    }
    T::from_i128(x % y).to_bits()
}
fn min<T: Int>(a: u64, b: u64) -> u64 {
    T::from_bits(a).min(T::from_bits(b)).to_bits()
}
fn max<T: Int>(a: u64, b: u64) -> u64 {
    T::from_bits(a).max(T::from_bits(b)).to_bits()
}
fn abs<T: Int>(a: u64) -> u64 {
    T::from_i128(T::from_bits(a).as_i128().abs()).to_bits()
}
fn neg<T: Int>(a: u64) -> u64 {
    T::from_i128(-T::from_bits(a).as_i128()).to_bits()
}
fn and<T: Int>(a: u64, b: u64) -> u64 {
    T::from_bits(a & b).to_bits()
}
fn or<T: Int>(a: u64, b: u64) -> u64 {
    T::from_bits(a | b).to_bits()
}
fn xor<T: Int>(a: u64, b: u64) -> u64 {
    T::from_bits(a ^ b).to_bits()
}
fn not<T: Int>(a: u64) -> u64 {
    T::from_bits(!a).to_bits()
}
fn cnot<T: Int>(a: u64) -> u64 {
    u64::from(T::from_bits(a).to_bits() == 0)
}
fn shl<T: Int>(a: u64, b: u64) -> u64 {
    let n = b as u32;
    if n >= T::BITS {
        0
    } else {
        T::from_bits(a << n).to_bits()
    }
}
fn shr<T: Int>(a: u64, b: u64) -> u64 {
    let n = (b as u32).min(T::BITS - 1 + u32::from(!T::SIGNED));
    if n >= T::BITS {
        return 0;
    }
    T::from_i128(T::from_bits(a).as_i128() >> n).to_bits()
}
fn popc<T: Int>(a: u64) -> u64 {
    u64::from(T::from_bits(a).to_bits().count_ones())
}
fn clz<T: Int>(a: u64) -> u64 {
    let v = T::from_bits(a).to_bits();
    u64::from(v.leading_zeros() - (64 - T::BITS))
}
fn brev<T: Int>(a: u64) -> u64 {
    T::from_bits(a).to_bits().reverse_bits() >> (64 - T::BITS)
}
/// `bfind`: position of the most significant non-sign bit, 0xffffffff if none.
fn bfind<T: Int>(a: u64) -> u64 {
    let v = T::from_bits(a).to_bits();
    let v = if T::SIGNED && (v >> (T::BITS - 1)) & 1 == 1 {
        !v & (u64::MAX >> (64 - T::BITS))
    } else {
        v
    };
    if v == 0 {
        0xFFFF_FFFF
    } else {
        u64::from(63 - v.leading_zeros())
    }
}
fn bfe<T: Int>(a: u64, b: u64, c: u64) -> u64 {
    let msb = T::BITS - 1;
    let pos = (b & 0xff) as u32;
    let len = (c & 0xff) as u32;
    let v = T::from_bits(a).to_bits();
    let sbit = if !T::SIGNED || len == 0 {
        0
    } else {
        (v >> (pos + len - 1).min(msb)) & 1
    };
    let mut d = 0u64;
    for i in 0..=msb {
        let bit = if i < len && pos + i <= msb {
            (v >> (pos + i)) & 1
        } else {
            sbit
        };
        d |= bit << i;
    }
    d
}
fn bfi<T: Int>(a: u64, b: u64, c: u64, d: u64) -> u64 {
    // d = bfi(a inserted into b at pos c with len d)
    let msb = T::BITS - 1;
    let pos = (c & 0xff) as u32;
    let len = (d & 0xff) as u32;
    let mut f = T::from_bits(b).to_bits();
    for i in 0..len {
        if pos + i > msb {
            break;
        }
        let bit = (a >> i) & 1;
        f = (f & !(1u64 << (pos + i))) | (bit << (pos + i));
    }
    f
}

/// `prmt.b32` (generic form and the `.f4e/.b4e/.rc8/.ecl/.ecr/.rc16` modes).
pub fn prmt(a: u64, b: u64, c: u64, mode: u8) -> u64 {
    let tmp = ((b & 0xffff_ffff) << 32) | (a & 0xffff_ffff);
    let byte = |i: u64| (tmp >> (8 * (i & 7))) & 0xff;
    let mut d = 0u64;
    if mode == 0 {
        for k in 0..4 {
            let sel = (c >> (4 * k)) & 0xf;
            let mut v = byte(sel & 7);
            if sel & 8 != 0 {
                v = if v & 0x80 != 0 { 0xff } else { 0 };
            }
            d |= v << (8 * k);
        }
        return d;
    }
    let s = c & 3;
    let sel: [u64; 4] = match mode {
        1 => [s, s + 1, s + 2, s + 3], // f4e
        2 => [
            s,
            s.wrapping_sub(1) & 7,
            s.wrapping_sub(2) & 7,
            s.wrapping_sub(3) & 7,
        ], // b4e
        3 => [s, s, s, s],             // rc8
        4 => [[0, 1, 2, 3], [1, 1, 2, 3], [2, 2, 2, 3], [3, 3, 3, 3]][s as usize], // ecl
        5 => [[0, 0, 0, 0], [0, 1, 1, 1], [0, 1, 2, 2], [0, 1, 2, 3]][s as usize], // ecr
        _ => {
            let lo = (s & 1) * 2;
            [lo, lo + 1, lo, lo + 1] // rc16
        }
    };
    for (k, &i) in sel.iter().enumerate() {
        d |= byte(i) << (8 * k);
    }
    d
}

macro_rules! prmt_mode {
    ($name:ident, $m:expr) => {
        fn $name(a: u64, b: u64, c: u64) -> u64 {
            prmt(a, b, c, $m)
        }
    };
}
prmt_mode!(prmt0, 0);
prmt_mode!(prmt_f4e, 1);
prmt_mode!(prmt_b4e, 2);
prmt_mode!(prmt_rc8, 3);
prmt_mode!(prmt_ecl, 4);
prmt_mode!(prmt_ecr, 5);
prmt_mode!(prmt_rc16, 6);

pub fn prmt_fn(mode: Option<&str>) -> Option<F3> {
    Some(match mode {
        None => prmt0,
        Some("f4e") => prmt_f4e,
        Some("b4e") => prmt_b4e,
        Some("rc8") => prmt_rc8,
        Some("ecl") => prmt_ecl,
        Some("ecr") => prmt_ecr,
        Some("rc16") => prmt_rc16,
        _ => return None,
    })
}

/// Two-operand integer op by PTX name (with `.hi`/`.lo`/`.wide`/`.sat` folded into the name).
pub fn binary(op: &str, ty: Ty) -> Option<F2> {
    match op {
        "add" => by_ty!(ty, add, F2),
        "sub" => by_ty!(ty, sub, F2),
        "add.sat" if ty == Ty::S32 => Some(add_sat::<i32>),
        "sub.sat" if ty == Ty::S32 => Some(sub_sat::<i32>),
        "mul.lo" => by_ty!(ty, mul_lo, F2),
        "mul.hi" => by_ty!(ty, mul_hi, F2),
        "mul.wide" => match ty {
            Ty::U16 => Some(mul_wide::<u16>),
            Ty::S16 => Some(mul_wide::<i16>),
            Ty::U32 => Some(mul_wide::<u32>),
            Ty::S32 => Some(mul_wide::<i32>),
            _ => None,
        },
        "div" => by_ty!(ty, div, F2),
        "rem" => by_ty!(ty, rem, F2),
        "min" => by_ty!(ty, min, F2),
        "max" => by_ty!(ty, max, F2),
        "and" => by_ty!(ty, and, F2),
        "or" => by_ty!(ty, or, F2),
        "xor" => by_ty!(ty, xor, F2),
        "shl" => by_ty!(ty, shl, F2),
        "shr" => by_ty!(ty, shr, F2),
        _ => None,
    }
}

pub fn ternary(op: &str, ty: Ty) -> Option<F3> {
    match op {
        "mad.lo" => by_ty!(ty, mad_lo, F3),
        "mad.hi" => by_ty!(ty, mad_hi, F3),
        "mad.wide" => match ty {
            Ty::U16 => Some(mad_wide::<u16>),
            Ty::S16 => Some(mad_wide::<i16>),
            Ty::U32 => Some(mad_wide::<u32>),
            Ty::S32 => Some(mad_wide::<i32>),
            _ => None,
        },
        "bfe" => match ty {
            Ty::U32 | Ty::B32 => Some(bfe::<u32>),
            Ty::S32 => Some(bfe::<i32>),
            Ty::U64 | Ty::B64 => Some(bfe::<u64>),
            Ty::S64 => Some(bfe::<i64>),
            _ => None,
        },
        _ => None,
    }
}

pub fn unary(op: &str, ty: Ty) -> Option<F1> {
    match op {
        "abs" => by_ty!(ty, abs, F1),
        "neg" => by_ty!(ty, neg, F1),
        "not" => by_ty!(ty, not, F1),
        "cnot" => by_ty!(ty, cnot, F1),
        "popc" => by_ty!(ty, popc, F1),
        "clz" => by_ty!(ty, clz, F1),
        "brev" => by_ty!(ty, brev, F1),
        "bfind" => by_ty!(ty, bfind, F1),
        _ => None,
    }
}

fn pred_and(a: u64, b: u64) -> u64 {
    (a & b) & 1
}
fn pred_or(a: u64, b: u64) -> u64 {
    (a | b) & 1
}
fn pred_xor(a: u64, b: u64) -> u64 {
    (a ^ b) & 1
}
fn pred_not(a: u64) -> u64 {
    (a & 1) ^ 1
}

/// Logical ops on `.pred` operands.
/// `and/or/xor.pred d, a, b`, with either source optionally negated (`!%p`, which ptxas
/// accepts on predicate operands of the logic instructions).
pub fn pred_binary(op: &str, neg_a: bool, neg_b: bool) -> Option<F2> {
    Some(match (op, neg_a, neg_b) {
        ("and", false, false) => pred_and,
        ("and", false, true) => pred_op::<0, false, true>,
        ("and", true, false) => pred_op::<0, true, false>,
        ("and", true, true) => pred_op::<0, true, true>,
        ("or", false, false) => pred_or,
        ("or", false, true) => pred_op::<1, false, true>,
        ("or", true, false) => pred_op::<1, true, false>,
        ("or", true, true) => pred_op::<1, true, true>,
        ("xor", false, false) => pred_xor,
        ("xor", false, true) => pred_op::<2, false, true>,
        ("xor", true, false) => pred_op::<2, true, false>,
        ("xor", true, true) => pred_op::<2, true, true>,
        _ => return None,
    })
}

/// Predicate logic with negated sources; `OP`: 0 and, 1 or, 2 xor.
fn pred_op<const OP: u8, const NEG_A: bool, const NEG_B: bool>(a: u64, b: u64) -> u64 {
    let a = (a & 1) ^ u64::from(NEG_A);
    let b = (b & 1) ^ u64::from(NEG_B);
    match OP {
        0 => a & b,
        1 => a | b,
        _ => a ^ b,
    }
}

pub fn pred_unary(op: &str) -> Option<F1> {
    Some(match op {
        "not" => pred_not,
        "cnot" => pred_not,
        _ => return None,
    })
}

fn c_eq<T: Int>(a: u64, b: u64) -> bool {
    T::from_bits(a) == T::from_bits(b)
}
fn c_ne<T: Int>(a: u64, b: u64) -> bool {
    T::from_bits(a) != T::from_bits(b)
}
fn c_lt<T: Int>(a: u64, b: u64) -> bool {
    T::from_bits(a) < T::from_bits(b)
}
fn c_le<T: Int>(a: u64, b: u64) -> bool {
    T::from_bits(a) <= T::from_bits(b)
}
fn c_gt<T: Int>(a: u64, b: u64) -> bool {
    T::from_bits(a) > T::from_bits(b)
}
fn c_ge<T: Int>(a: u64, b: u64) -> bool {
    T::from_bits(a) >= T::from_bits(b)
}

fn unsigned_of(ty: Ty) -> Ty {
    match ty {
        Ty::S16 | Ty::B16 => Ty::U16,
        Ty::S32 | Ty::B32 => Ty::U32,
        Ty::S64 | Ty::B64 => Ty::U64,
        t => t,
    }
}

/// Integer comparison for `setp`/`set`. `.b` types compare unsigned; `lo/ls/hi/hs` are unsigned.
pub fn compare(op: &str, ty: Ty) -> Option<Cmp> {
    let base = match ty {
        Ty::B16 => Ty::U16,
        Ty::B32 => Ty::U32,
        Ty::B64 => Ty::U64,
        t => t,
    };
    let u = unsigned_of(base);
    match op {
        "eq" => by_ty!(base, c_eq, Cmp),
        "ne" => by_ty!(base, c_ne, Cmp),
        "lt" => by_ty!(base, c_lt, Cmp),
        "le" => by_ty!(base, c_le, Cmp),
        "gt" => by_ty!(base, c_gt, Cmp),
        "ge" => by_ty!(base, c_ge, Cmp),
        "lo" => by_ty!(u, c_lt, Cmp),
        "ls" => by_ty!(u, c_le, Cmp),
        "hi" => by_ty!(u, c_gt, Cmp),
        "hs" => by_ty!(u, c_ge, Cmp),
        _ => None,
    }
}

/// Four-operand semantic function (`bfi`).
pub type F4 = fn(u64, u64, u64, u64) -> u64;

pub fn bfi_fn(ty: Ty) -> Option<F4> {
    match ty {
        Ty::B32 | Ty::U32 | Ty::S32 => Some(bfi::<u32>),
        Ty::B64 | Ty::U64 | Ty::S64 => Some(bfi::<u64>),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(op: &str, ty: Ty) -> F2 {
        binary(op, ty).unwrap()
    }

    #[test]
    fn wrapping_and_wide() {
        assert_eq!(b("add", Ty::U32)(0xffff_ffff, 1), 0);
        assert_eq!(b("add", Ty::S32)(0x7fff_ffff, 1), 0x8000_0000);
        assert_eq!(b("add.sat", Ty::S32)(0x7fff_ffff, 1), 0x7fff_ffff);
        assert_eq!(b("mul.hi", Ty::U32)(0xffff_ffff, 0xffff_ffff), 0xffff_fffe);
        assert_eq!(b("mul.hi", Ty::S32)((-2i32) as u32 as u64, 3), 0xffff_ffff);
        assert_eq!(
            b("mul.wide", Ty::S32)((-2i32) as u32 as u64, 3),
            (-6i64) as u64
        );
        assert_eq!(b("mul.wide", Ty::U32)(0xffff_ffff, 2), 0x1_ffff_fffe);
        assert_eq!(b("mul.hi", Ty::U64)(u64::MAX, u64::MAX), u64::MAX - 1);
    }

    #[test]
    fn division() {
        assert_eq!(
            b("div", Ty::S32)((-7i32) as u32 as u64, 2),
            (-3i32) as u32 as u64
        );
        assert_eq!(
            b("rem", Ty::S32)((-7i32) as u32 as u64, 2),
            (-1i32) as u32 as u64
        );
        assert_eq!(b("div", Ty::U32)(7, 0), 0xffff_ffff);
        assert_eq!(b("rem", Ty::U32)(7, 0), 7);
        assert_eq!(b("div", Ty::S32)(0x8000_0000, 0xffff_ffff), 0x8000_0000);
    }

    #[test]
    fn shifts_clamp() {
        assert_eq!(b("shl", Ty::B32)(1, 32), 0);
        assert_eq!(b("shl", Ty::B32)(1, 31), 0x8000_0000);
        assert_eq!(b("shr", Ty::U32)(0x8000_0000, 40), 0);
        assert_eq!(b("shr", Ty::S32)(0x8000_0000, 40), 0xffff_ffff);
        assert_eq!(b("shr", Ty::S32)(0x8000_0000, 4), 0xf800_0000);
        assert_eq!(b("shr", Ty::B32)(0x8000_0000, 4), 0x0800_0000);
    }

    #[test]
    fn bits() {
        assert_eq!(unary("clz", Ty::B32).unwrap()(1), 31);
        assert_eq!(unary("clz", Ty::B32).unwrap()(0), 32);
        assert_eq!(unary("popc", Ty::B64).unwrap()(u64::MAX), 64);
        assert_eq!(unary("brev", Ty::B32).unwrap()(1), 0x8000_0000);
        assert_eq!(unary("bfind", Ty::U32).unwrap()(0x10), 4);
        assert_eq!(unary("bfind", Ty::U32).unwrap()(0), 0xffff_ffff);
        let bfe_s = ternary("bfe", Ty::S32).unwrap();
        assert_eq!(bfe_s(0xf0, 4, 4), 0xffff_ffff);
        let bfe_u = ternary("bfe", Ty::U32).unwrap();
        assert_eq!(bfe_u(0xf0, 4, 4), 0xf);
        assert_eq!(bfe_u(0xf0, 4, 0), 0);
        let bfi = bfi_fn(Ty::B32).unwrap();
        assert_eq!(bfi(0xf, 0, 8, 4), 0xf00);
        assert_eq!(prmt(0x3322_1100, 0x7766_5544, 0x5410, 0), 0x5544_1100);
        assert_eq!(prmt(0x0000_0080, 0, 0x8888, 0), 0xffff_ffff);
    }

    #[test]
    fn compares() {
        let lt_s = compare("lt", Ty::S32).unwrap();
        let lo = compare("lo", Ty::S32).unwrap();
        assert!(lt_s(0xffff_ffff, 0));
        assert!(!lo(0xffff_ffff, 0));
    }
}
