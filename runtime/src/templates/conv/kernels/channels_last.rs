//! The layout pre-passes of the NCHW tensor-core passes over channels-last operands
//! (`conv2d_implicit_gemm_channels_last` and the two backward `…_channels_last` entries, as
//! cuDNN runs NCHW tensor-core convolutions), bit-exact copies:
//! - `conv2d_to_channels_last` writes `x [N, C_in, H·W]` as `[N, H·W, C_in]` (NHWC), so the implicit GEMM's A
//!   windows are 16-byte `cp.async` chunks of 8 consecutive channels instead of per-tap
//!   element gathers; `conv2d_gradient_to_channels_last` the same for `gy [N, C_out, OH·OW]`;
//! - `conv2d_filter_to_channels_last` writes `w [C_out, Cg, KH·KW]` as `[C_out, KH·KW, Cg]`
//!   (few taps per row: the square tile would leave most lanes idle, see [`build_filter`]).
//!
//! `conv2d_to_channels_last` ([`input`]) moves 8 × 8 blocks through registers: 16-byte loads
//! along the pixels where the rows allow, `prmt` regrouping, 16-byte stores of 8 channels.

mod input;

use super::common::{conv_kernel, div_const, rem_const, Problem};
use crate::arch::Arch;
use crate::builder::{KernelBuilder, Scalar};
use crate::templates::conv::Conv2dConfig;

pub(crate) use input::build;
pub use input::{InputTiling, ENTRY, ENTRY_GRADIENT, THREADS as INPUT_THREADS};

/// The filter transpose's entry name.
pub const ENTRY_FILTER: &str = "conv2d_filter_to_channels_last";
/// Threads per block of the filter transpose.
pub const FILTER_THREADS: u32 = 256;
/// Channels one block of the filter transpose moves.
pub const TILE: u32 = 32;

/// Builds `conv2d_filter_to_channels_last(w, dst)`: `dst[o][t][c] = w[o][c][t]` for the
/// `KH·KW = T` taps. Block [`FILTER_THREADS`] moves channels `32·ctaid.y ..` (at most 32) of
/// filter `o = ctaid.x`; grid `(C_out, ⌈Cg / 32⌉)`. Their `32·T` source elements are
/// contiguous: consecutive threads load consecutive elements (whole sectors) and stage
/// element `(c, t)` at `c·S + t` ([`filter_row`]: `S` halves an odd number of words), then
/// write each tap's run of up to 32 channels (64 bytes) with consecutive threads on
/// consecutive channels, whose reads `S` apart fall in 32 different banks.
pub(crate) fn build_filter<T: Scalar>(cfg: &Conv2dConfig, arch: Arch) -> KernelBuilder {
    assert_eq!(
        T::TYPE.bytes(),
        2,
        "the tile's bank layout assumes 2-byte elements"
    );
    let p = Problem::new(cfg);
    let taps = p.taps;
    let mut k = conv_kernel(ENTRY_FILTER, arch);
    k.require_block([FILTER_THREADS, 1, 1]);
    let src = k.param_ptr::<T>("w");
    let dst = k.param_ptr::<T>("dst");
    let (src, dst) = (k.global_ptr(src), k.global_ptr(dst));
    let row = filter_row(taps);
    let tile = k.shared_array::<T>("tile", TILE * row);
    let tid = k.tid_x();
    let o = k.ctaid_x();
    let by = k.ctaid_y();
    let c0 = k.mul_lo(by, TILE);
    let left = k.sub(p.cg, c0);
    let channels = k.min(left, TILE);
    let first = k.mad_lo(o, p.cg, c0);
    let first = k.mul_lo(first, taps);
    let len = k.mul_lo(channels, taps);

    k.comment("load: the block's channels x taps are contiguous; stage (c, t) at c*S + t");
    k.for_range(tid, len, FILTER_THREADS, |k, f| {
        let index = k.add(first, f);
        let addr = k.elem_addr(src, index);
        let v = k.ld_global_nc::<T>(addr, 0);
        let c = div_const(k, f, taps);
        let t = rem_const(k, f, taps);
        let at = k.mad_lo(c, row, t);
        let at = k.shared_elem(tile, at);
        k.st_shared(at, 0, v);
    });
    k.bar_sync();

    k.comment("store: each tap's run of channels, consecutive threads on consecutive channels");
    let out_len = k.mul_lo(taps, TILE);
    let plane = k.mul_lo(o, p.filter_len());
    k.for_range(tid, out_len, FILTER_THREADS, |k, g| {
        let t = k.shr(g, TILE.trailing_zeros());
        let c = k.and(g, TILE - 1);
        let ok = k.setp_lt(c, channels);
        k.if_then(ok, |k| {
            let at = k.mad_lo(c, row, t);
            let at = k.shared_elem(tile, at);
            let v = k.ld_shared::<T>(at, 0);
            let row = k.mad_lo(t, p.cg, plane);
            let index = k.add(row, c0);
            let index = k.add(index, c);
            let addr = k.elem_addr(dst, index);
            k.st_global(addr, 0, v);
        });
    });
    k
}

/// Halves per staged filter channel: `taps` rounded up to an even count whose words are odd,
/// so the same tap of 32 consecutive channels lies in 32 different banks.
const fn filter_row(taps: u32) -> u32 {
    let even = taps.next_multiple_of(2);
    if (even / 2) % 2 == 1 {
        even
    } else {
        even + 2
    }
}
