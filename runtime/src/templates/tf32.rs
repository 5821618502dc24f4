//! `allow_tf32`: the opt-in that runs f32 GEMM-like work on tf32 tensor cores (MoE's expert
//! GEMMs, NF4's tiled forward and backward-input GEMMs, attention's `Q·Kᵀ` and `P·V`, conv's
//! forward, backward-data and backward-filter implicit GEMMs; see each family's config), its
//! configuration rule and its documented tolerance. MoE, NF4 and conv use the shared
//! `warp_mma` tile (`warp_mma/tf32.rs`), attention its tensor-core forward
//! (`attention/kernels/tc/tf32.rs`).
//!
//! - **Rule**: `allow_tf32 = true` is accepted only with `dtype = f32`. f16/bf16 already use
//!   tensor cores on sm_80+ and f64 never does, so the argument would do nothing there; it is a
//!   configuration error (reported at the `allow_tf32` argument) rather than silently ignored.
//! - **Targets**: tf32 `mma.m16n8k8` needs sm_80+. On older targets `allow_tf32 = true` is
//!   accepted and the kernels silently keep the CUDA-core f32 path (exact f32), so one
//!   attribute can name several targets.
//! - **Numerics**: each operand is rounded to tf32 (`cvt.rna.tf32.f32`: 10 fraction bits,
//!   relative error ≤ 2⁻¹¹); products are exact and accumulate in f32. For a length-`K` dot
//!   product the error is at most `2⁻¹⁰ · Σₖ|aₖ·bₖ|` (plus f32 accumulation); for data of random
//!   sign it grows like `√K`. The documented tolerance ([`tolerance`]) is therefore
//!   `|got − exact| ≤ 2⁻¹⁰ · √K · max|exact|` over a tensor, `K` the reduction length.
//! - **Why every operand goes through `cvt`** (issue 11: Triton 3.9 feeds raw f32 bits to the
//!   mma and saves the conversion, 16 instructions per output of a 32 × 32 warp tile). The
//!   PTX ISA does not define what `mma` computes from a `.b32` that does not hold tf32 data.
//!   It says, in "Alternate Floating-Point Data Formats": *"This data format is a special
//!   32-bit floating point format supported by the matrix multiply-and-accumulate
//!   instructions, with the same range as `.f32` and reduced precision (>=10 bits). The
//!   internal layout of tf32 format is implementation defined. PTX facilitates conversion
//!   from single precision `.f32` type to tf32 format. A register variable containing tf32
//!   data must be declared with `.b32` type."* "Matrix Data-types" lists `.tf32` as the
//!   multiplicand type (accumulators `.f32`), the m16n8k8 fragment figures give one `.tf32`
//!   element per `.b32` register, and `cvt` (`cvt.rna{.satfinite}.tf32.f32`, "For `.tf32`
//!   instruction type, operand `d` has `.b32` type") is the one defined way to produce one.
//!   An f32 bit pattern is therefore not a tf32 value the ISA gives meaning to: neither
//!   "the low 13 bits are ignored" (truncation) nor the number of bits read (">=10") is
//!   promised, so a kernel that skips the `cvt` relies on one implementation's behaviour.
//!   The kernels keep the `cvt`; the interpreter reads a raw pattern by truncation only so
//!   that peers' PTX (Triton's) runs, and documents that as its own choice (`sim::sem::mma`).

use crate::dtype::DType;

/// The error message when `allow_tf32` cannot apply to `dtype`, if it cannot.
pub fn dtype_rule(allow_tf32: bool, dtype: DType) -> Option<String> {
    (allow_tf32 && dtype != DType::F32).then(|| {
        format!(
            "allow_tf32 = true applies only to dtype = f32 (dtype = {dtype} {})",
            if dtype == DType::F64 {
                "never uses tensor cores"
            } else {
                "already uses tensor cores on sm_80+"
            }
        )
    })
}

/// The documented tf32 tolerance of a tensor whose outputs are length-`k` dot products,
/// relative to the tensor's largest exact magnitude: `2⁻¹⁰ · √k`.
pub fn tolerance(k: u32) -> f64 {
    f64::from(k).sqrt() / 1024.0
}

/// `x` rounded to tf32 as `cvt.rna.tf32.f32` does (nearest, ties away from zero; the low 13
/// bits cleared), for host references that model the tensor-core inputs exactly. Infinities
/// and NaN pass through.
pub fn round_tf32(x: f32) -> f32 {
    if !x.is_finite() {
        return x;
    }
    // Adding half of the dropped range to the magnitude bits carries into the kept bits
    // exactly when the dropped part is at least half (ties away from zero).
    f32::from_bits((x.to_bits() + 0x1000) & !0x1fff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_tf32_keeps_ten_fraction_bits_ties_away() {
        // 1 + 2⁻¹¹ is half-way between 1 and 1 + 2⁻¹⁰: away from zero.
        assert_eq!(round_tf32(1.0 + 2f32.powi(-11)), 1.0 + 2f32.powi(-10));
        assert_eq!(round_tf32(-(1.0 + 2f32.powi(-11))), -(1.0 + 2f32.powi(-10)));
        assert_eq!(round_tf32(1.0 + 2f32.powi(-12)), 1.0);
        assert_eq!(round_tf32(1.0 + 2f32.powi(-10)), 1.0 + 2f32.powi(-10));
        assert_eq!(round_tf32(3.0), 3.0);
    }

    #[test]
    fn only_f32_takes_allow_tf32() {
        assert_eq!(dtype_rule(true, DType::F32), None);
        assert_eq!(dtype_rule(false, DType::BF16), None);
        for dtype in [DType::F16, DType::BF16, DType::F64] {
            assert!(dtype_rule(true, dtype).is_some(), "{dtype}");
        }
    }
}
