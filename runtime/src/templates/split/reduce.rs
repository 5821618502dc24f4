//! The second pass of every split reduction: `partials` holds `S` slices' unrounded sums of the
//! same `len` outputs, slice `s`'s part starting at element `s · stride`; the entry
//! `(partials, out, [m,] slices)` computes `out[e] = round(Σ_{s = 0..S} partials[s · stride +
//! e])`, the slices added in order from 0 in the accumulation type, rounded once to the
//! storage type (round to nearest even). A fixed order and no atomics: the same bits on every
//! run and under any block order.
//!
//! What differs between the families is the [`Extent`]:
//!
//! - [`Extent::Fixed`] (conv): `len` known at compile time, `stride = len`, one thread per
//!   output, grid `⌈len / 256⌉`.
//! - [`Extent::Rows`] (NF4): `len = m · cols` with a run-time `m` (a parameter between the
//!   output and `slices`), `stride =` [`slice_len`] (`len` rounded up to a multiple of
//!   [`VECTOR`], so every part starts 16 bytes aligned). Thread `v` owns elements
//!   `4v .. 4v + 4`: when all four exist it reads each slice's four with one
//!   `ld.global.nc.v4` (a warp: 512 consecutive bytes of f32, whole sectors) and stores them
//!   with one vector store; the one thread past the last whole group reads and stores its 1
//!   to 3 elements one by one (the padding is never written by the slices, so never read).
//!   Grid `⌈⌈len / 4⌉ / 256⌉`.

use crate::arch::Arch;
use crate::builder::{Float, GlobalPtr, KernelBuilder, Reg, Val, U32};
use crate::lint::address::{declare_index_bound, IndexBound};

/// Threads per block of every reduce entry.
pub const THREADS: u32 = 256;
/// Elements of the output per thread of a reduce over a run-time number of rows (one 16-byte
/// f32 load per slice).
pub const VECTOR: u32 = 4;

/// Elements between two slices' parts of a workspace of `[m, cols]` parts: `m · cols` rounded
/// up to [`VECTOR`].
pub fn slice_len(cols: u32, m: u32) -> u64 {
    (u64::from(m) * u64::from(cols)).next_multiple_of(u64::from(VECTOR))
}

/// [`slice_len`] computed in the kernel from the run-time `m`.
pub(crate) fn slice_stride(k: &mut KernelBuilder, cols: u32, m: Reg<U32>) -> Reg<U32> {
    let len = k.mul_lo(m, cols);
    let padded = k.add(len, VECTOR - 1);
    k.and(padded, !(VECTOR - 1))
}

/// How many outputs a reduce entry sums and how its workspace is laid out (module docs).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Extent {
    /// `len` outputs fixed at compile time, parts `len` apart, one output per thread.
    Fixed(u32),
    /// `m · cols` outputs for the run-time parameter `m`, parts [`slice_len`] apart,
    /// [`VECTOR`] outputs per thread.
    Rows { cols: u32 },
}

/// One reduce entry: its name, its output parameter, its [`Extent`], and the index bound its
/// family proves for it.
pub(crate) struct SplitReduce {
    pub entry: &'static str,
    pub output: &'static str,
    pub extent: Extent,
    pub bound: &'static IndexBound,
}

/// The entry's pointers and slice count, and how an accumulated `A` rounds to `T`.
struct Io<A: Float, T: Float> {
    partials: GlobalPtr<A>,
    out: GlobalPtr<T>,
    slices: Reg<U32>,
    round: fn(&mut KernelBuilder, Reg<A>) -> Reg<T>,
}

impl SplitReduce {
    /// Builds `entry(partials, output, [m,] slices)`: outputs of `T` from partials of `A`,
    /// each sum rounded once by `round` (module docs).
    pub fn build<A: Float, T: Float>(
        &self,
        arch: Arch,
        round: fn(&mut KernelBuilder, Reg<A>) -> Reg<T>,
    ) -> KernelBuilder {
        let mut k = KernelBuilder::new(self.entry, arch);
        k.require_block([THREADS, 1, 1]);
        declare_index_bound(&mut k, self.bound);
        let partials = k.param_ptr::<A>("partials");
        let out = k.param_ptr::<T>(self.output);
        let m = matches!(self.extent, Extent::Rows { .. }).then(|| k.param::<U32>("m"));
        let slices = k.param::<U32>("slices");
        let (partials, out) = (k.global_ptr(partials), k.global_ptr(out));
        let m = m.map(|m| k.load_param(m));
        let io = Io {
            partials,
            out,
            slices: k.load_param(slices),
            round,
        };
        match self.extent {
            Extent::Fixed(len) => k.for_global_index(len, |k, e| {
                k.comment("add the slices in order, round once");
                io.sum_one(k, len.into(), e);
            }),
            Extent::Rows { cols } => io.sum_rows(&mut k, cols, m.expect("Rows declares m")),
        }
        k
    }
}

impl<A: Float, T: Float> Io<A, T> {
    /// `out[e] = round(Σ_s partials[s · stride + e])`.
    fn sum_one(&self, k: &mut KernelBuilder, stride: Val<U32>, e: Reg<U32>) {
        let total = k.zero::<A>();
        k.for_range(0u32, self.slices, 1u32, |k, s| {
            let at = k.mad_lo(s, stride, e);
            let at = k.elem_addr(self.partials, at);
            let part = k.ld_global_nc::<A>(at, 0);
            k.add_into(total, total, part);
        });
        let rounded = (self.round)(k, total);
        let at = k.elem_addr(self.out, e);
        k.st_global(at, 0, rounded);
    }

    /// The [`Extent::Rows`] body: [`VECTOR`] outputs per thread, the ragged tail one by one.
    fn sum_rows(&self, k: &mut KernelBuilder, cols: u32, m: Reg<U32>) {
        let len = k.mul_lo(m, cols);
        let stride = slice_stride(k, cols, m);
        let group = k.global_index_x();
        let first = k.shl(group, VECTOR.trailing_zeros());
        let last = k.add(first, VECTOR - 1);
        let whole = k.setp_lt(last, len);
        k.if_else(
            whole,
            |k| {
                k.comment("four elements: each slice's by one vector load, in order");
                let sum = [(); VECTOR as usize].map(|()| k.zero::<A>());
                k.for_range(0u32, self.slices, 1u32, |k, s| {
                    let index = k.mad_lo(s, stride, first);
                    let addr = k.elem_addr(self.partials, index);
                    let parts = k.ld_global_v4::<A>(addr, 0, true);
                    for (total, part) in sum.into_iter().zip(parts) {
                        k.add_into(total, total, part);
                    }
                });
                let rounded = sum.map(|total| (self.round)(k, total));
                let addr = k.elem_addr(self.out, first);
                k.st_global_v4(addr, 0, rounded);
            },
            |k| {
                k.comment("the ragged tail: element by element");
                for q in 0..VECTOR - 1 {
                    let e = k.add(first, q);
                    let exists = k.setp_lt(e, len);
                    k.if_then(exists, |k| self.sum_one(k, stride.into(), e));
                }
            },
        );
    }
}
