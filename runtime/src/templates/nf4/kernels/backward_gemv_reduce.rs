//! The second pass of the split backward GEMV (`super::backward_gemv::build_split`):
//! `nf4_backward_gemv_reduce(partials, g_a, m, slices)` computes
//! `G_A[e] = round(Σ_{s = 0..S} partials[s][e])` for the `m·k` elements `e` of `G_A`, the
//! slices added in order in f32 from 0, rounded once to the activation type (round to nearest
//! even): the same bits run to run and under any block order, no atomics.
//!
//! Workspace layout: slice `s`'s part `[m, k]` starts at element `s · stride`, `stride =`
//! [`slice_len`] (`m·k` rounded up to a multiple of [`VECTOR`]), so that every part starts
//! 16 bytes aligned. Thread `v` of the grid owns elements `4v .. 4v + 4`: when all four exist
//! it reads each slice's four with one `ld.global.nc.v4.f32` (a warp: 512 consecutive bytes,
//! whole sectors) and stores them with one vector store (16 bytes of f32, 8 of f16/bf16); the
//! one thread past the last whole group reads and stores its 1 to 3 elements one by one (the
//! padding is never written by the slices, so never read).

use super::{BACKWARD_GEMV_REDUCE_ENTRY, THREADS};
use crate::builder::{Float, KernelBuilder, Reg, F32, U32};
use crate::lint::address::declare_index_bound;
use crate::templates::nf4::{Nf4Config, INDEX_BOUND};

/// Elements of `G_A` per reduce thread (one 16-byte f32 load per slice).
pub const VECTOR: u32 = 4;

/// Elements between two slices' parts of the workspace: `m·k` rounded up to [`VECTOR`].
pub fn slice_len(cfg: &Nf4Config, m: u32) -> u64 {
    (u64::from(m) * u64::from(cfg.k)).next_multiple_of(u64::from(VECTOR))
}

/// [`slice_len`] computed in the kernel from the run-time `m`.
pub(super) fn slice_stride(k: &mut KernelBuilder, cfg: &Nf4Config, m: Reg<U32>) -> Reg<U32> {
    let len = k.mul_lo(m, cfg.k);
    let padded = k.add(len, VECTOR - 1);
    k.and(padded, !(VECTOR - 1))
}

/// Builds the reduce entry (module docs). Grid: `⌈⌈m·k / 4⌉ / 256⌉` blocks of 256 threads.
pub(super) fn build<T: Float>(cfg: &Nf4Config) -> KernelBuilder {
    let mut k = KernelBuilder::new(BACKWARD_GEMV_REDUCE_ENTRY, cfg.arch);
    k.require_block([THREADS, 1, 1]);
    declare_index_bound(&mut k, &INDEX_BOUND);
    let partials = k.param_ptr::<F32>("partials");
    let g_a = k.param_ptr::<T>("g_a");
    let m = k.param::<U32>("m");
    let slices = k.param::<U32>("slices");
    let (partials, g_a) = (k.global_ptr(partials), k.global_ptr(g_a));
    let (m, slices) = (k.load_param(m), k.load_param(slices));
    let len = k.mul_lo(m, cfg.k);
    let stride = slice_stride(&mut k, cfg, m);
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
            let out = sum.map(|total| k.from_f32::<T>(total));
            let addr = k.elem_addr(g_a, first);
            k.st_global_v4(addr, 0, out);
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
                    let out = k.from_f32::<T>(total);
                    let addr = k.elem_addr(g_a, e);
                    k.st_global(addr, 0, out);
                });
            }
        },
    );
    k
}
