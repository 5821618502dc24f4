//! Kernel templates: one module per family. Each has a config struct with a field-tagged
//! `validate()`, plain-Rust host references, launch geometry and the kernels themselves, built
//! through the typed builder.

pub mod attention;
pub mod conv;
pub mod moe;
pub mod nf4;
pub mod split;
pub(crate) mod staging;
#[doc(hidden)]
pub mod testing;
pub mod tf32;
pub(crate) mod warp_mma;

mod compiled;
pub use compiled::{nf4_upload_weights, CompileCached, CompiledKernel};

mod config_error;
pub use config_error::{ConfigError, ConfigErrors};

mod family;
pub use family::{scalar_kind, CompiledFamily, EntryInfo, KernelFamily, TemplateError};
