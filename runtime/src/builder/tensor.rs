//! Tensor cores and asynchronous copies in the typed builder.
//!
//! A warp-level `mma` multiplies a 16×k A tile by a k×8 B tile into a 16×8 accumulator, each
//! spread over the 32 lanes as a *fragment*: a few registers per lane, in the layout the PTX ISA
//! gives for the shape and element type. Fragments here are typed by shape and element
//! ([`FragA<M16N8K16, F16>`], [`FragB<…>`], [`FragC<M16N8K16, F32>`]), so handing an m16n8k8
//! fragment to an m16n8k16 mma, or a bf16 B to an f16 A, is a Rust type error; the legal
//! combinations are the trait impls below ([`MmaInput`] per shape, [`MmaAccum`] per input).
//! [`KernelBuilder::ldmatrix`] returns whole fragments of the kind asked for (x4 for an
//! m16n8k16 A, x2 for its B, `.trans` to read B from a row-major K×N tile). `cp.async` helpers
//! issue, commit and wait copies; the pack helpers turn f32 pairs into `f16x2`/`bf16x2`.
//!
//! Register counts are checked once more by the validator, so a fragment assembled by hand with
//! the wrong number of registers is a validation error, not a panic.
//!
//! ```
//! use ptxforge_runtime::builder::*;
//! use ptxforge_runtime::Arch;
//! let mut k = KernelBuilder::new("tc", Arch::Sm80);
//! let tile = k.shared_array::<BF16>("tile", 1024);
//! let at = k.shared_base(tile);
//! let a: FragA<M16N8K16, BF16> = k.ldmatrix(at, 0);
//! let b: FragB<M16N8K16, BF16> = k.ldmatrix_trans(at, 0);
//! let c = k.frag_c_zero::<M16N8K16, BF16, F32>();
//! let _d = k.mma(&a, &b, &c);
//! ModuleBuilder::new(Arch::Sm80).kernel(k).emit().unwrap();
//! ```
//!
//! A B fragment of another shape does not compile:
//!
//! ```compile_fail
//! use ptxforge_runtime::builder::*;
//! use ptxforge_runtime::Arch;
//! let mut k = KernelBuilder::new("tc", Arch::Sm80);
//! let tile = k.shared_array::<F16>("tile", 1024);
//! let at = k.shared_base(tile);
//! let a: FragA<M16N8K16, F16> = k.ldmatrix(at, 0);
//! let b: FragB<M16N8K8, F16> = k.ldmatrix_trans(at, 0);
//! let c = k.frag_c_zero::<M16N8K16, F16, F32>();
//! let _d = k.mma(&a, &b, &c);
//! ```
//!
//! Nor does a form the ISA lacks (bf16 has no m16n8k8; f16 accumulators need f16 inputs):
//!
//! ```compile_fail
//! use ptxforge_runtime::builder::*;
//! use ptxforge_runtime::Arch;
//! let mut k = KernelBuilder::new("tc", Arch::Sm80);
//! let tile = k.shared_array::<BF16>("tile", 1024);
//! let at = k.shared_base(tile);
//! let a: FragA<M16N8K8, BF16> = k.ldmatrix(at, 0);
//! ```
//!
//! ```compile_fail
//! use ptxforge_runtime::builder::*;
//! use ptxforge_runtime::Arch;
//! let mut k = KernelBuilder::new("tc", Arch::Sm80);
//! let c = k.frag_c_zero::<M16N8K16, BF16, F16>();
//! ```

mod tf32;

use std::fmt;
use std::marker::PhantomData;

use super::types::{BF16x2, F16x2, Reg, Scalar, Val, BF16, F16, F32, TF32, U16, U32, U64};
use super::KernelBuilder;
use crate::ir::{
    AddrBase, Address, AsyncCopy, CacheLevel, CvtRounding, Imm, LdmatrixCount, Mma, MmaShape, Op,
    Operand, RegClass, RegId, Rounding, Type,
};

/// A warp-level mma shape as a type.
pub trait MmaShapeKind: Copy + fmt::Debug + 'static {
    const SHAPE: MmaShape;
}

/// `m16n8k16`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct M16N8K16;
/// `m16n8k8`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct M16N8K8;

impl MmaShapeKind for M16N8K16 {
    const SHAPE: MmaShape = MmaShape::M16N8K16;
}
impl MmaShapeKind for M16N8K8 {
    const SHAPE: MmaShape = MmaShape::M16N8K8;
}

/// An element type `T` the shape multiplies.
pub trait MmaInput<T: Scalar>: MmaShapeKind {
    /// How A/B elements sit in a register (`f16x2`, `bf16x2`, `tf32`).
    type Packed: Scalar;
}

macro_rules! mma_input {
    ($($shape:ident, $elem:ident => $packed:ident;)*) => {$(
        impl MmaInput<$elem> for $shape {
            type Packed = $packed;
        }
    )*};
}

// The forms of `Mma::fragment_regs` (which also holds the register counts).
mma_input! {
    M16N8K16, F16 => F16x2;
    M16N8K16, BF16 => BF16x2;
    M16N8K8, F16 => F16x2;
    M16N8K8, TF32 => TF32;
}

/// An accumulator type for inputs `T`: f32 for every input, f16 for f16 inputs.
pub trait MmaAccum<T>: Scalar {
    /// How accumulator elements sit in a register (`f32`, or `f16x2` two to a register).
    type Packed: Scalar;
    /// Registers of a 16×8 accumulator fragment.
    const REGS: usize;
}

impl<T> MmaAccum<T> for F32 {
    type Packed = F32;
    const REGS: usize = 4;
}
impl MmaAccum<F16> for F16 {
    type Packed = F16x2;
    const REGS: usize = 2;
}

macro_rules! fragment {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        pub struct $name<S, T> {
            regs: Vec<RegId>,
            _t: PhantomData<(S, T)>,
        }

        impl<S, T> $name<S, T> {
            /// The fragment's registers, in the order the ISA numbers them.
            pub fn regs(&self) -> &[RegId] {
                &self.regs
            }

            fn from_ids(regs: Vec<RegId>) -> Self {
                Self { regs, _t: PhantomData }
            }

            fn operand(&self) -> Operand {
                Operand::Vec(self.regs.clone())
            }
        }

        impl<S, T> Clone for $name<S, T> {
            fn clone(&self) -> Self {
                Self::from_ids(self.regs.clone())
            }
        }

        impl<S, T> fmt::Debug for $name<S, T> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}{:?}", stringify!($name), self.regs)
            }
        }
    };
}

fragment!(
    /// The A (16×k, row-major) operand of an mma of shape `S` on elements `T`.
    FragA
);
fragment!(
    /// The B (k×8, column-major) operand of an mma of shape `S` on elements `T`.
    FragB
);
fragment!(
    /// A 16×8 accumulator (C and D) of shape `S` holding `T`. Lane `l` owns rows `l / 4` and
    /// `l / 4 + 8`, columns `2·(l % 4)` and `2·(l % 4) + 1`: for f32, registers 0, 1 are the
    /// first row's two columns and 2, 3 the second row's.
    FragC
);

impl<S: MmaInput<T>, T: Scalar> FragA<S, T> {
    /// An A fragment from registers of its packed type (`f16x2`, `bf16x2`, `tf32`): another
    /// type does not compile; a wrong count is a validation error at the mma.
    pub fn from_regs(regs: &[Reg<S::Packed>]) -> Self {
        Self::from_ids(regs.iter().map(|r| r.id).collect())
    }
}

impl<S: MmaInput<T>, T: Scalar> FragB<S, T> {
    /// A B fragment from registers of its packed type (see [`FragA::from_regs`]).
    pub fn from_regs(regs: &[Reg<S::Packed>]) -> Self {
        Self::from_ids(regs.iter().map(|r| r.id).collect())
    }
}

impl<S> FragC<S, F32> {
    /// The four f32 accumulator registers.
    pub fn f32_regs(&self) -> Vec<Reg<F32>> {
        self.regs
            .iter()
            .map(|&id| Reg {
                id,
                _t: PhantomData,
            })
            .collect()
    }
}

impl<S> FragC<S, F16> {
    /// The two `f16x2` accumulator registers (low half: the even column).
    pub fn packed_regs(&self) -> Vec<Reg<F16x2>> {
        self.regs
            .iter()
            .map(|&id| Reg {
                id,
                _t: PhantomData,
            })
            .collect()
    }
}

/// Fragments `ldmatrix` can produce: 16-bit elements, one 8×8 matrix per register.
pub trait LdmatrixFragment: Sized {
    const COUNT: LdmatrixCount;
    #[doc(hidden)]
    fn from_ldmatrix(regs: Vec<RegId>) -> Self;
}

/// The 16-bit element types (`f16`, `bf16`) `ldmatrix` moves.
pub trait PackedHalf: Scalar {
    /// The packed pair type.
    type Pair: Scalar;
}
impl PackedHalf for F16 {
    type Pair = F16x2;
}
impl PackedHalf for BF16 {
    type Pair = BF16x2;
}

macro_rules! ldmatrix_fragment {
    ($frag:ident, $shape:ty, $count:ident, $elem:ident) => {
        impl<$elem: PackedHalf> LdmatrixFragment for $frag<$shape, $elem>
        where
            $shape: MmaInput<$elem>,
        {
            const COUNT: LdmatrixCount = LdmatrixCount::$count;
            fn from_ldmatrix(regs: Vec<RegId>) -> Self {
                Self::from_ids(regs)
            }
        }
    };
}

ldmatrix_fragment!(FragA, M16N8K16, X4, T);
ldmatrix_fragment!(FragB, M16N8K16, X2, T);
ldmatrix_fragment!(FragA, M16N8K8, X2, T);
ldmatrix_fragment!(FragB, M16N8K8, X1, T);

impl KernelBuilder {
    fn alloc_vec(&mut self, class: RegClass, n: usize) -> Vec<RegId> {
        (0..n).map(|_| self.alloc(class)).collect()
    }

    // ---- tensor cores -----------------------------------------------------------------

    /// A zeroed accumulator fragment.
    pub fn frag_c_zero<S: MmaShapeKind, In, Acc: MmaAccum<In>>(&mut self) -> FragC<S, Acc> {
        let class = Acc::Packed::TYPE.class();
        let regs = self.alloc_vec(class, Acc::REGS);
        let (ty, zero) = match class {
            RegClass::F32 => (Type::F32, Imm::F32(0.0)),
            _ => (Type::B32, Imm::Int(0)),
        };
        for &r in &regs {
            self.push(Op::Mov(ty), vec![Operand::Reg(r), Operand::Imm(zero)]);
        }
        FragC::from_ids(regs)
    }

    /// Accumulator registers with no value yet: the `d` of an mma whose `c` is another fragment
    /// (a shared zero fragment, say), which saves the moves of [`Self::frag_c_zero`].
    pub fn frag_c_uninit<S: MmaShapeKind, In, Acc: MmaAccum<In>>(&mut self) -> FragC<S, Acc> {
        FragC::from_ids(self.alloc_vec(Acc::Packed::TYPE.class(), Acc::REGS))
    }

    /// `d = a · b + c` on the tensor cores (one `mma.sync.aligned` for the whole warp): returns
    /// a new accumulator.
    pub fn mma<S: MmaInput<T>, T: Scalar, Acc: MmaAccum<T>>(
        &mut self,
        a: &FragA<S, T>,
        b: &FragB<S, T>,
        c: &FragC<S, Acc>,
    ) -> FragC<S, Acc> {
        let d = FragC::from_ids(self.alloc_vec(Acc::Packed::TYPE.class(), Acc::REGS));
        self.mma_into(&d, a, b, c);
        d
    }

    /// `d = a · b + c` into an existing accumulator (`d` may be `c`: accumulate in place).
    pub fn mma_into<S: MmaInput<T>, T: Scalar, Acc: MmaAccum<T>>(
        &mut self,
        d: &FragC<S, Acc>,
        a: &FragA<S, T>,
        b: &FragB<S, T>,
        c: &FragC<S, Acc>,
    ) {
        let form = Mma {
            shape: S::SHAPE,
            d: Acc::TYPE,
            a: T::TYPE,
            b: T::TYPE,
            c: Acc::TYPE,
        };
        self.push(
            Op::Mma(form),
            vec![d.operand(), a.operand(), b.operand(), c.operand()],
        );
    }

    /// `ldmatrix.sync.aligned.m8n8.xN.shared.b16`: a whole fragment from shared memory. Lane
    /// `l` supplies the address of row `l % 8` of matrix `l / 8` (lanes past the matrix count
    /// are ignored); each matrix lands one register per lane, lane `l` holding row `l / 4`,
    /// elements `2·(l % 4)` and `+1`. For an m16n8k16 A tile at `[row][col]` (row-major), lane
    /// `l` points at `[l % 16][8 · (l / 16)]`.
    pub fn ldmatrix<F: LdmatrixFragment>(&mut self, addr: Reg<U32>, offset: i32) -> F {
        F::from_ldmatrix(self.ldmatrix_raw(F::COUNT, false, addr, offset))
    }

    /// `ldmatrix … .trans`: each 8×8 matrix transposed on the way, which turns row-major K×N
    /// rows of B into the column-major fragment the mma wants. Lane `l` points at k-row
    /// `l % 16` (m16n8k16) or `l % 8` (m16n8k8) of the tile, at the fragment's first column.
    pub fn ldmatrix_trans<F: LdmatrixFragment>(&mut self, addr: Reg<U32>, offset: i32) -> F {
        F::from_ldmatrix(self.ldmatrix_raw(F::COUNT, true, addr, offset))
    }

    /// `ldmatrix.x4.trans` as two m16n8k16 B fragments side by side (columns `n0..n0+8` and
    /// `n0+8..n0+16`): lane `l` points at k-row `l % 16`, column `n0 + 8 · (l / 16)`.
    pub fn ldmatrix_b_pair_trans<T: PackedHalf>(
        &mut self,
        addr: Reg<U32>,
        offset: i32,
    ) -> (FragB<M16N8K16, T>, FragB<M16N8K16, T>)
    where
        M16N8K16: MmaInput<T>,
    {
        self.ldmatrix_b_pair_raw(true, addr, offset)
    }

    /// `ldmatrix.x4` (no transpose) as two m16n8k16 B fragments side by side, read from an
    /// N×K tile stored n-major (each row `n` holds its K elements contiguously, as conv
    /// weight rows do): lane `l` points at row `n0 + 8 · (l / 16) + l % 8`, column
    /// `k0 + 8 · ((l / 8) % 2)`. Matrix `j` lands in register `j`; each lane then holds row
    /// `n = l / 4`, k pair `2·(l % 4)`, which is exactly the B fragment layout.
    pub fn ldmatrix_b_pair<T: PackedHalf>(
        &mut self,
        addr: Reg<U32>,
        offset: i32,
    ) -> (FragB<M16N8K16, T>, FragB<M16N8K16, T>)
    where
        M16N8K16: MmaInput<T>,
    {
        self.ldmatrix_b_pair_raw(false, addr, offset)
    }

    fn ldmatrix_b_pair_raw<T: PackedHalf>(
        &mut self,
        trans: bool,
        addr: Reg<U32>,
        offset: i32,
    ) -> (FragB<M16N8K16, T>, FragB<M16N8K16, T>)
    where
        M16N8K16: MmaInput<T>,
    {
        let regs = self.ldmatrix_raw(LdmatrixCount::X4, trans, addr, offset);
        (
            FragB::from_ids(regs[..2].to_vec()),
            FragB::from_ids(regs[2..].to_vec()),
        )
    }

    fn ldmatrix_raw(
        &mut self,
        count: LdmatrixCount,
        trans: bool,
        addr: Reg<U32>,
        offset: i32,
    ) -> Vec<RegId> {
        let regs = self.alloc_vec(RegClass::B32, count.regs());
        self.push(
            Op::Ldmatrix { count, trans },
            vec![Operand::Vec(regs.clone()), shared_addr(addr, offset)],
        );
        regs
    }

    // ---- asynchronous copies ------------------------------------------------------------

    /// `cp.async.{ca,cg}.shared.global [dst], [src], bytes`: starts copying `bytes` (4, 8 or
    /// 16; `.cg` only 16) from global `src` to shared `dst`; the data lands when a later
    /// [`Self::cp_async_wait_group`] covers this copy's group.
    pub fn cp_async(&mut self, cache: CacheLevel, dst: Reg<U32>, src: Reg<U64>, bytes: u32) {
        self.cp_async_at(cache, dst, 0, src, bytes);
    }

    /// [`Self::cp_async`] to `[dst+offset]`.
    pub fn cp_async_at(
        &mut self,
        cache: CacheLevel,
        dst: Reg<U32>,
        offset: i32,
        src: Reg<U64>,
        bytes: u32,
    ) {
        self.push_cp_async(cache, (dst, offset), src, bytes, None);
    }

    /// `cp.async … bytes, src_bytes`: copies only the first `src_bytes` of the source and
    /// zero-fills the rest of the `bytes` at `dst` (0 reads nothing: a fully zero chunk, for
    /// tiles that hang over the matrix edge).
    pub fn cp_async_zfill(
        &mut self,
        cache: CacheLevel,
        dst: Reg<U32>,
        src: Reg<U64>,
        bytes: u32,
        src_bytes: impl Into<Val<U32>>,
    ) {
        self.cp_async_zfill_at(cache, dst, 0, src, bytes, src_bytes);
    }

    /// [`Self::cp_async_zfill`] to `[dst+offset]`.
    pub fn cp_async_zfill_at(
        &mut self,
        cache: CacheLevel,
        dst: Reg<U32>,
        offset: i32,
        src: Reg<U64>,
        bytes: u32,
        src_bytes: impl Into<Val<U32>>,
    ) {
        let src_bytes = src_bytes.into().operand();
        self.push_cp_async(cache, (dst, offset), src, bytes, Some(src_bytes));
    }

    /// One `cp.async` to `[dst+offset]`, zero-filling past `src_bytes` when given.
    fn push_cp_async(
        &mut self,
        cache: CacheLevel,
        (dst, offset): (Reg<U32>, i32),
        src: Reg<U64>,
        bytes: u32,
        src_bytes: Option<Operand>,
    ) {
        let zero_fill = src_bytes.is_some();
        let mut args = vec![
            shared_addr(dst, offset),
            global_addr(src),
            Operand::Imm(Imm::Int(i64::from(bytes))),
        ];
        args.extend(src_bytes);
        self.push(Op::Async(AsyncCopy::Copy { cache, zero_fill }), args);
    }

    /// `cp.async.commit_group`: this thread's copies since the last commit form one group.
    pub fn cp_async_commit(&mut self) {
        self.push(Op::Async(AsyncCopy::CommitGroup), vec![]);
    }

    /// `cp.async.wait_group n`: waits until at most `n` of this thread's groups are pending.
    /// Other threads' copies need a `bar.sync` after it before they are read.
    pub fn cp_async_wait_group(&mut self, n: u32) {
        self.push(
            Op::Async(AsyncCopy::WaitGroup),
            vec![Operand::Imm(Imm::Int(i64::from(n)))],
        );
    }

    /// `cp.async.wait_all`.
    pub fn cp_async_wait_all(&mut self) {
        self.push(Op::Async(AsyncCopy::WaitAll), vec![]);
    }

    // ---- packing and conversions ----------------------------------------------------

    /// `cvt.rn.{f16x2,bf16x2}.f32 d, hi, lo`: two f32 rounded to nearest even and packed,
    /// `lo` in bits 0..16 (the lower column or k index of a fragment element pair).
    pub fn pack_f32_pair<H: PackedHalf>(&mut self, lo: Reg<F32>, hi: Reg<F32>) -> Reg<H::Pair> {
        let d = self.reg::<H::Pair>();
        self.push(
            Op::Cvt {
                dst: H::Pair::TYPE,
                src: Type::F32,
                rnd: Some(CvtRounding::Float(Rounding::Rn)),
                ftz: false,
                sat: false,
            },
            vec![Operand::Reg(d.id), Operand::Reg(hi.id), Operand::Reg(lo.id)],
        );
        d
    }

    /// `mov.b32 d, {lo, hi}`: packs two 16-bit values.
    pub fn pack_halves<H: PackedHalf>(&mut self, lo: Reg<H>, hi: Reg<H>) -> Reg<H::Pair> {
        self.pack_b32(lo, hi)
    }

    /// `mov.b32 d, {lo, hi}`: two raw 16-bit words as one 32-bit word (`lo` in bits 0..16),
    /// e.g. elements' bits gathered for one vector store.
    pub fn pack_u16_pair(&mut self, lo: Reg<U16>, hi: Reg<U16>) -> Reg<U32> {
        self.pack_b32(lo, hi)
    }

    /// `mov.b32 d, {lo, hi}` for 16-bit `lo`, `hi` and 32-bit `D` (the validator checks the
    /// classes).
    fn pack_b32<S, D: Scalar>(&mut self, lo: Reg<S>, hi: Reg<S>) -> Reg<D> {
        let d = self.reg::<D>();
        self.push(
            Op::Pack(Type::B32),
            vec![Operand::Reg(d.id), Operand::Vec(vec![lo.id, hi.id])],
        );
        d
    }

    /// `mov.b32 {lo, hi}, a`: splits a packed pair.
    pub fn unpack_halves<H: PackedHalf>(&mut self, a: Reg<H::Pair>) -> (Reg<H>, Reg<H>) {
        let (lo, hi) = (self.reg::<H>(), self.reg::<H>());
        self.push(
            Op::Unpack(Type::B32),
            vec![Operand::Vec(vec![lo.id, hi.id]), Operand::Reg(a.id)],
        );
        (lo, hi)
    }

    /// The 32 bits of a packed pair as a `u32` (`mov.b32`), e.g. for [`Self::prmt`].
    pub fn pair_bits<H: PackedHalf>(&mut self, a: Reg<H::Pair>) -> Reg<U32> {
        let d = self.reg::<U32>();
        self.push(
            Op::Mov(Type::B32),
            vec![Operand::Reg(d.id), Operand::Reg(a.id)],
        );
        d
    }

    /// `cvt.rna.tf32.f32`: rounds to tf32 (10 mantissa bits, ties away from zero).
    pub fn to_tf32(&mut self, a: Reg<F32>) -> Reg<TF32> {
        self.cvt(a, Some(CvtRounding::NearestAway))
    }

    /// `prmt.b32 d, a, b, selector`: byte `i` of `d` is byte `selector[4i..4i+4]` of the
    /// eight bytes `{b, a}` (a is bytes 0–3).
    pub fn prmt(
        &mut self,
        a: Reg<U32>,
        b: impl Into<Val<U32>>,
        selector: impl Into<Val<U32>>,
    ) -> Reg<U32> {
        self.u32_op3(Op::Prmt, a, b.into(), selector.into())
    }
}

fn shared_addr(addr: Reg<U32>, offset: i32) -> Operand {
    Operand::Addr(Address {
        base: AddrBase::Reg(addr.id),
        offset,
    })
}

fn global_addr(addr: Reg<U64>) -> Operand {
    Operand::Addr(Address {
        base: AddrBase::Reg(addr.id),
        offset: 0,
    })
}
