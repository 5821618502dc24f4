//! Where each element of the two operand tiles lives in global memory, per [`Pass`]: the
//! coordinate of a tile row (fixed along the whole reduction), the coordinate of a reduction
//! index, and how the two combine into an element index and an in-bounds predicate. The
//! gathers ([`super::gather`]) decide which thread computes which of them, and how often.
//!
//! | pass | A row / B row | reduction index | A element | B element |
//! |---|---|---|---|---|
//! | forward | pixel `m` / out channel `o` | `(ci, kh, kw)` | `x` window | `w[g·Og + o, k]` |
//! | backward-data | input pixel `(h, w)` / in channel `c` | `(o, kh, kw)` | `gy` at the tap's output | `w[g·Og + o, c, kh, kw]` |
//! | backward-filter | out channel `o` / filter column `(ci, kh, kw)` | pixel `m` | `gy[n, g·Og + o, oh, ow]` | `x` window |
//!
//! Index orders follow the weight's memory order: a filter column `(ci, kh, kw)` is
//! `ci·KH·KW + kh·KW + kw` in NCHW and `(kh·KW + kw)·Cg + ci` in NHWC (weight `[C_out, KH,
//! KW, Cg]`); backward-data's `(o, kh, kw)` is `o·KH·KW + kh·KW + kw` in NCHW and
//! `(kh·KW + kw)·Og + o` in NHWC, so that there consecutive reduction indices are
//! consecutive channels of one `gy` pixel (16-byte chunks). In NHWC every activation
//! position `p` of `x`/`gy` is `p·C + channel`.

use super::super::common::ConvElem;
use super::super::common::{div_const, output_coord, rem_const};
use super::{Conv, Pass};
use crate::builder::{KernelBuilder, Pred, Reg, Val, U32};
use crate::templates::conv::Layout;
use crate::templates::warp_mma::TileElem;

/// Which operand tile (the tile's own names).
pub(super) use crate::templates::warp_mma::Side;

/// The part of an element's address one tile row, or one reduction index, fixes.
#[derive(Clone, Copy)]
pub(super) struct Coord {
    /// Its share of the element index.
    pub base: Reg<U32>,
    /// The row (reduction index) exists.
    pub ok: Pred,
    /// Its share of a 2-D position (see [`Conv::element`]), where the element has one.
    pub at: Option<(Reg<U32>, Reg<U32>)>,
}

impl<T: ConvElem + TileElem> Conv<T> {
    /// The coordinate of tile row `row` of `side`:
    /// - forward A, pixel `m = block_m + row`: base the image's (and group's) first element
    ///   (NCHW `(n·C_in + g·Cg)·H·W`, NHWC `n·H·W·C_in + g·Cg`), at the window's top-left
    ///   ([`Self::window_origin`]);
    /// - backward-data A, input pixel `(h, w)` of the block's image: base the image's (and
    ///   group's) first `gy` element (NCHW `(n·C_out + g·Og)·OH·OW`, NHWC `n·OH·OW·C_out +
    ///   g·Og`), at `(h, w)`;
    /// - backward-filter A, out channel `o`: base NCHW `(g·Og + o)·OH·OW`, NHWC `g·Og + o`;
    /// - forward B, out channel `o`: base `(g·Og + o)·K`;
    /// - backward-data B, in channel `c`: base NCHW `(g·Og·Cg + c)·KH·KW`, NHWC
    ///   `g·Og·Cg·KH·KW + c`;
    /// - backward-filter B, filter column `f = (ci, kh, kw)`: base NCHW `(g·Cg + ci)·H·W`,
    ///   NHWC `g·Cg + ci`, at `(kh·DH, kw·DW)`.
    pub(super) fn row_coord(&self, k: &mut KernelBuilder, side: Side, row: Reg<U32>) -> Coord {
        let p = &self.p;
        let block = match side {
            Side::A => self.block_m,
            Side::B => self.block_n,
        };
        let r = k.add(block, row);
        let len: Val<U32> = match side {
            Side::A => self.m_len,
            Side::B => self.n_len().into(),
        };
        let ok = k.setp_lt(r, len);
        let (base, at) = match (self.pass, side) {
            (Pass::Forward, Side::A) => {
                let (image, origin) = self.window_origin(k, r);
                let hw = k.mul_lo(self.d.h, self.d.w);
                let first_channel = k.mul_lo(self.group, p.cg);
                let base = match self.layout {
                    Layout::Nchw => {
                        let plane = k.mad_lo(image, p.c_in, first_channel);
                        k.mul_lo(plane, hw)
                    }
                    Layout::Nhwc => {
                        let image_start = k.mul_lo(image, hw);
                        k.mad_lo(image_start, p.c_in, first_channel)
                    }
                };
                (base, Some(origin))
            }
            (Pass::BackwardData, Side::A) => {
                let (h, w) = self.d.w_div.divmod(k, r);
                let image = self.image.expect("backward-data blocks have an image");
                let first_channel = k.mul_lo(self.group, p.og);
                let base = match self.layout {
                    Layout::Nchw => {
                        let plane = k.mad_lo(image, p.c_out, first_channel);
                        k.mul_lo(plane, self.d.ohw)
                    }
                    Layout::Nhwc => {
                        let image_start = k.mul_lo(image, self.d.ohw);
                        k.mad_lo(image_start, p.c_out, first_channel)
                    }
                };
                (base, Some((h, w)))
            }
            (Pass::BackwardFilter, Side::A) => {
                let channel = k.mad_lo(self.group, p.og, r);
                match self.layout {
                    Layout::Nchw => (k.mul_lo(channel, self.d.ohw), None),
                    Layout::Nhwc => (channel, None),
                }
            }
            (Pass::Forward, Side::B) => {
                let channel = k.mad_lo(self.group, p.og, r);
                (k.mul_lo(channel, p.filter_len()), None)
            }
            (Pass::BackwardData, Side::B) => match self.layout {
                Layout::Nchw => {
                    let filter = k.mad_lo(self.group, p.og * p.cg, r);
                    (k.mul_lo(filter, p.taps), None)
                }
                Layout::Nhwc => (k.mad_lo(self.group, p.og * p.filter_len(), r), None),
            },
            (Pass::BackwardFilter, Side::B) => {
                let (ci, tap) = self.filter_column(k, r);
                let kh = div_const(k, tap, p.kw);
                let kw = rem_const(k, tap, p.kw);
                let channel = k.mad_lo(self.group, p.cg, ci);
                let base = match self.layout {
                    Layout::Nchw => {
                        let hw = k.mul_lo(self.d.h, self.d.w);
                        k.mul_lo(channel, hw)
                    }
                    Layout::Nhwc => channel,
                };
                let dh = k.mul_lo(kh, p.dh);
                let dw = k.mul_lo(kw, p.dw);
                (base, Some((dh, dw)))
            }
        };
        Coord { base, ok, at }
    }

    /// The coordinate of reduction index `kk` for `side`:
    /// - forward A, `kk = (ci, kh, kw)` in the weight's order (`ci·KH·KW + kh·KW + kw` for
    ///   NCHW, `(kh·KW + kw)·Cg + ci` for NHWC): base NCHW `ci·H·W`, NHWC `ci`, at
    ///   `(kh·DH, kw·DW)`;
    /// - forward B: base `kk`;
    /// - backward-data A, `kk = (o, kh, kw)`: base NCHW `o·OH·OW`, NHWC `o`, at `(kh, kw)`;
    /// - backward-data B: base NCHW `o·Cg·KH·KW + kh·KW + kw`, NHWC `(o·KH·KW + kh·KW +
    ///   kw)·Cg`;
    /// - backward-filter A, pixel `kk = m` → `(n, p)`: base NCHW `n·C_out·OH·OW + p`, NHWC
    ///   `m·C_out`;
    /// - backward-filter B, pixel `m`: base `n·C_in·H·W`, at the window's top-left
    ///   ([`Self::window_origin`]).
    pub(super) fn column_coord(&self, k: &mut KernelBuilder, side: Side, kk: Reg<U32>) -> Coord {
        let p = &self.p;
        let ok = k.setp_lt(kk, self.reduction);
        let (base, at) = match (self.pass, side) {
            (Pass::Forward, Side::A) => {
                let (ci, tap) = self.filter_column(k, kk);
                let kh = div_const(k, tap, p.kw);
                let kw = rem_const(k, tap, p.kw);
                let base = match self.layout {
                    Layout::Nchw => {
                        let hw = k.mul_lo(self.d.h, self.d.w);
                        k.mul_lo(ci, hw)
                    }
                    Layout::Nhwc => ci,
                };
                let dh = k.mul_lo(kh, p.dh);
                let dw = k.mul_lo(kw, p.dw);
                (base, Some((dh, dw)))
            }
            (Pass::Forward, Side::B) => (kk, None),
            (Pass::BackwardData, Side::A) => {
                let (o, tap) = self.data_column(k, kk);
                let kh = div_const(k, tap, p.kw);
                let kw = rem_const(k, tap, p.kw);
                let base = match self.layout {
                    Layout::Nchw => k.mul_lo(o, self.d.ohw),
                    Layout::Nhwc => o,
                };
                (base, Some((kh, kw)))
            }
            (Pass::BackwardData, Side::B) => {
                let (o, tap) = self.data_column(k, kk);
                let base = match self.layout {
                    Layout::Nchw => k.mad_lo(o, p.filter_len(), tap),
                    Layout::Nhwc => {
                        let filter_tap = k.mad_lo(o, p.taps, tap);
                        k.mul_lo(filter_tap, p.cg)
                    }
                };
                (base, None)
            }
            (Pass::BackwardFilter, Side::A) => match self.layout {
                Layout::Nchw => {
                    let (image, pix) = self.d.ohw_div.divmod(k, kk);
                    let plane = k.mul_lo(image, p.c_out);
                    (k.mad_lo(plane, self.d.ohw, pix), None)
                }
                Layout::Nhwc => (k.mul_lo(kk, p.c_out), None),
            },
            (Pass::BackwardFilter, Side::B) => {
                let (image, origin) = self.window_origin(k, kk);
                let hw = k.mul_lo(self.d.h, self.d.w);
                let base = match self.layout {
                    Layout::Nchw => {
                        let plane = k.mul_lo(image, p.c_in);
                        k.mul_lo(plane, hw)
                    }
                    Layout::Nhwc => {
                        let image_start = k.mul_lo(image, hw);
                        k.mul_lo(image_start, p.c_in)
                    }
                };
                (base, Some(origin))
            }
        };
        Coord { base, ok, at }
    }

    /// Filter column `f` (forward's reduction index, backward-filter's B row) → `(ci, tap)`
    /// in the weight's order: `f = ci·KH·KW + tap` (NCHW), `f = tap·Cg + ci` (NHWC).
    fn filter_column(&self, k: &mut KernelBuilder, f: Reg<U32>) -> (Reg<U32>, Reg<U32>) {
        let p = &self.p;
        match self.layout {
            Layout::Nchw => (div_const(k, f, p.taps), rem_const(k, f, p.taps)),
            Layout::Nhwc => (rem_const(k, f, p.cg), div_const(k, f, p.cg)),
        }
    }

    /// Backward-data reduction index `kk` → `(o, tap)`: `kk = o·KH·KW + tap` (NCHW, the
    /// weight's order), `kk = tap·Og + o` (NHWC: consecutive `kk` are consecutive channels of
    /// one `gy` pixel).
    fn data_column(&self, k: &mut KernelBuilder, kk: Reg<U32>) -> (Reg<U32>, Reg<U32>) {
        let p = &self.p;
        match self.layout {
            Layout::Nchw => (div_const(k, kk, p.taps), rem_const(k, kk, p.taps)),
            Layout::Nhwc => (rem_const(k, kk, p.og), div_const(k, kk, p.og)),
        }
    }

    /// Output pixel `m = (n·OH + oh)·OW + ow` → its image `n` and the top-left input position
    /// of its window, `(oh·SH − PH, ow·SW − PW)` (wrapping below zero, so one unsigned
    /// compare checks both ends).
    fn window_origin(
        &self,
        k: &mut KernelBuilder,
        m: Reg<U32>,
    ) -> (Reg<U32>, (Reg<U32>, Reg<U32>)) {
        let p = &self.p;
        let (image, pix) = self.d.ohw_div.divmod(k, m);
        let (oh, ow) = self.d.ow_div.divmod(k, pix);
        let stride = |k: &mut KernelBuilder, at: Reg<U32>, s: u32| match s {
            1 => at,
            _ => k.mul_lo(at, s),
        };
        let ih = stride(k, oh, p.sh);
        let ih = k.sub(ih, p.ph);
        let iw = stride(k, ow, p.sw);
        let iw = k.sub(iw, p.pw);
        (image, (ih, iw))
    }

    /// The element index and in-bounds predicate of `(row, col)` of `side`:
    /// - an input window (forward A, backward-filter B): `(ih, iw) = row.at + col.at` inside
    ///   `H × W`, index `row.base + col.base + (ih·W + iw)·s` with `s = C_in` for NHWC, else 1;
    /// - backward-data A: the tap reads output `(oh, ow)` when the input pixel lies on its
    ///   stride grid and inside the output ([`output_coord`]), index `row.base + col.base +
    ///   (oh·OW + ow)·s` with `s = C_out` for NHWC, else 1;
    /// - the rest: `row.base + col.base`.
    pub(super) fn element(
        &self,
        k: &mut KernelBuilder,
        side: Side,
        row: &Coord,
        col: &Coord,
    ) -> (Reg<U32>, Pred) {
        let p = &self.p;
        let ok = k.and_pred(row.ok, col.ok);
        let base = k.add(row.base, col.base);
        let (Some((r0, r1)), Some((c0, c1))) = (row.at, col.at) else {
            return (base, ok);
        };
        let (position, ok) = if self.pass == Pass::BackwardData {
            let (oh, oh_ok) = output_coord(k, r0, c0, p.ph, p.dh, p.sh, self.d.oh);
            let (ow, ow_ok) = output_coord(k, r1, c1, p.pw, p.dw, p.sw, self.d.ow);
            let ok = k.and_pred(ok, oh_ok);
            let ok = k.and_pred(ok, ow_ok);
            (k.mad_lo(oh, self.d.ow, ow), ok)
        } else {
            let ih = k.add(r0, c0);
            let iw = k.add(r1, c1);
            let h_ok = k.setp_lt(ih, self.d.h);
            let ok = k.and_pred(ok, h_ok);
            let w_ok = k.setp_lt(iw, self.d.w);
            let ok = k.and_pred(ok, w_ok);
            (k.mad_lo(ih, self.d.w, iw), ok)
        };
        // NHWC: a position holds all channels of the tensor read (`gy` for backward-data's
        // A, `x` for the windows).
        let index = match (self.layout, self.pass, side) {
            (Layout::Nchw, ..) => k.add(position, base),
            (Layout::Nhwc, Pass::BackwardData, Side::A) => k.mad_lo(position, p.c_out, base),
            (Layout::Nhwc, ..) => k.mad_lo(position, p.c_in, base),
        };
        (index, ok)
    }
}
