//! The staged epilogue of `conv2d_implicit_gemm_channels_last` and
//! `conv2d_bwd_data_implicit_gemm_channels_last` (halves): NCHW `y` (`dx`) is contiguous
//! along the pixels, the GEMM's rows, while a lane's accumulators hold 2 columns (channels)
//! of each of its rows, so stored straight from registers a warp's request writes 4 channels
//! × 16 bytes (half of every sector). Instead, after the K loop, the block rounds its tile
//! (64 × 64, 128 pixels × 64 channels in [`Geometry::TALL`], 64 × 128 in
//! [`Geometry::FLAT`], 128 × 128 in [`Geometry::WIDE`]) into the free rings
//! ([`super::rings::Rings::free_space`]) as `[channel][pixel]`
//! ([`Stage`]) and stores it back as 16-byte runs of 8 pixels of one channel: a warp writes
//! 4 channels × 128 contiguous bytes. This needs the image's pixels (`OH·OW`, `H·W`) a
//! multiple of 8 (a run then never crosses an image and is aligned); the caller keeps the
//! element stores otherwise. Values and rounding are those of the element stores: the f32
//! sum (plus the forward's bias), rounded once.

use super::super::common::ConvElem;
use super::epilogue::{Output, OutputColumn};
use super::{Conv, Pass};
use crate::builder::{KernelBuilder, Reg, U32};
use crate::templates::warp_mma::{Accumulators, Geometry, TileElem};

/// Pixels per store (16 bytes of halves).
const RUN: u32 = 8;

/// The staged tile of a geometry: `block_n` channel rows of `block_m` pixels.
struct Stage {
    /// Halves per channel row: the tile's pixels and 8 halves of padding (36 or 68 words,
    /// 4 banks further per row), so the 4 channels × 8 pixels a warp writes per accumulator
    /// register fall in distinct banks and each 16-byte row read stays 16-byte aligned.
    row: u32,
    /// Runs of [`RUN`] pixels per channel row.
    runs: u32,
    /// Channel rows one pass of the block reads.
    rows_per_pass: u32,
    /// Channels of the tile.
    channels: u32,
}

impl Stage {
    /// The staged tile of `g`, which must fit `space` bytes.
    fn of(g: Geometry, space: u32) -> Self {
        let (pixels, channels) = (g.block_m(), g.block_n());
        let stage = Self {
            row: pixels + RUN,
            runs: pixels / RUN,
            rows_per_pass: g.threads() / (pixels / RUN),
            channels,
        };
        assert!(stage.runs.is_power_of_two() && (stage.row / 2) % 32 == 4);
        assert!(
            channels * stage.row * 2 <= space,
            "{g:?}: the staged tile fits"
        );
        stage
    }
}

impl<T: ConvElem + TileElem> Conv<T> {
    /// Stages the warp's accumulators (bias added, rounded) and stores the block's tile
    /// inside `M × Og` as 16-byte runs along the pixels. `(row0, col0)`: the lane's first
    /// accumulator row and column within the block tile; `columns`: its 8 columns' biases.
    pub(super) fn store_staged(
        &self,
        k: &mut KernelBuilder,
        acc: &Accumulators<T::Shape>,
        (row0, col0): (Reg<U32>, Reg<U32>),
        columns: &[OutputColumn<T::Acc>],
        first_channel: Reg<U32>,
    ) {
        let Output::Storage(out) = self.out else {
            unreachable!("the staged epilogue stores the output tensor")
        };
        k.comment("epilogue: round the tile into the free ring as [channel][pixel]");
        // Every warp has read its last ring slot.
        k.bar_sync();
        let (base, space) = self.rings.free_space(k);
        let stage = Stage::of(self.geometry, space);
        let at = k.mad_lo(col0, stage.row, row0);
        let at = k.mad_lo(at, 2u32, base);
        for (mi, row_accs) in acc.iter().enumerate() {
            for half in 0..2u32 {
                for (ni, frag) in row_accs.iter().enumerate() {
                    let regs = frag.f32_regs();
                    for j in 0..2u32 {
                        let (_, _, bias) = columns[2 * ni + j as usize];
                        let value: Reg<T::Acc> = regs[(2 * half + j) as usize].retype();
                        let value = bias.map_or(value, |b| k.add(value, b));
                        let value = T::narrow(k, value);
                        let channel = 8 * ni as u32 + j;
                        let pixel = 16 * mi as u32 + 8 * half;
                        k.st_shared(at, ((channel * stage.row + pixel) * 2) as i32, value);
                    }
                }
            }
        }
        k.bar_sync();

        k.comment("epilogue: 16-byte runs of 8 pixels of one channel");
        let tid = k.tid_x();
        let run = k.and(tid, stage.runs - 1);
        let row = k.shr(tid, stage.runs.trailing_zeros());
        let pixel = k.mul_lo(run, RUN);
        let read = k.mad_lo(row, stage.row, pixel);
        let read = k.mad_lo(read, 2u32, base);
        let m = k.add(self.block_m, pixel);
        let m_ok = k.setp_lt(m, self.m_len);
        // The run's image, its first pixel there, the image's pixels and channels.
        let (image, pix, pixels, channels) = match self.pass {
            Pass::Forward => {
                let (image, pix) = self.d.ohw_div.divmod(k, m);
                (image, pix, self.d.ohw, self.p.c_out)
            }
            Pass::BackwardData => {
                let image = self.image.expect("backward-data blocks have an image");
                (image, m, self.image_pixels(k), self.p.c_in)
            }
            Pass::BackwardFilter => unreachable!("the weight gradient is not staged"),
        };
        let o = k.add(self.block_n, row);
        let plane = k.mad_lo(image, channels, first_channel);
        let plane = k.add(plane, o);
        let index = k.mad_lo(plane, pixels, pix);
        let mut to = k.elem_addr(out, index);
        let step = k.mul_wide(pixels, stage.rows_per_pass * T::TYPE.bytes());
        for pass in 0..stage.channels / stage.rows_per_pass {
            if pass > 0 {
                to = k.add(to, step);
            }
            let o = k.add(o, pass * stage.rows_per_pass);
            let o_ok = k.setp_lt(o, self.n_len());
            let ok = k.and_pred(m_ok, o_ok);
            let offset = (pass * stage.rows_per_pass * stage.row * 2) as i32;
            k.if_then(ok, |k| {
                let v = k.ld_shared_v4::<U32>(read, offset);
                k.st_global_v4::<U32>(to, 0, v);
            });
        }
    }
}
