//! Staging a window of packed NF4 code rows into shared memory by `cp.async`, for the
//! tensor-core GEMMs (f16/bf16 in [`super::tc`], tf32 in [`super::tc_tf32`]).
//!
//! A window is `rows` consecutive weight rows, bytes `byte0 .. byte0 + width` of each packed row
//! (`k / 2` bytes long; `byte0` a multiple of `width`, bytes past the row's end and rows past `n`
//! read as zero). Shared row `r` starts `stride` bytes after row `r − 1`.
//!
//! - **Rows of 4-byte multiples** (`k % 8 = 0`): every window row starts as aligned as `byte0`,
//!   so it is copied in chunks of the largest of 16, 8, 4 bytes dividing the row length, the
//!   width and the stride; window byte `b` lands at shared byte `b` of its row.
//! - **Other rows** (`k % 8 ≠ 0`): a row starts `lead = (row · k/2 + byte0) mod 4` bytes past a
//!   4-byte boundary, so the `width / 4 + 1` aligned words covering the window are copied,
//!   4 bytes each, the last word of a row cut by `cp.async`'s src-size at the row's end (the rest
//!   zero-filled, so a copy never reads past the weight). Window byte `b` lands at shared byte
//!   `lead + b` of its row: readers add [`CodeStage::lead`]. A warp's copies then request whole
//!   words of consecutive rows instead of the bytes one at a time, all of a row's words in one
//!   request (lanes by the power of two above `width / 4 + 1`, the rest idle), so a row's
//!   sectors are fetched once.
//!
//! [`CodeRing`] holds the staged windows in shared memory; a window may serve several
//! consecutive K tiles (the tf32 forward's 32-byte rows feed four 16-deep tiles).

use crate::builder::{GlobalPtr, KernelBuilder, Reg, SharedArr, Val, U32};
use crate::ir::{CacheLevel, CmpOp};
use crate::templates::nf4::Nf4Config;
use crate::templates::warp_mma as tile;

use super::U8;

/// Where one stage's window starts: global row `row0 + r`, byte `byte0 + b` of a packed row.
pub(super) struct CodeWindow {
    pub row0: Reg<U32>,
    pub byte0: Reg<U32>,
}

/// The shape of one staged window of packed codes and how it is copied.
#[derive(Clone, Copy)]
pub(super) struct CodeStage {
    /// Window rows and bytes per row (powers of two; `width ≥ 4`).
    rows: u32,
    width: u32,
    /// Shared bytes from one row to the next (`≥ width + 4` when rows are not 4-byte multiples).
    stride: u32,
    /// Packed row length `k / 2` and weight rows `n`.
    row_bytes: u32,
    n: u32,
}

impl CodeStage {
    pub fn new(cfg: &Nf4Config, rows: u32, width: u32, stride: u32) -> Self {
        let stage = Self {
            rows,
            width,
            stride,
            row_bytes: cfg.k / 2,
            n: cfg.n,
        };
        debug_assert!(rows.is_power_of_two() && width.is_power_of_two() && width >= 4);
        debug_assert!(stage.word_aligned() || stride >= width + 4);
        stage
    }

    /// Shared bytes of one staged window.
    pub const fn bytes(rows: u32, stride: u32) -> u32 {
        rows * stride
    }

    /// Shared bytes of this window: `rows · stride`.
    pub fn stage_bytes(&self) -> u32 {
        Self::bytes(self.rows, self.stride)
    }

    /// Bytes of codes per window row.
    pub fn width(&self) -> u32 {
        self.width
    }

    /// Shared bytes from one staged row to the next.
    pub fn stride(&self) -> u32 {
        self.stride
    }

    /// Whether packed rows are 4-byte multiples (window rows start at shared byte 0).
    pub fn word_aligned(&self) -> bool {
        self.row_bytes.is_multiple_of(4)
    }

    /// The chunk of the aligned copies: the largest of 16, 8, 4 dividing the row length, the
    /// window width and the stride.
    fn chunk(&self) -> u32 {
        [16, 8, 4]
            .into_iter()
            .find(|c| {
                self.row_bytes.is_multiple_of(*c)
                    && self.width.is_multiple_of(*c)
                    && self.stride.is_multiple_of(*c)
            })
            .unwrap_or(4)
    }

    /// Shared byte of window byte 0 in the staged row of global row `row`: `None` (0) when rows
    /// are 4-byte multiples, else `(row · k/2 + byte0) mod 4`.
    pub fn lead(
        &self,
        k: &mut KernelBuilder,
        row: Reg<U32>,
        byte0: impl Into<Val<U32>>,
    ) -> Option<Reg<U32>> {
        if self.word_aligned() {
            return None;
        }
        let start = k.mad_lo(row, self.row_bytes, byte0);
        Some(k.and(start, 3u32))
    }

    /// Starts the copies of window `w` into the stage at shared byte `stage`, by the block's
    /// `threads` threads (this one is `tid`).
    pub fn copy(
        &self,
        k: &mut KernelBuilder,
        packed: GlobalPtr<U8>,
        (tid, threads): (Reg<U32>, u32),
        w: &CodeWindow,
        stage: Reg<U32>,
    ) {
        if self.word_aligned() {
            k.comment("cp.async the packed codes");
            let chunk = self.chunk();
            let per_row = self.width / chunk;
            self.for_each_slot(k, (tid, threads), (per_row, chunk), |k, r, piece| {
                self.copy_chunk(k, packed, w, stage, (r, piece), chunk);
            });
        } else {
            k.comment("cp.async the aligned words covering the packed codes (rows off words)");
            let words = self.width / 4 + 1;
            self.for_each_slot(
                k,
                (tid, threads),
                (words.next_power_of_two(), 4),
                |k, r, word| {
                    let covering = k.setp_lt(word, words);
                    k.if_then(covering, |k| {
                        let offset = k.shl(word, 2u32);
                        self.copy_word(k, packed, w, stage, r, offset);
                    });
                },
            );
        }
    }

    /// Runs `body(k, r, slot)` for every `(row, slot)` of `rows × per_row` slots of `bytes`
    /// each, dealt by [`slot_place`].
    fn for_each_slot(
        &self,
        k: &mut KernelBuilder,
        (tid, threads): (Reg<U32>, u32),
        (per_row, bytes): (u32, u32),
        body: impl Fn(&mut KernelBuilder, Reg<U32>, Reg<U32>),
    ) {
        let slots = self.rows * per_row;
        for i in 0..slots.div_ceil(threads) {
            let c = k.add(tid, i * threads);
            let one = |k: &mut KernelBuilder| {
                let (r, slot) = slot_place(k, c, (per_row, bytes), slots);
                body(k, r, slot);
            };
            if slots.is_multiple_of(threads) {
                one(k);
            } else {
                let active = k.setp_lt(c, slots);
                k.if_then(active, one);
            }
        }
    }

    /// `stage[r][chunk · piece ..] = packed[(row0 + r) · k/2 + byte0 + chunk · piece ..]`, zero
    /// outside the weight.
    fn copy_chunk(
        &self,
        k: &mut KernelBuilder,
        packed: GlobalPtr<U8>,
        w: &CodeWindow,
        stage: Reg<U32>,
        (r, piece): (Reg<U32>, Reg<U32>),
        chunk: u32,
    ) {
        let b = k.mul_lo(piece, chunk);
        let dst_off = k.mad_lo(r, self.stride, b);
        let dst = k.add(stage, dst_off);
        let grow = k.add(w.row0, r);
        let gbyte = k.add(w.byte0, b);
        let inside = super::both_below(k, grow, self.n, gbyte, self.row_bytes);
        let index = k.mad_lo(grow, self.row_bytes, gbyte);
        let index = k.selp(index, 0u32, inside);
        let src = k.elem_addr(packed, index);
        let src_bytes = k.selp(chunk, 0u32, inside);
        let cache = if chunk == 16 {
            CacheLevel::Cg
        } else {
            CacheLevel::Ca
        };
        k.cp_async_zfill(cache, dst, src, chunk, src_bytes);
    }

    /// The aligned word at byte `offset` of those covering row `r` of the window: global bytes
    /// `start − lead + offset ..` (`start` the window row's first byte), cut at the row's end.
    fn copy_word(
        &self,
        k: &mut KernelBuilder,
        packed: GlobalPtr<U8>,
        w: &CodeWindow,
        stage: Reg<U32>,
        r: Reg<U32>,
        offset: impl Into<Val<U32>> + Copy,
    ) {
        let dst_off = k.mad_lo(r, self.stride, offset);
        let dst = k.add(stage, dst_off);
        let grow = k.add(w.row0, r);
        let row_start = k.mul_lo(grow, self.row_bytes);
        let start = k.add(row_start, w.byte0);
        let aligned = k.and(start, !3u32);
        let from = k.add(aligned, offset);
        let row_end = k.add(row_start, self.row_bytes);
        let left = k.sub(row_end, from);
        let bytes = k.min(left, 4u32);
        let live = super::both_below(k, grow, self.n, from, row_end);
        let bytes = k.selp(bytes, 0u32, live);
        let index = k.selp(from, 0u32, live);
        let src = k.elem_addr(packed, index);
        k.cp_async_zfill(CacheLevel::Ca, dst, src, 4, bytes);
    }
}

/// Row and slot of copy `c` of a window with `per_row` slots of `bytes` per row. A warp's 32
/// copies cover the same `32 / per_row` whole rows either way (the same global sectors per
/// request); shared memory takes 8- and 16-byte writes in phases of 16 and 8 lanes, and with
/// fewer than 8 slots per row a phase dealt slot-fastest would span two to four rows whose
/// padded starts (12 or 20 words apart) share banks, so those are dealt column-major
/// ([`tile::staged_chunk`]: a phase's lanes on consecutive rows, one slot column, which start
/// on distinct 4-bank groups as the readers' rows do), when every warp's copies are whole
/// (`slots` a multiple of 32). 4-byte copies (a phase is the whole warp) stay slot-fastest.
fn slot_place(
    k: &mut KernelBuilder,
    c: Reg<U32>,
    (per_row, bytes): (u32, u32),
    slots: u32,
) -> (Reg<U32>, Reg<U32>) {
    if bytes >= 8 && slots.is_multiple_of(32) {
        tile::staged_chunk(k, c, per_row)
    } else {
        (k.shr(c, per_row.trailing_zeros()), k.and(c, per_row - 1))
    }
}

/// One thread's share of [`CodeStage::copy`] for windows whose rows stay fixed while
/// `byte0` moves along them (the forward's: the block's weight rows, slice after slice), when
/// rows are a whole number of windows: each chunk's row start (0 for rows past `n`, a valid
/// address read zero bytes), source size and shared offset are formed once, and each stage
/// issues `add`, `mad.wide`, `cp.async` per chunk.
pub(super) struct FixedRowCopies {
    /// Per pass: global index of the chunk's first byte at `byte0 = 0`, source bytes, shared
    /// offset, and whether this thread has a chunk in the pass (`None`: every thread has).
    chunks: Vec<FixedChunk>,
    chunk: u32,
}

/// One pass of [`FixedRowCopies`].
struct FixedChunk {
    start: Reg<U32>,
    bytes: Reg<U32>,
    dst: Reg<U32>,
    active: Option<crate::builder::Pred>,
}

impl CodeStage {
    /// [`FixedRowCopies`] for windows of rows `row0 ..`, when packed rows are 4-byte
    /// multiples and a whole number of windows long.
    pub fn fixed_rows(
        &self,
        k: &mut KernelBuilder,
        row0: Reg<U32>,
        (tid, threads): (Reg<U32>, u32),
    ) -> Option<FixedRowCopies> {
        if !self.word_aligned() || !self.row_bytes.is_multiple_of(self.width) {
            return None;
        }
        let chunk = self.chunk();
        let per_row = self.width / chunk;
        let slots = self.rows * per_row;
        let chunks = (0..slots.div_ceil(threads))
            .map(|i| {
                let c = k.add(tid, i * threads);
                let active = ((i + 1) * threads > slots).then(|| k.setp_lt(c, slots));
                let (r, piece) = slot_place(k, c, (per_row, chunk), slots);
                let b = k.mul_lo(piece, chunk);
                let dst = k.mad_lo(r, self.stride, b);
                let grow = k.add(row0, r);
                let inside = k.setp_lt(grow, self.n);
                let start = k.mad_lo(grow, self.row_bytes, b);
                let start = k.selp(start, b, inside);
                let bytes = k.selp(chunk, 0u32, inside);
                FixedChunk {
                    start,
                    bytes,
                    dst,
                    active,
                }
            })
            .collect();
        Some(FixedRowCopies { chunks, chunk })
    }
}

impl FixedRowCopies {
    /// Starts this thread's copies of the window at `byte0` into the stage at shared byte
    /// `stage`.
    pub fn issue(
        &self,
        k: &mut KernelBuilder,
        packed: GlobalPtr<U8>,
        stage: Reg<U32>,
        byte0: Reg<U32>,
    ) {
        k.comment("cp.async the packed codes (row starts formed once)");
        let cache = if self.chunk == 16 {
            CacheLevel::Cg
        } else {
            CacheLevel::Ca
        };
        for c in &self.chunks {
            let copy = |k: &mut KernelBuilder| {
                let at = k.add(stage, c.dst);
                let index = k.add(c.start, byte0);
                let src = k.mad_wide(index, 1u32, packed.addr);
                k.cp_async_zfill(cache, at, src, self.chunk, c.bytes);
            };
            match c.active {
                Some(active) => k.if_then(active, copy),
                None => copy(k),
            }
        }
    }
}

/// A shared ring of staged code windows, each covering `span` consecutive K tiles of a
/// `stages`-deep `cp.async` ring (tile `t` filled `stages − 1` steps before it is read).
///
/// Window `g` (tiles `span · g ..`) is copied with tile `span · g`, in that tile's group, into
/// slot `g mod slots`, and read until step `span · g + span − 1`; window `g + slots` is copied
/// at step `span · (g + slots) − (stages − 1)`, after that step's barrier. So `slots` is the
/// least count with `span · (slots − 1) > stages − 2`: `stages` for one tile per window (the
/// activation ring's own slots), 2 from `span ≥ stages − 1` on.
pub(super) struct CodeRing {
    pub codes: CodeStage,
    span: u32,
    slots: u32,
    ring: SharedArr<U8>,
}

impl CodeRing {
    /// Declares the ring of windows `codes`, each staged for `span` tiles (a power of two) of a
    /// `stages`-deep ring.
    pub fn new(k: &mut KernelBuilder, codes: CodeStage, (span, stages): (u32, u32)) -> Self {
        debug_assert!(span.is_power_of_two() && stages >= 2);
        let slots = (stages - 2) / span + 2;
        let ring = k.shared_array::<U8>("code_ring", slots * codes.stage_bytes());
        Self {
            codes,
            span,
            slots,
            ring,
        }
    }

    /// Shared byte of the window slot holding tile `tile` (ring slot `slot`): slot `slot`
    /// itself when windows span one tile, else `(tile / span) mod slots`.
    fn window_base(&self, k: &mut KernelBuilder, (tile, slot): (Reg<U32>, Reg<U32>)) -> Reg<U32> {
        let window = if self.span == 1 {
            slot
        } else {
            let window = k.shr(tile, self.span.trailing_zeros());
            k.rem(window, self.slots)
        };
        let base = k.shared_base(self.ring);
        k.mad_lo(window, self.codes.stage_bytes(), base)
    }

    /// When tile `tile` (ring slot `slot`) starts a window, starts its copy: `copy(k, stage)`
    /// with `stage` the shared byte of the window's slot (a block-uniform branch).
    pub fn fill(
        &self,
        k: &mut KernelBuilder,
        (tile, slot): (Reg<U32>, Reg<U32>),
        copy: impl Fn(&mut KernelBuilder, Reg<U32>),
    ) {
        let start = |k: &mut KernelBuilder| {
            let stage = self.window_base(k, (tile, slot));
            copy(k, stage);
        };
        if self.span == 1 {
            return start(k);
        }
        let phase = k.and(tile, self.span - 1);
        let starts = k.setp(CmpOp::Eq, phase, 0u32);
        k.if_then(starts, start);
    }

    /// Shared byte of tile `tile`'s codes (ring slot `slot`) in its staged window: the window's
    /// slot plus `(tile mod span) · width / span` bytes.
    pub fn tile_codes(
        &self,
        k: &mut KernelBuilder,
        (tile, slot): (Reg<U32>, Reg<U32>),
    ) -> Reg<U32> {
        let stage = self.window_base(k, (tile, slot));
        if self.span == 1 {
            return stage;
        }
        let phase = k.and(tile, self.span - 1);
        k.mad_lo(phase, self.codes.width / self.span, stage)
    }
}
