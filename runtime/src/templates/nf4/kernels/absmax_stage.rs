//! The tensor-core GEMMs' absmax, staged once per pipeline stage in shared memory: both
//! backwards, and the f16/bf16 forward under double quantisation with `k % block ≠ 0` (which
//! reads row `j`'s value of any element, [`AbsmaxStage::read_element`]).
//!
//! A stage's code window is weight rows `j0 .. j0 + rows` (64 on f16/bf16, 16 on tf32) by
//! columns `l0 .. l0 + cols` (64, or 256 in the f16/bf16 backward); each row's `cols` elements
//! touch at most `⌈cols / block⌉` consecutive blocks when rows start on block boundaries
//! (`k % block = 0`), else one more, the first `b0(j) = (j·k + l0) >> log2 block`, staged in
//! `per_row` slots (that count rounded up to a power of two, [`AbsmaxStage::per_row`]).
//! Thread `t` of the block copies value `t mod per_row` of row `t / per_row` (and of the rows `threads / per_row` further, one pass each), so the whole
//! tile's absmax cost one request per row segment per block instead of one per lane, row and
//! step: `absmax[b0(j) + v]` for the blocks the row's columns `l0 .. min(l0 + cols, k)` reach,
//! zero for rows past `n` and blocks past them.
//! Plain absmax go by a 4-byte `cp.async` in the stage's group; double-quantised ones are
//! decoded by the thread ([`super::absmax_of`]) and stored (the slot is free: every reader of
//! it passed the barrier before the refill). Readers find block `b` of row `j` in word
//! `(j − j0)·W + (b − b0(j))` (a per-lane constant when `k % block = 0`, else found per row:
//! a warp's columns of a row then fall in two adjacent slots), rows `W` words apart (4 in the
//! f16/bf16 forward; 4, 12 or 20 in the f16/bf16 backward, whose lanes read rows `2t`: 8
//! banks apart; 5 on tf32, whose chunks read rows 4 apart).
//!
//! The bound this leaves (global load efficiency, request by request): a row's `cols` columns
//! use `4 · ⌈cols / block⌉` bytes of the row's absmax (4 for 64 columns at block 64, 16 for
//! 256), and the next row's absmax are `k / block` values further, so each row segment
//! fetches its own 32-byte sector once `k / block ≥ 8`.

use super::code_stage::CodeWindow;
use super::{absmax_of, AbsmaxSource, Entry, NestedAt, Weights};
use crate::builder::{KernelBuilder, Reg, Scalar, SharedArr, Val, F32, U32};
use crate::ir::CmpOp;
use crate::templates::nf4::format::ABSMAX_BLOCK;
use crate::templates::nf4::Nf4Config;
use crate::templates::staging::copy_piece;

/// The absmax ring: `stages` slots of `rows` weight rows × `per_row` f32.
pub(super) struct AbsmaxStage {
    ring: SharedArr<F32>,
    k: u32,
    /// Rows at and past this one stage zeros: `n`, or a slice's end ([`Self::ending_at`]).
    row_end: Val<U32>,
    /// Whether rows past `row_end` are skipped instead ([`Self::ending_at`]).
    skip_past_end: bool,
    block_shift: u32,
    /// Columns of a staged tile and slots per staged row ([`Self::per_row`]).
    cols: u32,
    per_row: u32,
    /// Staged rows per slot and words between them (≥ `per_row`, chosen so that the rows one
    /// request reads fall in distinct banks).
    rows: u32,
    row_words: u32,
    /// The block's threads.
    threads: u32,
    /// This thread's staged row `t / per_row` (of the first pass) and value `t mod per_row`.
    row: Reg<U32>,
    value: Reg<U32>,
    /// Plain absmax by `cp.async` in the stage's group, or (the backward GEMV, on every
    /// target) by `ld.global` and `st.shared` ([`Self::loaded`]).
    cp_async: bool,
}

impl AbsmaxStage {
    /// The ring for `(stages, rows, row_words)` of tiles `cols` wide, staged by the block's
    /// `(tid, threads)`.
    pub fn new<T: Scalar, O: Scalar>(
        k: &mut KernelBuilder,
        (cfg, e, cols): (&Nf4Config, &Entry<T, O>, u32),
        (stages, rows, row_words): (u32, u32, u32),
        (tid, threads): (Reg<U32>, u32),
    ) -> Self {
        let per_row = Self::per_row(cfg, cols);
        assert!(threads.is_multiple_of(per_row) && row_words >= per_row);
        Self {
            ring: k.shared_array::<F32>("absmax_ring", stages * rows * row_words),
            k: cfg.k,
            row_end: cfg.n.into(),
            skip_past_end: false,
            block_shift: e.weights.block_shift,
            cols,
            per_row,
            rows,
            row_words,
            threads,
            row: k.shr(tid, per_row.trailing_zeros()),
            value: k.and(tid, per_row - 1),
            cp_async: true,
        }
    }

    /// Plain absmax loaded and stored by the thread instead of copied by `cp.async` (for
    /// targets without it; the barrier that publishes the slot covers the stores).
    pub fn loaded(self) -> Self {
        Self {
            cp_async: false,
            ..self
        }
    }

    /// Rows from `row_end` on (a run-time bound within `n`: the backward GEMV's slice) are not
    /// staged at all (a thread's pass there costs a compare and a branch instead of the
    /// value's addresses): for readers that never read a row past `row_end`.
    pub fn ending_at(self, row_end: Val<U32>) -> Self {
        Self {
            row_end,
            skip_past_end: true,
            ..self
        }
    }

    /// Slots per staged row of a tile `cols` wide: the most blocks the row's columns touch,
    /// `⌈cols / block⌉` (+ 1 when rows may start inside a block), rounded up to a power of two.
    pub fn per_row(cfg: &Nf4Config, cols: u32) -> u32 {
        let straddle = u32::from(!cfg.k.is_multiple_of(cfg.block));
        (cols.div_ceil(cfg.block) + straddle).next_power_of_two()
    }

    /// Whether rows start on block boundaries (`k % block = 0`): then a column's slot
    /// `b − b0(j)` is the same in every row (a per-lane constant), else it is found per row
    /// from the element index (block `b0(j) + v` of a row always sits in its slot `v`).
    pub fn row_aligned(&self) -> bool {
        self.k.is_multiple_of(1 << self.block_shift)
    }

    /// `b0(j) = (j·k + l0) >> log2 block`.
    fn first_block(&self, k: &mut KernelBuilder, j: Reg<U32>, l0: Reg<U32>) -> Reg<U32> {
        let start = k.mad_lo(j, self.k, l0);
        k.shr(start, self.block_shift)
    }

    /// Shared byte address of slot `slot`.
    pub fn slot(&self, k: &mut KernelBuilder, slot: Reg<U32>) -> Reg<U32> {
        let base = k.shared_base(self.ring);
        k.mad_lo(slot, self.rows * self.row_words * 4, base)
    }

    /// Copies (or decodes) the absmax of code window `w` into slot `slot` (this thread's value).
    pub fn fill(&self, k: &mut KernelBuilder, weights: &Weights, w: &CodeWindow, slot: Reg<U32>) {
        k.comment("stage the tile's absmax: one value per thread");
        let values = self.rows * self.per_row;
        let rows_per_pass = self.threads / self.per_row;
        for pass in 0..values.div_ceil(self.threads) {
            let row = if pass == 0 {
                self.row
            } else {
                k.add(self.row, pass * rows_per_pass)
            };
            if self.skip_past_end {
                let j = k.add(w.row0, row);
                let live = k.setp_lt(j, self.row_end);
                let staged = if values.is_multiple_of(self.threads) {
                    live
                } else {
                    let inside = k.setp_lt(row, self.rows);
                    k.and_pred(live, inside)
                };
                k.if_then(staged, |k| self.stage_value(k, weights, w, (slot, row)));
            } else if values.is_multiple_of(self.threads) {
                self.stage_value(k, weights, w, (slot, row));
            } else {
                // Threads past the slot's rows (whole warps) stage nothing.
                let staged = k.setp_lt(row, self.rows);
                k.if_then(staged, |k| self.stage_value(k, weights, w, (slot, row)));
            }
        }
    }

    /// This thread's value of [`Self::fill`] in staged row `row`: block `b0(j) + value` of row
    /// `j = j0 + row`.
    fn stage_value(
        &self,
        k: &mut KernelBuilder,
        weights: &Weights,
        w: &CodeWindow,
        (slot, row): (Reg<U32>, Reg<U32>),
    ) {
        let j = k.add(w.row0, row);
        let l0 = k.shl(w.byte0, 1u32);
        let b = self.first_block(k, j, l0);
        let b = k.add(b, self.value);
        // The row's last column in the tile, `min(l0 + cols − 1, k − 1)`, bounds its blocks.
        let last_col = k.add(l0, self.cols - 1);
        let last_col = k.min(last_col, self.k - 1);
        let last = self.first_block(k, j, last_col);
        let row_ok = k.setp_lt(j, self.row_end);
        let reached = k.setp(CmpOp::Le, b, last);
        let ok = k.and_pred(row_ok, reached);
        let at = k.mad_lo(row, self.row_words, self.value);
        let base = self.slot(k, slot);
        let dst = k.mad_lo(at, 4u32, base);
        match weights.absmax {
            AbsmaxSource::Plain(absmax) if self.cp_async => copy_piece(k, absmax, b, ok, dst, 1),
            _ => {
                let v = k.var::<F32>(0.0f32);
                k.if_then(ok, |k| {
                    let decoded = absmax_of(k, weights, b);
                    k.assign(v, decoded);
                });
                k.st_shared(dst, 0, v);
            }
        }
    }

    /// A lane's reader of column `col` over rows `lane_row + r` of every staged tile whose
    /// columns start at `l0` (`l0 ≤ col < l0 + cols`; see [`Self::row_aligned`] for the slots).
    pub fn reader(
        &self,
        k: &mut KernelBuilder,
        l0: Reg<U32>,
        col: Reg<U32>,
        lane_row: Reg<U32>,
    ) -> AbsmaxReader {
        let row_words = k.mul_lo(lane_row, self.row_words);
        let aligned = if self.row_aligned() {
            // Rows start on block boundaries: `b − b0(j) = col / block − l0 / block` for
            // every row.
            let b = k.shr(col, self.block_shift);
            let b0 = k.shr(l0, self.block_shift);
            let within = k.sub(b, b0);
            Some(k.add(row_words, within))
        } else {
            None
        };
        AbsmaxReader {
            l0,
            col,
            row_bytes: k.shl(row_words, 2u32),
            aligned,
        }
    }

    /// The lane's place in the slot at `base` for stage rows `j0 ..` (`lane_j = j0 + lane_row`).
    pub fn lane_tile(
        &self,
        k: &mut KernelBuilder,
        reader: &AbsmaxReader,
        base: Reg<U32>,
        lane_j: Reg<U32>,
    ) -> LaneTile {
        match reader.aligned {
            Some(word) => LaneTile {
                at: k.mad_lo(word, 4u32, base),
                elem: None,
            },
            None => LaneTile {
                at: k.add(base, reader.row_bytes),
                elem: Some((
                    k.mad_lo(lane_j, self.k, reader.col),
                    k.mad_lo(lane_j, self.k, reader.l0),
                )),
            },
        }
    }

    /// The staged absmax of row `lane_j + r`, column `col` (zero for rows past `n`).
    pub fn read(&self, k: &mut KernelBuilder, lane: &LaneTile, r: u32) -> Reg<F32> {
        self.read_columns(k, lane, r, &[0])[0]
    }

    /// The staged absmax of row `lane_j + r` at column `col + offset`, for tiles whose first
    /// column `l0` is a multiple of `block`, a lane's `col < l0 + 64` and `offset` a multiple of
    /// 64 (so with `k % block = 0` the block is `offset / block` slots right of `col`'s: the
    /// tf32 backward's B tiles side by side).
    pub fn read_offset(
        &self,
        k: &mut KernelBuilder,
        lane: &LaneTile,
        r: u32,
        offset: u32,
    ) -> Reg<F32> {
        if lane.elem.is_some() {
            return self.read_columns(k, lane, r, &[offset])[0];
        }
        let word = self.row_words * r + (offset >> self.block_shift);
        k.ld_shared::<F32>(lane.at, (4 * word) as i32)
    }

    /// The staged absmax of row `lane_j + r` at columns `col + offset` for each of `offsets`.
    /// With `k % block = 0` they must share `col`'s block (one load serves them all); else
    /// each is found from its element index, the row's first block computed once.
    pub fn read_columns(
        &self,
        k: &mut KernelBuilder,
        lane: &LaneTile,
        r: u32,
        offsets: &[u32],
    ) -> Vec<Reg<F32>> {
        let offset = (4 * self.row_words * r) as i32;
        let Some((lane_elem, lane_start)) = lane.elem else {
            let value = k.ld_shared::<F32>(lane.at, offset);
            return vec![value; offsets.len()];
        };
        let start = k.add(lane_start, r * self.k);
        let first = k.shr(start, self.block_shift);
        offsets
            .iter()
            .map(|&col| {
                let elem = k.add(lane_elem, r * self.k + col);
                self.read_element(k, lane.at, (elem, first), offset)
            })
            .collect()
    }

    /// Shared byte address of staged row `row` of the slot at `base`.
    pub fn row_at(&self, k: &mut KernelBuilder, base: Reg<U32>, row: Reg<U32>) -> Reg<U32> {
        k.mad_lo(row, 4 * self.row_words, base)
    }

    /// With `k % block ≠ 0`: the staged absmax of flat element `elem` of the row staged at
    /// byte `row_at` (`offset` bytes further) whose first block is `first` (`b0(j)`), in its
    /// slot `(elem >> log2 block) − first`.
    pub fn read_element(
        &self,
        k: &mut KernelBuilder,
        row_at: Reg<U32>,
        (elem, first): (Reg<U32>, Reg<U32>),
        offset: i32,
    ) -> Reg<F32> {
        debug_assert!(!self.row_aligned());
        let b = k.shr(elem, self.block_shift);
        let within = k.sub(b, first);
        let addr = k.mad_lo(within, 4u32, row_at);
        k.ld_shared::<F32>(addr, offset)
    }
}

/// A lane's address in one staged slot ([`AbsmaxStage::lane_tile`]): its word, or with
/// `k % block ≠ 0` its row, the flat index `lane_j · k + col` of its first element and that of
/// the tile's first element in the row, `lane_j · k + l0`.
pub(super) struct LaneTile {
    at: Reg<U32>,
    elem: Option<(Reg<U32>, Reg<U32>)>,
}

/// One lane's column and rows in the staged absmax ([`AbsmaxStage::reader`]).
pub(super) struct AbsmaxReader {
    l0: Reg<U32>,
    col: Reg<U32>,
    /// `4 · row_words · lane_row`.
    row_bytes: Reg<U32>,
    /// With `k % block = 0`: the lane's word in every staged tile, `row_words · lane_row + col /
    /// block − l0 / block`.
    aligned: Option<Reg<U32>>,
}

/// Double quantisation's nested absmax for a window of staged rows, copied to shared memory
/// once per window, so that the window's decodes ([`AbsmaxStage::fill`]) read only their code
/// bytes from global memory (each row's nested absmax, 4 bytes, would otherwise fetch a sector
/// of its own). Rows `j0 .. j0 + rows` of tiles `cols` wide reach blocks `b0(j0) ..= b0(j0) +
/// span` with `span ≤ ((rows − 1)·k + cols − 1) / block + 1`, so the nested entries
/// `b0(j0) / 256 ..` of at most `(span + 1) / 256 + 2` words ([`Self::new`]).
pub(super) struct NestedWindow {
    copy: SharedArr<F32>,
    words: u32,
    /// Nested absmax in the tensor (`Nf4Config::absmax_blocks`): copies stop there.
    len: u32,
    k: u32,
    block_shift: u32,
}

impl NestedWindow {
    /// The widest window copied (2 KiB); beyond it (`k` past about 500 nested groups, e.g.
    /// 32 K columns at block 64) decodes keep reading the nested absmax from global memory.
    const MAX_WORDS: u32 = 512;

    /// The window for `rows` staged rows of tiles `cols` wide, under double quantisation when
    /// it fits [`Self::MAX_WORDS`].
    pub fn new(k: &mut KernelBuilder, cfg: &Nf4Config, rows: u32, cols: u32) -> Option<Self> {
        let span = ((u64::from(rows) - 1) * u64::from(cfg.k) + u64::from(cols) - 1)
            / u64::from(cfg.block)
            + 1;
        let words = (span + 1) / ABSMAX_BLOCK as u64 + 2;
        (cfg.double_quant && words <= u64::from(Self::MAX_WORDS)).then(|| Self {
            copy: k.shared_array::<F32>("nested_window", words as u32),
            words: words as u32,
            len: cfg.absmax_blocks() as u32,
            k: cfg.k,
            block_shift: cfg.block.trailing_zeros(),
        })
    }

    /// Copies code window `w`'s nested absmax, `threads` consecutive entries per step by the
    /// block's `tid` (the caller synchronises before the decodes), and returns `weights`
    /// reading them there.
    pub fn fill(
        &self,
        k: &mut KernelBuilder,
        weights: &Weights,
        w: &CodeWindow,
        (tid, threads): (Reg<U32>, u32),
    ) -> Weights {
        let AbsmaxSource::Double {
            codes,
            map,
            nested: NestedAt::Global(nested),
            offset,
        } = weights.absmax
        else {
            unreachable!("a nested window is made only under double quantisation");
        };
        k.comment("nested absmax of the window -> shared memory");
        let l0 = k.shl(w.byte0, 1u32);
        let start = k.mad_lo(w.row0, self.k, l0);
        let b0 = k.shr(start, self.block_shift);
        let first = k.shr(b0, ABSMAX_BLOCK.trailing_zeros());
        for pass in 0..self.words.div_ceil(threads) {
            let t = k.add(tid, pass * threads);
            let index = k.add(first, t);
            let in_window = k.setp_lt(t, self.words);
            let exists = k.setp_lt(index, self.len);
            let ok = k.and_pred(in_window, exists);
            let v = k.var::<F32>(0.0f32);
            k.if_then(ok, |k| {
                let at = k.elem_addr(nested, index);
                let loaded = k.ld_global_nc::<F32>(at, 0);
                k.assign(v, loaded);
            });
            k.if_then(in_window, |k| {
                let to = k.shared_elem(self.copy, t);
                k.st_shared(to, 0, v);
            });
        }
        Weights {
            absmax: AbsmaxSource::Double {
                codes,
                map,
                nested: NestedAt::Shared {
                    copy: self.copy,
                    first,
                },
                offset,
            },
            ..*weights
        }
    }
}
