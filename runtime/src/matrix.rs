//! The emit matrix: every kernel the project can produce for its test matrix, each as its own
//! PTX module per target. `cargo xtask emit` writes it and the ptxas harness assembles it.

use crate::arch::Arch;
use crate::samples::{sample_module, SAMPLES};
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

/// A matrix kernel that failed to build.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{family}/{name} for {arch}: {source}")]
pub struct MatrixError {
    pub family: &'static str,
    pub name: String,
    pub arch: Arch,
    #[source]
    pub source: TemplateError,
}

/// Builds the whole matrix.
pub fn matrix() -> Result<Vec<MatrixEntry>, MatrixError> {
    let mut out = Vec::new();
    for arch in Arch::ALL {
        for s in SAMPLES {
            let ptx = sample_module(s, arch).map_err(|e| MatrixError {
                family: "samples",
                name: s.name.to_string(),
                arch,
                source: e.into(),
            })?;
            out.push(MatrixEntry {
                family: "samples",
                name: s.name.to_string(),
                arch,
                ptx,
            });
        }
    }
    // Each family adds its representative configurations here.
    add_family(&mut out, crate::templates::attention::matrix_configs())?;
    Ok(out)
}

/// Compiles each configuration of a family into the matrix.
fn add_family<F: KernelFamily>(
    out: &mut Vec<MatrixEntry>,
    configs: impl IntoIterator<Item = F>,
) -> Result<(), MatrixError> {
    for cfg in configs {
        let compiled = cfg.compile().map_err(|source| MatrixError {
            family: F::FAMILY,
            name: cfg.matrix_name(),
            arch: cfg.arch(),
            source,
        })?;
        out.push(MatrixEntry {
            family: F::FAMILY,
            name: cfg.matrix_name(),
            arch: cfg.arch(),
            ptx: compiled.ptx,
        });
    }
    Ok(())
}
