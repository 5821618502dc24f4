//! The peer crates' PTX, generated through their public APIs for the benchmark shapes.
//!
//! Shapes (ptxforge's own benchmark, scaled down): MoE with 8 experts, top-2, hidden 64,
//! expert_dim 128, 64 tokens, f32; conv 3×3 stride 1 padding 1, N = 1, C 16 → 16, 16×16, f32
//! (the 1×1 kernel on the same tensor with a 1×1 filter); NF4 with N = K = 256, block 64,
//! M = 1 (GEMV) and M = 33 (GEMM). Everything targets sm_80.

use oxicuda_ptx::arch::SmVersion;
use oxicuda_ptx::ir::PtxType;
use oxicuda_ptx::templates::convolution::ConvolutionTemplate;
use oxicuda_ptx::templates::moe::MoETemplate;
use trueno_gpu::kernels::backward::Nf4TensorCoreGemmBackwardAKernel;
use trueno_gpu::kernels::{Kernel, Nf4GemmKernel, Nf4GemmTransposeKernel, Nf4TensorCoreGemmKernel};

/// Target every peer kernel is generated for and assembled against.
pub const TARGET: &str = "sm_80";

/// MoE benchmark shape.
pub const MOE_EXPERTS: u32 = 8;
pub const MOE_TOP_K: u32 = 2;
pub const MOE_HIDDEN: u32 = 64;
pub const MOE_EXPERT_DIM: u32 = 128;
pub const MOE_TOKENS: u32 = 64;
pub const MOE_CAPACITY_FACTOR: f32 = 1.25;

/// Conv benchmark shape (NCHW).
pub const CONV_BATCH: u32 = 1;
pub const CONV_CHANNELS: u32 = 16;
pub const CONV_SIZE: u32 = 16;

/// NF4 benchmark shape: `W [N, K]`, blocks of 64.
pub const NF4_N: u32 = 256;
pub const NF4_K: u32 = 256;
pub const NF4_BLOCK: u32 = 64;
/// Activation rows: the GEMV case and the GEMM case.
pub const NF4_M: [u32; 2] = [1, 33];

/// Which peer crate a kernel comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    Oxicuda,
    Aprender,
}

impl Peer {
    /// Crate name and the version this binary was built against.
    pub fn crate_name(self) -> &'static str {
        match self {
            Peer::Oxicuda => "oxicuda-ptx 0.5.5",
            Peer::Aprender => "aprender-gpu 0.72.3",
        }
    }
}

/// What each peer kernel computes, in terms of ptxforge's contracts; selects the harness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Case {
    MoeGating,
    MoePermute,
    MoeExpertGemm,
    MoeUnpermute,
    ConvIm2col,
    ConvDirect,
    Conv1x1,
    ConvBackwardData,
    ConvBackwardFilter,
    /// `C [M, N] = A · Ŵᵀ`, scalar (CUDA-core) kernel.
    Nf4Forward {
        m: u32,
    },
    /// `G_A [M, K] = G_C · Ŵ`, scalar kernel.
    Nf4Transposed {
        m: u32,
    },
    /// Tensor-core (WMMA) forward.
    Nf4ForwardWmma {
        m: u32,
    },
    /// Tensor-core (WMMA) backward-input.
    Nf4TransposedWmma {
        m: u32,
    },
}

/// One generated peer kernel: its PTX text or the generator's error.
#[derive(Debug, Clone)]
pub struct PeerKernel {
    pub peer: Peer,
    pub case: Case,
    /// The generator call, as a reader would write it.
    pub generator: String,
    /// The `.entry` name (known from the generator's naming scheme).
    pub entry: String,
    pub shape: String,
    pub ptx: Result<String, String>,
}

fn moe_template() -> MoETemplate {
    MoETemplate {
        num_experts: MOE_EXPERTS,
        top_k: MOE_TOP_K,
        hidden_dim: MOE_HIDDEN,
        expert_dim: MOE_EXPERT_DIM,
        capacity_factor: MOE_CAPACITY_FACTOR,
        sm_version: SmVersion::Sm80,
        float_type: PtxType::F32,
    }
}

/// The convolution template with a square `kernel` and `padding`, stride and dilation 1.
pub fn conv_template(kernel: u32, padding: u32) -> ConvolutionTemplate {
    ConvolutionTemplate {
        in_channels: CONV_CHANNELS,
        out_channels: CONV_CHANNELS,
        kernel_h: kernel,
        kernel_w: kernel,
        stride_h: 1,
        stride_w: 1,
        pad_h: padding,
        pad_w: padding,
        dilation_h: 1,
        dilation_w: 1,
        groups: 1,
        sm_version: SmVersion::Sm80,
        float_type: PtxType::F32,
    }
}

fn moe_shape() -> String {
    format!("E={MOE_EXPERTS} K={MOE_TOP_K} H={MOE_HIDDEN} F={MOE_EXPERT_DIM} T={MOE_TOKENS} f32")
}

fn conv_shape(kernel: u32, padding: u32) -> String {
    format!(
        "{kernel}×{kernel} s1 p{padding}, N={CONV_BATCH} C={CONV_CHANNELS}→{CONV_CHANNELS} \
         {CONV_SIZE}×{CONV_SIZE} f32"
    )
}

fn err_string<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

/// Every peer kernel of the comparison, generated now.
pub fn all() -> Vec<PeerKernel> {
    let mut out = Vec::new();
    let moe = moe_template();
    let moe_kernels = [
        (
            Case::MoeGating,
            "MoETemplate::generate_topk_gating",
            moe.topk_gating_kernel_name(),
            moe.generate_topk_gating().map_err(err_string),
        ),
        (
            Case::MoePermute,
            "MoETemplate::generate_permute",
            moe.permute_kernel_name(),
            moe.generate_permute().map_err(err_string),
        ),
        (
            Case::MoeExpertGemm,
            "MoETemplate::generate_expert_gemm",
            moe.expert_gemm_kernel_name(),
            moe.generate_expert_gemm().map_err(err_string),
        ),
        (
            Case::MoeUnpermute,
            "MoETemplate::generate_unpermute",
            moe.unpermute_kernel_name(),
            moe.generate_unpermute().map_err(err_string),
        ),
    ];
    for (case, generator, entry, ptx) in moe_kernels {
        out.push(PeerKernel {
            peer: Peer::Oxicuda,
            case,
            generator: generator.to_string(),
            entry,
            shape: moe_shape(),
            ptx,
        });
    }

    let conv3 = conv_template(3, 1);
    let conv1 = conv_template(1, 0);
    let conv_kernels = [
        (
            Case::ConvIm2col,
            "ConvolutionTemplate::generate_im2col_kernel",
            &conv3,
            "im2col",
            conv3.generate_im2col_kernel().map_err(err_string),
        ),
        (
            Case::ConvDirect,
            "ConvolutionTemplate::generate_direct_conv_kernel",
            &conv3,
            "direct",
            conv3.generate_direct_conv_kernel().map_err(err_string),
        ),
        (
            Case::Conv1x1,
            "ConvolutionTemplate::generate_1x1_conv_kernel",
            &conv1,
            "1x1",
            conv1.generate_1x1_conv_kernel().map_err(err_string),
        ),
        (
            Case::ConvBackwardData,
            "ConvolutionTemplate::generate_backward_data_kernel",
            &conv3,
            "bwd_data",
            conv3.generate_backward_data_kernel().map_err(err_string),
        ),
        (
            Case::ConvBackwardFilter,
            "ConvolutionTemplate::generate_backward_filter_kernel",
            &conv3,
            "bwd_filter",
            conv3.generate_backward_filter_kernel().map_err(err_string),
        ),
    ];
    for (case, generator, t, suffix, ptx) in conv_kernels {
        let entry = entry_name(&ptx).unwrap_or_else(|| t.kernel_name(suffix));
        out.push(PeerKernel {
            peer: Peer::Oxicuda,
            case,
            generator: generator.to_string(),
            entry,
            shape: conv_shape(t.kernel_h, t.pad_h),
            ptx,
        });
    }

    for m in NF4_M {
        let (n, k) = (NF4_N, NF4_K);
        let nf4: [(Case, String, Box<dyn Kernel>, String); 4] = [
            (
                Case::Nf4Forward { m },
                "Nf4GemmKernel::new(m, n, k)".into(),
                Box::new(Nf4GemmKernel::new(m, n, k)),
                format!("C[{m}×{n}] = A[{m}×{k}]·Ŵᵀ, block {NF4_BLOCK}"),
            ),
            (
                Case::Nf4Transposed { m },
                "Nf4GemmTransposeKernel::new(m, n, k)".into(),
                Box::new(Nf4GemmTransposeKernel::new(m, n, k)),
                format!("G_A[{m}×{k}] = G_C[{m}×{n}]·Ŵ, block {NF4_BLOCK}"),
            ),
            (
                Case::Nf4ForwardWmma { m },
                "Nf4TensorCoreGemmKernel::new(m, n, k)".into(),
                Box::new(Nf4TensorCoreGemmKernel::new(m, n, k)),
                format!("C[{m}×{n}] = A[{m}×{k}]·Ŵᵀ, block {NF4_BLOCK}"),
            ),
            (
                Case::Nf4TransposedWmma { m },
                "Nf4TensorCoreGemmBackwardAKernel::new(m, n, k)".into(),
                Box::new(Nf4TensorCoreGemmBackwardAKernel::new(m, n, k)),
                format!("G_A[{m}×{k}] = G_C[{m}×{n}]·Ŵ, block {NF4_BLOCK}"),
            ),
        ];
        for (case, generator, kernel, shape) in nf4 {
            out.push(PeerKernel {
                peer: Peer::Aprender,
                case,
                generator,
                entry: kernel.name().to_string(),
                shape,
                ptx: Ok(kernel.emit_ptx_for_target(TARGET)),
            });
        }
    }
    out
}

/// The first `.entry` name of a PTX text.
fn entry_name(ptx: &Result<String, String>) -> Option<String> {
    let text = ptx.as_ref().ok()?;
    let rest = &text[text.find(".entry")? + ".entry".len()..];
    let name: String = rest
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '$')
        .collect();
    (!name.is_empty()).then_some(name)
}

/// One generator call of the assembly survey: the same MoE and conv generators for every float
/// type they accept (only the f32 ones are run; this records which of the others assemble).
#[derive(Debug, Clone)]
pub struct SurveyItem {
    pub generator: String,
    pub dtype: &'static str,
    pub ptx: Result<String, String>,
}

/// The MoE and conv generators of oxicuda-ptx for f16, f32 and f64, at the benchmark shapes.
pub fn survey() -> Vec<SurveyItem> {
    let mut out = Vec::new();
    for (dtype, ty) in [
        ("f16", PtxType::F16),
        ("f32", PtxType::F32),
        ("f64", PtxType::F64),
    ] {
        let moe = MoETemplate {
            float_type: ty,
            ..moe_template()
        };
        let conv3 = ConvolutionTemplate {
            float_type: ty,
            ..conv_template(3, 1)
        };
        let conv1 = ConvolutionTemplate {
            float_type: ty,
            ..conv_template(1, 0)
        };
        let calls = [
            (
                "MoETemplate::generate_topk_gating",
                moe.generate_topk_gating(),
            ),
            ("MoETemplate::generate_permute", moe.generate_permute()),
            (
                "MoETemplate::generate_expert_gemm",
                moe.generate_expert_gemm(),
            ),
            ("MoETemplate::generate_unpermute", moe.generate_unpermute()),
            (
                "ConvolutionTemplate::generate_im2col_kernel",
                conv3.generate_im2col_kernel(),
            ),
            (
                "ConvolutionTemplate::generate_direct_conv_kernel",
                conv3.generate_direct_conv_kernel(),
            ),
            (
                "ConvolutionTemplate::generate_1x1_conv_kernel",
                conv1.generate_1x1_conv_kernel(),
            ),
            (
                "ConvolutionTemplate::generate_backward_data_kernel",
                conv3.generate_backward_data_kernel(),
            ),
            (
                "ConvolutionTemplate::generate_backward_filter_kernel",
                conv3.generate_backward_filter_kernel(),
            ),
        ];
        for (generator, ptx) in calls {
            out.push(SurveyItem {
                generator: generator.to_string(),
                dtype,
                ptx: ptx.map_err(err_string),
            });
        }
    }
    out
}
