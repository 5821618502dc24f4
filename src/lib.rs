//! ptxforge: a procedural-macro GPU kernel DSL. Annotate a unit struct with a kernel-family
//! attribute and get, at compile time and without a CUDA toolkit, a validated `const` PTX string
//! and typed launch wrappers for the CPU interpreter backend and (feature `cuda`) real GPUs.

pub use ptxforge_runtime as runtime;
pub use ptxforge_sim as sim;

/// What most users need in scope.
pub mod prelude {
    pub use ptxforge_macros::{attention_kernel, conv2d_kernel, moe_kernel, nf4_gemm};
    pub use ptxforge_runtime::{Arch, DType};
}

/// Paths used by macro-generated code. Not public API.
#[doc(hidden)]
pub mod __private {
    pub use ptxforge_runtime;
    pub use ptxforge_runtime::templates::attention::AttentionConfig;
    pub use ptxforge_runtime::templates::conv::Conv2dConfig;
    pub use ptxforge_runtime::templates::moe::{Ffn, MoeConfig};
    pub use ptxforge_runtime::templates::nf4::Nf4Config;
    pub use ptxforge_runtime::{Arch, DType};
}
