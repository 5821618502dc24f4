//! The emit matrix: every kernel the project can produce for its test matrix, each as its own
//! PTX module per target. `cargo xtask emit` writes it, the ptxas harness assembles it and
//! `cargo xtask bench` times its code generation.
//!
//! [`matrix`] passes every module through the 32-bit address lint ([`crate::lint::address`]), so
//! no family, and no module added to the matrix later, can widen an undeclared 32-bit index
//! product into an address.

use crate::arch::Arch;
use crate::lint::address::{check_module, AddressFinding};
use crate::samples::{sample_module, SAMPLES, TENSOR_CORE_SAMPLES};
use crate::templates::{KernelFamily, TemplateError};

/// One kernel of the matrix for one target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatrixEntry {
    /// Kernel family (the output sub-directory).
    pub family: &'static str,
    /// File stem, unique within the family (kernel and configuration).
    pub name: String,
    pub arch: Arch,
    pub ptx: String,
}

impl MatrixEntry {
    /// Relative output path, `<family>/<name>.<arch>.ptx`.
    pub fn path(&self) -> String {
        format!("{}/{}.{}.ptx", self.family, self.name, self.arch)
    }
}

/// A matrix kernel that failed to build or to pass the address lint.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{family}/{name} for {arch}: {source}")]
pub struct MatrixError {
    pub family: &'static str,
    pub name: String,
    pub arch: Arch,
    #[source]
    pub source: MatrixFailure,
}

/// Why a matrix kernel was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MatrixFailure {
    #[error(transparent)]
    Build(#[from] TemplateError),
    /// Widenings of 32-bit index products into addresses that no declared bound covers.
    #[error("{} undeclared 32-bit index widening(s) into addresses; first: {}", .0.len(), .0[0])]
    AddressLint(Vec<AddressFinding>),
}

/// A matrix kernel not yet built: what it is and how to build it (so benchmarks can time it).
pub struct MatrixJob {
    pub family: &'static str,
    pub name: String,
    pub arch: Arch,
    pub build: Box<dyn Fn() -> Result<String, TemplateError> + Send + Sync>,
}

impl std::fmt::Debug for MatrixJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MatrixJob({}/{}.{})", self.family, self.name, self.arch)
    }
}

impl MatrixJob {
    /// Builds the job's PTX.
    pub fn run(&self) -> Result<MatrixEntry, MatrixError> {
        let ptx = (self.build)().map_err(|e| self.error(e.into()))?;
        Ok(MatrixEntry {
            family: self.family,
            name: self.name.clone(),
            arch: self.arch,
            ptx,
        })
    }

    /// Builds the job's PTX ([`Self::run`]) and refuses it if the address lint finds anything.
    pub fn run_checked(&self) -> Result<MatrixEntry, MatrixError> {
        let entry = self.run()?;
        let findings = check_module(&entry.ptx);
        if findings.is_empty() {
            Ok(entry)
        } else {
            Err(self.error(MatrixFailure::AddressLint(findings)))
        }
    }

    fn error(&self, source: MatrixFailure) -> MatrixError {
        MatrixError {
            family: self.family,
            name: self.name.clone(),
            arch: self.arch,
            source,
        }
    }
}

/// Every job of the matrix.
pub fn jobs() -> Vec<MatrixJob> {
    let mut out = Vec::new();
    for arch in Arch::ALL {
        for s in SAMPLES {
            out.push(MatrixJob {
                family: "samples",
                name: s.name.to_string(),
                arch,
                build: Box::new(move || sample_module(s, arch).map_err(TemplateError::from)),
            });
        }
        for t in TENSOR_CORE_SAMPLES.iter().filter(|t| (t.supports)(arch)) {
            out.push(MatrixJob {
                family: "samples",
                name: t.sample.name.to_string(),
                arch,
                build: Box::new(move || {
                    sample_module(&t.sample, arch).map_err(TemplateError::from)
                }),
            });
        }
    }
    // Each family adds its representative configurations here.
    add_family(&mut out, crate::templates::conv::matrix_configs());
    add_family(&mut out, crate::templates::moe::matrix_configs());
    add_family(&mut out, crate::templates::nf4::matrix_configs());
    add_family(&mut out, crate::templates::attention::matrix_configs());
    out
}

/// Builds the whole matrix, every module checked by the address lint.
pub fn matrix() -> Result<Vec<MatrixEntry>, MatrixError> {
    jobs().iter().map(MatrixJob::run_checked).collect()
}

/// Adds one job per configuration of a family.
fn add_family<F: KernelFamily + Send + Sync + 'static>(
    out: &mut Vec<MatrixJob>,
    configs: impl IntoIterator<Item = F>,
) {
    for cfg in configs {
        out.push(MatrixJob {
            family: F::FAMILY,
            name: cfg.matrix_name(),
            arch: cfg.arch(),
            build: Box::new(move || cfg.compile().map(|c| c.ptx)),
        });
    }
}
