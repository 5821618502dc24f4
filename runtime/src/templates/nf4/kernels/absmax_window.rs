//! The tensor-core forward GEMMs' absmax reads: a quad's sliding window over one weight row's
//! absmax, held in registers and loaded a whole 32-byte sector at a time. Used by the f16/bf16
//! GEMM ([`AbsmaxWindow::slice`]: 64 columns per step) and the tf32 one ([`AbsmaxWindow::chunk`]:
//! 16 columns per step, each quad lane dequantising four of them).
//!
//! In the forward B fragment the four lanes of a quad share one weight row `r`, and a row's
//! absmax values are consecutive (`absmax[(r·k + c) >> log2 block]`, increasing with `c`). One
//! scalar load per lane of the value the quad shares reads 4 distinct bytes of each 32-byte
//! sector (global load efficiency 0.5 with the quad's four lanes counted). Instead the quad
//! holds two aligned sectors, `absmax[S .. S + 16]` (`S` a multiple of 8): lane `t` holds
//! `S + 2t, S + 2t + 1` (`cur`) and `S + 8 + 2t, + 1` (`next`), each pair one
//! `ld.global.nc.v2.f32`, so the quad's load of a sector requests every byte of it.
//!
//! A slice of [`TC_K`] = 64 elements of the row (or 16 on tf32) touches at most three
//! consecutive blocks (block ≥ 32; two on tf32), the first `b_lo ≥ S`. When `b_lo` reaches `S + 8` the window slides one sector
//! (`cur ← next`, load the new `next`); `b_lo` grows by at most `64 / 32 = 2` per slice, so one
//! slide per slice keeps `b_lo + 2 < S + 16`. The values a slice needs reach every lane of the
//! quad by `shfl.sync.idx` from the quad lane holding them (the block offset is the same for the
//! whole quad, so the holder picks the register before the shuffle).
//!
//! Rows past `n` load nothing (their products are never stored); at the end of the array a pair
//! past `absmax_len` is zero or, when the length is odd, its last value is read alone.

use super::tc::TC_K;
use super::{AbsmaxSource, Entry};
use crate::builder::{GlobalPtr, KernelBuilder, Pred, Reg, Scalar, F32, U32};
use crate::ir::CmpOp;
use crate::templates::nf4::Nf4Config;

/// Values per sector (32 bytes of f32).
const SECTOR: u32 = 8;

/// One quad's window over its weight row's absmax.
pub(super) struct AbsmaxWindow {
    absmax: GlobalPtr<F32>,
    len: u32,
    block_shift: u32,
    /// `row · k`: the flat index of the row's first element.
    row_start: Reg<U32>,
    /// `row < n`.
    live: Pred,
    /// `2t`: this lane's pair within a sector.
    pair: Reg<U32>,
    /// `lane − t·stride`: the quad's first lane.
    quad_lane: Reg<U32>,
    /// Lanes between the quad's members (1: consecutive lanes).
    stride: u32,
    /// `S`, the first index of the window.
    base: Reg<U32>,
    cur: [Reg<F32>; 2],
    next: [Reg<F32>; 2],
}

impl AbsmaxWindow {
    /// The window of weight row `row` for lane `lane` (quad lane `quad` of a quad whose members
    /// are `stride` lanes apart), or `None` under double quantisation (absmax are then decoded
    /// per block, not loaded as f32). The window starts at the row's column `first_col` (a K
    /// slice's first column; `None`: 0).
    pub fn new<T: Scalar, O: Scalar>(
        k: &mut KernelBuilder,
        (cfg, e): (&Nf4Config, &Entry<T, O>),
        (row, first_col): (Reg<U32>, Option<Reg<U32>>),
        (lane, quad, stride): (Reg<U32>, Reg<U32>, u32),
    ) -> Option<Self> {
        let AbsmaxSource::Plain(absmax) = e.weights.absmax else {
            return None;
        };
        k.comment("absmax window: two sectors of this row's absmax per quad");
        let row_start = k.mul_lo(row, cfg.k);
        let start = match first_col {
            Some(col) => k.add(row_start, col),
            None => row_start,
        };
        let first = k.shr(start, e.weights.block_shift);
        let base = k.and(first, !(SECTOR - 1));
        let base = k.var::<U32>(base);
        let window = Self {
            absmax,
            // `validate` bounds n · k by the 32-bit index range.
            len: cfg.absmax_len() as u32,
            block_shift: e.weights.block_shift,
            row_start,
            live: k.setp_lt(row, cfg.n),
            pair: k.shl(quad, 1u32),
            quad_lane: quad_first_lane(k, lane, quad, stride),
            stride,
            base,
            cur: [k.var::<F32>(0.0f32), k.var::<F32>(0.0f32)],
            next: [k.var::<F32>(0.0f32), k.var::<F32>(0.0f32)],
        };
        window.fill(k, window.cur, 0);
        window.fill(k, window.next, SECTOR);
        Some(window)
    }

    /// `dst = absmax[S + sector_offset + 2t .. + 2]` (0 past the array or for a dead row).
    fn fill(&self, k: &mut KernelBuilder, dst: [Reg<F32>; 2], sector_offset: u32) {
        for d in dst {
            k.assign(d, 0.0f32);
        }
        let index = k.add(self.base, self.pair);
        let index = k.add(index, sector_offset);
        let whole = k.setp_lt(index, self.len.saturating_sub(1));
        let whole = k.and_pred(whole, self.live);
        let addr = k.elem_addr(self.absmax, index);
        k.if_then(whole, |k| {
            let v = k.ld_global_v2::<F32>(addr, 0, true);
            k.assign(dst[0], v[0]);
            k.assign(dst[1], v[1]);
        });
        if self.len % 2 == 1 {
            // Only the pair starting at the (even) last index is cut short.
            let last = k.setp(CmpOp::Eq, index, self.len - 1);
            let last = k.and_pred(last, self.live);
            k.if_then(last, |k| {
                let v = k.ld_global_nc::<F32>(addr, 0);
                k.assign(dst[0], v);
            });
        }
    }

    /// The absmax of each of this lane's eight bytes `q` (elements `col0 + 2t + 8q`) of the
    /// slice starting at column `col0`, sliding the window first if the slice starts past its
    /// first sector.
    pub fn slice(&self, k: &mut KernelBuilder, cfg: &Nf4Config, col0: Reg<U32>) -> Vec<Reg<F32>> {
        let (slice_start, b_lo) = self.slide(k, col0);
        if cfg.k.is_multiple_of(cfg.block) {
            // Row starts are block-aligned and `col0` a multiple of 64: runs of `run` elements
            // share a block, the `j`-th run's is `b_lo + j`.
            let run = cfg.block.min(TC_K);
            let runs: Vec<Reg<F32>> = (0..TC_K / run)
                .map(|j| {
                    let b = if j == 0 { b_lo } else { k.add(b_lo, j) };
                    self.broadcast(k, b)
                })
                .collect();
            (0..8).map(|q| runs[(8 * q / run) as usize]).collect()
        } else {
            // Blocks may start at any element: the slice touches blocks `b_lo ..= b_lo + span - 1`.
            let span = TC_K.div_ceil(cfg.block) + 1;
            let values: Vec<Reg<F32>> = (0..span)
                .map(|j| {
                    let b = k.add(b_lo, j);
                    self.broadcast(k, b)
                })
                .collect();
            let lane_start = k.add(slice_start, self.pair);
            per_byte(k, &values, b_lo, lane_start, self.block_shift)
        }
    }

    /// The absmax of the four elements `col0 + lane_col .. + 4` of the row, for a 16-column
    /// slice starting at `col0` (the tf32 tile's depth; `lane_col` a multiple of 4 below 16 and
    /// `k % 4 = 0`, so the four share one block, and the slice touches blocks `b_lo`,
    /// `b_lo + 1`: both are broadcast, each lane picks its own; only `b_lo` when `k % block =
    /// 0`), sliding the window first.
    pub fn chunk(
        &self,
        k: &mut KernelBuilder,
        cfg: &Nf4Config,
        col0: Reg<U32>,
        lane_col: Reg<U32>,
    ) -> Reg<F32> {
        let (slice_start, b_lo) = self.slide(k, col0);
        let lo = self.broadcast(k, b_lo);
        if cfg.k.is_multiple_of(cfg.block) {
            // Row starts are block-aligned and `col0` a multiple of 16: one block.
            return lo;
        }
        let b_hi = k.add(b_lo, 1u32);
        let hi = self.broadcast(k, b_hi);
        let elem = k.add(slice_start, lane_col);
        let b = k.shr(elem, self.block_shift);
        let later = k.setp(CmpOp::Ne, b, b_lo);
        k.selp(hi, lo, later)
    }

    /// Slides the window one sector if the slice starting at column `col0` starts past its
    /// first sector; returns the slice's first element and block `b_lo`.
    fn slide(&self, k: &mut KernelBuilder, col0: Reg<U32>) -> (Reg<U32>, Reg<U32>) {
        let slice_start = k.add(self.row_start, col0);
        let b_lo = k.shr(slice_start, self.block_shift);
        let end = k.add(self.base, SECTOR);
        let past = k.setp_ge(b_lo, end);
        k.if_then(past, |k| {
            k.comment("slide the absmax window one sector");
            for (c, n) in self.cur.iter().zip(self.next) {
                k.assign(*c, n);
            }
            k.assign(self.base, end);
            self.fill(k, self.next, SECTOR);
        });
        (slice_start, b_lo)
    }

    /// `absmax[b]` in every lane of the quad, for `S ≤ b < S + 16`: held by quad lane
    /// `(b − S) mod 8 / 2`, in `next` when `b − S ≥ 8`, component `(b − S) mod 2`.
    fn broadcast(&self, k: &mut KernelBuilder, b: Reg<U32>) -> Reg<F32> {
        let offset = k.sub(b, self.base);
        let in_next = k.setp_ge(offset, SECTOR);
        let x = k.selp(self.next[0], self.cur[0], in_next);
        let y = k.selp(self.next[1], self.cur[1], in_next);
        let parity = k.and(offset, 1u32);
        let odd = k.setp(CmpOp::Ne, parity, 0u32);
        let held = k.selp(y, x, odd);
        // Bits 1..3 of the offset: `(offset mod 8) / 2`.
        let holder = k.bit_field(offset, 1u32, 2u32);
        let src = quad_member_lane(k, self.quad_lane, holder, self.stride);
        k.shfl_idx(held, src)
    }
}

/// `lane − quad·stride`: the first lane of a quad whose members are `stride` lanes apart.
pub(super) fn quad_first_lane(
    k: &mut KernelBuilder,
    lane: Reg<U32>,
    quad: Reg<U32>,
    stride: u32,
) -> Reg<U32> {
    if stride == 1 {
        return k.sub(lane, quad);
    }
    let offset = k.mul_lo(quad, stride);
    k.sub(lane, offset)
}

/// The lane of quad member `holder`, for a quad starting at `first` with members `stride`
/// lanes apart.
pub(super) fn quad_member_lane(
    k: &mut KernelBuilder,
    first: Reg<U32>,
    holder: Reg<U32>,
    stride: u32,
) -> Reg<U32> {
    if stride == 1 {
        return k.add(first, holder);
    }
    k.mad_lo(holder, stride, first)
}

/// The absmax of each of a lane's eight bytes `q` of a 64-element slice (elements
/// `lane_start + 8q`), given `values[j]` = the absmax of block `b_lo + j` for every block the
/// slice touches.
fn per_byte(
    k: &mut KernelBuilder,
    values: &[Reg<F32>],
    b_lo: Reg<U32>,
    lane_start: Reg<U32>,
    block_shift: u32,
) -> Vec<Reg<F32>> {
    (0..8)
        .map(|q| {
            let elem = k.add(lane_start, 8 * q);
            let b = k.shr(elem, block_shift);
            let j = k.sub(b, b_lo);
            values[1..]
                .iter()
                .enumerate()
                .fold(values[0], |v, (i, &later)| {
                    let reached = k.setp_ge(j, i as u32 + 1);
                    k.selp(later, v, reached)
                })
        })
        .collect()
}
