//! The NF4 GEMM configuration (`#[nf4_gemm(..)]` arguments) and its validation rules.
//!
//! The weight shape `[n, k]` is a compile-time part of the kernel (it fixes the quantised
//! layout); the activation row count `m` is a run-time argument ([`Nf4Config::check_m`]).
//!
//! Index width: the kernels compute element indices in `u32` (byte addresses in `u64`), so every
//! tensor's element count (`n · k` weights, `m · k` activations, `m · n` outputs) must be at most
//! `u32::MAX`.

use crate::arch::Arch;
use crate::dtype::DType;
use crate::lint::address::IndexBound;
use crate::templates::ConfigErrors;

/// The bound the NF4 kernels declare for the 32-bit address lint ([`crate::lint::address`]):
/// every element index they compute in `u32` and widen into an address is at most `u32::MAX`.
/// [`Nf4Config::validate`] proves it for the weights (`n · k`), [`Nf4Config::check_m`] for the
/// activations and outputs (`m · k`, `m · n`), both by comparing against this `limit`.
pub const INDEX_BOUND: IndexBound = IndexBound {
    limit: u32::MAX as u64,
    proof: "Nf4Config::validate (n*k) and Nf4Config::check_m (m*k, m*n)",
};

/// Configuration of one NF4-weight GEMM: `#[nf4_gemm(n = 4096, k = 4096, block = 64,
/// double_quant = true, dtype = bf16, arch = sm_80)]`.
///
/// Layout (see [`super::format`]): `W [n, k]` flattened row-major, blocks of `block` consecutive
/// values with one absmax each, two codes per byte (element `2j` in the high nibble of byte
/// `j`). `n · k` need not be a multiple of `block`: as in bitsandbytes the last block is ragged
/// (its absmax covers only the values that exist). Blocks may span rows when `k % block ≠ 0`;
/// the kernels find an element's block as `(row · k + col) / block`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Nf4Config {
    /// Output features `N` (rows of `W`), ≥ 1. Required.
    pub n: u32,
    /// Input features `K` (columns of `W`), ≥ 1 and even, so each row starts on a byte boundary
    /// (the kernels never split a byte between rows). Required.
    pub k: u32,
    /// Quantisation block size: 32, 64, 128 or 256. Default 64.
    pub block: u32,
    /// Whether the absmax values are themselves quantised (8-bit, blocks of 256; see
    /// [`super::format::quantize_absmax`]). Default false.
    pub double_quant: bool,
    /// Activation (and output) type: f16, bf16 or f32 (all archs; bf16 is converted in software
    /// before sm_80). f64 is rejected. Default f32.
    pub dtype: DType,
    /// Run the tiled GEMMs (forward and backward-input) of f32 activations on tf32 tensor
    /// cores (see [`crate::templates::tf32`]: operands rounded to 10 fraction bits, f32
    /// accumulation, error ≤ `2⁻¹⁰ · √K` relative to the output's largest magnitude). Only for
    /// `dtype = f32` (an error otherwise); needs both `k` and `n` multiples of 4, and sm_80+ —
    /// other shapes and older targets keep the CUDA-core GEMMs silently. The GEMVs are
    /// unaffected. Default false.
    pub allow_tf32: bool,
    /// Target architecture. Default sm_80.
    pub arch: Arch,
}

/// A run-time row count the kernels cannot handle.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Nf4ShapeError {
    #[error("m = 0: the GEMM needs at least one row")]
    NoRows,
    #[error(
        "tensor `{tensor}` would have {elements} elements for m = {m}, more than the u32 index \
         limit {limit}",
        limit = u32::MAX
    )]
    TooLarge {
        tensor: &'static str,
        m: u32,
        elements: u64,
    },
}

impl Nf4Config {
    /// Every macro argument name.
    pub const FIELDS: &'static [&'static str] = &[
        "n",
        "k",
        "block",
        "double_quant",
        "dtype",
        "allow_tf32",
        "arch",
    ];
    /// Arguments without a default.
    pub const REQUIRED: &'static [&'static str] = &["n", "k"];
    /// Accepted block sizes.
    pub const BLOCKS: [u32; 4] = [32, 64, 128, 256];

    pub const DEFAULT_BLOCK: u32 = 64;
    pub const DEFAULT_DOUBLE_QUANT: bool = false;
    pub const DEFAULT_DTYPE: DType = DType::F32;
    pub const DEFAULT_ALLOW_TF32: bool = false;
    pub const DEFAULT_ARCH: Arch = Arch::Sm80;

    /// The required values, every other field at its default.
    pub const fn new(n: u32, k: u32) -> Self {
        Self {
            n,
            k,
            block: Self::DEFAULT_BLOCK,
            double_quant: Self::DEFAULT_DOUBLE_QUANT,
            dtype: Self::DEFAULT_DTYPE,
            allow_tf32: Self::DEFAULT_ALLOW_TF32,
            arch: Self::DEFAULT_ARCH,
        }
    }

    /// Weight element count `n · k`.
    pub const fn weight_elements(&self) -> u64 {
        self.n as u64 * self.k as u64
    }

    /// Length of the packed code buffer in bytes, `ceil(n · k / 2)`.
    pub const fn packed_len(&self) -> u64 {
        self.weight_elements().div_ceil(2)
    }

    /// Number of quantisation blocks (= absmax values), `ceil(n · k / block)`.
    pub const fn absmax_len(&self) -> u64 {
        self.weight_elements().div_ceil(self.block as u64)
    }

    /// Number of second-level blocks when `double_quant`: `ceil(absmax_len / 256)` (0 otherwise).
    pub const fn absmax_blocks(&self) -> u64 {
        if self.double_quant {
            self.absmax_len()
                .div_ceil(super::format::ABSMAX_BLOCK as u64)
        } else {
            0
        }
    }

    /// Checks every rule; returns all violations, each tagged with the argument(s) at fault.
    pub fn validate(&self) -> Result<(), ConfigErrors> {
        let mut errs = ConfigErrors::default();
        if self.n == 0 {
            errs.push(&["n"], "n = 0: the weight needs at least one row");
        }
        if self.k == 0 {
            errs.push(&["k"], "k = 0: the weight needs at least one column");
        } else if !self.k.is_multiple_of(2) {
            errs.push(
                &["k"],
                format!(
                    "k = {} is odd; rows of packed 4-bit codes must start on a byte boundary",
                    self.k
                ),
            );
        }
        if !Self::BLOCKS.contains(&self.block) {
            errs.push(
                &["block"],
                format!("block = {} is not one of 32, 64, 128, 256", self.block),
            );
        }
        if !matches!(self.dtype, DType::F16 | DType::BF16 | DType::F32) {
            errs.push(
                &["dtype"],
                format!(
                    "dtype = {} is not supported by nf4 (activations are f16, bf16 or f32)",
                    self.dtype
                ),
            );
        }
        if let Some(msg) = crate::templates::tf32::dtype_rule(self.allow_tf32, self.dtype) {
            errs.push(&["allow_tf32", "dtype"], msg);
        }
        let elements = self.weight_elements();
        if elements > INDEX_BOUND.limit {
            errs.push(
                &["k", "n"],
                format!(
                    "n · k = {} · {} = {elements} weight elements exceeds the u32 index limit {}",
                    self.n,
                    self.k,
                    u32::MAX
                ),
            );
        }
        errs.into_result()
    }

    /// Checks a run-time row count `m`: `A [m, k]` and `C [m, n]` must fit u32 indices.
    pub fn check_m(&self, m: u32) -> Result<(), Nf4ShapeError> {
        if m == 0 {
            return Err(Nf4ShapeError::NoRows);
        }
        for (tensor, cols) in [("a", self.k), ("c", self.n)] {
            let elements = u64::from(m) * u64::from(cols);
            if elements > INDEX_BOUND.limit {
                return Err(Nf4ShapeError::TooLarge {
                    tensor,
                    m,
                    elements,
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        let cfg = Nf4Config::new(4096, 4096);
        assert_eq!(cfg.validate(), Ok(()));
        assert_eq!(cfg.block, 64);
        assert_eq!(cfg.packed_len(), 4096 * 4096 / 2);
        assert_eq!(cfg.absmax_len(), 4096 * 4096 / 64);
        assert_eq!(cfg.absmax_blocks(), 0);
        let dq = Nf4Config {
            double_quant: true,
            ..cfg
        };
        assert_eq!(dq.absmax_blocks(), 4096 * 4096 / 64 / 256);
    }

    #[test]
    fn ragged_last_block_is_allowed() {
        let cfg = Nf4Config::new(3, 10); // 30 values, block 64: one ragged block
        assert_eq!(cfg.validate(), Ok(()));
        assert_eq!(cfg.absmax_len(), 1);
        assert_eq!(cfg.packed_len(), 15);
    }

    #[test]
    fn reports_every_violation() {
        let cfg = Nf4Config {
            block: 48,
            dtype: DType::F64,
            ..Nf4Config::new(0, 7)
        };
        let err = cfg.validate().unwrap_err();
        let fields: Vec<_> = err.0.iter().map(|e| e.fields.clone()).collect();
        assert_eq!(
            fields,
            vec![vec!["n"], vec!["k"], vec!["block"], vec!["dtype"]]
        );
        assert_eq!(
            err.0[2].message,
            "block = 48 is not one of 32, 64, 128, 256"
        );
    }

    #[test]
    fn index_limits() {
        let err = Nf4Config::new(65536, 65536).validate().unwrap_err();
        assert_eq!(err.0[0].fields, vec!["k", "n"]);
        let cfg = Nf4Config::new(4096, 4096);
        assert_eq!(cfg.check_m(0), Err(Nf4ShapeError::NoRows));
        assert_eq!(cfg.check_m(1024), Ok(()));
        assert!(matches!(
            cfg.check_m(1 << 20),
            Err(Nf4ShapeError::TooLarge { tensor: "a", .. })
        ));
    }
}
