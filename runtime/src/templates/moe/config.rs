//! The MoE configuration (`#[moe_kernel(..)]` arguments), its validation rules and the run-time
//! capacity computation.
//!
//! Index width: the MoE kernels compute every element index within a tensor in `u32` (byte
//! addresses are `u64`, via `mul.wide`). So each tensor's element count must be at most
//! `u32::MAX`: the weights (`experts · expert_dim · hidden` per weight matrix) are checked here;
//! the token-dependent tensors by [`MoeConfig::run_shape`].

use std::fmt;
use std::str::FromStr;

use crate::arch::Arch;
use crate::dtype::DType;
use crate::lint::address::IndexBound;
use crate::templates::ConfigErrors;

/// The bound the MoE kernels declare for the 32-bit address lint ([`crate::lint::address`]):
/// every element index they compute in `u32` and widen into an address is at most `u32::MAX`.
/// [`MoeConfig::validate`] proves it for the weights, [`MoeConfig::run_shape`] for the
/// token-dependent tensors, both by comparing against this `limit`.
pub const INDEX_BOUND: IndexBound = IndexBound {
    limit: u32::MAX as u64,
    proof: "MoeConfig::validate (E*F*H) and MoeConfig::run_shape (token tensors)",
};

/// The expert feed-forward network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ffn {
    /// `Y = X · W[e]ᵀ`, one weight `W [E, F, H]`; output rows of width `expert_dim`.
    Linear,
    /// Mixtral's gated FFN `Y = (silu(X·W1[e]ᵀ) ⊙ X·W3[e]ᵀ) · W2[e]ᵀ` with `W1, W3 [E, F, H]`
    /// and `W2 [E, H, F]`; output rows of width `hidden`.
    Swiglu,
}

/// Error for an unknown `ffn` name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown ffn `{name}`; expected one of: linear, swiglu")]
pub struct UnknownFfn {
    pub name: String,
}

impl Ffn {
    pub const ALL: [Ffn; 2] = [Ffn::Linear, Ffn::Swiglu];

    /// The name used in configurations (`ffn = swiglu`).
    pub const fn name(self) -> &'static str {
        match self {
            Ffn::Linear => "linear",
            Ffn::Swiglu => "swiglu",
        }
    }
}

impl fmt::Display for Ffn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Ffn {
    type Err = UnknownFfn;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ffn::ALL
            .into_iter()
            .find(|f| f.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| UnknownFfn {
                name: s.to_string(),
            })
    }
}

/// Configuration of one MoE layer: `#[moe_kernel(experts = 8, top_k = 2, hidden = 4096,
/// expert_dim = 14336, dtype = bf16, ffn = swiglu, arch = sm_80)]`.
///
/// Field names are the macro argument names. The token count `T` is a run-time argument; see
/// [`MoeConfig::capacity`] and [`MoeConfig::run_shape`].
///
/// Routing is **dropless** by default (Mixtral and DeepSeek inference): every routed pair is
/// kept, and the expert outputs are packed bin after bin, each bin exactly as long as its count
/// (offsets computed on the device from the counts). `capacity_factor = x` opts into
/// Switch/GShard-style capacity-limited routing: bins of `C = ceil(x · T · K / E)` slots,
/// pairs past a full bin dropped and counted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MoeConfig {
    /// Number of experts `E`, `1 ..= arch.max_threads_per_block()` (the gating kernel gives each
    /// expert of a token one thread of a block).
    pub experts: u32,
    /// Experts per token `K`, `1 ..= experts`.
    pub top_k: u32,
    /// Model width `H` (token row length), ≥ 1.
    pub hidden: u32,
    /// Expert inner width `F`, ≥ 1.
    pub expert_dim: u32,
    /// `None` (the default): dropless routing. `Some(x)`: capacity-limited routing with
    /// `C = ceil(x · T · K / E)` slots per bin; `x` finite, in `(0, MAX_CAPACITY_FACTOR]`.
    pub capacity_factor: Option<f32>,
    /// Element type of activations, weights and outputs (gating logits and weights too).
    /// Every dtype is supported on every arch (bf16 is converted in software before sm_80).
    /// Default f32.
    pub dtype: DType,
    /// Expert FFN. Default linear.
    pub ffn: Ffn,
    /// Renormalise the top-k weights to sum 1 (Mixtral); `false` keeps the raw softmax
    /// probabilities (DeepSeek). Default true.
    pub normalize_topk: bool,
    /// Run the f32 expert GEMMs on tf32 tensor cores (`mma.m16n8k8`, operands rounded to 10
    /// fraction bits, f32 accumulation): faster, and accurate to about `2⁻¹¹ · √K` relative to
    /// the output scale instead of f32's `2⁻²⁴`. Only meaningful for `dtype = f32` (any other
    /// dtype with `allow_tf32 = true` is a configuration error); targets without tf32 tensor
    /// cores (before sm_80) silently keep the CUDA-core f32 GEMMs. Default false.
    pub allow_tf32: bool,
    /// Target architecture. Default sm_80.
    pub arch: Arch,
}

/// Token-dependent sizes of one MoE launch, checked against the kernels' `u32` index math.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MoeRunShape {
    /// Tokens `T`.
    pub tokens: u32,
    /// Slots per expert bin `C` (the `token_ids [E, C]` row stride; `T` when dropless).
    pub capacity: u32,
    /// Rows of the permuted expert outputs: `T·K` packed bins when dropless, `E·C` when
    /// capacity-limited (bin `e` at row `e·C`).
    pub rows: u32,
}

/// A run-time token count the kernels cannot handle.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MoeShapeError {
    #[error("tokens = 0: a MoE launch needs at least one token")]
    NoTokens,
    #[error(
        "tensor `{tensor}` would have {elements} elements for tokens = {tokens}, more than the \
         u32 index limit {limit}",
        limit = u32::MAX
    )]
    TooLarge {
        tensor: &'static str,
        tokens: u32,
        elements: u128,
    },
}

impl MoeConfig {
    /// Every macro argument name.
    pub const FIELDS: &'static [&'static str] = &[
        "experts",
        "top_k",
        "hidden",
        "expert_dim",
        "capacity_factor",
        "dtype",
        "ffn",
        "normalize_topk",
        "allow_tf32",
        "arch",
    ];
    /// Arguments without a default.
    pub const REQUIRED: &'static [&'static str] = &["experts", "top_k", "hidden", "expert_dim"];

    /// Dropless routing unless a capacity factor is given.
    pub const DEFAULT_CAPACITY_FACTOR: Option<f32> = None;
    pub const DEFAULT_DTYPE: DType = DType::F32;
    pub const DEFAULT_FFN: Ffn = Ffn::Linear;
    pub const DEFAULT_NORMALIZE_TOPK: bool = true;
    pub const DEFAULT_ALLOW_TF32: bool = false;
    pub const DEFAULT_ARCH: Arch = Arch::Sm80;
    /// Largest accepted `capacity_factor` (already far past `E / K`, where nothing is dropped).
    pub const MAX_CAPACITY_FACTOR: f32 = 1024.0;

    /// The required values, every other field at its default.
    pub const fn new(experts: u32, top_k: u32, hidden: u32, expert_dim: u32) -> Self {
        Self {
            experts,
            top_k,
            hidden,
            expert_dim,
            capacity_factor: Self::DEFAULT_CAPACITY_FACTOR,
            dtype: Self::DEFAULT_DTYPE,
            ffn: Self::DEFAULT_FFN,
            normalize_topk: Self::DEFAULT_NORMALIZE_TOPK,
            allow_tf32: Self::DEFAULT_ALLOW_TF32,
            arch: Self::DEFAULT_ARCH,
        }
    }

    /// Width of an expert output row: `expert_dim` for linear, `hidden` for swiglu.
    pub const fn out_width(&self) -> u32 {
        match self.ffn {
            Ffn::Linear => self.expert_dim,
            Ffn::Swiglu => self.hidden,
        }
    }

    /// Checks every rule; returns all violations, each tagged with the argument(s) at fault.
    pub fn validate(&self) -> Result<(), ConfigErrors> {
        let mut errs = ConfigErrors::default();
        let max_experts = self.arch.max_threads_per_block();
        if self.experts == 0 {
            errs.push(&["experts"], "experts = 0: need at least one expert");
        } else if self.experts > max_experts {
            errs.push(
                &["experts", "arch"],
                format!(
                    "experts = {} exceeds the maximum {max_experts} (one gating thread per expert \
                     in a block on {})",
                    self.experts, self.arch
                ),
            );
        }
        if self.top_k == 0 {
            errs.push(
                &["top_k"],
                "top_k = 0: each token needs at least one expert",
            );
        } else if self.experts >= 1 && self.top_k > self.experts {
            errs.push(
                &["top_k", "experts"],
                format!("top_k = {} exceeds experts = {}", self.top_k, self.experts),
            );
        }
        if self.hidden == 0 {
            errs.push(&["hidden"], "hidden = 0: rows need at least one element");
        }
        if self.expert_dim == 0 {
            errs.push(
                &["expert_dim"],
                "expert_dim = 0: experts need at least one unit",
            );
        }
        if let Some(msg) = crate::templates::tf32::dtype_rule(self.allow_tf32, self.dtype) {
            errs.push(&["allow_tf32", "dtype"], msg);
        }
        let cf = self.capacity_factor.unwrap_or(1.0);
        if !cf.is_finite() || cf <= 0.0 {
            errs.push(
                &["capacity_factor"],
                format!("capacity_factor = {cf} must be finite and greater than 0"),
            );
        } else if cf > Self::MAX_CAPACITY_FACTOR {
            errs.push(
                &["capacity_factor"],
                format!(
                    "capacity_factor = {cf} exceeds the maximum {}",
                    Self::MAX_CAPACITY_FACTOR
                ),
            );
        }
        // Weight tensors: E · F · H elements each, indexed in u32.
        let weight =
            u128::from(self.experts) * u128::from(self.expert_dim) * u128::from(self.hidden);
        if weight > u128::from(INDEX_BOUND.limit) {
            errs.push(
                &["expert_dim", "hidden", "experts"],
                format!(
                    "experts · expert_dim · hidden = {} · {} · {} = {weight} weight elements \
                     exceeds the u32 index limit {}",
                    self.experts,
                    self.expert_dim,
                    self.hidden,
                    u32::MAX
                ),
            );
        }
        errs.into_result()
    }

    /// Whether every routed pair is kept (no `capacity_factor`).
    pub const fn is_dropless(&self) -> bool {
        self.capacity_factor.is_none()
    }

    /// Slots per expert bin for `tokens` tokens. Dropless: `T` (a token routes to an expert at
    /// most once, so no bin can overflow; this only sizes the `token_ids` scratch, the expert
    /// outputs are packed by the actual counts). Capacity-limited:
    /// `C = ceil(capacity_factor · T · K / E)`, and at least 1 when `T ≥ 1` (0 for `T = 0`).
    ///
    /// `capacity_factor` is taken as the shortest decimal that round-trips to its `f32` (what
    /// `{}` prints: `1.1` means exactly 11/10, not 1.10000002384…), and the product is computed
    /// in exact integer arithmetic, so `1.1 · 10 tokens · 1 / 1 expert` is 11, not 12. Falls back
    /// to `f64` only if the exact product would overflow `u128` (absurdly small factors).
    /// Assumes a validated config (`experts ≥ 1`).
    pub fn capacity(&self, tokens: u32) -> u64 {
        if tokens == 0 {
            return 0;
        }
        let Some(capacity_factor) = self.capacity_factor else {
            return u64::from(tokens);
        };
        let experts = u128::from(self.experts.max(1));
        let pairs = u128::from(tokens) * u128::from(self.top_k);
        let exact = decimal_fraction(capacity_factor).and_then(|(num, den)| {
            let n = num.checked_mul(pairs)?;
            let d = den.checked_mul(experts)?;
            Some(n.div_ceil(d))
        });
        let c = match exact {
            Some(c) => u64::try_from(c).unwrap_or(u64::MAX),
            None => {
                let x = f64::from(capacity_factor) * f64::from(tokens) * f64::from(self.top_k)
                    / f64::from(self.experts.max(1));
                // Saturating float-to-int conversion.
                x.ceil() as u64
            }
        };
        c.max(1)
    }

    /// Capacity and size checks for a launch over `tokens` tokens: the logits `[T, E]`, routing
    /// `[T, K]`, the permuted activations and outputs `[E · C, max(H, F)]` and the output
    /// `[T, out_width]` must each fit the kernels' u32 element indices.
    pub fn run_shape(&self, tokens: u32) -> Result<MoeRunShape, MoeShapeError> {
        if tokens == 0 {
            return Err(MoeShapeError::NoTokens);
        }
        let capacity = self.capacity(tokens);
        let t = u128::from(tokens);
        let e = u128::from(self.experts);
        let widest = u128::from(self.hidden.max(self.expert_dim));
        let rows = if self.is_dropless() {
            t * u128::from(self.top_k)
        } else {
            e * u128::from(capacity)
        };
        let checks = [
            ("logits", t * e),
            ("indices", t * u128::from(self.top_k)),
            ("token_ids", e * u128::from(capacity)),
            ("permuted", rows * widest),
            ("output", t * u128::from(self.out_width())),
        ];
        for (tensor, elements) in checks {
            if elements > u128::from(INDEX_BOUND.limit) {
                return Err(MoeShapeError::TooLarge {
                    tensor,
                    tokens,
                    elements,
                });
            }
        }
        // token_ids and the permuted rows fit u32, so do capacity and rows.
        let capacity = u32::try_from(capacity).unwrap_or(u32::MAX);
        let rows = u32::try_from(rows).unwrap_or(u32::MAX);
        Ok(MoeRunShape {
            tokens,
            capacity,
            rows,
        })
    }
}

/// `x` as an exact fraction `num / 10^d` of its shortest round-trip decimal; `None` for
/// non-finite or negative values or when `10^d` overflows.
fn decimal_fraction(x: f32) -> Option<(u128, u128)> {
    if !x.is_finite() || x < 0.0 {
        return None;
    }
    let text = format!("{x}");
    let (int_part, frac_part) = text.split_once('.').unwrap_or((&text, ""));
    let mut num: u128 = 0;
    for ch in int_part.chars().chain(frac_part.chars()) {
        let digit = u128::from(ch.to_digit(10)?);
        num = num.checked_mul(10)?.checked_add(digit)?;
    }
    let den = 10u128.checked_pow(u32::try_from(frac_part.len()).ok()?)?;
    Some((num, den))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields_of(cfg: &MoeConfig) -> Vec<Vec<&'static str>> {
        match cfg.validate() {
            Ok(()) => vec![],
            Err(e) => e.0.into_iter().map(|e| e.fields).collect(),
        }
    }

    #[test]
    fn mixtral_is_valid() {
        let cfg = MoeConfig {
            dtype: DType::BF16,
            ffn: Ffn::Swiglu,
            ..MoeConfig::new(8, 2, 4096, 14336)
        };
        assert_eq!(cfg.validate(), Ok(()));
        assert_eq!(cfg.out_width(), 4096);
    }

    #[test]
    fn top_k_exceeding_experts_names_both() {
        let err = MoeConfig::new(8, 9, 64, 64).validate().unwrap_err();
        assert_eq!(err.0.len(), 1);
        assert_eq!(err.0[0].fields, vec!["top_k", "experts"]);
        assert_eq!(err.0[0].message, "top_k = 9 exceeds experts = 8");
    }

    #[test]
    fn reports_every_violation() {
        let cfg = MoeConfig {
            capacity_factor: Some(f32::NAN),
            ..MoeConfig::new(0, 0, 0, 0)
        };
        assert_eq!(
            fields_of(&cfg),
            vec![
                vec!["experts"],
                vec!["top_k"],
                vec!["hidden"],
                vec!["expert_dim"],
                vec!["capacity_factor"]
            ]
        );
        let cfg = MoeConfig {
            capacity_factor: Some(2000.0),
            ..MoeConfig::new(2048, 1, 1, 1)
        };
        assert_eq!(
            fields_of(&cfg),
            vec![vec!["experts", "arch"], vec!["capacity_factor"]]
        );
        let cfg = MoeConfig {
            capacity_factor: Some(-1.0),
            ..MoeConfig::new(4, 1, 1, 1)
        };
        assert_eq!(fields_of(&cfg), vec![vec!["capacity_factor"]]);
    }

    #[test]
    fn weight_elements_must_fit_u32() {
        let cfg = MoeConfig::new(256, 8, 8192, 4096);
        let err = cfg.validate().unwrap_err();
        assert_eq!(err.0[0].fields[0], "expert_dim");
        assert!(
            err.0[0].message.contains("8589934592"),
            "{}",
            err.0[0].message
        );
        assert_eq!(MoeConfig::new(8, 2, 4096, 14336).validate(), Ok(()));
    }

    #[test]
    fn capacity_is_exact_in_decimal() {
        let mut cfg = MoeConfig::new(1, 1, 1, 1);
        cfg.capacity_factor = Some(1.1);
        assert_eq!(cfg.capacity(10), 11);
        let cfg8 = MoeConfig {
            capacity_factor: Some(1.25),
            ..MoeConfig::new(8, 2, 1, 1)
        };
        assert_eq!(cfg8.capacity(16), 5); // 1.25 · 16 · 2 / 8 = 5
        assert_eq!(cfg8.capacity(17), 6); // 5.3125 → 6
        assert_eq!(cfg8.capacity(1), 1); // 0.3125 → 1
        assert_eq!(cfg8.capacity(0), 0);
        let tiny = MoeConfig {
            capacity_factor: Some(1e-30),
            ..MoeConfig::new(8, 2, 1, 1)
        };
        assert_eq!(tiny.capacity(5), 1);
        let subnormal = MoeConfig {
            capacity_factor: Some(1e-45),
            ..MoeConfig::new(8, 2, 1, 1)
        };
        assert_eq!(subnormal.capacity(5), 1);
    }

    #[test]
    fn run_shape_checks_index_limits() {
        let cfg = MoeConfig {
            capacity_factor: Some(1.25),
            ..MoeConfig::new(8, 2, 4096, 14336)
        };
        assert_eq!(cfg.run_shape(0), Err(MoeShapeError::NoTokens));
        let s = cfg.run_shape(100).unwrap();
        assert_eq!(s.capacity, 32); // 1.25 · 100 · 2 / 8 = 31.25
        assert_eq!(s.rows, 8 * 32);
        let dropless = MoeConfig::new(8, 2, 4096, 14336).run_shape(100).unwrap();
        assert_eq!((dropless.capacity, dropless.rows), (100, 200));
        match cfg.run_shape(1 << 20) {
            Err(MoeShapeError::TooLarge { tensor, .. }) => assert_eq!(tensor, "permuted"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn ffn_parses() {
        assert_eq!("swiglu".parse::<Ffn>(), Ok(Ffn::Swiglu));
        assert_eq!("Linear".parse::<Ffn>(), Ok(Ffn::Linear));
        assert!("relu"
            .parse::<Ffn>()
            .unwrap_err()
            .to_string()
            .contains("linear, swiglu"));
        for f in Ffn::ALL {
            assert_eq!(f.to_string().parse::<Ffn>(), Ok(f));
        }
    }

    #[test]
    fn fields_cover_required() {
        for r in MoeConfig::REQUIRED {
            assert!(MoeConfig::FIELDS.contains(r));
        }
    }
}
