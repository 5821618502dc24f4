//! The instruction table: every PTX instruction ptxforge emits, described once.
//!
//! For each [`Op`] this module says how its mnemonic is spelled ([`Op::mnemonic`]), which
//! operands it takes and of what type ([`Op::signature`]), and what target and PTX ISA version it
//! needs ([`Op::requirement`]), with the modifier rules ptxas enforces ([`Op::modifier_error`]).
//! The emitter prints from here and the validator checks against here; nothing else knows
//! instruction spellings. The tensor-core and async-copy families keep their data types and
//! form lists in [`super::tensor`] (which also says how sm_90a `wgmma`, TMA and `mbarrier`
//! slot in); their arms here read from it.

use super::tensor::{AsyncCopy, LdmatrixCount, Mma, MmaGeneration, CP_ASYNC_SIZES};
use super::types::Type;
use super::Operand;
use crate::arch::{Arch, PtxVersion};

/// A state space for memory instructions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Space {
    Param,
    Global,
    Shared,
    Local,
}

impl Space {
    pub const fn name(self) -> &'static str {
        match self {
            Space::Param => "param",
            Space::Global => "global",
            Space::Shared => "shared",
            Space::Local => "local",
        }
    }
}

/// Vector width of a load or store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VecWidth {
    V1,
    V2,
    V4,
}

impl VecWidth {
    pub const fn count(self) -> usize {
        match self {
            VecWidth::V1 => 1,
            VecWidth::V2 => 2,
            VecWidth::V4 => 4,
        }
    }
}

/// Floating-point rounding of an arithmetic result (`.rn`, `.rz`, `.rm`, `.rp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rounding {
    Rn,
    Rz,
    Rm,
    Rp,
}

impl Rounding {
    pub const fn name(self) -> &'static str {
        match self {
            Rounding::Rn => "rn",
            Rounding::Rz => "rz",
            Rounding::Rm => "rm",
            Rounding::Rp => "rp",
        }
    }
}

/// Rounding of a `cvt`: to a float (`.rn` …) or to an integral value (`.rni` …).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CvtRounding {
    Float(Rounding),
    Integral(Rounding),
    /// `.rna`: round to nearest, ties away from zero (only `cvt.rna.tf32.f32`).
    NearestAway,
}

impl CvtRounding {
    pub const fn name(self) -> &'static str {
        match self {
            CvtRounding::Float(r) => r.name(),
            CvtRounding::Integral(Rounding::Rn) => "rni",
            CvtRounding::Integral(Rounding::Rz) => "rzi",
            CvtRounding::Integral(Rounding::Rm) => "rmi",
            CvtRounding::Integral(Rounding::Rp) => "rpi",
            CvtRounding::NearestAway => "rna",
        }
    }
}

/// Binary arithmetic with the shape `op.type d, a, b`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinOp {
    Add,
    Sub,
    /// Floating-point multiply (integer multiply is [`Op::MulInt`]).
    Mul,
    Div,
    Rem,
    Min,
    Max,
    And,
    Or,
    Xor,
    Shl,
    Shr,
}

impl BinOp {
    pub const fn name(self) -> &'static str {
        match self {
            BinOp::Add => "add",
            BinOp::Sub => "sub",
            BinOp::Mul => "mul",
            BinOp::Div => "div",
            BinOp::Rem => "rem",
            BinOp::Min => "min",
            BinOp::Max => "max",
            BinOp::And => "and",
            BinOp::Or => "or",
            BinOp::Xor => "xor",
            BinOp::Shl => "shl",
            BinOp::Shr => "shr",
        }
    }
}

/// Unary operations with the shape `op.type d, a`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnOp {
    Neg,
    Abs,
    Not,
    Popc,
    Clz,
}

impl UnOp {
    pub const fn name(self) -> &'static str {
        match self {
            UnOp::Neg => "neg",
            UnOp::Abs => "abs",
            UnOp::Not => "not",
            UnOp::Popc => "popc",
            UnOp::Clz => "clz",
        }
    }
}

/// Floating-point special functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MathFn {
    Ex2,
    Lg2,
    Rcp,
    Sqrt,
    Rsqrt,
}

impl MathFn {
    pub const fn name(self) -> &'static str {
        match self {
            MathFn::Ex2 => "ex2",
            MathFn::Lg2 => "lg2",
            MathFn::Rcp => "rcp",
            MathFn::Sqrt => "sqrt",
            MathFn::Rsqrt => "rsqrt",
        }
    }
}

/// How a math function or float division is computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Precision {
    /// `.approx` (hardware approximation).
    Approx,
    /// `.full` (division only: full-range approximation, 2 ulp).
    Full,
    /// IEEE-rounded result.
    Rounded(Rounding),
}

/// `mul`/`mad` integer result selection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MulMode {
    Lo,
    Hi,
    Wide,
}

impl MulMode {
    pub const fn name(self) -> &'static str {
        match self {
            MulMode::Lo => "lo",
            MulMode::Hi => "hi",
            MulMode::Wide => "wide",
        }
    }
}

/// `setp` comparison operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Lo,
    Ls,
    Hi,
    Hs,
    Equ,
    Neu,
    Ltu,
    Leu,
    Gtu,
    Geu,
    Num,
    Nan,
}

impl CmpOp {
    pub const fn name(self) -> &'static str {
        match self {
            CmpOp::Eq => "eq",
            CmpOp::Ne => "ne",
            CmpOp::Lt => "lt",
            CmpOp::Le => "le",
            CmpOp::Gt => "gt",
            CmpOp::Ge => "ge",
            CmpOp::Lo => "lo",
            CmpOp::Ls => "ls",
            CmpOp::Hi => "hi",
            CmpOp::Hs => "hs",
            CmpOp::Equ => "equ",
            CmpOp::Neu => "neu",
            CmpOp::Ltu => "ltu",
            CmpOp::Leu => "leu",
            CmpOp::Gtu => "gtu",
            CmpOp::Geu => "geu",
            CmpOp::Num => "num",
            CmpOp::Nan => "nan",
        }
    }

    /// Unsigned-only operators (`lo ls hi hs`).
    pub const fn is_unsigned_only(self) -> bool {
        matches!(self, CmpOp::Lo | CmpOp::Ls | CmpOp::Hi | CmpOp::Hs)
    }

    /// Float-only operators (the unordered forms, `num`, `nan`).
    pub const fn is_float_only(self) -> bool {
        matches!(
            self,
            CmpOp::Equ
                | CmpOp::Neu
                | CmpOp::Ltu
                | CmpOp::Leu
                | CmpOp::Gtu
                | CmpOp::Geu
                | CmpOp::Num
                | CmpOp::Nan
        )
    }
}

/// Atomic operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AtomOp {
    Add,
    Min,
    Max,
    Exch,
    Cas,
    And,
    Or,
}

impl AtomOp {
    pub const fn name(self) -> &'static str {
        match self {
            AtomOp::Add => "add",
            AtomOp::Min => "min",
            AtomOp::Max => "max",
            AtomOp::Exch => "exch",
            AtomOp::Cas => "cas",
            AtomOp::And => "and",
            AtomOp::Or => "or",
        }
    }
}

/// `shfl.sync` modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ShflMode {
    Up,
    Down,
    Bfly,
    Idx,
}

impl ShflMode {
    pub const fn name(self) -> &'static str {
        match self {
            ShflMode::Up => "up",
            ShflMode::Down => "down",
            ShflMode::Bfly => "bfly",
            ShflMode::Idx => "idx",
        }
    }
}

/// `vote.sync` modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VoteMode {
    All,
    Any,
    Uni,
    Ballot,
}

impl VoteMode {
    pub const fn name(self) -> &'static str {
        match self {
            VoteMode::All => "all",
            VoteMode::Any => "any",
            VoteMode::Uni => "uni",
            VoteMode::Ballot => "ballot",
        }
    }
}

/// Memory-barrier scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MembarLevel {
    Cta,
    Gl,
    Sys,
}

impl MembarLevel {
    pub const fn name(self) -> &'static str {
        match self {
            MembarLevel::Cta => "cta",
            MembarLevel::Gl => "gl",
            MembarLevel::Sys => "sys",
        }
    }
}

/// One PTX instruction with its type and modifiers (the "data"); operands are separate.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// `mov.t d, a` (a: register, immediate, special register, or shared symbol address).
    Mov(Type),
    /// `mov.b32 d, {lo, hi}` / `mov.b64 d, {lo, hi}`: pack two halves (ty is the result).
    Pack(Type),
    /// `mov.b32 {lo, hi}, a`: unpack into halves (ty is the source).
    Unpack(Type),
    /// `ld.space{.nc}{.vN}.t d, [addr]`.
    Ld {
        space: Space,
        ty: Type,
        vec: VecWidth,
        nc: bool,
    },
    /// `st.space{.vN}.t [addr], a`.
    St {
        space: Space,
        ty: Type,
        vec: VecWidth,
    },
    /// `cvta.to.global.u64 d, a`.
    CvtaToGlobal,
    /// `op{.rnd}{.ftz}.t d, a, b` (rounding only on float add/sub/mul/div).
    Bin {
        op: BinOp,
        ty: Type,
        rnd: Option<Rounding>,
        ftz: bool,
    },
    /// `div.{approx,full,rnd}.f32 d, a, b` / `div.rn.f64`.
    FDiv {
        ty: Type,
        precision: Precision,
        ftz: bool,
    },
    /// `mul.{lo,hi,wide}.t d, a, b` (integers).
    MulInt { mode: MulMode, ty: Type },
    /// `mad.{lo,hi,wide}.t d, a, b, c` (integers).
    MadInt { mode: MulMode, ty: Type },
    /// `fma.rnd{.ftz}.t d, a, b, c`.
    Fma { ty: Type, rnd: Rounding, ftz: bool },
    /// `op.t d, a`.
    Un { op: UnOp, ty: Type, ftz: bool },
    /// `setp.cmp.t p, a, b`.
    Setp { cmp: CmpOp, ty: Type },
    /// `selp.t d, a, b, p`.
    Selp(Type),
    /// `cvt{.rnd}{.ftz}{.sat}.dst.src d, a`.
    Cvt {
        dst: Type,
        src: Type,
        rnd: Option<CvtRounding>,
        ftz: bool,
        sat: bool,
    },
    /// `fn{.approx,.rnd}{.ftz}.t d, a`.
    Math {
        func: MathFn,
        ty: Type,
        precision: Precision,
        ftz: bool,
    },
    /// `@p bra{.uni} label`.
    Bra { uni: bool },
    /// `bar.sync 0`.
    BarSync,
    /// `membar.level`.
    Membar(MembarLevel),
    /// `atom.space.op.t d, [addr], b{, c}`.
    Atom { space: Space, op: AtomOp, ty: Type },
    /// `red.space.op.t [addr], b`.
    Red { space: Space, op: AtomOp, ty: Type },
    /// `shfl.sync.mode.b32 d, a, b, c, membermask`.
    Shfl(ShflMode),
    /// `vote.sync.mode.pred p, q, membermask` / `vote.sync.ballot.b32 d, q, membermask`.
    Vote(VoteMode),
    /// `ret`.
    Ret,
    /// `prmt.b32 d, a, b, c`: picks four bytes of `{b, a}` by the selector nibbles of `c`.
    Prmt,
    /// `bfe.u32 d, a, b, c`: bits `b .. b + c` of `a`, zero-extended (`b`, `c` < 256).
    Bfe,
    /// `mma.sync.aligned.shape.row.col.d.a.b.c {d…}, {a…}, {b…}, {c…}`: one warp-wide
    /// tensor-core matrix multiply-accumulate (see [`Mma`]).
    Mma(Mma),
    /// `ldmatrix.sync.aligned.m8n8.xN{.trans}.shared.b16 {r…}, [addr]`: each of N 8×8 b16
    /// matrices is read from 8 row addresses supplied by 8 lanes and spread one row per 4 lanes.
    Ldmatrix { count: LdmatrixCount, trans: bool },
    /// The asynchronous-copy family (`cp.async` and its group waits; later TMA and mbarrier).
    Async(AsyncCopy),
    /// A comment line marking a phase (not an instruction; printed as `// text`).
    Comment(String),
}

/// What one operand slot of an instruction accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// A register written by the instruction, of a class that carries the type.
    Dst(Type),
    /// A value read: a register carrying the type, or an immediate of the type where PTX allows.
    Src(Type),
    /// A register read that may not be an immediate.
    SrcReg(Type),
    /// A `{…}` list of `n` destination registers.
    DstVec(Type, usize),
    /// A `{…}` list of `n` source registers.
    SrcVec(Type, usize),
    /// A memory address in the space.
    Addr(Space),
    /// A branch target.
    Label,
    /// `mov` source: register, immediate, special register or shared-symbol address.
    MovSrc(Type),
    /// An integer constant written in the instruction (`cp.async`'s cp-size, `wait_group N`).
    Const(Type),
}

/// The most operands any instruction takes (`shfl.sync`: d, a, b, c, membermask).
const MAX_SLOTS: usize = 5;

/// An instruction's operand slots, in order ([`Op::signature`]): a slice held inline, because
/// the validator and the printer ask for it per instruction and a heap allocation each time
/// was a measurable part of expanding a kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Signature {
    slots: [Slot; MAX_SLOTS],
    len: usize,
}

impl Default for Signature {
    /// No operands.
    fn default() -> Self {
        Self {
            slots: [Slot::Label; MAX_SLOTS],
            len: 0,
        }
    }
}

impl std::ops::Deref for Signature {
    type Target = [Slot];

    fn deref(&self) -> &[Slot] {
        &self.slots[..self.len]
    }
}

/// `sig![a, b, …]`: a [`Signature`] of these slots, written out as one array literal (the
/// unused tail holds `Slot::Label`, never read).
macro_rules! sig {
    (@pad $len:expr; $($slot:expr),*) => {
        Signature {
            slots: [$($slot),*],
            len: $len,
        }
    };
    ($a:expr $(,)?) => {
        sig!(@pad 1; $a, Slot::Label, Slot::Label, Slot::Label, Slot::Label)
    };
    ($a:expr, $b:expr $(,)?) => {
        sig!(@pad 2; $a, $b, Slot::Label, Slot::Label, Slot::Label)
    };
    ($a:expr, $b:expr, $c:expr $(,)?) => {
        sig!(@pad 3; $a, $b, $c, Slot::Label, Slot::Label)
    };
    ($a:expr, $b:expr, $c:expr, $d:expr $(,)?) => {
        sig!(@pad 4; $a, $b, $c, $d, Slot::Label)
    };
    ($a:expr, $b:expr, $c:expr, $d:expr, $e:expr $(,)?) => {
        sig!(@pad 5; $a, $b, $c, $d, $e)
    };
}

/// What an instruction needs of the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Requirement {
    /// The oldest architecture that has it.
    pub min_arch: Arch,
    /// The oldest PTX ISA version that has it.
    pub min_ptx: PtxVersion,
}

impl Requirement {
    const fn new(min_arch: Arch, major: u8, minor: u8) -> Self {
        Self {
            min_arch,
            min_ptx: PtxVersion::new(major, minor),
        }
    }

    /// Supported by every target ptxforge emits for (sm_70, PTX 6.0).
    pub const BASE: Requirement = Requirement::new(Arch::Sm70, 6, 0);

    fn max(self, other: Requirement) -> Requirement {
        let min_arch = if self.min_arch.at_least(other.min_arch) {
            self.min_arch
        } else {
            other.min_arch
        };
        Requirement {
            min_arch,
            min_ptx: self.min_ptx.max(other.min_ptx),
        }
    }
}

fn dot(out: &mut String, part: &str) {
    out.push('.');
    out.push_str(part);
}

impl Op {
    /// The full mnemonic with modifiers, e.g. `ld.global.nc.v4.f32`.
    pub fn mnemonic(&self) -> String {
        let mut s = String::new();
        self.write_mnemonic(&mut s);
        s
    }

    /// Appends [`Self::mnemonic`] to `s` (the emitter prints straight into its output).
    pub fn write_mnemonic(&self, s: &mut String) {
        match self {
            Op::Mov(ty) => {
                s.push_str("mov");
                dot(s, ty.name());
            }
            Op::Pack(ty) | Op::Unpack(ty) => {
                s.push_str("mov");
                dot(s, ty.name());
            }
            Op::Ld { space, ty, vec, nc } => {
                s.push_str("ld");
                dot(s, space.name());
                if *nc {
                    dot(s, "nc");
                }
                push_vec(s, *vec);
                dot(s, ty.name());
            }
            Op::St { space, ty, vec } => {
                s.push_str("st");
                dot(s, space.name());
                push_vec(s, *vec);
                dot(s, ty.name());
            }
            Op::CvtaToGlobal => s.push_str("cvta.to.global.u64"),
            Op::Bin { op, ty, rnd, ftz } => {
                s.push_str(op.name());
                if let Some(r) = rnd {
                    dot(s, r.name());
                }
                if *ftz {
                    dot(s, "ftz");
                }
                dot(s, ty.name());
            }
            Op::FDiv { ty, precision, ftz } => {
                s.push_str("div");
                push_precision(s, *precision);
                if *ftz {
                    dot(s, "ftz");
                }
                dot(s, ty.name());
            }
            Op::MulInt { mode, ty } => {
                s.push_str("mul");
                dot(s, mode.name());
                dot(s, ty.name());
            }
            Op::MadInt { mode, ty } => {
                s.push_str("mad");
                dot(s, mode.name());
                dot(s, ty.name());
            }
            Op::Fma { ty, rnd, ftz } => {
                s.push_str("fma");
                dot(s, rnd.name());
                if *ftz {
                    dot(s, "ftz");
                }
                dot(s, ty.name());
            }
            Op::Un { op, ty, ftz } => {
                s.push_str(op.name());
                if *ftz {
                    dot(s, "ftz");
                }
                dot(s, ty.name());
            }
            Op::Setp { cmp, ty } => {
                s.push_str("setp");
                dot(s, cmp.name());
                dot(s, ty.name());
            }
            Op::Selp(ty) => {
                s.push_str("selp");
                dot(s, ty.name());
            }
            Op::Cvt {
                dst,
                src,
                rnd,
                ftz,
                sat,
            } => {
                s.push_str("cvt");
                if let Some(r) = rnd {
                    dot(s, r.name());
                }
                if *ftz {
                    dot(s, "ftz");
                }
                if *sat {
                    dot(s, "sat");
                }
                dot(s, dst.name());
                dot(s, src.name());
            }
            Op::Math {
                func,
                ty,
                precision,
                ftz,
            } => {
                s.push_str(func.name());
                push_precision(s, *precision);
                if *ftz {
                    dot(s, "ftz");
                }
                dot(s, ty.name());
            }
            Op::Bra { uni } => s.push_str(if *uni { "bra.uni" } else { "bra" }),
            Op::BarSync => s.push_str("bar.sync"),
            Op::Membar(level) => {
                s.push_str("membar");
                dot(s, level.name());
            }
            Op::Atom { space, op, ty } | Op::Red { space, op, ty } => {
                s.push_str(if matches!(self, Op::Atom { .. }) {
                    "atom"
                } else {
                    "red"
                });
                dot(s, space.name());
                dot(s, op.name());
                dot(s, ty.name());
            }
            Op::Shfl(mode) => {
                s.push_str("shfl.sync");
                dot(s, mode.name());
                s.push_str(".b32");
            }
            Op::Vote(mode) => {
                s.push_str("vote.sync");
                dot(s, mode.name());
                s.push_str(if *mode == VoteMode::Ballot {
                    ".b32"
                } else {
                    ".pred"
                });
            }
            Op::Ret => s.push_str("ret"),
            Op::Prmt => s.push_str("prmt.b32"),
            Op::Bfe => s.push_str("bfe.u32"),
            Op::Mma(mma) => s.push_str(&mma.mnemonic()),
            Op::Ldmatrix { count, trans } => {
                s.push_str("ldmatrix.sync.aligned.m8n8");
                dot(s, count.name());
                if *trans {
                    dot(s, "trans");
                }
                s.push_str(".shared.b16");
            }
            Op::Async(a) => s.push_str(&a.mnemonic()),
            Op::Comment(_) => {}
        }
    }

    /// The operand slots, in order.
    pub fn signature(&self) -> Signature {
        use Slot::*;
        match self {
            Op::Mov(ty) => sig![Dst(*ty), MovSrc(*ty)],
            Op::Pack(ty) => sig![Dst(*ty), SrcVec(half_of(*ty), 2)],
            Op::Unpack(ty) => sig![DstVec(half_of(*ty), 2), SrcReg(*ty)],
            Op::Ld { space, ty, vec, .. } => match vec {
                VecWidth::V1 => sig![Dst(*ty), Addr(*space)],
                v => sig![DstVec(*ty, v.count()), Addr(*space)],
            },
            Op::St { space, ty, vec } => match vec {
                VecWidth::V1 => sig![Addr(*space), Src(*ty)],
                v => sig![Addr(*space), SrcVec(*ty, v.count())],
            },
            Op::CvtaToGlobal => sig![Dst(Type::U64), SrcReg(Type::U64)],
            Op::Bin {
                op: BinOp::Shl | BinOp::Shr,
                ty,
                ..
            } => sig![Dst(*ty), Src(*ty), Src(Type::U32)],
            Op::Bin { ty, .. } | Op::FDiv { ty, .. } => sig![Dst(*ty), Src(*ty), Src(*ty)],
            Op::MulInt {
                mode: MulMode::Wide,
                ty,
            } => sig![Dst(widen(*ty)), Src(*ty), Src(*ty)],
            Op::MulInt { ty, .. } => sig![Dst(*ty), Src(*ty), Src(*ty)],
            Op::MadInt {
                mode: MulMode::Wide,
                ty,
            } => sig![Dst(widen(*ty)), Src(*ty), Src(*ty), Src(widen(*ty))],
            Op::MadInt { ty, .. } | Op::Fma { ty, .. } => {
                sig![Dst(*ty), Src(*ty), Src(*ty), Src(*ty)]
            }
            Op::Un { ty, .. } | Op::Math { ty, .. } => sig![Dst(*ty), Src(*ty)],
            Op::Setp { ty, .. } => sig![Dst(Type::Pred), Src(*ty), Src(*ty)],
            Op::Selp(ty) => sig![Dst(*ty), Src(*ty), Src(*ty), SrcReg(Type::Pred)],
            Op::Cvt { dst, src, .. } if is_packed_pair(*dst) => {
                sig![Dst(*dst), SrcReg(*src), SrcReg(*src)]
            }
            Op::Cvt { dst, src, .. } => sig![Dst(*dst), SrcReg(*src)],
            Op::Bra { .. } => sig![Label],
            Op::BarSync => sig![Src(Type::U32)],
            Op::Membar(_) | Op::Ret | Op::Comment(_) => Signature::default(),
            Op::Atom {
                space,
                op: AtomOp::Cas,
                ty,
            } => sig![Dst(*ty), Addr(*space), Src(*ty), Src(*ty)],
            Op::Atom { space, ty, .. } => sig![Dst(*ty), Addr(*space), Src(*ty)],
            Op::Red { space, ty, .. } => sig![Addr(*space), Src(*ty)],
            Op::Shfl(_) => sig![
                Dst(Type::B32),
                SrcReg(Type::B32),
                Src(Type::B32),
                Src(Type::B32),
                Src(Type::B32),
            ],
            Op::Vote(VoteMode::Ballot) => sig![Dst(Type::B32), SrcReg(Type::Pred), Src(Type::B32)],
            Op::Vote(_) => sig![Dst(Type::Pred), SrcReg(Type::Pred), Src(Type::B32)],
            Op::Prmt => sig![
                Dst(Type::B32),
                Src(Type::B32),
                Src(Type::B32),
                Src(Type::B32),
            ],
            Op::Bfe => sig![
                Dst(Type::U32),
                Src(Type::U32),
                Src(Type::U32),
                Src(Type::U32),
            ],
            Op::Mma(mma) => match mma.fragment_regs() {
                Some(n) => sig![
                    DstVec(Mma::acc_reg_type(mma.d), n.d),
                    SrcVec(Mma::input_reg_type(mma.a), n.a),
                    SrcVec(Mma::input_reg_type(mma.b), n.b),
                    SrcVec(Mma::acc_reg_type(mma.c), n.c),
                ],
                // An unsupported form: modifier_error reports it; no operand can fit.
                None => Signature::default(),
            },
            Op::Ldmatrix { count, .. } => {
                sig![DstVec(Type::B32, count.regs()), Addr(Space::Shared)]
            }
            Op::Async(AsyncCopy::Copy { zero_fill, .. }) => {
                if *zero_fill {
                    sig![
                        Addr(Space::Shared),
                        Addr(Space::Global),
                        Const(Type::U32),
                        Src(Type::U32),
                    ]
                } else {
                    sig![Addr(Space::Shared), Addr(Space::Global), Const(Type::U32)]
                }
            }
            Op::Async(AsyncCopy::WaitGroup) => sig![Const(Type::U32)],
            Op::Async(AsyncCopy::CommitGroup | AsyncCopy::WaitAll) => Signature::default(),
        }
    }

    /// What target and PTX version the instruction with these modifiers needs (PTX ISA
    /// "Target ISA notes" / "PTX ISA notes" of each instruction page).
    pub fn requirement(&self) -> Requirement {
        // Constants, not values built per call: the validator asks once per instruction.
        const SM80: Requirement = Requirement::new(Arch::Sm80, 7, 0);
        const SM90: Requirement = Requirement::new(Arch::Sm90, 7, 8);
        const SM75: Requirement = Requirement::new(Arch::Sm75, 6, 5);
        const F16_ABS: Requirement = Requirement::new(Arch::Sm70, 6, 5);
        let (base, sm80, sm90, sm75) = (Requirement::BASE, SM80, SM90, SM75);
        let by_type =
            |ty: Type, bf16_needs: Requirement| if ty.is_bf16() { bf16_needs } else { base };
        match self {
            Op::Bin {
                op: BinOp::Add | BinOp::Sub | BinOp::Mul,
                ty,
                ..
            } => by_type(*ty, sm90),
            Op::Bin {
                op: BinOp::Min | BinOp::Max,
                ty,
                ..
            } if ty.is_half() => sm80,
            Op::Fma { ty, .. } => by_type(*ty, sm80),
            Op::Un {
                op: UnOp::Neg | UnOp::Abs,
                ty,
                ..
            } if ty.is_bf16() => sm80,
            Op::Un {
                op: UnOp::Abs,
                ty: Type::F16 | Type::F16x2,
                ..
            } => F16_ABS,
            Op::Setp { ty, .. } => by_type(*ty, sm90),
            Op::Mma(mma) => match mma.generation() {
                MmaGeneration::Turing => sm75,
                MmaGeneration::Ampere => sm80,
            },
            Op::Ldmatrix { .. } => sm75,
            Op::Async(_) => sm80,
            Op::Cvt { dst, .. } if is_packed_pair(*dst) || *dst == Type::TF32 => sm80,
            Op::Cvt { dst, src, .. } => {
                let to_bf16 = if dst.is_bf16() { sm80 } else { base };
                let from_bf16 = if src.is_bf16() { sm90 } else { base };
                to_bf16.max(from_bf16)
            }
            Op::Atom {
                ty: Type::F64,
                op: AtomOp::Add,
                ..
            } => base,
            _ => base,
        }
    }

    /// Modifier combinations ptxas rejects or that do not exist, as a reason; `None` when fine.
    pub fn modifier_error(&self) -> Option<String> {
        match self {
            Op::Fma { ty, .. } if !ty.is_float() => Some(format!("fma.{ty}: fma takes a float type")),
            Op::Bin { op: BinOp::Rem, ty, .. } if !ty.is_int() => Some(format!("rem.{ty}: rem takes an integer type")),
            Op::Bin { op: BinOp::Div, ty, .. } if ty.is_float() => {
                Some(format!("div.{ty}: float division must use FDiv with a precision (.approx, .full or a rounding)"))
            }
            Op::Bin { op: BinOp::Mul, ty, .. } if !ty.is_float() => {
                Some(format!("mul.{ty}: integer multiply needs .lo, .hi or .wide (MulInt)"))
            }
            Op::Bin { op: BinOp::And | BinOp::Or | BinOp::Xor, ty, .. } if !(ty.is_bits() || *ty == Type::Pred) => {
                Some(format!("logic op on .{ty}: and/or/xor take .pred or .bN"))
            }
            Op::Bin { op: BinOp::Shl, ty, .. } if !ty.is_bits() => Some(format!("shl.{ty}: shl takes .b16/.b32/.b64")),
            Op::Bin { op: BinOp::Shr, ty, .. } if ty.is_float() => Some(format!("shr.{ty}: shr takes an integer type")),
            Op::Bin { rnd: Some(_), ty, .. } if !ty.is_float() => {
                Some(format!("rounding modifier on integer .{ty} arithmetic"))
            }
            Op::Bin { ftz: true, ty, .. } if !matches!(ty, Type::F32 | Type::F16 | Type::F16x2) => {
                Some(format!(".ftz on .{ty}: only f32 and f16 flush subnormals"))
            }
            Op::FDiv { ty: Type::F32, precision: Precision::Approx | Precision::Full, .. } => None,
            Op::FDiv { ty: Type::F32 | Type::F64, precision: Precision::Rounded(_), .. } => None,
            Op::FDiv { ty, precision, .. } => Some(format!("div{} does not exist for .{ty}", precision_name(*precision))),
            Op::MulInt { mode: MulMode::Wide, ty } | Op::MadInt { mode: MulMode::Wide, ty }
                if !matches!(ty, Type::U16 | Type::S16 | Type::U32 | Type::S32) =>
            {
                Some(format!(".wide on .{ty}: only 16- and 32-bit integers widen"))
            }
            Op::MulInt { ty, .. } | Op::MadInt { ty, .. } if !ty.is_int() => {
                Some(format!("integer mul/mad on .{ty}: use fma/mul for floats"))
            }
            Op::Math { func, ty, precision, ftz } => math_modifier_error(*func, *ty, *precision, *ftz),
            Op::Setp { cmp, ty } if cmp.is_unsigned_only() && !(ty.is_unsigned() || ty.is_bits()) => {
                Some(format!("setp.{}.{ty}: unsigned comparison on a non-unsigned type", cmp.name()))
            }
            Op::Setp { cmp, ty } if cmp.is_float_only() && !ty.is_float() => {
                Some(format!("setp.{}.{ty}: unordered comparison on a non-float type", cmp.name()))
            }
            Op::Setp { ty: Type::Pred, .. } => Some("setp on .pred".to_string()),
            Op::Cvt { dst, src, rnd, .. } => cvt_modifier_error(*dst, *src, *rnd),
            Op::Ld { ty, .. } | Op::St { ty, .. } | Op::Mov(ty) if ty.is_half() && *ty != Type::F16x2 => {
                Some(format!("ld/st/mov with .{ty}: half values move as .b16 (ptxas: unexpected instruction types)"))
            }
            Op::Ld { ty: Type::F16x2 | Type::BF16x2, .. } | Op::St { ty: Type::F16x2 | Type::BF16x2, .. } => {
                Some("ld/st of packed halves: move them as .b32".to_string())
            }
            Op::Ld { nc: true, space, .. } if *space != Space::Global => Some(".nc loads are global only".to_string()),
            Op::Atom { op, ty, space } | Op::Red { op, ty, space } => atom_modifier_error(*op, *ty, *space),
            Op::Mma(mma) if mma.fragment_regs().is_none() => Some(format!(
                "{}: unsupported mma form (supported: m16n8k16 f16/bf16 -> f32, m16n8k16 f16 -> f16, m16n8k8 f16 -> f32/f16, m16n8k8 tf32 -> f32; C and D of one type)",
                mma.mnemonic()
            )),
            _ => None,
        }
    }

    /// Rules on the values of constant operands, as `(operand index, reason)`: `cp.async`
    /// copies 4, 8 or 16 bytes, `.cg` only 16, and an immediate src-size may not exceed the
    /// cp-size (undefined behaviour in the ISA); `wait_group` counts are non-negative.
    pub fn operand_value_error(&self, args: &[Operand]) -> Option<(usize, String)> {
        let int = |i: usize| match args.get(i) {
            Some(Operand::Imm(super::Imm::Int(v))) => Some(*v),
            _ => None,
        };
        match self {
            Op::Async(AsyncCopy::Copy { cache, zero_fill }) => {
                let size = int(2)?;
                if !CP_ASYNC_SIZES.contains(&size) {
                    return Some((2, format!("cp-size {size} is not one of 4, 8, 16")));
                }
                if *cache == super::tensor::CacheLevel::Cg && size != 16 {
                    return Some((
                        2,
                        format!("cp.async.cg copies 16 bytes only; cp-size is {size}"),
                    ));
                }
                match int(3) {
                    Some(src) if *zero_fill && !(0..=size).contains(&src) => Some((
                        3,
                        format!("src-size {src} is outside 0..={size} (the cp-size)"),
                    )),
                    _ => None,
                }
            }
            Op::Async(AsyncCopy::WaitGroup) => match int(0) {
                Some(n) if n < 0 => Some((0, format!("wait_group count {n} is negative"))),
                _ => None,
            },
            _ => None,
        }
    }

    /// Instructions every lane of a full, converged warp must execute together (`.aligned`):
    /// a guard or a divergent branch around them is undefined behaviour.
    pub fn is_warp_aligned(&self) -> bool {
        matches!(self, Op::Mma(_) | Op::Ldmatrix { .. })
    }

    /// Whether this ends a basic block's straight-line flow unconditionally when unguarded.
    pub fn is_terminator(&self) -> bool {
        matches!(self, Op::Bra { .. } | Op::Ret)
    }
}

fn push_vec(s: &mut String, vec: VecWidth) {
    match vec {
        VecWidth::V1 => {}
        VecWidth::V2 => dot(s, "v2"),
        VecWidth::V4 => dot(s, "v4"),
    }
}

fn precision_name(p: Precision) -> &'static str {
    match p {
        Precision::Approx => ".approx",
        Precision::Full => ".full",
        Precision::Rounded(r) => match r {
            Rounding::Rn => ".rn",
            Rounding::Rz => ".rz",
            Rounding::Rm => ".rm",
            Rounding::Rp => ".rp",
        },
    }
}

fn push_precision(s: &mut String, p: Precision) {
    s.push_str(precision_name(p));
}

fn half_of(ty: Type) -> Type {
    match ty {
        Type::B64 => Type::B32,
        _ => Type::B16,
    }
}

fn widen(ty: Type) -> Type {
    match ty {
        Type::U16 => Type::U32,
        Type::S16 => Type::S32,
        Type::U32 => Type::U64,
        Type::S32 => Type::S64,
        other => other,
    }
}

fn math_modifier_error(func: MathFn, ty: Type, precision: Precision, ftz: bool) -> Option<String> {
    let name = format!("{}{}.{ty}", func.name(), precision_name(precision));
    match (func, ty, precision) {
        (_, Type::F32, Precision::Approx) => None,
        (MathFn::Rcp | MathFn::Sqrt, Type::F32 | Type::F64, Precision::Rounded(_)) => None,
        (MathFn::Rcp, Type::F64, Precision::Approx) if ftz => None,
        (MathFn::Rcp, Type::F64, Precision::Approx) => Some(format!("{name} requires .ftz")),
        (MathFn::Rsqrt, Type::F64, Precision::Approx) => None,
        (MathFn::Ex2, Type::F64, _) => Some(format!("{name} does not exist (there is no f64 ex2)")),
        _ => Some(format!("{name} does not exist")),
    }
}

/// `f16x2`/`bf16x2`: the two-result forms of `cvt` (`cvt.rn.f16x2.f32 d, a, b`).
fn is_packed_pair(ty: Type) -> bool {
    matches!(ty, Type::F16x2 | Type::BF16x2)
}

fn cvt_modifier_error(dst: Type, src: Type, rnd: Option<CvtRounding>) -> Option<String> {
    let name = format!("cvt.{dst}.{src}");
    let rn = Some(CvtRounding::Float(Rounding::Rn));
    if is_packed_pair(dst) || dst == Type::TF32 || rnd == Some(CvtRounding::NearestAway) {
        // ptxforge emits the round-to-nearest forms the ISA defines for these targets only.
        return match (dst, src, rnd) {
            (Type::F16x2 | Type::BF16x2, Type::F32, r) if r == rn => None,
            (Type::TF32, Type::F32, Some(CvtRounding::NearestAway)) => None,
            (Type::F16x2 | Type::BF16x2, _, _) => Some(format!(
                "{name}: packed conversion exists only as cvt.rn.{dst}.f32"
            )),
            _ => Some(format!(
                "{name}: tf32 conversion exists only as cvt.rna.tf32.f32"
            )),
        };
    }
    if is_packed_pair(src) || src == Type::TF32 {
        return Some(format!("{name}: no conversion from packed or tf32 values"));
    }
    if dst == Type::Pred || src == Type::Pred || dst.is_bits() || src.is_bits() {
        return Some(format!(
            "{name}: cvt converts between integer and float types"
        ));
    }
    let narrowing_float = dst.is_float() && src.is_float() && dst.bits() < src.bits();
    let int_to_float = dst.is_float() && src.is_int();
    let float_to_int = dst.is_int() && src.is_float();
    let same_float = dst.is_float() && dst == src;
    match rnd {
        None if narrowing_float || int_to_float => Some(format!("{name} requires a float rounding modifier (.rn …)")),
        None if float_to_int => Some(format!("{name} requires an integer rounding modifier (.rni, .rzi …)")),
        Some(CvtRounding::Float(_)) if !(narrowing_float || int_to_float) => {
            Some(format!("{name}: a float rounding modifier is only valid when the result is a narrower float or converts an integer"))
        }
        Some(CvtRounding::Integral(_)) if !(float_to_int || same_float) => {
            Some(format!("{name}: an integral rounding modifier needs a float source"))
        }
        _ => None,
    }
}

fn atom_modifier_error(op: AtomOp, ty: Type, space: Space) -> Option<String> {
    if !matches!(space, Space::Global | Space::Shared) {
        return Some("atomics work on global or shared memory".to_string());
    }
    let ok = match op {
        AtomOp::Add => matches!(
            ty,
            Type::U32 | Type::S32 | Type::U64 | Type::F32 | Type::F64
        ),
        AtomOp::Min | AtomOp::Max => matches!(ty, Type::U32 | Type::S32 | Type::U64 | Type::S64),
        AtomOp::Exch | AtomOp::Cas | AtomOp::And | AtomOp::Or => {
            matches!(ty, Type::B32 | Type::B64)
        }
    };
    (!ok).then(|| format!("atom/red .{}.{ty} does not exist", op.name()))
}
