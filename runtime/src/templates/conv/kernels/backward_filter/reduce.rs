//! The second pass of every split reduction of the backward convolution (project issue 11):
//! `partials` holds `S` slices' sums of the same `len` outputs, slice `s`'s part at
//! `s·len .. (s + 1)·len`, unrounded in the accumulation type (f32; f64 for f64); one thread
//! per output `e` computes `out[e] = round(Σ_{s = 0..S} partials[s·len + e])`, the slices
//! added in order from 0, rounded once to the storage type (round to nearest even).
//!
//! Each entry of this shape is built here and nowhere else: `conv2d_bwd_filter_reduce`
//! (`len = C_out·Cg·KH·KW`) after the tensor-core split (f32 partials) and after the CUDA-core
//! split (partials of the accumulation type), and `conv2d_bwd_bias_reduce` (`len = C_out`)
//! after the bias gradient's split. A fixed order and no atomics: the same bits on every run
//! and under any block order.

use super::super::common::{conv_kernel, ConvElem};
use crate::arch::Arch;
use crate::builder::{KernelBuilder, U32};
use crate::templates::conv::Conv2dConfig;

/// The weight gradient's reduce entry name.
pub const ENTRY_REDUCE: &str = "conv2d_bwd_filter_reduce";
/// Threads per block of every reduce entry (grid `⌈len / 256⌉`).
pub const REDUCE_THREADS: u32 = 256;

/// One reduce entry: its name, its output parameter and how many outputs it sums.
pub(in crate::templates::conv::kernels) struct Reduce {
    pub entry: &'static str,
    pub output: &'static str,
    pub len: u32,
}

impl Reduce {
    /// `conv2d_bwd_filter_reduce(partials, dw, slices)` over the `C_out·Cg·KH·KW` weights.
    pub fn weights(cfg: &Conv2dConfig) -> Self {
        Self {
            entry: ENTRY_REDUCE,
            output: "dw",
            len: u32::try_from(cfg.weight_elements()).expect("validate bounds the weight"),
        }
    }

    /// Builds `entry(partials, output, slices)`: `len` outputs of `T` from partials of
    /// `T::Acc` (module docs).
    pub fn build<T: ConvElem>(&self, arch: Arch) -> KernelBuilder {
        let mut k = conv_kernel(self.entry, arch);
        k.require_block([REDUCE_THREADS, 1, 1]);
        let partials = k.param_ptr::<T::Acc>("partials");
        let out = k.param_ptr::<T>(self.output);
        let slices = k.param::<U32>("slices");
        let (partials, out) = (k.global_ptr(partials), k.global_ptr(out));
        let slices = k.load_param(slices);
        let len = self.len;
        k.for_global_index(len, |k, e| {
            k.comment("add the slices in order, round once");
            let total = k.zero::<T::Acc>();
            k.for_range(0u32, slices, 1u32, |k, s| {
                let at = k.mad_lo(s, len, e);
                let at = k.elem_addr(partials, at);
                let part = k.ld_global_nc::<T::Acc>(at, 0);
                k.add_into(total, total, part);
            });
            let rounded = T::narrow(k, total);
            let at = k.elem_addr(out, e);
            k.st_global(at, 0, rounded);
        });
        k
    }
}
