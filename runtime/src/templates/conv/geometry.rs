//! Launch geometry of every conv2d entry (grid, block, dynamic shared memory) and the run-time
//! index checks: what the host launch functions ([`mod@super::launch`]) compute before
//! launching, kept next to the tilings ([`DirectTile`](super::DirectTile),
//! [`GemmTile`](super::GemmTile)) the kernels are built with.

use super::config::{Conv2dConfig, DirectTile, Layout};
use super::kernels::{
    bias_block_channels, bias_block_pixels, ChannelsLastTiling, BLOCK_1D, BWD_BIAS_THREADS,
    BWD_FILTER_REDUCE_THREADS, CHANNELS_LAST_THREADS, CHANNELS_LAST_TILE,
    ENTRY_BWD_DATA_CHANNELS_LAST, ENTRY_BWD_DATA_IMPLICIT_GEMM, ENTRY_BWD_FILTER_CHANNELS_LAST,
    ENTRY_BWD_FILTER_CHANNELS_LAST_SPLIT, ENTRY_BWD_FILTER_IMPLICIT_GEMM, ENTRY_BWD_FILTER_SPLIT,
    ENTRY_IMPLICIT_GEMM, ENTRY_IMPLICIT_GEMM_CHANNELS_LAST, ENTRY_IMPLICIT_GEMM_POINTWISE,
    FILTER_TO_CHANNELS_LAST_THREADS, NHWC_THREADS, NHWC_TILE_M, NHWC_TILE_N,
};
use super::shapes::ConvDims;
use crate::dtype::DType;
use crate::launch::{Dim3, LaunchConfig, LaunchError};
use crate::templates::attention::SharedMemoryKind;
use crate::templates::warp_mma::TILE_K_BYTES;

/// The pixels of one 16-byte chunk of `conv2d_implicit_gemm_pointwise`'s `x` reads: `OH·OW`
/// must be a multiple of it.
pub const POINTWISE_PIXEL_RUN: usize = 8;

/// The largest `gridDim.y` / `gridDim.z`.
pub const MAX_GRID_YZ: u32 = 65535;
/// The largest `gridDim.x`.
pub const MAX_GRID_X: u32 = i32::MAX as u32;
/// Every run-time element count and padded position stays at most this: the family's
/// declared [`INDEX_BOUND`](super::INDEX_BOUND).
pub const INDEX_LIMIT: u64 = super::INDEX_BOUND.limit;

pub use crate::templates::split::{SPLIT_TARGET_SMS, SPLIT_WAVES};
/// The fewest reduction (K) tiles one slice runs: below that, the partials' extra traffic and
/// the ring's prologue outweigh the parallelism.
pub const MIN_SLICE_TILES: u64 = 16;

/// Reduction tiles per slice of `tiles` split into `slices`: `⌈T / S⌉`.
pub(crate) fn slice_tiles(tiles: u64, slices: u32) -> u32 {
    tiles.div_ceil(u64::from(slices.max(1))) as u32
}

fn grid_dim(name: &'static str, value: u64, max: u32) -> Result<u32, LaunchError> {
    if value > u64::from(max) {
        return Err(LaunchError::InvalidDim {
            name,
            value,
            reason: format!("exceeds the grid limit {max}"),
        });
    }
    Ok(value as u32)
}

impl Conv2dConfig {
    /// The index checks of one launch: every tensor (input, output, weight, and the im2col
    /// matrix when `im2col`) has at most [`INDEX_LIMIT`] elements, and on each axis the
    /// largest position any kernel forms, `(out + 40)·stride + extent + padding + input` (the
    /// direct kernel's 32-column tile and its vector chunks overhang the output), is at
    /// most [`INDEX_LIMIT`] (so padding taps wrap to values `≥ input`, never onto real rows).
    pub fn check_index_range(&self, dims: &ConvDims, im2col: bool) -> Result<(), LaunchError> {
        let mut tensors = vec![
            ("x", dims.input_len(self) as u64),
            ("y", dims.output_len(self) as u64),
            ("w", self.weight_elements()),
        ];
        if im2col {
            tensors.push(("cols", dims.im2col_len(self) as u64));
        }
        for (name, elements) in tensors {
            if elements > INDEX_LIMIT {
                return Err(LaunchError::InvalidDim {
                    name,
                    value: elements,
                    reason: format!(
                        "elements exceed the kernels' index limit {INDEX_LIMIT} (2^31 − 1)"
                    ),
                });
            }
        }
        let (eh, ew) = self.dilated_extent();
        let axes = [
            (
                "height",
                dims.in_h,
                dims.out_h,
                self.stride_h,
                self.padding_h,
                eh,
            ),
            (
                "width",
                dims.in_w,
                dims.out_w,
                self.stride_w,
                self.padding_w,
                ew,
            ),
        ];
        for (name, input, out, stride, padding, extent) in axes {
            let reach = (u64::from(out) + u64::from(Self::DIRECT_REACH)) * u64::from(stride)
                + extent
                + u64::from(padding)
                + u64::from(input);
            if reach > INDEX_LIMIT {
                return Err(LaunchError::InvalidDim {
                    name,
                    value: u64::from(input),
                    reason: format!(
                        "positions up to {reach} ((out + 40)·stride + extent + padding + input) \
                         exceed the kernels' index limit {INDEX_LIMIT}"
                    ),
                });
            }
        }
        Ok(())
    }

    /// `conv2d_direct`: block `(16, 16)`; grid `(ceil(OW/out_w), min(N · ceil(OH/out_h) ·
    /// channel_blocks, 65535), 1)` with `channel_blocks = groups · ceil(Og / OCB)` (see
    /// [`DirectTile`](super::DirectTile)): blocks walk the tiles past the clamp in steps of the
    /// grid's y extent, so every shape within the index limits launches; dynamic shared
    /// memory = the tile's bytes when it does not fit static shared memory.
    pub fn direct_launch_config(&self, dims: &ConvDims) -> Result<LaunchConfig, LaunchError> {
        self.tiled_launch_config(self.direct_tile(), dims, 1)
    }

    /// The grid of a direct tiling of this config with `phases` blocks per tile and channel
    /// block (the forward's, 1; or backward-data's on its
    /// [`backward_data_window`](Conv2dConfig::backward_data_window) config with the dimensions
    /// swapped, the output one phase's grid and `SH·SW` phases).
    fn tiled_launch_config(
        &self,
        tile: DirectTile,
        dims: &ConvDims,
        phases: u32,
    ) -> Result<LaunchConfig, LaunchError> {
        let channel_blocks = u64::from(self.groups)
            * u64::from(self.out_per_group().div_ceil(tile.out_channels))
            * u64::from(phases);
        let tiles_h = u64::from(dims.out_h.div_ceil(tile.out_h));
        let tiles_w = u64::from(dims.out_w.div_ceil(tile.out_w));
        let walked = u64::from(dims.batch) * tiles_h * channel_blocks;
        Ok(LaunchConfig {
            grid: Dim3::new(
                grid_dim("output column tiles", tiles_w, MAX_GRID_X)?,
                walked.min(u64::from(MAX_GRID_YZ)) as u32,
                1,
            ),
            block: Dim3::new(Self::DIRECT_TILE, Self::DIRECT_TILE, 1),
            dynamic_shared_bytes: match tile.shared_kind {
                SharedMemoryKind::Static => 0,
                SharedMemoryKind::Dynamic => tile.shared_bytes,
            },
        })
    }

    /// `conv2d_im2col`: block 256; grid `(ceil(N·OH·OW / 256), min(C_in·KH·KW, 65535))` (rows
    /// past the grid are walked in steps of `gridDim.y`).
    pub fn im2col_launch_config(&self, dims: &ConvDims) -> Result<LaunchConfig, LaunchError> {
        let columns = u64::from(dims.batch) * dims.out_pixels() as u64;
        let rows = u64::from(self.in_channels) * u64::from(self.kernel_h * self.kernel_w);
        Ok(LaunchConfig {
            grid: Dim3::new(
                grid_dim("im2col column blocks", columns.div_ceil(256), MAX_GRID_X)?,
                rows.min(u64::from(MAX_GRID_YZ)) as u32,
                1,
            ),
            block: Dim3::x(BLOCK_1D),
            dynamic_shared_bytes: 0,
        })
    }

    /// `conv2d_gemm` and `conv2d_1x1`: block `(16, 16)`; grid `(ceil(N·OH·OW / block_n),
    /// ceil(Og / block_m), groups)` (see [`GemmTile`](super::GemmTile)).
    pub fn gemm_launch_config(&self, dims: &ConvDims) -> Result<LaunchConfig, LaunchError> {
        let tile = self.gemm_tile();
        let columns = u64::from(dims.batch) * dims.out_pixels() as u64;
        Ok(LaunchConfig {
            grid: Dim3::new(
                grid_dim(
                    "GEMM column tiles",
                    columns.div_ceil(u64::from(tile.block_n)),
                    MAX_GRID_X,
                )?,
                grid_dim(
                    "GEMM row tiles",
                    u64::from(self.out_per_group().div_ceil(tile.block_m)),
                    MAX_GRID_YZ,
                )?,
                grid_dim("groups", u64::from(self.groups), MAX_GRID_YZ)?,
            ),
            block: Dim3::new(16, 16, 1),
            dynamic_shared_bytes: 0,
        })
    }

    /// `conv2d_to_channels_last` over `batch` images of `pixels` pixels: block 128; grid
    /// `(⌈pixels / Pb⌉, ⌈C_in / Cb⌉, batch)` for the tile `Pb × Cb` the kernel was built with
    /// ([`ChannelsLastTiling`], from `C_in`).
    pub fn to_channels_last_launch_config(
        &self,
        batch: u32,
        pixels: u32,
    ) -> Result<LaunchConfig, LaunchError> {
        channels_last_copy_launch_config(self.in_channels, batch, pixels)
    }

    /// `conv2d_gradient_to_channels_last` over `batch` images of `pixels` output pixels: as
    /// [`Self::to_channels_last_launch_config`] with `C_out` channels.
    pub fn gradient_to_channels_last_launch_config(
        &self,
        batch: u32,
        pixels: u32,
    ) -> Result<LaunchConfig, LaunchError> {
        channels_last_copy_launch_config(self.out_channels, batch, pixels)
    }

    /// `conv2d_filter_to_channels_last`: block 256; grid `(C_out, ⌈Cg / 32⌉)`.
    pub fn filter_to_channels_last_launch_config(&self) -> Result<LaunchConfig, LaunchError> {
        Ok(LaunchConfig {
            grid: Dim3::new(
                grid_dim("output channels", u64::from(self.out_channels), MAX_GRID_X)?,
                grid_dim(
                    "channel tiles",
                    u64::from(self.in_per_group().div_ceil(CHANNELS_LAST_TILE)),
                    MAX_GRID_YZ,
                )?,
                1,
            ),
            block: Dim3::x(FILTER_TO_CHANNELS_LAST_THREADS),
            dynamic_shared_bytes: 0,
        })
    }

    /// `conv2d_implicit_gemm`: block 128; grid `(⌈N·OH·OW / rows⌉, ⌈Og / columns⌉, groups)`
    /// for its tile `[rows, columns]` ([`Self::implicit_gemm_tile`]).
    pub fn implicit_gemm_launch_config(
        &self,
        dims: &ConvDims,
    ) -> Result<LaunchConfig, LaunchError> {
        self.forward_gemm_grid(ENTRY_IMPLICIT_GEMM, dims)
    }

    /// `conv2d_implicit_gemm_channels_last`: as [`Self::implicit_gemm_launch_config`] with
    /// that entry's tile.
    pub fn implicit_gemm_channels_last_launch_config(
        &self,
        dims: &ConvDims,
    ) -> Result<LaunchConfig, LaunchError> {
        self.forward_gemm_grid(ENTRY_IMPLICIT_GEMM_CHANNELS_LAST, dims)
    }

    /// `conv2d_implicit_gemm_pointwise`: as [`Self::implicit_gemm_launch_config`] with that
    /// entry's tile. A config without the entry ([`Self::has_pointwise_implicit_gemm`]) is
    /// [`LaunchError::InvalidDim`] `layout`, and `OH·OW` not a multiple of 8 (its 16-byte
    /// chunks of 8 pixels would cross images, unaligned) [`LaunchError::InvalidDim`]
    /// `out_pixels`.
    pub fn implicit_gemm_pointwise_launch_config(
        &self,
        dims: &ConvDims,
    ) -> Result<LaunchConfig, LaunchError> {
        if !self.has_pointwise_implicit_gemm() {
            return Err(LaunchError::InvalidDim {
                name: "layout",
                value: 0,
                reason: "conv2d_implicit_gemm_pointwise needs an NCHW f16/bf16 1 x 1 filter at \
                         stride 1 without padding, C_in/groups a multiple of 8, on a target with \
                         mma.m16n8k16"
                    .into(),
            });
        }
        let pixels = dims.out_pixels();
        if !pixels.is_multiple_of(POINTWISE_PIXEL_RUN) {
            return Err(LaunchError::InvalidDim {
                name: "out_pixels",
                value: pixels as u64,
                reason: format!(
                    "conv2d_implicit_gemm_pointwise reads x in runs of {POINTWISE_PIXEL_RUN} \
                     pixels, so OH*OW must be a multiple of {POINTWISE_PIXEL_RUN}"
                ),
            });
        }
        self.forward_gemm_grid(ENTRY_IMPLICIT_GEMM_POINTWISE, dims)
    }

    fn forward_gemm_grid(&self, entry: &str, dims: &ConvDims) -> Result<LaunchConfig, LaunchError> {
        let pixels = u64::from(dims.batch) * dims.out_pixels() as u64;
        let z = ("groups", u64::from(self.groups));
        tile_grid(self.gemm_tiling(entry), pixels, self.out_per_group(), z)
    }

    /// The grid tiling of tensor-core entry `entry`.
    fn gemm_tiling(&self, entry: &str) -> TileGrid {
        let g = self
            .implicit_gemm_geometry(entry)
            .expect("a tensor-core implicit GEMM entry");
        TileGrid {
            tile_m: g.block_m(),
            tile_n: g.block_n(),
            threads: g.threads(),
            axes: IMPLICIT_AXES,
            dynamic_shared_bytes: self
                .implicit_gemm_dynamic_shared_bytes(entry)
                .expect("a tensor-core implicit GEMM entry"),
        }
    }

    /// `conv2d_nhwc`: block 128; grid `(⌈N·OH·OW / 64⌉, ⌈Og / 64⌉, groups)`.
    pub fn nhwc_launch_config(&self, dims: &ConvDims) -> Result<LaunchConfig, LaunchError> {
        let pixels = u64::from(dims.batch) * dims.out_pixels() as u64;
        tile_grid(
            NHWC_GRID,
            pixels,
            self.out_per_group(),
            ("groups", u64::from(self.groups)),
        )
    }

    /// `conv2d_bwd_data`: NHWC as `conv2d_nhwc`'s tiling, block 128, grid `(⌈H·W / 64⌉,
    /// ⌈Cg / 64⌉, N·groups)`; NCHW block `(16, 16)`, grid `(⌈⌈W / SW⌉ / tile⌉, min(N ·
    /// ⌈⌈H / SH⌉ / tile⌉ · groups · ⌈Cg / CB⌉ · SH·SW, 65535), 1)` (a block per stride phase)
    /// with the [`backward_data_tile`](Conv2dConfig::backward_data_tile)'s `tile` pixels and
    /// `CB` channels (walked past the clamp and dynamic shared memory as `conv2d_direct`).
    pub fn backward_data_launch_config(
        &self,
        dims: &ConvDims,
    ) -> Result<LaunchConfig, LaunchError> {
        let pixels = u64::from(dims.in_h) * u64::from(dims.in_w);
        if self.layout == Layout::Nhwc {
            let planes = u64::from(dims.batch) * u64::from(self.groups);
            return tile_grid(
                NHWC_GRID,
                pixels,
                self.in_per_group(),
                ("images × groups", planes),
            );
        }
        let swapped = ConvDims {
            batch: dims.batch,
            in_h: dims.out_h,
            in_w: dims.out_w,
            out_h: dims.in_h.div_ceil(self.stride_h),
            out_w: dims.in_w.div_ceil(self.stride_w),
        };
        self.backward_data_window().tiled_launch_config(
            self.backward_data_tile(),
            &swapped,
            self.stride_h * self.stride_w,
        )
    }

    /// `conv2d_bwd_data_implicit_gemm`: block 128; grid `(⌈H·W / rows⌉, ⌈Cg / columns⌉,
    /// N·groups)` for its tile `[rows, columns]` ([`Self::implicit_gemm_tile`]; a pixel tile
    /// stays within one image).
    pub fn backward_data_implicit_gemm_launch_config(
        &self,
        dims: &ConvDims,
    ) -> Result<LaunchConfig, LaunchError> {
        self.backward_data_gemm_grid(ENTRY_BWD_DATA_IMPLICIT_GEMM, dims)
    }

    /// `conv2d_bwd_data_implicit_gemm_channels_last`: as
    /// [`Self::backward_data_implicit_gemm_launch_config`] with that entry's tile.
    pub fn backward_data_implicit_gemm_channels_last_launch_config(
        &self,
        dims: &ConvDims,
    ) -> Result<LaunchConfig, LaunchError> {
        self.backward_data_gemm_grid(ENTRY_BWD_DATA_CHANNELS_LAST, dims)
    }

    fn backward_data_gemm_grid(
        &self,
        entry: &str,
        dims: &ConvDims,
    ) -> Result<LaunchConfig, LaunchError> {
        let pixels = u64::from(dims.in_h) * u64::from(dims.in_w);
        let planes = u64::from(dims.batch) * u64::from(self.groups);
        let z = ("images × groups", planes);
        tile_grid(self.gemm_tiling(entry), pixels, self.in_per_group(), z)
    }

    /// `conv2d_bwd_filter_implicit_gemm`: block 128; grid `(⌈Og / 64⌉, ⌈Cg·KH·KW / 64⌉, G)`
    /// (each block reduces over all `N·OH·OW` pixels).
    pub fn backward_filter_implicit_gemm_launch_config(&self) -> Result<LaunchConfig, LaunchError> {
        self.backward_filter_split_launch_config(1)
    }

    /// The number `S` of pixel slices the tensor-core backward-filter splits its reduction
    /// into ([`super::launch::backward_filter`]): with `B = ⌈Og/64⌉·⌈Cg·KH·KW/64⌉·G` blocks
    /// unsplit and `T = ⌈N·OH·OW / K⌉` reduction tiles (`K` = 32 halves, 16 f32),
    /// - `S = 1` when `B ≥` [`SPLIT_TARGET_SMS`] (the grid already fills the part) or
    ///   `T < 2·`[`MIN_SLICE_TILES`];
    /// - else `S = min(⌈W / B⌉, ⌊T / MIN_SLICE_TILES⌋, ⌊65535 / G⌋, ⌊INDEX_LIMIT / |dw|⌋)`
    ///   with `W =` [`SPLIT_WAVES`]` · `[`SPLIT_TARGET_SMS`] blocks, then shrunk to
    ///   `⌈T / ⌈T / S⌉⌉` so that no slice is empty: `S·B ≈ W` blocks, each slice at least
    ///   [`MIN_SLICE_TILES`] tiles.
    ///
    /// The rule depends on the shape only, so a shape always gets the same `S` and the same
    /// bits.
    pub fn backward_filter_slices(&self, dims: &ConvDims) -> u32 {
        self.gemm_filter_slices(ENTRY_BWD_FILTER_IMPLICIT_GEMM, dims)
    }

    /// [`Self::backward_filter_slices`] of the NCHW backward-filter over channels-last
    /// copies (`conv2d_bwd_filter_implicit_gemm_channels_last` and its split), whose `B` is
    /// that entry's blocks.
    pub fn backward_filter_channels_last_slices(&self, dims: &ConvDims) -> u32 {
        self.gemm_filter_slices(ENTRY_BWD_FILTER_CHANNELS_LAST, dims)
    }

    fn gemm_filter_slices(&self, entry: &str, dims: &ConvDims) -> u32 {
        let blocks = self.filter_grid_blocks(self.gemm_tiling(entry));
        self.split_slices(blocks, self.backward_filter_tiles(dims))
    }

    /// The number `S` of pixel slices the CUDA-core `conv2d_bwd_filter` splits its reduction
    /// into: [`Self::backward_filter_slices`]'s rule with `B` the same `⌈Og/64⌉·⌈Cg·KH·KW/64⌉·G`
    /// blocks and `T = ⌈N·OH·OW / K⌉` of its own reduction tiles (`K` = 32 pixels, 16 for
    /// f64).
    pub fn backward_filter_cuda_core_slices(&self, dims: &ConvDims) -> u32 {
        let tiles = self.backward_filter_cuda_core_tiles(dims);
        self.split_slices(self.backward_filter_blocks(), tiles)
    }

    /// Reduction tiles of the CUDA-core backward-filter, `⌈N·OH·OW / K⌉` (`K`: one 128-byte
    /// row of the accumulation type, 32 f32 or 16 f64).
    pub(crate) fn backward_filter_cuda_core_tiles(&self, dims: &ConvDims) -> u64 {
        let depth = if self.dtype == DType::F64 { 16 } else { 32 };
        (u64::from(dims.batch) * dims.out_pixels() as u64).div_ceil(depth)
    }

    /// `conv2d_bwd_filter_split`: block 128; grid `(⌈Og / 64⌉, ⌈Cg·KH·KW / 64⌉, S·G)`.
    pub(crate) fn backward_filter_cuda_core_split_launch_config(
        &self,
        slices: u32,
    ) -> Result<LaunchConfig, LaunchError> {
        tile_grid(
            FILTER_GRID,
            u64::from(self.out_per_group()),
            self.filter_len(),
            (
                "slices × groups",
                u64::from(slices) * u64::from(self.groups),
            ),
        )
    }

    /// The slice rule of both backward-filters for `blocks` unsplit blocks and `tiles`
    /// reduction tiles ([`Self::backward_filter_slices`]).
    fn split_slices(&self, blocks: u64, tiles: u64) -> u32 {
        if blocks >= SPLIT_TARGET_SMS || tiles < 2 * MIN_SLICE_TILES {
            return 1;
        }
        let wanted = (SPLIT_WAVES * SPLIT_TARGET_SMS).div_ceil(blocks);
        let slices = wanted
            .min(tiles / MIN_SLICE_TILES)
            .min(u64::from(MAX_GRID_YZ / self.groups))
            .min(INDEX_LIMIT / self.weight_elements())
            .max(1);
        tiles.div_ceil(tiles.div_ceil(slices)) as u32
    }

    /// Elements of one filter row, `Cg·KH·KW`.
    fn filter_len(&self) -> u32 {
        self.in_per_group() * self.kernel_h * self.kernel_w
    }

    /// Blocks of the unsplit CUDA-core backward-filter grid, `⌈Og/64⌉·⌈Cg·KH·KW/64⌉·G`
    /// (the tensor-core entries' where their tile is 64 × 64).
    pub(crate) fn backward_filter_blocks(&self) -> u64 {
        self.filter_grid_blocks(FILTER_GRID)
    }

    /// Blocks of an unsplit backward-filter grid of `tiling`.
    fn filter_grid_blocks(&self, tiling: TileGrid) -> u64 {
        u64::from(self.out_per_group().div_ceil(tiling.tile_m))
            * u64::from(self.filter_len().div_ceil(tiling.tile_n))
            * u64::from(self.groups)
    }

    /// Reduction tiles of the tensor-core backward-filter, `⌈N·OH·OW / K⌉` (`K` = 64 bytes
    /// of elements: 32 halves, 16 f32).
    pub(crate) fn backward_filter_tiles(&self, dims: &ConvDims) -> u64 {
        let depth = u64::from(TILE_K_BYTES / self.dtype.size_bytes());
        (u64::from(dims.batch) * dims.out_pixels() as u64).div_ceil(depth)
    }

    /// `conv2d_bwd_filter_implicit_gemm_split`: block 128; grid `(⌈Og / rows⌉, ⌈Cg·KH·KW /
    /// columns⌉, S·G)` for its tile `[rows, columns]` ([`Self::implicit_gemm_tile`]).
    pub(crate) fn backward_filter_split_launch_config(
        &self,
        slices: u32,
    ) -> Result<LaunchConfig, LaunchError> {
        self.filter_gemm_grid(ENTRY_BWD_FILTER_SPLIT, slices)
    }

    /// `conv2d_bwd_filter_implicit_gemm_channels_last_split`: as
    /// [`Self::backward_filter_split_launch_config`] with that entry's tile.
    pub(crate) fn backward_filter_channels_last_split_launch_config(
        &self,
        slices: u32,
    ) -> Result<LaunchConfig, LaunchError> {
        self.filter_gemm_grid(ENTRY_BWD_FILTER_CHANNELS_LAST_SPLIT, slices)
    }

    /// `conv2d_bwd_filter_implicit_gemm_channels_last`: its split's grid with one slice.
    pub fn backward_filter_implicit_gemm_channels_last_launch_config(
        &self,
    ) -> Result<LaunchConfig, LaunchError> {
        self.backward_filter_channels_last_split_launch_config(1)
    }

    fn filter_gemm_grid(&self, entry: &str, slices: u32) -> Result<LaunchConfig, LaunchError> {
        tile_grid(
            self.gemm_tiling(entry),
            u64::from(self.out_per_group()),
            self.filter_len(),
            (
                "slices × groups",
                u64::from(slices) * u64::from(self.groups),
            ),
        )
    }

    /// `conv2d_bwd_filter_reduce`: block 256, one thread per `dw` element; grid
    /// `⌈C_out·Cg·KH·KW / 256⌉`.
    pub fn backward_filter_reduce_launch_config(&self) -> Result<LaunchConfig, LaunchError> {
        reduce_launch_config("weight blocks", self.weight_elements())
    }

    /// `conv2d_bwd_filter`: `conv2d_nhwc`'s tiling over `dw_g [Og, Cg·KH·KW]`, block 128;
    /// grid `(⌈Og / 64⌉, ⌈Cg·KH·KW / 64⌉, G)`.
    pub fn backward_filter_launch_config(&self) -> Result<LaunchConfig, LaunchError> {
        self.backward_filter_cuda_core_split_launch_config(1)
    }

    /// `conv2d_bwd_bias`: block 256 over a tile of channels (NCHW 1, NHWC 32); grid
    /// `⌈C_out / tile⌉` (each block reduces over all `N·OH·OW` pixels).
    pub fn backward_bias_launch_config(&self) -> LaunchConfig {
        LaunchConfig {
            grid: Dim3::x(self.backward_bias_blocks() as u32),
            block: Dim3::x(BWD_BIAS_THREADS),
            dynamic_shared_bytes: 0,
        }
    }

    /// `conv2d_bwd_bias_split`: block 256; grid `(⌈C_out / tile⌉, S)`.
    pub(crate) fn backward_bias_split_launch_config(
        &self,
        slices: u32,
    ) -> Result<LaunchConfig, LaunchError> {
        Ok(LaunchConfig {
            grid: Dim3 {
                x: self.backward_bias_blocks() as u32,
                y: grid_dim("slices", u64::from(slices), MAX_GRID_YZ)?,
                z: 1,
            },
            block: Dim3::x(BWD_BIAS_THREADS),
            dynamic_shared_bytes: 0,
        })
    }

    /// `conv2d_bwd_bias_reduce`: block 256, one thread per channel; grid `⌈C_out / 256⌉`.
    pub fn backward_bias_reduce_launch_config(&self) -> Result<LaunchConfig, LaunchError> {
        reduce_launch_config("bias blocks", u64::from(self.out_channels))
    }

    /// The number `S` of pixel slices the bias gradient splits its reduction into:
    /// [`Self::backward_filter_slices`]' rule with `B = ⌈C_out / tile⌉` blocks unsplit (tile:
    /// 1 channel in NCHW, 32 in NHWC) and `T = ⌈N·OH·OW / R⌉` rounds of one element per thread
    /// (`R` = 256 pixels in NCHW, 8 in NHWC), so every slice gives each thread at least
    /// [`MIN_SLICE_TILES`] elements.
    pub fn backward_bias_slices(&self, dims: &ConvDims) -> u32 {
        self.split_slices(self.backward_bias_blocks(), self.backward_bias_rounds(dims))
    }

    /// Rounds of the whole bias reduction, `⌈N·OH·OW / R⌉` ([`Self::backward_bias_slices`]).
    pub(crate) fn backward_bias_rounds(&self, dims: &ConvDims) -> u64 {
        let pixels = u64::from(dims.batch) * dims.out_pixels() as u64;
        pixels.div_ceil(u64::from(bias_block_pixels(self.layout)))
    }

    /// Blocks of the unsplit bias grid, `⌈C_out / tile⌉`.
    fn backward_bias_blocks(&self) -> u64 {
        u64::from(self.out_channels.div_ceil(bias_block_channels(self.layout)))
    }
}

/// A reduce entry's launch (`conv2d_bwd_filter_reduce`, `conv2d_bwd_bias_reduce`): blocks of
/// 256, one thread per each of the `len` outputs; `name` is the grid axis in errors.
fn reduce_launch_config(name: &'static str, len: u64) -> Result<LaunchConfig, LaunchError> {
    let blocks = len.div_ceil(u64::from(BWD_FILTER_REDUCE_THREADS));
    Ok(LaunchConfig {
        grid: Dim3::x(grid_dim(name, blocks, MAX_GRID_X)?),
        block: Dim3::x(BWD_FILTER_REDUCE_THREADS),
        dynamic_shared_bytes: 0,
    })
}

/// The launch of a tensor-core implicit GEMM: block 128; grid `(ceil(rows / 64),
/// ceil(columns / 64), z)` with `z` named for the error.
/// A GEMM tiling's grid: `(⌈rows / tile_m⌉, ⌈columns / tile_n⌉, z)` blocks of `threads`.
#[derive(Clone, Copy)]
struct TileGrid {
    /// The grid axes' names in launch errors.
    axes: [&'static str; 2],
    tile_m: u32,
    tile_n: u32,
    threads: u32,
    /// What each launch passes.
    dynamic_shared_bytes: u32,
}

/// The tensor-core implicit GEMMs' grid axes (each entry's tile is its own,
/// [`Conv2dConfig::implicit_gemm_tile`]).
const IMPLICIT_AXES: [&str; 2] = ["implicit GEMM pixel tiles", "implicit GEMM channel tiles"];

/// `conv2d_nhwc`'s tiling.
const NHWC_GRID: TileGrid = TileGrid {
    axes: ["NHWC pixel tiles", "NHWC channel tiles"],
    tile_m: NHWC_TILE_M,
    tile_n: NHWC_TILE_N,
    threads: NHWC_THREADS,
    dynamic_shared_bytes: 0,
};

/// The CUDA-core `conv2d_bwd_filter`'s tiling (`conv2d_nhwc`'s, over output channels ×
/// filter rows).
const FILTER_GRID: TileGrid = TileGrid {
    axes: ["filter output-channel tiles", "filter row tiles"],
    tile_m: NHWC_TILE_M,
    tile_n: NHWC_TILE_N,
    threads: NHWC_THREADS,
    dynamic_shared_bytes: 0,
};

fn tile_grid(
    tiling: TileGrid,
    rows: u64,
    columns: u32,
    (z_name, z): (&'static str, u64),
) -> Result<LaunchConfig, LaunchError> {
    Ok(LaunchConfig {
        grid: Dim3::new(
            grid_dim(
                tiling.axes[0],
                rows.div_ceil(u64::from(tiling.tile_m)),
                MAX_GRID_X,
            )?,
            grid_dim(
                tiling.axes[1],
                u64::from(columns.div_ceil(tiling.tile_n)),
                MAX_GRID_YZ,
            )?,
            grid_dim(z_name, z, MAX_GRID_YZ)?,
        ),
        block: Dim3::new(tiling.threads, 1, 1),
        dynamic_shared_bytes: tiling.dynamic_shared_bytes,
    })
}

/// A channels-last copy of `channels` channels over `batch` images of `pixels` pixels: block
/// 128; grid `(⌈pixels / Pb⌉, ⌈channels / Cb⌉, batch)` for the tile `Pb × Cb` the kernel was
/// built with ([`ChannelsLastTiling`], from `channels`).
fn channels_last_copy_launch_config(
    channels: u32,
    batch: u32,
    pixels: u32,
) -> Result<LaunchConfig, LaunchError> {
    let tiling = ChannelsLastTiling::new(channels);
    Ok(LaunchConfig {
        grid: Dim3::new(
            grid_dim(
                "channels-last pixel tiles",
                u64::from(pixels.div_ceil(tiling.block_pixels())),
                MAX_GRID_X,
            )?,
            grid_dim(
                "channels-last channel tiles",
                u64::from(channels.div_ceil(tiling.block_channels())),
                MAX_GRID_YZ,
            )?,
            grid_dim("channels-last images", u64::from(batch), MAX_GRID_YZ)?,
        ),
        block: Dim3::x(CHANNELS_LAST_THREADS),
        dynamic_shared_bytes: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::templates::conv::ConvShape;

    fn dims(cfg: &Conv2dConfig, batch: u32, height: u32, width: u32) -> ConvDims {
        cfg.check_shape(
            &ConvShape {
                batch,
                height,
                width,
            },
            true,
        )
        .unwrap()
    }

    #[test]
    fn direct_grid_covers_the_output() {
        let cfg = Conv2dConfig::new(3, 5, 3).with_padding(1, 1);
        let d = dims(&cfg, 2, 33, 17);
        let lc = cfg.direct_launch_config(&d).unwrap();
        // Output 33 × 17: 1 column tile, batch 2 × 2 row tiles (32 × 32) × 1 channel block
        // (5 ≤ 16 channels per block).
        assert_eq!(lc.grid, Dim3::new(1, 2 * 2, 1));
        assert_eq!(lc.block, Dim3::new(16, 16, 1));
        assert_eq!(lc.dynamic_shared_bytes, 0);
        let grouped = Conv2dConfig::new(4, 40, 3).with_groups(2); // Og = 20: 2 blocks of 16
        let lc = grouped
            .direct_launch_config(&dims(&grouped, 1, 36, 20))
            .unwrap();
        // Output 34 × 18: 1 column tile, 2 row tiles × 2 groups × 2 channel blocks.
        assert_eq!(lc.grid, Dim3::new(1, 2 * 2 * 2, 1));
    }

    /// Tiled walks past 65535 blocks are clamped, not refused (the blocks walk the rest):
    /// depthwise `G = C = 70000` at 1 × 1 pixels has 70000 channel blocks; 32768 channels
    /// (2048 blocks of 16) over 1056 rows (33 tiles of 32) are 67584; a batch of 70000 of one
    /// tile each is 70000.
    #[test]
    fn tiled_grids_clamp_past_the_grid_limit() {
        let clamped = Dim3::new(1, 65_535, 1);
        let depthwise = Conv2dConfig::new(70_000, 70_000, 1).with_groups(70_000);
        let d = dims(&depthwise, 1, 1, 1);
        assert_eq!(depthwise.direct_launch_config(&d).unwrap().grid, clamped);
        assert_eq!(
            depthwise.backward_data_launch_config(&d).unwrap().grid,
            clamped
        );
        let wide_out = Conv2dConfig::new(2, 32_768, 1);
        let d = dims(&wide_out, 1, 1056, 1);
        assert_eq!(wide_out.direct_launch_config(&d).unwrap().grid, clamped);
        let wide_in = Conv2dConfig::new(32_768, 2, 1);
        let d = dims(&wide_in, 1, 1056, 1);
        assert_eq!(
            wide_in.backward_data_launch_config(&d).unwrap().grid,
            clamped
        );
        let small = Conv2dConfig::new(2, 2, 1);
        let d = dims(&small, 70_000, 1, 1);
        assert_eq!(small.direct_launch_config(&d).unwrap().grid, clamped);
        assert_eq!(small.backward_data_launch_config(&d).unwrap().grid, clamped);
    }

    /// NCHW backward-data at a stride above 1 tiles each stride phase's grid of `dx`, one
    /// phase per block: stride (3, 2) on `dx` 70 × 65 has phase grids of at most 24 × 33
    /// (one row tile, two column tiles of 32), × 6 phases × 2 groups × 2 blocks of `Cg = 20`
    /// input channels × 3 images; a batch of 3000 such is 3000 · 24 = 72000 y indices,
    /// clamped.
    #[test]
    fn backward_data_grid_has_a_block_per_phase() {
        let cfg = Conv2dConfig::new(40, 4, 3)
            .with_groups(2)
            .with_stride(3, 2)
            .with_padding(1, 1);
        let d = dims(&cfg, 3, 70, 65);
        assert_eq!(
            cfg.backward_data_launch_config(&d).unwrap().grid,
            Dim3::new(2, 3 * 6 * 2 * 2, 1)
        );
        let d = dims(&cfg, 3000, 70, 65);
        assert_eq!(
            cfg.backward_data_launch_config(&d).unwrap().grid,
            Dim3::new(2, 65_535, 1)
        );
    }

    #[test]
    fn other_grids() {
        let cfg = Conv2dConfig::new(4, 40, 3).with_groups(2);
        let d = dims(&cfg, 3, 10, 9); // out 8 × 7, 168 columns
        assert_eq!(
            cfg.im2col_launch_config(&d).unwrap().grid,
            Dim3::new(1, 36, 1)
        );
        // Og = 20 → block_m 32.
        assert_eq!(cfg.gemm_launch_config(&d).unwrap().grid, Dim3::new(3, 1, 2));
        // Input 10 × 9: batch 3 × one 32 × 32 tile × 2 groups × 1 block of Cg = 2 channels.
        assert_eq!(
            cfg.backward_data_launch_config(&d).unwrap().grid,
            Dim3::new(1, 3 * 2, 1)
        );
        // Og = 20 (one tile of 64), Cg·KH·KW = 18 (one tile), 2 groups.
        assert_eq!(
            cfg.backward_filter_launch_config().unwrap().grid,
            Dim3::new(1, 1, 2)
        );
        // One block per NCHW channel; 32 NHWC channels per block.
        assert_eq!(cfg.backward_bias_launch_config().grid, Dim3::x(40));
        let nhwc = cfg.with_layout(Layout::Nhwc);
        assert_eq!(nhwc.backward_bias_launch_config().grid, Dim3::x(2));
    }

    /// The slice rule, from the grid alone (no launch): the ResNet 3 × 3 64 → 64 layer at
    /// batch 32 on 56 × 56 has 9 unsplit blocks and 3136 reduction tiles of 32 pixels; the
    /// rule aims at 2 × 132 blocks: `S = ⌈264 / 9⌉ = 30` slices of `⌈3136 / 30⌉ = 105`
    /// tiles, grid (1, 9, 30). A grid that already fills the part (512 → 512: 8 × 72 blocks)
    /// and a short reduction (batch 1 on 16 × 16: 8 tiles) keep one slice.
    #[test]
    fn slice_rule_at_resnet_batch_32() {
        let cfg = Conv2dConfig {
            dtype: crate::dtype::DType::F16,
            arch: crate::arch::Arch::Sm80,
            ..Conv2dConfig::new(64, 64, 3).with_padding(1, 1)
        };
        let d = dims(&cfg, 32, 56, 56);
        assert_eq!(cfg.backward_filter_blocks(), 9);
        assert_eq!(cfg.backward_filter_tiles(&d), 3136);
        let slices = cfg.backward_filter_slices(&d);
        assert_eq!(slices, 30);
        assert_eq!(slice_tiles(cfg.backward_filter_tiles(&d), slices), 105);
        let grid = cfg
            .backward_filter_split_launch_config(slices)
            .unwrap()
            .grid;
        assert_eq!(grid, Dim3::new(1, 9, 30));

        let wide = Conv2dConfig {
            in_channels: 512,
            out_channels: 512,
            ..cfg
        };
        assert_eq!(wide.backward_filter_blocks(), 8 * 72);
        assert_eq!(wide.backward_filter_slices(&dims(&wide, 32, 7, 7)), 1);
        assert_eq!(cfg.backward_filter_slices(&dims(&cfg, 1, 16, 16)), 1);
    }

    #[test]
    fn index_limits_are_typed_errors() {
        // out_h = 4 + 2·720e6, positions reach ≈ 3·720e6 > 2^31.
        let cfg = Conv2dConfig::new(1, 1, 1).with_padding(720_000_000, 0);
        let d = dims(&cfg, 1, 4, 1);
        assert!(matches!(
            cfg.check_index_range(&d, false),
            Err(LaunchError::InvalidDim { name: "height", .. })
        ));
        let cfg = Conv2dConfig::new(64, 64, 1);
        let d = dims(&cfg, 512, 256, 256); // 2^31 elements
        assert!(matches!(
            cfg.check_index_range(&d, false),
            Err(LaunchError::InvalidDim { name: "x", .. })
        ));
    }
}
