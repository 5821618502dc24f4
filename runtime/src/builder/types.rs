//! Static element types of builder registers and values.

use std::fmt;
use std::marker::PhantomData;

use crate::ir::{Imm, Operand, RegId, Type};

/// An element type a register can hold.
pub trait Scalar: Copy + fmt::Debug + 'static {
    /// The instruction type used for arithmetic on it.
    const TYPE: Type;
    /// The type used to move, load and store it (`.b16` for the half types).
    const MOVE_TYPE: Type;
}

/// Integer element types.
pub trait Int: Scalar {}

/// Floating-point element types.
pub trait Float: Scalar {}

macro_rules! scalar {
    ($(#[$doc:meta])* $name:ident, $ty:ident, $move:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name;
        impl Scalar for $name {
            const TYPE: Type = Type::$ty;
            const MOVE_TYPE: Type = Type::$move;
        }
    };
}

scalar!(/// 16-bit unsigned integer.
    U16, U16, U16);
scalar!(/// 32-bit unsigned integer.
    U32, U32, U32);
scalar!(/// 32-bit signed integer.
    S32, S32, S32);
scalar!(/// 64-bit unsigned integer (also addresses).
    U64, U64, U64);
scalar!(/// 64-bit signed integer.
    S64, S64, S64);
scalar!(/// 32 untyped bits.
    B32, B32, B32);
scalar!(/// IEEE half precision.
    F16, F16, B16);
scalar!(/// bfloat16.
    BF16, BF16, B16);
scalar!(/// Two f16 packed in 32 bits (low half first), as tensor-core fragments hold them.
    F16x2, F16x2, B32);
scalar!(/// Two bf16 packed in 32 bits (low half first).
    BF16x2, BF16x2, B32);
scalar!(/// TensorFloat-32 in a 32-bit register (an f32 rounded to 10 mantissa bits).
    TF32, TF32, B32);
scalar!(/// IEEE single precision.
    F32, F32, F32);
scalar!(/// IEEE double precision.
    F64, F64, F64);

impl Int for U16 {}
impl Int for U32 {}
impl Int for S32 {}
impl Int for U64 {}
impl Int for S64 {}
impl Float for F16 {}
impl Float for BF16 {}
impl Float for F32 {}
impl Float for F64 {}

/// A virtual register holding a `T`.
pub struct Reg<T> {
    pub(crate) id: RegId,
    pub(crate) _t: PhantomData<T>,
}

impl<T> Reg<T> {
    pub fn id(self) -> RegId {
        self.id
    }

    /// Reinterprets the register as another type of the same register class. Crate-internal:
    /// callers go through the builder's bit casts, which check the class.
    pub(crate) fn retype<U>(self) -> Reg<U> {
        Reg {
            id: self.id,
            _t: PhantomData,
        }
    }
}

impl<T> Clone for Reg<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Reg<T> {}

impl<T: Scalar> fmt::Debug for Reg<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Reg<{}>({})", T::TYPE, self.id.0)
    }
}

/// A predicate register.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pred(pub(crate) RegId);

impl Pred {
    pub fn id(self) -> RegId {
        self.0
    }
}

/// A source value: a register or an immediate of the same type.
pub enum Val<T> {
    Reg(Reg<T>),
    Imm(Imm, PhantomData<T>),
}

impl<T> Clone for Val<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Val<T> {}

impl<T: Scalar> fmt::Debug for Val<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Val::Reg(r) => r.fmt(f),
            Val::Imm(i, _) => write!(f, "Imm<{}>({i:?})", T::TYPE),
        }
    }
}

impl<T: Scalar> Val<T> {
    pub(crate) fn operand(self) -> Operand {
        match self {
            Val::Reg(r) => Operand::Reg(r.id),
            Val::Imm(i, _) => Operand::Imm(i),
        }
    }
}

impl<T> From<Reg<T>> for Val<T> {
    fn from(r: Reg<T>) -> Self {
        Val::Reg(r)
    }
}

macro_rules! imm_from {
    ($rust:ty, $marker:ident, $variant:ident, $conv:ty) => {
        impl From<$rust> for Val<$marker> {
            fn from(v: $rust) -> Self {
                Val::Imm(Imm::$variant(<$conv>::from(v)), PhantomData)
            }
        }
    };
}

imm_from!(u16, U16, Int, i64);
imm_from!(u32, U32, Int, i64);
imm_from!(i32, S32, Int, i64);
imm_from!(f32, F32, F32, f32);
imm_from!(f64, F64, F64, f64);
imm_from!(i64, S64, Int, i64);

impl From<u64> for Val<U64> {
    fn from(v: u64) -> Self {
        Val::Imm(Imm::Int(v as i64), PhantomData)
    }
}
