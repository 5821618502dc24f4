//! PTX scalar types as a dense enum, with their widths and classes. Parsed once from `.u32`-style
//! modifiers; the hot loop only sees the enum (or functions already chosen from it).

/// A PTX fundamental type (plus the packed half types and `.pred`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ty {
    B8,
    B16,
    B32,
    B64,
    B128,
    U8,
    U16,
    U32,
    U64,
    S8,
    S16,
    S32,
    S64,
    F16,
    F16x2,
    Bf16,
    Bf16x2,
    F32,
    F64,
    Pred,
}

impl Ty {
    /// Parses a type modifier without its dot (`"u32"`).
    pub fn parse(s: &str) -> Option<Ty> {
        Some(match s {
            "b8" => Ty::B8,
            "b16" => Ty::B16,
            "b32" => Ty::B32,
            "b64" => Ty::B64,
            "b128" => Ty::B128,
            "u8" => Ty::U8,
            "u16" => Ty::U16,
            "u32" => Ty::U32,
            "u64" => Ty::U64,
            "s8" => Ty::S8,
            "s16" => Ty::S16,
            "s32" => Ty::S32,
            "s64" => Ty::S64,
            "f16" => Ty::F16,
            "f16x2" => Ty::F16x2,
            "bf16" => Ty::Bf16,
            "bf16x2" => Ty::Bf16x2,
            "f32" => Ty::F32,
            "f64" => Ty::F64,
            "pred" => Ty::Pred,
            _ => return None,
        })
    }

    /// Size in bytes (`.pred` counts as 1).
    pub fn bytes(self) -> u32 {
        match self {
            Ty::B8 | Ty::U8 | Ty::S8 | Ty::Pred => 1,
            Ty::B16 | Ty::U16 | Ty::S16 | Ty::F16 | Ty::Bf16 => 2,
            Ty::B32 | Ty::U32 | Ty::S32 | Ty::F32 | Ty::F16x2 | Ty::Bf16x2 => 4,
            Ty::B64 | Ty::U64 | Ty::S64 | Ty::F64 => 8,
            Ty::B128 => 16,
        }
    }

    pub fn bits(self) -> u32 {
        self.bytes() * 8
    }

    pub fn is_signed(self) -> bool {
        matches!(self, Ty::S8 | Ty::S16 | Ty::S32 | Ty::S64)
    }

    pub fn is_float(self) -> bool {
        matches!(
            self,
            Ty::F16 | Ty::F16x2 | Ty::Bf16 | Ty::Bf16x2 | Ty::F32 | Ty::F64
        )
    }

    pub fn is_int(self) -> bool {
        !self.is_float() && self != Ty::Pred
    }

    /// Mask of the low `bits()` bits.
    pub fn mask(self) -> u64 {
        if self.bits() >= 64 {
            u64::MAX
        } else {
            (1u64 << self.bits()) - 1
        }
    }
}

/// Sign- or zero-extends the low `bits` of `v` to 64 bits.
#[inline]
pub fn extend(v: u64, bits: u32, signed: bool) -> u64 {
    if bits >= 64 {
        return v;
    }
    if signed {
        let sh = 64 - bits;
        (((v << sh) as i64) >> sh) as u64
    } else {
        v & ((1u64 << bits) - 1)
    }
}
