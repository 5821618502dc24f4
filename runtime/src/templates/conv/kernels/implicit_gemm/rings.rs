//! Where the implicit GEMMs' operand rings live: two static shared arrays (`a_tiles`,
//! `b_tiles`) while both fit the target's static limit, else one dynamic array
//! (`.extern .shared`) holding A's ring and then B's — [`Geometry::WIDE`]'s 60 KiB, which
//! the launch passes as dynamic shared memory ([`dynamic_shared_bytes`]).

use crate::arch::Arch;
use crate::builder::{KernelBuilder, Reg, Scalar, SharedArr, U32};
use crate::templates::warp_mma::{self as tile, Geometry, Side};

/// Bytes of both operands' rings of geometry `g`.
const fn ring_bytes(g: Geometry) -> u32 {
    g.stages * (g.stage_bytes(Side::A) + g.stage_bytes(Side::B))
}

/// The dynamic shared memory a launch of an implicit GEMM on tile `g` for `arch` passes:
/// its rings' bytes where they exceed the static limit, else 0.
pub(crate) fn dynamic_shared_bytes(g: Geometry, arch: Arch) -> u32 {
    let bytes = ring_bytes(g);
    if bytes > arch.max_static_shared_bytes() {
        bytes
    } else {
        0
    }
}

/// Both operands' rings.
pub(super) struct Rings<T: Scalar> {
    geometry: Geometry,
    a: SharedArr<T>,
    b: SharedArr<T>,
    /// Byte offset of B's ring in its array (A's ring's bytes where both share one).
    b_at: u32,
}

impl<T: Scalar> Rings<T> {
    /// Declares the rings of tile `g` on `arch`.
    pub fn declare(k: &mut KernelBuilder, g: Geometry, arch: Arch) -> Self {
        match dynamic_shared_bytes(g, arch) {
            0 => Self {
                geometry: g,
                a: tile::ring_in::<T>(k, "a_tiles", g, Side::A),
                b: tile::ring_in::<T>(k, "b_tiles", g, Side::B),
                b_at: 0,
            },
            bytes => {
                let rings = k.dynamic_shared::<T>(bytes);
                Self {
                    geometry: g,
                    a: rings,
                    b: rings,
                    b_at: g.stages * g.stage_bytes(Side::A),
                }
            }
        }
    }

    /// Shared byte address of ring slot `slot` of operand `side`.
    pub fn stage(&self, k: &mut KernelBuilder, side: Side, slot: Reg<U32>) -> Reg<U32> {
        let (tiles, at) = match side {
            Side::A => (self.a, 0),
            Side::B => (self.b, self.b_at),
        };
        let base = tile::stage_base_of(k, tiles, slot, self.geometry.stage_bytes(side));
        match at {
            0 => base,
            at => k.add(base, at),
        }
    }

    /// The largest run of ring memory free once the K loop is done, for the epilogue: its
    /// shared byte address and length (both rings where they share one array, else the
    /// larger ring).
    pub fn free_space(&self, k: &mut KernelBuilder) -> (Reg<U32>, u32) {
        let g = self.geometry;
        let bytes = |side| g.stages * g.stage_bytes(side);
        let (tiles, len) = if self.b_at > 0 {
            (self.a, ring_bytes(g))
        } else if g.block_n() > g.block_m() {
            (self.b, bytes(Side::B))
        } else {
            (self.a, bytes(Side::A))
        };
        (k.shared_base(tiles), len)
    }
}
