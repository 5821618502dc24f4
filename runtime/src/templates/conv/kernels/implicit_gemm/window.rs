//! [`Strategy::Windows`](super::gather::Strategy::Windows): NCHW operands whose lanes are
//! pixels reading input-like rows without dilation along `w`, each `(channel, kh)` row a
//! warp needs read once as a run of whole 32-byte sectors and regrouped with
//! `shfl.sync.idx`: forward A (`x` windows at stride 1 or 2 along `w`, lane → pixel as in
//! [`Strategy::Rows`](super::gather::Strategy::Rows)), backward-data A (`gy` runs: halves at
//! any stride, f32 at stride 1) and backward-filter B (`x` windows at stride 1 or 2 along
//! `w`, lane → the pixel that is reduction index `k0 + t mod K`).
//!
//! Backward-data is the same read mirrored: input pixel `(h, w)`'s tap `(kh, kw)` reads `gy`
//! at `oh` from [`output_coord`] (any stride and dilation along `h`) and `ow = (w + PW − kw)
//! / SW` where that divides. With `w + PW = SW·a + r`, the taps `kw ≡ r (mod SW)` read `ow =
//! a − ⌊kw / SW⌋`: window tap `t = ⌊(KW − 1) / SW⌋ − ⌊kw / SW⌋` of the run starting at `a −
//! ⌊(KW − 1) / SW⌋`, consecutive (`SW` lanes apart) for consecutive pixels; the others are
//! 0. Below, `x`, `H × W`, `ci` and `KW` stand for `gy`, `OH × OW`, `o` and the window taps
//! `⌊(KW − 1) / SW⌋ + 1` there. Measured on the 3 × 3 p1 layers (f16): 28-wide (32 → 32)
//! load efficiency 0.768 → 1.000, 527.0 → 501.3 instructions per output; 16 × 16 (64 → 64)
//! 0.980 → 1.000, 494.8 → 468.5; stride 2 0.831 → 1.000, 530.2 → 474.7.
//!
//! Lane `j` of a warp holds pixel `m₀ + j`, which reads `x` at `a_j + t` for the taps `t <
//! KW` of one `(ci, kh)`, where `a_j` is its tap-0 element. Where consecutive pixels are
//! consecutive `iw` (`a_j = a₀ + j`, also across rows for "same" padding, which lands the
//! next row's first window right after the last one's) the warp needs the run `a_first + t_lo
//! ..= a_last + t_hi` of its first and last lanes with an element in bounds (`t_lo`, `t_hi`:
//! the lane's first and last tap inside the row). The window is that run widened to whole
//! sectors (16 halves, 8 f32), at most two elements per lane and never past the end of `x`:
//! lane `L` loads elements `2L, 2L + 1` of it (a 32-bit word of halves, an `ld.global.nc.v2`
//! of f32), and element `a_j + t` is element `(a_j + t − s) mod 2` of lane `⌊(a_j + t − s) /
//! 2⌋`'s pair (`s` the window's first element): for halves one shuffle and a shift per tap;
//! for f32 the lane shuffles in both words of the `⌊KW / 2⌋ + 1` pairs its taps touch (4
//! shuffles for 3 taps) and picks each tap with one `selp` on the parity of `a_j − s`.
//! Elements outside the window (lanes of another image, "valid" padding's row breaks, or
//! runs wider than the window) are loaded on their own, behind a warp-uniform branch. Per
//! row of taps, one request of whole sectors replaces `KW` requests of 32 consecutive
//! elements at any alignment (3 sectors for 2 of halves, 5 for 4 of f32): on 28-wide rows,
//! whose pixel runs start anywhere in a sector, load efficiency 0.768 → 1.000 (f16, 3 × 3
//! 32 → 32, 28 × 28); the window's sector ends that no lane uses count as read (they are
//! fetched either way). f32 backward-filter reads per half-warp (its B tile has `K` = 16
//! pixels per row, [`Conv::window_group`]): a half-warp's 16 pixels need at most 16 + KW − 1
//! elements, in a window of 32.
//!
//! f32 at stride 1, measured (3 × 3 p1; "16 × 16" 64 → 64, "28-wide" 32 → 32 on 28 × 28),
//! over lane → pixel (forward, backward-data) and lane → pixel index (backward-filter), in
//! instructions per output and load efficiency: forward 16 × 16 350.8 → 397.0 (0.978 →
//! 0.998), 28-wide 378.1 → 429.5 (0.864 → 1.000); backward-data 606.7 → 608.8 (0.980 →
//! 1.000), 28-wide 646.2 → 650.8 (0.864 → 1.000); backward-filter 229.1 → 259.6 (0.980
//! → 1.000), 28-wide (split entry) 1509.6 → 1724.1 (0.774 → 1.000). The growth (13–14% in
//! forward and backward-filter) is the per-row window set-up (ballot, bounds, the missed-lane
//! check) shared by only 8 elements per thread.
//!
//! At stride 2 along `w` (forward and backward-filter) 32 pixels span 63–65 halves of a
//! row, and a warp's pixels are several output rows whose runs lie apart (on 8-wide outputs,
//! four runs of 16 halves in every other input row), so one sector window does not hold
//! them. There pixel `ow`'s taps lie in `⌊KW / 2⌋ + 1` words starting at its tap-0
//! element's word, one word further per pixel: each lane loads its last word only (the
//! lanes of an output row then read consecutive words, whole sectors of the row's run) and
//! takes the lower ones from the lanes to its left with `shfl.sync.up`
//! ([`Conv::strided_taps`]). f32 reads the same way in units of two f32 (one
//! `ld.global.nc.v2` per lane, two shuffles per lower unit); its backward-filter B tile has
//! 16 pixels (`K`) per row, so there each half-warp is a group of pixel lanes of its own
//! (lanes `16·h + j`, `j < d`, take no unit from the half-warp below). Measured (3 × 3 s2
//! p1, 16 × 16), over the former lane pairs on adjacent taps: f16 forward load efficiency
//! 0.842 → 1.000 at 288.7 → 273.7 instructions per output, f16 backward-filter 0.842 →
//! 1.000 at 56.4 → 56.3, f32 forward 0.842 → 1.000 at 366.5 → 402.2, f32 backward-filter
//! 0.842 → 1.000 at 66.7 → 72.8 (bank-conflict factor 1.000, [`Conv::store_filter_columns`]).
//!
//! A thread's `E` window indices `(ci, kh, kw)` `first ..+ E` (forward: the tile's reduction
//! indices `k0 + E·⌊t / 64⌋ ..`, stored as one row piece like [`Strategy::Rows`]; backward-
//! filter: the filter columns `block_n + E·⌊t / K⌋ ..`, the B tile's rows, stored one per
//! row at column `t mod K`, conflict-free) start at tap `ph = first mod KW` of row `⌊first / KW⌋`:
//! it reads rows `⌊first / KW⌋ + j` (`j < ⌈(E + KW − 1) / KW⌉`), gets the values `V[n]` of
//! indices `⌊first / KW⌋·KW + n` and keeps `V[e + ph]` (a `selp` per phase). Row `j` is used
//! only from phase `j·KW − E + 1` on, so where that is above 0 (f32: `E` = 8, the fourth row
//! of 3 taps at phase 2 only) it is read behind a branch taken where any lane of the warp
//! needs it.
//!
//! Backward-filter B is forward A transposed: the pixel (so its window origin and valid
//! taps) changes with the tile and the filter columns stay, so the pixel's coordinates are
//! found per tile; its window rows stay and are found once ([`WindowRows`], filters up to
//! [`MAX_HELD_ROWS_KW`] wide). Measured (3 × 3
//! p1, f16): 28-wide load efficiency 0.771 → 1.000 at 1242.0 → 1317.1 instructions per
//! output (the pixel's per-tile coordinates and a `cvt.u16.u32` per element; 1265.3 with the
//! rows found once), 16 × 16 0.980 → 1.000 at 193.7 → 203.4 (196.6).

use super::super::common::{div_const, output_coord, rem_const, ConvElem};
use super::addressing::{Coord, Side};
use super::gather::{store_words, Operand};
use super::{Conv, Pass};
use crate::builder::{GlobalPtr, KernelBuilder, Pred, Reg, Scalar, S32, U32};
use crate::ir::{CmpOp, ShflMode, VoteMode};
use crate::templates::warp_mma::{TileElem, TILE_M};

/// Bytes of a global sector.
const SECTOR_BYTES: u32 = 32;
/// `prmt` selector of the low halves of two words (bytes 0–1 of each).
const LOW_HALVES: u32 = 0x5410;
/// Lanes of a warp.
const WARP: u32 = 32;
/// The widest filter whose backward-filter window rows are found once and held across the
/// reduction (its `⌈(E + KW − 1) / KW⌉` rows and `KW − 1` phases); wider ones find them per
/// tile (ptxas spilled 8 bytes of a 7 × 7 f16 backward-filter holding them).
const MAX_HELD_ROWS_KW: u32 = 3;
/// `shfl.sync` member mask of the whole warp.
const ALL_LANES: u32 = u32::MAX;

/// The pixel a lane reads windows for, and its valid taps: fixed along the reduction where
/// pixels are tile rows (forward and backward-data A), per tile where they are reduction
/// indices (backward-filter B).
struct WindowPixel {
    /// The pixel exists.
    exists: Pred,
    /// The pixel exists and has at least one tap inside its rows (`t_lo ≤ t_hi`).
    ok: Pred,
    /// Forward and backward-filter: its window's top input row `ih0 = oh·SH − PH` (wrapping
    /// below zero); backward-data: its input row `h`.
    row0: Reg<U32>,
    /// Its window tap 0 of channel 0 (`x` also of kernel row 0): `x` windows `base + ih0·W
    /// + iw0`, backward-data `base + ⌊(w + PW) / SW⌋ − ⌊(KW − 1) / SW⌋` (wrapping).
    pix0: Reg<U32>,
    /// The column of window tap 0 (`iw0`, wrapping below zero).
    col0: Reg<U32>,
    /// Stride-2 windows ([`Conv::strided_words`]): per distance `d = 1, 2, ..`, lane `j − d`
    /// does not hold pixel `ow − d` of the same output row (`j < d` or `ow < d`).
    alone: Vec<Pred>,
    /// Its first and last window tap inside the row (`0 ≤ t_lo`, `t_hi <`
    /// [`Conv::window_taps`]).
    tap_lo: Reg<U32>,
    tap_hi: Reg<U32>,
    /// Per reduction tap `kw`: its window tap `t` ([`Conv::window_tap`]) has `t_lo ≤ t ≤
    /// t_hi`, and backward-data's `kw ≡ w + PW (mod SW)`.
    tap_ok: Vec<Pred>,
}

/// Where a lane's [`WindowPixel`] comes from.
enum LanePixel {
    /// Fixed: the lane's tile row (forward and backward-data A).
    Fixed(WindowPixel),
    /// Backward-filter's B: the reduction index `k0 + lane`, in the group whose first `x`
    /// element of an image is `group_start` (`g·Cg·H·W`) past the image's; its window rows
    /// are the same in every tile (held up to [`MAX_HELD_ROWS_KW`]).
    PerTile {
        group_start: Reg<U32>,
        rows: Option<WindowRows>,
    },
}

/// A thread's window rows for its `E` window indices `first ..+ E`: the first row
/// `⌊first / KW⌋`, the row `(channel, kh, exists)` of the first `j` of those `<
/// ⌈(E + KW − 1) / KW⌉` it needs (the others found where read, [`Conv::window_row_at`]),
/// and per phase `ph = 1 .. KW − 1` whether `first mod KW ≥ ph`.
struct WindowRows {
    row0: Reg<U32>,
    rows: Vec<(Reg<U32>, Reg<U32>, Pred)>,
    phases: Vec<Pred>,
}

/// A thread's share under [`Strategy::Windows`](super::gather::Strategy::Windows): what
/// stays fixed along the reduction.
pub(super) struct WindowLane {
    /// Its pixel.
    pixel: LanePixel,
    /// `2·lane`: the first element of its window word.
    lane_elem: Reg<U32>,
    /// Its lane among those reading the same window rows: the warp's lane, or in
    /// backward-filter `t mod K` (a half-warp's for f32), the pixel `k0 + lane`.
    lane: Reg<U32>,
    /// The first warp lane of its group ([`Conv::window_group`]) where groups are
    /// half-warps (f32 backward-filter).
    group_base: Option<Reg<U32>>,
    /// Its first window index (`(ci, kh, kw)` in the weight's order) and where its `E`
    /// elements go: forward and backward-data the tile's reduction index `E·⌊t / 64⌋`, at
    /// its pixel's row; backward-filter the filter column `block_n + E·⌊t / K⌋` (rows
    /// `E·⌊t / K⌋ ..+ E` of the B tile), at column `lane`.
    first: Reg<U32>,
    /// The byte offset in the stage of its first element (of its rotated first half in
    /// f32 backward-filter).
    slot_bytes: Reg<U32>,
    /// f32 backward-filter's rotated stores ([`Conv::store_filter_columns`]).
    rotation: Option<Rotation>,
    /// Elements of the tensor read in whole 32-bit words: the window never reads past them.
    words_end: Reg<U32>,
    /// Elements of one channel plane of it ([`Conv::window_plane`]).
    plane: Reg<U32>,
}

/// f32 backward-filter: odd half-warps store element `(s + E / 2) mod E` at store `s`, so
/// [`WindowLane::slot_bytes`] is `E / 2` rows further there, and stores `s ≥ E / 2` go
/// `high_bytes` from it (`E` rows nearer, wrapping; 0 in even half-warps).
struct Rotation {
    odd_half: Pred,
    high_bytes: Reg<U32>,
}

/// The run of whole sectors a group reads for one window row.
struct Span {
    /// Its first element (sector-aligned).
    start: Reg<U32>,
    /// Elements it holds (0 where no lane reads the row).
    len: Reg<U32>,
}

/// One `(ci, kh)` row's window, as a lane sees it.
struct Window {
    /// The lane's tap-0 element minus the window's first.
    offset: Reg<U32>,
    /// Elements the window holds (0 where no lane reads the row).
    len: Reg<U32>,
    /// What the lane takes its taps from.
    held: Held,
}

/// A lane's view of its taps in a [`Window`] of pairs of elements, lane `L` loading
/// elements `2L, 2L + 1`.
enum Held {
    /// Halves: the lane's word, and `(word, shift)` of the even and the odd taps `t`, at
    /// `t / 2` words further: `offset + t` is in word `⌊offset / 2⌋` (even `t`) or
    /// `⌊offset / 2⌋ + offset mod 2` (odd `t`), at bit 16 where `offset + t` is odd.
    Halves {
        word: Reg<U32>,
        taps: [(Reg<U32>, Reg<U32>); 2],
    },
    /// f32: the pairs of lanes `⌊offset / 2⌋ + i` (`i ≤ ⌊taps / 2⌋`, every pair the taps
    /// touch), and whether `offset` is odd: tap `t` is element `(p + t) mod 2` of pair
    /// `⌊(p + t) / 2⌋`, `p = offset mod 2`.
    Pairs {
        pairs: Vec<[Reg<U32>; 2]>,
        odd: Pred,
    },
}

impl<T: ConvElem + TileElem> Conv<T> {
    /// The thread's [`WindowLane`].
    pub(super) fn window_lane(&self, k: &mut KernelBuilder, tid: Reg<U32>) -> WindowLane {
        assert!(
            T::TYPE.bytes() == 2 || self.pass != Pass::BackwardData || self.p.sw == 1,
            "f32 `gy` windows need consecutive pixels on consecutive elements"
        );
        let p = &self.p;
        let plane = self.window_plane(k);
        let bytes = T::TYPE.bytes();
        let (lane, pixel, first, slot_bytes, rotation, group_base) = match self.pass {
            Pass::BackwardFilter => {
                // `K` lanes per pixel run: a warp of halves, a half-warp of f32.
                let lane = k.and(tid, T::TILE_K - 1);
                let owner = k.shr(tid, T::TILE_K.trailing_zeros());
                let row = k.mul_lo(owner, Self::ELEMS_PER_THREAD);
                let first = k.add(self.block_n, row);
                let first_channel = k.mul_lo(self.group, p.cg);
                let group_start = k.mul_lo(first_channel, plane);
                let slot = k.mad_lo(row, Self::ROW, lane);
                let slot = k.mul_lo(slot, bytes);
                let (slot_bytes, rotation) = match WARP / T::TILE_K {
                    1 => (slot, None),
                    _ => {
                        let odd = k.and(owner, 1u32);
                        let odd_half = k.setp(CmpOp::Ne, odd, 0u32);
                        let half_rows = Self::ELEMS_PER_THREAD / 2 * Self::ROW * bytes;
                        let shift = k.mul_lo(odd, half_rows);
                        let rotation = Rotation {
                            odd_half,
                            high_bytes: k.mul_lo(odd, (2 * half_rows).wrapping_neg()),
                        };
                        (k.add(slot, shift), Some(rotation))
                    }
                };
                let pixel = LanePixel::PerTile {
                    group_start,
                    rows: (p.kw <= MAX_HELD_ROWS_KW)
                        .then(|| self.window_rows_from(k, first, self.rows_per_thread())),
                };
                let group_base = (T::TILE_K < WARP).then(|| k.and(tid, WARP - T::TILE_K));
                (lane, pixel, first, slot_bytes, rotation, group_base)
            }
            _ => {
                let lane = k.and(tid, WARP - 1);
                let row = k.and(tid, TILE_M - 1);
                let part = k.shr(tid, TILE_M.trailing_zeros());
                let col0 = k.mul_lo(part, Self::ELEMS_PER_THREAD);
                let slot = k.mad_lo(row, Self::ROW, col0);
                let slot = k.mul_lo(slot, bytes);
                let coord = self.row_coord(k, Side::A, row);
                let pixel = LanePixel::Fixed(self.window_pixel(k, coord, lane));
                (lane, pixel, col0, slot, None, None)
            }
        };
        let channels = match self.pass {
            Pass::BackwardData => p.c_out,
            _ => p.c_in,
        };
        let planes = k.mul_lo(self.d.batch, channels);
        let elems = k.mul_lo(planes, plane);
        WindowLane {
            pixel,
            lane_elem: k.shl(lane, 1u32),
            lane,
            group_base,
            first,
            slot_bytes,
            rotation,
            words_end: k.and(elems, !1u32),
            plane,
        }
    }

    /// The [`WindowPixel`] of the pixel at `coord` (a window origin, or backward-data's
    /// input pixel).
    fn window_pixel(&self, k: &mut KernelBuilder, coord: Coord, lane: Reg<U32>) -> WindowPixel {
        let p = &self.p;
        let (row0, across) = coord.at.expect("windowed pixels have a position");
        // The first column the window taps read, the width of the tensor read, and
        // backward-data's residue `r = (w + PW) mod SW` (only taps `kw ≡ r` read `gy`).
        let (first_col, width, residue) = match self.pass {
            Pass::BackwardData => {
                let reach = k.add(across, p.pw);
                let a = if p.sw == 1 {
                    reach
                } else {
                    div_const(k, reach, p.sw)
                };
                let residue = (p.sw > 1).then(|| rem_const(k, reach, p.sw));
                let first = k.sub(a, self.window_taps() - 1);
                (first, self.d.ow, residue)
            }
            _ => (across, self.d.w, None),
        };
        let pix0 = match self.pass {
            Pass::BackwardData => first_col,
            _ => k.mad_lo(row0, width, first_col),
        };
        let pix0 = k.add(pix0, coord.base);
        // Signed: `t_lo = max(0, −first_col)`, `t_hi = min(taps − 1, width − 1 − first_col)`.
        let first_s: Reg<S32> = first_col.retype();
        let neg = k.neg(first_s);
        let tap_lo = k.max(neg, 0i32);
        let right = k.sub(width, first_col);
        let right: Reg<S32> = k.sub(right, 1u32).retype();
        let tap_hi = k.min(right, self.window_taps() as i32 - 1);
        let has_tap = k.setp(CmpOp::Le, tap_lo, tap_hi);
        let ok = k.and_pred(coord.ok, has_tap);
        let tap_ok = (0..p.kw)
            .map(|kw| {
                let t = self.window_tap(kw) as i32;
                let from_lo = k.setp(CmpOp::Le, tap_lo, t);
                let to_hi = k.setp(CmpOp::Ge, tap_hi, t);
                let inside = k.and_pred(from_lo, to_hi);
                match residue {
                    Some(r) => {
                        let on_grid = k.setp(CmpOp::Eq, r, kw % p.sw);
                        k.and_pred(inside, on_grid)
                    }
                    None => inside,
                }
            })
            .collect();
        // Pixel `ow − d` sits `2d` columns left: `2·ow = iw0 + PW`.
        let twice_ow = k.add(first_col, p.pw);
        let alone = (1..self.strided_words().unwrap_or(1))
            .map(|d| {
                let first_lanes = k.setp_lt(lane, d);
                let row_start = k.setp_lt(twice_ow, 2 * d);
                k.or_pred(first_lanes, row_start)
            })
            .collect();
        WindowPixel {
            exists: coord.ok,
            ok,
            row0,
            pix0,
            col0: first_col,
            alone,
            tap_lo: tap_lo.retype(),
            tap_hi: tap_hi.retype(),
            tap_ok,
        }
    }

    /// Words per lane of a stride-2 window row (forward and backward-filter `x` at stride 2
    /// along `w`): taps `at + t`, `t < KW`, lie in words `⌊at / 2⌋ ..+ ⌊KW / 2⌋ + 1`
    /// ([`Self::strided_taps`]); `None` for the sector windows.
    fn strided_words(&self) -> Option<u32> {
        (self.pass != Pass::BackwardData && self.p.sw == 2).then_some(self.p.kw / 2 + 1)
    }

    /// Window rows `(channel, kh)` that exist: `Cg·KH` (`x`), `Og·KH` (`gy`).
    fn window_rows(&self) -> u32 {
        match self.pass {
            Pass::BackwardData => self.p.og * self.p.kh,
            _ => self.p.cg * self.p.kh,
        }
    }

    /// Window taps per row: `KW` (forward), `⌊(KW − 1) / SW⌋ + 1` (backward-data).
    fn window_taps(&self) -> u32 {
        match self.pass {
            Pass::BackwardData => (self.p.kw - 1) / self.p.sw + 1,
            _ => self.p.kw,
        }
    }

    /// The window tap reduction tap `kw` reads: `kw` (forward), `⌊(KW − 1) / SW⌋ −
    /// ⌊kw / SW⌋` (backward-data).
    fn window_tap(&self, kw: u32) -> u32 {
        match self.pass {
            Pass::BackwardData => self.window_taps() - 1 - kw / self.p.sw,
            _ => kw,
        }
    }

    /// Elements of one channel plane of the tensor the windows read: `H·W` (`x`, forward),
    /// `OH·OW` (`gy`, backward-data).
    fn window_plane(&self, k: &mut KernelBuilder) -> Reg<U32> {
        match self.pass {
            Pass::BackwardData => self.d.ohw,
            _ => k.mul_lo(self.d.h, self.d.w),
        }
    }

    /// The tap-0 element of window row `(channel, kh)` in this lane (`plane`:
    /// [`Self::window_plane`]) and whether its row exists: forward `ih = ih0 + kh·DH < H`, at `channel·H·W + pix0 + kh·DH·W`;
    /// backward-data the output row `oh` tap `kh` reads from input row `h`
    /// ([`output_coord`]), at `channel·OH·OW + pix0 + oh·OW`.
    fn window_row(
        &self,
        k: &mut KernelBuilder,
        lane: &WindowPixel,
        plane: Reg<U32>,
        (channel, kh): (Reg<U32>, Reg<U32>),
    ) -> (Reg<U32>, Pred) {
        let p = &self.p;
        match self.pass {
            Pass::BackwardData => {
                let (oh, oh_ok) = output_coord(k, lane.row0, kh, p.ph, p.dh, p.sh, self.d.oh);
                let at = k.mad_lo(channel, plane, lane.pix0);
                (k.mad_lo(oh, self.d.ow, at), oh_ok)
            }
            _ => {
                let dh = if p.dh == 1 { kh } else { k.mul_lo(kh, p.dh) };
                let ih = k.add(lane.row0, dh);
                let ih_ok = k.setp_lt(ih, self.d.h);
                let at = k.mad_lo(channel, plane, lane.pix0);
                (k.mad_lo(dh, self.d.w, at), ih_ok)
            }
        }
    }

    /// The [`WindowRows`] of window indices `first ..+ E`, with the first `rows` rows.
    fn window_rows_from(&self, k: &mut KernelBuilder, first: Reg<U32>, rows: u32) -> WindowRows {
        let p = &self.p;
        let row0 = div_const(k, first, p.kw);
        let row0_col = k.mul_lo(row0, p.kw);
        let phase = k.sub(first, row0_col);
        let phases = (1..p.kw).map(|ph| k.setp_ge(phase, ph)).collect();
        let rows = (0..rows).map(|j| self.window_row_at(k, row0, j)).collect();
        WindowRows { row0, rows, phases }
    }

    /// Window rows a thread reads per tile: `⌈(E + KW − 1) / KW⌉`.
    fn rows_per_thread(&self) -> u32 {
        (Self::ELEMS_PER_THREAD + self.p.kw - 1).div_ceil(self.p.kw)
    }

    /// Row `row0 + j` as `(channel, kh, exists)`.
    fn window_row_at(
        &self,
        k: &mut KernelBuilder,
        row0: Reg<U32>,
        j: u32,
    ) -> (Reg<U32>, Reg<U32>, Pred) {
        let r = k.add(row0, j);
        let channel = div_const(k, r, self.p.kh);
        let kh = rem_const(k, r, self.p.kh);
        (channel, kh, k.setp_lt(r, self.window_rows()))
    }

    /// Fills the thread's `E` elements of `op`'s slot at `stage` for reduction tile `k0`.
    pub(super) fn fill_windows(
        &self,
        k: &mut KernelBuilder,
        op: &Operand<T>,
        (stage, k0): (Reg<U32>, Reg<U32>),
        lane: &WindowLane,
    ) {
        let p = &self.p;
        let bits = k.cast_ptr::<T, T::Bits>(op.src);
        let words = k.cast_ptr::<T, U32>(op.src);
        // Rows found per tile: those read at some phases only are found inside their branch.
        let always = Self::ELEMS_PER_THREAD.div_ceil(p.kw);
        let (per_tile, per_tile_rows);
        let (pixel, rows) = match &lane.pixel {
            LanePixel::Fixed(pixel) => {
                let first = k.add(k0, lane.first);
                per_tile_rows = self.window_rows_from(k, first, always);
                (pixel, &per_tile_rows)
            }
            LanePixel::PerTile { group_start, rows } => {
                let kk = k.add(k0, lane.lane);
                let coord = self.column_coord(k, op.side, kk);
                let coord = Coord {
                    base: k.add(coord.base, *group_start),
                    ..coord
                };
                per_tile = self.window_pixel(k, coord, lane.lane);
                let rows = match rows {
                    Some(held) => held,
                    None => {
                        per_tile_rows = self.window_rows_from(k, lane.first, always);
                        &per_tile_rows
                    }
                };
                (&per_tile, rows)
            }
        };
        let phases = &rows.phases;
        let plane = lane.plane;
        let values = Self::ELEMS_PER_THREAD + p.kw - 1;
        // Row `j`'s taps that are values (all `KW` but in the last row).
        let row_values = |j: u32| p.kw.min(values - j * p.kw);
        let row_taps = |k: &mut KernelBuilder, j: u32| {
            let (channel, kh, in_k) = match rows.rows.get(j as usize) {
                Some(&row) => row,
                None => self.window_row_at(k, rows.row0, j),
            };
            let (at, row_ok) = self.window_row(k, pixel, plane, (channel, kh));
            let ok = k.and_pred(pixel.ok, row_ok);
            let ok = k.and_pred(ok, in_k);
            let count = row_values(j);
            match self.strided_words() {
                None => self.sector_taps(k, (words, bits), (at, ok), lane, pixel, count),
                Some(_) => {
                    let load = k.and_pred(pixel.exists, row_ok);
                    let load = k.and_pred(load, in_k);
                    self.strided_taps(k, (words, bits), (at, ok, load), lane, pixel, count)
                }
            }
        };
        // Row `j` holds values `j·KW ..`, used from phase `j·KW − E + 1` on: the last row
        // only at the high phases where `E` is not a multiple of `KW` (f32's `E` = 8 over 3
        // taps: phase 2 only). Read where any lane of the warp needs it (the phase is the
        // warp's, or in f32 backward-filter each half-warp's), so the window's shuffles and
        // votes run in whole warps.
        let mut v: Vec<Reg<U32>> = Vec::with_capacity(values as usize);
        for j in 0..self.rows_per_thread() {
            match (j * p.kw).checked_sub(Self::ELEMS_PER_THREAD) {
                Some(d) => {
                    let held: Vec<Reg<U32>> =
                        (0..row_values(j)).map(|_| k.var::<U32>(0u32)).collect();
                    let needed = k.vote(VoteMode::Any, phases[d as usize]);
                    k.if_then(needed, |k| {
                        for (&h, value) in held.iter().zip(row_taps(k, j)) {
                            k.assign(h, value);
                        }
                    });
                    v.extend(held);
                }
                None => v.extend(row_taps(k, j)),
            }
        }
        let elems: Vec<Reg<U32>> = (0..Self::ELEMS_PER_THREAD as usize)
            .map(|e| {
                phases
                    .iter()
                    .zip(1..)
                    .fold(v[e], |acc, (&at_least, d)| k.selp(v[e + d], acc, at_least))
            })
            .collect();
        let dst = k.add(stage, lane.slot_bytes);
        match self.pass {
            Pass::BackwardFilter => self.store_filter_columns(k, dst, lane, &elems),
            // f32 forward (stride 2): each element is a word.
            _ if T::TYPE.bytes() == 4 => store_words(k, dst, &elems),
            // The halves sit in the low 16 bits: `prmt` packs two into a word.
            _ => {
                let words: Vec<Reg<U32>> = elems
                    .chunks_exact(2)
                    .map(|pair| k.prmt(pair[0], pair[1], LOW_HALVES))
                    .collect();
                store_words(k, dst, &words);
            }
        }
    }

    /// Backward-filter: element `e` is filter column `first + e`, stored `e` rows further at
    /// column `lane`. Halves store each from its word's low 16 bits. f32 half-warps store
    /// 16-word row pieces, and rows 8 apart (160 words) share all banks, so at store `s`
    /// the odd half-warp stores element `(s + 4) mod 8` ([`WindowLane::slot_bytes`]): the
    /// two halves' rows are then 12 or 4 apart (240 or 80 words ≡ 16 banks), conflict-free.
    fn store_filter_columns(
        &self,
        k: &mut KernelBuilder,
        dst: Reg<U32>,
        lane: &WindowLane,
        elems: &[Reg<U32>],
    ) {
        let half = elems.len() / 2;
        let high = lane
            .rotation
            .as_ref()
            .map(|r| (r.odd_half, k.add(dst, r.high_bytes)));
        for (s, &elem) in elems.iter().enumerate() {
            let offset = (s as u32 * Self::ROW * T::TYPE.bytes()) as i32;
            match high {
                Some((odd, high_dst)) => {
                    let rotated = elems[(s + half) % elems.len()];
                    let elem = k.selp(rotated, elem, odd);
                    k.st_shared(if s < half { dst } else { high_dst }, offset, elem);
                }
                None => {
                    let bits = k.cvt::<T::Bits, U32>(elem, None);
                    k.st_shared(dst, offset, bits);
                }
            }
        }
    }

    /// The values (raw bits in the low 16 bits of a word, 0 outside) of the lane's first
    /// `count` taps of the window row whose tap-0 element is `at` (`ok`: the lane reads some
    /// tap of it), read from the row's sector window ([`Self::load_window`]).
    fn sector_taps(
        &self,
        k: &mut KernelBuilder,
        (words, bits): (GlobalPtr<U32>, GlobalPtr<T::Bits>),
        (at, ok): (Reg<U32>, Pred),
        lane: &WindowLane,
        pixel: &WindowPixel,
        count: u32,
    ) -> Vec<Reg<U32>> {
        let window = self.load_window(k, words, (at, ok), lane, pixel);
        let taps: Vec<(u32, Pred, Reg<U32>)> = (0..count)
            .map(|kw| {
                let t = self.window_tap(kw);
                let tap_ok = k.and_pred(ok, pixel.tap_ok[kw as usize]);
                (t, tap_ok, self.window_element(k, &window, t, tap_ok))
            })
            .collect();
        // A lane whose taps the window misses (pixels not on consecutive `iw`, or a run
        // wider than the window) loads them on its own; the branch is warp-uniform.
        let first = k.add(window.offset, pixel.tap_lo);
        let last = k.add(window.offset, pixel.tap_hi);
        let first_out = k.setp_ge(first, window.len);
        let last_out = k.setp_ge(last, window.len);
        let out = k.or_pred(first_out, last_out);
        let missed = k.and_pred(ok, out);
        let any_missed = k.vote(VoteMode::Any, missed);
        k.if_then(any_missed, |k| {
            for &(t, tap_ok, value) in &taps {
                let pos = k.add(window.offset, t);
                let outside = k.setp_ge(pos, window.len);
                let alone = k.and_pred(tap_ok, outside);
                load_alone(k, bits, (at, t), alone, value);
            }
        });
        taps.into_iter().map(|tap| tap.2).collect()
    }

    /// [`Self::sector_taps`] at stride 2 along `w`, where the lanes of one output row read
    /// every other element: pixel `ow`'s taps `at + t` lie in its `n` words `⌊at / 2⌋ + i`
    /// ([`Self::strided_words`]), and pixel `ow − d`'s are `d` words lower. Each lane loads
    /// only its last word `⌊at / 2⌋ + n − 1` (where it holds an element of the row and lies
    /// in the tensor's whole words), so the 32-bit words of an output row's lanes are
    /// consecutive and cover the row's run as whole sectors, and takes word `i < n − 1` from
    /// lane `j − (n − 1 − i)` (`shfl.sync.up`). Tap `t` is element `p + t` of the words
    /// (`p = at mod 2`), i.e. bytes `2·(p + t mod 2)` of words `⌊t / 2⌋, ⌊t / 2⌋ + 1`: one
    /// `prmt` per tap, with a selector per parity. Lanes whose word `i` no lane holds (`j <
    /// d` or `ow < d`, [`WindowPixel::alone`], or their last word past the tensor's whole
    /// words) load those taps on their own, behind a warp-uniform branch. `load`: the lane's
    /// pixel exists and the row is inside the input and the reduction.
    fn strided_taps(
        &self,
        k: &mut KernelBuilder,
        (words, bits): (GlobalPtr<U32>, GlobalPtr<T::Bits>),
        (at, ok, load): (Reg<U32>, Pred, Pred),
        lane: &WindowLane,
        pixel: &WindowPixel,
        count: u32,
    ) -> Vec<Reg<U32>> {
        let n = pixel.alone.len() + 1;
        // Arithmetic shift: `at` is below zero (wrapped) left of the tensor's first element.
        let at_signed: Reg<S32> = at.retype();
        let first_word: Reg<S32> = k.shr(at_signed, 1u32);
        let own = k.add(first_word.retype::<U32>(), n as u32 - 1);
        // The own word's elements `2·own, 2·own + 1` meet the row `at − iw0 ..+ W`.
        let own_elem = k.shl(own, 1u32);
        let row_start = k.sub(at, pixel.col0);
        let own_last = k.add(own_elem, 1u32);
        let from_start = k.setp_ge(own_last, row_start);
        let row_end = k.add(row_start, self.d.w);
        let before_end = k.setp_lt(own_elem, row_end);
        let in_row = k.and_pred(from_start, before_end);
        let whole = k.setp_lt(own_elem, lane.words_end);
        let loads = k.and_pred(load, in_row);
        let loads = k.and_pred(loads, whole);
        // A unit of two elements: one 32-bit word of halves, two of f32 (`ld.v2`).
        let unit: Vec<Reg<U32>> = (0..T::TYPE.bytes() / 2)
            .map(|_| k.var::<U32>(0u32))
            .collect();
        k.if_then(loads, |k| match *unit.as_slice() {
            [word] => {
                let addr = k.elem_addr(words, own);
                let loaded = k.ld_global_nc::<U32>(addr, 0);
                k.assign(word, loaded);
            }
            [lo, hi] => {
                let addr = k.elem_addr(words, own_elem);
                let [first, second] = k.ld_global_v2::<U32>(addr, 0, true);
                k.assign(lo, first);
                k.assign(hi, second);
            }
            _ => unreachable!("units hold two halves or two f32"),
        });
        let mut held: Vec<Vec<Reg<U32>>> = (1..n as u32)
            .rev()
            .map(|d| {
                unit.iter()
                    .map(|&r| k.shfl(ShflMode::Up, r, d, 0, ALL_LANES))
                    .collect()
            })
            .collect();
        held.push(unit);
        let parity = k.and(at, 1u32);
        // Halves: selectors of the low 16 bits, bytes `2·(p + t mod 2)` of `(held[⌊t /
        // 2⌋], held[⌊t / 2⌋ + 1])`.
        let selectors = (T::TYPE.bytes() == 2).then(|| {
            let even_sel = k.mad_lo(parity, 0x22u32, 0x10u32);
            [even_sel, k.add(even_sel, 0x22u32)]
        });
        let odd = k.setp(CmpOp::Ne, parity, 0u32);
        let even = k.setp(CmpOp::Eq, parity, 0u32);
        let past = k.setp_ge(own_elem, lane.words_end);
        // Word `i` of the lane, from lane `j − d` (`d = n − 1 − i`): that lane does not
        // hold it (`None` for the own word).
        let unheld = |i: u32| {
            let d = (n - 1).checked_sub(i as usize)?;
            pixel.alone.get(d.checked_sub(1)?).copied()
        };
        let taps: Vec<(u32, Pred, Reg<U32>)> = (0..count)
            .map(|kw| {
                let t = self.window_tap(kw);
                let tap_ok = k.and_pred(ok, pixel.tap_ok[kw as usize]);
                let i = (t / 2) as usize;
                let value = match selectors {
                    Some(sel) => {
                        let next = held[(i + 1).min(n - 1)][0];
                        k.prmt(held[i][0], next, sel[(t % 2) as usize])
                    }
                    // f32: element `p + t` is word `(p + t) mod 2` of unit `⌊(p + t) / 2⌋`.
                    None => {
                        let from_odd = held[(t as usize).div_ceil(2)][(t as usize + 1) % 2];
                        k.selp(from_odd, held[i][(t % 2) as usize], odd)
                    }
                };
                // Its word: `⌊t / 2⌋` for even `p`, `⌊(t + 1) / 2⌋` for odd.
                let unheld_even = unheld(t / 2).map(|a| k.and_pred(a, even));
                let unheld_odd = unheld(t.div_ceil(2)).map(|a| k.and_pred(a, odd));
                let missed = [unheld_even, unheld_odd]
                    .into_iter()
                    .flatten()
                    .fold(past, |acc, q| k.or_pred(acc, q));
                let missed = k.and_pred(tap_ok, missed);
                (t, missed, k.selp(value, 0u32, tap_ok))
            })
            .collect();
        let any = taps
            .iter()
            .map(|tap| tap.1)
            .reduce(|acc, q| k.or_pred(acc, q))
            .expect("a row has taps");
        let any_missed = k.vote(VoteMode::Any, any);
        k.if_then(any_missed, |k| {
            for &(t, missed, value) in &taps {
                load_alone(k, bits, (at, t), missed, value);
            }
        });
        taps.into_iter().map(|tap| tap.2).collect()
    }

    /// The run of whole sectors holding every element the reading lanes (`ok`) of this
    /// lane's group need of the row whose tap-0 element is `at`: from the first reading
    /// lane's first tap to the last one's last, at most `cap` elements and never past the
    /// tensor's whole words.
    fn window_span(
        &self,
        k: &mut KernelBuilder,
        (at, ok): (Reg<U32>, Pred),
        lane: &WindowLane,
        pixel: &WindowPixel,
        cap: u32,
    ) -> Span {
        let sector = SECTOR_BYTES / T::TYPE.bytes();
        let warp_mask = k.ballot(ok);
        let mask = match lane.group_base {
            Some(base) => {
                let shifted = k.shr(warp_mask, base);
                k.and(shifted, (1u32 << self.window_group()) - 1)
            }
            None => warp_mask,
        };
        // The first reading lane is the count of bits below the lowest set one; the last
        // assumes the reading lanes are consecutive (else fewer elements land in the window).
        let below = k.sub(mask, 1u32);
        let through_lowest = k.xor(mask, below);
        let count = k.popc(mask);
        let first_plus_one = k.popc(through_lowest);
        let first_lane = k.sub(first_plus_one, 1u32);
        let last_lane = k.add(first_lane, count);
        let last_lane = k.sub(last_lane, 1u32);
        let lo = k.add(at, pixel.tap_lo);
        let lo = self.group_shfl(k, lo, first_lane);
        let hi = k.add(at, pixel.tap_hi);
        let hi = self.group_shfl(k, hi, last_lane);
        let start = k.and(lo, !(sector - 1));
        let end = k.add(hi, sector);
        let end = k.and(end, !(sector - 1));
        let end = k.min(end, lane.words_end);
        let full = k.add(start, cap);
        let end = k.min(end, full);
        let len = k.sub(end, start);
        let none = k.setp(CmpOp::Eq, mask, 0u32);
        let len = k.selp(0u32, len, none);
        Span { start, len }
    }

    /// Lanes that read the same window rows: the warp, or in f32 backward-filter (`K` = 16
    /// pixels per row) a half-warp.
    fn window_group(&self) -> u32 {
        match self.pass {
            Pass::BackwardFilter => T::TILE_K.min(WARP),
            _ => WARP,
        }
    }

    /// `value` from lane `source mod G` of this lane's group ([`Self::window_group`]):
    /// `shfl.sync.idx` over segments of `G` lanes.
    fn group_shfl(&self, k: &mut KernelBuilder, value: Reg<U32>, source: Reg<U32>) -> Reg<U32> {
        let group = self.window_group();
        let segments = ((WARP - group) << 8) | (group - 1);
        k.shfl(ShflMode::Idx, value, source, segments, ALL_LANES)
    }

    /// The window of the row whose tap-0 element is `at` in this lane (`ok`: the lane reads
    /// some tap of it): lane `L` of the group loads elements `2L, 2L + 1` of the row's
    /// [`Span`] (one 32-bit word of halves, an `ld.v2` of f32), so the span holds up to `2·G`
    /// elements ([`Self::window_group`]).
    fn load_window(
        &self,
        k: &mut KernelBuilder,
        words: GlobalPtr<U32>,
        (at, ok): (Reg<U32>, Pred),
        lane: &WindowLane,
        pixel: &WindowPixel,
    ) -> Window {
        let cap = 2 * self.window_group();
        let Span { start, len } = self.window_span(k, (at, ok), lane, pixel, cap);
        let inside = k.setp_lt(lane.lane_elem, len);
        let offset = k.sub(at, start);
        let half_offset = k.shr(offset, 1u32);
        let odd = k.and(offset, 1u32);
        let held = match T::TYPE.bytes() {
            2 => {
                let first_word = k.shr(start, 1u32);
                let word = k.add(first_word, lane.lane);
                let addr = k.elem_addr(words, word);
                let word = k.var::<U32>(0u32);
                k.if_then(inside, |k| {
                    let loaded = k.ld_global_nc::<U32>(addr, 0);
                    k.assign(word, loaded);
                });
                let even_shift = k.shl(odd, 4u32);
                let odd_word = k.add(half_offset, odd);
                let odd_shift = k.sub(16u32, even_shift);
                Held::Halves {
                    word,
                    taps: [(half_offset, even_shift), (odd_word, odd_shift)],
                }
            }
            _ => {
                let first = k.add(start, lane.lane_elem);
                let addr = k.elem_addr(words, first);
                let pair = [k.var::<U32>(0u32), k.var::<U32>(0u32)];
                k.if_then(inside, |k| {
                    let loaded = k.ld_global_v2::<U32>(addr, 0, true);
                    for (held, value) in pair.into_iter().zip(loaded) {
                        k.assign(held, value);
                    }
                });
                let pairs = (0..=self.window_taps() / 2)
                    .map(|i| {
                        let from = if i == 0 {
                            half_offset
                        } else {
                            k.add(half_offset, i)
                        };
                        pair.map(|word| self.group_shfl(k, word, from))
                    })
                    .collect();
                let odd = k.setp(CmpOp::Ne, odd, 0u32);
                Held::Pairs { pairs, odd }
            }
        };
        Window { offset, len, held }
    }

    /// Element `at + t` of this lane from the window, its raw bits in the low bits of a
    /// word (0 unless `ok`).
    fn window_element(&self, k: &mut KernelBuilder, window: &Window, t: u32, ok: Pred) -> Reg<U32> {
        let value = match &window.held {
            Held::Halves { word, taps } => {
                let (at, shift) = taps[(t % 2) as usize];
                let at = if t >= 2 { k.add(at, t / 2) } else { at };
                let w = self.group_shfl(k, *word, at);
                k.shr(w, shift)
            }
            Held::Pairs { pairs, odd } => {
                let t = t as usize;
                let from_odd = pairs[t.div_ceil(2)][(t + 1) % 2];
                k.selp(from_odd, pairs[t / 2][t % 2], *odd)
            }
        };
        k.selp(value, 0u32, ok)
    }
}

/// Element `at + t` of `bits` (widened to a word) into `value` where `alone` holds: a tap
/// no window holds for this lane.
fn load_alone<B: Scalar>(
    k: &mut KernelBuilder,
    bits: GlobalPtr<B>,
    (at, t): (Reg<U32>, u32),
    alone: Pred,
    value: Reg<U32>,
) {
    k.if_then(alone, |k| {
        let index = k.add(at, t);
        let addr = k.elem_addr(bits, index);
        let loaded = k.ld_global_nc::<B>(addr, 0);
        let widened = match B::TYPE.bits() {
            32 => loaded.retype(),
            _ => k.cvt::<U32, _>(loaded, None),
        };
        k.assign(value, widened);
    });
}
