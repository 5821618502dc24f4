//! PTX scalar types and register classes, and which register class may carry which type.

use std::fmt;

/// A PTX fundamental type as written after an instruction (`.u32`, `.f16`, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Type {
    Pred,
    B8,
    B16,
    B32,
    B64,
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
    BF16,
    BF16x2,
    /// TensorFloat-32: an f32 bit layout with 10 explicit mantissa bits (mma inputs).
    TF32,
    F32,
    F64,
}

impl Type {
    /// The suffix as printed, without the dot.
    pub const fn name(self) -> &'static str {
        match self {
            Type::Pred => "pred",
            Type::B8 => "b8",
            Type::B16 => "b16",
            Type::B32 => "b32",
            Type::B64 => "b64",
            Type::U8 => "u8",
            Type::U16 => "u16",
            Type::U32 => "u32",
            Type::U64 => "u64",
            Type::S8 => "s8",
            Type::S16 => "s16",
            Type::S32 => "s32",
            Type::S64 => "s64",
            Type::F16 => "f16",
            Type::F16x2 => "f16x2",
            Type::BF16 => "bf16",
            Type::BF16x2 => "bf16x2",
            Type::TF32 => "tf32",
            Type::F32 => "f32",
            Type::F64 => "f64",
        }
    }

    /// Size in bits (predicates count as 1).
    pub const fn bits(self) -> u32 {
        match self {
            Type::Pred => 1,
            Type::B8 | Type::U8 | Type::S8 => 8,
            Type::B16 | Type::U16 | Type::S16 | Type::F16 | Type::BF16 => 16,
            Type::B32
            | Type::U32
            | Type::S32
            | Type::F32
            | Type::F16x2
            | Type::BF16x2
            | Type::TF32 => 32,
            Type::B64 | Type::U64 | Type::S64 | Type::F64 => 64,
        }
    }

    pub const fn bytes(self) -> u32 {
        self.bits().div_ceil(8)
    }

    pub const fn is_float(self) -> bool {
        matches!(
            self,
            Type::F16
                | Type::F16x2
                | Type::BF16
                | Type::BF16x2
                | Type::TF32
                | Type::F32
                | Type::F64
        )
    }

    /// f16/bf16 scalars and their packed pairs.
    pub const fn is_half(self) -> bool {
        matches!(self, Type::F16 | Type::F16x2 | Type::BF16 | Type::BF16x2)
    }

    pub const fn is_bf16(self) -> bool {
        matches!(self, Type::BF16 | Type::BF16x2)
    }

    pub const fn is_signed(self) -> bool {
        matches!(self, Type::S8 | Type::S16 | Type::S32 | Type::S64)
    }

    pub const fn is_unsigned(self) -> bool {
        matches!(self, Type::U8 | Type::U16 | Type::U32 | Type::U64)
    }

    pub const fn is_int(self) -> bool {
        self.is_signed() || self.is_unsigned()
    }

    pub const fn is_bits(self) -> bool {
        matches!(self, Type::B8 | Type::B16 | Type::B32 | Type::B64)
    }

    /// The register class a value of this type lives in (LLVM-style naming).
    pub const fn class(self) -> RegClass {
        match self {
            Type::Pred => RegClass::Pred,
            Type::B8
            | Type::U8
            | Type::S8
            | Type::B16
            | Type::U16
            | Type::S16
            | Type::F16
            | Type::BF16 => RegClass::B16,
            Type::B32 | Type::U32 | Type::S32 | Type::F16x2 | Type::BF16x2 | Type::TF32 => {
                RegClass::B32
            }
            Type::F32 => RegClass::F32,
            Type::B64 | Type::U64 | Type::S64 => RegClass::B64,
            Type::F64 => RegClass::F64,
        }
    }
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A register class: how a register is declared (`.reg .b32 %r<N>;`) and printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RegClass {
    Pred,
    B16,
    B32,
    F32,
    B64,
    F64,
}

impl RegClass {
    /// Every class, in declaration order.
    pub const ALL: [RegClass; 6] = [
        RegClass::Pred,
        RegClass::B16,
        RegClass::B32,
        RegClass::F32,
        RegClass::B64,
        RegClass::F64,
    ];

    /// The register name prefix.
    pub const fn prefix(self) -> &'static str {
        match self {
            RegClass::Pred => "%p",
            RegClass::B16 => "%h",
            RegClass::B32 => "%r",
            RegClass::F32 => "%f",
            RegClass::B64 => "%rd",
            RegClass::F64 => "%fd",
        }
    }

    /// The declared type.
    pub const fn decl_type(self) -> Type {
        match self {
            RegClass::Pred => Type::Pred,
            RegClass::B16 => Type::B16,
            RegClass::B32 => Type::B32,
            RegClass::F32 => Type::F32,
            RegClass::B64 => Type::B64,
            RegClass::F64 => Type::F64,
        }
    }

    /// Whether a register of this class may be an operand of an instruction of type `ty`.
    ///
    /// PTX operand type checking: a register's declared type must equal the instruction type,
    /// except that bit-size types (`.bN`) agree with every type of the same size, and integer
    /// types agree with other integer types of the same size. Narrower integer instruction types
    /// (`.u8`, `.u16`) are carried in 16-bit registers.
    pub const fn carries(self, ty: Type) -> bool {
        match self {
            RegClass::Pred => matches!(ty, Type::Pred),
            RegClass::B16 => matches!(
                ty,
                Type::B8
                    | Type::U8
                    | Type::S8
                    | Type::B16
                    | Type::U16
                    | Type::S16
                    | Type::F16
                    | Type::BF16
            ),
            RegClass::B32 => {
                matches!(
                    ty,
                    Type::B32
                        | Type::U32
                        | Type::S32
                        | Type::F32
                        | Type::F16x2
                        | Type::BF16x2
                        | Type::TF32
                )
            }
            RegClass::F32 => matches!(ty, Type::F32 | Type::B32),
            RegClass::B64 => matches!(ty, Type::B64 | Type::U64 | Type::S64 | Type::F64),
            RegClass::F64 => matches!(ty, Type::F64 | Type::B64),
        }
    }
}
