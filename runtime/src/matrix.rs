//! The emit matrix: every kernel the project can produce for its test matrix, each as its own
//! PTX module per target. `cargo xtask emit` writes it and the ptxas harness assembles it.

use crate::arch::Arch;
use crate::samples::{sample_module, SAMPLES};
use crate::validate::ValidationErrors;

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

/// A matrix kernel that failed to build.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{family}/{name} for {arch}: {source}")]
pub struct MatrixError {
    pub family: &'static str,
    pub name: String,
    pub arch: Arch,
    #[source]
    pub source: ValidationErrors,
}

/// Builds the whole matrix.
pub fn matrix() -> Result<Vec<MatrixEntry>, MatrixError> {
    let mut out = Vec::new();
    for arch in Arch::ALL {
        for s in SAMPLES {
            let ptx = sample_module(s, arch).map_err(|source| MatrixError {
                family: "samples",
                name: s.name.to_string(),
                arch,
                source,
            })?;
            out.push(MatrixEntry {
                family: "samples",
                name: s.name.to_string(),
                arch,
                ptx,
            });
        }
    }
    Ok(out)
}
