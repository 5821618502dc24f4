//! Arithmetic, comparison, conversion and warp-collective instructions of the builder.

use super::types::{Float, Int, Pred, Reg, Scalar, Val, BF16, F32, F64, S32, S64, U16, U32, U64};
use super::KernelBuilder;
use crate::ir::{
    BinOp, CmpOp, CvtRounding, Imm, MathFn, MulMode, Op, Operand, Precision, Rounding, ShflMode,
    Type, UnOp, VoteMode,
};

/// The full warp mask.
pub const FULL_MASK: u32 = 0xffff_ffff;

impl KernelBuilder {
    fn bin<T: Scalar>(&mut self, op: BinOp, a: impl Into<Val<T>>, b: impl Into<Val<T>>) -> Reg<T> {
        let d = self.reg::<T>();
        self.bin_into(d, op, a, b);
        d
    }

    fn bin_into<T: Scalar>(
        &mut self,
        d: Reg<T>,
        op: BinOp,
        a: impl Into<Val<T>>,
        b: impl Into<Val<T>>,
    ) {
        let args = vec![Operand::Reg(d.id), a.into().operand(), b.into().operand()];
        self.push(
            Op::Bin {
                op,
                ty: T::TYPE,
                rnd: None,
                ftz: false,
            },
            args,
        );
    }

    pub fn add<T: Scalar>(&mut self, a: impl Into<Val<T>>, b: impl Into<Val<T>>) -> Reg<T> {
        self.bin(BinOp::Add, a, b)
    }

    /// `d = a + b` into an existing register (loop counters, accumulators).
    pub fn add_into<T: Scalar>(&mut self, d: Reg<T>, a: impl Into<Val<T>>, b: impl Into<Val<T>>) {
        self.bin_into(d, BinOp::Add, a, b)
    }

    pub fn sub<T: Scalar>(&mut self, a: impl Into<Val<T>>, b: impl Into<Val<T>>) -> Reg<T> {
        self.bin(BinOp::Sub, a, b)
    }

    pub fn min<T: Scalar>(&mut self, a: impl Into<Val<T>>, b: impl Into<Val<T>>) -> Reg<T> {
        self.bin(BinOp::Min, a, b)
    }

    pub fn max<T: Scalar>(&mut self, a: impl Into<Val<T>>, b: impl Into<Val<T>>) -> Reg<T> {
        self.bin(BinOp::Max, a, b)
    }

    /// `d = max(a, b)` into an existing register.
    pub fn max_into<T: Scalar>(&mut self, d: Reg<T>, a: impl Into<Val<T>>, b: impl Into<Val<T>>) {
        self.bin_into(d, BinOp::Max, a, b)
    }

    /// Floating-point multiply (round to nearest even).
    pub fn mul<T: Float>(&mut self, a: impl Into<Val<T>>, b: impl Into<Val<T>>) -> Reg<T> {
        self.bin(BinOp::Mul, a, b)
    }

    /// `d = a * b` (float) into an existing register.
    pub fn mul_into<T: Float>(&mut self, d: Reg<T>, a: impl Into<Val<T>>, b: impl Into<Val<T>>) {
        self.bin_into(d, BinOp::Mul, a, b)
    }

    pub fn and<T: Int>(&mut self, a: impl Into<Val<T>>, b: impl Into<Val<T>>) -> Reg<T> {
        self.bit_op(BinOp::And, a, b)
    }

    pub fn or<T: Int>(&mut self, a: impl Into<Val<T>>, b: impl Into<Val<T>>) -> Reg<T> {
        self.bit_op(BinOp::Or, a, b)
    }

    pub fn xor<T: Int>(&mut self, a: impl Into<Val<T>>, b: impl Into<Val<T>>) -> Reg<T> {
        self.bit_op(BinOp::Xor, a, b)
    }

    /// Bitwise ops are typed `.bN` in PTX.
    fn bit_op<T: Int>(&mut self, op: BinOp, a: impl Into<Val<T>>, b: impl Into<Val<T>>) -> Reg<T> {
        let d = self.reg::<T>();
        let ty = bits_type(T::TYPE);
        self.push(
            Op::Bin {
                op,
                ty,
                rnd: None,
                ftz: false,
            },
            vec![Operand::Reg(d.id), a.into().operand(), b.into().operand()],
        );
        d
    }

    /// `a << b`.
    pub fn shl<T: Int>(&mut self, a: impl Into<Val<T>>, b: impl Into<Val<U32>>) -> Reg<T> {
        let d = self.reg::<T>();
        let ty = bits_type(T::TYPE);
        self.push(
            Op::Bin {
                op: BinOp::Shl,
                ty,
                rnd: None,
                ftz: false,
            },
            vec![Operand::Reg(d.id), a.into().operand(), b.into().operand()],
        );
        d
    }

    /// `a >> b` (arithmetic for signed types, logical for unsigned).
    pub fn shr<T: Int>(&mut self, a: impl Into<Val<T>>, b: impl Into<Val<U32>>) -> Reg<T> {
        let d = self.reg::<T>();
        self.push(
            Op::Bin {
                op: BinOp::Shr,
                ty: T::TYPE,
                rnd: None,
                ftz: false,
            },
            vec![Operand::Reg(d.id), a.into().operand(), b.into().operand()],
        );
        d
    }

    /// `bfe.u32`: the `len` bits of `a` from bit `pos` on, zero-extended: `(a >> pos) &
    /// (2^len − 1)` in one instruction (`pos + len ≤ 32`).
    pub fn bit_field(
        &mut self,
        a: Reg<U32>,
        pos: impl Into<Val<U32>>,
        len: impl Into<Val<U32>>,
    ) -> Reg<U32> {
        self.u32_op3(Op::Bfe, a, pos.into(), len.into())
    }

    /// `op d, a, b, c` on 32-bit integer operands (`bfe`, `prmt`), `d` a new register.
    pub(super) fn u32_op3(&mut self, op: Op, a: Reg<U32>, b: Val<U32>, c: Val<U32>) -> Reg<U32> {
        let d = self.reg::<U32>();
        self.push(
            op,
            vec![
                Operand::Reg(d.id),
                Operand::Reg(a.id),
                b.operand(),
                c.operand(),
            ],
        );
        d
    }

    /// Integer division (rounds toward zero).
    pub fn div_int<T: Int>(&mut self, a: impl Into<Val<T>>, b: impl Into<Val<T>>) -> Reg<T> {
        self.bin(BinOp::Div, a, b)
    }

    /// Integer remainder.
    pub fn rem<T: Int>(&mut self, a: impl Into<Val<T>>, b: impl Into<Val<T>>) -> Reg<T> {
        self.bin(BinOp::Rem, a, b)
    }

    /// Low half of the integer product.
    pub fn mul_lo<T: Int>(&mut self, a: impl Into<Val<T>>, b: impl Into<Val<T>>) -> Reg<T> {
        let d = self.reg::<T>();
        self.push(
            Op::MulInt {
                mode: MulMode::Lo,
                ty: T::TYPE,
            },
            vec![Operand::Reg(d.id), a.into().operand(), b.into().operand()],
        );
        d
    }

    /// High half of the integer product.
    pub fn mul_hi<T: Int>(&mut self, a: impl Into<Val<T>>, b: impl Into<Val<T>>) -> Reg<T> {
        let d = self.reg::<T>();
        self.push(
            Op::MulInt {
                mode: MulMode::Hi,
                ty: T::TYPE,
            },
            vec![Operand::Reg(d.id), a.into().operand(), b.into().operand()],
        );
        d
    }

    /// Full 64-bit product of two u32.
    pub fn mul_wide(&mut self, a: impl Into<Val<U32>>, b: impl Into<Val<U32>>) -> Reg<U64> {
        let d = self.reg::<U64>();
        self.push(
            Op::MulInt {
                mode: MulMode::Wide,
                ty: Type::U32,
            },
            vec![Operand::Reg(d.id), a.into().operand(), b.into().operand()],
        );
        d
    }

    /// `a * b + c`, low half.
    pub fn mad_lo<T: Int>(
        &mut self,
        a: impl Into<Val<T>>,
        b: impl Into<Val<T>>,
        c: impl Into<Val<T>>,
    ) -> Reg<T> {
        let d = self.reg::<T>();
        let args = vec![
            Operand::Reg(d.id),
            a.into().operand(),
            b.into().operand(),
            c.into().operand(),
        ];
        self.push(
            Op::MadInt {
                mode: MulMode::Lo,
                ty: T::TYPE,
            },
            args,
        );
        d
    }

    /// `a * b + c` with a 64-bit product and addend.
    pub fn mad_wide(
        &mut self,
        a: impl Into<Val<U32>>,
        b: impl Into<Val<U32>>,
        c: impl Into<Val<U64>>,
    ) -> Reg<U64> {
        let d = self.reg::<U64>();
        let args = vec![
            Operand::Reg(d.id),
            a.into().operand(),
            b.into().operand(),
            c.into().operand(),
        ];
        self.push(
            Op::MadInt {
                mode: MulMode::Wide,
                ty: Type::U32,
            },
            args,
        );
        d
    }

    /// Fused multiply-add, round to nearest even.
    pub fn fma<T: Float>(
        &mut self,
        a: impl Into<Val<T>>,
        b: impl Into<Val<T>>,
        c: impl Into<Val<T>>,
    ) -> Reg<T> {
        let d = self.reg::<T>();
        self.fma_into(d, a, b, c);
        d
    }

    /// `d = a * b + c` into an existing register (accumulators).
    pub fn fma_into<T: Float>(
        &mut self,
        d: Reg<T>,
        a: impl Into<Val<T>>,
        b: impl Into<Val<T>>,
        c: impl Into<Val<T>>,
    ) {
        let args = vec![
            Operand::Reg(d.id),
            a.into().operand(),
            b.into().operand(),
            c.into().operand(),
        ];
        self.push(
            Op::Fma {
                ty: T::TYPE,
                rnd: Rounding::Rn,
                ftz: false,
            },
            args,
        );
    }

    /// Float division with the given precision (`Precision::Rounded(Rn)` is IEEE).
    pub fn div<T: Float>(
        &mut self,
        a: impl Into<Val<T>>,
        b: impl Into<Val<T>>,
        precision: Precision,
    ) -> Reg<T> {
        let d = self.reg::<T>();
        let args = vec![Operand::Reg(d.id), a.into().operand(), b.into().operand()];
        self.push(
            Op::FDiv {
                ty: T::TYPE,
                precision,
                ftz: false,
            },
            args,
        );
        d
    }

    fn unary<T: Scalar>(&mut self, op: UnOp, ty: Type, a: impl Into<Val<T>>) -> Reg<T> {
        let d = self.reg::<T>();
        self.push(
            Op::Un { op, ty, ftz: false },
            vec![Operand::Reg(d.id), a.into().operand()],
        );
        d
    }

    pub fn neg<T: Scalar>(&mut self, a: impl Into<Val<T>>) -> Reg<T> {
        self.unary(UnOp::Neg, T::TYPE, a)
    }

    pub fn abs<T: Scalar>(&mut self, a: impl Into<Val<T>>) -> Reg<T> {
        self.unary(UnOp::Abs, T::TYPE, a)
    }

    pub fn not<T: Int>(&mut self, a: impl Into<Val<T>>) -> Reg<T> {
        self.unary(UnOp::Not, bits_type(T::TYPE), a)
    }

    /// A special function (`ex2`, `lg2`, `rcp`, `sqrt`, `rsqrt`).
    pub fn math<T: Float>(
        &mut self,
        func: MathFn,
        a: impl Into<Val<T>>,
        precision: Precision,
    ) -> Reg<T> {
        let d = self.reg::<T>();
        let ftz = T::TYPE == Type::F64 && func == MathFn::Rcp && precision == Precision::Approx;
        self.push(
            Op::Math {
                func,
                ty: T::TYPE,
                precision,
                ftz,
            },
            vec![Operand::Reg(d.id), a.into().operand()],
        );
        d
    }

    /// `2^a`, hardware approximation (f32).
    pub fn ex2_approx(&mut self, a: impl Into<Val<F32>>) -> Reg<F32> {
        self.math(MathFn::Ex2, a, Precision::Approx)
    }

    /// `e^a` for f32 as `ex2.approx(a · log2 e)`.
    pub fn exp_approx(&mut self, a: impl Into<Val<F32>>) -> Reg<F32> {
        let scaled = self.mul(a, std::f32::consts::LOG2_E);
        self.ex2_approx(scaled)
    }

    /// `e^a` in f64 to within a few ulp (there is no `ex2.approx.f64`): `a = n·ln2 + r` with
    /// `n = round(a·log2 e)` and a two-part `ln2`, a degree-13 Taylor polynomial for `e^r` on
    /// |r| ≤ ln2/2, then scaling by `2^n` built from exponent bits in two halves so that
    /// subnormal results are right. Returns exactly 0 below −745.2 (incl. −∞) and clamps above
    /// 709.78 (the result overflows to +∞ there as it should).
    pub fn exp_f64(&mut self, a: impl Into<Val<F64>>) -> Reg<F64> {
        let ln2_hi = f64::from_bits(0x3fe6_2e42_fee0_0000);
        let ln2_lo = f64::from_bits(0x3dea_39ef_3579_3c76);
        let a = match a.into() {
            Val::Reg(r) => r,
            imm => self.var::<F64>(imm),
        };
        let clamped_hi = self.min(a, 709.79f64);
        let x = self.max(clamped_hi, -745.2f64);
        let t = self.mul(x, std::f64::consts::LOG2_E);
        let n = self.cvt::<F64, F64>(t, Some(CvtRounding::Integral(Rounding::Rn)));
        let neg_n = self.neg(n);
        let r_hi = self.fma(neg_n, ln2_hi, x);
        let r = self.fma(neg_n, ln2_lo, r_hi);
        // Horner: Σ r^i / i!, i = 0..=13.
        let mut factorial = 1.0f64;
        let coefficients: Vec<f64> = (0..=13)
            .map(|i| {
                if i > 0 {
                    factorial *= f64::from(i);
                }
                1.0 / factorial
            })
            .collect();
        let mut p = self.var::<F64>(coefficients[13]);
        for c in coefficients[..13].iter().rev() {
            p = self.fma(p, r, *c);
        }
        let n_int = self.cvt::<S32, F64>(n, Some(CvtRounding::Integral(Rounding::Rz)));
        let half = self.shr(n_int, 1u32);
        let rest = self.sub(n_int, half);
        let s1 = self.pow2_f64(half);
        let s2 = self.pow2_f64(rest);
        let scaled = self.mul(p, s1);
        let result = self.mul(scaled, s2);
        let underflow = self.setp(CmpOp::Lt, a, -745.2f64);
        self.selp(0.0f64, result, underflow)
    }

    /// `2^e` as an f64 for −1022 ≤ e ≤ 1023, from exponent bits.
    fn pow2_f64(&mut self, e: Reg<S32>) -> Reg<F64> {
        let biased = self.add(e, 1023i32);
        let wide = self.cvt::<S64, S32>(biased, None);
        let bits = self.shl(wide, 52u32);
        let d = self.reg::<F64>();
        self.push(
            Op::Mov(Type::B64),
            vec![Operand::Reg(d.id), Operand::Reg(bits.id)],
        );
        d
    }

    /// `e^a` in the compute type: `ex2.approx` for f32, [`KernelBuilder::exp_f64`] for f64.
    pub fn exp<T: Float>(&mut self, a: Reg<T>) -> Reg<T> {
        match T::TYPE {
            Type::F64 => self.exp_f64(a.retype::<F64>()).retype(),
            Type::F32 => self.exp_approx(a.retype::<F32>()).retype(),
            other => panic!("exp on .{other}: convert half types to f32 first"),
        }
    }

    // ---- comparisons and selection ----------------------------------------------------

    /// `setp.cmp.type p, a, b`.
    pub fn setp<T: Scalar>(
        &mut self,
        cmp: CmpOp,
        a: impl Into<Val<T>>,
        b: impl Into<Val<T>>,
    ) -> Pred {
        let p = self.pred();
        self.push(
            Op::Setp { cmp, ty: T::TYPE },
            vec![Operand::Reg(p.0), a.into().operand(), b.into().operand()],
        );
        p
    }

    pub fn setp_lt<T: Scalar>(&mut self, a: impl Into<Val<T>>, b: impl Into<Val<T>>) -> Pred {
        self.setp(CmpOp::Lt, a, b)
    }

    pub fn setp_ge<T: Scalar>(&mut self, a: impl Into<Val<T>>, b: impl Into<Val<T>>) -> Pred {
        self.setp(CmpOp::Ge, a, b)
    }

    /// `p && q`.
    pub fn and_pred(&mut self, p: Pred, q: Pred) -> Pred {
        let d = self.pred();
        self.push(
            Op::Bin {
                op: BinOp::And,
                ty: Type::Pred,
                rnd: None,
                ftz: false,
            },
            vec![Operand::Reg(d.0), Operand::Reg(p.0), Operand::Reg(q.0)],
        );
        d
    }

    /// `p || q`.
    pub fn or_pred(&mut self, p: Pred, q: Pred) -> Pred {
        let d = self.pred();
        self.push(
            Op::Bin {
                op: BinOp::Or,
                ty: Type::Pred,
                rnd: None,
                ftz: false,
            },
            vec![Operand::Reg(d.0), Operand::Reg(p.0), Operand::Reg(q.0)],
        );
        d
    }

    /// `p ? a : b`.
    pub fn selp<T: Scalar>(
        &mut self,
        a: impl Into<Val<T>>,
        b: impl Into<Val<T>>,
        p: Pred,
    ) -> Reg<T> {
        let d = self.reg::<T>();
        let ty = if T::TYPE.is_half() {
            Type::B16
        } else {
            T::TYPE
        };
        self.push(
            Op::Selp(ty),
            vec![
                Operand::Reg(d.id),
                a.into().operand(),
                b.into().operand(),
                Operand::Reg(p.0),
            ],
        );
        d
    }

    // ---- conversions --------------------------------------------------------------------

    /// `cvt{.rnd}.D.S d, a`.
    pub fn cvt<D: Scalar, S: Scalar>(&mut self, a: Reg<S>, rnd: Option<CvtRounding>) -> Reg<D> {
        let d = self.reg::<D>();
        let op = Op::Cvt {
            dst: D::TYPE,
            src: S::TYPE,
            rnd,
            ftz: false,
            sat: false,
        };
        self.push(op, vec![Operand::Reg(d.id), Operand::Reg(a.id)]);
        d
    }

    /// Widens to f32 exactly. bf16 before sm_90 (no `cvt.f32.bf16`) is converted in software:
    /// a bf16 is the high half of an f32.
    pub fn to_f32<S: Float>(&mut self, a: Reg<S>) -> Reg<F32> {
        match S::TYPE {
            Type::F32 => a.retype(),
            Type::BF16 if !self.arch().has_bf16_full_math() => {
                let wide = self.cvt::<U32, U16>(a.retype(), None);
                let bits = self.shl(wide, 16u32);
                self.bitcast_f32(bits)
            }
            Type::F64 => self.cvt(a, Some(CvtRounding::Float(Rounding::Rn))),
            _ => self.cvt(a, None),
        }
    }

    /// Narrows an f32 to `D` rounding to nearest even. f32 → bf16 before sm_80 is done in
    /// software: add `0x7fff + lsb` to the bits and keep the high half; NaN stays a quiet NaN.
    pub fn from_f32<D: Float>(&mut self, a: Reg<F32>) -> Reg<D> {
        match D::TYPE {
            Type::F32 => a.retype(),
            Type::BF16 if !self.arch().has_bf16_math() => self.f32_to_bf16_soft(a).retype(),
            Type::F64 => self.cvt(a, None),
            _ => self.cvt(a, Some(CvtRounding::Float(Rounding::Rn))),
        }
    }

    fn f32_to_bf16_soft(&mut self, a: Reg<F32>) -> Reg<BF16> {
        let bits = self.bitcast_u32(a);
        let high = self.shr(bits, 16u32);
        let lsb = self.and(high, 1u32);
        let bias = self.add(lsb, 0x7fffu32);
        let rounded = self.add(bits, bias);
        let rounded_high = self.shr(rounded, 16u32);
        let is_nan = self.setp(CmpOp::Nan, a, a);
        let result = self.selp(0x7fc0u32, rounded_high, is_nan);
        let narrow: Reg<U16> = self.cvt(result, None);
        narrow.retype()
    }

    /// Reinterprets f32 bits as u32 (`mov.b32`).
    pub fn bitcast_u32(&mut self, a: Reg<F32>) -> Reg<U32> {
        let d = self.reg::<U32>();
        self.push(
            Op::Mov(Type::B32),
            vec![Operand::Reg(d.id), Operand::Reg(a.id)],
        );
        d
    }

    /// Reinterprets u32 bits as f32 (`mov.b32`).
    pub fn bitcast_f32(&mut self, a: Reg<U32>) -> Reg<F32> {
        let d = self.reg::<F32>();
        self.push(
            Op::Mov(Type::B32),
            vec![Operand::Reg(d.id), Operand::Reg(a.id)],
        );
        d
    }

    /// A half register holding the constant `v` (half types cannot be immediates).
    pub fn half_const<T: Float>(&mut self, v: f32) -> Reg<T> {
        let bits = match T::TYPE {
            Type::F16 => half::f16::from_f32(v).to_bits(),
            _ => half::bf16::from_f32(v).to_bits(),
        };
        let d = self.reg::<T>();
        self.push(
            Op::Mov(Type::B16),
            vec![Operand::Reg(d.id), Operand::Imm(Imm::Int(i64::from(bits)))],
        );
        d
    }

    /// A zero of any float type.
    pub fn zero<T: Float>(&mut self) -> Reg<T> {
        match T::TYPE {
            Type::F32 => self.var::<F32>(0.0f32).retype(),
            Type::F64 => self.var::<F64>(0.0f64).retype(),
            _ => self.half_const::<T>(0.0),
        }
    }

    // ---- warp collectives ---------------------------------------------------------------

    /// `shfl.sync.mode.b32 d, a, b, c, mask` on a 32-bit value. `c` packs the clamp and
    /// segment mask: 0x1f for up-to-a-full-warp down/bfly/idx, 0 for up.
    pub fn shfl<T: Scalar>(
        &mut self,
        mode: ShflMode,
        a: Reg<T>,
        b: impl Into<Val<U32>>,
        c: u32,
        mask: u32,
    ) -> Reg<T> {
        assert_eq!(T::TYPE.bits(), 32, "shfl moves 32-bit values");
        let d = self.reg::<T>();
        let args = vec![
            Operand::Reg(d.id),
            Operand::Reg(a.id),
            b.into().operand(),
            Operand::Imm(Imm::Int(i64::from(c))),
            Operand::Imm(Imm::Int(i64::from(mask))),
        ];
        self.push(Op::Shfl(mode), args);
        d
    }

    /// Butterfly reduction step helper: `shfl.sync.bfly` across the full warp.
    pub fn shfl_xor<T: Scalar>(&mut self, a: Reg<T>, lane_mask: u32) -> Reg<T> {
        self.shfl(ShflMode::Bfly, a, lane_mask, 0x1f, FULL_MASK)
    }

    /// `shfl.sync.down` across the full warp.
    pub fn shfl_down<T: Scalar>(&mut self, a: Reg<T>, delta: u32) -> Reg<T> {
        self.shfl(ShflMode::Down, a, delta, 0x1f, FULL_MASK)
    }

    /// `shfl.sync.idx`: read `a` from lane `src` of the full warp.
    pub fn shfl_idx<T: Scalar>(&mut self, a: Reg<T>, src: impl Into<Val<U32>>) -> Reg<T> {
        self.shfl(ShflMode::Idx, a, src, 0x1f, FULL_MASK)
    }

    /// `vote.sync.ballot.b32` across the full warp: bit i set when lane i's `p` holds.
    pub fn ballot(&mut self, p: Pred) -> Reg<U32> {
        let d = self.reg::<U32>();
        self.push(
            Op::Vote(VoteMode::Ballot),
            vec![
                Operand::Reg(d.id),
                Operand::Reg(p.0),
                Operand::Imm(Imm::Int(i64::from(FULL_MASK))),
            ],
        );
        d
    }

    /// `vote.sync.{all,any,uni}.pred` across the full warp.
    pub fn vote(&mut self, mode: VoteMode, p: Pred) -> Pred {
        assert_ne!(mode, VoteMode::Ballot, "use ballot()");
        let d = self.pred();
        self.push(
            Op::Vote(mode),
            vec![
                Operand::Reg(d.0),
                Operand::Reg(p.0),
                Operand::Imm(Imm::Int(i64::from(FULL_MASK))),
            ],
        );
        d
    }

    /// Population count of a u32.
    pub fn popc(&mut self, a: Reg<U32>) -> Reg<U32> {
        let d = self.reg::<U32>();
        self.push(
            Op::Un {
                op: UnOp::Popc,
                ty: Type::B32,
                ftz: false,
            },
            vec![Operand::Reg(d.id), Operand::Reg(a.id)],
        );
        d
    }

    /// Butterfly sum of an f32 across the full warp; every lane gets the total.
    pub fn warp_sum_f32(&mut self, v: Reg<F32>) -> Reg<F32> {
        let mut acc = v;
        for shift in [16, 8, 4, 2, 1] {
            let other = self.shfl_xor(acc, shift);
            acc = self.add(acc, other);
        }
        acc
    }

    /// Butterfly max of an f32 across the full warp; every lane gets the maximum.
    pub fn warp_max_f32(&mut self, v: Reg<F32>) -> Reg<F32> {
        let mut acc = v;
        for shift in [16, 8, 4, 2, 1] {
            let other = self.shfl_xor(acc, shift);
            acc = self.max(acc, other);
        }
        acc
    }
}

/// The `.bN` type of the same width.
fn bits_type(ty: Type) -> Type {
    match ty.bits() {
        16 => Type::B16,
        32 => Type::B32,
        64 => Type::B64,
        _ => ty,
    }
}
