//! ptxforge: a procedural-macro GPU kernel DSL. Annotate a unit struct with a kernel-family
//! attribute and get, at compile time and without a CUDA toolkit, a validated `const` PTX string
//! and typed launch wrappers for the CPU interpreter backend and (feature `cuda`) real GPUs.
//!
//! The README follows; its code blocks are this crate's doc tests.
#![doc = include_str!("../README.md")]

pub use ptxforge_runtime as runtime;
pub use ptxforge_sim as sim;

/// The cudarc crate the CUDA backend is built on (feature `cuda`), so an application uses the
/// same version for its own contexts, streams and slices. To choose the CUDA version of the
/// bindings, select one of cudarc's version features (`cuda-12090`, …) on the application's own
/// cudarc dependency, or set `CUDARC_CUDA_VERSION`; that choice wins over ptxforge's default
/// (nvcc's version, else the newest bindings).
#[cfg(feature = "cuda")]
pub use ptxforge_runtime::cudarc;

/// The MoE family's run-time types: launch context, workspace, statistics, host reference.
pub mod moe {
    pub use ptxforge_runtime::templates::moe::launch::{
        Bins, ExpertWeights, MoeLaunch, MoeStats, MoeWorkspace, Routing,
    };
    pub use ptxforge_runtime::templates::moe::{reference, Ffn, MoeConfig};
}

/// The NF4 family's run-time types: device weights, host quantisation, host reference, and the
/// loader for bitsandbytes checkpoints in safetensors.
pub mod nf4 {
    pub use ptxforge_runtime::templates::nf4::launch::{DeviceAbsmax, DeviceWeights};
    pub use ptxforge_runtime::templates::nf4::{
        dequantize, quantize, reference, CheckpointError, CheckpointLoadError, LoadedNf4,
        Nf4Checkpoint, Nf4Config, Nf4DoubleQuant, Nf4State, Nf4Weights,
    };
}

/// The attention family's run-time types: shapes, tensor layouts (strides) and host reference.
pub mod attention {
    pub use ptxforge_runtime::templates::attention::{
        reference, AttentionConfig, AttentionLayouts, AttentionShape, LayoutError, TensorLayout,
    };
}

/// The conv2d family's run-time types: shapes, output dimensions and host reference.
pub mod conv {
    pub use ptxforge_runtime::templates::conv::{
        reference, Conv2dConfig, ConvDims, ConvShape, Layout,
    };
}

/// What most users need in scope: the attributes, the backends and buffer types, and the
/// run-time shapes the wrappers take.
pub mod prelude {
    pub use ptxforge_macros::{attention_kernel, conv2d_kernel, moe_kernel, nf4_gemm};
    pub use ptxforge_runtime::launch::{
        Backend, DeviceBuffer, DriverError, DriverErrorKind, KernelEntry, LaunchError, SimBackend,
    };
    pub use ptxforge_runtime::templates::attention::AttentionShape;
    pub use ptxforge_runtime::templates::conv::ConvShape;
    /// Configurations known only at run time: `config.compile_cached()?` gives a
    /// [`CompiledKernel`] with the attribute's wrappers.
    pub use ptxforge_runtime::templates::{CompileCached, CompiledKernel};
    pub use ptxforge_runtime::{Arch, DType};

    /// The half-precision element types of `dtype = bf16` / `dtype = f16` buffers.
    pub use half::{bf16, f16};

    #[cfg(feature = "cuda")]
    pub use ptxforge_runtime::launch::{BorrowedBuffer, BorrowedBufferMut, CudaBackend};
}

/// Paths used by macro-generated code. Not public API.
#[doc(hidden)]
pub mod __private {
    pub use half;
    pub use ptxforge_runtime;
    pub use ptxforge_runtime::launch::{
        select_target, Backend, DeviceBuffer, Dim3, Element, KernelEntry, LaunchError, ParamInfo,
        ParamKind, ScalarKind,
    };
    pub use ptxforge_runtime::templates::attention::AttentionConfig;
    pub use ptxforge_runtime::templates::conv::{Conv2dConfig, Layout as ConvLayout};
    pub use ptxforge_runtime::templates::moe::{Ffn, MoeConfig};
    pub use ptxforge_runtime::templates::nf4::Nf4Config;
    pub use ptxforge_runtime::{Arch, DType};

    /// The launch functions and argument types of each family, as the wrappers call them.
    pub mod moe {
        pub use ptxforge_runtime::templates::moe::launch::*;
    }
    pub mod nf4 {
        pub use ptxforge_runtime::templates::nf4::launch::*;
    }
    pub mod attention {
        pub use ptxforge_runtime::templates::attention::launch::*;
        pub use ptxforge_runtime::templates::attention::{AttentionLayouts, AttentionShape};
    }
    pub mod conv {
        pub use ptxforge_runtime::templates::conv::launch::*;
        pub use ptxforge_runtime::templates::conv::{ConvDims, ConvShape};
    }

    /// `upload_weights` of `#[nf4_gemm]`.
    pub use ptxforge_runtime::templates::nf4_upload_weights;
}
