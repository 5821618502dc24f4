//! Host launch code for the NF4 entries, generic over the [`Backend`].
//!
//! Every function takes the configuration the PTX was compiled from, the device, the PTX text
//! (the macro's `const PTX`; nothing is generated here) and typed buffers, checks every length
//! and dimension against the configuration **before** launching, computes the grid, and
//! launches. The activation element type is a generic `T: Nf4Activation` (`half::f16`,
//! `half::bf16` or `f32`) that must match `cfg.dtype`.
//!
//! Buffers must be allocated by the backend (16-byte aligned: the GEMV entry reads packed
//! weights and, for `k % 32 = 0`, activations with 16-byte loads).
//!
//! Errors (all typed, all before any launch):
//! - a `T` that is not `cfg.dtype` → [`LaunchError::ArgumentType`] for the activation argument;
//! - an invalid configuration → [`LaunchError::Shape`] listing every violated rule;
//! - `m = 0`, `m · k` or `m · n` beyond the u32 index range, or more row tiles than `grid.y`
//!   allows → [`LaunchError::InvalidDim`] named `m`;
//! - weights whose absmax form does not match `cfg.double_quant` → [`LaunchError::ArgumentCount`]
//!   (the entries of the two forms take 5 and 8 arguments);
//! - any buffer of the wrong length → [`LaunchError::BufferLength`] naming it;
//! - a split of the backward GEMV into no slices, more slices than rows of `W` or than
//!   `grid.y` allows, or a workspace past the u32 index range → [`LaunchError::InvalidDim`]
//!   named `slices`; likewise a split of the tiled forward into no slices, more than
//!   [`gemm_max_slices`] (one [`gemm_split_align`] step of `k` each, at most `grid.z`) or a
//!   workspace past the u32 index range.

use half::{bf16, f16};

use super::format::{Nf4DoubleQuant, Nf4Weights, DYNAMIC_MAP_LEN};
use super::kernels::{
    backward_gemv_cols, backward_gemv_slice_len, backward_input_cols, gemm_threads,
    BACKWARD_GEMV_ENTRY, BACKWARD_GEMV_REDUCE_ENTRY, BACKWARD_GEMV_SPLIT_ENTRY,
    BACKWARD_INPUT_ENTRY, GEMM_ENTRY, GEMM_REDUCE_ENTRY, GEMM_SPLIT_ENTRY, GEMM_TALL_ENTRY,
    GEMM_TALL_SPLIT_ENTRY, GEMV_ENTRY, GEMV_MAX_M, GEMV_ROWS_PER_BLOCK, REDUCE_VECTOR, THREADS,
    TILE_M, TILE_M_TALL, TILE_N,
};
pub use super::kernels::{gemm_slice_len, gemm_split_align};
use super::{Nf4Config, INDEX_BOUND};
use crate::dtype::DType;
use crate::launch::{
    Backend, DeviceBuffer, Dim3, Element, KernelArg, LaunchConfig, LaunchError, ParamKind,
};

use crate::templates::split::reduce::THREADS as REDUCE_THREADS;
/// How many slices the split sums run: of the rows of `W` for the backward GEMV (`Auto`:
/// [`backward_gemv_slices`]), of `k` for the tiled forward (`Auto`: [`gemm_slices`]).
pub use crate::templates::split::Slices;
use crate::templates::split::{SPLIT_TARGET_SMS, SPLIT_WAVES};

/// The largest `grid.y` (and `grid.z`) a launch may use.
const MAX_GRID_Y: u32 = 65535;

/// The fewest rows of `W` [`backward_gemv_slices`] gives a slice: below that, a block's fixed
/// costs (the code table, map and window staging, the combine, its part of the workspace
/// written and read back) outweigh its 64 rows of code bytes.
pub const MIN_SLICE_ROWS: u32 = 64;
/// Slices start on multiples of 16 rows of `W`: 16 values of a `G_C` row are 32 bytes in f16 and
/// bf16 (two sectors in f32), so when `n` is a multiple of 16 a slice's `G_C` reads are whole
/// sectors.
pub const SLICE_ROW_ALIGN: u32 = 16;

/// The fewest columns of `k` [`gemm_slices`] gives a K slice of the tiled forward: below
/// that, a block's fixed costs (the code table and map, filling and draining the pipeline,
/// its f32 partial tile written and read back by the reduce, 16 KiB at 64 × 64) outweigh its
/// share of the weight (64 rows × 256 code bytes at 512 columns).
pub const MIN_SLICE_K: u32 = 512;

/// Activation element types of the NF4 kernels (sealed: f16, bf16, f32).
pub trait Nf4Activation: Element + private::Sealed {
    /// The configuration dtype this type stores.
    const DTYPE: DType;
}

mod private {
    pub trait Sealed {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
    impl Sealed for f32 {}
}

impl Nf4Activation for f16 {
    const DTYPE: DType = DType::F16;
}

impl Nf4Activation for bf16 {
    const DTYPE: DType = DType::BF16;
}

impl Nf4Activation for f32 {
    const DTYPE: DType = DType::F32;
}

/// The absmax of a quantised weight on the device.
#[derive(Debug)]
pub enum DeviceAbsmax<B: Backend> {
    /// One f32 per quantisation block (`double_quant = false`).
    Plain(DeviceBuffer<B, f32>),
    /// Double-quantised (`double_quant = true`), bitsandbytes' nested state: one 8-bit code per
    /// block, the 256-entry map the codes index, one nested absmax per 256 blocks, and the common
    /// offset (see [`super::format`]).
    DoubleQuant {
        codes: DeviceBuffer<B, u8>,
        map: DeviceBuffer<B, f32>,
        nested_absmax: DeviceBuffer<B, f32>,
        offset: f32,
    },
}

/// A quantised weight `W [n, k]` on the device.
#[derive(Debug)]
pub struct DeviceWeights<B: Backend> {
    /// `ceil(n · k / 2)` bytes of packed codes.
    pub packed: DeviceBuffer<B, u8>,
    pub absmax: DeviceAbsmax<B>,
}

impl<B: Backend> DeviceWeights<B> {
    /// Uploads single-level NF4 weights.
    pub fn upload(dev: &B, w: &Nf4Weights) -> Result<Self, LaunchError> {
        Ok(Self {
            packed: dev.upload(&w.packed)?,
            absmax: DeviceAbsmax::Plain(dev.upload(&w.absmax)?),
        })
    }

    /// Uploads NF4 weights with double-quantised absmax.
    pub fn upload_double_quant(dev: &B, w: &Nf4DoubleQuant) -> Result<Self, LaunchError> {
        Ok(Self {
            packed: dev.upload(&w.packed)?,
            absmax: DeviceAbsmax::DoubleQuant {
                codes: dev.upload(&w.absmax.codes)?,
                map: dev.upload(&w.absmax.map)?,
                nested_absmax: dev.upload(&w.absmax.nested_absmax)?,
                offset: w.absmax.offset,
            },
        })
    }
}

/// The forward entry [`forward`] uses for `m` rows: the GEMV for `m ≤ 8`, the tiled GEMM above
/// (split over `k` by [`gemm_slices`], or on 128-row tiles when unsplit and [`gemm_tall`]).
pub const fn forward_entry(m: u32) -> &'static str {
    if m <= GEMV_MAX_M {
        GEMV_ENTRY
    } else {
        GEMM_ENTRY
    }
}

/// The backward entry [`backward_input`] uses for `m` rows: the backward GEMV for `m ≤ 8` (its
/// split form, `nf4_backward_gemv_split` and `nf4_backward_gemv_reduce`, when
/// [`backward_gemv_slices`] `> 1`), the tiled entry above.
pub const fn backward_entry(m: u32) -> &'static str {
    if m <= GEMV_MAX_M {
        BACKWARD_GEMV_ENTRY
    } else {
        BACKWARD_INPUT_ENTRY
    }
}

/// Launch geometry of `nf4_gemv`: `ceil(n / 8)` blocks of 256 threads (a warp per weight row).
pub fn gemv_launch_config(cfg: &Nf4Config) -> LaunchConfig {
    LaunchConfig {
        grid: Dim3::x(cfg.n.div_ceil(GEMV_ROWS_PER_BLOCK)),
        block: Dim3::x(THREADS),
        dynamic_shared_bytes: 0,
    }
}

/// Launch geometry of `nf4_gemm`: `(ceil(n / 64), ceil(m / 64))` blocks of
/// [`gemm_threads`] threads (256; 128 on tf32 tensor cores).
pub fn gemm_launch_config(cfg: &Nf4Config, m: u32) -> LaunchConfig {
    LaunchConfig {
        grid: Dim3::new(cfg.n.div_ceil(TILE_N), m.div_ceil(TILE_M), 1),
        block: Dim3::x(gemm_threads(cfg)),
        dynamic_shared_bytes: 0,
    }
}

/// Whether the unsplit tiled forward of `m` rows runs `nf4_gemm_tall` (128-row tiles) rather
/// than `nf4_gemm`: on modules that have it (f16/bf16 on tensor cores,
/// [`has_gemm_tall`](super::kernels::has_gemm_tall)) when `m > 64`, i.e. when `nf4_gemm` would
/// run two or more row tiles. Each 128-row block dequantises its weights once for twice the
/// rows, cutting the instructions per output by about 40% (`runtime/tests/nf4_counters.rs`);
/// at `m ≤ 64` the 64-row entry stays, so small-`m` launches are unchanged.
pub fn gemm_tall(cfg: &Nf4Config, m: u32) -> bool {
    super::kernels::has_gemm_tall(cfg) && m > TILE_M
}

/// Launch geometry of `nf4_gemm_tall`: `(ceil(n / 64), ceil(m / 128))` blocks of 256 threads.
pub fn gemm_tall_launch_config(cfg: &Nf4Config, m: u32) -> LaunchConfig {
    LaunchConfig {
        grid: Dim3::new(cfg.n.div_ceil(TILE_N), m.div_ceil(TILE_M_TALL), 1),
        block: Dim3::x(THREADS),
        dynamic_shared_bytes: 0,
    }
}

/// The unsplit tiled forward's entry and geometry for `m` rows ([`gemm_tall`]).
fn gemm_whole(cfg: &Nf4Config, m: u32) -> (&'static str, LaunchConfig) {
    if gemm_tall(cfg, m) {
        (GEMM_TALL_ENTRY, gemm_tall_launch_config(cfg, m))
    } else {
        (GEMM_ENTRY, gemm_launch_config(cfg, m))
    }
}

/// The number `S` of K slices the tiled forward ([`forward_tiled`], and [`forward`] for
/// `m > 8`) splits its sum into: with `B` the blocks of one slice of the split's tiles
/// (`⌈n / 64⌉ · ⌈m / 64⌉`, [`gemm_launch_config`], or `⌈n / 64⌉ · ⌈m / 128⌉` where
/// [`gemm_tall_split`]) and `W =` [`SPLIT_WAVES`]` · `[`SPLIT_TARGET_SMS`] (two waves of
/// an H100's 132 SMs, 264 blocks),
/// - `S = 1` when `B ≥ W` (two full waves already: a split only adds the reduce and the
///   workspace traffic) or `k < 2 ·` [`MIN_SLICE_K`] (no two slices of useful length);
/// - else, with `a =` [`gemm_split_align`], `P = ⌊k / 16m⌋` (the most slices whose f32
///   partials, `8·S·m·n` bytes written and read back, stay within the weight's `n·k/2` code
///   bytes: at `m = 128` a third slice would add more DRAM traffic than it saves) and
///   `S₀ = min(⌈W / B⌉, ⌊k / MIN_SLICE_K⌋, P)` (`S = 1` when that is under 2): columns per
///   slice `c = max(⌊k / S₀⌋` rounded down to `a`, `MIN_SLICE_K` rounded up to `a)`, and
///   `S = min(⌈k / c⌉, P)`;
/// - and `S = 1` after all when that split does not shorten the busiest SM's share of the
///   work: `⌈S·B / 132⌉ / S ≥ ⌈B / 132⌉` block-lengths (224 blocks: 2 either way, split in
///   2; the slices' extra fills and stores and the reduce would only add time).
///
/// Why: under two waves the grid leaves SMs idle (64 blocks at `n = k = 4096`, `m = 16`: half
/// of one wave) or ends on a thin tail wave, while each block walks the whole of `k`; slicing
/// `k` multiplies the blocks at the cost of one f32 partial tile per slice (`m · n · 4` bytes
/// written and read back, small beside the `n · k / 2` code bytes when `m` is small). So
/// `S · B ≥ W` unless slices would fall under `MIN_SLICE_K`, every slice but the last has at
/// least `MIN_SLICE_K` columns and starts on a multiple of `a` (a multiple of the quantisation
/// block and of the path's K step), and none is empty ([`gemm_slice_k`]: `⌈k / S⌉` rounded up
/// to `a` is at most `c`). `n = k = 4096`, `m = 16`, f16 on tensor cores (`a = 64`): `B = 64`,
/// `S₀ = 5`, `c = 768`, `S = 6` (384 blocks; slices of 704 columns, the last 576). The rule
/// depends on the shape only, so a shape always gets the same `S` and the same bits.
pub fn gemm_slices(cfg: &Nf4Config, m: u32) -> u32 {
    let grid = gemm_split(cfg, m, 1).1.grid;
    let blocks = u64::from(grid.x) * u64::from(grid.y);
    let target = SPLIT_WAVES * SPLIT_TARGET_SMS;
    // The slices' f32 partials, written and read back (8·S·m·n bytes), within the weight's
    // code bytes (n·k/2).
    let affordable = cfg.k / (16 * m.max(1));
    let most = (cfg.k / MIN_SLICE_K).min(affordable);
    if blocks >= target || most < 2 {
        return 1;
    }
    let align = gemm_split_align(cfg);
    let wanted = (target.div_ceil(blocks) as u32).min(most);
    let each = (cfg.k / wanted / align * align).max(MIN_SLICE_K.next_multiple_of(align));
    let slices = cfg.k.div_ceil(each).min(affordable);
    let busiest = |blocks: u64| blocks.div_ceil(SPLIT_TARGET_SMS);
    if busiest(blocks * u64::from(slices)) >= u64::from(slices) * busiest(blocks) {
        return 1;
    }
    slices
}

/// Columns of `k` per K slice of the split forward when split into `slices`: `⌈k / S⌉`
/// rounded up to [`gemm_split_align`] (the last slice may have fewer, or with
/// [`Slices::Exactly`] none: it then writes zeros).
pub fn gemm_slice_k(cfg: &Nf4Config, slices: u32) -> u32 {
    cfg.k
        .div_ceil(slices.max(1))
        .next_multiple_of(gemm_split_align(cfg))
}

/// The most K slices a split forward may run: one per [`gemm_split_align`] step of `k`, and
/// at most the `grid.z` limit.
pub fn gemm_max_slices(cfg: &Nf4Config) -> u32 {
    cfg.k.div_ceil(gemm_split_align(cfg)).min(MAX_GRID_Y)
}

/// Launch geometry of `nf4_gemm_split`: `(⌈n / 64⌉, ⌈m / 64⌉, S)` blocks of
/// [`gemm_threads`] threads.
pub fn gemm_split_launch_config(cfg: &Nf4Config, m: u32, slices: u32) -> LaunchConfig {
    sliced(gemm_launch_config(cfg, m), slices)
}

/// Launch geometry of `nf4_gemm_tall_split`: `(⌈n / 64⌉, ⌈m / 128⌉, S)` blocks of 256 threads.
pub fn gemm_tall_split_launch_config(cfg: &Nf4Config, m: u32, slices: u32) -> LaunchConfig {
    sliced(gemm_tall_launch_config(cfg, m), slices)
}

/// `whole`'s grid repeated over `slices` in z.
fn sliced(whole: LaunchConfig, slices: u32) -> LaunchConfig {
    LaunchConfig {
        grid: Dim3::new(whole.grid.x, whole.grid.y, slices),
        ..whole
    }
}

/// Whether the split tiled forward of `m` rows runs `nf4_gemm_tall_split` (128-row tiles, as
/// the unsplit [`gemm_tall`]) rather than `nf4_gemm_split`: where the module has it
/// ([`has_gemm_tall_split`](super::kernels::has_gemm_tall_split)) and `m > 64`.
pub fn gemm_tall_split(cfg: &Nf4Config, m: u32) -> bool {
    super::kernels::has_gemm_tall_split(cfg) && gemm_tall(cfg, m)
}

/// The split tiled forward's entry and geometry for `m` rows ([`gemm_tall_split`]).
fn gemm_split(cfg: &Nf4Config, m: u32, slices: u32) -> (&'static str, LaunchConfig) {
    if gemm_tall_split(cfg, m) {
        (
            GEMM_TALL_SPLIT_ENTRY,
            gemm_tall_split_launch_config(cfg, m, slices),
        )
    } else {
        (GEMM_SPLIT_ENTRY, gemm_split_launch_config(cfg, m, slices))
    }
}

/// Launch geometry of `nf4_gemm_reduce`: `⌈⌈m·n / 4⌉ / 256⌉` blocks of 256 threads (four
/// elements of `C` per thread).
pub fn gemm_reduce_launch_config(cfg: &Nf4Config, m: u32) -> LaunchConfig {
    reduce_launch_config(u64::from(m) * u64::from(cfg.n))
}

/// Launch geometry of `nf4_backward_input`: `(ceil(k / cols), ceil(m / 64))` blocks of
/// [`gemm_threads`] threads (256; 128 on tf32 tensor cores), `cols` =
/// [`backward_input_cols`] (256).
pub fn backward_input_launch_config(cfg: &Nf4Config, m: u32) -> LaunchConfig {
    LaunchConfig {
        grid: Dim3::new(
            cfg.k.div_ceil(backward_input_cols(cfg)),
            m.div_ceil(TILE_M),
            1,
        ),
        block: Dim3::x(gemm_threads(cfg)),
        dynamic_shared_bytes: 0,
    }
}

/// Launch geometry of `nf4_backward_gemv`: `ceil(k / cols)` blocks of 256 threads, `cols` =
/// [`backward_gemv_cols`] columns of `G_A` per block (512 at block 64).
pub fn backward_gemv_launch_config(cfg: &Nf4Config) -> LaunchConfig {
    LaunchConfig {
        grid: Dim3::x(cfg.k.div_ceil(backward_gemv_cols(cfg))),
        block: Dim3::x(THREADS),
        dynamic_shared_bytes: 0,
    }
}

/// The number `S` of slices of the rows of `W` the backward GEMV ([`backward_gemv`], and
/// [`backward_input`] for `m ≤ 8`) splits its sum into: with `B = ⌈k / cols⌉` blocks unsplit
/// ([`backward_gemv_cols`]),
/// - `S = 1` when `B ≥` [`SPLIT_TARGET_SMS`] (the grid already fills the part) or
///   `n < 2·`[`MIN_SLICE_ROWS`];
/// - else, with `W =` [`SPLIT_WAVES`]` · `[`SPLIT_TARGET_SMS`] blocks (two waves of an H100's
///   132 SMs) and `S₀ = min(⌊W / B⌋, ⌊n / MIN_SLICE_ROWS⌋)` (`S = 1` when `S₀ < 2`): rows per
///   slice `r = ⌈n / S₀⌉` rounded up to [`SLICE_ROW_ALIGN`], and `S = ⌈n / r⌉ ≤ S₀`.
///
/// So `S·B ≤ W` blocks: no SM runs more than two slices' blocks, where rounding the rows per
/// slice down (`S·B ≥ W`) left a third on a few SMs (the waves-aware model's busiest SM: 296
/// blocks put 3 on 32 SMs, 1.34 × the even share). Every slice has rows
/// ([`backward_gemv_slice_rows`]: `⌈n / S⌉` rounded up to 16 is at most `r`), all but the last
/// at least [`MIN_SLICE_ROWS`] (`r ≥ n / S₀ ≥ 64`), and every slice starts on a 32-byte sector
/// of `G_C`'s rows. `n = k = 4096` at block 64: `B = 8`, `S₀ = 33`, `r = 128`, `S = 32` (256
/// blocks of 128 rows: 2 on 124 SMs, 1 on 8).
///
/// `S ≤ W` and a split needs `B < 132`, so `k < 132 · 512` and the workspace `S · m·k` stays
/// under `264 · 8 · 67584` elements, far inside the u32 index range, and `S` inside `grid.y`.
/// The rule depends on the shape only, so a shape always gets the same `S` and the same bits.
pub fn backward_gemv_slices(cfg: &Nf4Config) -> u32 {
    let blocks = cfg.k.div_ceil(backward_gemv_cols(cfg));
    let rows = cfg.n;
    if u64::from(blocks) >= SPLIT_TARGET_SMS || rows < 2 * MIN_SLICE_ROWS {
        return 1;
    }
    let most = rows / MIN_SLICE_ROWS;
    let wanted = ((SPLIT_WAVES * SPLIT_TARGET_SMS / u64::from(blocks)) as u32).min(most);
    if wanted < 2 {
        return 1;
    }
    let rows_each = rows.div_ceil(wanted).next_multiple_of(SLICE_ROW_ALIGN);
    rows.div_ceil(rows_each)
}

/// Rows of `W` per slice when split into `slices`: `⌈n / S⌉` rounded up to
/// [`SLICE_ROW_ALIGN`] (the last slice may have fewer, or with [`Slices::Exactly`] none: it
/// then writes zeros).
pub fn backward_gemv_slice_rows(cfg: &Nf4Config, slices: u32) -> u32 {
    cfg.n
        .div_ceil(slices.max(1))
        .next_multiple_of(SLICE_ROW_ALIGN)
}

/// Launch geometry of `nf4_backward_gemv_split`: `(⌈k / cols⌉, S)` blocks of 256 threads.
pub fn backward_gemv_split_launch_config(cfg: &Nf4Config, slices: u32) -> LaunchConfig {
    LaunchConfig {
        grid: Dim3::new(cfg.k.div_ceil(backward_gemv_cols(cfg)), slices, 1),
        ..backward_gemv_launch_config(cfg)
    }
}

/// Launch geometry of `nf4_backward_gemv_reduce`: `⌈⌈m·k / 4⌉ / 256⌉` blocks of 256 threads
/// (four elements of `G_A` per thread).
pub fn backward_gemv_reduce_launch_config(cfg: &Nf4Config, m: u32) -> LaunchConfig {
    reduce_launch_config(u64::from(m) * u64::from(cfg.k))
}

/// A reduce over `elements` outputs: four per thread, 256 threads per block.
fn reduce_launch_config(elements: u64) -> LaunchConfig {
    let groups = elements.div_ceil(u64::from(REDUCE_VECTOR));
    LaunchConfig {
        grid: Dim3::x(groups.div_ceil(u64::from(REDUCE_THREADS)) as u32),
        block: Dim3::x(REDUCE_THREADS),
        dynamic_shared_bytes: 0,
    }
}

/// Forward `C [m, n] = A [m, k] · dequant(W)ᵀ`, through the GEMV entry for `m ≤ 8` and the tiled
/// entry otherwise ([`forward_entry`]). `c` is overwritten; `a` and the weights are only read.
pub fn forward<B: Backend, T: Nf4Activation>(
    cfg: &Nf4Config,
    dev: &B,
    ptx: &str,
    m: u32,
    a: &DeviceBuffer<B, T>,
    weights: &DeviceWeights<B>,
    c: &mut DeviceBuffer<B, T>,
) -> Result<(), LaunchError> {
    if m <= GEMV_MAX_M {
        forward_gemv(cfg, dev, ptx, m, a, weights, c)
    } else {
        forward_tiled(cfg, dev, ptx, m, a, weights, c)
    }
}

/// The GEMV entries handle at most [`GEMV_MAX_M`] rows.
fn check_gemv_rows(entry: &str, m: u32) -> Result<(), LaunchError> {
    if m > GEMV_MAX_M {
        return Err(LaunchError::InvalidDim {
            name: "m",
            value: u64::from(m),
            reason: format!("{entry} handles at most {GEMV_MAX_M} rows"),
        });
    }
    Ok(())
}

/// Forward through the GEMV entry (`1 ≤ m ≤ 8`).
pub fn forward_gemv<B: Backend, T: Nf4Activation>(
    cfg: &Nf4Config,
    dev: &B,
    ptx: &str,
    m: u32,
    a: &DeviceBuffer<B, T>,
    weights: &DeviceWeights<B>,
    c: &mut DeviceBuffer<B, T>,
) -> Result<(), LaunchError> {
    check_common::<B, T>(cfg, GEMV_ENTRY, m, weights)?;
    check_gemv_rows("the GEMV entry", m)?;
    check_len("a", u64::from(m) * u64::from(cfg.k), a.len())?;
    check_len("c", u64::from(m) * u64::from(cfg.n), c.len())?;
    let args = entry_args(a, weights, c, m);
    dev.launch(ptx, GEMV_ENTRY, gemv_launch_config(cfg), &args)
}

/// Forward through the tiled entries (any `m ≥ 1`; [`forward`] picks them for `m > 8`), `k`
/// split by [`gemm_slices`] ([`forward_tiled_sliced`] with [`Slices::Auto`]).
pub fn forward_tiled<B: Backend, T: Nf4Activation>(
    cfg: &Nf4Config,
    dev: &B,
    ptx: &str,
    m: u32,
    a: &DeviceBuffer<B, T>,
    weights: &DeviceWeights<B>,
    c: &mut DeviceBuffer<B, T>,
) -> Result<(), LaunchError> {
    forward_tiled_sliced(cfg, dev, ptx, m, Slices::Auto, a, weights, c)
}

/// Forward through the tiled entries (any `m ≥ 1`) with a chosen split of the sum over `k`
/// ([`Slices`]). One slice runs `nf4_gemm` alone (`nf4_gemm_tall` when [`gemm_tall`]);
/// `S > 1` allocates an f32 workspace of `S ·` [`gemm_slice_len`] elements through the
/// backend, runs `nf4_gemm_split` (`nf4_gemm_tall_split` when [`gemm_tall`]: K slice `s`
/// = columns `s · c .. (s + 1) · c`, `c =` [`gemm_slice_k`], its unrounded partial `C` into
/// its part of the workspace) and `nf4_gemm_reduce` (the slices added in order, rounded once):
/// the same bits every run for a given `S`, different from the unsplit entry's only by the
/// order of the f32 additions. `S = 0`, `S >` [`gemm_max_slices`] or a workspace past the
/// u32 index range is [`LaunchError::InvalidDim`] `slices`.
#[allow(clippy::too_many_arguments)]
pub fn forward_tiled_sliced<B: Backend, T: Nf4Activation>(
    cfg: &Nf4Config,
    dev: &B,
    ptx: &str,
    m: u32,
    slices: Slices,
    a: &DeviceBuffer<B, T>,
    weights: &DeviceWeights<B>,
    c: &mut DeviceBuffer<B, T>,
) -> Result<(), LaunchError> {
    check_common::<B, T>(cfg, GEMM_ENTRY, m, weights)?;
    check_row_tiles(m)?;
    check_len("a", u64::from(m) * u64::from(cfg.k), a.len())?;
    check_len("c", u64::from(m) * u64::from(cfg.n), c.len())?;
    let slices = match slices {
        Slices::Auto => gemm_slices(cfg, m),
        Slices::Exactly(s) => s,
    };
    let workspace = check_gemm_slices(cfg, m, slices)?;
    let sum = SplitSum {
        whole: gemm_whole(cfg, m),
        split: gemm_split(cfg, m, slices),
        reduce: (GEMM_REDUCE_ENTRY, gemm_reduce_launch_config(cfg, m)),
        slices,
        per_slice: gemm_slice_k(cfg, slices),
        workspace,
    };
    sum.launch(dev, ptx, (a, weights, c, m))
}

/// A split of the tiled forward into `slices`: at least 1, at most [`gemm_max_slices`], and a
/// workspace (returned, in elements) within the u32 index range.
fn check_gemm_slices(cfg: &Nf4Config, m: u32, slices: u32) -> Result<u64, LaunchError> {
    let workspace = u64::from(slices) * gemm_slice_len(cfg, m);
    let rule = format!(
        "K slices of at least one step of {} columns of k = {}, and grid.z {MAX_GRID_Y}",
        gemm_split_align(cfg),
        cfg.k
    );
    check_slice_count(slices, (gemm_max_slices(cfg), rule), workspace)
}

/// Backward with respect to the input: `G_A [m, k] = G_C [m, n] · dequant(W)`, through the
/// backward GEMV for `m ≤ 8` ([`backward_gemv`]: split over the rows of `W` by
/// [`backward_gemv_slices`], then the slices' reduce) and the tiled entry otherwise
/// ([`backward_entry`]). `g_a` is overwritten; `g_c` and the weights are only read.
pub fn backward_input<B: Backend, T: Nf4Activation>(
    cfg: &Nf4Config,
    dev: &B,
    ptx: &str,
    m: u32,
    g_c: &DeviceBuffer<B, T>,
    weights: &DeviceWeights<B>,
    g_a: &mut DeviceBuffer<B, T>,
) -> Result<(), LaunchError> {
    if m <= GEMV_MAX_M {
        backward_gemv(cfg, dev, ptx, m, g_c, weights, g_a)
    } else {
        backward_input_tiled(cfg, dev, ptx, m, g_c, weights, g_a)
    }
}

/// Backward through the GEMV entries (`1 ≤ m ≤ 8`), the rows of `W` split by
/// [`backward_gemv_slices`] ([`backward_gemv_sliced`] with [`Slices::Auto`]).
pub fn backward_gemv<B: Backend, T: Nf4Activation>(
    cfg: &Nf4Config,
    dev: &B,
    ptx: &str,
    m: u32,
    g_c: &DeviceBuffer<B, T>,
    weights: &DeviceWeights<B>,
    g_a: &mut DeviceBuffer<B, T>,
) -> Result<(), LaunchError> {
    backward_gemv_sliced(cfg, dev, ptx, m, Slices::Auto, g_c, weights, g_a)
}

/// Backward through the GEMV entries (`1 ≤ m ≤ 8`) with a chosen split of the sum over the
/// `n` rows of `W` ([`Slices`]). One slice runs `nf4_backward_gemv` alone; `S > 1` allocates
/// an f32 workspace of `S ·` [`backward_gemv_slice_len`] elements through the backend, runs
/// `nf4_backward_gemv_split` (slice `s` = rows `s·⌈n/S⌉ ..`, its sums into its part of the
/// workspace) and `nf4_backward_gemv_reduce` (the slices added in order, rounded once): the
/// same bits every run for a given `S`. `S = 0`, `S > n`, `S > 65535` or a workspace past the
/// u32 index range is [`LaunchError::InvalidDim`] `slices`.
#[allow(clippy::too_many_arguments)]
pub fn backward_gemv_sliced<B: Backend, T: Nf4Activation>(
    cfg: &Nf4Config,
    dev: &B,
    ptx: &str,
    m: u32,
    slices: Slices,
    g_c: &DeviceBuffer<B, T>,
    weights: &DeviceWeights<B>,
    g_a: &mut DeviceBuffer<B, T>,
) -> Result<(), LaunchError> {
    check_common::<B, T>(cfg, BACKWARD_GEMV_ENTRY, m, weights)?;
    check_gemv_rows("the backward GEMV entry", m)?;
    check_len("g_c", u64::from(m) * u64::from(cfg.n), g_c.len())?;
    check_len("g_a", u64::from(m) * u64::from(cfg.k), g_a.len())?;
    let slices = match slices {
        Slices::Auto => backward_gemv_slices(cfg),
        Slices::Exactly(s) => s,
    };
    let workspace = check_slices(cfg, m, slices)?;
    let sum = SplitSum {
        whole: (BACKWARD_GEMV_ENTRY, backward_gemv_launch_config(cfg)),
        split: (
            BACKWARD_GEMV_SPLIT_ENTRY,
            backward_gemv_split_launch_config(cfg, slices),
        ),
        reduce: (
            BACKWARD_GEMV_REDUCE_ENTRY,
            backward_gemv_reduce_launch_config(cfg, m),
        ),
        slices,
        per_slice: backward_gemv_slice_rows(cfg, slices),
        workspace,
    };
    sum.launch(dev, ptx, (g_c, weights, g_a, m))
}

/// A sum launched whole or split: each entry with its geometry, and the split's size.
struct SplitSum {
    whole: (&'static str, LaunchConfig),
    split: (&'static str, LaunchConfig),
    reduce: (&'static str, LaunchConfig),
    slices: u32,
    /// The split entry's last parameter: rows or columns per slice.
    per_slice: u32,
    /// Workspace elements ([`check_slice_count`]).
    workspace: u64,
}

impl SplitSum {
    /// One slice: the whole entry (`input, packed, <absmax>, output, m`). More: an f32
    /// workspace allocated through the backend, the split entry into it (`.., partials, m,
    /// per_slice`), then the reduce (`partials, output, m, slices`).
    fn launch<B: Backend, T: Nf4Activation>(
        &self,
        dev: &B,
        ptx: &str,
        (input, weights, output, m): (
            &DeviceBuffer<B, T>,
            &DeviceWeights<B>,
            &mut DeviceBuffer<B, T>,
            u32,
        ),
    ) -> Result<(), LaunchError> {
        if self.slices == 1 {
            let args = entry_args(input, weights, output, m);
            return dev.launch(ptx, self.whole.0, self.whole.1, &args);
        }
        let partials = dev.alloc::<f32>(self.workspace as usize)?;
        let mut args = entry_args(input, weights, &partials, m);
        args.push(KernelArg::U32(self.per_slice));
        dev.launch(ptx, self.split.0, self.split.1, &args)?;
        let args = [
            KernelArg::buffer(&partials),
            KernelArg::buffer(&*output),
            KernelArg::U32(m),
            KernelArg::U32(self.slices),
        ];
        dev.launch(ptx, self.reduce.0, self.reduce.1, &args)
    }
}

/// `slices` within `1 ..= limit` and a workspace of `workspace` elements within the u32 index
/// range (returned), else [`LaunchError::InvalidDim`] `slices`, `rule` saying what limits the
/// count.
fn check_slice_count(
    slices: u32,
    (limit, rule): (u32, String),
    workspace: u64,
) -> Result<u64, LaunchError> {
    if (1..=limit).contains(&slices) && workspace <= INDEX_BOUND.limit {
        return Ok(workspace);
    }
    Err(LaunchError::InvalidDim {
        name: "slices",
        value: u64::from(slices),
        reason: format!(
            "needs 1 ..= {limit} slices ({rule}) and a workspace of at most {} f32 ({workspace} \
             asked)",
            INDEX_BOUND.limit
        ),
    })
}

/// A split of the backward GEMV into `slices`: at least 1, at most `n` (every slice a row) and
/// `grid.y`, and a workspace (returned, in elements) within the u32 index range.
fn check_slices(cfg: &Nf4Config, m: u32, slices: u32) -> Result<u64, LaunchError> {
    let workspace = u64::from(slices) * backward_gemv_slice_len(cfg, m);
    let limit = cfg.n.min(MAX_GRID_Y);
    let rule = format!("at most n = {} rows of W and grid.y {MAX_GRID_Y}", cfg.n);
    check_slice_count(slices, (limit, rule), workspace)
}

/// Backward through the tiled entry (any `m ≥ 1`; [`backward_input`] picks it for `m > 8`).
pub fn backward_input_tiled<B: Backend, T: Nf4Activation>(
    cfg: &Nf4Config,
    dev: &B,
    ptx: &str,
    m: u32,
    g_c: &DeviceBuffer<B, T>,
    weights: &DeviceWeights<B>,
    g_a: &mut DeviceBuffer<B, T>,
) -> Result<(), LaunchError> {
    check_common::<B, T>(cfg, BACKWARD_INPUT_ENTRY, m, weights)?;
    check_row_tiles(m)?;
    check_len("g_c", u64::from(m) * u64::from(cfg.n), g_c.len())?;
    check_len("g_a", u64::from(m) * u64::from(cfg.k), g_a.len())?;
    let args = entry_args(g_c, weights, g_a, m);
    dev.launch(
        ptx,
        BACKWARD_INPUT_ENTRY,
        backward_input_launch_config(cfg, m),
        &args,
    )
}

/// Checks shared by every entry: dtype, configuration, `m`, and the weight buffers.
fn check_common<B: Backend, T: Nf4Activation>(
    cfg: &Nf4Config,
    entry: &'static str,
    m: u32,
    weights: &DeviceWeights<B>,
) -> Result<(), LaunchError> {
    if T::DTYPE != cfg.dtype {
        return Err(LaunchError::ArgumentType {
            entry: entry.to_string(),
            index: 0,
            expected: ParamKind::Pointer(cfg_element_kind(cfg.dtype)),
        });
    }
    cfg.validate()
        .map_err(|errs| LaunchError::Shape(format!("invalid nf4 configuration: {errs}")))?;
    cfg.check_m(m).map_err(|e| LaunchError::InvalidDim {
        name: "m",
        value: u64::from(m),
        reason: e.to_string(),
    })?;
    check_weights(cfg, entry, weights)
}

fn cfg_element_kind(dtype: DType) -> crate::launch::ScalarKind {
    use crate::launch::ScalarKind;
    match dtype {
        DType::F16 => ScalarKind::F16,
        DType::BF16 => ScalarKind::BF16,
        DType::F32 => ScalarKind::F32,
        DType::F64 => ScalarKind::F64,
    }
}

fn check_weights<B: Backend>(
    cfg: &Nf4Config,
    entry: &'static str,
    w: &DeviceWeights<B>,
) -> Result<(), LaunchError> {
    check_len("packed", cfg.packed_len(), w.packed.len())?;
    match (&w.absmax, cfg.double_quant) {
        (DeviceAbsmax::Plain(absmax), false) => check_len("absmax", cfg.absmax_len(), absmax.len()),
        (
            DeviceAbsmax::DoubleQuant {
                codes,
                map,
                nested_absmax,
                ..
            },
            true,
        ) => {
            check_len("absmax_codes", cfg.absmax_len(), codes.len())?;
            check_len("absmax_map", DYNAMIC_MAP_LEN as u64, map.len())?;
            check_len("nested_absmax", cfg.absmax_blocks(), nested_absmax.len())
        }
        (absmax, _) => Err(LaunchError::ArgumentCount {
            entry: entry.to_string(),
            expected: if cfg.double_quant { 8 } else { 5 },
            actual: match absmax {
                DeviceAbsmax::Plain(_) => 5,
                DeviceAbsmax::DoubleQuant { .. } => 8,
            },
        }),
    }
}

fn check_len(name: &'static str, expected: u64, actual: usize) -> Result<(), LaunchError> {
    if u64::try_from(actual).is_ok_and(|a| a == expected) {
        return Ok(());
    }
    Err(LaunchError::BufferLength {
        name,
        expected: usize::try_from(expected).unwrap_or(usize::MAX),
        actual,
    })
}

fn check_row_tiles(m: u32) -> Result<(), LaunchError> {
    let tiles = m.div_ceil(TILE_M);
    if tiles > MAX_GRID_Y {
        return Err(LaunchError::InvalidDim {
            name: "m",
            value: u64::from(m),
            reason: format!("{tiles} row tiles of {TILE_M} exceed the grid.y limit {MAX_GRID_Y}"),
        });
    }
    Ok(())
}

/// `input, packed, <absmax>, output, m` in the entries' parameter order.
fn entry_args<'a, B: Backend, T: Element, O: Element>(
    input: &'a DeviceBuffer<B, T>,
    w: &'a DeviceWeights<B>,
    output: &'a DeviceBuffer<B, O>,
    m: u32,
) -> Vec<KernelArg<'a, B>> {
    let mut args = vec![KernelArg::buffer(input), KernelArg::buffer(&w.packed)];
    match &w.absmax {
        DeviceAbsmax::Plain(absmax) => args.push(KernelArg::buffer(absmax)),
        DeviceAbsmax::DoubleQuant {
            codes,
            map,
            nested_absmax,
            offset,
        } => {
            args.push(KernelArg::buffer(codes));
            args.push(KernelArg::buffer(map));
            args.push(KernelArg::buffer(nested_absmax));
            args.push(KernelArg::F32(*offset));
        }
    }
    args.push(KernelArg::buffer(output));
    args.push(KernelArg::U32(m));
    args
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::templates::nf4::format::{quantize, Nf4DoubleQuant};

    type Recorder = crate::launch::RecordingBackend;

    fn setup(cfg: &Nf4Config) -> (Recorder, DeviceWeights<Recorder>) {
        let dev = Recorder::default();
        let q = quantize(&vec![0.25; (cfg.n * cfg.k) as usize], cfg.block as usize).unwrap();
        let w = if cfg.double_quant {
            DeviceWeights::upload_double_quant(&dev, &Nf4DoubleQuant::new(&q)).unwrap()
        } else {
            DeviceWeights::upload(&dev, &q).unwrap()
        };
        (dev, w)
    }

    #[test]
    fn picks_the_entry_and_geometry() {
        let cfg = Nf4Config::new(70, 130);
        let (dev, w) = setup(&cfg);
        for m in [1, 8, 9, 130] {
            let a = dev.alloc::<f32>((m * 130) as usize).unwrap();
            let mut c = dev.alloc::<f32>((m * 70) as usize).unwrap();
            forward(&cfg, &dev, "", m, &a, &w, &mut c).unwrap();
            let mut g_a = dev.alloc::<f32>((m * 130) as usize).unwrap();
            backward_input(&cfg, &dev, "", m, &c, &w, &mut g_a).unwrap();
        }
        let log = dev.launches();
        let grid = |i: usize| log[i].config.grid;
        assert_eq!(log[0].entry, GEMV_ENTRY);
        assert_eq!(grid(0), Dim3::x(9)); // ceil(70 / 8)
        assert_eq!(log[1].entry, BACKWARD_GEMV_ENTRY);
        assert_eq!(grid(1), Dim3::x(1)); // 256 columns per block: all k = 130 reaches
        assert_eq!(log[2].entry, GEMV_ENTRY);
        assert_eq!(log[3].entry, BACKWARD_GEMV_ENTRY); // m = 8
        assert_eq!(log[4].entry, GEMM_ENTRY);
        assert_eq!(grid(4), Dim3::new(2, 1, 1));
        assert_eq!(log[5].entry, BACKWARD_INPUT_ENTRY); // m = 9
        assert_eq!(grid(5), Dim3::new(1, 1, 1)); // ceil(130 / 256), ceil(9 / 64)
        assert_eq!(grid(6), Dim3::new(2, 3, 1)); // m = 130
        assert_eq!(log[7].entry, BACKWARD_INPUT_ENTRY);
        assert_eq!(grid(7), Dim3::new(1, 3, 1));
        for m in [1, 8, 9, 130] {
            assert_eq!(
                forward_entry(m),
                if m <= 8 { GEMV_ENTRY } else { GEMM_ENTRY }
            );
            assert_eq!(
                backward_entry(m),
                if m <= 8 {
                    BACKWARD_GEMV_ENTRY
                } else {
                    BACKWARD_INPUT_ENTRY
                }
            );
        }
        // The explicit entries launch what they name, whatever m.
        let g_c = dev.alloc::<f32>(70).unwrap();
        let mut g_a = dev.alloc::<f32>(130).unwrap();
        backward_input_tiled(&cfg, &dev, "", 1, &g_c, &w, &mut g_a).unwrap();
        backward_gemv(&cfg, &dev, "", 1, &g_c, &w, &mut g_a).unwrap();
        let log = dev.launches();
        assert_eq!(log[8].entry, BACKWARD_INPUT_ENTRY);
        assert_eq!(log[8].config.grid, Dim3::new(1, 1, 1));
        assert_eq!(log[9].entry, BACKWARD_GEMV_ENTRY);
        assert_eq!(log[9].config.grid, Dim3::x(1));
        assert!(log
            .iter()
            .all(|l| l.config.block == Dim3::x(THREADS) && l.args.len() == 5));
    }

    #[test]
    fn auto_slices_fill_two_waves_with_enough_rows_each() {
        // n = k = 4096 at block 64: 8 blocks of 512 columns, split 32 ways (128 rows each):
        // 256 blocks, at most 2 per SM of 132.
        let llm = Nf4Config::new(4096, 4096);
        let slices = backward_gemv_slices(&llm);
        let blocks = llm.k.div_ceil(backward_gemv_cols(&llm));
        assert_eq!((blocks, slices), (8, 32));
        assert!(blocks * slices <= 2 * 132 && blocks * slices > 132);
        assert_eq!(backward_gemv_slice_rows(&llm, slices), 128);
        assert_eq!(llm.n, 32 * 128);
        // No empty slice: the last one starts before n.
        assert!((slices - 1) * backward_gemv_slice_rows(&llm, slices) < llm.n);
        // Few rows: each slice keeps 64; under 128 rows no split.
        assert_eq!(backward_gemv_slices(&Nf4Config::new(300, 4096)), 4);
        assert_eq!(backward_gemv_slices(&Nf4Config::new(127, 4096)), 1);
        // A grid that fills the part already (132 blocks of 512 columns) is not split.
        assert_eq!(backward_gemv_slices(&Nf4Config::new(4096, 132 * 512)), 1);
        // 131 blocks: two slices (262 blocks), not four (524: the busiest SM would run 4).
        assert_eq!(backward_gemv_slices(&Nf4Config::new(4096, 131 * 512)), 2);
        // Full slices keep 64 rows: 130 rows in 2 slices (80 and 50), not 3.
        let short = Nf4Config::new(130, 4096);
        assert_eq!(backward_gemv_slices(&short), 2);
        assert_eq!(backward_gemv_slice_rows(&short, 2), 80);
    }

    /// Every path of the tiled forward at `n = k = 4096`: f16/bf16 tensor cores, tf32, and
    /// the CUDA-core GEMM (f32; f16 before sm_80).
    fn llm_paths() -> Vec<Nf4Config> {
        let llm = Nf4Config::new(4096, 4096);
        vec![
            Nf4Config {
                dtype: DType::F16,
                ..llm
            },
            Nf4Config {
                dtype: DType::BF16,
                double_quant: true,
                arch: crate::arch::Arch::Sm90,
                ..llm
            },
            Nf4Config {
                allow_tf32: true,
                ..llm
            },
            llm,
            Nf4Config {
                dtype: DType::F16,
                arch: crate::arch::Arch::Sm75,
                ..llm
            },
        ]
    }

    #[test]
    fn auto_k_slices_fill_two_waves_under_them() {
        // m = 16, n = k = 4096: 64 blocks unsplit, under half a wave of 132 SMs.
        let aligns = [64, 64, 256, 512, 512];
        let expected = [6, 6, 6, 8, 8];
        for ((cfg, align), want) in llm_paths().iter().zip(aligns).zip(expected) {
            let blocks = gemm_launch_config(cfg, 16).grid.x;
            assert_eq!(blocks, 64);
            assert_eq!(gemm_split_align(cfg), align, "{cfg:?}");
            let slices = gemm_slices(cfg, 16);
            assert_eq!(slices, want, "{cfg:?}");
            assert!(blocks * slices >= 2 * 132, "{cfg:?}");
            // Every slice starts on the alignment, has columns, all but the last ≥ 512.
            let each = gemm_slice_k(cfg, slices);
            assert!(each.is_multiple_of(align) && each >= MIN_SLICE_K, "{cfg:?}");
            assert!((slices - 1) * each < cfg.k, "{cfg:?}: an empty slice");
        }
        let f16 = llm_paths()[0];
        // 6 slices of 704 columns (11 stages of 64), the last 576.
        assert_eq!(gemm_slice_k(&f16, 6), 704);
        assert_eq!(
            gemm_split_launch_config(&f16, 16, 6).grid,
            Dim3::new(64, 1, 6)
        );
        // n = 14336 (224 blocks, 1.7 waves): two slices would leave the busiest SM two
        // block-lengths of work as unsplit, so none; 140 blocks (n = 8960) split in two:
        // 280 blocks, 3 half-lengths on the busiest SM instead of 2 whole ones.
        let wide = Nf4Config { n: 14336, ..f16 };
        assert_eq!(gemm_slices(&wide, 16), 1);
        assert_eq!(gemm_slices(&Nf4Config { n: 8960, ..f16 }, 16), 2);
        // On the tensor cores above 64 rows the split runs 128-row tiles: m = 512 (256
        // blocks) and 256 (128) leave the busiest SM as many block-lengths split as not, and
        // from m = 129 two slices' partials (8·S·m·n bytes written and read back) would
        // outweigh the code bytes (n·k/2): no split; m = 128 (64 blocks, half a wave) splits
        // in k / 16m = 2, not the 6 of m = 16, and m = 64 in 4; k under two 512-column
        // slices: no split.
        assert_eq!(gemm_slices(&f16, 512), 1);
        assert_eq!(gemm_slices(&f16, 272), 1);
        assert_eq!(gemm_slices(&f16, 256), 1);
        assert_eq!(gemm_slices(&f16, 129), 1);
        assert_eq!(gemm_slices(&f16, 128), 2);
        assert_eq!(gemm_slices(&f16, 64), 4);
        assert_eq!(
            gemm_split(&f16, 128, 2),
            (
                GEMM_TALL_SPLIT_ENTRY,
                gemm_tall_split_launch_config(&f16, 128, 2)
            )
        );
        assert_eq!(
            gemm_tall_split_launch_config(&f16, 128, 2).grid,
            Dim3::new(64, 1, 2)
        );
        assert_eq!(gemm_slices(&Nf4Config { k: 1022, ..f16 }, 16), 1);
        assert_eq!(gemm_slices(&Nf4Config { k: 1024, ..f16 }, 16), 2);
        // Few columns per slice never go under 512: k = 2048 at n = 512 gives 4, not 33.
        let small = Nf4Config {
            n: 512,
            k: 2048,
            ..f16
        };
        assert_eq!(gemm_slices(&small, 16), 4);
        // tf32 at block 256 steps 1024 columns: k = 4096 gives 4 slices of 1024.
        let coarse = Nf4Config {
            block: 256,
            ..llm_paths()[2]
        };
        assert_eq!(gemm_split_align(&coarse), 1024);
        assert_eq!(
            (gemm_slices(&coarse, 16), gemm_slice_k(&coarse, 4)),
            (4, 1024)
        );
    }

    /// Runs `run` with 1, 3 and the automatic number of slices, then with `None` (the plain
    /// entry point, which splits too here), and checks the entries: the whole one, then the
    /// split and the reduce three times (the automatic rule splits the test's shape).
    fn split_log(
        dev: &Recorder,
        [whole, split, reduce]: [&str; 3],
        run: &mut dyn FnMut(Option<Slices>),
    ) -> Vec<crate::launch::RecordedLaunch> {
        for slices in [Slices::Exactly(1), Slices::Exactly(3), Slices::Auto] {
            run(Some(slices));
        }
        run(None);
        let log = dev.launches();
        let entries: Vec<&str> = log.iter().map(|l| l.entry.as_str()).collect();
        assert_eq!(
            entries,
            [whole, split, reduce, split, reduce, split, reduce]
        );
        log
    }

    #[test]
    fn split_forward_launches_slices_then_the_reduce() {
        let cfg = Nf4Config::new(70, 1100);
        let (dev, w) = setup(&cfg);
        let m = 9;
        let a = dev.alloc::<f32>((m * 1100) as usize).unwrap();
        let mut c = dev.alloc::<f32>((m * 70) as usize).unwrap();
        let entries = [GEMM_ENTRY, GEMM_SPLIT_ENTRY, GEMM_REDUCE_ENTRY];
        let log = split_log(&dev, entries, &mut |slices| match slices {
            Some(s) => forward_tiled_sliced(&cfg, &dev, "", m, s, &a, &w, &mut c).unwrap(),
            None => forward(&cfg, &dev, "", m, &a, &w, &mut c).unwrap(),
        });
        // Auto: 512-column slices (f32 CUDA cores), the last 76.
        assert_eq!(log[0].config.grid, Dim3::new(2, 1, 1));
        assert_eq!(log[1].config.grid, Dim3::new(2, 1, 3));
        assert_eq!(log[3].config.grid, Dim3::new(2, 1, 3));
        // a, packed, absmax, partials, m, slice_k (⌈1100 / 3⌉ = 367, rounded up to 512).
        let u32_arg = Some(crate::launch::ScalarKind::U32);
        assert_eq!(log[1].args, [None, None, None, None, u32_arg, u32_arg]);
        assert_eq!(gemm_slice_k(&cfg, 3), 512);
        // ⌈⌈9 · 70 / 4⌉ / 256⌉ = 1 block of the reduce; partials, c, m, slices.
        assert_eq!(log[2].config.grid, Dim3::x(1));
        assert_eq!(log[2].args, [None, None, u32_arg, u32_arg]);
        assert_eq!(gemm_slice_len(&cfg, m), 632); // 630 rounded up to 4
    }

    #[test]
    fn bad_k_slice_counts_are_invalid_dims_before_launch() {
        let cfg = Nf4Config::new(10, 1100); // f32 CUDA cores: 512-column steps, at most 3
        let (dev, w) = setup(&cfg);
        let a = dev.alloc::<f32>(9 * 1100).unwrap();
        let mut c = dev.alloc::<f32>(9 * 10).unwrap();
        for bad in [0, 4, 70000] {
            let err = forward_tiled_sliced(&cfg, &dev, "", 9, Slices::Exactly(bad), &a, &w, &mut c)
                .unwrap_err();
            match err {
                LaunchError::InvalidDim {
                    name,
                    value,
                    reason,
                } => {
                    assert_eq!((name, value), ("slices", u64::from(bad)));
                    assert!(reason.contains("1 ..= 3 slices"), "{reason}");
                }
                other => panic!("{bad}: {other}"),
            }
        }
        assert_eq!(gemm_max_slices(&cfg), 3);
        // A workspace past the u32 index range: 2 slices of m · n = 2^31 elements.
        let wide = Nf4Config::new(1 << 16, 4096);
        assert!(check_gemm_slices(&wide, 1 << 15, 2).is_err());
        assert!(check_gemm_slices(&wide, 1 << 15, 1).is_ok());
        assert!(dev.launches().is_empty(), "nothing may launch");
    }

    #[test]
    fn split_backward_gemv_launches_slices_then_the_reduce() {
        let cfg = Nf4Config::new(300, 130);
        let (dev, w) = setup(&cfg);
        let m = 3;
        let g_c = dev.alloc::<f32>((m * 300) as usize).unwrap();
        let mut g_a = dev.alloc::<f32>((m * 130) as usize).unwrap();
        let entries = [
            BACKWARD_GEMV_ENTRY,
            BACKWARD_GEMV_SPLIT_ENTRY,
            BACKWARD_GEMV_REDUCE_ENTRY,
        ];
        let log = split_log(&dev, entries, &mut |slices| match slices {
            Some(s) => backward_gemv_sliced(&cfg, &dev, "", m, s, &g_c, &w, &mut g_a).unwrap(),
            None => backward_input(&cfg, &dev, "", m, &g_c, &w, &mut g_a).unwrap(),
        });
        // Auto: 4 slices of 75 rows.
        assert_eq!(log[0].config.grid, Dim3::x(1));
        assert_eq!(log[1].config.grid, Dim3::new(1, 3, 1));
        assert_eq!(log[3].config.grid, Dim3::new(1, 4, 1));
        // g_c, packed, absmax, partials, m, slice_rows (⌈300 / 3⌉ = 100, rounded up to 112).
        let u32_arg = Some(crate::launch::ScalarKind::U32);
        assert_eq!(log[1].args, [None, None, None, None, u32_arg, u32_arg]);
        assert_eq!(backward_gemv_slice_rows(&cfg, 3), 112);
        // ⌈⌈3 · 130 / 4⌉ / 256⌉ = 1 block of the reduce; partials, g_a, m, slices.
        assert_eq!(log[2].config.grid, Dim3::x(1));
        assert_eq!(log[2].args, [None, None, u32_arg, u32_arg]);
        assert_eq!(backward_gemv_slice_len(&cfg, m), 392); // 390 rounded up to 4
    }

    #[test]
    fn bad_slice_counts_are_invalid_dims_before_launch() {
        let cfg = Nf4Config::new(10, 64);
        let (dev, w) = setup(&cfg);
        let g_c = dev.alloc::<f32>(10).unwrap();
        let mut g_a = dev.alloc::<f32>(64).unwrap();
        for bad in [0, 11, 70000] {
            let err =
                backward_gemv_sliced(&cfg, &dev, "", 1, Slices::Exactly(bad), &g_c, &w, &mut g_a)
                    .unwrap_err();
            match err {
                LaunchError::InvalidDim {
                    name,
                    value,
                    reason,
                } => {
                    assert_eq!((name, value), ("slices", u64::from(bad)));
                    assert!(reason.contains("1 ..= 10 slices"), "{reason}");
                }
                other => panic!("{bad}: {other}"),
            }
        }
        // A workspace past the u32 index range.
        let wide = Nf4Config::new(4, 1 << 30);
        assert!(check_slices(&wide, 2, 2).is_err());
        assert!(check_slices(&wide, 2, 1).is_ok());
        assert!(dev.launches().is_empty(), "nothing may launch");
    }

    #[test]
    fn every_bad_input_is_a_typed_error_before_launch() {
        let cfg = Nf4Config {
            double_quant: true,
            ..Nf4Config::new(10, 64)
        };
        let (dev, w) = setup(&cfg);
        let a = dev.alloc::<f32>(2 * 64).unwrap();
        let mut c = dev.alloc::<f32>(2 * 10).unwrap();
        let err = |r: Result<(), LaunchError>| r.unwrap_err();
        // Lengths of every buffer.
        let short_a = dev.alloc::<f32>(2 * 64 - 1).unwrap();
        assert!(matches!(
            err(forward(&cfg, &dev, "", 2, &short_a, &w, &mut c)),
            LaunchError::BufferLength {
                name: "a",
                expected: 128,
                actual: 127
            }
        ));
        let mut long_c = dev.alloc::<f32>(21).unwrap();
        assert!(matches!(
            err(forward_tiled(&cfg, &dev, "", 2, &a, &w, &mut long_c)),
            LaunchError::BufferLength { name: "c", .. }
        ));
        for (name, bad) in [
            (
                "packed",
                DeviceWeights {
                    packed: dev.alloc(319).unwrap(),
                    absmax: DeviceAbsmax::DoubleQuant {
                        codes: dev.alloc(10).unwrap(),
                        map: dev.alloc(256).unwrap(),
                        nested_absmax: dev.alloc(1).unwrap(),
                        offset: 0.0,
                    },
                },
            ),
            (
                "absmax_codes",
                DeviceWeights {
                    packed: dev.alloc(320).unwrap(),
                    absmax: DeviceAbsmax::DoubleQuant {
                        codes: dev.alloc(11).unwrap(),
                        map: dev.alloc(256).unwrap(),
                        nested_absmax: dev.alloc(1).unwrap(),
                        offset: 0.0,
                    },
                },
            ),
            (
                "absmax_map",
                DeviceWeights {
                    packed: dev.alloc(320).unwrap(),
                    absmax: DeviceAbsmax::DoubleQuant {
                        codes: dev.alloc(10).unwrap(),
                        map: dev.alloc(16).unwrap(),
                        nested_absmax: dev.alloc(1).unwrap(),
                        offset: 0.0,
                    },
                },
            ),
            (
                "nested_absmax",
                DeviceWeights {
                    packed: dev.alloc(320).unwrap(),
                    absmax: DeviceAbsmax::DoubleQuant {
                        codes: dev.alloc(10).unwrap(),
                        map: dev.alloc(256).unwrap(),
                        nested_absmax: dev.alloc(2).unwrap(),
                        offset: 0.0,
                    },
                },
            ),
        ] {
            match err(forward(&cfg, &dev, "", 2, &a, &bad, &mut c)) {
                LaunchError::BufferLength { name: got, .. } => assert_eq!(got, name),
                other => panic!("{name}: {other}"),
            }
        }
        let plain = DeviceWeights {
            packed: dev.alloc(320).unwrap(),
            absmax: DeviceAbsmax::Plain(dev.alloc(10).unwrap()),
        };
        assert!(matches!(
            err(forward(&cfg, &dev, "", 2, &a, &plain, &mut c)),
            LaunchError::ArgumentCount {
                expected: 8,
                actual: 5,
                ..
            }
        ));
        let single = Nf4Config {
            double_quant: false,
            ..cfg
        };
        let short_absmax = DeviceWeights {
            packed: dev.alloc(320).unwrap(),
            absmax: DeviceAbsmax::Plain(dev.alloc(9).unwrap()),
        };
        assert!(matches!(
            err(forward(&single, &dev, "", 2, &a, &short_absmax, &mut c)),
            LaunchError::BufferLength {
                name: "absmax",
                expected: 10,
                actual: 9
            }
        ));
        // m = 0, m beyond the GEMV, m · k past u32, more row tiles than grid.y.
        assert!(matches!(
            err(backward_input(
                &cfg,
                &dev,
                "",
                0,
                &c,
                &w,
                &mut dev.alloc(0).unwrap()
            )),
            LaunchError::InvalidDim {
                name: "m",
                value: 0,
                ..
            }
        ));
        assert!(matches!(
            err(forward_gemv(&cfg, &dev, "", 9, &a, &w, &mut c)),
            LaunchError::InvalidDim {
                name: "m",
                value: 9,
                ..
            }
        ));
        let g_c9 = dev.alloc::<f32>(9 * 10).unwrap();
        let mut g_a9 = dev.alloc::<f32>(9 * 64).unwrap();
        assert!(matches!(
            err(backward_gemv(&cfg, &dev, "", 9, &g_c9, &w, &mut g_a9)),
            LaunchError::InvalidDim {
                name: "m",
                value: 9,
                ..
            }
        ));
        let mut short_g_a = dev.alloc::<f32>(2 * 64 - 1).unwrap();
        assert!(matches!(
            err(backward_gemv(&cfg, &dev, "", 2, &c, &w, &mut short_g_a)),
            LaunchError::BufferLength {
                name: "g_a",
                expected: 128,
                actual: 127
            }
        ));
        let huge = 1u32 << 27; // · k = 2^33
        assert!(matches!(
            err(forward(&cfg, &dev, "", huge, &a, &w, &mut c)),
            LaunchError::InvalidDim { name: "m", .. }
        ));
        let thin = Nf4Config { n: 2, k: 2, ..cfg };
        let (thin_dev, thin_w) = setup(&thin);
        let rows = 65536 * TILE_M;
        assert!(matches!(
            err(forward(&thin, &thin_dev, "", rows, &a, &thin_w, &mut c)),
            LaunchError::InvalidDim { name: "m", value, .. } if value == u64::from(rows)
        ));
        // Element type other than the config's dtype, and an invalid configuration.
        let a16 = dev.alloc::<half::f16>(128).unwrap();
        let mut c16 = dev.alloc::<half::f16>(20).unwrap();
        assert!(matches!(
            err(forward(&cfg, &dev, "", 2, &a16, &w, &mut c16)),
            LaunchError::ArgumentType { index: 0, .. }
        ));
        let odd = Nf4Config { k: 63, ..cfg };
        assert!(matches!(
            err(forward(&odd, &dev, "", 2, &a, &w, &mut c)),
            LaunchError::Shape(_)
        ));
        assert!(dev.launches().is_empty(), "nothing may launch");
        assert!(thin_dev.launches().is_empty(), "nothing may launch");
    }
}
