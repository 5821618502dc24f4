//! Decoding: the syntax tree of one `.entry` becomes a [`Program`]: registers are dense indices,
//! labels are pcs, symbols are addresses in their state space, immediates are raw bits of the
//! instruction type, and each instruction's semantics is a function chosen once (see
//! [`crate::sem`]). The hot loop in `exec` never touches a string.

mod call;
mod instr;
mod tensor;

pub use call::{ArgSrc, AssertFail, Call, RetDst};

use std::collections::HashMap;

use crate::error::SimError;
use crate::findings::SourceLoc;
use crate::parse::ast::{self, Space, Stmt};
use crate::sem::cvt::CvtSpec;
use crate::sem::int::F4;
use crate::sem::mma::MmaSpec;
use crate::sem::{Cmp, F1, F2, F3};
use crate::types::Ty;

/// `bar.red.popc.u32 d, a{, b}, {!}c` / `bar.red.{and,or}.pred d, a{, b}, {!}c`: the predicate
/// `c` (or its complement) of every participating thread, combined when the barrier completes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BarRed {
    pub op: BarRedOp,
    pub d: u32,
    pub c: Src,
    pub neg: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BarRedOp {
    /// Number of threads whose predicate is true.
    Popc,
    /// All threads' predicates true.
    And,
    /// Some thread's predicate true.
    Or,
}

/// A source operand.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Src {
    Reg(u32),
    Imm(u64),
    Special(Special),
}

/// Special (read-only, per-thread) registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Special {
    Tid(u8),
    Ntid(u8),
    Ctaid(u8),
    Nctaid(u8),
    LaneId,
    WarpId,
    NWarpId,
    SmId,
    NSmId,
    GridId,
    /// `%clock`/`%clock64`/`%globaltimer`: the thread's executed-instruction count, so runs stay
    /// deterministic.
    Clock,
    LanemaskEq,
    LanemaskLe,
    LanemaskLt,
    LanemaskGe,
    LanemaskGt,
    DynamicSmemSize,
    TotalSmemSize,
    /// `%reserved_smem_offset_*`: no shared memory is reserved, so 0.
    ReservedSmem,
    /// The address of module-scope `.global` variable `i` (per device, known at launch).
    GlobalAddr(u32),
}

/// A memory operand: `base + offset`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Addr {
    pub base: Src,
    pub offset: i64,
}

/// The state space of a memory instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemSpace {
    Global,
    Shared,
    Local,
    Param,
    Const,
    /// Generic addressing: resolved per access by address window.
    Generic,
}

/// Warp-shuffle modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShflMode {
    Up,
    Down,
    Bfly,
    Idx,
}

/// `vote` modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VoteMode {
    All,
    Any,
    Uni,
    Ballot,
}

/// Read-modify-write function of an atomic: `new = f(old, b, c)`.
#[derive(Debug, Clone, Copy)]
pub enum AtomFn {
    Bin(F2),
    Tern(F3),
}

/// A decoded operation.
#[derive(Debug, Clone)]
pub enum Op {
    Mov {
        d: u32,
        a: Src,
    },
    Alu1 {
        f: F1,
        d: u32,
        a: Src,
    },
    Alu2 {
        f: F2,
        d: u32,
        a: Src,
        b: Src,
    },
    Alu3 {
        f: F3,
        d: u32,
        a: Src,
        b: Src,
        c: Src,
    },
    Alu4 {
        f: F4,
        d: u32,
        a: Src,
        b: Src,
        c: Src,
        e: Src,
    },
    /// One step of a carry chain (`add.cc`, `addc`, `sub.cc`, `subc`, `mad.cc`, `madc`): the
    /// carry flag is the thread's register `cc`, read when `cin`, written when `cout`.
    Carry {
        f: crate::sem::bits::CarryFn,
        d: u32,
        a: Src,
        b: Src,
        c: Src,
        cc: u32,
        cin: bool,
        cout: bool,
    },
    /// `setp`: `d = comb(cmp(a, b), c)`, `q = comb(!cmp(a, b), c)`; comb 0 = none, 1 and, 2 or, 3 xor.
    Setp {
        f: Cmp,
        comb: u8,
        d: u32,
        q: u32,
        a: Src,
        b: Src,
        c: Src,
        c_neg: bool,
    },
    Selp {
        d: u32,
        a: Src,
        b: Src,
        p: Src,
    },
    Cvt {
        spec: CvtSpec,
        d: u32,
        a: Src,
    },
    /// `cvt.rn.f16x2.f32 d, a, b`: `a` to the upper half, `b` to the lower.
    CvtPack {
        spec: CvtSpec,
        d: u32,
        a: Src,
        b: Src,
    },
    /// `mov.bN d, {a, b, ..}`: element `i` at bits `i*ew`.
    Pack {
        d: u32,
        parts: [Src; 4],
        n: u8,
        ew: u8,
    },
    Unpack {
        ds: [u32; 4],
        n: u8,
        ew: u8,
        a: Src,
    },
    Ld {
        space: MemSpace,
        d: [u32; 4],
        n: u8,
        size: u8,
        sign: bool,
        dmask: u64,
        addr: Addr,
    },
    St {
        space: MemSpace,
        s: [Src; 4],
        n: u8,
        size: u8,
        addr: Addr,
    },
    Atom {
        space: MemSpace,
        f: AtomFn,
        size: u8,
        d: u32,
        addr: Addr,
        b: Src,
        c: Src,
    },
    Bra {
        target: u32,
    },
    Bar {
        arrive: bool,
        id: Src,
        count: Option<Src>,
        /// `bar.red`: the reduction this barrier also performs.
        red: Option<BarRed>,
    },
    Shfl {
        mode: ShflMode,
        d: u32,
        p: u32,
        a: Src,
        b: Src,
        c: Src,
        mask: Src,
    },
    Vote {
        mode: VoteMode,
        d: u32,
        a: Src,
        neg: bool,
        mask: Src,
    },
    WarpSync {
        mask: Src,
    },
    /// `redux.sync.op.type d, a, mask`: `f` folded over the member lanes' `a`.
    Redux {
        f: F2,
        d: u32,
        a: Src,
        mask: Src,
    },
    /// `match.{any,all}.sync.type d[|p], a, mask`.
    Match {
        all: bool,
        d: u32,
        p: u32,
        a: Src,
        mask: Src,
    },
    ActiveMask {
        d: u32,
    },
    /// `mma.sync.aligned.m16n8k{8,16}.row.col.*`: one warp-level multiply-accumulate over every
    /// lane's fragment registers (unused register slots hold the sink register).
    Mma {
        spec: MmaSpec,
        d: [u32; 4],
        a: [u32; 4],
        b: [u32; 2],
        c: [u32; 4],
    },
    /// `ldmatrix.sync.aligned.m8n8.x{num}{.trans}{.shared}.b16`: `num` 8×8 b16 matrices whose row
    /// addresses come from lanes `8i..8i+7`.
    Ldmatrix {
        num: u8,
        trans: bool,
        d: [u32; 4],
        space: MemSpace,
        addr: Addr,
    },
    /// `cp.async.{ca,cg}.shared.global`: an asynchronous global → shared copy of one thread.
    CpAsync(Box<CpAsync>),
    /// `cp.async.commit_group`.
    CpAsyncCommit,
    /// `cp.async.wait_group keep` (`all`: `cp.async.wait_all`, which also commits).
    CpAsyncWait {
        keep: u32,
        all: bool,
    },
    /// `call` of a `.func`: copy the arguments into its frame, push the return pc, jump.
    Call(Box<Call>),
    /// `ret`: back to the caller with the return values, or the thread exits when no call is
    /// pending (the entry's `ret`).
    Ret,
    /// `call __assertfail`: a failed device-side `assert`, reported with its message.
    AssertFail(Box<AssertFail>),
    Exit,
    Trap,
    Nop,
}

/// How many source bytes a `cp.async` reads (the rest of the `size` bytes are zero-filled).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SrcSize {
    /// All `size` bytes.
    Full,
    /// The `src-size` operand.
    Bytes(Src),
    /// The `ignore-src` predicate: nothing when true, all `size` bytes when false.
    IgnoreIf(Src),
}

/// A decoded `cp.async.{ca,cg}.shared.global`.
#[derive(Debug, Clone, PartialEq)]
pub struct CpAsync {
    /// cp-size: 4, 8 or 16 bytes.
    pub size: u8,
    pub dst_space: MemSpace,
    pub dst: Addr,
    pub src: Addr,
    pub src_size: SrcSize,
}

/// Instruction classes for the dynamic instruction counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    IntArith = 0,
    FloatArith,
    HalfArith,
    Special,
    Conversion,
    Movement,
    MemGlobal,
    MemShared,
    MemLocal,
    MemParam,
    MemConst,
    Atomic,
    Control,
    Barrier,
    WarpCollective,
    Other,
    /// `mma` (tensor-core) instructions.
    TensorCore,
    /// `cp.async` copies, commits and waits.
    AsyncCopy,
}

pub const NUM_CLASSES: usize = 18;

/// One decoded instruction.
#[derive(Debug, Clone)]
pub struct Inst {
    pub op: Op,
    /// Guard predicate register (`@%p` / `@!%p`).
    pub guard: Option<(u32, bool)>,
    pub class: Class,
    pub line: u32,
}

/// A declared kernel parameter and its place in the parameter buffer.
#[derive(Debug, Clone, PartialEq)]
pub struct ParamInfo {
    pub name: String,
    pub ty: Ty,
    pub size: u64,
    pub offset: u64,
    /// `.b8 name[K]` aggregate.
    pub is_array: bool,
}

/// A decoded `.entry`.
#[derive(Debug, Clone)]
pub struct Program {
    pub name: String,
    pub insts: Vec<Inst>,
    /// Register slots per thread (the last two: the `_` sink and the carry flag `CC`).
    pub nregs: u32,
    pub params: Vec<ParamInfo>,
    pub param_size: u64,
    /// Bytes of static shared memory; dynamic shared memory starts at `dynamic_smem_offset`.
    pub static_smem: u64,
    pub dynamic_smem_offset: u64,
    pub local_size: u64,
    pub perf: ast::Perf,
    /// Some `atom`/`red` may touch global memory (global or generic space): the blocks of a
    /// launch can then communicate in an order-dependent way, so they must run one at a time.
    pub global_atomics: bool,
    /// The entry (index 0) and the `.func`s it calls: registers and local frame of each.
    pub funcs: Vec<FuncInfo>,
    /// Per instruction, the nearest preceding `.loc` (kept beside `insts`, off the hot path).
    pub locs: Vec<Option<ast::SrcPos>>,
    /// The module's `.file` table.
    pub files: Vec<(u32, String)>,
}

impl Program {
    /// The source position of instruction `pc`, from its `.loc` and the `.file` table (a file
    /// number without a `.file` shows as `file N`).
    pub fn source_of(&self, pc: usize) -> Option<SourceLoc> {
        let pos = (*self.locs.get(pc)?)?;
        let file = self
            .files
            .iter()
            .find(|(n, _)| *n == pos.file)
            .map_or_else(|| format!("file {}", pos.file), |(_, f)| f.clone());
        Some(SourceLoc {
            file,
            line: pos.line,
            column: pos.column,
        })
    }
}

/// One function of a [`Program`]: its register slots and its local-frame bytes (both
/// half-open ranges), saved and restored around a recursive call.
#[derive(Debug, Clone, PartialEq)]
pub struct FuncInfo {
    pub name: String,
    pub regs: (u32, u32),
    pub local: (u64, u64),
}

/// Address of a named variable in its state space.
#[derive(Debug, Clone, Copy)]
struct Sym {
    space: Space,
    addr: u64,
}

/// Registers per thread the decoder accepts (far above any real kernel).
const MAX_REGS: usize = 1 << 16;
/// Local memory per thread the decoder accepts.
const MAX_LOCAL_BYTES: u64 = 512 * 1024;
/// Static shared memory the decoder accepts (launches enforce the device limit).
const MAX_STATIC_SMEM: u64 = 1 << 20;

fn align_up(x: u64, a: u64) -> u64 {
    let a = a.max(1);
    x.div_ceil(a) * a
}

/// Lays out module-scope `.const` variables; returns the symbols and the initial bytes.
/// The initial bytes of a module-scope variable: its initialiser, zero-filled (CUDA zeroes
/// `__device__`/`__constant__` variables without one).
fn initial_bytes(v: &ast::VarDecl) -> Result<Vec<u8>, SimError> {
    let elem = v.ty.bytes() as usize;
    let mut data = vec![0u8; v.size() as usize];
    if v.init.len() as u64 * elem as u64 > v.size().max(elem as u64) && v.array.is_some() {
        return Err(SimError::Parse {
            line: v.line,
            message: format!("`{}` has more initialisers than elements", v.name),
        });
    }
    for (i, lit) in v.init.iter().enumerate() {
        let bits = instr::imm_bits(lit, v.ty).ok_or_else(|| SimError::Unsupported {
            line: v.line,
            opcode: format!("initialiser of `{}`", v.name),
            detail: "only numeric initialisers are supported".into(),
        })?;
        let at = i * elem;
        if at + elem <= data.len() {
            data[at..at + elem].copy_from_slice(&bits.to_le_bytes()[..elem]);
        }
    }
    Ok(data)
}

/// Lays out module-scope `.const` variables; returns the symbols and the initial bytes.
pub fn layout_consts(vars: &[ast::VarDecl]) -> Result<(HashMap<String, u64>, Vec<u8>), SimError> {
    let mut syms = HashMap::new();
    let mut bytes = Vec::new();
    for v in vars.iter().filter(|v| v.space == Space::Const) {
        let off = align_up(bytes.len() as u64, v.alignment());
        if v.size() > 64 * 1024 || off + v.size() > 64 * 1024 {
            return Err(SimError::Parse {
                line: v.line,
                message: format!("`.const {}` does not fit the 64 KiB constant bank", v.name),
            });
        }
        bytes.resize(off as usize, 0);
        bytes.extend_from_slice(&initial_bytes(v)?);
        syms.insert(v.name.clone(), off);
    }
    Ok((syms, bytes))
}

/// A module-scope `.global` variable: allocated in device memory once per device and module.
#[derive(Debug, Clone, PartialEq)]
pub struct GlobalVar {
    pub name: String,
    pub align: u64,
    pub init: Vec<u8>,
}

/// Largest module-scope `.global` variable the decoder accepts.
const MAX_GLOBAL_VAR: u64 = 1 << 30;

/// The module-scope `.global` variables, in declaration order.
pub fn layout_globals(vars: &[ast::VarDecl]) -> Result<Vec<GlobalVar>, SimError> {
    vars.iter()
        .filter(|v| v.space == Space::Global)
        .map(|v| {
            if v.size() > MAX_GLOBAL_VAR {
                return Err(SimError::Parse {
                    line: v.line,
                    message: format!("`.global {}` is larger than 1 GiB", v.name),
                });
            }
            Ok(GlobalVar {
                name: v.name.clone(),
                align: v.alignment(),
                init: initial_bytes(v)?,
            })
        })
        .collect()
}

/// The `.func`s an entry reaches through `call`, the entry first.
fn reachable<'m>(module: &'m ast::Module, entry: &'m ast::Function) -> Vec<&'m ast::Function> {
    let mut order = vec![entry];
    let mut i = 0;
    while i < order.len() {
        for s in &order[i].body {
            let Stmt::Instr(ins) = s else { continue };
            let Some(name) = call::callee_name(ins) else {
                continue;
            };
            let found = module
                .functions
                .iter()
                .find(|f| !f.is_entry && !f.is_decl && f.name == name);
            if let Some(f) = found {
                if !order.iter().any(|g| std::ptr::eq(*g, f)) {
                    order.push(f);
                }
            }
        }
        i += 1;
    }
    order
}

/// A function needs more of some resource than the interpreter accepts.
fn too_large(f: &ast::Function, what: &str) -> SimError {
    SimError::Parse {
        line: f.line,
        message: format!("`{}` needs {what} (too large)", f.name),
    }
}

/// Statements of a function body that are variable declarations.
fn body_vars(f: &ast::Function) -> impl Iterator<Item = &ast::VarDecl> {
    f.body
        .iter()
        .filter_map(|s| if let Stmt::Var(v) = s { Some(v) } else { None })
}

/// Decodes one `.entry` with every `.func` it calls into one program: the entry's
/// instructions first, then each function's, every function with registers and a local frame
/// of its own.
pub fn decode_entry(
    module: &ast::Module,
    f: &ast::Function,
    consts: &HashMap<String, u64>,
) -> Result<Program, SimError> {
    let funcs = reachable(module, f);
    let globals: HashMap<String, u32> = module
        .vars
        .iter()
        .filter(|v| v.space == Space::Global)
        .enumerate()
        .map(|(i, v)| (v.name.clone(), i as u32))
        .collect();
    let mut base = instr::Ctx {
        globals,
        ..instr::Ctx::default()
    };
    for (name, addr) in consts {
        base.syms.insert(
            name.clone(),
            Sym {
                space: Space::Const,
                addr: *addr,
            },
        );
    }
    // Kernel parameters.
    let mut params = Vec::new();
    let mut off = 0u64;
    for p in &f.params {
        let align = u64::from(p.align.unwrap_or(p.ty.bytes())).max(1);
        off = align_up(off, align);
        params.push(ParamInfo {
            name: p.name.clone(),
            ty: p.ty,
            size: p.size(),
            offset: off,
            is_array: p.array.is_some(),
        });
        off += p.size();
    }
    let param_size = off;
    // Shared memory: module-scope then function-scope static arrays, then the dynamic window.
    let mut smem = 0u64;
    let mut dyn_align = 16u64;
    let mut externs = Vec::new();
    for v in module
        .vars
        .iter()
        .chain(funcs.iter().flat_map(|g| body_vars(g)))
        .filter(|v| v.space == Space::Shared)
    {
        if v.is_extern || v.array == Some(None) {
            dyn_align = dyn_align.max(v.alignment());
            externs.push(v.name.clone());
        } else {
            smem = align_up(smem, v.alignment());
            base.syms.insert(
                v.name.clone(),
                Sym {
                    space: Space::Shared,
                    addr: smem,
                },
            );
            smem += v.size();
        }
    }
    let dynamic_smem_offset = align_up(smem, dyn_align);
    for name in externs {
        base.syms.insert(
            name,
            Sym {
                space: Space::Shared,
                addr: dynamic_smem_offset,
            },
        );
    }
    // Per function: its local frame (return values, parameters, `.local` and body `.param`
    // variables), its registers, its labels and its first pc.
    let mut local = 0u64;
    let mut nregs = 0u32;
    let mut pc = 0u32;
    let mut ctxs = Vec::with_capacity(funcs.len());
    let mut infos = Vec::with_capacity(funcs.len());
    let mut callees = HashMap::new();
    for (index, g) in funcs.iter().enumerate() {
        let mut cx = instr::Ctx {
            syms: base.syms.clone(),
            globals: base.globals.clone(),
            ..instr::Ctx::default()
        };
        let frame_start = local;
        let mut place = |name: &str, size: u64, align: u64, cx: &mut instr::Ctx| {
            local = align_up(local, align);
            cx.syms.insert(
                name.to_string(),
                Sym {
                    space: Space::Local,
                    addr: local,
                },
            );
            local += size;
            (local - size, size)
        };
        let mut callee_params = Vec::new();
        let mut callee_rets = Vec::new();
        if !g.is_entry {
            for p in &g.rets {
                let a = u64::from(p.align.unwrap_or(p.ty.bytes())).max(1);
                callee_rets.push(place(&p.name, p.size(), a, &mut cx));
            }
            for p in &g.params {
                let a = u64::from(p.align.unwrap_or(p.ty.bytes())).max(1);
                callee_params.push(place(&p.name, p.size(), a, &mut cx));
            }
        } else {
            for (p, info) in g.params.iter().zip(&params) {
                cx.syms.insert(
                    p.name.clone(),
                    Sym {
                        space: Space::Param,
                        addr: info.offset,
                    },
                );
            }
        }
        for v in body_vars(g).filter(|v| matches!(v.space, Space::Local | Space::Param)) {
            place(&v.name, v.size(), v.alignment(), &mut cx);
        }
        if local > MAX_LOCAL_BYTES {
            let what = format!("{local} bytes of local memory per thread");
            return Err(too_large(g, &what));
        }
        let reg_start = nregs;
        let first_pc = pc;
        for s in &g.body {
            match s {
                Stmt::Reg { ty, names, line } => {
                    for (name, count) in names {
                        match count {
                            Some(n) if *n as usize > MAX_REGS => {
                                return Err(SimError::Parse {
                                    line: *line,
                                    message: format!("`{name}<{n}>`: too many registers"),
                                });
                            }
                            Some(n) => {
                                for i in 0..*n {
                                    cx.add_reg(format!("{name}{i}"), *ty, reg_start);
                                }
                            }
                            None => cx.add_reg(name.clone(), *ty, reg_start),
                        }
                        if reg_start as usize + cx.regs.len() > MAX_REGS {
                            return Err(SimError::Parse {
                                line: *line,
                                message: "too many registers".into(),
                            });
                        }
                    }
                }
                Stmt::Label { name, line } => {
                    if cx.labels.insert(name.clone(), pc).is_some() {
                        return Err(SimError::Parse {
                            line: *line,
                            message: format!("duplicate label `{name}`"),
                        });
                    }
                }
                Stmt::Instr(_) => pc += 1,
                Stmt::Var(_) => {}
            }
        }
        // Falling off the end of a body returns (exits, for the entry).
        pc += 1;
        nregs = reg_start + cx.regs.len() as u32;
        if !g.is_entry {
            callees.insert(
                g.name.clone(),
                call::Callee {
                    func: index as u32,
                    pc: first_pc,
                    params: callee_params,
                    rets: callee_rets,
                },
            );
        }
        infos.push(FuncInfo {
            name: g.name.clone(),
            regs: (reg_start, nregs),
            local: (frame_start, local),
        });
        ctxs.push(cx);
    }
    if smem > MAX_STATIC_SMEM {
        return Err(too_large(
            f,
            &format!("{smem} bytes of static shared memory"),
        ));
    }
    let sink = nregs;
    let mut insts = Vec::with_capacity(pc as usize);
    let mut locs = Vec::with_capacity(pc as usize);
    for (g, mut cx) in funcs.iter().zip(ctxs) {
        cx.sink = sink;
        cx.cc = sink + 1;
        cx.callees = callees.clone();
        for s in &g.body {
            if let Stmt::Instr(i) = s {
                insts.push(cx.decode(i)?);
                locs.push(i.loc);
            }
        }
        locs.push(None);
        insts.push(Inst {
            op: Op::Ret,
            guard: None,
            class: Class::Control,
            line: g.line as u32,
        });
    }
    let global_atomics = insts.iter().any(|i| {
        matches!(
            i.op,
            Op::Atom {
                space: MemSpace::Global | MemSpace::Generic,
                ..
            }
        )
    });
    Ok(Program {
        name: f.name.clone(),
        insts,
        nregs: sink + 2,
        params,
        param_size,
        static_smem: smem,
        dynamic_smem_offset,
        local_size: local,
        perf: f.perf.clone(),
        global_atomics,
        funcs: infos,
        locs,
        files: module.files.clone(),
    })
}
