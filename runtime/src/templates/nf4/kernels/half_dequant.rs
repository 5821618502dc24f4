//! Dequantisation in the activation type, for the f16/bf16 tensor-core GEMMs: packed codes
//! straight into `mma.m16n8k16` B-fragment registers.
//!
//! A B register holds two weights of one quantisation block (`lo`: the even reduction index,
//! the high nibble of its byte; `hi`: the odd one): their codes rounded to `T`, times the
//! block's absmax rounded to `T`,
//!
//! ```text
//! B     = fma.rn.T×2(pair, scale, −0)             // one rounding per half: pair · scale
//! scale = cvt.rn.T×2.f32(absmax_hi, absmax_lo)    // once per block (pair) and lane, not per weight
//! ```
//!
//! (`fma` with a `−0` addend is the product rounded once, with the product's sign even when it
//! is zero: `mul.rn.bf16x2` needs sm_90.) `pair`, the two codes `NF4_CODE[c]` rounded to `T`
//! (nearest even), is looked up one of two ways ([`CodeLookup`]):
//!
//! - **Shared table** (the backward, whose pairs take nibbles of two different rows' words):
//!   16 shared words, word `c` holding the code in both halves (16 banks, so any warp-wide
//!   lookup is one wavefront); per pair two table addresses (`mad`), two `ld.shared.b32` and
//!   one `prmt` (`pair = prmt(table[even], table[odd], 0x7610)`).
//! - **Register byte planes** (the forward, whose pairs are whole bytes, two per lane and k16
//!   step): the codes' low and high bytes in eight constant registers, four per byte, eight
//!   codes per register pair, and per two pairs one `prmt` gathering the two bytes, four
//!   `prmt` plane lookups, two `prmt` choosing each code's plane and two assembling the B
//!   registers (three `and`/`shr`/`or` form the selectors): 15 instructions per two B
//!   registers where the shared table took 16 (with the two `bfe` extracting each pair's
//!   nibbles) and four shared wavefronts. In the tall forward
//!   those lookups were a quarter of the shared-memory traffic (1 wavefront per `mma` of
//!   4.07).
//!
//! Both give the same bits: the table entries are the same rounded codes.
//!
//! Rounding: `ŵ' = rn(rn(code) · rn(absmax))` against the host's `ŵ = code · absmax` in f32 —
//! three roundings to `T` instead of one, so `|ŵ' − ŵ| ≤ ((1 + u)³ − 1) · |ŵ| ≈ 3u · |ŵ|`
//! while every value stays a normal `T` (`u` = 2⁻¹¹ for f16, 2⁻⁸ for bf16): each output's
//! error from the weights is at most `3u · S`, `S = Σ |a · ŵ|`, i.e. `1.47e-3 · S` for f16 and
//! `1.17e-2 · S` for bf16, inside `runtime/tests/nf4_numerics.rs`' `2e-3 · S` and `2e-2 · S`
//! (the f32 accumulation adds `~k · 2⁻²⁴ · S`). bitsandbytes' own 4-bit kernels dequantise in
//! the activation type too. An f16 absmax below 2⁻¹⁴ (6.1e-5) is subnormal and rounds with an
//! absolute error up to 2⁻²⁵ instead of a relative one (the weights it scales are that small
//! too; one above 65504 overflows, as `code 15 · absmax = absmax` would today). Results stay
//! deterministic: same inputs, same bits.

use crate::builder::{KernelBuilder, PackedHalf, Reg, Scalar, F32, U32};
use crate::ir::{Op, Operand, Rounding, Type};
use crate::templates::nf4::format::NF4_CODE;

/// `prmt` selector: bytes 0–1 of the first word (the even weight), bytes 2–3 of the second.
const LO_OF_A_HI_OF_B: u32 = 0x7610;

/// Where [`HalfCodes`] looks codes up.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum CodeLookup {
    /// A 16-word shared table ([`HalfCodes::pair`]): any two nibbles, two `ld.shared` each.
    Shared,
    /// Byte planes in registers ([`HalfCodes::pairs_of_bytes`]): two bytes at a time, no
    /// shared memory.
    Registers,
}

/// The code table in `T` (a shared table or register byte planes) and the packed `−0` addend.
#[derive(Clone, Copy)]
pub(super) struct HalfCodes<T: PackedHalf> {
    /// Shared byte address of the 16-word table ([`CodeLookup::Shared`]).
    table: Option<Reg<U32>>,
    /// The byte planes ([`CodeLookup::Registers`]).
    planes: Option<BytePlanes>,
    neg_zero: Reg<T::Pair>,
}

/// The 16 codes rounded to `T`, split into byte planes of eight codes: `low[h]` holds the low
/// bytes of codes `8h .. 8h + 8` (byte `c mod 8` of the word pair), `high[h]` their high
/// bytes. A `prmt` over one plane looks up four codes' bytes at once (its selector nibbles
/// are the codes' low three bits); 8 registers in all.
#[derive(Clone, Copy)]
struct BytePlanes {
    low: [(Reg<U32>, Reg<U32>); 2],
    high: [(Reg<U32>, Reg<U32>); 2],
}

impl BytePlanes {
    fn new<T: Scalar>(k: &mut KernelBuilder) -> Self {
        let plane = |k: &mut KernelBuilder, half: usize, byte: u32| {
            let word = |k: &mut KernelBuilder, first: usize| {
                let bits = (0..4).fold(0u32, |w, i| {
                    let code = u32::from(half_bits::<T>(NF4_CODE[first + i]));
                    w | ((code >> (8 * byte)) & 0xFF) << (8 * i)
                });
                k.var::<U32>(bits)
            };
            (word(k, 8 * half), word(k, 8 * half + 4))
        };
        let low = [plane(k, 0, 0), plane(k, 1, 0)];
        let high = [plane(k, 0, 1), plane(k, 1, 1)];
        Self { low, high }
    }
}

/// `prmt` selectors of [`HalfCodes::pairs_of_bytes`] (PTX ISA `prmt`, generic form: nibble
/// `i` of the selector picks byte `i` of the result from the eight bytes `{b, a}`; nibbles
/// here stay below 8, so no sign replication): the low three bits of each code nibble, and
/// bytes `(1, 5, 0, 4)` / `(3, 7, 2, 6)` of `{high, low}` (low and high byte of the even
/// code, then of the odd code, of the first / second byte).
const CODE_LOW_BITS: u32 = 0x7777;
const FIRST_PAIR: u32 = 0x4051;
const SECOND_PAIR: u32 = 0x6273;

impl<T: PackedHalf> HalfCodes<T> {
    /// Sets up `lookup`'s table. [`CodeLookup::Shared`]: declares it and has thread `tid = 0`
    /// write it; the caller synchronises before the first lookup (the pipeline's first step
    /// does). [`CodeLookup::Registers`]: eight constant registers.
    pub fn new(k: &mut KernelBuilder, tid: Reg<U32>, lookup: CodeLookup) -> Self {
        let neg_zero = |k: &mut KernelBuilder| k.var::<U32>(0x8000_8000u32).retype();
        if lookup == CodeLookup::Registers {
            let planes = Some(BytePlanes::new::<T>(k));
            let neg_zero = neg_zero(k);
            return Self {
                table: None,
                planes,
                neg_zero,
            };
        }
        let arr = k.shared_array::<U32>("nf4_code_half", NF4_CODE.len() as u32);
        let table = k.shared_base(arr);
        k.comment("NF4 code table rounded to the activation type (both halves) -> shared memory");
        let first = k.setp(crate::ir::CmpOp::Eq, tid, 0u32);
        k.if_then(first, |k| {
            for (i, &v) in NF4_CODE.iter().enumerate() {
                let bits = u32::from(half_bits::<T>(v));
                k.st_shared(table, 4 * i as i32, bits | (bits << 16));
            }
        });
        Self {
            table: Some(table),
            planes: None,
            neg_zero: neg_zero(k),
        }
    }

    /// `(lo, hi)` absmax rounded to `T` and packed: the scale of a pair whose two weights
    /// belong to those blocks (the same register twice when they share one).
    pub fn scale(&self, k: &mut KernelBuilder, (lo, hi): (Reg<F32>, Reg<F32>)) -> Reg<T::Pair> {
        k.pack_f32_pair::<T>(lo, hi)
    }

    /// [`Self::scale`] of each of `absmax`, one conversion per distinct pair of registers
    /// (a block's scale is converted once, however many pairs it serves).
    pub fn scales(
        &self,
        k: &mut KernelBuilder,
        absmax: &[(Reg<F32>, Reg<F32>)],
    ) -> Vec<Reg<T::Pair>> {
        let key = |(lo, hi): (Reg<F32>, Reg<F32>)| (lo.id(), hi.id());
        let mut done = Vec::new();
        absmax
            .iter()
            .map(|&a| match done.iter().find(|&&(kd, _)| kd == key(a)) {
                Some(&(_, s)) => s,
                None => {
                    let s = self.scale(k, a);
                    done.push((key(a), s));
                    s
                }
            })
            .collect()
    }

    /// One B register: `(NF4_CODE[even], NF4_CODE[odd])` in `T`, times `scale`
    /// ([`CodeLookup::Shared`]).
    pub fn pair(
        &self,
        k: &mut KernelBuilder,
        (even, odd): (Reg<U32>, Reg<U32>),
        scale: Reg<T::Pair>,
    ) -> Reg<T::Pair> {
        let table = self.table.expect("pair() needs the shared code table");
        let lookup = |k: &mut KernelBuilder, code: Reg<U32>| {
            let at = k.mad_lo(code, 4u32, table);
            k.ld_shared::<U32>(at, 0)
        };
        let lo = lookup(k, even);
        let hi = lookup(k, odd);
        let codes = k.prmt(lo, hi, LO_OF_A_HI_OF_B).retype::<T::Pair>();
        self.scaled(k, codes, scale)
    }

    /// Two B registers from two packed bytes ([`CodeLookup::Registers`]): byte `first` of
    /// `words.0` and byte `second` of `words.1`, where `gather` is the `prmt` selector putting
    /// those two bytes in bytes 0 and 1; each byte's high nibble is the even weight (the low
    /// half of its B register), its low nibble the odd one, scaled by `scales.0` / `scales.1`.
    ///
    /// ```text
    /// s    = prmt(word0, word1, gather)              // nibbles (odd0, even0, odd1, even1)
    /// s7   = s & 0x7777                              // each code's low three bits
    /// lo_h = prmt(low[h].0, low[h].1, s7)            // low bytes of codes 8h + s7's nibbles
    /// hi_h = prmt(high[h].0, high[h].1, s7)          // h = 0, 1: four plane lookups
    /// pick = ((s >> 1) & 0x4444) | 0x3210            // nibble i: i, + 4 when code i ≥ 8
    /// lo   = prmt(lo_0, lo_1, pick)                  // byte i: low byte of code i
    /// hi   = prmt(hi_0, hi_1, pick)
    /// B0   = prmt(lo, hi, 0x4051), B1 = prmt(lo, hi, 0x6273)   // then the scale's fma
    /// ```
    ///
    /// 15 instructions per two registers (the shared lookups: 16, with two `bfe`, two `mad`
    /// and two `ld.shared` per register, and one shared wavefront per lookup); the values
    /// are bit for bit those of [`Self::pair`].
    pub fn pairs_of_bytes(
        &self,
        k: &mut KernelBuilder,
        words: (Reg<U32>, Reg<U32>),
        gather: Reg<U32>,
        scales: (Reg<T::Pair>, Reg<T::Pair>),
    ) -> [Reg<T::Pair>; 2] {
        let planes = self.planes.expect("pairs_of_bytes() needs the byte planes");
        let s = k.prmt(words.0, words.1, gather);
        let low_bits = k.and(s, CODE_LOW_BITS);
        let look = |k: &mut KernelBuilder, plane: [(Reg<U32>, Reg<U32>); 2]| {
            plane.map(|(a, b)| k.prmt(a, b, low_bits))
        };
        let [lo_0, lo_1] = look(k, planes.low);
        let [hi_0, hi_1] = look(k, planes.high);
        let bit3 = k.shr(s, 1u32);
        let bit3 = k.and(bit3, 0x4444u32);
        let pick = k.or(bit3, 0x3210u32);
        let lo = k.prmt(lo_0, lo_1, pick);
        let hi = k.prmt(hi_0, hi_1, pick);
        [(FIRST_PAIR, scales.0), (SECOND_PAIR, scales.1)].map(|(sel, scale)| {
            let codes = k.prmt(lo, hi, sel).retype::<T::Pair>();
            self.scaled(k, codes, scale)
        })
    }

    /// `fma.rn(codes, scale, −0)`: the product rounded once to `T`.
    fn scaled(
        &self,
        k: &mut KernelBuilder,
        codes: Reg<T::Pair>,
        scale: Reg<T::Pair>,
    ) -> Reg<T::Pair> {
        let d = k.reg::<T::Pair>();
        k.push(
            Op::Fma {
                ty: T::Pair::TYPE,
                rnd: Rounding::Rn,
                ftz: false,
            },
            vec![
                Operand::Reg(d.id()),
                Operand::Reg(codes.id()),
                Operand::Reg(scale.id()),
                Operand::Reg(self.neg_zero.id()),
            ],
        );
        d
    }
}

/// The bits of `v` rounded to `T` (nearest even).
fn half_bits<T: Scalar>(v: f32) -> u16 {
    match T::TYPE {
        Type::F16 => half::f16::from_f32(v).to_bits(),
        _ => half::bf16::from_f32(v).to_bits(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::{BF16, F16};

    #[test]
    fn table_words_are_the_codes_rounded_in_both_halves() {
        // NF4_CODE[15] = 1.0 and NF4_CODE[0] = -1.0 are exact in both types.
        assert_eq!(half_bits::<F16>(1.0), 0x3C00);
        assert_eq!(half_bits::<BF16>(-1.0), 0xBF80);
        // 0.0795803 (code 8): f16 0x2D18 = 0.07958984 (nearest), bf16 0x3DA3 = 0.07958984.
        assert_eq!(half_bits::<F16>(NF4_CODE[8]), 0x2D18);
        assert_eq!(half_bits::<BF16>(NF4_CODE[8]), 0x3DA3);
    }

    /// `rn(rn(code) · rn(absmax))` against `code · absmax` (f64) for every code and absmax
    /// spread over values whose weights are normal in both types: within `((1 + u)³ − 1) · |ŵ|`, the module's
    /// budget.
    #[test]
    fn dequantised_in_t_is_within_three_roundings() {
        fn check<T: Scalar>(u: f64) {
            let round = |x: f32| from_bits::<T>(half_bits::<T>(x));
            let bound = (1.0 + u).powi(3) - 1.0;
            let mut worst = 0.0f64;
            for i in 0..4000 {
                // absmax from 1e-3 to 1e3, log-spaced: every non-zero weight (|code| ≥ 0.0796)
                // stays above f16's smallest normal, 2⁻¹⁴ = 6.1e-5 (below it f16 rounds with an
                // absolute error, the old single rounding included).
                let absmax = 10f64.powf(-3.0 + 6.0 * f64::from(i) / 4000.0) as f32;
                for &code in &NF4_CODE {
                    let exact = f64::from(code) * f64::from(absmax);
                    let got = f64::from(round(round(code) * round(absmax)));
                    if exact != 0.0 {
                        worst = worst.max((got - exact).abs() / exact.abs());
                    } else {
                        assert_eq!(got, 0.0);
                    }
                }
            }
            eprintln!(
                "{:?}: worst relative error {worst:.3e}, bound {bound:.3e}",
                T::TYPE
            );
            assert!(worst <= bound, "{worst} > {bound}");
            assert!(worst > u, "{worst}: the products should round too");
        }
        check::<F16>(2f64.powi(-11));
        check::<BF16>(2f64.powi(-8));
    }

    /// The value of `T` bits.
    fn from_bits<T: Scalar>(bits: u16) -> f32 {
        match T::TYPE {
            Type::F16 => half::f16::from_bits(bits).to_f32(),
            _ => half::bf16::from_bits(bits).to_f32(),
        }
    }
}
