//! The tensor-core pipeline shared by the tiled NF4 GEMMs on sm_80+ (f16/bf16 activations).
//!
//! Both GEMMs multiply an activation tile of [`Shape::rows`] rows (`A` forward, `G_C`
//! backward: `m` rows, the reduction along the row; 64, or 128 for the tall forward) by a
//! 64-wide slice of the packed weight, [`TC_K`] reduction elements per pipeline stage, in a
//! `cp.async` ring ([`Shape`]):
//!
//! - **Activation tile** `rows × TC_K` halves → shared rows padded to [`A_STRIDE`] halves (144
//!   bytes: the 8 rows one `ldmatrix` phase reads start 4 banks apart, conflict-free) → A
//!   fragments by `ldmatrix.x4`. Copies are 16 bytes when the row length is a multiple of 8
//!   halves, else 8 or 4 (rows of an even length always start 4-byte aligned); a chunk past the
//!   matrix edge is zero-filled (`cp.async` src-size 0, reading from the matrix base).
//! - **Packed codes** (forward): 64 rows × 32 bytes (64 codes) per stage, rows padded to [`W_STRIDE`] =
//!   48 bytes (rows 12 words apart: 8 rows read with 16-byte loads, or 4 even / 4 odd rows read
//!   with 4-byte loads, land in distinct banks), by `cp.async` ([`super::code_stage`]): 16-, 8-
//!   or 4-byte chunks as the packed row length `k / 2` allows; when it is not a multiple of 4,
//!   the 9 aligned words covering each row's 32 bytes (the row then starts `lead` bytes into its
//!   staged row, and the readers add it). Codes are never widened in shared memory: each lane
//!   turns its codes into B-fragment registers itself ([`Pipeline::half`]: `half_dequant`).
//!
//! The backward stages wider windows ([`Shape`]: 128 bytes of codes per row, 2 stages).
//!
//! Copies that only move along the reduction are formed once per thread: the activation rows'
//! starts and source sizes when rows are whole [`TC_K`] slices ([`ActCopies`]), the forward's
//! code rows likewise ([`Pipeline::fix_code_rows`]); each stage then issues `add`, `mad.wide`,
//! `cp.async` per chunk. Warps whose rows below `m` fit their first `short_tiles` m16 tiles
//! (one: every block at `m ≤ 16` on 64 rows) load and multiply only those
//! ([`Pipeline::mma_steps`]), warps of the forward's second warp row whose rows all lie past
//! `m` skip the slice ([`Pipeline::busy_warp`]), and outputs are stored two columns per
//! 32-bit word when rows have an even length.
//!
//! The ring (`stages` deep): tiles `t + 1 .. t + stages − 1` are in flight while tile `t` is
//! multiplied; each step waits for its own group (`wait_group stages − 2`), synchronises,
//! refills the slot freed by the previous step and commits one group even when empty, so the
//! group count stays uniform.

use super::slice_reduce::SumRange;
use super::{absmax_at, Entry};
use crate::builder::{
    FragA, FragB, FragC, GlobalPtr, KernelBuilder, MmaInput, PackedHalf, Reg, Scalar, F32,
    M16N8K16, U32,
};
use crate::ir::{CacheLevel, VoteMode};
use crate::templates::nf4::Nf4Config;
use crate::templates::staging::{copy_elems, copy_piece};

use super::absmax_stage::AbsmaxStage;
pub(super) use super::code_stage::CodeWindow;
use super::code_stage::{CodeStage, FixedRowCopies};
pub(super) use super::half_dequant::CodeLookup;
use super::half_dequant::HalfCodes;
use super::U8;

/// Reduction elements per pipeline stage.
pub const TC_K: u32 = 64;
/// Rows of the staged code tile (weight rows of the forward, reduction rows of the backward).
const CODE_ROWS: u32 = 64;
/// Padded activation row in halves.
pub const A_STRIDE: u32 = TC_K + 8;
/// Padded code row of the forward in bytes (`TC_K / 2 = 32` bytes of codes).
pub const W_STRIDE: u32 = 48;

/// The ring's depth, activation rows and staged code window, per GEMM.
#[derive(Clone, Copy)]
pub(super) struct Shape {
    /// Pipeline depth.
    pub stages: u32,
    /// Rows of the activation tile (output rows per block).
    pub rows: u32,
    /// Warps stacked along the rows: warp `w` covers rows `(w / (8 / warp_rows)) · rows /
    /// warp_rows ..` (`rows / (16 · warp_rows)` m16 tiles, so each B fragment it dequantises
    /// serves that many `mma`) and is column warp `w mod (8 / warp_rows)` of its warp row.
    /// More warp rows cut the activation `ldmatrix` traffic per `mma` (each warp reads only
    /// its rows) at the price of more dequantisation per `mma` (each weight is dequantised
    /// once per warp row).
    pub warp_rows: u32,
    /// m16 tiles a warp multiplies when its rows below `m` fit them ([`Pipeline::mma_steps`]).
    pub short_tiles: u32,
    /// Bytes of codes per staged row, and shared bytes from one staged row to the next.
    pub code_width: u32,
    pub code_stride: u32,
    /// Where B fragments' codes are looked up ([`HalfCodes`]).
    pub lookup: CodeLookup,
}

impl Shape {
    /// The forward: 64 activation rows in two warp rows of 32 (2 × 4 warps, each 32 rows × 16
    /// columns: per k16 step 2 `ldmatrix.x4` serve 4 `mma`, where one warp over all 64 rows
    /// and 8 columns needed 4), 64 weight rows × 32 bytes (the slice's 64 codes), 3 stages; a
    /// warp whose rows below `m` fit one m16 tile multiplies only that one, and one whose
    /// rows all lie past `m` (the second warp row at `m ≤ 32`) skips the slice's work.
    pub const FORWARD: Self = Self {
        stages: 3,
        rows: 64,
        warp_rows: 2,
        short_tiles: 1,
        code_width: TC_K / 2,
        code_stride: W_STRIDE,
        lookup: CodeLookup::Registers,
    };

    /// The tall forward (large `m`): 128 activation rows in two warp rows of 64 (2 × 4 warps,
    /// each 64 rows × 16 columns): per k16 step a warp's 4 `ldmatrix.x4` serve 8 `mma` (2
    /// shared wavefronts per `mma`, where one warp over all 128 rows and 8 columns read 4) and
    /// each of its two dequantised B fragments serves 4. 2 stages keep the activation ring
    /// (18 KiB a stage) and the code ring within 48 KiB of static shared memory. A warp whose
    /// rows below `m` fit one m16 tile multiplies only that one, and one whose rows all lie
    /// past `m` (the last block of a ragged `m`) skips the slice's work.
    pub const FORWARD_TALL: Self = Self {
        stages: 2,
        rows: 128,
        warp_rows: 2,
        short_tiles: 1,
        ..Self::FORWARD
    };

    /// Shared bytes of one activation stage.
    const fn a_stage_bytes(&self) -> u32 {
        self.rows * A_STRIDE * 2
    }

    /// Warps side by side in a warp row.
    pub const fn warp_cols(&self) -> u32 {
        super::WARPS / self.warp_rows
    }

    /// Rows each warp covers.
    pub const fn warp_span(&self) -> u32 {
        self.rows / self.warp_rows
    }
}

/// Whether the target runs the tensor-core GEMMs: `mma.m16n8k16`, `cp.async`, `ldmatrix` and
/// packed f32 → f16x2/bf16x2 conversion (sm_80+). Older targets keep the CUDA-core GEMMs.
pub fn tensor_cores(cfg: &Nf4Config) -> bool {
    let a = cfg.arch;
    a.has_mma_m16n8k16() && a.has_cp_async() && a.has_ldmatrix() && a.has_packed_f32_conversion()
}

/// The code window of a reduction slice (`window(k, tile)` in [`Pipeline::run`]).
pub(super) type WindowFn<'a> = &'a dyn Fn(&mut KernelBuilder, Reg<U32>) -> CodeWindow;
/// The per-slice multiply (`multiply(k, tile, slot)` in [`Pipeline::run`]).
pub(super) type MultiplyFn<'a> = &'a mut dyn FnMut(&mut KernelBuilder, Reg<U32>, Reg<U32>);

/// One n8 tile of a k16 step: its B fragment's two packed registers and its accumulators
/// (one per m16 tile).
pub(super) type NTile<'a, T> = (
    Vec<Reg<<T as PackedHalf>::Pair>>,
    &'a [FragC<M16N8K16, F32>],
);

/// One staged operand's place in the ring and in global memory.
pub(super) struct Pipeline<T: PackedHalf> {
    /// Activation matrix (`rows × a_cols`, row-major) and its compile-time row length.
    act: GlobalPtr<T>,
    a_cols: u32,
    /// Shared byte addresses of the activation and code rings (taken once).
    a_tiles: Reg<U32>,
    w_tiles: Reg<U32>,
    stages: u32,
    /// Activation rows per block and per warp, shared bytes per activation stage, and the m16
    /// tiles a warp multiplies when its rows below `m` fit them.
    rows: u32,
    warp_span: u32,
    a_stage_bytes: u32,
    short_tiles: u32,
    /// The staged code window: 64 rows × `code_width` bytes, rows `code_stride` apart.
    pub codes: CodeStage,
    /// The code copies formed once, when the GEMM's windows keep their rows
    /// ([`Self::fix_code_rows`]).
    fixed_codes: Option<FixedRowCopies>,
    /// The window's absmax, when the GEMM stages them with its codes ([`Self::stage_absmax`]).
    pub absmax: Option<AbsmaxStage>,
    tid: Reg<U32>,
    /// Rows of the activation matrix (`m`), first row of this block's tile and of this warp's
    /// rows.
    m: Reg<U32>,
    m_base: Reg<U32>,
    m_warp: Reg<U32>,
    /// Whether the warp's rows below `m` all lie in its first `short_tiles` m16 tiles
    /// ([`Self::mma_steps`]).
    short: crate::builder::Pred,
    /// Whether some of the warp's rows lie below `m`, when the block has several warp rows
    /// ([`Self::busy_warp`]).
    busy: Option<crate::builder::Pred>,
    pub lane: Reg<U32>,
    /// Shared byte address of this lane's `ldmatrix` row in slot 0 of the activation ring.
    a_lane0: Reg<U32>,
    /// This thread's activation copies, formed once ([`ActCopies`]); `None` when rows are not
    /// whole slices of 16-byte chunks.
    act_copies: Option<ActCopies>,
    pub warp: Reg<U32>,
    /// This warp's place among the warps of its warp row ([`Shape::warp_rows`]; the warp
    /// itself when there is one warp row).
    pub warp_col: Reg<U32>,
    /// `lane / 4` and `lane % 4`: the mma fragment coordinates.
    pub group: Reg<U32>,
    pub quad: Reg<U32>,
    /// The code table in `T` that B fragments are dequantised from.
    pub half: HalfCodes<T>,
}

impl<T: PackedHalf> Pipeline<T>
where
    M16N8K16: MmaInput<T, Packed = T::Pair>,
{
    /// Declares the rings of `shape` and locates the thread; `a_cols` is the activation row
    /// length.
    pub fn setup<O: Scalar>(
        k: &mut KernelBuilder,
        (cfg, e): (&Nf4Config, &Entry<T, O>),
        a_cols: u32,
        shape: Shape,
    ) -> Self {
        let codes = CodeStage::new(cfg, CODE_ROWS, shape.code_width, shape.code_stride);
        let a_ring = k.shared_array::<U8>("a_ring", shape.stages * shape.a_stage_bytes());
        let code_ring = k.shared_array::<U8>("code_ring", shape.stages * codes.stage_bytes());
        let a_tiles = k.shared_base(a_ring);
        let w_tiles = k.shared_base(code_ring);
        let tid = k.tid_x();
        let lane = k.and(tid, 31u32);
        let warp = k.shr(tid, 5u32);
        let group = k.shr(lane, 2u32);
        let quad = k.and(lane, 3u32);
        let by = k.ctaid_y();
        let m_base = k.mul_lo(by, shape.rows);
        let (warp_row, warp_col) = if shape.warp_rows == 1 {
            (None, warp)
        } else {
            let cols = shape.warp_cols();
            let row = k.shr(warp, cols.trailing_zeros());
            (Some(row), k.and(warp, cols - 1))
        };
        let m_warp = match warp_row {
            Some(r) => k.mad_lo(r, shape.warp_span(), m_base),
            None => m_base,
        };
        let row = k.and(lane, 15u32);
        let row = match warp_row {
            Some(r) => k.mad_lo(r, shape.warp_span(), row),
            None => row,
        };
        let lane_half = k.shr(lane, 4u32);
        let col = k.mul_lo(lane_half, 8u32);
        let halves = k.mad_lo(row, A_STRIDE, col);
        let a_lane_offset = k.mul_lo(halves, 2u32);
        let a_lane0 = k.add(a_tiles, a_lane_offset);
        let half = HalfCodes::new(k, tid, shape.lookup);
        let past_short = k.add(m_warp, 16 * shape.short_tiles);
        let short = k.setp_ge(past_short, e.m);
        let busy = warp_row.map(|_| k.setp_lt(m_warp, e.m));
        // With several warp rows both depend on the warp (`tid / 32`), which the validator
        // cannot tell apart from per-lane data: `vote.any` of a predicate every lane of the
        // warp computes alike restates it as a visibly warp-uniform one for the branches.
        let (short, busy) = match busy {
            Some(busy) => {
                let short = k.vote(VoteMode::Any, short);
                (short, Some(k.vote(VoteMode::Any, busy)))
            }
            None => (short, None),
        };
        let act_copies = ActCopies::new(k, (e.input, a_cols, e.m), (tid, m_base), shape.rows);
        Self {
            act: e.input,
            a_cols,
            a_tiles,
            w_tiles,
            stages: shape.stages,
            rows: shape.rows,
            warp_span: shape.warp_span(),
            a_stage_bytes: shape.a_stage_bytes(),
            short_tiles: shape.short_tiles,
            codes,
            fixed_codes: None,
            absmax: None,
            tid,
            m: e.m,
            m_base,
            m_warp,
            short,
            busy,
            lane,
            a_lane0,
            act_copies,
            warp,
            warp_col,
            group,
            quad,
            half,
        }
    }

    /// Stages each code window's absmax too, in a ring of its own ([`AbsmaxStage`]), staged
    /// rows `row_words` words apart.
    pub fn stage_absmax<O: Scalar>(
        &mut self,
        k: &mut KernelBuilder,
        (cfg, e): (&Nf4Config, &Entry<T, O>),
        row_words: u32,
    ) {
        let threads = (self.tid, super::THREADS);
        let shape = (self.stages, CODE_ROWS, row_words);
        let cols = 2 * self.codes.width();
        self.absmax = Some(AbsmaxStage::new(k, (cfg, e, cols), shape, threads));
    }

    /// Every code window starts at weight row `row0` (only its bytes move): form the copies
    /// once where the rows allow ([`CodeStage::fixed_rows`]).
    pub fn fix_code_rows(&mut self, k: &mut KernelBuilder, row0: Reg<U32>) {
        self.fixed_codes = self.codes.fixed_rows(k, row0, (self.tid, super::THREADS));
    }

    fn slot_base(k: &mut KernelBuilder, ring: Reg<U32>, bytes: u32, slot: Reg<U32>) -> Reg<U32> {
        k.mad_lo(slot, bytes, ring)
    }

    /// Shared byte address of ring slot `slot` of the code tiles.
    pub fn code_slot(&self, k: &mut KernelBuilder, slot: Reg<U32>) -> Reg<U32> {
        Self::slot_base(k, self.w_tiles, self.codes.stage_bytes(), slot)
    }

    /// `offset` bytes into slot 0 of the code tiles; [`Self::code_slot_at`] moves it to a slot.
    pub fn code_lane(&self, k: &mut KernelBuilder, offset: Reg<U32>) -> Reg<U32> {
        k.add(self.w_tiles, offset)
    }

    /// The same place as `lane` ([`Self::code_lane`]) in ring slot `slot`.
    pub fn code_slot_at(&self, k: &mut KernelBuilder, lane: Reg<U32>, slot: Reg<U32>) -> Reg<U32> {
        Self::slot_base(k, lane, self.codes.stage_bytes(), slot)
    }

    /// Starts the copies of reduction slice `tile` into ring slot `slot`: activation columns
    /// `TC_K · tile ..` of the block's rows, and the code window `codes`.
    pub fn load_stage<O: Scalar>(
        &self,
        k: &mut KernelBuilder,
        e: &Entry<T, O>,
        tile: Reg<U32>,
        slot: Reg<U32>,
        codes: &CodeWindow,
    ) {
        let col0 = k.mul_lo(tile, TC_K);
        self.load_activations(k, col0, slot);
        let stage = self.code_slot(k, slot);
        match &self.fixed_codes {
            Some(fixed) => fixed.issue(k, e.weights.packed, stage, codes.byte0),
            None => self.codes.copy(
                k,
                e.weights.packed,
                (self.tid, super::THREADS),
                codes,
                stage,
            ),
        }
        if let Some(absmax) = &self.absmax {
            absmax.fill(k, &e.weights, codes, slot);
        }
    }

    /// `a_ring[slot][r][c] = act[m_base + r, col0 + c]` (0 outside): by `cp.async` when rows
    /// have an even length, element by element otherwise.
    fn load_activations(&self, k: &mut KernelBuilder, col0: Reg<U32>, slot: Reg<U32>) {
        let stage = Self::slot_base(k, self.a_tiles, self.a_stage_bytes, slot);
        if let Some(copies) = &self.act_copies {
            return copies.issue(k, stage, col0);
        }
        let elems = copy_elems(self.a_cols, 8);
        let per_row = TC_K / elems;
        if elems == 1 {
            k.comment("copy the activation tile element by element (odd row length)");
        } else {
            k.comment("cp.async the activation tile");
        }
        for i in 0..self.rows * per_row / super::THREADS {
            let c = k.add(self.tid, i * super::THREADS);
            let row = k.shr(c, per_row.trailing_zeros());
            let chunk = k.and(c, per_row - 1);
            let col = k.mul_lo(chunk, elems);
            let dst_off = k.mad_lo(row, A_STRIDE, col);
            let dst = k.mad_lo(dst_off, 2u32, stage);
            let grow = k.add(self.m_base, row);
            let gcol = k.add(col0, col);
            let inside = super::both_below(k, grow, self.m, gcol, self.a_cols);
            let index = k.mad_lo(grow, self.a_cols, gcol);
            copy_piece(k, self.act, index, inside, dst, elems);
        }
    }

    /// This lane's `ldmatrix` row address in slot `slot` of the activation ring: row
    /// `lane % 16` of the warp's rows, column `8 · (lane / 16)` (add `16 · A_STRIDE · mi + 16 · s` halves for m16
    /// tile `mi`, k16 step `s`).
    pub fn a_lane(&self, k: &mut KernelBuilder, slot: Reg<U32>) -> Reg<U32> {
        Self::slot_base(k, self.a_lane0, self.a_stage_bytes, slot)
    }

    /// k16 steps `first ..` of the slice, `steps[i]` the n8 tiles `(b_regs, acc)` of step
    /// `first + i`: per step and m16 tile `mi` its A fragment by `ldmatrix.x4`, then for each
    /// n8 tile (B fragment from its two packed registers) `acc[mi] += A[mi] · B` (one A
    /// fragment live at a time). When the warp's rows below `m` fit its first `short_tiles`
    /// m16 tiles (`m_warp + 16 · short_tiles ≥ m`: every block at `m ≤ 16` on the 64-row
    /// forward) only those are loaded and multiplied: the others hold rows past `m`,
    /// zero-filled, whose results are never stored (one warp-uniform branch per call).
    pub fn mma_steps(
        &self,
        k: &mut KernelBuilder,
        a_lane: Reg<U32>,
        first: u32,
        steps: &[Vec<NTile<'_, T>>],
    ) {
        let multiply = |k: &mut KernelBuilder, m_tiles: u32| {
            for (s, n_tiles) in (first..).zip(steps) {
                let b: Vec<_> = n_tiles
                    .iter()
                    .map(|(b_regs, _)| FragB::<M16N8K16, T>::from_regs(b_regs))
                    .collect();
                for mi in 0..m_tiles {
                    let a = self.a_fragment(k, a_lane, s, mi);
                    for ((_, acc), b) in n_tiles.iter().zip(&b) {
                        let c = &acc[mi as usize];
                        k.mma_into(c, &a, b, c);
                    }
                }
            }
        };
        let all = self.warp_span / 16;
        if self.short_tiles >= all {
            return multiply(k, all);
        }
        k.if_else(
            self.short,
            |k| multiply(k, self.short_tiles),
            |k| multiply(k, all),
        );
    }

    /// Runs `body` (a slice's dequantisation and `mma`) in warps that have rows below `m`:
    /// with several warp rows, the last block of a ragged `m` may hold warps whose rows all
    /// lie past it, whose results are never stored (a warp-uniform branch, no barrier
    /// inside).
    pub fn busy_warp(&self, k: &mut KernelBuilder, body: impl FnOnce(&mut KernelBuilder)) {
        match self.busy {
            Some(busy) => k.if_then(busy, body),
            None => body(k),
        }
    }

    /// The A fragment of k16 step `s` for m16 tile `mi`.
    fn a_fragment(
        &self,
        k: &mut KernelBuilder,
        a_lane: Reg<U32>,
        s: u32,
        mi: u32,
    ) -> FragA<M16N8K16, T> {
        k.ldmatrix(a_lane, (2 * (mi * 16 * A_STRIDE + s * 16)) as i32)
    }

    /// [`Self::store`] for an even row length `cols`: each accumulator row's two columns
    /// `col0, col0 + 1` (even, so the pair is aligned) stored by one instruction at an
    /// immediate offset from the lane's first element, rounded by one
    /// `cvt.rn.{f16x2,bf16x2}.f32` into a word, or as f32 partials one `st.global.v2.f32`
    /// (every workspace part starts 16 bytes aligned); a pair is inside when its row is below
    /// `m` and `col0 < cols`.
    fn store_pairs<O: crate::builder::Float>(
        k: &mut KernelBuilder,
        (output, range): (GlobalPtr<O>, &SumRange),
        (row0, m): (Reg<U32>, Reg<U32>),
        (col0, cols): (Reg<U32>, u32),
        acc: &[FragC<M16N8K16, F32>],
    ) {
        let partials = O::TYPE == crate::ir::Type::F32;
        if partials {
            k.comment("store the f32 partial tile, two columns per 64-bit store");
        } else {
            k.comment("store the output tile, two columns per 32-bit store");
        }
        let col_inside = k.setp_lt(col0, cols);
        let rows = k.selp(m, 0u32, col_inside);
        let index = k.mad_lo(row0, cols, col0);
        let index = range.output_index(k, index);
        let first = k.elem_addr(output, index);
        for (mi, frag) in acc.iter().enumerate() {
            let v = frag.f32_regs();
            for h in 0..2u32 {
                let dr = 16 * mi as u32 + 8 * h;
                let row = k.add(row0, dr);
                let inside = k.setp_lt(row, rows);
                let offset = (O::TYPE.bytes() * dr * cols) as i32;
                k.if_then(inside, |k| {
                    let i = 2 * h as usize;
                    if partials {
                        k.st_global_v2::<F32>(first, offset, [v[i], v[i + 1]]);
                    } else {
                        let pair = k.pack_f32_pair::<T>(v[i], v[i + 1]);
                        k.st_global(first, offset, pair);
                    }
                });
            }
        }
    }

    /// The warp's accumulators of one n8 tile (one 16 × 8 per m16 tile of the warp's rows),
    /// zeroed.
    pub fn zero_acc(&self, k: &mut KernelBuilder) -> Vec<FragC<M16N8K16, F32>> {
        (0..self.warp_span / 16)
            .map(|_| k.frag_c_zero::<M16N8K16, T, F32>())
            .collect()
    }

    /// The ring around `multiply(k, tile, slot)` over the reduction slices `tiles`: prologue,
    /// per-tile wait + barrier + refill, final `wait_all`. `window(k, tile)` gives the code
    /// window of reduction slice `tile`; slots count from the span's first tile.
    pub fn run<O: Scalar>(
        &self,
        k: &mut KernelBuilder,
        e: &Entry<T, O>,
        tiles: TileSpan,
        window: WindowFn<'_>,
        multiply: MultiplyFn<'_>,
    ) {
        k.comment("prologue: start the first stages");
        for s in 0..self.stages - 1 {
            let start = |k: &mut KernelBuilder| {
                let slot = k.var::<U32>(s);
                let tile = tiles.tile(k, slot);
                let w = window(k, tile);
                self.load_stage(k, e, tile, slot, &w);
            };
            match tiles {
                TileSpan::All(count) if s < count => start(k),
                TileSpan::All(_) => {}
                TileSpan::Slice { count, .. } => {
                    let present = k.setp(crate::ir::CmpOp::Gt, count, s);
                    k.if_then(present, start);
                }
            }
            k.cp_async_commit();
        }
        k.for_range(0u32, tiles.count(), 1u32, |k, local| {
            k.comment("wait for this slice, then refill the slot freed last step");
            k.cp_async_wait_group(self.stages - 2);
            k.bar_sync();
            let next = k.add(local, self.stages - 1);
            let present = k.setp_lt(next, tiles.count());
            k.if_then(present, |k| {
                let slot = k.rem(next, self.stages);
                let tile = tiles.tile(k, next);
                let w = window(k, tile);
                self.load_stage(k, e, tile, slot, &w);
            });
            k.cp_async_commit();
            let slot = k.rem(local, self.stages);
            let tile = tiles.tile(k, local);
            multiply(k, tile, slot);
        });
        k.cp_async_wait_all();
    }

    /// `out[m_warp + 16·mi + g (+8), tile_col + 2t + {0, 1}] = acc[mi]` inside `m × cols`,
    /// `tile_col` the warp's n8 tile (the accumulator layout: registers 0, 1 on row `g`, 2, 3
    /// on row `g + 8`): the output rounded to `O`, or a K slice's f32 partials in its part of
    /// the workspace (`range`).
    pub fn store<O: crate::builder::Float>(
        &self,
        k: &mut KernelBuilder,
        (e, range): (&Entry<T, O>, &SumRange),
        (tile_col, cols): (Reg<U32>, u32),
        acc: &[FragC<M16N8K16, F32>],
    ) {
        let col0 = k.mad_lo(self.quad, 2u32, tile_col);
        let row0 = k.add(self.m_warp, self.group);
        if cols.is_multiple_of(2) {
            let to = (e.output, range);
            return Self::store_pairs(k, to, (row0, self.m), (col0, cols), acc);
        }
        k.comment("store the output tile (odd rows: element by element)");
        for (mi, frag) in acc.iter().enumerate() {
            for (i, v) in frag.f32_regs().into_iter().enumerate() {
                let row = k.add(row0, 16 * mi as u32 + 8 * (i as u32 / 2));
                let col = k.add(col0, i as u32 % 2);
                let inside = super::both_below(k, row, self.m, col, cols);
                k.if_then(inside, |k| {
                    let index = k.mad_lo(row, cols, col);
                    let index = range.output_index(k, index);
                    super::store_output(k, e.output, index, v);
                });
            }
        }
    }
}

/// The reduction slices [`Pipeline::run`] multiplies.
#[derive(Clone, Copy)]
pub(super) enum TileSpan {
    /// Slices `0 .. count` (the unsplit GEMMs).
    All(u32),
    /// Slices `first .. first + count` (a K slice of the split forward).
    Slice { first: Reg<U32>, count: Reg<U32> },
}

impl TileSpan {
    /// The [`TC_K`]-wide slices of reduction columns `range` of `0 .. len` (a slice's start a
    /// multiple of [`TC_K`]).
    pub fn of(k: &mut KernelBuilder, range: &SumRange, len: u32) -> Self {
        let Some(start) = range.offset() else {
            return Self::All(len.div_ceil(TC_K));
        };
        let first = k.shr(start, TC_K.trailing_zeros());
        let cols = k.sub(range.end, start);
        let rounded = k.add(cols, TC_K - 1);
        let count = k.shr(rounded, TC_K.trailing_zeros());
        Self::Slice { first, count }
    }

    fn count(&self) -> crate::builder::Val<U32> {
        match *self {
            Self::All(count) => count.into(),
            Self::Slice { count, .. } => count.into(),
        }
    }

    /// The slice `local` slices into the span.
    fn tile(&self, k: &mut KernelBuilder, local: Reg<U32>) -> Reg<U32> {
        match *self {
            Self::All(_) => local,
            Self::Slice { first, .. } => k.add(first, local),
        }
    }
}

/// The absmax of weight element `row · k + col`, the index clamped into the weight so that
/// lanes working past its edge (whose products are discarded or multiplied by zero) still
/// read in bounds.
pub(super) fn absmax_clamped<T: Scalar, O: Scalar>(
    k: &mut KernelBuilder,
    cfg: &Nf4Config,
    e: &Entry<T, O>,
    row: Reg<U32>,
    col: impl Into<crate::builder::Val<U32>>,
) -> Reg<F32> {
    let elem = k.mad_lo(row, cfg.k, col);
    let last = (cfg.weight_elements() - 1) as u32;
    let elem = k.min(elem, last);
    absmax_at(k, &e.weights, elem)
}

/// One thread's share of the activation copies when rows are a whole number of [`TC_K`]
/// slices of 16-byte chunks (`a_cols % 64 = 0`): every chunk of a slice lies inside its row,
/// so all that depends on the slice is its first column. Thread `tid` copies chunk `tid % 8`
/// of rows `tid / 8 + 32i` (`i < rows / 32`); the row's start (0 past `m`: a valid address read zero bytes) and
/// source size are formed once, and each stage issues `add`, `mad.wide`, `cp.async` per chunk.
struct ActCopies {
    /// Row starts (elements) and source bytes of the thread's chunks, first one first.
    rows: Vec<(Reg<U32>, Reg<U32>)>,
    /// Column of the thread's chunk in a slice, and its shared byte offset in a stage.
    col: Reg<U32>,
    dst: Reg<U32>,
    act: crate::builder::Reg<crate::builder::U64>,
}

/// Rows per pass of the block's threads over a stage: 8 chunks of 8 halves per row.
const CHUNKS_PER_ROW: u32 = TC_K / 8;
const ROWS_PER_PASS: u32 = super::THREADS / CHUNKS_PER_ROW;

impl ActCopies {
    fn new<T: Scalar>(
        k: &mut KernelBuilder,
        (act, a_cols, m): (GlobalPtr<T>, u32, Reg<U32>),
        (tid, m_base): (Reg<U32>, Reg<U32>),
        tile_rows: u32,
    ) -> Option<Self> {
        if !a_cols.is_multiple_of(TC_K) {
            return None;
        }
        let row = k.shr(tid, CHUNKS_PER_ROW.trailing_zeros());
        let chunk = k.and(tid, CHUNKS_PER_ROW - 1);
        let col = k.mul_lo(chunk, 8u32);
        let dst_halves = k.mad_lo(row, A_STRIDE, col);
        let dst = k.mul_lo(dst_halves, 2u32);
        let first = k.add(m_base, row);
        let rows = (0..tile_rows / ROWS_PER_PASS)
            .map(|i| {
                let grow = k.add(first, i * ROWS_PER_PASS);
                let inside = k.setp_lt(grow, m);
                let start = k.mul_lo(grow, a_cols);
                let start = k.selp(start, 0u32, inside);
                let bytes = k.selp(16u32, 0u32, inside);
                (start, bytes)
            })
            .collect();
        Some(Self {
            rows,
            col,
            dst,
            act: act.addr,
        })
    }

    /// Starts this thread's copies of the slice from column `col0` into the stage at `stage`.
    fn issue(&self, k: &mut KernelBuilder, stage: Reg<U32>, col0: Reg<U32>) {
        k.comment("cp.async the activation tile (row starts formed once)");
        let dst = k.add(stage, self.dst);
        let col = k.add(col0, self.col);
        for (i, &(start, bytes)) in self.rows.iter().enumerate() {
            let index = k.add(start, col);
            let src = k.mad_wide(index, 2u32, self.act);
            let offset = (2 * i as u32 * ROWS_PER_PASS * A_STRIDE) as i32;
            k.cp_async_zfill_at(CacheLevel::Cg, dst, offset, src, 16, bytes);
        }
    }
}
