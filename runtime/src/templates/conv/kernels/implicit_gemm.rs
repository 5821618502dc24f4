//! `conv2d_implicit_gemm` and `conv2d_bwd_data_implicit_gemm`: the forward convolution and its
//! input gradient as implicit GEMMs on tensor cores (f16 and bf16 on targets with
//! `mma.m16n8k16`; f32 accumulation). Both share everything below but the operand addressing
//! and the output indexing ([`Pass`]).
//!
//! **Forward.**
//! Per group `g`, `Y_g [M, Og] = A [M, K] · W_gᵀ` with `M = N·OH·OW` output pixels and
//! `K = Cg·KH·KW`. Row `m = (n·OH + oh)·OW + ow` of A is the receptive field of that pixel,
//! gathered straight from `x` with im2col addressing (no `cols` buffer): reduction index `k`
//! is `(ci, kh, kw)` in the weight's order — `ci·KH·KW + kh·KW + kw` for NCHW,
//! `(kh·KW + kw)·Cg + ci` for NHWC — and reads `x[n, g·Cg + ci, oh·SH − PH + kh·DH,
//! ow·SW − PW + kw·DW]`, 0 in the padding. The weight rows `W[g·Og + o, 0..K]` are already
//! contiguous in `k`, i.e. the column-major B operand, so B fragments come from plain
//! (untransposed) `ldmatrix`.
//!
//! The block tile is the shared [`crate::templates::warp_mma`] one (MoE's expert GEMMs run
//! the same): [`THREADS`] threads (4 warps, 2 × 2) compute a [`TILE_M`] × [`TILE_N`] tile
//! (pixels × output channels of one group); grid `(⌈M / 64⌉, ⌈Og / 64⌉, groups)`. The
//! `cp.async` ring, the `ldmatrix` fragment loads from padded rows and the `mma` loop are
//! that module's; this one only fills ring slots (the im2col addressing) and stores.
//!
//! Filling a tile moves chunks of 8 consecutive `k` of one row:
//! - with `cp.async` 16 bytes (zero-filled, `src-size 0`, where the chunk lies outside the
//!   problem or in the padding) when the 8 elements are contiguous and 16-byte aligned in
//!   global memory: A chunks in NHWC when `Cg` and `C_in` are multiples of 8 (one pixel's
//!   channels); B chunks when `K` is a multiple of 8;
//! - otherwise element by element (predicated 16-bit loads, zeros outside, `st.shared.u16`)
//!   into the same ring slot, which is free because every thread has passed the barrier after
//!   its last use. NCHW's A is always gathered this way: consecutive `k` there are
//!   neighbouring taps, strided and misaligned in `x`.
//!
//! The epilogue adds the bias in f32, rounds once to the storage type and stores inside
//! `M × Og` only.
//!
//! **Backward-data** (NCHW). Per image `n` and group `g`, `dX [M, Cg] = A [M, K] · B [K, Cg]`
//! with `M = H·W` input pixels, `K = Og·KH·KW` and `k = o·KH·KW + kh·KW + kw`:
//! `A[(h, w), k] = gy[n, g·Og + o, oh, ow]` where `oh·SH = h + PH − kh·DH` exactly and
//! `0 ≤ oh < OH` (likewise `ow`), 0 otherwise (the taps that skip this pixel under the
//! stride, or fall outside the output); `B[k, c] = w[g·Og + o, c, kh, kw]`, stored `[c][k]`
//! like the forward's B so the same untransposed `ldmatrix` reads it. The grid is
//! `(⌈H·W / 64⌉, ⌈Cg / 64⌉, N·G)`: a tile never spans two images, so no run-time division
//! by `H·W` is needed. Consecutive `k` are neighbouring taps (A) and, across `o`, rows
//! `Cg·KH·KW` apart (B), so both are gathered element by element — except B when `KH·KW` is a
//! multiple of 8 (a chunk then stays within one `o` and is 16-byte aligned). Every `dx`
//! element is one dot product summed in `k` order by one warp's `mma` chain: deterministic,
//! no atomics.

use super::common::{
    div_const, load_or_zero, output_coord, rem_const, ConvElem, DimParams, Dims, Problem,
};
use crate::arch::Arch;
use crate::builder::{
    GlobalPtr, KernelBuilder, MmaInput, PackedHalf, Pred, Reg, SharedArr, M16N8K16, U16, U32,
};
use crate::dtype::DType;
use crate::ir::CacheLevel;
use crate::templates::conv::{Conv2dConfig, Layout};
use crate::templates::warp_mma::{
    self as tile, Accumulators, WarpPos, CHUNK, CHUNKS_PER_THREAD, TILE_K, WARP_N_TILES,
};

/// The forward entry name.
pub const ENTRY: &str = "conv2d_implicit_gemm";
/// The backward-data entry name.
pub const ENTRY_BWD_DATA: &str = "conv2d_bwd_data_implicit_gemm";

/// Which implicit GEMM a kernel computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pass {
    /// `y` from `x` and `w` (NCHW or NHWC), with the bias.
    Forward,
    /// `dx` from `gy` and `w` (NCHW).
    BackwardData,
}

impl Pass {
    /// The entry name.
    const fn entry(self) -> &'static str {
        match self {
            Pass::Forward => ENTRY,
            Pass::BackwardData => ENTRY_BWD_DATA,
        }
    }
}
pub use crate::templates::warp_mma::{THREADS, TILE_M, TILE_N};

/// One 8-element chunk this thread fills in every stage: tile row `row`, columns
/// `col..col + 8`, and what stays fixed about its global row along the whole K loop.
struct Chunk {
    /// Column within the tile (a multiple of 8).
    col: Reg<U32>,
    /// Byte offset within a stage.
    slot_bytes: Reg<U32>,
    /// The global row exists (pixel `< M`, or GEMM column `< N`).
    row_ok: Pred,
    /// The global row's fixed part of its element indices (see [`Conv::a_index`] and
    /// [`Conv::b_index`]).
    base: Reg<U32>,
    /// A only. Forward: the receptive field's top-left input position `(oh·SH − PH,
    /// ow·SW − PW)` (wrapping below zero, so one unsigned compare checks both ends).
    /// Backward-data: the input pixel `(h, w)`.
    origin: Option<(Reg<U32>, Reg<U32>)>,
}

/// One output channel of this lane in the epilogue: the channel within the group, whether it
/// exists, and its bias.
type OutputColumn<A> = (Reg<U32>, Pred, Option<Reg<A>>);

/// Everything the phases share.
struct Conv<T: ConvElem> {
    p: Problem,
    pass: Pass,
    layout: Layout,
    d: Dims,
    /// The A source: `x` (forward) or `gy` (backward-data).
    a_src: GlobalPtr<T>,
    w: GlobalPtr<T>,
    bias: Option<GlobalPtr<T>>,
    /// The output: `y` (forward) or `dx` (backward-data).
    out: GlobalPtr<T>,
    /// The GEMM rows: `N·OH·OW` (forward) or `H·W` of this block's image (backward-data).
    pixels: Reg<U32>,
    /// Backward-data: this block's image.
    image: Option<Reg<U32>>,
    group: Reg<U32>,
    block_m: Reg<U32>,
    block_n: Reg<U32>,
    /// The thread's lane and warp quadrant.
    pos: WarpPos,
    a_tiles: SharedArr<T>,
    b_tiles: SharedArr<T>,
    a_chunks: Vec<Chunk>,
    b_chunks: Vec<Chunk>,
}

/// Whether this configuration has the tensor-core entry of `pass`: f16/bf16 on a target with
/// `mma.m16n8k16` (other dtypes and older targets keep the CUDA-core entries); backward-data
/// in the NCHW layout only (the NHWC module has forward entries only).
pub(crate) fn available(cfg: &Conv2dConfig, pass: Pass) -> bool {
    let layout_ok = pass == Pass::Forward || cfg.layout == Layout::Nchw;
    matches!(cfg.dtype, DType::F16 | DType::BF16) && cfg.arch.has_mma_m16n8k16() && layout_ok
}

/// Builds `conv2d_implicit_gemm(x, w, [bias,] y, dims…)` or
/// `conv2d_bwd_data_implicit_gemm(gy, w, dx, dims…)`.
pub(crate) fn build<T: ConvElem + PackedHalf>(
    cfg: &Conv2dConfig,
    arch: Arch,
    pass: Pass,
) -> KernelBuilder
where
    M16N8K16: MmaInput<T>,
{
    let mut k = KernelBuilder::new(pass.entry(), arch);
    let c = Conv::<T>::setup(&mut k, cfg, pass);
    let mut acc = [tile::zero_acc::<T>(&mut k)];
    let (a_lane, b_lane) = c.pos.fragment_offsets(&mut k, T::TYPE.bytes());
    let fill = |k: &mut KernelBuilder, k_tile: Reg<U32>, slot: Reg<U32>| c.fill(k, k_tile, slot);
    tile::run_ring(&mut k, c.k_len().div_ceil(TILE_K), &fill, &mut |k, slot| {
        let a_stage = tile::stage_base(k, c.a_tiles, slot);
        let b_stage = tile::stage_base(k, c.b_tiles, slot);
        let a_at = k.add(a_stage, a_lane);
        let b_at = k.add(b_stage, b_lane);
        tile::multiply_tile::<T>(k, &mut acc, a_at, &[b_at]);
    });
    c.store(&mut k, &acc[0]);
    k
}

impl<T: ConvElem + PackedHalf> Conv<T> {
    /// Declares the parameters and shared tiles and locates the thread and its chunks.
    fn setup(k: &mut KernelBuilder, cfg: &Conv2dConfig, pass: Pass) -> Self {
        let p = Problem::new(cfg);
        k.require_block([THREADS, 1, 1]);
        let (a_name, out_name) = match pass {
            Pass::Forward => ("x", "y"),
            Pass::BackwardData => ("gy", "dx"),
        };
        let a_src = k.param_ptr::<T>(a_name);
        let w = k.param_ptr::<T>("w");
        let bias = (pass == Pass::Forward && p.bias).then(|| k.param_ptr::<T>("bias"));
        let out = k.param_ptr::<T>(out_name);
        let dims = DimParams::declare(k);
        let (a_src, w, out) = (k.global_ptr(a_src), k.global_ptr(w), k.global_ptr(out));
        let bias = bias.map(|b| k.global_ptr(b));
        let d = dims.load(k);
        let a_tiles = tile::ring::<T>(k, "a_tiles");
        let b_tiles = tile::ring::<T>(k, "b_tiles");
        let (tid, pos) = WarpPos::of_thread(k);
        let bx = k.ctaid_x();
        let block_m = k.mul_lo(bx, TILE_M);
        let by = k.ctaid_y();
        let block_n = k.mul_lo(by, TILE_N);
        let z = k.ctaid_z();
        let (pixels, image, group) = match pass {
            Pass::Forward => (k.mul_lo(d.batch, d.ohw), None, z),
            Pass::BackwardData => {
                let groups = p.c_in / p.cg;
                let image = div_const(k, z, groups);
                let group = rem_const(k, z, groups);
                (k.mul_lo(d.h, d.w), Some(image), group)
            }
        };
        let mut c = Self {
            p,
            pass,
            layout: cfg.layout,
            d,
            a_src,
            w,
            bias,
            out,
            pixels,
            image,
            group,
            block_m,
            block_n,
            pos,
            a_tiles,
            b_tiles,
            a_chunks: Vec::new(),
            b_chunks: Vec::new(),
        };
        for i in 0..CHUNKS_PER_THREAD {
            let (row, col, slot_bytes) = tile::chunk_slot_bytes(k, tid, i, T::TYPE.bytes());
            c.a_chunks.push(c.pixel_chunk(k, row, col, slot_bytes));
            c.b_chunks.push(c.weight_chunk(k, row, col, slot_bytes));
        }
        c
    }

    /// A chunk of tile row `row`: pixel `m = block_m + row` → image `n`, `(oh, ow)`; its fixed
    /// index part is the image's (and group's) first element: NCHW `(n·C_in + g·Cg)·H·W`,
    /// NHWC `n·H·W·C_in + g·Cg`.
    fn pixel_chunk(
        &self,
        k: &mut KernelBuilder,
        row: Reg<U32>,
        col: Reg<U32>,
        slot_bytes: Reg<U32>,
    ) -> Chunk {
        let p = &self.p;
        let m = k.add(self.block_m, row);
        let row_ok = k.setp_lt(m, self.pixels);
        if let Some(image) = self.image {
            // Backward-data: input pixel (h, w) of `image`; the fixed part is the gy plane of
            // (image, g·Og), `(n·C_out + g·Og)·OH·OW`.
            let (h, w) = self.d.w_div.divmod(k, m);
            let first_channel = k.mul_lo(self.group, p.og);
            let plane = k.mad_lo(image, p.c_out, first_channel);
            return Chunk {
                col,
                slot_bytes,
                row_ok,
                base: k.mul_lo(plane, self.d.ohw),
                origin: Some((h, w)),
            };
        }
        let (image, pix) = self.d.ohw_div.divmod(k, m);
        let (oh, ow) = self.d.ow_div.divmod(k, pix);
        let ih = k.mul_lo(oh, p.sh);
        let ih = k.sub(ih, p.ph);
        let iw = k.mul_lo(ow, p.sw);
        let iw = k.sub(iw, p.pw);
        let hw = k.mul_lo(self.d.h, self.d.w);
        let first_channel = k.mul_lo(self.group, p.cg);
        let base = match self.layout {
            Layout::Nchw => {
                let plane = k.mad_lo(image, p.c_in, first_channel);
                k.mul_lo(plane, hw)
            }
            Layout::Nhwc => {
                let image_start = k.mul_lo(image, hw);
                let image_start = k.mul_lo(image_start, p.c_in);
                k.add(image_start, first_channel)
            }
        };
        Chunk {
            col,
            slot_bytes,
            row_ok,
            base,
            origin: Some((ih, iw)),
        }
    }

    /// A chunk of B row `row`. Forward: output channel `o = block_n + row` of the group, fixed
    /// index part the row start `(g·Og + o)·K`. Backward-data: input channel `c = block_n +
    /// row` of the group, fixed part `(g·Og·Cg + c)·KH·KW` (the filter of `(g·Og, c)`).
    fn weight_chunk(
        &self,
        k: &mut KernelBuilder,
        row: Reg<U32>,
        col: Reg<U32>,
        slot_bytes: Reg<U32>,
    ) -> Chunk {
        let p = &self.p;
        let n = k.add(self.block_n, row);
        let row_ok = k.setp_lt(n, self.n_len());
        let base = match self.pass {
            Pass::Forward => {
                let channel = k.mad_lo(self.group, p.og, n);
                k.mul_lo(channel, p.filter_len())
            }
            Pass::BackwardData => {
                let filter = k.mad_lo(self.group, p.og * p.cg, n);
                k.mul_lo(filter, p.taps)
            }
        };
        Chunk {
            col,
            slot_bytes,
            row_ok,
            base,
            origin: None,
        }
    }

    /// Whether A chunks are 8 contiguous, 16-byte-aligned channels of one pixel (NHWC with
    /// `Cg` and `C_in` multiples of 8: a chunk never crosses a tap, and every pixel's group
    /// starts on a 16-byte boundary).
    /// Backward-data's A is always gathered.
    fn a_is_contiguous(&self) -> bool {
        self.pass == Pass::Forward
            && self.layout == Layout::Nhwc
            && self.p.cg % CHUNK == 0
            && self.p.c_in % CHUNK == 0
    }

    /// Whether B chunks are 16-byte-aligned runs of a weight row: forward when `K` is a
    /// multiple of 8, backward-data when `KH·KW` is (a chunk then stays within one filter).
    fn b_is_contiguous(&self) -> bool {
        match self.pass {
            Pass::Forward => self.p.filter_len() % CHUNK == 0,
            Pass::BackwardData => self.p.taps % CHUNK == 0,
        }
    }

    /// The GEMM's N extent: `Og` (forward) or `Cg` (backward-data).
    fn n_len(&self) -> u32 {
        match self.pass {
            Pass::Forward => self.p.og,
            Pass::BackwardData => self.p.cg,
        }
    }

    /// The reduction depth K: `Cg·KH·KW` (forward) or `Og·KH·KW` (backward-data).
    fn k_len(&self) -> u32 {
        match self.pass {
            Pass::Forward => self.p.filter_len(),
            Pass::BackwardData => self.p.og * self.p.taps,
        }
    }

    /// Backward-data's `gy` index and predicate of A element `(row of chunk, k)`: `k` splits
    /// into `(o, kh, kw)`; the tap reads output `(oh, ow)` when the input pixel lies on its
    /// stride grid and inside the output ([`output_coord`]); `base + o·OH·OW + oh·OW + ow`.
    fn a_index_bwd(&self, k: &mut KernelBuilder, chunk: &Chunk, kk: Reg<U32>) -> (Reg<U32>, Pred) {
        let p = &self.p;
        let o = div_const(k, kk, p.taps);
        let tap = rem_const(k, kk, p.taps);
        let kh = div_const(k, tap, p.kw);
        let kw = rem_const(k, tap, p.kw);
        let (h, w) = chunk.origin.expect("A chunks have an origin");
        let (oh, oh_ok) = output_coord(k, h, kh, p.ph, p.dh, p.sh, self.d.oh);
        let (ow, ow_ok) = output_coord(k, w, kw, p.pw, p.dw, p.sw, self.d.ow);
        let k_ok = k.setp_lt(kk, self.k_len());
        let ok = k.and_pred(chunk.row_ok, k_ok);
        let ok = k.and_pred(ok, oh_ok);
        let ok = k.and_pred(ok, ow_ok);
        let plane = k.mad_lo(o, self.d.ohw, chunk.base);
        let row = k.mad_lo(oh, self.d.ow, plane);
        (k.add(row, ow), ok)
    }

    /// `x` index and in-bounds predicate of A element `(row of chunk, k)`: with `k` split
    /// into `(ci, kh, kw)` by the layout's order, input position `(ih, iw) = origin +
    /// (kh·DH, kw·DW)`; NCHW `base + ci·H·W + ih·W + iw`, NHWC `base + (ih·W + iw)·C_in + ci`.
    fn a_index(&self, k: &mut KernelBuilder, chunk: &Chunk, kk: Reg<U32>) -> (Reg<U32>, Pred) {
        if self.pass == Pass::BackwardData {
            return self.a_index_bwd(k, chunk, kk);
        }
        let p = &self.p;
        let (ci, tap) = match self.layout {
            Layout::Nchw => (div_const(k, kk, p.taps), rem_const(k, kk, p.taps)),
            Layout::Nhwc => (rem_const(k, kk, p.cg), div_const(k, kk, p.cg)),
        };
        let kh = div_const(k, tap, p.kw);
        let kw = rem_const(k, tap, p.kw);
        let (ih0, iw0) = chunk.origin.expect("A chunks have an origin");
        let ih = k.mad_lo(kh, p.dh, ih0);
        let iw = k.mad_lo(kw, p.dw, iw0);
        let k_ok = k.setp_lt(kk, p.filter_len());
        let ok = k.and_pred(chunk.row_ok, k_ok);
        let h_ok = k.setp_lt(ih, self.d.h);
        let ok = k.and_pred(ok, h_ok);
        let w_ok = k.setp_lt(iw, self.d.w);
        let ok = k.and_pred(ok, w_ok);
        let position = k.mad_lo(ih, self.d.w, iw);
        let index = match self.layout {
            Layout::Nchw => {
                let hw = k.mul_lo(self.d.h, self.d.w);
                let plane = k.mad_lo(ci, hw, chunk.base);
                k.add(plane, position)
            }
            Layout::Nhwc => {
                let at = k.mad_lo(position, p.c_in, chunk.base);
                k.add(at, ci)
            }
        };
        (index, ok)
    }

    /// `w` index and in-bounds predicate of B element `(row of chunk, k)`: forward
    /// `base + k`; backward-data, with `k = (o, tap)`, `base + o·Cg·KH·KW + tap`.
    fn b_index(&self, k: &mut KernelBuilder, chunk: &Chunk, kk: Reg<U32>) -> (Reg<U32>, Pred) {
        let k_ok = k.setp_lt(kk, self.k_len());
        let ok = k.and_pred(chunk.row_ok, k_ok);
        let index = match self.pass {
            Pass::Forward => k.add(chunk.base, kk),
            Pass::BackwardData => {
                let p = &self.p;
                let o = div_const(k, kk, p.taps);
                let tap = rem_const(k, kk, p.taps);
                let filter = k.mad_lo(o, p.cg * p.taps, chunk.base);
                k.add(filter, tap)
            }
        };
        (index, ok)
    }

    /// Fills ring slot `slot` with K tile `k_tile` of both operands.
    fn fill(&self, k: &mut KernelBuilder, k_tile: Reg<U32>, slot: Reg<U32>) {
        let k0 = k.mul_lo(k_tile, TILE_K);
        let a_stage = tile::stage_base(k, self.a_tiles, slot);
        let b_stage = tile::stage_base(k, self.b_tiles, slot);
        for chunk in &self.a_chunks {
            let first = k.add(k0, chunk.col);
            let dst = k.add(a_stage, chunk.slot_bytes);
            let contiguous = self.a_is_contiguous();
            self.copy_chunk(k, self.a_src, dst, first, contiguous, |k, kk| {
                self.a_index(k, chunk, kk)
            });
        }
        for chunk in &self.b_chunks {
            let first = k.add(k0, chunk.col);
            let dst = k.add(b_stage, chunk.slot_bytes);
            let contiguous = self.b_is_contiguous();
            self.copy_chunk(k, self.w, dst, first, contiguous, |k, kk| {
                self.b_index(k, chunk, kk)
            });
        }
    }

    /// Copies the 8 elements `first..first + 8` of one row to shared `dst`: one 16-byte
    /// `cp.async` (zero-filled where `index_of(first)` is out of bounds, reading from the
    /// buffer start so no lane forms a wild address) when `contiguous`, else 8 predicated
    /// element loads and stores (zeros out of bounds).
    fn copy_chunk(
        &self,
        k: &mut KernelBuilder,
        src: GlobalPtr<T>,
        dst: Reg<U32>,
        first: Reg<U32>,
        contiguous: bool,
        index_of: impl Fn(&mut KernelBuilder, Reg<U32>) -> (Reg<U32>, Pred),
    ) {
        if contiguous {
            let (index, ok) = index_of(k, first);
            let index = k.selp(index, 0u32, ok);
            let addr = k.elem_addr(src, index);
            let bytes = k.selp(16u32, 0u32, ok);
            k.cp_async_zfill(CacheLevel::Cg, dst, addr, 16, bytes);
            return;
        }
        let bits = k.cast_ptr::<T, U16>(src);
        for e in 0..CHUNK {
            let kk = k.add(first, e);
            let (index, ok) = index_of(k, kk);
            let v = k.var::<U16>(0u16);
            k.if_then(ok, |k| {
                let addr = k.elem_addr(bits, index);
                let loaded = k.ld_global_nc::<U16>(addr, 0);
                k.assign(v, loaded);
            });
            k.st_shared(dst, (e * 2) as i32, v);
        }
    }

    /// Stores the warp's accumulators inside `M × N`: accumulator `(mi, ni)` covers pixels
    /// `block_m + 32·warp_m + 16·mi + {l/4, l/4 + 8}` and channels `block_n + 32·warp_n +
    /// 8·ni + 2·(l % 4) + {0, 1}`; forward `y[pixel, g·Og + o] = acc + bias`, backward-data
    /// `dx[n, g·Cg + c, pixel] = acc`, rounded once.
    fn store(&self, k: &mut KernelBuilder, acc: &Accumulators) {
        k.comment("epilogue: bias, round, store inside M x N");
        let p = &self.p;
        let (row0, col0) = self.pos.output_origin(k);
        let row_base = k.add(self.block_m, row0);
        let col_base = k.add(self.block_n, col0);
        let first_channel = k.mul_lo(self.group, self.n_len());
        // This lane's 8 output channels (per n8 accumulator, 2 columns) and their biases,
        // loaded once for all its rows.
        let columns: Vec<OutputColumn<T::Acc>> = (0..WARP_N_TILES * 2)
            .map(|c| {
                let o = k.add(col_base, (c / 2) * 8 + c % 2);
                let o_ok = k.setp_lt(o, self.n_len());
                let bias = self.bias.map(|b| {
                    let channel = k.add(first_channel, o);
                    load_or_zero::<T>(k, b, channel, o_ok)
                });
                (o, o_ok, bias)
            })
            .collect();
        for (mi, row_accs) in acc.iter().enumerate() {
            for half in 0..2u32 {
                let m = k.add(row_base, mi as u32 * 16 + half * 8);
                let m_ok = k.setp_lt(m, self.pixels);
                // Output index of channel 0 of the group at this pixel, and the step between
                // channels.
                let (start, channel_step) = match (self.image, self.layout) {
                    (Some(image), _) => {
                        let plane = k.mad_lo(image, p.c_in, first_channel);
                        (k.mad_lo(plane, self.pixels, m), Some(self.pixels))
                    }
                    (None, Layout::Nchw) => {
                        let (image, pix) = self.d.ohw_div.divmod(k, m);
                        let plane = k.mad_lo(image, p.c_out, first_channel);
                        (k.mad_lo(plane, self.d.ohw, pix), Some(self.d.ohw))
                    }
                    (None, Layout::Nhwc) => (k.mad_lo(m, p.c_out, first_channel), None),
                };
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
                            let index = match channel_step {
                                Some(step) => k.mad_lo(o, step, start),
                                None => k.add(start, o),
                            };
                            let out = T::narrow(k, value);
                            let addr = k.elem_addr(self.out, index);
                            k.st_global(addr, 0, out);
                        });
                    }
                }
            }
        }
    }
}
