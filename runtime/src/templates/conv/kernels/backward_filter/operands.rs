//! The two operands of group `g`'s weight-gradient GEMM `dw_g[o, f] = Σ_p Gy_g[o, p] ·
//! X_g[f, p]` over the pixels `p = (n·OH + oh)·OW + ow < N·OH·OW`:
//!
//! - [`Gradient`]: `Gy_g[o, p] = gy[n, g·Og + o, oh, ow]`, rows `o < Og`;
//! - [`Input`]: `X_g[f, p] = x[n, g·Cg + ci, oh·SH − PH + kh·DH, ow·SW − PW + kw·DW]` (0 in
//!   the padding), rows `f < Cg·KH·KW` in the layout's weight order: `(ci·KH + kh)·KW + kw`
//!   (NCHW `dw [C_out, Cg, KH, KW]`), `(kh·KW + kw)·Cg + ci` (NHWC `dw [C_out, KH, KW, Cg]`).
//!
//! Each decodes a row and a pixel apart and combines them into an element index and its
//! predicate ([`Operand::locate`]); which rows and pixels a thread stages is
//! [`super::staging`]'s business.

use super::super::common::{both_below, div_const, rem_const, window_origin, Dims, Problem};
use crate::builder::{KernelBuilder, Pred, Reg, U32};
use crate::templates::conv::Layout;

/// One operand: element `(row, p)` of a `rows() × N·OH·OW` matrix of group `g`.
pub(super) trait Operand {
    /// A decoded row.
    type Row;
    /// A decoded pixel.
    type Pixel;
    /// Whether `chunk` consecutive rows from a multiple of `chunk` are contiguous and
    /// 16-byte aligned in memory at every pixel (one vector load each).
    fn chunked(&self, chunk: u32) -> bool;
    /// Row `row` of the group (inside the operand when `row < rows`).
    fn row(&self, k: &mut KernelBuilder, row: Reg<U32>) -> Self::Row;
    /// Pixel `p` (inside when `p < N·OH·OW`).
    fn pixel(&self, k: &mut KernelBuilder, p: Reg<U32>) -> Self::Pixel;
    /// The element's index in its tensor, and whether it exists (0 where not).
    fn locate(
        &self,
        k: &mut KernelBuilder,
        row: &Self::Row,
        pixel: &Self::Pixel,
    ) -> (Reg<U32>, Pred);
}

/// A row or pixel whose element index is a sum of two parts.
pub(super) struct Offset {
    at: Reg<U32>,
    ok: Pred,
}

/// What both operands know: the problem, the shape, `N·OH·OW` and their tensor's first
/// channel of the group.
struct Frame {
    p: Problem,
    d: Dims,
    /// `g·Og` (gradient) or `g·Cg` (input).
    first_channel: Reg<U32>,
    pixels: Reg<U32>,
}

impl Frame {
    fn new(k: &mut KernelBuilder, p: &Problem, d: &Dims, group: Reg<U32>, per_group: u32) -> Self {
        Self {
            p: *p,
            d: *d,
            first_channel: k.mul_lo(group, per_group),
            pixels: k.mul_lo(d.batch, d.ohw),
        }
    }
}

/// `Gy_g`: NCHW `(n·C_out + g·Og + o)·OH·OW + pix`, NHWC `p·C_out + g·Og + o`.
pub(super) struct Gradient(Frame);

impl Gradient {
    pub fn new(k: &mut KernelBuilder, p: &Problem, d: &Dims, group: Reg<U32>) -> Self {
        Self(Frame::new(k, p, d, group, p.og))
    }
}

impl Operand for Gradient {
    type Row = Offset;
    type Pixel = Offset;

    fn chunked(&self, chunk: u32) -> bool {
        self.0.p.layout == Layout::Nhwc && self.0.p.og.is_multiple_of(chunk)
    }

    fn row(&self, k: &mut KernelBuilder, o: Reg<U32>) -> Offset {
        let ok = k.setp_lt(o, self.0.p.og);
        let channel = k.add(self.0.first_channel, o);
        let at = match self.0.p.layout {
            Layout::Nchw => k.mul_lo(channel, self.0.d.ohw),
            Layout::Nhwc => channel,
        };
        Offset { at, ok }
    }

    fn pixel(&self, k: &mut KernelBuilder, p: Reg<U32>) -> Offset {
        let ok = k.setp_lt(p, self.0.pixels);
        let at = match self.0.p.layout {
            Layout::Nchw => {
                let (n, pix) = self.0.d.ohw_div.divmod(k, p);
                let image = k.mul_lo(n, self.0.p.c_out);
                k.mad_lo(image, self.0.d.ohw, pix)
            }
            Layout::Nhwc => k.mul_lo(p, self.0.p.c_out),
        };
        Offset { at, ok }
    }

    fn locate(&self, k: &mut KernelBuilder, row: &Offset, pixel: &Offset) -> (Reg<U32>, Pred) {
        (k.add(row.at, pixel.at), k.and_pred(row.ok, pixel.ok))
    }
}

/// A filter row `f` of `X_g`: its tap offsets and input channel.
pub(super) struct FilterTap {
    ok: Pred,
    /// `kh·DH`, `kw·DW`.
    dh: Reg<U32>,
    dw: Reg<U32>,
    /// `g·Cg + ci`.
    channel: Reg<U32>,
}

/// A pixel of `X_g`: its image and the input position of its window's first tap.
pub(super) struct Window {
    ok: Pred,
    image: Reg<U32>,
    /// `oh·SH − PH`, `ow·SW − PW` (wrapping: above / left of the image is huge).
    ih0: Reg<U32>,
    iw0: Reg<U32>,
}

/// `X_g`: NCHW `((n·C_in + c)·H + ih)·W + iw`, NHWC `((n·H + ih)·W + iw)·C_in + c`.
pub(super) struct Input(Frame);

impl Input {
    pub fn new(k: &mut KernelBuilder, p: &Problem, d: &Dims, group: Reg<U32>) -> Self {
        Self(Frame::new(k, p, d, group, p.cg))
    }
}

impl Operand for Input {
    type Row = FilterTap;
    type Pixel = Window;

    fn chunked(&self, chunk: u32) -> bool {
        self.0.p.layout == Layout::Nhwc && self.0.p.cg.is_multiple_of(chunk)
    }

    fn row(&self, k: &mut KernelBuilder, f: Reg<U32>) -> FilterTap {
        let p = &self.0.p;
        let ok = k.setp_lt(f, p.filter_len());
        let (ci, tap) = match p.layout {
            Layout::Nchw => (div_const(k, f, p.taps), rem_const(k, f, p.taps)),
            Layout::Nhwc => (rem_const(k, f, p.cg), div_const(k, f, p.cg)),
        };
        let kh = div_const(k, tap, p.kw);
        let kw = rem_const(k, tap, p.kw);
        FilterTap {
            ok,
            dh: k.mul_lo(kh, p.dh),
            dw: k.mul_lo(kw, p.dw),
            channel: k.add(self.0.first_channel, ci),
        }
    }

    fn pixel(&self, k: &mut KernelBuilder, p: Reg<U32>) -> Window {
        let ok = k.setp_lt(p, self.0.pixels);
        let (image, ih0, iw0) = window_origin(k, &self.0.p, &self.0.d, p);
        Window {
            ok,
            image,
            ih0,
            iw0,
        }
    }

    fn locate(&self, k: &mut KernelBuilder, tap: &FilterTap, at: &Window) -> (Reg<U32>, Pred) {
        let (p, d) = (&self.0.p, &self.0.d);
        let ih = k.add(at.ih0, tap.dh);
        let iw = k.add(at.iw0, tap.dw);
        let inside = both_below(k, ih, d.h, iw, d.w);
        let ok = k.and_pred(tap.ok, at.ok);
        let ok = k.and_pred(ok, inside);
        let index = match p.layout {
            Layout::Nchw => {
                let plane = k.mad_lo(at.image, p.c_in, tap.channel);
                let row = k.mad_lo(plane, d.h, ih);
                k.mad_lo(row, d.w, iw)
            }
            Layout::Nhwc => {
                let row = k.mad_lo(at.image, d.h, ih);
                let position = k.mad_lo(row, d.w, iw);
                k.mad_lo(position, p.c_in, tap.channel)
            }
        };
        (index, ok)
    }
}
