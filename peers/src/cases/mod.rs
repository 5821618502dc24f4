//! Harnesses: for each peer kernel, inputs in the peer's layout, the launch in the interpreter
//! with every check on, and the comparison with ptxforge's host reference.

pub mod conv;
pub mod moe;
pub mod nf4;

use ptxforge_sim::{Arg, Device, LaunchReport, Module, Options, SimError};

use crate::generate::Case;

/// Whether a peer kernel's output matches the host reference.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Every element within tolerance; `worst` is the largest error ÷ its allowed error (≤ 1),
    /// `None` for structural comparisons (sets, exact indices).
    Match {
        worst: Option<f64>,
        tolerance: String,
    },
    /// Some elements outside tolerance, or a structural difference.
    Mismatch(String),
    /// The kernel's semantics could not be determined, so no claim is made.
    SemanticsUnknown(String),
}

/// What one harness measured.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub report: LaunchReport,
    /// Output elements the launch produced (the denominator of instructions per output).
    pub outputs: u64,
    pub verdict: Verdict,
    /// Facts measured in this run beyond the verdict (clobbered inputs, block-order dependence).
    pub observations: Vec<String>,
    /// The launch, e.g. `grid [1, 16, 16] × block [16, 1, 1]`.
    pub launch: String,
}

/// One launch: entry, geometry, arguments.
#[derive(Debug, Clone)]
pub struct Launch<'a> {
    pub entry: &'a str,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub args: Vec<Arg>,
}

impl Launch<'_> {
    /// Runs with every check on (ptxforge's test defaults), linear block order.
    pub fn run(&self, dev: &mut Device, module: &Module) -> Result<LaunchReport, SimError> {
        self.run_with(dev, module, &Options::default())
    }

    pub fn run_with(
        &self,
        dev: &mut Device,
        module: &Module,
        options: &Options,
    ) -> Result<LaunchReport, SimError> {
        dev.launch(
            module, self.entry, self.grid, self.block, 0, &self.args, options,
        )
    }

    pub fn describe(&self) -> String {
        format!("grid {:?} × block {:?}", self.grid, self.block)
    }
}

/// Runs the harness of `case` on `entry` of `module`.
pub fn run(case: Case, module: &Module, entry: &str) -> Result<Outcome, HarnessError> {
    match case {
        Case::MoeGating => moe::gating(module, entry),
        Case::MoePermute => moe::permute(module, entry),
        Case::MoeExpertGemm => moe::expert_gemm(module, entry),
        Case::MoeUnpermute => moe::unpermute(module, entry),
        Case::ConvIm2col => conv::im2col(module, entry),
        Case::ConvDirect => conv::direct(module, entry),
        Case::Conv1x1 => conv::pointwise(module, entry),
        Case::ConvBackwardData => conv::backward_data(module, entry),
        Case::ConvBackwardFilter => conv::backward_filter(module, entry),
        Case::Nf4Forward { m } => nf4::forward(module, entry, m, nf4::Tiling::Scalar),
        Case::Nf4Transposed { m } => nf4::transposed(module, entry, m, nf4::Tiling::Scalar),
        Case::Nf4ForwardWmma { m } => nf4::forward(module, entry, m, nf4::Tiling::Wmma),
        Case::Nf4TransposedWmma { m } => nf4::transposed(module, entry, m, nf4::Tiling::Wmma),
    }
}

/// Why a harness produced no outcome.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HarnessError {
    /// The interpreter could not run the kernel (unsupported instruction, bad launch).
    #[error(transparent)]
    Sim(#[from] SimError),
    /// The host reference rejected the harness's arguments (a bug of this harness).
    #[error("host reference: {0}")]
    Reference(String),
}

pub(crate) fn reference_error<E: std::fmt::Display>(e: E) -> HarnessError {
    HarnessError::Reference(e.to_string())
}

/// Element-wise comparison of a kernel's f32 output with an f64 reference:
/// `|got − want| ≤ rtol · scale + atol`, where `scale` is `Σ|terms|` of each element (the
/// magnitude the rounding error of a sum in another order is proportional to).
#[derive(Debug, Clone, Copy)]
pub struct Tolerance {
    pub rtol: f64,
    pub atol: f64,
}

impl Tolerance {
    /// Bit-exact (copies such as im2col).
    pub const EXACT: Tolerance = Tolerance {
        rtol: 0.0,
        atol: 0.0,
    };

    /// f32 sums against an f64 reference: `1e-5 · Σ|terms| + 1e-6` (ptxforge's f32 contract).
    pub const F32_SUM: Tolerance = Tolerance {
        rtol: 1e-5,
        atol: 1e-6,
    };

    pub fn describe(&self) -> String {
        if self.rtol == 0.0 && self.atol == 0.0 {
            "exact".to_string()
        } else if self.rtol == 0.0 {
            format!("|err| ≤ {:.0e}", self.atol)
        } else {
            format!("|err| ≤ {:.0e}·Σ|terms| + {:.0e}", self.rtol, self.atol)
        }
    }

    /// Error of one element ÷ its allowance (NaN counts as infinitely wrong).
    pub fn ratio(&self, got: f64, want: f64, scale: f64) -> f64 {
        let diff = (got - want).abs();
        if diff == 0.0 {
            return 0.0;
        }
        let r = diff / (self.rtol * scale.abs() + self.atol);
        if r.is_nan() {
            f64::INFINITY
        } else {
            r
        }
    }

    /// Compares whole tensors; `what` names the tensor in a mismatch message.
    pub fn verdict(&self, what: &str, got: &[f32], want: &[f64], scale: &[f64]) -> Verdict {
        if got.len() != want.len() {
            return Verdict::Mismatch(format!(
                "{what}: {} elements, reference has {}",
                got.len(),
                want.len()
            ));
        }
        let mut worst = 0.0f64;
        let mut worst_at = 0;
        let mut bad = 0usize;
        for (i, ((&g, &w), &s)) in got.iter().zip(want).zip(scale).enumerate() {
            let r = self.ratio(f64::from(g), w, s);
            if r > 1.0 {
                bad += 1;
            }
            if r > worst {
                worst = r;
                worst_at = i;
            }
        }
        if bad == 0 {
            let exact = self.rtol == 0.0 && self.atol == 0.0;
            Verdict::Match {
                worst: (!exact).then_some(worst),
                tolerance: self.describe(),
            }
        } else {
            Verdict::Mismatch(format!(
                "{what}: {bad} of {} elements outside {}; worst [{worst_at}] = {} vs reference {}",
                got.len(),
                self.describe(),
                got[worst_at],
                want[worst_at]
            ))
        }
    }
}

pub(crate) fn widen(xs: &[f32]) -> Vec<f64> {
    xs.iter().map(|&x| f64::from(x)).collect()
}

pub(crate) fn narrow(xs: &[f64]) -> Vec<f32> {
    xs.iter().map(|&x| x as f32).collect()
}

pub(crate) fn abs(xs: &[f64]) -> Vec<f64> {
    xs.iter().map(|x| x.abs()).collect()
}
