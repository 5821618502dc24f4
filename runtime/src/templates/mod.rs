//! Kernel templates: one module per family. Each has a config struct with a field-tagged
//! `validate()`, plain-Rust host references, launch geometry and the kernels themselves, built
//! through the typed builder.

pub mod attention;
pub mod conv;
pub mod moe;
pub mod nf4;
#[doc(hidden)]
pub mod testing;

mod config_error;
pub use config_error::{ConfigError, ConfigErrors};
