//! The typed builder templates are written in.
//!
//! Registers carry their element type (`Reg<F32>`, `Reg<U64>`, [`Pred`]), so most misuse is a
//! Rust type error; what the types cannot catch (a label never placed, a read before any write,
//! an instruction the arch lacks) is caught by the validator when the module is built. Control
//! flow is structured (`if_then`, `for_range`, `while_loop`) and allocates its own labels.
//!
//! ```
//! use ptxforge_runtime::builder::{KernelBuilder, ModuleBuilder, F32, U32};
//! use ptxforge_runtime::Arch;
//!
//! let mut k = KernelBuilder::new("scale", Arch::Sm80);
//! let x = k.param_ptr::<F32>("x");
//! let n = k.param::<U32>("n");
//! let x = k.global_ptr(x);
//! let n = k.load_param(n);
//! let i = k.global_index_x();
//! let in_bounds = k.setp_lt(i, n);
//! k.if_then(in_bounds, |k| {
//!     let addr = k.elem_addr(x, i);
//!     let v = k.ld_global(addr, 0);
//!     let v = k.mul(v, 2.0f32);
//!     k.st_global(addr, 0, v);
//! });
//! let ptx = ModuleBuilder::new(Arch::Sm80).kernel(k).emit().unwrap();
//! assert!(ptx.contains(".entry scale"));
//! ```

mod control;
mod math;
mod memory;
mod tensor;
mod types;

pub use memory::{GlobalPtr, ParamHandle, SharedArr};
pub use tensor::{
    FragA, FragB, FragC, LdmatrixFragment, MmaAccum, MmaInput, MmaShapeKind, PackedHalf, M16N8K16,
    M16N8K8,
};
pub use types::{
    BF16x2, F16x2, Float, Int, Pred, Reg, Scalar, Val, B32, BF16, F16, F32, F64, S32, S64, TF32,
    U16, U32, U64,
};

use std::marker::PhantomData;

use crate::arch::Arch;
use crate::emit::emit;
use crate::ir::{
    BlockShape, Guard, Imm, Inst, Kernel, LabelId, LabelInfo, Module, Op, Operand, RegClass, RegId,
    SpecialReg, Stmt,
};
use crate::validate::{validate, ValidModule, ValidationErrors};

/// Builds one kernel.
#[derive(Debug)]
pub struct KernelBuilder {
    kernel: Kernel,
    arch: Arch,
}

impl KernelBuilder {
    /// Starts kernel `name` for `arch`.
    pub fn new(name: impl Into<String>, arch: Arch) -> Self {
        Self {
            kernel: Kernel {
                name: name.into(),
                params: Vec::new(),
                regs: Vec::new(),
                labels: Vec::new(),
                shared: Vec::new(),
                max_dynamic_shared_bytes: 0,
                block_shape: None,
                max_registers: None,
                body: Vec::new(),
            },
            arch,
        }
    }

    /// The target architecture (templates branch on its predicates).
    pub fn arch(&self) -> Arch {
        self.arch
    }

    /// The kernel's name.
    pub fn name(&self) -> &str {
        &self.kernel.name
    }

    /// Declares `.reqntid x, y, z`: the kernel must be launched with exactly this block.
    pub fn require_block(&mut self, block: [u32; 3]) {
        self.kernel.block_shape = Some(BlockShape::Exact(block));
    }

    /// Declares `.maxnreg n`: ptxas may give each thread up to `n` registers. Without it, ptxas
    /// chooses its own register target for the block shape, which for some kernels is below
    /// what they need (they then spill although the block's register budget had room).
    pub fn max_registers(&mut self, n: u32) {
        self.kernel.max_registers = Some(n);
    }

    /// Declares `.maxntid x, y, z`.
    pub fn max_block(&mut self, block: [u32; 3]) {
        self.kernel.block_shape = Some(BlockShape::Max(block));
    }

    /// Finishes the kernel, ending it with `ret` (validation happens when the module is built).
    pub fn finish(mut self) -> Kernel {
        let ends_in_ret = matches!(
            self.kernel.body.last(),
            Some(Stmt::Inst(Inst {
                guard: None,
                op: Op::Ret,
                ..
            }))
        );
        if !ends_in_ret {
            self.ret();
        }
        self.kernel
    }

    // ---- registers ----------------------------------------------------------------------

    fn alloc(&mut self, class: RegClass) -> RegId {
        let id = RegId(self.kernel.regs.len() as u32);
        self.kernel.regs.push(class);
        id
    }

    /// A fresh, unwritten register of type `T` (for loop-carried variables; write it first).
    pub fn reg<T: Scalar>(&mut self) -> Reg<T> {
        Reg {
            id: self.alloc(T::TYPE.class()),
            _t: PhantomData,
        }
    }

    /// A fresh, unwritten predicate register.
    pub fn pred(&mut self) -> Pred {
        Pred(self.alloc(RegClass::Pred))
    }

    /// A register initialised to `v` (a mutable variable).
    pub fn var<T: Scalar>(&mut self, v: impl Into<Val<T>>) -> Reg<T> {
        let d = self.reg::<T>();
        self.assign(d, v);
        d
    }

    /// `d = v` (`mov`).
    pub fn assign<T: Scalar>(&mut self, d: Reg<T>, v: impl Into<Val<T>>) {
        let src = v.into().operand();
        self.push(Op::Mov(T::MOVE_TYPE), vec![Operand::Reg(d.id), src]);
    }

    /// `p = q` for predicates.
    pub fn assign_pred(&mut self, p: Pred, q: Pred) {
        self.push(
            Op::Mov(crate::ir::Type::Pred),
            vec![Operand::Reg(p.0), Operand::Reg(q.0)],
        );
    }

    /// Reads a special register.
    pub fn special(&mut self, sreg: SpecialReg) -> Reg<U32> {
        let d = self.reg::<U32>();
        self.push(
            Op::Mov(crate::ir::Type::U32),
            vec![Operand::Reg(d.id), Operand::Special(sreg)],
        );
        d
    }

    pub fn tid_x(&mut self) -> Reg<U32> {
        self.special(SpecialReg::TidX)
    }

    pub fn tid_y(&mut self) -> Reg<U32> {
        self.special(SpecialReg::TidY)
    }

    pub fn ntid_x(&mut self) -> Reg<U32> {
        self.special(SpecialReg::NtidX)
    }

    pub fn ctaid_x(&mut self) -> Reg<U32> {
        self.special(SpecialReg::CtaidX)
    }

    pub fn ctaid_y(&mut self) -> Reg<U32> {
        self.special(SpecialReg::CtaidY)
    }

    pub fn ctaid_z(&mut self) -> Reg<U32> {
        self.special(SpecialReg::CtaidZ)
    }

    pub fn nctaid_x(&mut self) -> Reg<U32> {
        self.special(SpecialReg::NctaidX)
    }

    pub fn laneid(&mut self) -> Reg<U32> {
        self.special(SpecialReg::LaneId)
    }

    /// `ctaid.x * ntid.x + tid.x`.
    pub fn global_index_x(&mut self) -> Reg<U32> {
        let tid = self.tid_x();
        let ntid = self.ntid_x();
        let ctaid = self.ctaid_x();
        self.mad_lo(ctaid, ntid, tid)
    }

    // ---- raw emission -------------------------------------------------------------------

    pub(crate) fn push(&mut self, op: Op, args: Vec<Operand>) {
        self.kernel.body.push(Stmt::Inst(Inst {
            guard: None,
            op,
            args,
        }));
    }

    pub(crate) fn push_guarded(&mut self, guard: Option<Guard>, op: Op, args: Vec<Operand>) {
        self.kernel.body.push(Stmt::Inst(Inst { guard, op, args }));
    }

    /// A comment line marking a phase in the emitted PTX.
    pub fn comment(&mut self, text: impl Into<String>) {
        self.push(Op::Comment(text.into()), vec![]);
    }

    /// A new label with a readable stem; place it with [`KernelBuilder::place`].
    pub fn label(&mut self, stem: &str) -> LabelId {
        let id = LabelId(self.kernel.labels.len() as u32);
        self.kernel.labels.push(LabelInfo {
            stem: stem.to_string(),
        });
        id
    }

    /// Places a label at the current position.
    pub fn place(&mut self, label: LabelId) {
        self.kernel.body.push(Stmt::Label(label));
    }

    /// Unconditional branch.
    pub fn bra(&mut self, target: LabelId) {
        self.push(Op::Bra { uni: false }, vec![Operand::Label(target)]);
    }

    /// Branch when `p` holds (or, `negated`, when it does not).
    pub fn bra_if(&mut self, p: Pred, negated: bool, target: LabelId) {
        self.push_guarded(
            Some(Guard { pred: p.0, negated }),
            Op::Bra { uni: false },
            vec![Operand::Label(target)],
        );
    }

    /// `ret`.
    pub fn ret(&mut self) {
        self.push(Op::Ret, vec![]);
    }

    /// `bar.sync 0`: every thread of the block waits here. Keep it out of divergent code.
    pub fn bar_sync(&mut self) {
        self.push(Op::BarSync, vec![Operand::Imm(Imm::Int(0))]);
    }

    /// `membar.level`.
    pub fn membar(&mut self, level: crate::ir::MembarLevel) {
        self.push(Op::Membar(level), vec![]);
    }
}

/// Builds a module of kernels for one target, validates it and emits PTX.
#[derive(Debug)]
pub struct ModuleBuilder {
    arch: Arch,
    kernels: Vec<Kernel>,
}

impl ModuleBuilder {
    pub fn new(arch: Arch) -> Self {
        Self {
            arch,
            kernels: Vec::new(),
        }
    }

    /// Adds a finished kernel.
    pub fn kernel(mut self, kernel: KernelBuilder) -> Self {
        self.kernels.push(kernel.finish());
        self
    }

    /// Adds a finished kernel in place.
    pub fn push(&mut self, kernel: KernelBuilder) {
        self.kernels.push(kernel.finish());
    }

    /// The module at the lowest PTX version that covers the target and every instruction.
    pub fn module(self) -> Module {
        let mut module = Module::new(self.arch);
        // Plain loops, not a `flat_map`/`filter_map` chain: this visits every instruction at
        // every expansion, where the macro's dependencies build unoptimised by default.
        for kernel in &self.kernels {
            for stmt in &kernel.body {
                if let Stmt::Inst(i) = stmt {
                    module.version = module.version.max(i.op.requirement().min_ptx);
                }
            }
        }
        module.kernels = self.kernels;
        module
    }

    /// Validates the module.
    pub fn build(self) -> Result<ValidModule, ValidationErrors> {
        validate(self.module())
    }

    /// Validates and prints the module.
    pub fn emit(self) -> Result<String, ValidationErrors> {
        self.build().map(|m| emit(&m))
    }
}
