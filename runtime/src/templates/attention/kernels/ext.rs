//! Builder helpers the attention kernels need that the shared builder does not have: vector
//! accesses of any width and element type, 64-bit shuffles, and conversions between the storage
//! type and the accumulator type. Kept here so the shared builder stays untouched.

use std::marker::PhantomData;

use crate::builder::{Float, KernelBuilder, Reg, Scalar, Val, F32, F64, U32, U64};
use crate::ir::{
    AddrBase, Address, Imm, MathFn, Op, Operand, Precision, Rounding, Space, Type, VecWidth,
};

/// An immediate of the accumulator type `A` (f32 or f64).
pub(super) fn acc_imm<A: Float>(v: f64) -> Val<A> {
    match A::TYPE {
        Type::F64 => Val::Imm(Imm::F64(v), PhantomData),
        _ => Val::Imm(Imm::F32(v as f32), PhantomData),
    }
}

/// The `VecWidth` of `n` elements.
fn width(n: usize) -> VecWidth {
    match n {
        1 => VecWidth::V1,
        2 => VecWidth::V2,
        4 => VecWidth::V4,
        other => panic!("no vector access of {other} elements"),
    }
}

fn addr_operand(base: crate::ir::RegId, offset: i32) -> Operand {
    Operand::Addr(Address {
        base: AddrBase::Reg(base),
        offset,
    })
}

/// Attention-specific builder operations.
pub(super) trait AttentionBuilderExt {
    /// `ld.space{.nc}.vN.T` of `n ∈ {1, 2, 4}` consecutive elements at `[addr + offset]`.
    fn ld_vec<T: Scalar>(&mut self, space: Space, addr: Operand, n: usize, nc: bool)
        -> Vec<Reg<T>>;
    /// `st.space.vN.T` of `values` at `addr`.
    fn st_vec<T: Scalar>(&mut self, space: Space, addr: Operand, values: &[Reg<T>]);
    /// `n` consecutive shared elements at `[addr + offset]`.
    fn ld_shared_n<T: Scalar>(&mut self, addr: Reg<U32>, offset: i32, n: usize) -> Vec<Reg<T>>;
    /// `n` consecutive read-only global elements at `[addr + offset]` (`ld.global.nc`).
    fn ld_global_nc_n<T: Scalar>(&mut self, addr: Reg<U64>, offset: i32, n: usize) -> Vec<Reg<T>>;
    /// Stores `values` to consecutive global elements at `[addr + offset]`.
    fn st_global_n<T: Scalar>(&mut self, addr: Reg<U64>, offset: i32, values: &[Reg<T>]);
    /// Stores `values` to consecutive shared elements at `[addr + offset]`.
    fn st_shared_n<T: Scalar>(&mut self, addr: Reg<U32>, offset: i32, values: &[Reg<T>]);
    /// `shfl.sync.bfly` of a 32- or 64-bit value across the full warp (64-bit values move as
    /// two 32-bit halves).
    fn shfl_xor_wide<A: Float>(&mut self, v: Reg<A>, lane_mask: u32) -> Reg<A>;
    /// Converts a storage value to the accumulator type (exact).
    fn widen<T: Float, A: Float>(&mut self, v: Reg<T>) -> Reg<A>;
    /// Rounds an accumulator value to the storage type (nearest even).
    fn narrow<A: Float, T: Float>(&mut self, v: Reg<A>) -> Reg<T>;
    /// The exponential the kernel's scores are scaled for: `2^x` (`ex2.approx.f32`) for f32
    /// accumulators (scores carry a `log2 e` factor), `e^x` (accurate software exp) for f64.
    fn score_exp<A: Float>(&mut self, x: Reg<A>) -> Reg<A>;
    /// `1 / x`, IEEE round-to-nearest.
    fn recip<A: Float>(&mut self, x: Reg<A>) -> Reg<A>;
}

impl AttentionBuilderExt for KernelBuilder {
    fn ld_vec<T: Scalar>(
        &mut self,
        space: Space,
        addr: Operand,
        n: usize,
        nc: bool,
    ) -> Vec<Reg<T>> {
        let regs: Vec<Reg<T>> = (0..n).map(|_| self.reg::<T>()).collect();
        let dst = if n == 1 {
            Operand::Reg(regs[0].id())
        } else {
            Operand::Vec(regs.iter().map(|r| r.id()).collect())
        };
        self.push(
            Op::Ld {
                space,
                ty: T::MOVE_TYPE,
                vec: width(n),
                nc,
            },
            vec![dst, addr],
        );
        regs
    }

    fn st_vec<T: Scalar>(&mut self, space: Space, addr: Operand, values: &[Reg<T>]) {
        let src = if values.len() == 1 {
            Operand::Reg(values[0].id())
        } else {
            Operand::Vec(values.iter().map(|r| r.id()).collect())
        };
        self.push(
            Op::St {
                space,
                ty: T::MOVE_TYPE,
                vec: width(values.len()),
            },
            vec![addr, src],
        );
    }

    fn ld_shared_n<T: Scalar>(&mut self, addr: Reg<U32>, offset: i32, n: usize) -> Vec<Reg<T>> {
        self.ld_vec(Space::Shared, addr_operand(addr.id(), offset), n, false)
    }

    fn ld_global_nc_n<T: Scalar>(&mut self, addr: Reg<U64>, offset: i32, n: usize) -> Vec<Reg<T>> {
        self.ld_vec(Space::Global, addr_operand(addr.id(), offset), n, true)
    }

    fn st_global_n<T: Scalar>(&mut self, addr: Reg<U64>, offset: i32, values: &[Reg<T>]) {
        self.st_vec(Space::Global, addr_operand(addr.id(), offset), values);
    }

    fn st_shared_n<T: Scalar>(&mut self, addr: Reg<U32>, offset: i32, values: &[Reg<T>]) {
        self.st_vec(Space::Shared, addr_operand(addr.id(), offset), values);
    }

    fn shfl_xor_wide<A: Float>(&mut self, v: Reg<A>, lane_mask: u32) -> Reg<A> {
        match A::TYPE {
            Type::F64 => {
                let (lo, hi) = (self.reg::<U32>(), self.reg::<U32>());
                self.push(
                    Op::Unpack(Type::B64),
                    vec![Operand::Vec(vec![lo.id(), hi.id()]), Operand::Reg(v.id())],
                );
                let lo = self.shfl_xor(lo, lane_mask);
                let hi = self.shfl_xor(hi, lane_mask);
                let d = self.reg::<A>();
                self.push(
                    Op::Pack(Type::B64),
                    vec![Operand::Reg(d.id()), Operand::Vec(vec![lo.id(), hi.id()])],
                );
                d
            }
            _ => self.shfl_xor(v, lane_mask),
        }
    }

    fn widen<T: Float, A: Float>(&mut self, v: Reg<T>) -> Reg<A> {
        match (T::TYPE, A::TYPE) {
            (t, a) if t == a => v.retype(),
            (_, Type::F32) => self.to_f32(v).retype(),
            (t, a) => panic!("no widening from .{t} to .{a}"),
        }
    }

    fn narrow<A: Float, T: Float>(&mut self, v: Reg<A>) -> Reg<T> {
        match (A::TYPE, T::TYPE) {
            (a, t) if a == t => v.retype(),
            (Type::F32, _) => self.from_f32::<T>(v.retype()),
            (a, t) => panic!("no narrowing from .{a} to .{t}"),
        }
    }

    fn score_exp<A: Float>(&mut self, x: Reg<A>) -> Reg<A> {
        match A::TYPE {
            Type::F64 => self.exp_f64(x.retype::<F64>()).retype(),
            _ => self.ex2_approx(x.retype::<F32>()).retype(),
        }
    }

    fn recip<A: Float>(&mut self, x: Reg<A>) -> Reg<A> {
        self.math(MathFn::Rcp, x, Precision::Rounded(Rounding::Rn))
    }
}
