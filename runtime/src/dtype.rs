//! Element types of kernel tensors (`dtype = …` in the macros) and what each needs of the arch.

use std::fmt;
use std::str::FromStr;

/// The element type of a kernel's floating-point tensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    F16,
    BF16,
    F32,
    F64,
}

/// Error for an unknown dtype name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown dtype `{name}`; expected one of: f16, bf16, f32, f64")]
pub struct UnknownDType {
    pub name: String,
}

impl DType {
    pub const ALL: [DType; 4] = [DType::F16, DType::BF16, DType::F32, DType::F64];

    /// The name used in configurations and kernel names.
    pub const fn name(self) -> &'static str {
        match self {
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
        }
    }

    /// Size of one element in bytes.
    pub const fn size_bytes(self) -> u32 {
        match self {
            DType::F16 | DType::BF16 => 2,
            DType::F32 => 4,
            DType::F64 => 8,
        }
    }

    /// Whether arithmetic on this type is done in f32 (the half types) rather than natively.
    pub const fn accumulates_in_f32(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DType {
    type Err = UnknownDType;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DType::ALL
            .into_iter()
            .find(|d| d.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| UnknownDType {
                name: s.to_string(),
            })
    }
}
