//! What every kernel family provides: compile a configuration into one PTX module holding all
//! of the family's entries, plus the metadata launch wrappers and the macros need.

use crate::arch::Arch;
use crate::ir::{BlockShape, Kernel, Type};
use crate::launch::{ParamKind, ScalarKind};
use crate::templates::ConfigErrors;
use crate::validate::{ValidModule, ValidationErrors};

/// A kernel family's configuration.
pub trait KernelFamily {
    /// The family name (the emit matrix's sub-directory).
    const FAMILY: &'static str;
    /// Builds, validates and emits every entry of the family for this configuration.
    fn compile(&self) -> Result<CompiledFamily, TemplateError>;
    /// A short, file-name-safe description of the configuration (matrix file stem).
    fn matrix_name(&self) -> String;
    /// The target architecture.
    fn arch(&self) -> Arch;
}

/// Why a family could not be compiled.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TemplateError {
    #[error("invalid configuration: {0}")]
    Config(#[from] ConfigErrors),
    #[error(transparent)]
    Validation(#[from] ValidationErrors),
}

/// One compiled module and the metadata of each entry in it.
#[derive(Debug, Clone, PartialEq)]
pub struct CompiledFamily {
    pub ptx: String,
    pub entries: Vec<EntryInfo>,
}

impl CompiledFamily {
    /// Emits a validated module and records its entries.
    pub fn from_module(module: &ValidModule) -> Self {
        let entries = module
            .module()
            .kernels
            .iter()
            .map(EntryInfo::from_kernel)
            .collect();
        Self {
            ptx: crate::emit::emit(module),
            entries,
        }
    }

    /// The entry named `name`.
    pub fn entry(&self, name: &str) -> Option<&EntryInfo> {
        self.entries.iter().find(|e| e.name == name)
    }
}

/// Metadata of one entry (owned; the macros turn it into a `KernelEntry` const).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryInfo {
    pub name: String,
    pub params: Vec<(String, ParamKind)>,
    /// `.reqntid` block when the kernel requires an exact block shape.
    pub required_block: Option<[u32; 3]>,
    pub static_shared_bytes: u32,
    /// The most dynamic shared memory the entry is launched with.
    pub max_dynamic_shared_bytes: u32,
}

impl EntryInfo {
    pub fn from_kernel(k: &Kernel) -> Self {
        let params = k
            .params
            .iter()
            .map(|p| {
                let kind = match p.pointee {
                    Some(t) => ParamKind::Pointer(scalar_kind(t)),
                    None => ParamKind::Scalar(scalar_kind(p.ty)),
                };
                (p.name.clone(), kind)
            })
            .collect();
        let required_block = match k.block_shape {
            Some(BlockShape::Exact(b)) => Some(b),
            _ => None,
        };
        Self {
            name: k.name.clone(),
            params,
            required_block,
            static_shared_bytes: u32::try_from(k.static_shared_bytes()).unwrap_or(u32::MAX),
            max_dynamic_shared_bytes: k.max_dynamic_shared_bytes,
        }
    }
}

/// The host scalar kind of a PTX type (bit types map to the unsigned kind of their size).
pub fn scalar_kind(t: Type) -> ScalarKind {
    match t {
        Type::Pred | Type::B8 | Type::U8 | Type::S8 => ScalarKind::U8,
        Type::B16 | Type::U16 | Type::S16 => ScalarKind::U16,
        Type::F16 => ScalarKind::F16,
        Type::BF16 => ScalarKind::BF16,
        Type::B32 | Type::U32 | Type::F16x2 | Type::BF16x2 | Type::TF32 => ScalarKind::U32,
        Type::S32 => ScalarKind::S32,
        Type::F32 => ScalarKind::F32,
        Type::B64 | Type::U64 => ScalarKind::U64,
        Type::S64 => ScalarKind::S64,
        Type::F64 => ScalarKind::F64,
    }
}
