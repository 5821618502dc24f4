//! The NF4 split sums: what one slice of a split entry adds ([`SumRange`]), and the second pass
//! that adds the slices' f32 partials in order ([`build`], the crate's one split-reduce
//! builder, [`crate::templates::split`]'s `reduce`, with a run-time length). Two splits use
//! them: the backward GEMV over the rows of `W` (`nf4_backward_gemv_split`, reduced by
//! `nf4_backward_gemv_reduce` into `G_A [m, k]`) and the tiled forward over `k`
//! (`nf4_gemm_split`, reduced by `nf4_gemm_reduce` into `C [m, n]`).
//!
//! A reduce entry `(partials, out, m, slices)` computes `out[e] = round(Σ_{s = 0..S}
//! partials[s][e])` for the `m · cols` elements `e` of its output (`cols` = `k` or `n`, fixed at
//! compile time), the slices added in order in f32 from 0, rounded once to the activation type
//! (round to nearest even): the same bits run to run and under any block order, no atomics.
//!
//! Workspace layout: slice `s`'s part `[m, cols]` starts at element `s · stride`, `stride =`
//! [`slice_len`] (`m · cols` rounded up to a multiple of [`VECTOR`]), so that every part starts
//! 16 bytes aligned; the reduce reads each slice's four elements per thread with one vector
//! load and handles the ragged tail element by element.

use crate::builder::{Float, KernelBuilder, Reg, Val, F32, U32};
use crate::templates::nf4::INDEX_BOUND;
use crate::templates::split::reduce::{slice_stride, Extent, SplitReduce};

pub use crate::templates::split::reduce::{slice_len, VECTOR};
/// The part of a split sum one block adds: reduction indices `start .. end`, and where its
/// output `[m, cols]` starts when it writes f32 partials.
#[derive(Clone, Copy)]
pub(super) struct SumRange {
    pub start: Val<U32>,
    pub end: Val<U32>,
    /// Slice `s`'s part of the workspace, element `s · slice_len(cols, m)`; `None` for the
    /// unsplit entry, which writes the rounded output itself.
    pub output_base: Option<Reg<U32>>,
}

impl SumRange {
    /// The whole sum `0 .. len`, into the output.
    pub fn all(len: u32) -> Self {
        Self {
            start: 0u32.into(),
            end: len.into(),
            output_base: None,
        }
    }

    /// Slice `s`: indices `min(s · each, len) .. min(s · each + each, len)` (none when the
    /// slice starts past `len`), into part `s` of the workspace of `[m, cols]` parts.
    pub fn slice(
        k: &mut KernelBuilder,
        (s, each, len): (Reg<U32>, Reg<U32>, u32),
        (m, cols): (Reg<U32>, u32),
    ) -> Self {
        let start = k.mul_lo(s, each);
        let end = k.add(start, each);
        let start = k.min(start, len);
        let end = k.min(end, len);
        let stride = slice_stride(k, cols, m);
        Self {
            start: start.into(),
            end: end.into(),
            output_base: Some(k.mul_lo(s, stride)),
        }
    }

    /// The first index when it is not 0 (a slice's, in a register).
    pub fn offset(&self) -> Option<Reg<U32>> {
        match self.start {
            Val::Reg(start) => Some(start),
            Val::Imm(..) => None,
        }
    }

    /// `index` moved into this slice's part of the workspace (unchanged for the output).
    pub fn output_index(&self, k: &mut KernelBuilder, index: Reg<U32>) -> Reg<U32> {
        match self.output_base {
            Some(base) => k.add(base, index),
            None => index,
        }
    }
}

/// Builds the reduce entry `name(partials, output, m, slices)` over outputs of `cols` columns
/// (module docs). Grid: `⌈⌈m · cols / 4⌉ / 256⌉` blocks of 256 threads.
pub(super) fn build<T: Float>(
    arch: crate::arch::Arch,
    (entry, output): (&'static str, &'static str),
    cols: u32,
) -> KernelBuilder {
    let reduce = SplitReduce {
        entry,
        output,
        extent: Extent::Rows { cols },
        bound: &INDEX_BOUND,
    };
    reduce.build::<F32, T>(arch, KernelBuilder::from_f32::<T>)
}
