//! The untyped core IR: kernels as flat instruction lists over typed ids into per-kernel arenas.
//!
//! Registers, labels, parameters and shared arrays are `u32` newtypes indexing the kernel's own
//! tables. Nothing here is statically typed beyond that: the validator checks every operand
//! against the instruction table ([`inst`]); static typing lives in the builder.

pub mod inst;
pub mod tensor;
pub mod types;

pub use inst::{
    AtomOp, BinOp, CmpOp, CvtRounding, MathFn, MembarLevel, MulMode, Op, Precision, Requirement,
    Rounding, ShflMode, Signature, Slot, Space, UnOp, VecWidth, VoteMode,
};
pub use tensor::{AsyncCopy, CacheLevel, FragmentRegs, LdmatrixCount, Mma, MmaShape};
pub use types::{RegClass, Type};

use crate::arch::{Arch, PtxVersion};

/// A virtual register of the kernel (index into [`Kernel::regs`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RegId(pub u32);

/// A branch target of the kernel (index into [`Kernel::labels`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LabelId(pub u32);

/// A kernel parameter (index into [`Kernel::params`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ParamId(pub u32);

/// A shared-memory array of the kernel (index into [`Kernel::shared`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SharedId(pub u32);

/// A special (read-only, hardware-provided) register.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SpecialReg {
    TidX,
    TidY,
    TidZ,
    NtidX,
    NtidY,
    NtidZ,
    CtaidX,
    CtaidY,
    CtaidZ,
    NctaidX,
    NctaidY,
    NctaidZ,
    LaneId,
    WarpId,
}

impl SpecialReg {
    pub const fn name(self) -> &'static str {
        match self {
            SpecialReg::TidX => "%tid.x",
            SpecialReg::TidY => "%tid.y",
            SpecialReg::TidZ => "%tid.z",
            SpecialReg::NtidX => "%ntid.x",
            SpecialReg::NtidY => "%ntid.y",
            SpecialReg::NtidZ => "%ntid.z",
            SpecialReg::CtaidX => "%ctaid.x",
            SpecialReg::CtaidY => "%ctaid.y",
            SpecialReg::CtaidZ => "%ctaid.z",
            SpecialReg::NctaidX => "%nctaid.x",
            SpecialReg::NctaidY => "%nctaid.y",
            SpecialReg::NctaidZ => "%nctaid.z",
            SpecialReg::LaneId => "%laneid",
            SpecialReg::WarpId => "%warpid",
        }
    }
}

/// An immediate value, stored as the bits of its type.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Imm {
    Int(i64),
    F32(f32),
    F64(f64),
}

/// The base of a memory address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddrBase {
    Reg(RegId),
    Param(ParamId),
    Shared(SharedId),
}

/// `[base + offset]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Address {
    pub base: AddrBase,
    pub offset: i32,
}

/// One operand.
#[derive(Debug, Clone, PartialEq)]
pub enum Operand {
    Reg(RegId),
    Imm(Imm),
    Special(SpecialReg),
    /// The address of a shared array (`mov.u32 %r, tile;`).
    SharedAddr(SharedId),
    Vec(Vec<RegId>),
    Addr(Address),
    Label(LabelId),
}

/// An instruction guard `@p` / `@!p`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Guard {
    pub pred: RegId,
    pub negated: bool,
}

/// One instruction: optional guard, the table entry with its modifiers, the operands.
#[derive(Debug, Clone, PartialEq)]
pub struct Inst {
    pub guard: Option<Guard>,
    pub op: Op,
    pub args: Vec<Operand>,
}

/// A statement of a kernel body: an instruction or a label placement.
#[derive(Debug, Clone, PartialEq)]
pub enum Stmt {
    Inst(Inst),
    Label(LabelId),
}

/// A declared kernel parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Param {
    pub name: String,
    pub ty: Type,
    /// For pointer parameters (`.u64` global addresses): the element type pointed at.
    pub pointee: Option<Type>,
}

/// A label's name stem (printed as `$L_<stem>_<id>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelInfo {
    pub stem: String,
}

/// A shared-memory array.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedArray {
    pub name: String,
    pub align: u32,
    /// Size in bytes; `None` for the dynamic (`.extern .shared`) array sized at launch.
    pub bytes: Option<u32>,
}

/// Block-shape performance directives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockShape {
    /// `.reqntid x, y, z`: the kernel must be launched with exactly this block.
    Exact([u32; 3]),
    /// `.maxntid x, y, z`: at most this many threads per dimension.
    Max([u32; 3]),
}

/// One `.entry` kernel.
#[derive(Debug, Clone, PartialEq)]
pub struct Kernel {
    pub name: String,
    pub params: Vec<Param>,
    pub regs: Vec<RegClass>,
    pub labels: Vec<LabelInfo>,
    pub shared: Vec<SharedArray>,
    /// The largest dynamic shared memory the kernel is meant to be launched with (bytes).
    pub max_dynamic_shared_bytes: u32,
    pub block_shape: Option<BlockShape>,
    /// `.maxnreg n`: the most registers per thread ptxas may allocate (it otherwise picks its
    /// own target, which can be lower than the block shape allows and spill).
    pub max_registers: Option<u32>,
    pub body: Vec<Stmt>,
}

impl Kernel {
    /// Total static shared memory in bytes (each array aligned).
    pub fn static_shared_bytes(&self) -> u64 {
        self.shared.iter().fold(0u64, |acc, s| match s.bytes {
            Some(b) => acc.next_multiple_of(u64::from(s.align.max(1))) + u64::from(b),
            None => acc,
        })
    }

    /// Whether the kernel declares the dynamic shared array.
    pub fn uses_dynamic_shared(&self) -> bool {
        self.shared.iter().any(|s| s.bytes.is_none())
    }
}

/// A PTX module: one target, one PTX version, any number of kernels.
#[derive(Debug, Clone, PartialEq)]
pub struct Module {
    pub version: PtxVersion,
    pub target: Arch,
    pub kernels: Vec<Kernel>,
}

impl Module {
    /// An empty module for `target` at the PTX version that target needs.
    pub fn new(target: Arch) -> Self {
        Self {
            version: target.min_ptx_version(),
            target,
            kernels: Vec::new(),
        }
    }
}
