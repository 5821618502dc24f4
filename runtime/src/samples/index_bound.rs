//! The index bound every sample kernel declares for the 32-bit address lint
//! ([`crate::lint::address`]) and the launch check that proves it.
//!
//! The samples compute element indices in `u32`: a global thread index
//! (`ctaid · ntid + tid`), or a row-major `row · cols + col` bounded by the tensor it indexes.
//! So a launch is sound when, on every axis, `gridDim · blockDim` threads have distinct `u32`
//! indices, and every tensor has at most [`INDEX_BOUND`]`.limit` elements. The samples have no
//! typed launch functions; callers run [`check_launch`] before launching.

use crate::builder::KernelBuilder;
use crate::launch::LaunchConfig;
use crate::lint::address::{declare_index_bound, IndexBound};
use crate::Arch;

/// The bound every sample kernel declares: each `u32` index it widens into an address is at
/// most `u32::MAX`, proven by [`check_launch`].
pub const INDEX_BOUND: IndexBound = IndexBound {
    limit: u32::MAX as u64,
    proof: "samples::check_launch (grid*block per axis, tensor elements)",
};

/// A sample launch whose indices would pass [`INDEX_BOUND`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SampleLaunchError {
    #[error(
        "axis {axis}: {blocks} blocks · {threads} threads reach global index {last}, past the \
         u32 index limit {limit}",
        limit = INDEX_BOUND.limit
    )]
    Threads {
        axis: &'static str,
        blocks: u32,
        threads: u32,
        last: u64,
    },
    #[error(
        "tensor `{tensor}` has {elements} elements, more than the u32 index limit {limit}",
        limit = INDEX_BOUND.limit
    )]
    TooLarge { tensor: &'static str, elements: u64 },
}

/// A sample kernel named `name`: a builder with [`INDEX_BOUND`] declared.
pub(super) fn sample_kernel(name: &str, arch: Arch) -> KernelBuilder {
    let mut k = KernelBuilder::new(name, arch);
    declare_index_bound(&mut k, &INDEX_BOUND);
    k
}

/// Checks a sample launch against [`INDEX_BOUND`]: on each axis the last global thread index
/// `gridDim · blockDim − 1`, and each of `tensors` (name, element count).
pub fn check_launch(
    launch: &LaunchConfig,
    tensors: &[(&'static str, u64)],
) -> Result<(), SampleLaunchError> {
    let (grid, block) = (launch.grid, launch.block);
    for (axis, blocks, threads) in [
        ("x", grid.x, block.x),
        ("y", grid.y, block.y),
        ("z", grid.z, block.z),
    ] {
        let last = (u64::from(blocks) * u64::from(threads)).saturating_sub(1);
        if last > INDEX_BOUND.limit {
            return Err(SampleLaunchError::Threads {
                axis,
                blocks,
                threads,
                last,
            });
        }
    }
    for &(tensor, elements) in tensors {
        if elements > INDEX_BOUND.limit {
            return Err(SampleLaunchError::TooLarge { tensor, elements });
        }
    }
    Ok(())
}
