//! `conv2d_to_channels_last(src, dst, pixels)`: `x [N, C_in, P]` → `[N, P, C_in]` (NHWC) for
//! `P = H·W` pixels, `C_in` (a multiple of 8) fixed by the configuration; the same copy of
//! the output gradient, `conv2d_gradient_to_channels_last`: `gy [N, C_out, OH·OW]` →
//! `[N, OH·OW, C_out]` (the NCHW backward passes through channels-last copies).
//!
//! Each thread moves an 8 × 8 block, 8 consecutive channels × 8 consecutive pixels, through
//! its registers: 8 loads along the pixels (one 16-byte `ld.global.v4` per channel where
//! `P` is a multiple of 8, two 8-byte, four 4-byte or eight 2-byte loads where `P` is only a
//! multiple of 4, of 2, or odd, so every load stays aligned), 32 `prmt` that regroup the
//! 2-byte elements from pixel pairs into channel pairs, and 8 16-byte `st.global.v4` of 8
//! channels along a destination row. The block never touches shared memory (so no bank
//! conflicts and no barrier) and moves 64 elements in about 85 instructions per thread where
//! the 32 × 32 shared-memory tile this replaced took about 25 per element.
//!
//! Coalescing ([`InputTiling`]): a warp's lanes are `octets` channel octets (fastest) ×
//! `32 / octets` pixel blocks. A load instruction then reads, per channel, `32 / octets`
//! consecutive 16-byte pixel chunks (at least 128 contiguous bytes); a store writes, per
//! pixel, `octets` consecutive 16-byte channel chunks (up to 64 contiguous bytes of one NHWC
//! row, whole sectors for `C_in` multiples of 16).

use super::super::common::conv_kernel;
use crate::arch::Arch;
use crate::builder::{KernelBuilder, Pred, Reg, Scalar, U16, U32, U64};
use crate::ir::CmpOp;

/// The entry name.
pub const ENTRY: &str = "conv2d_to_channels_last";
/// The output gradient's copy (`C_out` channels, `OH·OW` pixels).
pub const ENTRY_GRADIENT: &str = "conv2d_gradient_to_channels_last";
/// Threads per block.
pub const THREADS: u32 = 128;
/// Channels and pixels one thread moves (one 16-byte vector of halves each way).
const BLOCK: u32 = 8;
/// Warps per block.
const WARPS: u32 = THREADS / 32;
/// `prmt` selectors: the low halves of `a` and `b` as `{a.lo, b.lo}`, and the high halves.
const LOW_HALVES: u32 = 0x5410;
const HIGH_HALVES: u32 = 0x7632;

/// How a block covers channels × pixels, from `C_in` (a multiple of 8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InputTiling {
    /// Channel octets per warp (1, 2 or 4: the largest dividing `C_in / 8`).
    octets: u32,
    /// Warps side by side along the channels (the others along the pixels).
    channel_warps: u32,
}

impl InputTiling {
    /// The tiling for `channels` input channels: as many channels per warp (up to 32) and
    /// per block (up to 128) as divide `channels`, so no lane of a full tile is idle.
    pub fn new(channels: u32) -> Self {
        let octets_total = (channels / BLOCK).max(1);
        let largest_dividing = |limit: u32, n: u32| {
            let mut d = limit;
            while d > 1 && !n.is_multiple_of(d) {
                d /= 2;
            }
            d
        };
        let octets = largest_dividing(4, octets_total);
        let channel_warps = largest_dividing(WARPS, octets_total / octets);
        Self {
            octets,
            channel_warps,
        }
    }

    /// Pixel blocks side by side in a warp.
    fn pixel_lanes(self) -> u32 {
        32 / self.octets
    }

    /// Channels one block covers.
    pub fn block_channels(self) -> u32 {
        BLOCK * self.octets * self.channel_warps
    }

    /// Pixels one block covers.
    pub fn block_pixels(self) -> u32 {
        BLOCK * self.pixel_lanes() * (WARPS / self.channel_warps)
    }
}

/// Builds `entry(src, dst, pixels)` ([`ENTRY`] for `x`, [`ENTRY_GRADIENT`] for `gy`):
/// `dst[n][p][c] = src[n][c][p]` for `n = ctaid.z`, `c < channels`, `p < pixels`; block
/// [`THREADS`], grid `(⌈pixels / block_pixels⌉, ⌈channels / block_channels⌉, N)`
/// ([`InputTiling`]).
pub(crate) fn build<T: Scalar>(entry: &str, channels: u32, arch: Arch) -> KernelBuilder {
    assert_eq!(
        T::TYPE.bytes(),
        2,
        "the 8 × 8 regrouping assumes 2-byte elements"
    );
    assert!(
        channels.is_multiple_of(BLOCK),
        "channels-last copies need a multiple of 8 channels"
    );
    let tiling = InputTiling::new(channels);
    let mut k = conv_kernel(entry, arch);
    k.require_block([THREADS, 1, 1]);
    let src = k.param_ptr::<T>("src");
    let dst = k.param_ptr::<T>("dst");
    let pixels = k.param::<U32>("pixels");
    let (src, dst) = (k.global_ptr(src), k.global_ptr(dst));
    let pixels = k.load_param(pixels);

    k.comment("this thread's 8 channels x 8 pixels");
    let tid = k.tid_x();
    let lane = k.and(tid, 31u32);
    let warp = k.shr(tid, 5u32);
    let octet = k.and(lane, tiling.octets - 1);
    let pixel_lane = k.shr(lane, tiling.octets.trailing_zeros());
    let channel_warp = k.and(warp, tiling.channel_warps - 1);
    let pixel_warp = k.shr(warp, tiling.channel_warps.trailing_zeros());
    let warp_octet = k.mad_lo(channel_warp, tiling.octets, octet);
    let bx = k.ctaid_x();
    let block_pixel = k.mad_lo(bx, tiling.block_pixels() / BLOCK, pixel_lane);
    let block_pixel = k.mad_lo(pixel_warp, tiling.pixel_lanes(), block_pixel);
    let pixel0 = k.mul_lo(block_pixel, BLOCK);
    let by = k.ctaid_y();
    let channel0 = k.mad_lo(by, tiling.block_channels() / BLOCK, warp_octet);
    let channel0 = k.mul_lo(channel0, BLOCK);
    let image = k.ctaid_z();
    let pixel_ok = k.setp_lt(pixel0, pixels);
    let channel_ok = k.setp_lt(channel0, channels);
    let ok = k.and_pred(pixel_ok, channel_ok);
    k.if_then(ok, |k| {
        let first_channel = k.mad_lo(image, channels, channel0);
        let from = k.mad_lo(first_channel, pixels, pixel0);
        let from = k.elem_addr(src, from);
        let row_bytes = k.mul_wide(pixels, T::TYPE.bytes());
        let first_pixel = k.mad_lo(image, pixels, pixel0);
        let to = k.mad_lo(first_pixel, channels, channel0);
        let to = k.elem_addr(dst, to);
        let block = Block {
            from,
            row_bytes,
            to,
            channels,
            pixel0,
            pixels,
        };
        block.copy_by_alignment::<T>(k, BLOCK);
    });
    k
}

/// One thread's 8 × 8 block: source address of (channel0, pixel0), the bytes between
/// channels, and the destination address of (pixel0, channel0).
struct Block {
    from: Reg<U64>,
    row_bytes: Reg<U64>,
    to: Reg<U64>,
    channels: u32,
    pixel0: Reg<U32>,
    pixels: Reg<U32>,
}

impl Block {
    /// Copies with the widest aligned load, `width` pixels or fewer: `pixels` a multiple of
    /// 8 (16-byte loads), 4, 2, else 2-byte loads. The test is uniform over the grid, so no
    /// warp diverges on it.
    fn copy_by_alignment<T: Scalar>(&self, k: &mut KernelBuilder, width: u32) {
        if width == 1 {
            return self.copy::<T>(k, 1);
        }
        let rest = k.and(self.pixels, width - 1);
        let aligned = k.setp(CmpOp::Eq, rest, 0u32);
        k.if_else(
            aligned,
            |k| self.copy::<T>(k, width),
            |k| self.copy_by_alignment::<T>(k, width / 2),
        );
    }

    /// Loads the block with `width`-pixel loads, regroups it and stores it. With `width = 8`
    /// every pixel of the block exists (`pixels` is a multiple of 8); otherwise each load and
    /// store checks its pixels.
    fn copy<T: Scalar>(&self, k: &mut KernelBuilder, width: u32) {
        let rows = self.load(k, width);
        let columns = transpose(k, &rows);
        k.comment("store: 8 channels (16 bytes) of each pixel");
        let pixel_bytes = (self.channels * T::TYPE.bytes()) as i32;
        for (p, column) in columns.into_iter().enumerate() {
            let p = p as u32;
            let store = |k: &mut KernelBuilder| {
                k.st_global_v4::<U32>(self.to, p as i32 * pixel_bytes, column);
            };
            if width == BLOCK || p == 0 {
                store(k);
            } else {
                let ok = self.pixel_exists(k, p);
                k.if_then(ok, store);
            }
        }
    }

    /// Whether pixel `pixel0 + p` exists.
    fn pixel_exists(&self, k: &mut KernelBuilder, p: u32) -> Pred {
        let pixel = k.add(self.pixel0, p);
        k.setp_lt(pixel, self.pixels)
    }

    /// The block as 8 channel rows of 4 words, word `m` holding pixels `2m` (low half) and
    /// `2m + 1`; pixels past the end read as 0.
    fn load(&self, k: &mut KernelBuilder, width: u32) -> [[Reg<U32>; 4]; 8] {
        k.comment(format!("load: 8 channels, {width}-pixel loads"));
        let exists: Vec<Option<Pred>> = (0..BLOCK)
            .map(|p| {
                let checked = width < BLOCK && p > 0 && p.is_multiple_of(width);
                checked.then(|| self.pixel_exists(k, p))
            })
            .collect();
        let mut at = self.from;
        std::array::from_fn(|c| {
            if c > 0 {
                at = k.add(at, self.row_bytes);
            }
            load_row(k, at, width, &exists)
        })
    }
}

/// One channel's 8 pixels from `at` in loads of `width` pixels; the load at pixel `p` only
/// where `exists[p]` (if checked).
fn load_row(
    k: &mut KernelBuilder,
    at: Reg<U64>,
    width: u32,
    exists: &[Option<Pred>],
) -> [Reg<U32>; 4] {
    let guarded = |k: &mut KernelBuilder, p: u32, load: &dyn Fn(&mut KernelBuilder)| match exists
        [p as usize]
    {
        Some(ok) => k.if_then(ok, load),
        None => load(k),
    };
    let offset = |p: u32| (p * 2) as i32;
    match width {
        8 => k.ld_global_v4::<U32>(at, 0, true),
        1 => {
            let halves: Vec<Reg<U16>> = (0..BLOCK)
                .map(|p| {
                    let h = k.var::<U16>(0u16);
                    guarded(k, p, &|k| {
                        let v = k.ld_global_nc::<U16>(at, offset(p));
                        k.assign(h, v);
                    });
                    h
                })
                .collect();
            std::array::from_fn(|m| k.pack_u16_pair(halves[2 * m], halves[2 * m + 1]))
        }
        _ => {
            let words: [Reg<U32>; 4] = std::array::from_fn(|_| k.var::<U32>(0u32));
            let per_load = (width / 2) as usize;
            for (i, group) in words.chunks(per_load).enumerate() {
                let p = i as u32 * width;
                guarded(k, p, &|k| {
                    let loaded: Vec<Reg<U32>> = match width {
                        4 => k.ld_global_v2::<U32>(at, offset(p), true).to_vec(),
                        _ => vec![k.ld_global_nc::<U32>(at, offset(p))],
                    };
                    for (&w, v) in group.iter().zip(loaded) {
                        k.assign(w, v);
                    }
                });
            }
            words
        }
    }
}

/// Regroups 8 channel rows (word `m` of row `c`: pixels `2m`, `2m + 1` of channel `c`) into 8
/// pixel columns (word `n` of column `p`: channels `2n`, `2n + 1` of pixel `p`), one `prmt`
/// per output word.
fn transpose(k: &mut KernelBuilder, rows: &[[Reg<U32>; 4]; 8]) -> [[Reg<U32>; 4]; 8] {
    k.comment("regroup pixel pairs into channel pairs");
    std::array::from_fn(|p| {
        let (m, selector) = (p / 2, [LOW_HALVES, HIGH_HALVES][p % 2]);
        std::array::from_fn(|n| k.prmt(rows[2 * n][m], rows[2 * n + 1][m], selector))
    })
}
