//! Builder helpers the MoE kernels share: the storage → compute type mapping (f16/bf16/f32
//! compute in f32, f64 in f64), constants and warp collectives in the compute type.
//!
//! These live here rather than in `builder/` because only this family needs them; they are thin
//! wrappers over public builder calls (plus `mov.b64` pack/unpack for 64-bit shuffles and
//! `mov.b32` pack/unpack for 16-bit elements moved in 32-bit words).

use crate::builder::{Float, KernelBuilder, Reg, Scalar, BF16, F16, F32, F64, U32, U64};
use crate::ir::{Op, Operand, ShflMode, Type};

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

/// Inclusive sum of `v` over lanes `0..=lane` (`shfl.sync.up`, the whole warp taking part).
pub(crate) fn warp_inclusive_sum(k: &mut KernelBuilder, lane: Reg<U32>, v: Reg<U32>) -> Reg<U32> {
    let sum = k.var::<U32>(v);
    for delta in [1u32, 2, 4, 8, 16] {
        let other = k.shfl(ShflMode::Up, sum, delta, 0, u32::MAX);
        let has = k.setp_ge(lane, delta);
        let add = k.selp(other, 0u32, has);
        k.add_into(sum, sum, add);
    }
    sum
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

/// Elements of `T` per vector access along a row of `width` elements: the most that fit 16
/// bytes and divide `width` (a power of two), so every access is aligned (rows start at
/// multiples of `width` elements of a 16-byte aligned buffer) and wholly inside its row.
pub(crate) fn vector_elems<T: Scalar>(width: u32) -> u32 {
    let mut elems = 16 / T::TYPE.bytes();
    while !width.is_multiple_of(elems) {
        elems /= 2;
    }
    elems
}

/// The 32-bit words a vector of `elems` 16-bit elements moves in (`elems` even).
fn words_of(elems: u32) -> usize {
    (elems / 2) as usize
}

/// Whether a vector of `elems` elements of `T` moves as 32-bit words of 16-bit pairs.
fn moves_in_words<T: Scalar>(elems: u32) -> bool {
    T::TYPE.bytes() == 2 && elems >= 2
}

/// `elems` ([`vector_elems`]) consecutive elements at `addr` with one `ld.global.nc` (`.v2` /
/// `.v4`; 16-bit elements as 32-bit words split with `mov.b32 {lo, hi}`), in order.
pub(crate) fn ld_vector_nc<T: Scalar>(
    k: &mut KernelBuilder,
    addr: Reg<U64>,
    elems: u32,
) -> Vec<Reg<T>> {
    if !moves_in_words::<T>(elems) {
        return ld_nc_n::<T>(k, addr, elems as usize);
    }
    ld_nc_n::<U32>(k, addr, words_of(elems))
        .into_iter()
        .flat_map(|word| {
            let (lo, hi) = (k.reg::<T>(), k.reg::<T>());
            k.push(
                Op::Unpack(Type::B32),
                vec![Operand::Vec(vec![lo.id, hi.id]), Operand::Reg(word.id)],
            );
            [lo, hi]
        })
        .collect()
}

/// Stores `values` (a [`vector_elems`] count) at `addr` with one `st.global` (`.v2` / `.v4`;
/// 16-bit elements packed in pairs with `mov.b32 d, {lo, hi}`).
pub(crate) fn st_vector<T: Scalar>(k: &mut KernelBuilder, addr: Reg<U64>, values: &[Reg<T>]) {
    if !moves_in_words::<T>(values.len() as u32) {
        return st_n(k, addr, values);
    }
    let words: Vec<Reg<U32>> = values
        .chunks(2)
        .map(|pair| {
            let word = k.reg::<U32>();
            k.push(
                Op::Pack(Type::B32),
                vec![
                    Operand::Reg(word.id),
                    Operand::Vec(vec![pair[0].id, pair[1].id]),
                ],
            );
            word
        })
        .collect();
    st_n(k, addr, &words);
}

/// `n` ∈ {1, 2, 4} consecutive elements with one `ld.global.nc{.v2, .v4}`.
fn ld_nc_n<T: Scalar>(k: &mut KernelBuilder, addr: Reg<U64>, n: usize) -> Vec<Reg<T>> {
    match n {
        4 => k.ld_global_v4::<T>(addr, 0, true).to_vec(),
        2 => k.ld_global_v2::<T>(addr, 0, true).to_vec(),
        _ => vec![k.ld_global_nc::<T>(addr, 0)],
    }
}

/// `values` (1, 2 or 4) with one `st.global{.v2, .v4}`.
fn st_n<T: Scalar>(k: &mut KernelBuilder, addr: Reg<U64>, values: &[Reg<T>]) {
    match *values {
        [a, b, c, d] => k.st_global_v4(addr, 0, [a, b, c, d]),
        [a, b] => k.st_global_v2(addr, 0, [a, b]),
        [a] => k.st_global(addr, 0, a),
        _ => unreachable!("vectors hold 1, 2 or 4 words"),
    }
}

/// Stores `values` at consecutive elements from `addr` (the start of a row of `values.len()`
/// elements): one [`st_vector`] when the whole row is one aligned vector ([`vector_elems`]),
/// element by element otherwise.
pub(crate) fn st_row<T: Scalar>(k: &mut KernelBuilder, addr: Reg<U64>, values: &[Reg<T>]) {
    let len = values.len() as u32;
    if len > 1 && vector_elems::<T>(len) == len {
        return st_vector(k, addr, values);
    }
    for (i, &v) in (0u32..).zip(values) {
        k.st_global(addr, (i * T::TYPE.bytes()) as i32, v);
    }
}
