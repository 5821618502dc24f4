//! Backward-data's operands: `dx_g[m, c] = Σ_k Gy_g[m, k] · Wᵀ_g[c, k]` over the input
//! pixels `m` of one image and the reduction `k = (kh·KW + kw)·Og + o`, with
//! `Gy_g[m, k] = gy[n, oh, ow, g·Og + o]` where `oh·SH = ih + PH − kh·DH` and `ow·SW = iw +
//! PW − kw·DW` exactly and inside the output (0 otherwise), and
//! `Wᵀ_g[c, k] = w[g·Og + o, kh, kw, c]`.
//!
//! - [`GradientRows`]: like the forward's pixel rows ([`super::gather`]): chunks of `E`
//!   consecutive `o` of one tap, one 16-byte load where `Og` is a multiple of `E`.
//! - [`FilterColumns`]: lane → channel row `c = t mod 64`, groups `⌊t / 64⌋ + 2i` of the
//!   shared row: a warp request reads 32 consecutive `c` of one `(o, kh, kw)` (contiguous in
//!   the filter), each thread loading the group's 4 f32 (2 f64) reduction indices, `KH·KW·Cg`
//!   elements apart when the group stays within one tap (`Og` a multiple of the group), and
//!   storing them with one 16-byte `st.shared` (8 consecutive rows per quarter-warp: 8
//!   different swizzles, no conflict).

use super::super::common::{
    div_const, load_or_zero, output_coord, rem_const, ConvElem, Dims, Problem,
};
use super::super::vector::VectorElem;
use super::gather::Share;
use super::tile::{group_len, write_group, Block, SwizzledRow, THREADS, TILE_M, TILE_N};
use crate::builder::{GlobalPtr, KernelBuilder, Pred, Reg, SharedArr, U32};

/// One input pixel row the thread stages: `(ih, iw)` of pixel `m0 + row` of the image.
struct InputPixel {
    ok: Pred,
    ih: Reg<U32>,
    iw: Reg<U32>,
}

/// Reduction index `kk` of the gradient operand.
struct GradientTap {
    ok: Pred,
    kh: Reg<U32>,
    kw: Reg<U32>,
    /// `g·Og + o`.
    channel: Reg<U32>,
}

/// The gradient (A) operand's staging.
pub(super) struct GradientRows {
    share: Share,
    rows: Vec<InputPixel>,
    /// `n·OH`: the image's first output row.
    image_row: Reg<U32>,
    /// `g·Og`.
    first_channel: Reg<U32>,
}

impl GradientRows {
    pub fn locate<T: VectorElem>(
        k: &mut KernelBuilder,
        p: &Problem,
        d: &Dims,
        (block, image): (&Block, Reg<U32>),
        tile: SharedArr<T::Acc>,
    ) -> Self {
        k.comment("the thread's staged input pixel rows");
        let share = Share::new::<T>(k, tile, block.tid, TILE_M);
        let rows = share
            .pixels(k, block)
            .into_iter()
            .map(|(m, ok)| {
                let (ih, iw) = d.w_div.divmod(k, m);
                InputPixel { ok, ih, iw }
            })
            .collect();
        let image_row = k.mul_lo(image, d.oh);
        let first_channel = k.mul_lo(block.group, p.og);
        Self {
            share,
            rows,
            image_row,
            first_channel,
        }
    }

    /// `tile[row, kk] = Gy_g[m0 + row, k0 + kk]`.
    pub fn stage<T: VectorElem>(
        &self,
        k: &mut KernelBuilder,
        p: &Problem,
        d: &Dims,
        gy: GlobalPtr<T>,
        k0: Reg<U32>,
    ) {
        k.comment("stage the output-gradient tile");
        let vector = p.og.is_multiple_of(T::CHUNK);
        let depth = p.taps * p.og;
        let decode = |k: &mut KernelBuilder, kk: Reg<U32>| {
            let ok = k.setp_lt(kk, depth);
            let tap = div_const(k, kk, p.og);
            let o = rem_const(k, kk, p.og);
            GradientTap {
                ok,
                kh: div_const(k, tap, p.kw),
                kw: rem_const(k, tap, p.kw),
                channel: k.add(self.first_channel, o),
            }
        };
        let locate = |k: &mut KernelBuilder, tap: &GradientTap, row: usize| {
            let pixel = &self.rows[row];
            let (oh, h_ok) = output_coord(k, pixel.ih, tap.kh, p.ph, p.dh, p.sh, d.oh);
            let (ow, w_ok) = output_coord(k, pixel.iw, tap.kw, p.pw, p.dw, p.sw, d.ow);
            let ok = k.and_pred(pixel.ok, tap.ok);
            let ok = k.and_pred(ok, h_ok);
            let ok = k.and_pred(ok, w_ok);
            let out_row = k.add(self.image_row, oh);
            let position = k.mad_lo(out_row, d.ow, ow);
            (k.mad_lo(position, p.c_out, tap.channel), ok)
        };
        let values = self.share.gather(k, gy, k0, vector, decode, locate);
        self.share.write(k, &values);
    }
}

/// Groups of a shared row each thread stages.
const GROUPS_PER_THREAD: u32 = TILE_N * 8 / THREADS;

/// The transposed filter (B) operand's staging: channel row `c = t mod 64`.
pub(super) struct FilterColumns {
    /// `n0 + c < Cg`.
    row_ok: Pred,
    /// `g·Og·KH·KW·Cg + n0 + c`: the element of `(o, kh, kw) = 0` for the row.
    start: Reg<U32>,
    /// The thread's groups `⌊t / 64⌋ + 2i` and their shared addresses.
    groups: Vec<(Reg<U32>, Reg<U32>)>,
}

impl FilterColumns {
    pub fn locate<T: ConvElem>(
        k: &mut KernelBuilder,
        p: &Problem,
        block: &Block,
        tile: SharedArr<T::Acc>,
    ) -> Self {
        k.comment("the thread's staged filter columns");
        let row = k.and(block.tid, TILE_N - 1);
        let local = k.add(block.n0, row);
        let row_ok = k.setp_lt(local, p.cg);
        let group_filters = k.mul_lo(block.group, p.og * p.taps * p.cg);
        let start = k.add(group_filters, local);
        let first_group = k.shr(block.tid, TILE_N.trailing_zeros());
        let shared_row = SwizzledRow::new(k, tile, row);
        let groups = (0..GROUPS_PER_THREAD)
            .map(|i| {
                let q = k.add(first_group, i * (THREADS / TILE_N));
                let addr = shared_row.group(k, q);
                (q, addr)
            })
            .collect();
        Self {
            row_ok,
            start,
            groups,
        }
    }

    /// `tile[c, kk] = Wᵀ_g[n0 + c, k0 + kk]`.
    pub fn stage<T: ConvElem>(
        &self,
        k: &mut KernelBuilder,
        p: &Problem,
        w: GlobalPtr<T>,
        k0: Reg<U32>,
    ) {
        k.comment("stage the transposed filter tile");
        let len = group_len::<T::Acc>();
        let depth = p.taps * p.og;
        let filter_len = p.taps * p.cg;
        // Element `(o, tap)` of the row: `start + o·KH·KW·Cg + tap·Cg`.
        let locate = |k: &mut KernelBuilder, kk: Reg<U32>| {
            let k_ok = k.setp_lt(kk, depth);
            let ok = k.and_pred(k_ok, self.row_ok);
            let tap = div_const(k, kk, p.og);
            let o = rem_const(k, kk, p.og);
            let index = k.mad_lo(o, filter_len, self.start);
            (k.mad_lo(tap, p.cg, index), ok)
        };
        for &(q, addr) in &self.groups {
            let first = k.mad_lo(q, len, k0);
            let values: Vec<Reg<T::Acc>> = if p.og.is_multiple_of(len) {
                // The group's indices are consecutive `o` of one tap: one decode, the
                // elements `KH·KW·Cg` apart at immediate offsets.
                let (index, ok) = locate(k, first);
                let values: Vec<Reg<T::Acc>> = (0..len).map(|_| k.zero()).collect();
                k.if_then(ok, |k| {
                    let base = k.elem_addr(w, index);
                    for (e, &v) in (0u32..).zip(&values) {
                        let offset = e * filter_len * T::TYPE.bytes();
                        let raw = k.ld_global_nc::<T>(base, offset as i32);
                        let wide = T::widen(k, raw);
                        k.assign(v, wide);
                    }
                });
                values
            } else {
                (0..len)
                    .map(|e| {
                        let kk = k.add(first, e);
                        let (index, ok) = locate(k, kk);
                        load_or_zero::<T>(k, w, index, ok)
                    })
                    .collect()
            };
            write_group(k, addr, &values);
        }
    }
}
