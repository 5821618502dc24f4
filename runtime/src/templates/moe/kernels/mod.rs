//! The MoE kernels, built with the typed builder into one module per configuration:
//!
//! | entry | phase | grid × block |
//! |---|---|---|
//! | [`GATING`] | softmax + top-k + weights | `ceil(T/4)` × 128 (a warp per token, `E ≥ 32`); `ceil(T/128)` × 128 (a thread per token, `E < 32`) |
//! | [`PERMUTE`] | slot assignment | `⌈E / 32⌉` × 256 (a block per group of 32 experts; one block for `E ≤ 32`) |
//! | [`SCHEDULE`] | bin offsets + GEMM work list | 1 × 32 |
//! | [`EXPERT_LINEAR`] | `Y = X·Wᵀ` (ffn = linear) | `(n_max, ceil(F/64))` × 256 (tensor cores: `ceil(F/128)`, see [`expert_tile_n`], × 128) |
//! | [`EXPERT_SWIGLU_UP`] | `G = silu(X·W1ᵀ) ⊙ X·W3ᵀ` (ffn = swiglu) | `(n_max, ceil(F/64))` × 256 (`ceil(F/64)` × 128) |
//! | [`EXPERT_SWIGLU_DOWN`] | `Y = G·W2ᵀ` (ffn = swiglu) | `(n_max, ceil(H/64))` × 256 (`ceil(H/128)` × 128) |
//! | [`UNPERMUTE`] | weighted combine | `ceil(T/TB)` × 256 (`TB` = [`unpermute_tokens_per_block`], 16 for `K ≤ 16`) |
//!
//! The configuration's `experts`, `top_k`, `hidden` and `expert_dim` are baked into the PTX as
//! immediates; the token count `T` and capacity `C` are kernel parameters. Every element index
//! is `u32` (byte addresses `u64` via `mul.wide`); the launch functions check the sizes first.
//! The expert GEMMs are one grouped launch each: `n_max` ([`max_work_items`]) blocks along x,
//! each taking one `(expert, row tile)` item of the list [`SCHEDULE`] built from the counts,
//! row tiles of [`item_rows`] rows.
//!
//! The expert GEMMs run on tensor cores (`mma.m16n8k16`, 3-stage `cp.async` ring, see
//! `tc.rs`) for f16/bf16 on sm_80+, and for f32 with `allow_tf32` (tf32 `mma.m16n8k8`), any
//! reduction length ([`tensor_cores`]): 128-row tiles (128 × 128; 128 × 64 for the SwiGLU
//! up-projection's two weight sets and for `N ≤ 64`) in dynamic shared memory when every reduction length is
//! a whole number of 16-byte pieces, the 64 × 64 tile otherwise; other f32, f64 and older
//! targets keep the CUDA-core GEMMs (`gemm.rs`), silently. Launchers size the grid and block
//! with [`item_rows`], [`expert_tile_n`], [`expert_threads`] and
//! [`expert_dynamic_shared_bytes`].

mod common;
mod expert;
mod gating;
mod gemm;
mod permute;
mod schedule;
mod tc;
mod unpermute;

pub use gating::{gating_tokens_per_block, GATING_BLOCK, GATING_WARPS, GATING_WARP_MIN_EXPERTS};
pub use gemm::{GEMM_THREADS, TILE_M, TILE_N};
pub use permute::{permute_blocks, EXPERTS_PER_BLOCK as PERMUTE_EXPERTS_PER_BLOCK, PERMUTE_BLOCK};
pub use schedule::{max_work_items, SCHEDULE_BLOCK};
pub use tc::{takes as tensor_cores, TC_THREADS, WIDE_ITEM_ROWS};
pub use unpermute::{unpermute_tokens_per_block, UNPERMUTE_BLOCK};

use crate::arch::Arch;
use crate::builder::{KernelBuilder, ModuleBuilder, BF16, F16, F32, F64};
use crate::dtype::DType;
use crate::templates::warp_mma::TileElem;
use crate::templates::{CompiledFamily, KernelFamily, TemplateError};

use super::config::{Ffn, MoeConfig, INDEX_BOUND};
use crate::lint::address::declare_index_bound;
use common::MoeElem;

/// Entry name of the gating kernel.
pub const GATING: &str = "moe_gating";
/// Entry name of the permute kernel.
pub const PERMUTE: &str = "moe_permute";
/// Entry name of the schedule kernel (bin offsets and the grouped GEMM's work list).
pub const SCHEDULE: &str = "moe_schedule";
/// Entry name of the linear expert kernel (ffn = linear only).
pub const EXPERT_LINEAR: &str = "moe_expert_linear";
/// Entry name of the swiglu up-projection (ffn = swiglu only).
pub const EXPERT_SWIGLU_UP: &str = "moe_expert_swiglu_up";
/// Entry name of the swiglu down-projection (ffn = swiglu only).
pub const EXPERT_SWIGLU_DOWN: &str = "moe_expert_swiglu_down";
/// Entry name of the unpermute kernel.
pub const UNPERMUTE: &str = "moe_unpermute";

/// The compile-time sizes the kernels bake in.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MoeShape {
    pub experts: u32,
    pub top_k: u32,
    pub hidden: u32,
    pub expert_dim: u32,
    pub out_width: u32,
    pub normalize_topk: bool,
    /// Rows per work item ([`item_rows`]).
    pub item_rows: u32,
    /// Whether the tensor-core entries take the 128-row tiles (`tc::wide`).
    pub wide_tiles: bool,
}

impl MoeShape {
    fn of(cfg: &MoeConfig) -> Self {
        Self {
            experts: cfg.experts,
            top_k: cfg.top_k,
            hidden: cfg.hidden,
            expert_dim: cfg.expert_dim,
            out_width: cfg.out_width(),
            normalize_topk: cfg.normalize_topk,
            item_rows: item_rows(cfg),
            wide_tiles: wide_tiles(cfg),
        }
    }
}

/// The entries of a configuration's module, in launch order.
pub fn entry_names(ffn: Ffn) -> &'static [&'static str] {
    match ffn {
        Ffn::Linear => &[GATING, PERMUTE, SCHEDULE, EXPERT_LINEAR, UNPERMUTE],
        Ffn::Swiglu => &[
            GATING,
            PERMUTE,
            SCHEDULE,
            EXPERT_SWIGLU_UP,
            EXPERT_SWIGLU_DOWN,
            UNPERMUTE,
        ],
    }
}

fn entry(name: &str, arch: Arch, shape: &MoeShape, body: Body) -> KernelBuilder {
    let mut k = KernelBuilder::new(name, arch);
    declare_index_bound(&mut k, &INDEX_BOUND);
    body(shape, &mut k);
    k
}

/// Threads per block of expert entry `entry` of `cfg`: [`TC_THREADS`] on the tensor-core path
/// ([`tensor_cores`]), [`GEMM_THREADS`] on the CUDA-core path.
pub fn expert_threads(cfg: &MoeConfig, entry: &str) -> u32 {
    if tensor_cores(cfg, entry) {
        TC_THREADS
    } else {
        GEMM_THREADS
    }
}

/// Whether `cfg`'s expert entries run on tensor cores in the 128-row tiles.
fn wide_tiles(cfg: &MoeConfig) -> bool {
    tensor_cores(cfg, EXPERT_LINEAR) && tc::wide(cfg)
}

/// Rows per work item of `cfg`'s expert GEMMs (the row tile [`SCHEDULE`] cuts the bins
/// into): [`WIDE_ITEM_ROWS`] (128) when the tensor-core entries take the 128-row tiles,
/// [`TILE_M`] (64) otherwise. Small bins waste rows of a 128-row tile, but not its weight
/// traffic or shared-memory traffic per output column (one item per bin either way), and
/// bins past their counts cost no item.
pub fn item_rows(cfg: &MoeConfig) -> u32 {
    if wide_tiles(cfg) {
        WIDE_ITEM_ROWS
    } else {
        TILE_M
    }
}

/// Output columns per block of expert entry `entry` of `cfg` (the grid's y is
/// `ceil(N / expert_tile_n)`).
pub fn expert_tile_n(cfg: &MoeConfig, entry: &str) -> u32 {
    if tensor_cores(cfg, entry) {
        tc::geometry(wide_tiles(cfg), entry, tc::entry_width(cfg, entry)).block_n()
    } else {
        TILE_N
    }
}

/// Dynamic shared memory bytes a launch of expert entry `entry` of `cfg` passes (the
/// 128-row tiles' rings, over the static limit); 0 for the others.
pub fn expert_dynamic_shared_bytes(cfg: &MoeConfig, entry: &str) -> u32 {
    if wide_tiles(cfg) {
        tc::dynamic_shared_bytes(cfg, entry)
    } else {
        0
    }
}

/// A kernel body.
type Body = fn(&MoeShape, &mut KernelBuilder);

/// The tensor-core expert entries (linear, swiglu up, swiglu down) of a dtype that has them.
type TcBodies = [Body; 3];

fn tc_bodies<T: MoeElem + TileElem>() -> TcBodies {
    [
        tc::build_linear::<T>,
        tc::build_swiglu_up::<T>,
        tc::build_swiglu_down::<T>,
    ]
}

/// Every entry of the family for storage type `T`; the expert entries from `tc` where
/// [`tensor_cores`] takes them.
fn build_module<T: MoeElem>(cfg: &MoeConfig, tc: Option<TcBodies>) -> ModuleBuilder {
    let pick = |name: &str, i: usize, cuda: Body| -> Body {
        match tc {
            Some(bodies) if tensor_cores(cfg, name) => bodies[i],
            _ => cuda,
        }
    };
    let shape = MoeShape::of(cfg);
    let arch = cfg.arch;
    let mut module = ModuleBuilder::new(arch);
    module.push(entry(GATING, arch, &shape, gating::build::<T>));
    module.push(entry(PERMUTE, arch, &shape, permute::build));
    module.push(entry(SCHEDULE, arch, &shape, schedule::build));
    match cfg.ffn {
        Ffn::Linear => {
            module.push(entry(
                EXPERT_LINEAR,
                arch,
                &shape,
                pick(EXPERT_LINEAR, 0, expert::build_linear::<T>),
            ));
        }
        Ffn::Swiglu => {
            module.push(entry(
                EXPERT_SWIGLU_UP,
                arch,
                &shape,
                pick(EXPERT_SWIGLU_UP, 1, expert::build_swiglu_up::<T>),
            ));
            module.push(entry(
                EXPERT_SWIGLU_DOWN,
                arch,
                &shape,
                pick(EXPERT_SWIGLU_DOWN, 2, expert::build_swiglu_down::<T>),
            ));
        }
    }
    module.push(entry(UNPERMUTE, arch, &shape, unpermute::build::<T>));
    module
}

impl KernelFamily for MoeConfig {
    const FAMILY: &'static str = "moe";

    fn compile(&self) -> Result<CompiledFamily, TemplateError> {
        self.validate()?;
        let module = match self.dtype {
            DType::F16 => build_module::<F16>(self, Some(tc_bodies::<F16>())),
            DType::BF16 => build_module::<BF16>(self, Some(tc_bodies::<BF16>())),
            DType::F32 => build_module::<F32>(self, Some(tc_bodies::<F32>())),
            DType::F64 => build_module::<F64>(self, None),
        };
        Ok(CompiledFamily::from_module(&module.build()?))
    }

    fn matrix_name(&self) -> String {
        let mut name = format!(
            "e{}_k{}_h{}_f{}_{}_{}",
            self.experts, self.top_k, self.hidden, self.expert_dim, self.ffn, self.dtype
        );

        if !self.normalize_topk {
            name.push_str("_raw");
        }
        if self.allow_tf32 {
            name.push_str("_tf32");
        }
        name
    }

    fn arch(&self) -> Arch {
        self.arch
    }
}

/// The emit-matrix configurations: every dtype × three shapes (Mixtral-like swiglu, 8 experts
/// top-2; DeepSeek-like linear, 64 experts top-6 with raw probabilities; odd sizes, 40 experts
/// top-3 swiglu) × every target (every dtype is supported on every arch), plus f32 with
/// `allow_tf32` for the first two shapes on every target (tf32 tensor cores on sm_80+, the
/// CUDA-core path before).
pub fn matrix_configs() -> Vec<MoeConfig> {
    let shapes = [
        MoeConfig {
            ffn: Ffn::Swiglu,
            ..MoeConfig::new(8, 2, 64, 96)
        },
        MoeConfig {
            normalize_topk: false,
            ..MoeConfig::new(64, 6, 48, 40)
        },
        MoeConfig {
            ffn: Ffn::Swiglu,
            capacity_factor: Some(1.0),
            ..MoeConfig::new(40, 3, 33, 70)
        },
    ];
    let mut out = Vec::new();
    for arch in Arch::ALL {
        for dtype in DType::ALL {
            for shape in shapes {
                out.push(MoeConfig {
                    dtype,
                    arch,
                    ..shape
                });
            }
        }
        for shape in &shapes[..2] {
            out.push(MoeConfig {
                dtype: DType::F32,
                allow_tf32: true,
                arch,
                ..*shape
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_matrix_config_compiles() {
        for cfg in matrix_configs() {
            let compiled = cfg
                .compile()
                .unwrap_or_else(|e| panic!("{}: {e}", cfg.matrix_name()));
            let names: Vec<&str> = compiled.entries.iter().map(|e| e.name.as_str()).collect();
            assert_eq!(names, entry_names(cfg.ffn));
        }
    }

    #[test]
    fn compile_is_deterministic_and_rejects_bad_configs() {
        let cfg = MoeConfig {
            dtype: DType::BF16,
            ffn: Ffn::Swiglu,
            arch: Arch::Sm75,
            ..MoeConfig::new(8, 2, 40, 24)
        };
        assert_eq!(cfg.compile().unwrap().ptx, cfg.compile().unwrap().ptx);
        let bad = MoeConfig::new(8, 9, 4, 4);
        assert!(matches!(bad.compile(), Err(TemplateError::Config(_))));
    }
}
