//! The NF4 kernels: entry builders, the pieces they share, and the [`KernelFamily`]
//! implementation that compiles one [`Nf4Config`] into one PTX module.
//!
//! Entries (every one in the same module, parameters in this order):
//!
//! | entry | computes | parameters |
//! |---|---|---|
//! | [`GEMV_ENTRY`] | `C = A · Ŵᵀ`, `m ≤` [`GEMV_MAX_M`] | `a, packed, <absmax>, c, m` |
//! | [`GEMM_ENTRY`] | `C = A · Ŵᵀ`, any `m` | `a, packed, <absmax>, c, m` |
//! | [`GEMM_TALL_ENTRY`] | `C = A · Ŵᵀ`, 128-row tiles (f16/bf16 tensor cores only: [`has_gemm_tall`]) | `a, packed, <absmax>, c, m` |
//! | [`BACKWARD_INPUT_ENTRY`] | `G_A = G_C · Ŵ`, any `m` (tiled) | `g_c, packed, <absmax>, g_a, m` |
//! | [`BACKWARD_GEMV_ENTRY`] | `G_A = G_C · Ŵ`, `m ≤` [`GEMV_MAX_M`] | `g_c, packed, <absmax>, g_a, m` |
//! | [`BACKWARD_GEMV_SPLIT_ENTRY`] | slice `ctaid.y` of the rows of `W` into f32 partials | `g_c, packed, <absmax>, partials, m, slice_rows` |
//! | [`BACKWARD_GEMV_REDUCE_ENTRY`] | `G_A` = the slices' partials summed in order | `partials, g_a, m, slices` |
//! | [`GEMM_SPLIT_ENTRY`] | K slice `ctaid.z` of the tiled forward into f32 partials | `a, packed, <absmax>, partials, m, slice_k` |
//! | [`GEMM_TALL_SPLIT_ENTRY`] | the same on 128-row tiles ([`has_gemm_tall_split`]) | `a, packed, <absmax>, partials, m, slice_k` |
//! | [`GEMM_REDUCE_ENTRY`] | `C` = the K slices' partials summed in order | `partials, c, m, slices` |
//!
//! The backward GEMV's grid, `⌈k / cols⌉` blocks of 512 columns, is small (8 at `k = 4096`):
//! the host splits the sum over the `n` rows of `W` into `S` slices (grid `(⌈k / cols⌉, S)`,
//! `S` from `launch::backward_gemv_slices`), each writing f32 partial sums to a workspace the
//! launcher allocates, and the reduce adds them in slice order and rounds once (deterministic,
//! the conv backward-filter's scheme). The tiled forward's grid `(⌈n / 64⌉, ⌈m / 64⌉)` is small
//! at prefill sizes the same way, so the host may split its `k` into slices (grid `(⌈n / 64⌉,
//! ⌈m / 64⌉, S)`, each slice starting on [`gemm_split_align`], `S` from
//! `launch::gemm_slices`), reduced by the same kernel over `n` columns (`slice_reduce`).
//!
//! `<absmax>` is `absmax` (`f32 [absmax_len]`) or, with `double_quant`, bitsandbytes' nested state:
//! `absmax_codes` (`u8 [absmax_len]`), `absmax_map` (`f32 [256]`), `nested_absmax`
//! (`f32 [absmax_blocks]`) and `absmax_offset` (`f32`).
//! Activations and outputs have the config's dtype; every product is accumulated in f32 and the
//! result rounded once to the output type (round to nearest even).
//!
//! Tensor cores: for f16/bf16 on targets with [`tensor_cores`] (sm_80+) the two tiled GEMMs
//! are built by `gemm_tc` and `backward_tc` instead (same entry names, parameters, grid and
//! block; `gemm_tc` also builds [`GEMM_TALL_ENTRY`], the forward on 128-row tiles, which the
//! launcher runs above 64 rows so each dequantised B fragment serves twice the rows, split
//! over K as [`GEMM_TALL_SPLIT_ENTRY`]):
//! activations by a 3-stage `cp.async` ring into padded shared memory and `ldmatrix`,
//! packed codes by `cp.async` into shared memory (`code_stage`: whole chunks, or the aligned
//! words covering rows that are not 4-byte multiples) and dequantised in registers straight
//! into `mma.m16n8k16` B fragments in the activation type (`half_dequant`: the codes rounded
//! to `T`, looked up by `prmt` from byte planes in registers in the forward and from a
//! 16-word shared table in the backward, then one packed `fma` by the block's absmax rounded
//! to `T` per pair of weights), f32 accumulators. f32 activations with `allow_tf32` take `tc_tf32` (tf32 `mma.m16n8k8` on the
//! shared `warp_mma` tile, blocks of 128 threads: [`gemm_threads`], the backward's A tile
//! against 4 B tiles, 256 columns; its codes ride the same ring,
//! the forward's 32 bytes per weight row every 4 stages (`code_stage::CodeRing`), and are
//! dequantised each step into one f32 B tile). Other f32 configurations and older
//! targets keep the CUDA-core GEMMs, silently; the GEMVs (bandwidth-bound, 16-byte loads) are
//! the same on every target.
//!
//! Absmax reads: the tensor-core forwards keep a quad's sliding window of the row's absmax in
//! registers (`absmax_window`, whole-sector loads); the tensor-core backwards, the backward
//! GEMV, the CUDA-core forward (`8 · block` columns at a time, `gemm`), and the f16/bf16
//! forward under double quantisation with `k % block ≠ 0`, stage each code window's absmax in
//! shared memory with the codes (`absmax_stage`: one value per thread per stage, not one load
//! per lane, row and step; the GEMV and CUDA-core ones by plain loads on every target, the
//! backward GEMV's blocks [`backward_gemv_cols`] wide so that a weight row's absmax fill a
//! sector); the tf32 forward's quads decode four blocks of a row at once under double
//! quantisation with `k % block = 0`; under double quantisation the tiled tensor-core GEMMs
//! first copy the 256-entry map to shared memory (one coalesced 1 KiB copy per block,
//! every entry does), so each decode reads only the code byte
//! and the nested absmax from global memory (the backward GEMV and the CUDA-core forward also
//! copy each window's nested absmax, `absmax_stage::NestedWindow`, so their decodes read only
//! code bytes). Interpreter global load efficiency (`runtime/tests/nf4_counters.rs`): ≥ 0.9
//! for the forwards when rows are whole sectors, for the backward GEMV when `k % 512 = 0` (1.0
//! with plain absmax, 0.93 under double quantisation at block 64; its split slices read the same
//! rows the same way, and the slices' reduce reads 16-byte f32 vectors), and for the tensor-core
//! backwards (256-column tiles, [`backward_input_cols`]: per weight row 128 code bytes and 16
//! bytes of one absmax sector at block 64; tf32 0.95 at `m = 80`); rows off sector boundaries
//! and the CUDA-core backward are listed there with their figures.
//!
//! Dequantisation is the host's, bit for bit, on every path but the f16/bf16 tensor-core GEMMs:
//! `ŵ = NF4_CODE[code] · absmax` (one `mul.rn.f32`), with `absmax = map[code8] · nested_absmax +
//! offset` (`mul.rn`, `add.rn`: never contracted to an fma) under double quantisation (that
//! absmax is the host's on every path). The f16/bf16 tensor-core GEMMs multiply in the
//! activation type instead, `rn(rn(NF4_CODE[code]) · rn(absmax))` with every rounding to `T`
//! (as bitsandbytes' 4-bit kernels do; within `3u · |ŵ|`, `u` = 2⁻¹¹ f16, 2⁻⁸ bf16: the error
//! budget is in `half_dequant`). The 16 code values live in a 64-byte shared table, in f32 or
//! in `T` (16 words in 16 banks, so any warp-wide lookup is one wavefront): the f16/bf16
//! tensor-core backward declares only the `T` one (the forward keeps its codes in registers,
//! `half_dequant::CodeLookup::Registers`), the GEMV its f32 one on a 256-byte boundary
//! (one `prmt` forms a lookup's address, `CodeTable::Aligned256`), the others the plain f32
//! one.

mod absmax_stage;
mod absmax_window;
mod backward;
mod backward_gemv;
mod backward_gemv_words;
mod backward_tc;
mod code_stage;
mod gemm;
mod gemm_tc;
mod gemv;
mod half_dequant;
mod slice_reduce;
mod tc;
mod tc_tf32;

pub use tc::tensor_cores;
pub use tc_tf32::takes as tf32_tensor_cores;

use crate::arch::Arch;
use crate::builder::{
    Float, GlobalPtr, Int, KernelBuilder, MmaInput, ModuleBuilder, PackedHalf, ParamHandle, Reg,
    Scalar, SharedArr, BF16, F16, F32, M16N8K16, U16, U32,
};
use crate::dtype::DType;
use crate::ir::{BinOp, CmpOp, Op, Operand, Rounding, Type};
use crate::templates::{CompiledFamily, KernelFamily, TemplateError};

use super::config::INDEX_BOUND;
use super::format::{ABSMAX_BLOCK, NF4_CODE};
use super::Nf4Config;
use crate::lint::address::declare_index_bound;
use slice_reduce::SumRange;

/// Entry name of the small-`m` forward GEMV.
pub const GEMV_ENTRY: &str = "nf4_gemv";
/// Entry name of the tiled forward GEMM.
pub const GEMM_ENTRY: &str = "nf4_gemm";
/// Entry name of the tiled forward GEMM on [`TILE_M_TALL`]-row tiles (modules with
/// [`has_gemm_tall`] only).
pub const GEMM_TALL_ENTRY: &str = "nf4_gemm_tall";
/// Entry name of the backward-input GEMM.
pub const BACKWARD_INPUT_ENTRY: &str = "nf4_backward_input";
/// Entry name of the small-`m` backward-input GEMV.
pub const BACKWARD_GEMV_ENTRY: &str = "nf4_backward_gemv";
/// Entry name of one slice of the split backward GEMV (f32 partial sums).
pub const BACKWARD_GEMV_SPLIT_ENTRY: &str = "nf4_backward_gemv_split";
/// Entry name of the pass adding the split backward GEMV's slices into `G_A`.
pub const BACKWARD_GEMV_REDUCE_ENTRY: &str = "nf4_backward_gemv_reduce";
/// Entry name of one K slice of the split tiled forward (f32 partial `C` tiles).
pub const GEMM_SPLIT_ENTRY: &str = "nf4_gemm_split";
/// Entry name of the tiled forward's K slices on 128-row tiles (modules with
/// [`GEMM_TALL_ENTRY`]).
pub const GEMM_TALL_SPLIT_ENTRY: &str = "nf4_gemm_tall_split";
/// Entry name of the pass adding the split forward's K slices into `C`.
pub const GEMM_REDUCE_ENTRY: &str = "nf4_gemm_reduce";
pub use backward_gemv::cols as backward_gemv_cols;
pub use slice_reduce::VECTOR as REDUCE_VECTOR;

/// Elements between two slices' parts of the split backward GEMV's workspace: `m · k` rounded
/// up to [`REDUCE_VECTOR`].
pub fn backward_gemv_slice_len(cfg: &Nf4Config, m: u32) -> u64 {
    slice_reduce::slice_len(cfg.k, m)
}

/// Elements between two K slices' parts of the split forward's workspace: `m · n` rounded up
/// to [`REDUCE_VECTOR`].
pub fn gemm_slice_len(cfg: &Nf4Config, m: u32) -> u64 {
    slice_reduce::slice_len(cfg.n, m)
}

/// Threads per block of every entry (8 warps).
pub const THREADS: u32 = 256;
/// Warps per block.
pub const WARPS: u32 = THREADS / 32;
/// Largest `m` the GEMV entry handles (it keeps one accumulator per activation row).
pub const GEMV_MAX_M: u32 = 8;
/// Output rows (`W` rows) per GEMV block: one per warp.
pub const GEMV_ROWS_PER_BLOCK: u32 = WARPS;
/// Output tile of the tiled forward: `TILE_M × TILE_N` per block (the backward's is `TILE_M ×`
/// [`backward_input_cols`]).
pub const TILE_M: u32 = 64;
pub const TILE_N: u32 = 64;
/// Output rows per block of [`GEMM_TALL_ENTRY`] (its columns are [`TILE_N`]).
pub const TILE_M_TALL: u32 = 128;

/// Whether the module has [`GEMM_TALL_ENTRY`]: f16/bf16 on [`tensor_cores`], where each warp
/// dequantises its B fragments in registers and its 64 of the 128 rows reuse each one over 4
/// `mma` while reading half the activation tile.
pub fn has_gemm_tall(cfg: &Nf4Config) -> bool {
    matches!(cfg.dtype, DType::F16 | DType::BF16) && tensor_cores(cfg)
}

/// Whether the module has [`GEMM_TALL_SPLIT_ENTRY`]: whenever it has [`GEMM_TALL_ENTRY`].
/// Under double quantisation with `k % block ≠ 0` (the ring's shared absmax staging, the
/// split's slice bounds live beside its addresses) ptxas spilled 4 bytes on sm_90 at the old
/// 80-register cap; at today's 128 it takes 104–114 registers without spills
/// (`runtime/tests/nf4_ptxas.rs`), so those splits run 128-row tiles too.
pub fn has_gemm_tall_split(cfg: &Nf4Config) -> bool {
    has_gemm_tall(cfg)
}

/// An unsigned byte: the element type of packed codes and double-quantised absmax codes. Loaded
/// into 16-bit registers (`ld.global.u8 %h`), as nvcc does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct U8;

impl Scalar for U8 {
    const TYPE: Type = Type::U8;
    const MOVE_TYPE: Type = Type::U8;
}

impl Int for U8 {}

impl KernelFamily for Nf4Config {
    const FAMILY: &'static str = "nf4";

    fn compile(&self) -> Result<CompiledFamily, TemplateError> {
        self.validate()?;
        let mut module = ModuleBuilder::new(self.arch);
        match self.dtype {
            DType::F16 if tensor_cores(self) => push_tc_entries::<F16>(&mut module, self),
            DType::BF16 if tensor_cores(self) => push_tc_entries::<BF16>(&mut module, self),
            DType::F16 => push_entries::<F16>(&mut module, self),
            DType::BF16 => push_entries::<BF16>(&mut module, self),
            DType::F32 if tf32_tensor_cores(self) => {
                module.push(gemv::build::<F32>(self));
                module.push(tc_tf32::build_gemm(self));
                module.push(tc_tf32::build_gemm_split(self));
                push_gemm_reduce::<F32>(&mut module, self);
                module.push(tc_tf32::build_backward(self));
                push_backward_gemv::<F32>(&mut module, self);
            }
            // `validate` rejected every other dtype.
            _ => push_entries::<F32>(&mut module, self),
        }
        Ok(CompiledFamily::from_module(&module.build()?))
    }

    fn matrix_name(&self) -> String {
        format!(
            "nf4_{}_n{}_k{}_b{}{}{}",
            self.dtype,
            self.n,
            self.k,
            self.block,
            if self.double_quant { "_dq" } else { "" },
            if self.allow_tf32 { "_tf32" } else { "" }
        )
    }

    fn arch(&self) -> Arch {
        self.arch
    }
}

fn push_entries<T: Float>(module: &mut ModuleBuilder, cfg: &Nf4Config) {
    module.push(gemv::build::<T>(cfg));
    module.push(gemm::build::<T>(cfg));
    module.push(gemm::build_split::<T>(cfg));
    push_gemm_reduce::<T>(module, cfg);
    module.push(backward::build::<T>(cfg));
    push_backward_gemv::<T>(module, cfg);
}

/// The backward GEMV's entries: whole, split into slices, and the slices' reduce.
fn push_backward_gemv<T: Float>(module: &mut ModuleBuilder, cfg: &Nf4Config) {
    module.push(backward_gemv::build::<T>(cfg));
    module.push(backward_gemv::build_split::<T>(cfg));
    let names = (BACKWARD_GEMV_REDUCE_ENTRY, "g_a");
    module.push(slice_reduce::build::<T>(cfg.arch, names, cfg.k));
}

/// The split forward's reduce: `nf4_gemm_reduce` over `C [m, n]`.
fn push_gemm_reduce<T: Float>(module: &mut ModuleBuilder, cfg: &Nf4Config) {
    let names = (GEMM_REDUCE_ENTRY, "c");
    module.push(slice_reduce::build::<T>(cfg.arch, names, cfg.n));
}

/// The columns a K slice of the split forward (`nf4_gemm_split`) must start on: a multiple
/// of the quantisation block and of what the path steps and stages `k` by, so that a slice's
/// first tile starts every window the unsplit entry would start there (absmax spans, code
/// windows, decoded block groups):
/// - f16/bf16 tensor cores (`gemm_tc`): `max(64, block)` (64-column stages, each quad's
///   absmax window slides from the slice's first block);
/// - tf32 tensor cores (`tc_tf32`): `max(64, 4 · block)` (a code copy covers 4 tiles of 16
///   columns; under double quantisation a quad decodes 4 blocks at once from a multiple of 4);
/// - CUDA cores (`gemm`): the absmax span, `8 · block` within 64 ..= 512.
pub fn gemm_split_align(cfg: &Nf4Config) -> u32 {
    if matches!(cfg.dtype, DType::F16 | DType::BF16) && tensor_cores(cfg) {
        gemm_tc::split_align(cfg)
    } else if tf32_tensor_cores(cfg) {
        tc_tf32::split_align(cfg)
    } else {
        gemm::split_align(cfg)
    }
}

/// Threads per block of the tiled GEMMs (`nf4_gemm`, `nf4_backward_input`): [`THREADS`], or
/// the `warp_mma` tile's 128 on the tf32 path ([`tf32_tensor_cores`]).
pub fn gemm_threads(cfg: &Nf4Config) -> u32 {
    if tf32_tensor_cores(cfg) {
        crate::templates::warp_mma::THREADS
    } else {
        THREADS
    }
}

/// Columns of `G_A` per block of `nf4_backward_input`: 256 on every path (`backward_tc` for
/// f16/bf16 tensor cores, `tc_tf32` for f32 on tf32, `backward` on CUDA cores: wide tiles
/// read whole sectors of codes and absmax).
pub fn backward_input_cols(cfg: &Nf4Config) -> u32 {
    if matches!(cfg.dtype, DType::F16 | DType::BF16) && tensor_cores(cfg) {
        backward_tc::COLS
    } else if tf32_tensor_cores(cfg) {
        tc_tf32::BACKWARD_COLS
    } else {
        backward::COLS
    }
}

/// f16/bf16 on sm_80+: the tiled GEMMs on tensor cores, the GEMVs (bandwidth-bound) as they are.
fn push_tc_entries<T: Float + PackedHalf>(module: &mut ModuleBuilder, cfg: &Nf4Config)
where
    M16N8K16: MmaInput<T, Packed = T::Pair>,
{
    module.push(gemv::build::<T>(cfg));
    module.push(gemm_tc::build::<T>(cfg));
    module.push(gemm_tc::build_tall::<T>(cfg));
    module.push(gemm_tc::build_split::<T>(cfg));
    if has_gemm_tall_split(cfg) {
        module.push(gemm_tc::build_tall_split::<T>(cfg));
    }
    push_gemm_reduce::<T>(module, cfg);
    module.push(backward_tc::build::<T>(cfg));
    push_backward_gemv::<T>(module, cfg);
}

/// The emit-matrix configurations: each activation dtype × three shapes × every target.
///
/// The shapes cover an aligned LLM projection (`k % 32 = 0`, the pure 16-byte GEMV path), a
/// ragged one (`k % 32 ≠ 0`: byte-wise row heads and tails, blocks spanning rows, a ragged last
/// block) with double quantisation, and the largest block size.
pub fn matrix_configs() -> Vec<Nf4Config> {
    let shapes = [
        (4096, 4096, 64, false),
        (1000, 1002, 128, true),
        (11008, 4096, 256, true),
    ];
    let mut out = Vec::new();
    for dtype in [DType::F16, DType::BF16, DType::F32] {
        for (n, k, block, double_quant) in shapes {
            for arch in Arch::ALL {
                out.push(Nf4Config {
                    n,
                    k,
                    block,
                    double_quant,
                    dtype,
                    allow_tf32: false,
                    arch,
                });
            }
        }
    }
    // f32 on tf32 tensor cores (sm_80+; the CUDA-core GEMMs before), the aligned and the
    // largest shape.
    for (n, k, block, double_quant) in [shapes[0], shapes[2]] {
        for arch in Arch::ALL {
            out.push(Nf4Config {
                allow_tf32: true,
                block,
                double_quant,
                arch,
                ..Nf4Config::new(n, k)
            });
        }
    }
    out
}

// ---- shared pieces ------------------------------------------------------------------------

/// The absmax parameters of an entry, as declared.
enum AbsmaxParams {
    Plain(ParamHandle<GlobalPtr<F32>>),
    Double {
        codes: ParamHandle<GlobalPtr<U8>>,
        map: ParamHandle<GlobalPtr<F32>>,
        nested: ParamHandle<GlobalPtr<F32>>,
        offset: ParamHandle<F32>,
    },
}

/// Where a block's absmax comes from, once the parameters are loaded.
#[derive(Clone, Copy)]
enum AbsmaxSource {
    Plain(GlobalPtr<F32>),
    Double {
        codes: GlobalPtr<U8>,
        /// The 256-entry dynamic map, copied to shared memory by the prologue.
        map: SharedArr<F32>,
        nested: NestedAt,
        offset: Reg<F32>,
    },
}

/// Where double quantisation's nested absmax (one per [`ABSMAX_BLOCK`] blocks) are read from.
#[derive(Clone, Copy)]
enum NestedAt {
    Global(GlobalPtr<F32>),
    /// `nested_absmax[first ..]`, copied to shared memory (the backward GEMV's window,
    /// [`absmax_stage::NestedWindow`]).
    Shared {
        copy: SharedArr<F32>,
        first: Reg<U32>,
    },
}

/// The quantised weight as a kernel sees it: packed codes, absmax, the shared code table and
/// the compile-time shape.
#[derive(Clone, Copy)]
struct Weights {
    packed: GlobalPtr<U8>,
    absmax: AbsmaxSource,
    /// Shared byte address of the 16-entry f32 code table (taken once per kernel, not per
    /// lookup); `None` in the entries that declare none ([`CodeTable::Absent`]).
    codebook: Option<Reg<U32>>,
    /// `log2(block)`: blocks are powers of two, so `element / block` is a shift.
    block_shift: u32,
}

/// Declared parameters of one entry: `input, packed, <absmax>, output, m`.
struct EntryParams<T: Scalar, O: Scalar> {
    input: ParamHandle<GlobalPtr<T>>,
    packed: ParamHandle<GlobalPtr<U8>>,
    absmax: AbsmaxParams,
    output: ParamHandle<GlobalPtr<O>>,
    m: ParamHandle<U32>,
}

/// Loaded parameters of one entry; the output has the activation type `T` except in the
/// backward GEMV's slices, which write f32 partial sums.
struct Entry<T: Scalar, O: Scalar = T> {
    input: GlobalPtr<T>,
    weights: Weights,
    output: GlobalPtr<O>,
    m: Reg<U32>,
}

/// Declares `input, packed, <absmax>, output, m` in that order, then loads them and writes the
/// NF4 code table (and, under double quantisation, the 256-entry map, copied by the block's
/// `threads` threads) to shared memory, followed by a barrier, so every later phase may read
/// them. Every entry copies the map: one coalesced 1 KiB copy per block, then each absmax
/// decode looks it up in shared memory instead of gathering 4 bytes from a random global sector
/// (a warp's 32 decodes could touch 32 sectors).
fn entry_prologue<T: Scalar>(
    k: &mut KernelBuilder,
    cfg: &Nf4Config,
    names: (&str, &str),
    threads: u32,
) -> Entry<T> {
    entry_prologue_to::<T, T>(k, cfg, names, threads)
}

/// [`entry_prologue`] for an output of element type `O`.
fn entry_prologue_to<T: Scalar, O: Scalar>(
    k: &mut KernelBuilder,
    cfg: &Nf4Config,
    names: (&str, &str),
    threads: u32,
) -> Entry<T, O> {
    prologue::<T, O>(k, cfg, names, threads, CodeTable::Shared)
}

/// [`entry_prologue`] with the code table `table` (the GEMV's aligned one, or none).
fn entry_prologue_table<T: Scalar>(
    k: &mut KernelBuilder,
    cfg: &Nf4Config,
    names: (&str, &str),
    threads: u32,
    table: CodeTable,
) -> Entry<T> {
    prologue::<T, T>(k, cfg, names, threads, table)
}

/// Where an entry keeps the 16 f32 code values.
#[derive(Clone, Copy, PartialEq, Eq)]
enum CodeTable {
    /// A 64-byte shared table (16 words in 16 banks: any warp-wide lookup is one wavefront).
    Shared,
    /// The same table on a 256-byte boundary found at run time in a 304-byte array: its
    /// address's low byte is 0, so one `prmt` splices a code's byte offset into it (the GEMV's
    /// lookups, `gemv::chunk_codes`).
    Aligned256,
    /// None: the f16/bf16 tensor-core entries look codes up in `T` (`half_dequant`).
    Absent,
}

/// The shared byte address of a fresh code table of kind `table` (`None` for
/// [`CodeTable::Absent`]).
fn declare_codebook(k: &mut KernelBuilder, table: CodeTable) -> Option<Reg<U32>> {
    let codes = NF4_CODE.len() as u32;
    match table {
        CodeTable::Shared => {
            let arr = k.shared_array::<F32>("nf4_code", codes);
            Some(k.shared_base(arr))
        }
        CodeTable::Aligned256 => {
            // Arrays are 16-byte aligned: the next 256-byte boundary is at most 240 bytes on.
            let arr = k.shared_array::<F32>("nf4_code", (240 + 4 * codes) / 4);
            let base = k.shared_base(arr);
            let up = k.add(base, 240u32);
            Some(k.and(up, !255u32))
        }
        CodeTable::Absent => None,
    }
}

/// [`entry_prologue_to`] with the code table `table`.
fn prologue<T: Scalar, O: Scalar>(
    k: &mut KernelBuilder,
    cfg: &Nf4Config,
    (input, output): (&str, &str),
    threads: u32,
    table: CodeTable,
) -> Entry<T, O> {
    declare_index_bound(k, &INDEX_BOUND);
    let params = EntryParams {
        input: k.param_ptr::<T>(input),
        packed: k.param_ptr::<U8>("packed"),
        absmax: if cfg.double_quant {
            AbsmaxParams::Double {
                codes: k.param_ptr::<U8>("absmax_codes"),
                map: k.param_ptr::<F32>("absmax_map"),
                nested: k.param_ptr::<F32>("nested_absmax"),
                offset: k.param::<F32>("absmax_offset"),
            }
        } else {
            AbsmaxParams::Plain(k.param_ptr::<F32>("absmax"))
        },
        output: k.param_ptr::<O>(output),
        m: k.param::<U32>("m"),
    };
    let absmax = match params.absmax {
        AbsmaxParams::Plain(p) => AbsmaxSource::Plain(k.global_ptr(p)),
        AbsmaxParams::Double {
            codes,
            map,
            nested,
            offset,
        } => AbsmaxSource::Double {
            codes: k.global_ptr(codes),
            map: {
                let global = k.global_ptr(map);
                copy_map(k, global, threads)
            },
            nested: NestedAt::Global(k.global_ptr(nested)),
            offset: k.load_param(offset),
        },
    };
    let codebook = declare_codebook(k, table);
    let entry = Entry {
        input: k.global_ptr(params.input),
        weights: Weights {
            packed: k.global_ptr(params.packed),
            absmax,
            codebook,
            block_shift: cfg.block.trailing_zeros(),
        },
        output: k.global_ptr(params.output),
        m: k.load_param(params.m),
    };
    if let Some(base) = codebook {
        write_codebook(k, base);
    }
    k.bar_sync();
    entry
}

/// The prologue of a split forward entry, `a, packed, <absmax>, partials, m, slice_k`
/// ([`prologue`] with an f32 output, then `slice_k`), and the part of the sum its block adds:
/// K slice `s = ctaid.z`, columns `s · slice_k .. min((s + 1) · slice_k, k)`, into part `s` of
/// the workspace (`[m, n]` parts [`gemm_slice_len`] apart).
fn gemm_split_prologue<T: Scalar>(
    k: &mut KernelBuilder,
    cfg: &Nf4Config,
    threads: u32,
    table: CodeTable,
) -> (Entry<T, F32>, SumRange) {
    let e = prologue::<T, F32>(k, cfg, ("a", "partials"), threads, table);
    let slice_k = k.param::<U32>("slice_k");
    let slice_k = k.load_param(slice_k);
    let s = k.ctaid_z();
    let range = SumRange::slice(k, (s, slice_k, cfg.k), (e.m, cfg.n));
    (e, range)
}

/// `map_copy[i] = map[i]` for the 256 entries of the double-quantisation map, `threads`
/// consecutive entries per step (the caller synchronises).
fn copy_map(k: &mut KernelBuilder, map: GlobalPtr<F32>, threads: u32) -> SharedArr<F32> {
    k.comment("double-quantisation map -> shared memory");
    let entries = super::format::DYNAMIC_MAP_LEN as u32;
    let copy = k.shared_array::<F32>("absmax_map_copy", entries);
    let tid = k.tid_x();
    for i in 0..entries / threads {
        let index = k.add(tid, i * threads);
        let from = k.elem_addr(map, index);
        let v = k.ld_global_nc::<F32>(from, 0);
        let to = k.shared_elem(copy, index);
        k.st_shared(to, 0, v);
    }
    copy
}

/// `codebook[i] = NF4_CODE[i]` for i in 0..16 at shared byte `base`, written by thread 0 (the
/// caller synchronises).
fn write_codebook(k: &mut KernelBuilder, base: Reg<U32>) {
    k.comment("NF4 code table -> shared memory");
    let tid = k.tid_x();
    let first = k.setp(CmpOp::Eq, tid, 0u32);
    k.if_then(first, |k| {
        for (i, &v) in NF4_CODE.iter().enumerate() {
            k.st_shared(base, 4 * i as i32, v);
        }
    });
}

/// The absmax of quantisation block `block_index`: `absmax[b]`, or under double quantisation
/// `map[codes[b]] · nested_absmax[b / 256] + offset` with both operations rounded separately
/// (exactly [`super::format::dequantize_absmax`] and bitsandbytes).
fn absmax_of(k: &mut KernelBuilder, w: &Weights, block_index: Reg<U32>) -> Reg<F32> {
    match w.absmax {
        AbsmaxSource::Plain(absmax) => {
            let addr = k.elem_addr(absmax, block_index);
            k.ld_global_nc::<F32>(addr, 0)
        }
        AbsmaxSource::Double {
            codes,
            map,
            nested,
            offset,
        } => {
            let code_addr = k.elem_addr(codes, block_index);
            let code = load_byte(k, code_addr);
            let at = k.shared_elem(map, code);
            let value = k.ld_shared::<F32>(at, 0);
            let group = k.shr(block_index, ABSMAX_BLOCK.trailing_zeros());
            let scale = match nested {
                NestedAt::Global(nested) => {
                    let at = k.elem_addr(nested, group);
                    k.ld_global_nc::<F32>(at, 0)
                }
                NestedAt::Shared { copy, first } => {
                    let within = k.sub(group, first);
                    let at = k.shared_elem(copy, within);
                    k.ld_shared::<F32>(at, 0)
                }
            };
            let scaled = rounded(k, BinOp::Mul, value, scale);
            rounded(k, BinOp::Add, scaled, offset)
        }
    }
}

/// `op.rn.f32 d, a, b`: an explicit rounding mode forbids ptxas from contracting a multiply and
/// a following add into one fma (which would round once and break bit-exactness).
fn rounded(k: &mut KernelBuilder, op: BinOp, a: Reg<F32>, b: Reg<F32>) -> Reg<F32> {
    let d = k.reg::<F32>();
    k.push(
        Op::Bin {
            op,
            ty: Type::F32,
            rnd: Some(Rounding::Rn),
            ftz: false,
        },
        vec![Operand::Reg(d.id), Operand::Reg(a.id), Operand::Reg(b.id)],
    );
    d
}

/// `ld.global.nc.u8` widened to u32.
fn load_byte(k: &mut KernelBuilder, addr: Reg<crate::builder::U64>) -> Reg<U32> {
    let byte = k.ld_global_nc::<U8>(addr, 0);
    k.cvt::<U32, U16>(byte.retype(), None)
}

/// The absmax of the block holding weight element `element` (`element / block`).
fn absmax_at(k: &mut KernelBuilder, w: &Weights, element: Reg<U32>) -> Reg<F32> {
    let block_index = k.shr(element, w.block_shift);
    absmax_of(k, w, block_index)
}

/// `ŵ = NF4_CODE[code] · absmax` (the code table read from shared memory).
fn dequant(k: &mut KernelBuilder, w: &Weights, code: Reg<U32>, absmax: Reg<F32>) -> Reg<F32> {
    let value = code_value(k, w, code);
    k.mul(value, absmax)
}

/// `NF4_CODE[code]`, from the shared code table.
fn code_value(k: &mut KernelBuilder, w: &Weights, code: Reg<U32>) -> Reg<F32> {
    let table = w.codebook.expect("the entry declared the f32 code table");
    let slot = k.mad_lo(code, 4u32, table);
    k.ld_shared::<F32>(slot, 0)
}

/// Bits `shift .. shift + 4` of `word`: one 4-bit code (one `and` or `bfe`).
fn nibble(k: &mut KernelBuilder, word: Reg<U32>, shift: u32) -> Reg<U32> {
    if shift == 0 {
        k.and(word, 0xFu32)
    } else {
        k.bit_field(word, shift, 4u32)
    }
}

/// Loads element `index` of an activation tensor and widens it to f32.
fn load_activation<T: Float>(
    k: &mut KernelBuilder,
    ptr: GlobalPtr<T>,
    index: Reg<U32>,
) -> Reg<F32> {
    let addr = k.elem_addr(ptr, index);
    let v = k.ld_global_nc::<T>(addr, 0);
    k.to_f32(v)
}

/// Element `index()` of an activation tensor widened to f32 when `inside` (the index formed
/// only there), else 0.
fn activation_or_zero<T: Float>(
    k: &mut KernelBuilder,
    ptr: GlobalPtr<T>,
    inside: crate::builder::Pred,
    index: impl FnOnce(&mut KernelBuilder) -> Reg<U32>,
) -> Reg<F32> {
    let value = k.var::<F32>(0.0f32);
    k.if_then(inside, |k| {
        let at = index(k);
        let v = load_activation(k, ptr, at);
        k.assign(value, v);
    });
    value
}

/// Rounds an f32 result to the output type (nearest even) and stores it at `index`.
fn store_output<T: Float>(k: &mut KernelBuilder, ptr: GlobalPtr<T>, index: Reg<U32>, v: Reg<F32>) {
    let addr = k.elem_addr(ptr, index);
    let out = k.from_f32::<T>(v);
    k.st_global(addr, 0, out);
}

/// `p && q` for a pair of unsigned bounds checks `a < a_end && b < b_end`.
fn both_below(
    k: &mut KernelBuilder,
    a: Reg<U32>,
    a_end: impl Into<crate::builder::Val<U32>>,
    b: Reg<U32>,
    b_end: impl Into<crate::builder::Val<U32>>,
) -> crate::builder::Pred {
    let pa = k.setp_lt(a, a_end);
    let pb = k.setp_lt(b, b_end);
    k.and_pred(pa, pb)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_matrix_config_compiles() {
        // One arch per dtype/shape keeps the unit test quick; the ptxas matrix covers the rest.
        for cfg in matrix_configs()
            .into_iter()
            .filter(|c| c.arch == Arch::Sm70 || c.arch == Arch::Sm90)
        {
            let compiled = cfg
                .compile()
                .unwrap_or_else(|e| panic!("{}: {e}", cfg.matrix_name()));
            for name in [
                GEMV_ENTRY,
                GEMM_ENTRY,
                BACKWARD_INPUT_ENTRY,
                BACKWARD_GEMV_ENTRY,
            ] {
                let entry = compiled.entry(name).expect("entry present");
                let threads = if name == GEMM_ENTRY || name == BACKWARD_INPUT_ENTRY {
                    gemm_threads(&cfg)
                } else {
                    THREADS
                };
                assert_eq!(entry.required_block, Some([threads, 1, 1]), "{name}");
                let expected_params = if cfg.double_quant { 8 } else { 5 };
                assert_eq!(entry.params.len(), expected_params, "{name}");
            }
        }
    }

    #[test]
    fn compile_is_deterministic_and_rejects_bad_configs() {
        let cfg = Nf4Config::new(100, 66);
        assert_eq!(cfg.compile().unwrap().ptx, cfg.compile().unwrap().ptx);
        let bad = Nf4Config { block: 48, ..cfg };
        assert!(matches!(bad.compile(), Err(TemplateError::Config(_))));
    }
}
