//! The implicit GEMMs' epilogue: bias (forward), one rounding to the storage type, and the
//! store of every accumulator inside `M × N` (the split backward-filter: the f32 sums,
//! unrounded, into its slice of the partials).

use super::super::common::{div_const, load_or_zero, rem_const, ConvElem};
use super::split::Slice;
use super::{Conv, Pass, Reads};
use crate::builder::{GlobalPtr, KernelBuilder, ParamHandle, Pred, Reg, F32, U32};
use crate::ir::CmpOp;
use crate::templates::conv::Layout;
use crate::templates::warp_mma::{Accumulators, TileElem};

/// One output column of this lane: the column within the group's GEMM, whether it exists,
/// and its bias.
pub(super) type OutputColumn<A> = (Reg<U32>, Pred, Option<Reg<A>>);

/// Where the epilogue writes.
pub(super) enum Output<T: ConvElem> {
    /// The output tensor, rounded once to the storage type.
    Storage(GlobalPtr<T>),
    /// The split backward-filter's f32 partial sums `[S][C_out][Cg·KH·KW]`; this block's
    /// slice starts at element `base = s·C_out·Cg·KH·KW`.
    Partials {
        sums: GlobalPtr<F32>,
        base: Reg<U32>,
    },
}

/// The declared output parameter, before the block knows its slice.
pub(super) enum OutputParam<T: ConvElem> {
    Storage(ParamHandle<GlobalPtr<T>>),
    Partials(ParamHandle<GlobalPtr<F32>>),
}

impl<T: ConvElem> Output<T> {
    /// Declares the output parameter: `name` in the storage type, or f32 `partials` for the
    /// split entry.
    pub fn declare(k: &mut KernelBuilder, name: &str, split: bool) -> OutputParam<T> {
        if split {
            OutputParam::Partials(k.param_ptr::<F32>("partials"))
        } else {
            OutputParam::Storage(k.param_ptr::<T>(name))
        }
    }
}

impl<T: ConvElem> OutputParam<T> {
    /// The output of this block: the partials of `slice`, `weight_len` elements per slice.
    pub fn locate(self, k: &mut KernelBuilder, slice: Option<Slice>, weight_len: u64) -> Output<T> {
        match (self, slice) {
            (OutputParam::Storage(p), _) => Output::Storage(k.global_ptr(p)),
            (OutputParam::Partials(p), Some(slice)) => {
                let sums = k.global_ptr(p);
                let len = u32::try_from(weight_len).expect("validate bounds the weight");
                let base = k.mul_lo(slice.index, len);
                Output::Partials { sums, base }
            }
            (OutputParam::Partials(_), None) => unreachable!("the split entry has a slice"),
        }
    }
}

impl<T: ConvElem + TileElem> Conv<T> {
    /// Stores the warp's accumulators inside `M × N`: accumulator `(mi, ni)` covers rows
    /// `block_m + wr·warp_m + 16·mi + {l/4, l/4 + 8}` and columns `block_n + wc·warp_n +
    /// 8·ni + 2·(l % 4) + {0, 1}` (`wr × wc` the warp's quadrant of the block's
    /// [`Geometry`](crate::templates::warp_mma::Geometry): 32 × 32, 64 × 32, 32 × 64 or
    /// 64 × 64); forward `y[pixel, g·Og + o] = acc + bias`, backward-data
    /// `dx[n, g·Cg + c, pixel] = acc` (NHWC `dx[n, pixel, g·Cg + c]`), backward-filter
    /// `dw[g·Og + o, f] = acc` (the weight's order in both layouts; [`Self::output_column`]
    /// where the operands are channels-last and `dw` NCHW), rounded once.
    pub(super) fn store(&self, k: &mut KernelBuilder, acc: &Accumulators<T::Shape>) {
        k.comment("epilogue: bias, round, store inside M x N");
        let (row0, col0) = self.pos.output_origin(k);
        let row_base = k.add(self.block_m, row0);
        let col_base = k.add(self.block_n, col0);
        // The slab-ordered B stage permutes the warp's columns (`SlabTile::column`).
        let slab = self.slab_tile();
        let col_base = match slab {
            Some(tile) => {
                let quad = k.and(self.pos.lane, 3u32);
                k.mad_lo(quad, tile.lane_column_step() - 2, col_base)
            }
            None => col_base,
        };
        let column = |ni: u32, j: u32| slab.map_or(ni * 8 + j, |tile| tile.column(ni, j));
        let first_channel = k.mul_lo(self.group, self.n_len());
        // This lane's output columns (per n8 accumulator, 2 columns) and their biases,
        // loaded once for all its rows.
        let columns: Vec<OutputColumn<T::Acc>> = (0..self.geometry.warp_n_tiles * 2)
            .map(|c| {
                let o = k.add(col_base, column(c / 2, c % 2));
                let o_ok = k.setp_lt(o, self.n_len());
                let bias = self.bias.map(|b| {
                    let channel = k.add(first_channel, o);
                    load_or_zero::<T>(k, b, channel, o_ok)
                });
                (self.output_column(k, o), o_ok, bias)
            })
            .collect();
        if self.stages_output() {
            // The image's pixels are uniform over the grid: no warp diverges at the barriers.
            let pixels = self.image_pixels(k);
            let rest = k.and(pixels, 7u32);
            let whole_runs = k.setp(CmpOp::Eq, rest, 0u32);
            k.if_else(
                whole_runs,
                |k| self.store_staged(k, acc, (row0, col0), &columns, first_channel),
                |k| self.store_elements(k, acc, row_base, &columns, first_channel),
            );
        } else {
            self.store_elements(k, acc, row_base, &columns, first_channel);
        }
    }

    /// Where GEMM column `o` goes in its output row: `o` itself, but for the backward-filter
    /// over channels-last operands into NCHW `dw` (or its partials), whose column `o = tap·Cg +
    /// ci` (the NHWC weight's order) is stored at `ci·KH·KW + tap`.
    fn output_column(&self, k: &mut KernelBuilder, o: Reg<U32>) -> Reg<U32> {
        if self.pass != Pass::BackwardFilter || self.layout == self.out_layout {
            return o;
        }
        let tap = div_const(k, o, self.p.cg);
        let ci = rem_const(k, o, self.p.cg);
        k.mad_lo(ci, self.p.taps, tap)
    }

    /// Pixels of one output image: `OH·OW` (forward), `H·W` (backward-data).
    pub(super) fn image_pixels(&self, k: &mut KernelBuilder) -> Reg<U32> {
        match self.pass {
            Pass::BackwardData => k.mul_lo(self.d.h, self.d.w),
            _ => self.d.ohw,
        }
    }

    /// Whether the output is staged through shared memory when the image's pixels allow
    /// ([`super::staged_store`]): the NCHW halves of the channels-last entries, forward and
    /// backward-data, and of `conv2d_implicit_gemm_pointwise`. (The NCHW
    /// `conv2d_implicit_gemm` keeps its element stores: its element-wise A gathers leave no
    /// registers for the staged code on a 7 × 7 filter, where ptxas spilled on sm_90.)
    fn stages_output(&self) -> bool {
        let storage = matches!(self.out, Output::Storage(_));
        let chunked_reads = self.layout == Layout::Nhwc || self.reads == Reads::PixelChunks;
        storage
            && matches!(self.pass, Pass::Forward | Pass::BackwardData)
            && chunked_reads
            && self.out_layout == Layout::Nchw
            && T::TYPE.bytes() == 2
            && self.slab_tile().is_none()
    }

    /// Stores each accumulator inside `M × N` from registers, one element per store.
    fn store_elements(
        &self,
        k: &mut KernelBuilder,
        acc: &Accumulators<T::Shape>,
        row_base: Reg<U32>,
        columns: &[OutputColumn<T::Acc>],
        first_channel: Reg<U32>,
    ) {
        for (mi, row_accs) in acc.iter().enumerate() {
            for half in 0..2u32 {
                let m = k.add(row_base, mi as u32 * 16 + half * 8);
                let m_ok = k.setp_lt(m, self.m_len);
                let (start, column_step) = self.output_row(k, m, first_channel);
                for (ni, frag) in row_accs.iter().enumerate() {
                    let regs = frag.f32_regs();
                    for j in 0..2 {
                        let (o, o_ok, bias) = columns[2 * ni + j];
                        let ok = k.and_pred(m_ok, o_ok);
                        let value: Reg<T::Acc> = regs[2 * half as usize + j].retype();
                        k.if_then(ok, |k| {
                            let value = match bias {
                                Some(b) => k.add(value, b),
                                None => value,
                            };
                            let index = match column_step {
                                Some(step) => k.mad_lo(o, step, start),
                                None => k.add(start, o),
                            };
                            match self.out {
                                Output::Storage(out) => {
                                    let value = T::narrow(k, value);
                                    let addr = k.elem_addr(out, index);
                                    k.st_global(addr, 0, value);
                                }
                                Output::Partials { sums, base } => {
                                    let index = k.add(index, base);
                                    let addr = k.elem_addr(sums, index);
                                    k.st_global::<F32>(addr, 0, value.retype());
                                }
                            }
                        });
                    }
                }
            }
        }
    }

    /// Output index of column 0 of GEMM row `m`, and the step between columns (`None`: 1).
    fn output_row(
        &self,
        k: &mut KernelBuilder,
        m: Reg<U32>,
        first_channel: Reg<U32>,
    ) -> (Reg<U32>, Option<Reg<U32>>) {
        let p = &self.p;
        match (self.pass, self.out_layout) {
            (Pass::BackwardData, layout) => {
                let image = self.image.expect("backward-data blocks have an image");
                let hw = k.mul_lo(self.d.h, self.d.w);
                match layout {
                    Layout::Nchw => {
                        let plane = k.mad_lo(image, p.c_in, first_channel);
                        (k.mad_lo(plane, hw, m), Some(hw))
                    }
                    Layout::Nhwc => {
                        let pixel = k.mad_lo(image, hw, m);
                        (k.mad_lo(pixel, p.c_in, first_channel), None)
                    }
                }
            }
            (Pass::BackwardFilter, _) => {
                let channel = k.mad_lo(self.group, p.og, m);
                (k.mul_lo(channel, p.filter_len()), None)
            }
            (Pass::Forward, Layout::Nchw) => {
                let (image, pix) = self.d.ohw_div.divmod(k, m);
                let plane = k.mad_lo(image, p.c_out, first_channel);
                (k.mad_lo(plane, self.d.ohw, pix), Some(self.d.ohw))
            }
            (Pass::Forward, Layout::Nhwc) => (k.mad_lo(m, p.c_out, first_channel), None),
        }
    }
}
