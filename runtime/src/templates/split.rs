//! Split reductions, shared by the families that split one long sum over several blocks (conv's
//! backward-filter and bias gradient over pixels, NF4's backward GEMV over the rows of `W` and
//! tiled forward over `k`): each slice's partial sums go to its own part of a workspace (f32;
//! f64 for conv's f64) and a second launch adds the slices in a fixed order and rounds once,
//! so a split gives the same bits on every run.
//!
//! That second launch is built in one place, `split::reduce` (`SplitReduce`), for every entry
//! of the crate that reduces slices: conv's `conv2d_bwd_filter_reduce` (after the
//! tensor-core and the CUDA-core backward-filter splits) and `conv2d_bwd_bias_reduce` (a
//! compile-time length, one output per thread), and NF4's `nf4_backward_gemv_reduce` and
//! `nf4_gemm_reduce` (a run-time `m`, padded slice parts, four outputs per thread).

pub(crate) mod reduce;

/// SMs of the part a split sizes its grid for (an H100 SXM).
pub const SPLIT_TARGET_SMS: u64 = 132;
/// Waves of blocks (one block per SM each) a split aims at.
pub const SPLIT_WAVES: u64 = 2;

/// How many slices a split reduction runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slices {
    /// The kernel's own rule for the shape (conv:
    /// [`Conv2dConfig::backward_filter_slices`](super::conv::Conv2dConfig::backward_filter_slices);
    /// NF4: [`backward_gemv_slices`](super::nf4::launch::backward_gemv_slices)).
    Auto,
    /// Exactly this many (1: the unsplit entry alone; 0 is an error).
    Exactly(u32),
}
