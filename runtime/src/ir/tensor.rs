//! Tensor-core and asynchronous-copy instruction families: the data half of their table entries.
//!
//! [`Mma`] describes one warp-level `mma.sync` form by shape and the four element types
//! (D, A, B, C); [`Mma::fragment_regs`] is the single list of forms ptxforge supports, with the
//! register count of every fragment. [`LdmatrixCount`] is the `.x1/.x2/.x4` of `ldmatrix`.
//! [`AsyncCopy`] is the family of copies that complete later than they are issued and of the
//! instructions that wait for them.
//!
//! Room for sm_90a: `wgmma.mma_async` is another warp*group* matrix op whose A comes from
//! registers or a shared-memory descriptor and B always from a descriptor; it becomes a sibling
//! `Op::Wgmma(Wgmma { shape: m64nNk16, .. })` reusing [`MmaShape`]-style shapes and the same
//! element types, with `wgmma.fence/commit_group/wait_group` as three more [`AsyncCopy`]-like
//! variants (they are group-based exactly like `cp.async`). TMA (`cp.async.bulk.tensor`) and
//! `mbarrier` are more variants of [`AsyncCopy`] (a bulk copy completing on an mbarrier, and the
//! barrier's init/arrive/test_wait), so none of them reshapes [`crate::ir::Op`] or the operand
//! model: each is a table entry with its own signature and requirement.

use super::types::Type;

/// The `mMnNkK` shape of a warp-level `mma.sync`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MmaShape {
    /// 16×8 output, k = 8 (f16 on sm_75, tf32 on sm_80).
    M16N8K8,
    /// 16×8 output, k = 16 (f16/bf16, sm_80).
    M16N8K16,
}

impl MmaShape {
    pub const fn name(self) -> &'static str {
        match self {
            MmaShape::M16N8K8 => "m16n8k8",
            MmaShape::M16N8K16 => "m16n8k16",
        }
    }

    /// `(m, n, k)`.
    pub const fn dims(self) -> (u32, u32, u32) {
        match self {
            MmaShape::M16N8K8 => (16, 8, 8),
            MmaShape::M16N8K16 => (16, 8, 16),
        }
    }
}

/// `mma.sync.aligned.shape.row.col.dtype.atype.btype.ctype` (A row-major, B column-major: the
/// only layouts these shapes have).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Mma {
    pub shape: MmaShape,
    pub d: Type,
    pub a: Type,
    pub b: Type,
    pub c: Type,
}

/// Registers per fragment of one `mma` form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FragmentRegs {
    pub a: usize,
    pub b: usize,
    pub c: usize,
    pub d: usize,
}

/// What an `mma` form needs of the target: (needs the sm_80 shapes, PTX minor of 6.x/7.x).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MmaGeneration {
    /// `m16n8k8` f16 → f32: Turing (sm_75, PTX 6.5).
    Turing,
    /// bf16, tf32 and `m16n8k16`: Ampere (sm_80, PTX 7.0).
    Ampere,
}

impl Mma {
    /// The mnemonic, e.g. `mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32`.
    pub fn mnemonic(&self) -> String {
        format!(
            "mma.sync.aligned.{}.row.col.{}.{}.{}.{}",
            self.shape.name(),
            self.d,
            self.a,
            self.b,
            self.c
        )
    }

    /// The register counts of the A, B, C and D fragments, or `None` for a form ptxforge does
    /// not support (PTX ISA "Matrix fragments for mma.m16n8k8 / mma.m16n8k16"). Packed 16-bit
    /// inputs travel two to a `.b32` register; tf32 one per `.b32`; f32 accumulators one per
    /// `.f32`; f16 accumulators two per `.b32`.
    pub fn fragment_regs(&self) -> Option<FragmentRegs> {
        use MmaShape::*;
        use Type::*;
        let acc = |ty: Type| match ty {
            F32 => Some(4),
            F16 => Some(2),
            _ => None,
        };
        if self.c != self.d {
            return None;
        }
        let cd = acc(self.c)?;
        let (a, b) = match (self.shape, self.a, self.b) {
            (M16N8K16, F16, F16) | (M16N8K16, BF16, BF16) => (4, 2),
            (M16N8K8, F16, F16) => (2, 1),
            (M16N8K8, TF32, TF32) => (4, 2),
            _ => return None,
        };
        let f16_acc_ok = self.c == F32 || self.a == F16;
        f16_acc_ok.then_some(FragmentRegs { a, b, c: cd, d: cd })
    }

    /// Which generation introduced the form.
    pub fn generation(&self) -> MmaGeneration {
        if self.shape == MmaShape::M16N8K8 && self.a == Type::F16 {
            MmaGeneration::Turing
        } else {
            MmaGeneration::Ampere
        }
    }

    /// The register type of one A/B element register (`.f16x2` / `.bf16x2` / `.tf32`).
    pub fn input_reg_type(ty: Type) -> Type {
        match ty {
            Type::F16 => Type::F16x2,
            Type::BF16 => Type::BF16x2,
            other => other,
        }
    }

    /// The register type of one C/D register.
    pub fn acc_reg_type(ty: Type) -> Type {
        match ty {
            Type::F16 => Type::F16x2,
            other => other,
        }
    }
}

/// How many 8×8 b16 matrices one `ldmatrix` loads (`.x1`, `.x2`, `.x4`): one `.b32` register each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LdmatrixCount {
    X1,
    X2,
    X4,
}

impl LdmatrixCount {
    pub const fn name(self) -> &'static str {
        match self {
            LdmatrixCount::X1 => "x1",
            LdmatrixCount::X2 => "x2",
            LdmatrixCount::X4 => "x4",
        }
    }

    pub const fn regs(self) -> usize {
        match self {
            LdmatrixCount::X1 => 1,
            LdmatrixCount::X2 => 2,
            LdmatrixCount::X4 => 4,
        }
    }
}

/// The cache policy of `cp.async`: `.ca` (L1 and L2) or `.cg` (L2 only, 16-byte copies only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CacheLevel {
    Ca,
    Cg,
}

impl CacheLevel {
    pub const fn name(self) -> &'static str {
        match self {
            CacheLevel::Ca => "ca",
            CacheLevel::Cg => "cg",
        }
    }
}

/// Copies that complete asynchronously, and the instructions that wait for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AsyncCopy {
    /// `cp.async.{ca,cg}.shared.global [dst], [src], cp-size{, src-size}`; `zero_fill` says
    /// whether the `src-size` operand is present (bytes past it are written as zeros).
    Copy { cache: CacheLevel, zero_fill: bool },
    /// `cp.async.commit_group`: closes the group of this thread's copies issued since the last.
    CommitGroup,
    /// `cp.async.wait_group N`: waits until at most N of this thread's groups are pending.
    WaitGroup,
    /// `cp.async.wait_all`: waits for every copy of this thread.
    WaitAll,
}

impl AsyncCopy {
    pub fn mnemonic(&self) -> String {
        match self {
            AsyncCopy::Copy { cache, .. } => format!("cp.async.{}.shared.global", cache.name()),
            AsyncCopy::CommitGroup => "cp.async.commit_group".into(),
            AsyncCopy::WaitGroup => "cp.async.wait_group".into(),
            AsyncCopy::WaitAll => "cp.async.wait_all".into(),
        }
    }
}

/// The byte counts `cp.async` may copy.
pub const CP_ASYNC_SIZES: [i64; 3] = [4, 8, 16];
