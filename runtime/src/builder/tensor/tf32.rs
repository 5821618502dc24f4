//! tf32 fragments from f32 tiles in shared memory.
//!
//! `ldmatrix` moves 16-bit elements, but an 8 × 8 b16 matrix is bit for bit an 8 × 4 matrix
//! of 32-bit elements: lane `l` receives row `l / 4`, b16 elements `2·(l % 4)` and `+1`, that
//! is 32-bit element `l % 4`. That is the tf32 `m16n8k8` fragment layout (PTX ISA, "Matrix
//! Fragments for mma.m16n8k8", `.tf32`): A register `i` at row `g + 8·(i % 2)`, column
//! `t + 4·(i / 2)`; B register `i` at k-row `t + 4·i`, column `g` (`g = l / 4`, `t = l % 4`).
//! So untransposed `ldmatrix` reads tf32 fragments from row-major A and n-major B tiles of f32;
//! each register is then rounded with `cvt.rna.tf32.f32`: the ISA leaves the layout of tf32
//! data inside its `.b32` implementation defined and `cvt` is the defined way to produce it
//! (see `templates/tf32.rs`), and rounding bounds the per-operand error by 2⁻¹¹ relative.

use std::marker::PhantomData;

use super::{FragA, FragB, KernelBuilder, LdmatrixCount, Reg, RegId, F32, M16N8K8, TF32, U32};

impl KernelBuilder {
    /// `ldmatrix.x4` of an f32 A tile, rounded to tf32: lane `l` points at row `l % 16`, column
    /// `4 · (l / 16)` of the 16 × 8 block (row-major).
    pub fn ldmatrix_tf32_a(&mut self, addr: Reg<U32>, offset: i32) -> FragA<M16N8K8, TF32> {
        let raw = self.ldmatrix_raw(LdmatrixCount::X4, false, addr, offset);
        FragA::from_ids(self.round_to_tf32(&raw))
    }

    /// [`Self::ldmatrix_tf32_a`] of a tile whose elements already hold tf32 values (each was
    /// produced by `cvt.rna.tf32.f32` before it was stored to shared memory), so the loaded
    /// registers are tf32 data as they are and are not rounded again.
    pub fn ldmatrix_tf32_a_stored(&mut self, addr: Reg<U32>, offset: i32) -> FragA<M16N8K8, TF32> {
        FragA::from_ids(self.ldmatrix_raw(LdmatrixCount::X4, false, addr, offset))
    }

    /// `ldmatrix.x4` of an n-major f32 B tile (row `n` holds its K elements contiguously) as
    /// two tf32 B fragments, columns `n0..n0+8` and `n0+8..n0+16`: lane `l` points at row
    /// `n0 + 8 · (l / 16) + l % 8`, column `k0 + 4 · ((l / 8) % 2)`.
    pub fn ldmatrix_tf32_b_pair(
        &mut self,
        addr: Reg<U32>,
        offset: i32,
    ) -> (FragB<M16N8K8, TF32>, FragB<M16N8K8, TF32>) {
        let raw = self.ldmatrix_raw(LdmatrixCount::X4, false, addr, offset);
        b_pair(self.round_to_tf32(&raw))
    }

    /// [`Self::ldmatrix_tf32_b_pair`] of a tile whose elements already hold tf32 values (see
    /// [`Self::ldmatrix_tf32_a_stored`]).
    pub fn ldmatrix_tf32_b_pair_stored(
        &mut self,
        addr: Reg<U32>,
        offset: i32,
    ) -> (FragB<M16N8K8, TF32>, FragB<M16N8K8, TF32>) {
        b_pair(self.ldmatrix_raw(LdmatrixCount::X4, false, addr, offset))
    }

    /// `cvt.rna.tf32.f32` of each 32-bit register (its bits read as an f32).
    fn round_to_tf32(&mut self, raw: &[RegId]) -> Vec<RegId> {
        raw.iter()
            .map(|&id| {
                let bits = Reg::<F32> {
                    id,
                    _t: PhantomData,
                };
                self.to_tf32(bits).id
            })
            .collect()
    }
}

/// The four registers of an x4 load as two B fragments.
fn b_pair(regs: Vec<RegId>) -> (FragB<M16N8K8, TF32>, FragB<M16N8K8, TF32>) {
    (
        FragB::from_ids(regs[..2].to_vec()),
        FragB::from_ids(regs[2..].to_vec()),
    )
}
