//! The validator: the only way to a [`ValidModule`], which is the only thing the emitter prints.
//!
//! Invariants checked, per kernel (errors are data with kernel, statement index and operand):
//!
//! 1. **Ids resolve.** Every register, label, parameter and shared-array id indexes its arena.
//! 2. **Labels are placed exactly once**, and every branch targets a placed label.
//! 3. **Registers are written before they are read on some path** from the entry (a forward
//!    "maybe written" data-flow over the control-flow graph; a read no write can reach is an
//!    error).
//! 4. **Operands fit the instruction** as the instruction table ([`crate::ir::inst`]) describes it:
//!    operand count, slot kind (destination register, source, vector, address, label), register
//!    class carrying the instruction type, immediates only where PTX allows them, addresses in the
//!    right state space (a parameter address only for `ld.param`, a shared array only for
//!    `.shared`), guards are predicate registers.
//! 5. **The instruction and its modifiers exist**: modifier combinations ptxas rejects (missing
//!    rounding on `fma`/`div`/f64 math, `ex2.approx.f64`, half-typed `ld/st/mov`, …) are errors.
//! 6. **The target has it**: each instruction's minimum architecture and PTX version (from the
//!    table) are met by the module's target and `.version`, and the `.version` is at least what the
//!    target needs.
//! 7. **Resources fit the arch**: static shared memory ≤ 48 KiB, static + declared dynamic shared
//!    memory ≤ the arch's dynamic maximum, block-shape directives ≤ the arch's threads per block,
//!    `.maxnreg` within the arch's registers per thread.
//! 8. **Barriers are not predicated** (`@p bar.sync` is divergent by construction).
//! 9. **Names are unique and printable**: kernel, parameter and shared-array names are PTX
//!    identifiers, unique in their scope; phase comments are single-line ASCII (ptxas rejects
//!    any non-ASCII character in the file).
//! 10. **Warp-wide `.aligned` instructions run in a converged, full warp** as far as the
//!     validator can see: `mma.sync` and `ldmatrix` are never guarded and never inside a
//!     divergent region (a branch or return on a per-lane predicate; see `divergence` for the
//!     exact rule). The interpreter's synccheck catches what this static view cannot.
//! 11. **Constant operands have legal values**: `cp.async` copies 4, 8 or 16 bytes, `.cg` only
//!     16, an immediate src-size is at most the cp-size. Tensor-core fragments are register
//!     vectors of the count and register type the form needs (covered by invariant 4: an `.f32`
//!     register cannot carry an `.f16x2` A fragment, a 2-register vector is not a 4-register A).

mod defined;
mod divergence;
mod uses;

use std::collections::HashSet;
use std::fmt;

use crate::ir::{
    AddrBase, Imm, Inst, Kernel, Module, Op, Operand, RegClass, RegId, Slot, Space, Stmt, Type,
};
use uses::RegUses;

/// Why a kernel is invalid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationError {
    pub kernel: String,
    /// Index into the kernel body, when the error is about one statement.
    pub stmt: Option<usize>,
    /// Operand index within that instruction.
    pub operand: Option<usize>,
    /// The instruction as a mnemonic, when there is one.
    pub mnemonic: Option<String>,
    pub reason: String,
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "kernel `{}`", self.kernel)?;
        if let Some(i) = self.stmt {
            write!(f, ", instruction {i}")?;
        }
        if let Some(m) = &self.mnemonic {
            write!(f, " (`{m}`)")?;
        }
        if let Some(o) = self.operand {
            write!(f, ", operand {o}")?;
        }
        write!(f, ": {}", self.reason)
    }
}

/// Every problem found in a module.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid PTX module: {}", .0.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("; "))]
pub struct ValidationErrors(pub Vec<ValidationError>);

/// A module that passed validation; the emitter's only input.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidModule(Module);

impl ValidModule {
    pub fn module(&self) -> &Module {
        &self.0
    }
}

/// Checks every invariant in the module doc.
pub fn validate(module: Module) -> Result<ValidModule, ValidationErrors> {
    let mut errors = Vec::new();
    if module.version < module.target.min_ptx_version() {
        errors.push(ValidationError {
            kernel: String::new(),
            stmt: None,
            operand: None,
            mnemonic: None,
            reason: format!(
                "PTX version {} is older than {} needed by {}",
                module.version,
                module.target.min_ptx_version(),
                module.target
            ),
        });
    }
    let mut names = HashSet::new();
    for kernel in &module.kernels {
        let mut cx = KernelCheck {
            module: &module,
            kernel,
            errors: &mut errors,
        };
        if !names.insert(kernel.name.as_str()) {
            cx.error(
                None,
                None,
                format!("duplicate kernel name `{}`", kernel.name),
            );
        }
        cx.check();
    }
    if errors.is_empty() {
        Ok(ValidModule(module))
    } else {
        Err(ValidationErrors(errors))
    }
}

struct KernelCheck<'a> {
    module: &'a Module,
    kernel: &'a Kernel,
    errors: &'a mut Vec<ValidationError>,
}

fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    match chars.next() {
        Some(c) if c.is_ascii_alphabetic() => {}
        Some('_' | '$') if name.len() > 1 => {}
        _ => return false,
    }
    chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
}

impl KernelCheck<'_> {
    fn error(&mut self, stmt: Option<usize>, operand: Option<usize>, reason: String) {
        let mnemonic = stmt.and_then(|i| match &self.kernel.body[i] {
            Stmt::Inst(inst) => Some(inst.op.mnemonic()),
            Stmt::Label(_) => None,
        });
        self.errors.push(ValidationError {
            kernel: self.kernel.name.clone(),
            stmt,
            operand,
            mnemonic,
            reason,
        });
    }

    fn check(&mut self) {
        self.check_names();
        self.check_resources();
        let placed = self.check_labels();
        let mut uses = RegUses::with_capacity(self.kernel.body.len());
        for (i, stmt) in self.kernel.body.iter().enumerate() {
            match stmt {
                Stmt::Inst(inst) => self.check_inst(i, inst, &placed, &mut uses),
                Stmt::Label(_) => uses.push_label(),
            }
        }
        if self.errors.is_empty() {
            self.check_defined_before_use(&placed, &uses);
            self.check_convergence(&placed, &uses);
        }
    }

    /// Invariant 10.
    fn check_convergence(&mut self, placed: &[Option<usize>], uses: &RegUses) {
        let regions = divergence::divergent_regions(self.kernel, placed, uses);
        for (i, stmt) in self.kernel.body.iter().enumerate() {
            let Stmt::Inst(inst) = stmt else { continue };
            if !inst.op.is_warp_aligned() {
                continue;
            }
            if let Some(by) = regions[i] {
                self.error(
                    Some(i),
                    None,
                    format!(
                        "warp-wide instruction inside divergent control flow (the branch or return at instruction {by} depends on a per-lane value); every lane of the warp must execute it together"
                    ),
                );
            }
        }
    }

    fn check_names(&mut self) {
        let k = self.kernel;
        if !is_identifier(&k.name) {
            self.error(
                None,
                None,
                format!("kernel name `{}` is not a PTX identifier", k.name),
            );
        }
        let mut seen = HashSet::new();
        let names = k
            .params
            .iter()
            .map(|p| &p.name)
            .chain(k.shared.iter().map(|s| &s.name));
        for name in names {
            if !is_identifier(name) {
                self.error(None, None, format!("`{name}` is not a PTX identifier"));
            } else if !seen.insert(name.as_str()) {
                self.error(
                    None,
                    None,
                    format!("duplicate parameter or shared-array name `{name}`"),
                );
            }
        }
        if k.shared.iter().filter(|s| s.bytes.is_none()).count() > 1 {
            self.error(None, None, "more than one dynamic shared array".to_string());
        }
    }

    fn check_resources(&mut self) {
        let arch = self.module.target;
        self.check_max_registers(arch);
        let static_bytes = self.kernel.static_shared_bytes();
        if static_bytes > u64::from(arch.max_static_shared_bytes()) {
            self.error(
                None,
                None,
                format!(
                    "static shared memory {static_bytes} B exceeds the {} B static limit; use dynamic shared memory",
                    arch.max_static_shared_bytes()
                ),
            );
        }
        let total = static_bytes + u64::from(self.kernel.max_dynamic_shared_bytes);
        if total > u64::from(arch.max_dynamic_shared_bytes()) {
            self.error(
                None,
                None,
                format!(
                    "shared memory {total} B (static + dynamic) exceeds {arch}'s maximum of {} B per block",
                    arch.max_dynamic_shared_bytes()
                ),
            );
        }
        if self.kernel.max_dynamic_shared_bytes > 0 && !self.kernel.uses_dynamic_shared() {
            self.error(
                None,
                None,
                "dynamic shared memory requested but no dynamic shared array declared".into(),
            );
        }
        if let Some(shape) = self.kernel.block_shape {
            let dims = match shape {
                crate::ir::BlockShape::Exact(d) | crate::ir::BlockShape::Max(d) => d,
            };
            let threads: u64 = dims.iter().map(|&d| u64::from(d)).product();
            if dims.contains(&0) || threads > u64::from(arch.max_threads_per_block()) {
                self.error(
                    None,
                    None,
                    format!(
                        "block shape {dims:?} ({threads} threads) is outside 1..={} threads per block",
                        arch.max_threads_per_block()
                    ),
                );
            }
        }
    }

    /// `.maxnreg` within 1..= the arch's registers per thread.
    fn check_max_registers(&mut self, arch: crate::arch::Arch) {
        if let Some(n) = self.kernel.max_registers {
            let max = arch.max_registers_per_thread();
            if n == 0 || n > max {
                self.error(
                    None,
                    None,
                    format!(".maxnreg {n} is outside 1..={max} registers per thread on {arch}"),
                );
            }
        }
    }

    /// Returns, per label, the statement index where it is placed.
    fn check_labels(&mut self) -> Vec<Option<usize>> {
        let mut placed = vec![None; self.kernel.labels.len()];
        for (i, stmt) in self.kernel.body.iter().enumerate() {
            if let Stmt::Label(l) = stmt {
                match placed.get_mut(l.0 as usize) {
                    None => self.error(Some(i), None, format!("label id {} does not exist", l.0)),
                    Some(Some(_)) => {
                        self.error(Some(i), None, format!("label id {} placed twice", l.0))
                    }
                    Some(slot) => *slot = Some(i),
                }
            }
        }
        placed
    }

    fn reg_class(&self, r: RegId) -> Option<RegClass> {
        self.kernel.regs.get(r.0 as usize).copied()
    }

    /// The module doc's invariants that concern one instruction; also records its register
    /// reads and writes in `uses` (from the same signature lookup).
    fn check_inst(&mut self, i: usize, inst: &Inst, placed: &[Option<usize>], uses: &mut RegUses) {
        let op = &inst.op;
        if let Some(g) = inst.guard {
            if self.reg_class(g.pred) != Some(RegClass::Pred) {
                self.error(Some(i), None, "guard is not a predicate register".into());
            }
            if matches!(op, Op::BarSync) {
                self.error(
                    Some(i),
                    None,
                    "predicated barrier: every thread of the block must reach it".into(),
                );
            }
            if op.is_warp_aligned() {
                self.error(
                    Some(i),
                    None,
                    "predicated warp-wide instruction: every lane of the warp must execute it (.aligned)".into(),
                );
            }
        }
        if let Some(reason) = op.modifier_error() {
            self.error(Some(i), None, reason);
        }
        if let Op::Comment(text) = op {
            // Bytes, not `contains(['\n', '\r'])`: a char-set pattern is far slower in the
            // unoptimised builds macro dependencies get by default.
            if !text.is_ascii() || text.bytes().any(|b| b == b'\n' || b == b'\r') {
                self.error(
                    Some(i),
                    None,
                    format!("comment {text:?} is not single-line ASCII"),
                );
            }
        }
        let req = op.requirement();
        let target = self.module.target;
        if !target.at_least(req.min_arch) {
            self.error(
                Some(i),
                None,
                format!("needs {} or newer; the target is {target}", req.min_arch),
            );
        }
        if self.module.version < req.min_ptx {
            self.error(
                Some(i),
                None,
                format!(
                    "needs PTX ISA {}; the module is {}",
                    req.min_ptx, self.module.version
                ),
            );
        }
        let signature = op.signature();
        let (slots, args): (&[Slot], &[Operand]) = (&signature, &inst.args);
        uses.push_inst(inst, slots);
        if slots.len() != args.len() {
            self.error(
                Some(i),
                None,
                format!("takes {} operands, got {}", slots.len(), args.len()),
            );
            return;
        }
        // An indexed loop over slices, not `zip().enumerate()`: this runs for every operand of
        // every instruction, and the macro's dependencies build unoptimised by default, where
        // each iterator adapter step is a call.
        let mut j = 0;
        while j < slots.len() {
            if let Err(reason) = self.check_operand(op, slots[j], &args[j], placed) {
                self.error(Some(i), Some(j), reason);
            }
            j += 1;
        }
        if let Some((j, reason)) = op.operand_value_error(&inst.args) {
            self.error(Some(i), Some(j), reason);
        }
    }

    fn check_reg(&self, r: RegId, ty: Type) -> Result<(), String> {
        match self.reg_class(r) {
            None => Err(format!("register id {} does not exist", r.0)),
            Some(class) if class.carries(ty) => Ok(()),
            Some(class) => Err(format!(
                "register {}{} (.{}) cannot carry .{ty}",
                class.prefix(),
                r.0,
                class.decl_type()
            )),
        }
    }

    fn check_operand(
        &self,
        op: &Op,
        slot: Slot,
        arg: &Operand,
        placed: &[Option<usize>],
    ) -> Result<(), String> {
        match (slot, arg) {
            (Slot::Dst(ty) | Slot::SrcReg(ty), Operand::Reg(r)) => self.check_reg(*r, ty),
            (Slot::Src(ty) | Slot::MovSrc(ty), Operand::Reg(r)) => self.check_reg(*r, ty),
            (Slot::Src(ty) | Slot::MovSrc(ty) | Slot::Const(ty), Operand::Imm(imm)) => {
                check_imm(op, ty, *imm)
            }
            (Slot::MovSrc(Type::U32 | Type::B32 | Type::S32), Operand::Special(_)) => Ok(()),
            (Slot::MovSrc(Type::U32 | Type::B32), Operand::SharedAddr(s)) => self
                .kernel
                .shared
                .get(s.0 as usize)
                .map(|_| ())
                .ok_or_else(|| format!("shared id {} does not exist", s.0)),
            (Slot::DstVec(ty, n) | Slot::SrcVec(ty, n), Operand::Vec(regs)) => {
                if regs.len() != n {
                    return Err(format!(
                        "vector of {} registers where {n} are needed",
                        regs.len()
                    ));
                }
                regs.iter().try_for_each(|r| self.check_reg(*r, ty))
            }
            (Slot::Addr(space), Operand::Addr(addr)) => self.check_address(space, addr),
            (Slot::Label, Operand::Label(l)) => match placed.get(l.0 as usize) {
                None => Err(format!("label id {} does not exist", l.0)),
                Some(None) => Err(format!(
                    "label `{}` is never placed",
                    self.kernel.labels[l.0 as usize].stem
                )),
                Some(Some(_)) => Ok(()),
            },
            (slot, arg) => Err(format!("operand {arg:?} does not fit slot {slot:?}")),
        }
    }

    fn check_address(&self, space: Space, addr: &crate::ir::Address) -> Result<(), String> {
        match (space, addr.base) {
            (Space::Param, AddrBase::Param(p)) => self
                .kernel
                .params
                .get(p.0 as usize)
                .map(|_| ())
                .ok_or_else(|| format!("parameter id {} does not exist", p.0)),
            (Space::Shared, AddrBase::Shared(s)) => self
                .kernel
                .shared
                .get(s.0 as usize)
                .map(|_| ())
                .ok_or_else(|| format!("shared id {} does not exist", s.0)),
            (Space::Shared, AddrBase::Reg(r)) => self.check_reg(r, Type::U32),
            (Space::Global | Space::Local, AddrBase::Reg(r)) => self.check_reg(r, Type::U64),
            (space, base) => Err(format!(
                "address base {base:?} is not valid in the .{} space",
                space.name()
            )),
        }
    }

    /// Invariant 3 (see `defined`).
    fn check_defined_before_use(&mut self, placed: &[Option<usize>], uses: &RegUses) {
        let unwritten =
            defined::reads_before_write(&self.kernel.body, self.kernel.regs.len(), placed, uses);
        for (i, r) in unwritten {
            let class = self.kernel.regs[r.0 as usize];
            self.error(
                Some(i),
                None,
                format!(
                    "register {}{} is read before any write reaches it",
                    class.prefix(),
                    r.0
                ),
            );
        }
    }
}

fn check_imm(op: &Op, ty: Type, imm: Imm) -> Result<(), String> {
    let fits = match imm {
        Imm::Int(v) => {
            (ty.is_int() || ty.is_bits())
                && match ty.bits() {
                    8 => (-128..=255).contains(&v),
                    16 => (-32768..=65535).contains(&v),
                    32 => (i64::from(i32::MIN)..=i64::from(u32::MAX)).contains(&v),
                    _ => true,
                }
        }
        Imm::F32(_) => ty == Type::F32,
        Imm::F64(_) => ty == Type::F64,
    };
    if ty.is_half() && !matches!(op, Op::Mov(_)) {
        return Err(format!(
            "immediate operand of type .{ty}: move it into a register first"
        ));
    }
    if fits {
        Ok(())
    } else {
        Err(format!("immediate {imm:?} does not fit .{ty}"))
    }
}
