//! Decoding: the syntax tree of one `.entry` becomes a [`Program`]: registers are dense indices,
//! labels are pcs, symbols are addresses in their state space, immediates are raw bits of the
//! instruction type, and each instruction's semantics is a function chosen once (see
//! [`crate::sem`]). The hot loop in `exec` never touches a string.

mod instr;
mod tensor;

use std::collections::HashMap;

use crate::error::SimError;
use crate::parse::ast::{self, Space, Stmt};
use crate::sem::cvt::CvtSpec;
use crate::sem::int::F4;
use crate::sem::mma::MmaSpec;
use crate::sem::{Cmp, F1, F2, F3};
use crate::types::Ty;

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
    /// Register slots per thread (the last one is the `_` sink).
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
pub fn layout_consts(vars: &[ast::VarDecl]) -> Result<(HashMap<String, u64>, Vec<u8>), SimError> {
    let mut syms = HashMap::new();
    let mut bytes = Vec::new();
    for v in vars.iter().filter(|v| v.space == Space::Const) {
        let off = align_up(bytes.len() as u64, v.alignment());
        let size = v.size();
        if size > 64 * 1024 {
            return Err(SimError::Parse {
                line: v.line,
                message: format!("`.const {}` is larger than 64 KiB", v.name),
            });
        }
        bytes.resize(off as usize, 0);
        let elem = v.ty.bytes() as usize;
        let mut data = vec![0u8; size as usize];
        for (i, lit) in v.init.iter().enumerate() {
            let bits = instr::imm_bits(lit, v.ty).ok_or_else(|| SimError::Parse {
                line: v.line,
                message: format!("bad initializer for `{}`", v.name),
            })?;
            let at = i * elem;
            if at + elem <= data.len() {
                data[at..at + elem].copy_from_slice(&bits.to_le_bytes()[..elem]);
            }
        }
        bytes.extend_from_slice(&data);
        syms.insert(v.name.clone(), off);
    }
    Ok((syms, bytes))
}

/// Decodes one function of the module.
pub fn decode_entry(
    module: &ast::Module,
    f: &ast::Function,
    consts: &HashMap<String, u64>,
) -> Result<Program, SimError> {
    let mut cx = instr::Ctx::default();
    // Parameters.
    let mut params = Vec::new();
    let mut off = 0u64;
    for p in &f.params {
        let align = u64::from(p.align.unwrap_or(p.ty.bytes())).max(1);
        off = align_up(off, align);
        cx.syms.insert(
            p.name.clone(),
            Sym {
                space: Space::Param,
                addr: off,
            },
        );
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
    for (name, addr) in consts {
        cx.syms.insert(
            name.clone(),
            Sym {
                space: Space::Const,
                addr: *addr,
            },
        );
    }
    // Shared memory: module-scope then function-scope static arrays, then the dynamic window.
    let mut smem = 0u64;
    let mut dyn_align = 16u64;
    let mut externs = Vec::new();
    let fn_vars = f
        .body
        .iter()
        .filter_map(|s| if let Stmt::Var(v) = s { Some(v) } else { None });
    let mut local = 0u64;
    for v in module.vars.iter().chain(fn_vars) {
        match v.space {
            Space::Shared if v.is_extern || v.array == Some(None) => {
                dyn_align = dyn_align.max(v.alignment());
                externs.push(v.name.clone());
            }
            Space::Shared => {
                smem = align_up(smem, v.alignment());
                cx.syms.insert(
                    v.name.clone(),
                    Sym {
                        space: Space::Shared,
                        addr: smem,
                    },
                );
                smem += v.size();
            }
            Space::Local => {
                local = align_up(local, v.alignment());
                cx.syms.insert(
                    v.name.clone(),
                    Sym {
                        space: Space::Local,
                        addr: local,
                    },
                );
                local += v.size();
            }
            Space::Const => {}
            Space::Global => {
                cx.globals.push(v.name.clone());
            }
            Space::Param => {}
        }
    }
    if local > MAX_LOCAL_BYTES || smem > MAX_STATIC_SMEM {
        return Err(SimError::Parse {
            line: f.line,
            message: format!("`{}` declares {local} bytes of local and {smem} bytes of static shared memory per thread/block (too large)", f.name),
        });
    }
    let dynamic_smem_offset = align_up(smem, dyn_align);
    for name in externs {
        cx.syms.insert(
            name,
            Sym {
                space: Space::Shared,
                addr: dynamic_smem_offset,
            },
        );
    }
    // Registers and labels.
    let mut pc = 0u32;
    for s in &f.body {
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
                                cx.add_reg(format!("{name}{i}"), *ty);
                            }
                        }
                        None => cx.add_reg(name.clone(), *ty),
                    }
                    if cx.regs.len() > MAX_REGS {
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
    cx.sink = cx.regs.len() as u32;
    let mut insts = Vec::with_capacity(pc as usize);
    for s in &f.body {
        if let Stmt::Instr(i) = s {
            insts.push(cx.decode(i)?);
        }
    }
    // Falling off the end of the body exits.
    insts.push(Inst {
        op: Op::Exit,
        guard: None,
        class: Class::Control,
        line: f.line as u32,
    });
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
        nregs: cx.sink + 1,
        params,
        param_size,
        static_smem: smem,
        dynamic_smem_offset,
        local_size: local,
        perf: f.perf.clone(),
        global_atomics,
    })
}
