//! Host launch code of the MoE family, generic over the [`Backend`].
//!
//! Every launch goes through a [`MoeLaunch`]: built from the configuration the PTX was compiled
//! from, the device, the PTX text (the macro's `const PTX`) and the token count, it checks the
//! configuration and every run-time size against the kernels' `u32` index arithmetic and grid
//! limits once; each phase method then checks its buffers (element type against the dtype,
//! lengths against the shapes) **before** launching anything, computes the grid and block, and
//! launches the entries in order. No code is generated here.
//!
//! Element types: activations, weights, routing weights and outputs are `T` = the config's
//! dtype (`half::f16`, `half::bf16`, `f32`, `f64`), checked at run time against `cfg.dtype`
//! (a mismatch is [`LaunchError::ArgumentType`]; weights of the other FFN kind are
//! [`LaunchError::Shape`]); expert indices, slots, token ids and counts
//! are `u32`. Routing weights are stored in the dtype (computed in f32, or f64 for f64).
//!
//! Shapes (`T` tokens, `E` experts, `K = top_k`, `H = hidden`, `F = expert_dim`,
//! `C = cfg.capacity(T)` (`T` when dropless), `rows` = `T·K` when dropless (bins packed by
//! their counts) or `E·C` when capacity-limited, `N = cfg.out_width()`):
//!
//! | buffer | elements |
//! |---|---|
//! | `logits` | `T·E` |
//! | `indices`, `weights`, `slot_of` | `T·K` |
//! | `token_ids` | `E·C` |
//! | `counts`, `routed`, `offsets` | `E` |
//! | `work_items` | `2·n_max` ([`max_work_items`]) |
//! | `x` | `T·H` |
//! | `w` (linear), `w1`, `w3` | `E·F·H` |
//! | `w2` | `E·H·F` |
//! | `gated` (swiglu intermediate) | `rows·F` |
//! | `y` (permuted expert outputs) | `rows·N` |
//! | `out` | `T·N` |

use crate::dtype::DType;
use crate::launch::{
    Backend, DeviceBuffer, Dim3, Element, KernelArg, LaunchConfig, LaunchError, ParamKind,
    ScalarKind,
};

use super::config::{Ffn, MoeConfig, MoeRunShape, MoeShapeError};
use super::kernels::{
    expert_dynamic_shared_bytes, expert_threads, expert_tile_n, gating_tokens_per_block, item_rows,
    max_work_items, permute_blocks, unpermute_tokens_per_block, EXPERT_LINEAR, EXPERT_SWIGLU_DOWN,
    EXPERT_SWIGLU_UP, GATING, GATING_BLOCK, PERMUTE, PERMUTE_BLOCK, SCHEDULE, SCHEDULE_BLOCK,
    UNPERMUTE, UNPERMUTE_BLOCK,
};

/// Headroom kept below `u32::MAX` for every loop bound, so `i + step` (steps ≤ 256) and tile
/// round-ups (`+ 63`) cannot wrap.
pub const INDEX_HEADROOM: u32 = 1024;
/// CUDA's limit on `gridDim.y` and `gridDim.z`.
const MAX_GRID_YZ: u32 = 65_535;
/// CUDA's limit on `gridDim.x`.
const MAX_GRID_X: u32 = i32::MAX as u32;

/// What [`MoeLaunch::forward`] reports besides the output.
#[derive(Debug, Clone, PartialEq)]
pub struct MoeStats {
    /// `[E]`: pairs kept in each expert's bin, `min(routed, C)`.
    pub counts: Vec<u32>,
    /// `[E]`: pairs routed to each expert, kept or not.
    pub routed: Vec<u32>,
    /// Pairs dropped because their bin was full, `Σ (routed − counts)`.
    pub dropped: u32,
    /// Slots per bin `C` for this launch (`T` when dropless: no bin can overflow).
    pub capacity: u32,
    /// `[T, K]`: the expert of each pair, best first (the routing the layer used).
    pub indices: Vec<u32>,
    /// `[T, K]`: the routing weight of each pair, widened exactly from the dtype.
    pub weights: Vec<f64>,
}

/// The permutation buffers written by [`MoeLaunch::permute`].
#[derive(Debug)]
pub struct Bins<'a, B: Backend> {
    /// `[E, C]` token in each slot, `u32::MAX` when empty.
    pub token_ids: &'a DeviceBuffer<B, u32>,
    /// `[E]` kept pairs per bin.
    pub counts: &'a DeviceBuffer<B, u32>,
    /// `[E]` routed pairs per expert (kept or dropped).
    pub routed: &'a DeviceBuffer<B, u32>,
    /// `[T, K]` slot of each pair, `u32::MAX` when dropped.
    pub slot_of: &'a DeviceBuffer<B, u32>,
    /// `[E]` first permuted row of each bin (written by the schedule phase).
    pub offsets: &'a DeviceBuffer<B, u32>,
    /// `[2·n_max]` the grouped GEMM's work list (written by the schedule phase).
    pub work_items: &'a DeviceBuffer<B, u32>,
}

/// The routing written by [`MoeLaunch::gating`].
#[derive(Debug)]
pub struct Routing<'a, B: Backend, T: Element> {
    /// `[T, K]` expert of each pair, best first.
    pub indices: &'a DeviceBuffer<B, u32>,
    /// `[T, K]` weight of each pair.
    pub weights: &'a DeviceBuffer<B, T>,
}

/// Expert weights matching `cfg.ffn`.
#[derive(Debug)]
pub enum ExpertWeights<'a, B: Backend, T: Element> {
    /// `w [E, F, H]`.
    Linear { w: &'a DeviceBuffer<B, T> },
    /// `w1, w3 [E, F, H]`, `w2 [E, H, F]`.
    Swiglu {
        w1: &'a DeviceBuffer<B, T>,
        w3: &'a DeviceBuffer<B, T>,
        w2: &'a DeviceBuffer<B, T>,
    },
}

// Manual `Clone`/`Copy`: these only hold references, whatever the backend type is.
impl<B: Backend> Clone for Bins<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<B: Backend> Copy for Bins<'_, B> {}
impl<B: Backend, T: Element> Clone for Routing<'_, B, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<B: Backend, T: Element> Copy for Routing<'_, B, T> {}
impl<B: Backend, T: Element> Clone for ExpertWeights<'_, B, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<B: Backend, T: Element> Copy for ExpertWeights<'_, B, T> {}
impl<B: Backend> Clone for MoeLaunch<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<B: Backend> Copy for MoeLaunch<'_, B> {}

/// Every intermediate buffer of a forward pass, allocated for one token count.
#[derive(Debug)]
pub struct MoeWorkspace<B: Backend, T: Element> {
    pub indices: DeviceBuffer<B, u32>,
    pub weights: DeviceBuffer<B, T>,
    pub token_ids: DeviceBuffer<B, u32>,
    pub counts: DeviceBuffer<B, u32>,
    pub routed: DeviceBuffer<B, u32>,
    pub slot_of: DeviceBuffer<B, u32>,
    pub offsets: DeviceBuffer<B, u32>,
    pub work_items: DeviceBuffer<B, u32>,
    /// `[rows, F]` swiglu intermediate (`None` for linear).
    pub gated: Option<DeviceBuffer<B, T>>,
    /// `[rows, N]` permuted expert outputs.
    pub expert_out: DeviceBuffer<B, T>,
    /// Slots per bin `C` of the token count the workspace was made for.
    pub capacity: u32,
}

impl<B: Backend, T: Element> MoeWorkspace<B, T> {
    /// The routing buffers as a [`Routing`].
    pub fn routing(&self) -> Routing<'_, B, T> {
        Routing {
            indices: &self.indices,
            weights: &self.weights,
        }
    }

    /// The statistics and routing of the last forward pass run through this workspace, read
    /// from its `counts`, `routed`, `indices` and `weights` buffers: the one place a forward's
    /// results other than the output leave the device (small downloads, which wait for the
    /// queued work), when the caller asks.
    pub fn stats(&self, dev: &B) -> Result<MoeStats, LaunchError> {
        let counts = dev.download(&self.counts)?;
        let routed = dev.download(&self.routed)?;
        let indices = dev.download(&self.indices)?;
        let weights = dev
            .download(&self.weights)?
            .into_iter()
            .map(element_to_f64)
            .collect::<Result<Vec<f64>, LaunchError>>()?;
        let kept: u64 = counts.iter().map(|&c| u64::from(c)).sum();
        let total: u64 = routed.iter().map(|&r| u64::from(r)).sum();
        let dropped = u32::try_from(total.saturating_sub(kept)).unwrap_or(u32::MAX);
        Ok(MoeStats {
            counts,
            routed,
            dropped,
            capacity: self.capacity,
            indices,
            weights,
        })
    }

    /// The permutation buffers as [`Bins`].
    pub fn bins(&self) -> Bins<'_, B> {
        Bins {
            token_ids: &self.token_ids,
            counts: &self.counts,
            routed: &self.routed,
            slot_of: &self.slot_of,
            offsets: &self.offsets,
            work_items: &self.work_items,
        }
    }
}

/// One checked MoE launch context: configuration, device, PTX and token count.
#[derive(Debug)]
pub struct MoeLaunch<'a, B: Backend> {
    cfg: &'a MoeConfig,
    dev: &'a B,
    ptx: &'a str,
    shape: MoeRunShape,
}

/// The host scalar kind of a dtype.
pub fn dtype_kind(dtype: DType) -> ScalarKind {
    match dtype {
        DType::F16 => ScalarKind::F16,
        DType::BF16 => ScalarKind::BF16,
        DType::F32 => ScalarKind::F32,
        DType::F64 => ScalarKind::F64,
    }
}

/// Element count `a · b` as `usize` (the sizes are already checked to fit u32).
fn elems(a: u32, b: u32) -> usize {
    a as usize * b as usize
}

fn check_len<B: Backend, E: Element>(
    name: &'static str,
    buf: &DeviceBuffer<B, E>,
    expected: usize,
) -> Result<(), LaunchError> {
    if buf.len() == expected {
        Ok(())
    } else {
        Err(LaunchError::BufferLength {
            name,
            expected,
            actual: buf.len(),
        })
    }
}

fn too_large(name: &'static str, value: u64, reason: String) -> LaunchError {
    LaunchError::InvalidDim {
        name,
        value,
        reason,
    }
}

impl<'a, B: Backend> MoeLaunch<'a, B> {
    /// Checks the configuration and the sizes of a launch over `tokens` tokens:
    /// [`LaunchError::InvalidDim`] for an invalid configuration (named by its first field at
    /// fault), `tokens = 0`, a tensor whose element count does not fit the kernels' u32
    /// indices (with [`INDEX_HEADROOM`] for loop bounds), or a grid past CUDA's limits.
    pub fn new(
        cfg: &'a MoeConfig,
        dev: &'a B,
        ptx: &'a str,
        tokens: u32,
    ) -> Result<Self, LaunchError> {
        if let Err(errors) = cfg.validate() {
            let first = errors.0.first();
            let field = first
                .and_then(|e| e.fields.first())
                .copied()
                .unwrap_or("config");
            return Err(LaunchError::InvalidDim {
                name: field,
                value: config_value(cfg, field),
                reason: errors.to_string(),
            });
        }
        let shape = cfg.run_shape(tokens).map_err(|e| match e {
            MoeShapeError::NoTokens => LaunchError::InvalidDim {
                name: "tokens",
                value: 0,
                reason: e.to_string(),
            },
            MoeShapeError::TooLarge { .. } => too_large("tokens", u64::from(tokens), e.to_string()),
        })?;
        let limit = u64::from(u32::MAX - INDEX_HEADROOM);
        let loop_bounds = [
            ("tokens · top_k", u64::from(tokens) * u64::from(cfg.top_k)),
            ("capacity", u64::from(shape.capacity)),
            ("hidden", u64::from(cfg.hidden)),
            ("expert_dim", u64::from(cfg.expert_dim)),
        ];
        for (what, value) in loop_bounds {
            if value > limit {
                return Err(too_large(
                    "tokens",
                    u64::from(tokens),
                    format!("{what} = {value} leaves less than {INDEX_HEADROOM} of u32 headroom"),
                ));
            }
        }
        let launch = Self {
            cfg,
            dev,
            ptx,
            shape,
        };
        for grid in [
            launch.gating_config().grid,
            launch.permute_config().grid,
            launch.expert_config(EXPERT_LINEAR, cfg.expert_dim).grid,
            launch
                .expert_config(EXPERT_SWIGLU_DOWN, cfg.out_width())
                .grid,
            launch.unpermute_config().grid,
        ] {
            if grid.x > MAX_GRID_X || grid.y > MAX_GRID_YZ || grid.x == 0 || grid.y == 0 {
                return Err(too_large(
                    "tokens",
                    u64::from(tokens),
                    format!("grid {}×{} exceeds the launch limits", grid.x, grid.y),
                ));
            }
        }
        Ok(launch)
    }

    /// The checked token count and capacity.
    pub fn shape(&self) -> MoeRunShape {
        self.shape
    }

    fn tokens(&self) -> u32 {
        self.shape.tokens
    }

    fn capacity(&self) -> u32 {
        self.shape.capacity
    }

    /// `T·K`, the number of routed pairs.
    fn pairs(&self) -> usize {
        elems(self.tokens(), self.cfg.top_k)
    }

    /// `E·C`, the number of bin slots.
    fn slots(&self) -> usize {
        elems(self.cfg.experts, self.capacity())
    }

    fn check_elem<T: Element>(&self, entry: &'static str, index: usize) -> Result<(), LaunchError> {
        let kind = dtype_kind(self.cfg.dtype);
        if T::KIND == kind {
            Ok(())
        } else {
            Err(LaunchError::ArgumentType {
                entry: entry.to_string(),
                index,
                expected: ParamKind::Pointer(kind),
            })
        }
    }

    fn gating_config(&self) -> LaunchConfig {
        LaunchConfig {
            grid: Dim3::x(
                self.tokens()
                    .div_ceil(gating_tokens_per_block(self.cfg.experts)),
            ),
            block: Dim3::x(GATING_BLOCK),
            dynamic_shared_bytes: 0,
        }
    }

    fn permute_config(&self) -> LaunchConfig {
        LaunchConfig {
            grid: Dim3::x(permute_blocks(self.cfg.experts)),
            block: Dim3::x(PERMUTE_BLOCK),
            dynamic_shared_bytes: 0,
        }
    }

    fn schedule_config(&self) -> LaunchConfig {
        LaunchConfig {
            grid: Dim3::x(1),
            block: Dim3::x(SCHEDULE_BLOCK),
            dynamic_shared_bytes: 0,
        }
    }

    /// Work items the schedule can produce at most (the expert GEMMs' `gridDim.x`).
    fn max_work_items(&self) -> u32 {
        let pairs = u32::try_from(self.pairs()).unwrap_or(u32::MAX);
        max_work_items(
            self.cfg.experts,
            self.capacity(),
            pairs.min(self.shape.rows),
            item_rows(self.cfg),
        )
    }

    /// Grouped expert GEMM grid for `width` output columns: `(n_max, ceil(width / tile_n))`,
    /// with the tile width, block and dynamic shared memory of `entry`'s path (tensor-core
    /// or CUDA-core).
    fn expert_config(&self, entry: &str, width: u32) -> LaunchConfig {
        let tile_n = expert_tile_n(self.cfg, entry);
        LaunchConfig {
            grid: Dim3::new(self.max_work_items(), width.div_ceil(tile_n), 1),
            block: Dim3::x(expert_threads(self.cfg, entry)),
            dynamic_shared_bytes: expert_dynamic_shared_bytes(self.cfg, entry),
        }
    }

    fn unpermute_config(&self) -> LaunchConfig {
        LaunchConfig {
            grid: Dim3::x(
                self.tokens()
                    .div_ceil(unpermute_tokens_per_block(self.cfg.top_k)),
            ),
            block: Dim3::x(UNPERMUTE_BLOCK),
            dynamic_shared_bytes: 0,
        }
    }

    /// Gating (`moe_gating`): `logits [T, E]` → `routing.indices [T, K]`,
    /// `routing.weights [T, K]`. Never writes `logits`.
    pub fn gating<T: Element>(
        &self,
        logits: &DeviceBuffer<B, T>,
        routing: Routing<'_, B, T>,
    ) -> Result<(), LaunchError> {
        self.check_elem::<T>(GATING, 0)?;
        check_len("logits", logits, elems(self.tokens(), self.cfg.experts))?;
        check_len("indices", routing.indices, self.pairs())?;
        check_len("weights", routing.weights, self.pairs())?;
        self.dev.launch(
            self.ptx,
            GATING,
            self.gating_config(),
            &[
                KernelArg::buffer(logits),
                KernelArg::buffer(routing.indices),
                KernelArg::buffer(routing.weights),
                KernelArg::U32(self.tokens()),
            ],
        )
    }

    /// Permute (`moe_permute`, then `moe_schedule`): `indices [T, K]` → `bins` (token-major
    /// slots, drops past `C` when capacity-limited), then the bin offsets and the expert GEMMs'
    /// work list from the counts.
    pub fn permute(
        &self,
        indices: &DeviceBuffer<B, u32>,
        bins: Bins<'_, B>,
    ) -> Result<(), LaunchError> {
        self.check_bins(indices, bins)?;
        self.dev.launch(
            self.ptx,
            PERMUTE,
            self.permute_config(),
            &[
                KernelArg::buffer(indices),
                KernelArg::buffer(bins.token_ids),
                KernelArg::buffer(bins.counts),
                KernelArg::buffer(bins.routed),
                KernelArg::buffer(bins.slot_of),
                KernelArg::U32(self.tokens()),
                KernelArg::U32(self.capacity()),
            ],
        )?;
        self.schedule(bins)
    }

    fn check_bins(
        &self,
        indices: &DeviceBuffer<B, u32>,
        bins: Bins<'_, B>,
    ) -> Result<(), LaunchError> {
        check_len("indices", indices, self.pairs())?;
        check_len("token_ids", bins.token_ids, self.slots())?;
        check_len("counts", bins.counts, self.cfg.experts as usize)?;
        check_len("routed", bins.routed, self.cfg.experts as usize)?;
        check_len("slot_of", bins.slot_of, self.pairs())?;
        check_len("offsets", bins.offsets, self.cfg.experts as usize)?;
        check_len("work_items", bins.work_items, self.work_items_len())
    }

    /// `2·n_max`: two words per item.
    fn work_items_len(&self) -> usize {
        2 * self.max_work_items() as usize
    }

    /// `E·C` or `T·K`: rows of the permuted expert outputs.
    fn rows(&self) -> usize {
        self.shape.rows as usize
    }

    /// Schedule (`moe_schedule`): `bins.counts` → `bins.offsets` (packed when dropless, `e·C`
    /// otherwise) and `bins.work_items`, the grouped GEMMs' list of row tiles.
    fn schedule(&self, bins: Bins<'_, B>) -> Result<(), LaunchError> {
        check_len("counts", bins.counts, self.cfg.experts as usize)?;
        check_len("offsets", bins.offsets, self.cfg.experts as usize)?;
        check_len("work_items", bins.work_items, self.work_items_len())?;
        self.dev.launch(
            self.ptx,
            SCHEDULE,
            self.schedule_config(),
            &[
                KernelArg::buffer(bins.counts),
                KernelArg::buffer(bins.offsets),
                KernelArg::buffer(bins.work_items),
                KernelArg::U32(self.capacity()),
                KernelArg::U32(u32::from(self.cfg.is_dropless())),
                KernelArg::U32(self.max_work_items()),
            ],
        )
    }

    /// Expert compute in the permuted layout: `y [rows, N]` from `x [T, H]` gathered through
    /// `bins.token_ids`, one grouped launch per GEMM over the work list that
    /// [`MoeLaunch::permute`] leaves in `bins.work_items` (its `moe_schedule` launch). Linear: one launch of `moe_expert_linear`. Swiglu:
    /// `moe_expert_swiglu_up` into `gated [E·C, F]`, then `moe_expert_swiglu_down`; `gated` is
    /// required for swiglu and ignored for linear. Only routed rows are written.
    pub fn experts<T: Element>(
        &self,
        x: &DeviceBuffer<B, T>,
        bins: Bins<'_, B>,
        weights: ExpertWeights<'_, B, T>,
        gated: Option<&DeviceBuffer<B, T>>,
        y: &DeviceBuffer<B, T>,
    ) -> Result<(), LaunchError> {
        let cfg = self.cfg;
        let weight_len = elems(cfg.experts, cfg.expert_dim) * cfg.hidden as usize;
        check_len("x", x, elems(self.tokens(), cfg.hidden))?;
        check_len("token_ids", bins.token_ids, self.slots())?;
        check_len("counts", bins.counts, cfg.experts as usize)?;
        check_len("offsets", bins.offsets, cfg.experts as usize)?;
        check_len("work_items", bins.work_items, self.work_items_len())?;
        check_len("y", y, self.rows() * cfg.out_width() as usize)?;
        match (cfg.ffn, weights) {
            (Ffn::Linear, ExpertWeights::Linear { w }) => {
                self.check_elem::<T>(EXPERT_LINEAR, 0)?;
                check_len("w", w, weight_len)?;
                self.dev.launch(
                    self.ptx,
                    EXPERT_LINEAR,
                    self.expert_config(EXPERT_LINEAR, cfg.expert_dim),
                    &[
                        KernelArg::buffer(x),
                        KernelArg::buffer(bins.token_ids),
                        KernelArg::buffer(bins.counts),
                        KernelArg::buffer(bins.offsets),
                        KernelArg::buffer(bins.work_items),
                        KernelArg::buffer(w),
                        KernelArg::buffer(y),
                        KernelArg::U32(self.tokens()),
                        KernelArg::U32(self.capacity()),
                    ],
                )
            }
            (Ffn::Swiglu, ExpertWeights::Swiglu { w1, w3, w2 }) => {
                self.check_elem::<T>(EXPERT_SWIGLU_UP, 0)?;
                check_len("w1", w1, weight_len)?;
                check_len("w3", w3, weight_len)?;
                check_len("w2", w2, weight_len)?;
                let gated = gated.ok_or(LaunchError::BufferLength {
                    name: "gated",
                    expected: self.rows() * cfg.expert_dim as usize,
                    actual: 0,
                })?;
                check_len("gated", gated, self.rows() * cfg.expert_dim as usize)?;
                self.dev.launch(
                    self.ptx,
                    EXPERT_SWIGLU_UP,
                    self.expert_config(EXPERT_SWIGLU_UP, cfg.expert_dim),
                    &[
                        KernelArg::buffer(x),
                        KernelArg::buffer(bins.token_ids),
                        KernelArg::buffer(bins.counts),
                        KernelArg::buffer(bins.offsets),
                        KernelArg::buffer(bins.work_items),
                        KernelArg::buffer(w1),
                        KernelArg::buffer(w3),
                        KernelArg::buffer(gated),
                        KernelArg::U32(self.tokens()),
                        KernelArg::U32(self.capacity()),
                    ],
                )?;
                self.dev.launch(
                    self.ptx,
                    EXPERT_SWIGLU_DOWN,
                    self.expert_config(EXPERT_SWIGLU_DOWN, cfg.hidden),
                    &[
                        KernelArg::buffer(gated),
                        KernelArg::buffer(bins.counts),
                        KernelArg::buffer(bins.offsets),
                        KernelArg::buffer(bins.work_items),
                        KernelArg::buffer(w2),
                        KernelArg::buffer(y),
                    ],
                )
            }
            (ffn, _) => Err(ffn_mismatch(ffn)),
        }
    }

    /// Unpermute (`moe_unpermute`): `out [T, N]` = the routing-weighted sum of each token's
    /// kept expert rows of `y [rows, N]` (bin `e` from row `bins.offsets[e]`).
    pub fn unpermute<T: Element>(
        &self,
        y: &DeviceBuffer<B, T>,
        routing: Routing<'_, B, T>,
        bins: Bins<'_, B>,
        out: &DeviceBuffer<B, T>,
    ) -> Result<(), LaunchError> {
        self.check_elem::<T>(UNPERMUTE, 0)?;
        let width = self.cfg.out_width() as usize;
        check_len("y", y, self.rows() * width)?;
        check_len("indices", routing.indices, self.pairs())?;
        check_len("weights", routing.weights, self.pairs())?;
        check_len("slot_of", bins.slot_of, self.pairs())?;
        check_len("offsets", bins.offsets, self.cfg.experts as usize)?;
        check_len("out", out, self.tokens() as usize * width)?;
        self.dev.launch(
            self.ptx,
            UNPERMUTE,
            self.unpermute_config(),
            &[
                KernelArg::buffer(y),
                KernelArg::buffer(routing.indices),
                KernelArg::buffer(routing.weights),
                KernelArg::buffer(bins.slot_of),
                KernelArg::buffer(bins.offsets),
                KernelArg::buffer(out),
                KernelArg::U32(self.capacity()),
                KernelArg::U32(self.tokens()),
            ],
        )
    }

    /// Allocates every intermediate buffer for this launch's token count.
    pub fn workspace<T: Element>(&self) -> Result<MoeWorkspace<B, T>, LaunchError> {
        let cfg = self.cfg;
        let experts = cfg.experts as usize;
        Ok(MoeWorkspace {
            indices: self.dev.alloc(self.pairs())?,
            weights: self.dev.alloc(self.pairs())?,
            token_ids: self.dev.alloc(self.slots())?,
            counts: self.dev.alloc(experts)?,
            routed: self.dev.alloc(experts)?,
            slot_of: self.dev.alloc(self.pairs())?,
            offsets: self.dev.alloc(experts)?,
            work_items: self.dev.alloc(self.work_items_len())?,
            gated: match cfg.ffn {
                Ffn::Linear => None,
                Ffn::Swiglu => Some(self.dev.alloc(self.rows() * cfg.expert_dim as usize)?),
            },
            expert_out: self.dev.alloc(self.rows() * cfg.out_width() as usize)?,
            capacity: self.capacity(),
        })
    }

    /// The whole layer into `out [T, N]`, allocating the intermediates; see
    /// [`MoeLaunch::forward_with`].
    pub fn forward<T: Element>(
        &self,
        x: &DeviceBuffer<B, T>,
        logits: &DeviceBuffer<B, T>,
        weights: ExpertWeights<'_, B, T>,
        out: &DeviceBuffer<B, T>,
    ) -> Result<MoeStats, LaunchError> {
        let workspace = self.workspace::<T>()?;
        self.forward_with(&workspace, x, logits, weights, out)?;
        workspace.stats(self.dev)
    }

    /// The whole layer with caller-provided intermediates: gating → permute → schedule →
    /// experts → unpermute. Every buffer is checked before the first launch. Only queues the
    /// phases: nothing waits, allocates or downloads, so the pass can be captured in a CUDA
    /// graph; the statistics stay in `ws` until [`MoeWorkspace::stats`] reads them.
    pub fn forward_with<T: Element>(
        &self,
        ws: &MoeWorkspace<B, T>,
        x: &DeviceBuffer<B, T>,
        logits: &DeviceBuffer<B, T>,
        weights: ExpertWeights<'_, B, T>,
        out: &DeviceBuffer<B, T>,
    ) -> Result<(), LaunchError> {
        self.check_forward(ws, x, logits, weights, out)?;
        self.gating(logits, ws.routing())?;
        self.permute(&ws.indices, ws.bins())?;
        self.experts(x, ws.bins(), weights, ws.gated.as_ref(), &ws.expert_out)?;
        self.unpermute(&ws.expert_out, ws.routing(), ws.bins(), out)
    }

    /// Every check of the four phases, done up front so that a bad buffer launches nothing.
    fn check_forward<T: Element>(
        &self,
        ws: &MoeWorkspace<B, T>,
        x: &DeviceBuffer<B, T>,
        logits: &DeviceBuffer<B, T>,
        weights: ExpertWeights<'_, B, T>,
        out: &DeviceBuffer<B, T>,
    ) -> Result<(), LaunchError> {
        let cfg = self.cfg;
        self.check_elem::<T>(GATING, 0)?;
        check_len("logits", logits, elems(self.tokens(), cfg.experts))?;
        check_len("weights", &ws.weights, self.pairs())?;
        self.check_bins(&ws.indices, ws.bins())?;
        check_len("x", x, elems(self.tokens(), cfg.hidden))?;
        let weight_len = elems(cfg.experts, cfg.expert_dim) * cfg.hidden as usize;
        match (cfg.ffn, weights) {
            (Ffn::Linear, ExpertWeights::Linear { w }) => check_len("w", w, weight_len)?,
            (Ffn::Swiglu, ExpertWeights::Swiglu { w1, w3, w2 }) => {
                check_len("w1", w1, weight_len)?;
                check_len("w3", w3, weight_len)?;
                check_len("w2", w2, weight_len)?;
                let expected = self.rows() * cfg.expert_dim as usize;
                match &ws.gated {
                    Some(g) => check_len("gated", g, expected)?,
                    None => {
                        return Err(LaunchError::BufferLength {
                            name: "gated",
                            expected,
                            actual: 0,
                        })
                    }
                }
            }
            (ffn, _) => return Err(ffn_mismatch(ffn)),
        }
        let width = cfg.out_width() as usize;
        check_len("expert_out", &ws.expert_out, self.rows() * width)?;
        check_len("out", out, self.tokens() as usize * width)
    }
}

/// Expert weights of the other FFN kind than the configuration's.
fn ffn_mismatch(configured: Ffn) -> LaunchError {
    let given = match configured {
        Ffn::Linear => Ffn::Swiglu,
        Ffn::Swiglu => Ffn::Linear,
    };
    LaunchError::Shape(format!(
        "expert weights are for ffn = {given}, the configuration says ffn = {configured}"
    ))
}

/// The value of a configuration field for error reports (0 for non-integer fields).
fn config_value(cfg: &MoeConfig, field: &str) -> u64 {
    match field {
        "experts" => u64::from(cfg.experts),
        "top_k" => u64::from(cfg.top_k),
        "hidden" => u64::from(cfg.hidden),
        "expert_dim" => u64::from(cfg.expert_dim),
        _ => 0,
    }
}

/// The whole layer in one call: checks, allocates the intermediates, runs gating → permute →
/// schedule → experts → unpermute into `out [T, N]`, and returns the per-expert counts, the
/// dropped total (0 when dropless) and the routing.
/// `ptx` must be the module compiled from `cfg` (`cfg.compile()`, or the macro's `const PTX`).
#[allow(clippy::too_many_arguments)]
pub fn forward<B: Backend, T: Element>(
    cfg: &MoeConfig,
    dev: &B,
    ptx: &str,
    tokens: u32,
    x: &DeviceBuffer<B, T>,
    logits: &DeviceBuffer<B, T>,
    weights: ExpertWeights<'_, B, T>,
    out: &DeviceBuffer<B, T>,
) -> Result<MoeStats, LaunchError> {
    MoeLaunch::new(cfg, dev, ptx, tokens)?.forward(x, logits, weights, out)
}

/// A downloaded routing weight widened to f64 (exact for every dtype the family stores).
fn element_to_f64<T: Element>(v: T) -> Result<f64, LaunchError> {
    let mut bytes = Vec::with_capacity(8);
    v.write_le(&mut bytes);
    let value = match (T::KIND, bytes.as_slice()) {
        (ScalarKind::F16, &[a, b]) => half::f16::from_le_bytes([a, b]).to_f64(),
        (ScalarKind::BF16, &[a, b]) => half::bf16::from_le_bytes([a, b]).to_f64(),
        (ScalarKind::F32, &[a, b, c, d]) => f64::from(f32::from_le_bytes([a, b, c, d])),
        (ScalarKind::F64, b) if b.len() == 8 => {
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            f64::from_le_bytes(a)
        }
        (kind, _) => {
            return Err(LaunchError::Shape(format!(
                "routing weights of kind {kind:?} are not a MoE dtype"
            )))
        }
    };
    Ok(value)
}
