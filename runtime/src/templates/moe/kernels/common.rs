//! Builder helpers the MoE kernels share: the storage → compute type mapping (f16/bf16/f32
//! compute in f32, f64 in f64), constants and warp collectives in the compute type.
//!
//! These live here rather than in `builder/` because only this family needs them; they are thin
//! wrappers over public builder calls (plus `mov.b64` pack/unpack for 64-bit shuffles).

use crate::builder::{Float, KernelBuilder, Reg, BF16, F16, F32, F64, U32};
use crate::ir::{Op, Operand, Type};

/// A storage element type of the MoE tensors and the type it is computed in.
pub(crate) trait MoeElem: Float {
    /// The accumulation / compute type: f32 for f16, bf16 and f32; f64 for f64.
    type Acc: Float;
}

impl MoeElem for F16 {
    type Acc = F32;
}
impl MoeElem for BF16 {
    type Acc = F32;
}
impl MoeElem for F32 {
    type Acc = F32;
}
impl MoeElem for F64 {
    type Acc = F64;
}

/// Whether the compute type is f64.
fn acc_is_f64<A: Float>() -> bool {
    A::TYPE == Type::F64
}

/// Widens a loaded storage value to its compute type (exact).
pub(crate) fn widen<T: MoeElem>(k: &mut KernelBuilder, v: Reg<T>) -> Reg<T::Acc> {
    if acc_is_f64::<T::Acc>() {
        v.retype()
    } else {
        k.to_f32(v).retype()
    }
}

/// Narrows a compute-type value to storage, rounding to nearest even.
pub(crate) fn narrow<T: MoeElem>(k: &mut KernelBuilder, v: Reg<T::Acc>) -> Reg<T> {
    if acc_is_f64::<T::Acc>() {
        v.retype()
    } else {
        k.from_f32::<T>(v.retype())
    }
}

/// A compute-type register holding the constant `v` (rounded to f32 for f32 compute).
pub(crate) fn constant<A: Float>(k: &mut KernelBuilder, v: f64) -> Reg<A> {
    if acc_is_f64::<A>() {
        k.var::<F64>(v).retype()
    } else {
        k.var::<F32>(v as f32).retype()
    }
}

/// `shfl.sync.bfly` of a compute-type value: one 32-bit shuffle for f32, two for f64 (the
/// halves of `mov.b64 {lo, hi}`).
pub(crate) fn shfl_xor_acc<A: Float>(k: &mut KernelBuilder, v: Reg<A>, lane_mask: u32) -> Reg<A> {
    if !acc_is_f64::<A>() {
        return k.shfl_xor(v.retype::<F32>(), lane_mask).retype();
    }
    let (lo, hi) = (k.reg::<U32>(), k.reg::<U32>());
    k.push(
        Op::Unpack(Type::B64),
        vec![Operand::Vec(vec![lo.id, hi.id]), Operand::Reg(v.id)],
    );
    let lo = k.shfl_xor(lo, lane_mask);
    let hi = k.shfl_xor(hi, lane_mask);
    let d = k.reg::<A>();
    k.push(
        Op::Pack(Type::B64),
        vec![Operand::Reg(d.id), Operand::Vec(vec![lo.id, hi.id])],
    );
    d
}

/// `shfl.sync.bfly` of a u32.
pub(crate) fn shfl_xor_u32(k: &mut KernelBuilder, v: Reg<U32>, lane_mask: u32) -> Reg<U32> {
    k.shfl_xor(v, lane_mask)
}

/// Butterfly sum across the full warp in a fixed order; every lane gets the same total.
pub(crate) fn warp_sum<A: Float>(k: &mut KernelBuilder, v: Reg<A>) -> Reg<A> {
    let mut acc = v;
    for shift in [16, 8, 4, 2, 1] {
        let other = shfl_xor_acc(k, acc, shift);
        acc = k.add(acc, other);
    }
    acc
}

/// `e^x` in the compute type (`ex2.approx` for f32, the accurate software `exp` for f64).
pub(crate) fn exp<A: Float>(k: &mut KernelBuilder, x: Reg<A>) -> Reg<A> {
    k.exp(x)
}

/// `e^(−x)` in the compute type: for f32 `ex2.approx(x · −log2 e)` (negation is exact, so
/// this is [`exp`] of `−x` bit for bit, one instruction shorter).
pub(crate) fn exp_neg<A: Float>(k: &mut KernelBuilder, x: Reg<A>) -> Reg<A> {
    if acc_is_f64::<A>() {
        let neg = k.neg(x);
        return k.exp(neg);
    }
    let scaled = k.mul(x.retype::<F32>(), -std::f32::consts::LOG2_E);
    k.ex2_approx(scaled).retype()
}

/// `x + 1` in the compute type, the 1 an immediate.
pub(crate) fn add_one<A: Float>(k: &mut KernelBuilder, x: Reg<A>) -> Reg<A> {
    if acc_is_f64::<A>() {
        k.add(x.retype::<F64>(), 1.0f64).retype()
    } else {
        k.add(x.retype::<F32>(), 1.0f32).retype()
    }
}
