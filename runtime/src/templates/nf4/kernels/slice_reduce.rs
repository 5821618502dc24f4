//! The NF4 split sums: what one slice of a split entry adds ([`SumRange`]), and the second pass
//! that adds the slices' f32 partials in order ([`build`]). Two splits use them: the backward
//! GEMV over the rows of `W` (`nf4_backward_gemv_split`, reduced by
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
//! 16 bytes aligned. Thread `v` of the grid owns elements `4v .. 4v + 4`: when all four exist
//! it reads each slice's four with one `ld.global.nc.v4.f32` (a warp: 512 consecutive bytes,
//! whole sectors) and stores them with one vector store (16 bytes of f32, 8 of f16/bf16); the
//! one thread past the last whole group reads and stores its 1 to 3 elements one by one (the
//! padding is never written by the slices, so never read).

use super::THREADS;
use crate::builder::{Float, KernelBuilder, Reg, Val, F32, U32};
use crate::lint::address::declare_index_bound;
use crate::templates::nf4::INDEX_BOUND;

/// Elements of the output per reduce thread (one 16-byte f32 load per slice).
pub const VECTOR: u32 = 4;

/// Elements between two slices' parts of the workspace: `m · cols` rounded up to [`VECTOR`].
pub fn slice_len(cols: u32, m: u32) -> u64 {
    (u64::from(m) * u64::from(cols)).next_multiple_of(u64::from(VECTOR))
}

/// [`slice_len`] computed in the kernel from the run-time `m`.
fn slice_stride(k: &mut KernelBuilder, cols: u32, m: Reg<U32>) -> Reg<U32> {
    let len = k.mul_lo(m, cols);
    let padded = k.add(len, VECTOR - 1);
    k.and(padded, !(VECTOR - 1))
}

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
    (name, output): (&str, &str),
    cols: u32,
) -> KernelBuilder {
    let mut k = KernelBuilder::new(name, arch);
    k.require_block([THREADS, 1, 1]);
    declare_index_bound(&mut k, &INDEX_BOUND);
    let partials = k.param_ptr::<F32>("partials");
    let out = k.param_ptr::<T>(output);
    let m = k.param::<U32>("m");
    let slices = k.param::<U32>("slices");
    let (partials, out) = (k.global_ptr(partials), k.global_ptr(out));
    let (m, slices) = (k.load_param(m), k.load_param(slices));
    let len = k.mul_lo(m, cols);
    let stride = slice_stride(&mut k, cols, m);
    let group = k.global_index_x();
    let first = k.shl(group, VECTOR.trailing_zeros());
    let last = k.add(first, VECTOR - 1);
    let whole = k.setp_lt(last, len);
    k.if_else(
        whole,
        |k| {
            k.comment("four elements: each slice's by one vector load, in order");
            let sum = [0.0f32; VECTOR as usize].map(|zero| k.var::<F32>(zero));
            k.for_range(0u32, slices, 1u32, |k, s| {
                let index = k.mad_lo(s, stride, first);
                let addr = k.elem_addr(partials, index);
                let parts = k.ld_global_v4::<F32>(addr, 0, true);
                for (total, part) in sum.into_iter().zip(parts) {
                    k.add_into(total, total, part);
                }
            });
            let rounded = sum.map(|total| k.from_f32::<T>(total));
            let addr = k.elem_addr(out, first);
            k.st_global_v4(addr, 0, rounded);
        },
        |k| {
            k.comment("the ragged tail: element by element");
            for q in 0..VECTOR - 1 {
                let e = k.add(first, q);
                let exists = k.setp_lt(e, len);
                k.if_then(exists, |k| {
                    let total = k.var::<F32>(0.0f32);
                    k.for_range(0u32, slices, 1u32, |k, s| {
                        let index = k.mad_lo(s, stride, e);
                        let addr = k.elem_addr(partials, index);
                        let part = k.ld_global_nc::<F32>(addr, 0);
                        k.add_into(total, total, part);
                    });
                    let rounded = k.from_f32::<T>(total);
                    let addr = k.elem_addr(out, e);
                    k.st_global(addr, 0, rounded);
                });
            }
        },
    );
    k
}
