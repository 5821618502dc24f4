//! ptxforge-sim: a PTX interpreter with sanitizer checks and counters — ptxforge's CPU backend
//! and test oracle.
//!
//! # Pipeline
//! [`Module::parse`] lexes and parses PTX text (`parse`), then decodes every `.entry` once
//! (`decode`): registers become dense indices, labels pcs, symbols addresses, and each
//! instruction's semantics a function pointer chosen from its opcode, type and modifiers (`sem`).
//! [`Device::launch`] runs the decoded program (`exec`) over a grid and returns a
//! [`LaunchReport`] with [`Finding`]s and [`Counters`].
//!
//! # Execution model
//! Blocks run in linear order or a seeded shuffle ([`Options::shuffle_blocks`]), on
//! [`Options::threads`] host threads. With more than one, each block sees global memory as of
//! launch start plus its own stores, which are logged and applied after the launch in block
//! order, with findings merged in block order and counters summed: the same memory, findings and
//! counters as running the blocks one at a time, unless a block reads bytes another block of the
//! same launch writes (a race in CUDA too, whose block order is unspecified; one at a time the
//! reader sees earlier blocks' stores, in parallel the launch-start value). Kernels with global
//! (or generic-space) `atom`/`red` always run their blocks one at a time, so their atomics see
//! each other in block order.
//! A block's threads form warps of 32 lanes. Warps of a block take turns (fixed order, a slice
//! of instructions each, or until they block). Inside a warp, the runnable lanes with the lowest
//! pc execute the next instruction together ("min-pc" reconvergence): exact lockstep for uniform
//! code; divergent paths run one after the other and merge where their pcs meet. Such a group is
//! one warp-level request for the coalescing and bank-conflict counters. `bar.sync`/`barrier.sync`
//! (with optional thread count), `bar.arrive` and `bar.red` synchronise the block's threads
//! (`bar.red` also combines their predicates: what `__syncthreads_count/_and/_or` compile to); `shfl.sync`,
//! `vote.sync`, `redux.sync`, `match.sync` and `bar.warp.sync` wait for every non-exited lane of
//! their member mask (lanes of a partial last warp and lanes that exited are not waited for, so
//! `0xffffffff` is legal there). Atomics are sequential and therefore atomic.
//!
//! `call` of a `.func` pushes the return pc on the lane's own call stack; arguments and return
//! values move through `.param` variables, which for `.func`s (and `.param` declared in a body)
//! live in the thread's local memory, in a frame per function next to its `.local` variables.
//! A recursive call saves the callee's registers and frame and restores them on return; more
//! than 1024 pending calls stop the thread with `CallDepthExceeded`. Module-scope `.global`
//! variables are allocated on each device the module is used on, with their initialisers
//! (zero otherwise), and persist across launches; [`Device::write_symbol`],
//! [`Device::read_symbol`] and [`Device::symbol_buffer`] reach them and `.const` variables;
//! [`Device::write_at`] initialises part of a buffer (initcheck still sees the rest).
//! Everything is deterministic: same inputs, same outputs and findings, whatever the number of
//! threads.
//!
//! # Checks (all on by default; see [`Options`])
//! - memcheck: global accesses must fall inside a live allocation (buffers are 256-byte aligned
//!   with unmapped gaps between them); shared/local/param/const accesses inside their window;
//!   every access aligned to its size. The faulting thread stops.
//! - initcheck: a read of global bytes never written or uploaded (per-byte state).
//! - racecheck: two threads of a block touch the same shared bytes, one writing, with no barrier
//!   (or, within a warp, `bar.warp.sync`) between them; atomics do not race with each other. The
//!   finding names both accesses (pc, line, thread). Lanes of one warp storing to the same
//!   shared or global address in the same instruction are not a race (one value lands); when
//!   their values differ it is a `WarpWriteConflict` naming two of the lanes.
//! - synccheck: a barrier that some live threads never reach (divergent barrier), threads that
//!   exit while others wait at a barrier, a barrier reached at different instructions in the same
//!   phase, a lane missing from its own warp-sync mask, and member lanes that never arrive
//!   because they wait at a barrier or at another warp collective.
//!   `.aligned` warp instructions (`mma`, `ldmatrix`) must be executed by all 32 lanes of a full
//!   warp together (`UnconvergedWarp` otherwise: diverged, predicated off, exited, partial warp).
//! - asynccheck: a shared access touching the destination of a `cp.async` whose group the issuing
//!   thread has not yet waited, a global store or atomic to the source of a pending copy (within
//!   the block), both `AsyncCopyHazard` naming the pending copy; a thread exiting with copies never
//!   waited (`AsyncCopyNotWaited`). `ldmatrix` rows (16-byte aligned, inside shared memory) and
//!   `cp.async` source/destination (aligned to cp-size, in bounds for src-size bytes) go through
//!   memcheck per lane.
//! - fuel: a per-thread instruction budget; an infinite loop becomes `FuelExhausted`.
//! - always on: `trap` (`Trap`), a failed device `assert` (`call __assertfail`: `AssertFailed`
//!   with the message, file, line and function), unbounded recursion (`CallDepthExceeded`).
//!
//! How these differ from compute-sanitizer: checks are exact per byte and deterministic rather
//! than sampled on hardware; racecheck covers shared memory only (compute-sanitizer's racecheck
//! too), but `WarpWriteConflict` also looks at global stores and has no compute-sanitizer
//! counterpart; initcheck reports reads of never-written global bytes only (not of shared or
//! local memory); memcheck bounds `.local` accesses by the thread's whole local window (all
//! frames of the entry and its functions), not per variable, and reports no leaks (there is no
//! device `malloc`); synccheck follows the PTX rule for warp collectives (exited lanes release
//! the waiters) where compute-sanitizer may also flag a full mask in divergent code; asynccheck has no hardware counterpart (the GPU just returns stale
//! or torn data), and it sees only the block's own accesses (cross-block source writes are a
//! race the interpreter does not model); synccheck on `.aligned` instructions reports what the
//! ISA calls undefined, which real hardware may happen to tolerate.
//!
//! # Tensor-core and async-copy instructions
//! Exactly these spellings (optional parts in braces) are implemented; any other form of `mma`,
//! `ldmatrix` or `cp.async` is [`SimError::Unsupported`] naming the form:
//! - `mma.sync.aligned.m16n8k16.row.col.{f32,f16}.f16.f16.{f32,f16}`,
//!   `mma.sync.aligned.m16n8k8.row.col.{f32,f16}.f16.f16.{f32,f16}`,
//!   `mma.sync.aligned.m16n8k{16,8}.row.col.f32.bf16.bf16.f32`,
//!   `mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32`: operands are brace vectors of
//!   registers (`d` and `c`: 4 f32 or 2 f16x2 registers; `a`: 4/2 registers for k16/k8, 4 for
//!   tf32; `b`: 2/1, 2 for tf32). Lane ownership and arithmetic are documented in `sem::mma`:
//!   products exact, each output summed from C in increasing k order with every partial sum
//!   rounded to f32 (nearest even); hardware adds several products at once with wider internal
//!   precision and may differ in the last bits of f32 when partial sums round. tf32 operands use
//!   the top 19 bits of the `.b32` (the layout `cvt` writes here; a raw f32 pattern, whose
//!   meaning the ISA leaves undefined, is read with its low 13 bits masked).
//! - `ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{.trans}{.shared{::cta}}.b16 {d..}, [addr]`.
//! - `cp.async.{ca,cg}.shared{::cta}.global{.L2::cache_hint}{.L2::64B,.L2::128B,.L2::256B}
//!   [dst], [src], cp-size{, src-size | ignore-src}{, cache-policy}` with cp-size 4, 8, 16 (`.cg`:
//!   16); bytes past src-size are zero; cache hints are ignored. The source is read at issue
//!   (memcheck/initcheck then); the bytes land in shared memory when a wait retires the group.
//! - `cp.async.commit_group`, `cp.async.wait_group N`, `cp.async.wait_all`.
//! - `cvt.{rna,rn,rz}{.satfinite}.tf32.f32`; packed `cvt.rn.{f16x2,bf16x2}.f32 d, a, b` (a to
//!   the upper half), `mov.b32 {lo, hi}` pack/unpack and `prmt.b32` (all modes) were already there.
//!
//! # Other forms real compilers emit
//! `.func` definitions and `call{.uni} (rets), f, (args)` with `.param` (or register)
//! arguments, `.param` declared in bodies, `.extern .func __assertfail` (any other body-less
//! callee, e.g. `vprintf`, and indirect calls are [`SimError::Unsupported`]); module-scope
//! `.global`/`.const` variables with numeric initialisers, by symbol (`[g+4]`), `mov`/`cvta`;
//! `WARP_SZ`; `redux.sync.{add,min,max}.{u32,s32}` and `.{and,or,xor}.b32`;
//! `match.{any,all}.sync.{b32,b64}` (with `d|p` for `all`); `bfind{.shiftamt}`, `brev`, `bfe`,
//! `bfi`, `prmt`, `shf.{l,r}.{wrap,clamp}.b32`, `lop3.b32`, `mul24`/`mad24.{lo,hi}.{u32,s32}`,
//! `sad`, `add.cc`/`addc{.cc}`/`sub.cc`/`subc{.cc}`/`mad{.lo,.hi}.cc`/`madc` on 32/64-bit
//! integers (the carry flag is a per-thread register), `testp.*.{f32,f64}`, `copysign`,
//! `activemask`; special registers `%laneid`, `%warpid`, `%nwarpid`, `%lanemask_*`,
//! `%dynamic_smem_size`, `%total_smem_size`, `%reserved_smem_offset_*` (0), `%smid` (0),
//! `%nsmid` (1), `%clock`, `%clock64`, `%globaltimer` (deterministic, see below);
//! `bar{.cta}.red.popc.u32` and `bar{.cta}.red.{and,or}.pred` (also spelled `barrier`, with
//! `.aligned`, a thread count and a negated predicate); DWARF `.section .debug_*` blocks are
//! accepted and skipped; `.file`/`.loc` give each instruction the source position of the
//! nearest preceding `.loc` of its function (line 0 means none), which findings carry as
//! [`Finding::source`] next to the PTX line (NVRTC/nvcc `-lineinfo` output names `.cu` lines).
//! Not yet ([`SimError::Unsupported`] naming the form): `vprintf` and other body-less callees
//! but `__assertfail`, indirect calls, initialisers holding addresses, vector registers,
//! textures and surfaces, `mbarrier`, clusters and distributed shared memory, `wgmma`/TMA
//! (sm_90), `setmaxnreg`, `elect.sync`.
//!
//! # Command line
//! `ptxforge-sim run` (see [`cli`]) launches one entry of a PTX file: buffers from files,
//! zeros, iota, seeded random values or lists (`--buf`), part of a buffer written over
//! (`--init NAME=FIRST..END:VALUES`), module variables set (`--global NAME=TYPE:VALUES`),
//! buffers or module variables dumped (`--dump`), checks switched off, block order shuffled; or
//! all of it from a JSON launch spec (`--spec FILE`). It prints the report as JSON or, with
//! `--report text`, the way compute-sanitizer does (kind and message, PTX line and source line,
//! thread and block, address, the conflicting access, an error summary); exit code 0 clean, 1
//! findings, 2 usage, parse or unsupported.
//!
//! Findings are deduplicated by (kind, pc, other pc) with an occurrence count and capped per
//! launch. Interpreter limitations (unsupported instructions) and host misuse are [`SimError`]s.
//!
//! # Differences from hardware
//! - `.approx` functions (`ex2`, `lg2`, `sin`, `cos`, `rsqrt`, `tanh`, `rcp.approx`, `div.approx`,
//!   `div.full`, `sqrt.approx`) are computed in f64 and rounded once: more accurate than the
//!   hardware's documented error bounds, so exact bit comparisons against a GPU can differ by a few
//!   ulp for these. `div.approx.f32` does not reproduce the hardware's zero result for huge
//!   divisors. `add`/`mul` without a rounding modifier are never fused into `fma` (ptxas may fuse).
//! - Directed-rounding (`.rz/.rm/.rp`) `fma.f64` uses an error-free transformation that can, in
//!   rare cancellation cases, pick the neighbouring value; f64 directed rounding does not clamp
//!   overflow to the largest finite value.
//! - The memory model is sequential: no reordering, every store is visible at once; fences are
//!   no-ops. Generic addressing maps shared and local memory at fixed windows.
//! - `bar.sync` with a thread count counts arriving threads, with the block's partial last warp
//!   standing for a whole warp (the ISA marks arrival per warp and gives counts in multiples of
//!   the warp size, so `bar.sync 0, 96` completes in an 80-thread block). Exited lanes of a
//!   warp are not counted for it. A barrier whose expected threads have
//!   exited is released after a synccheck finding (hardware behaviour is undefined).
//! - `%clock`/`%clock64`/`%globaltimer` return the thread's executed-instruction count; `%smid` is
//!   0 and `%nsmid` 1.
//! - Integer division by zero gives all ones (quotient) and the dividend (remainder).

pub mod checks;
pub mod cli;
pub mod counters;
pub mod decode;
pub mod device;
pub mod error;
mod exec;
pub mod findings;
pub mod json;
pub mod memory;
pub mod parse;
pub mod sem;
pub mod text;
pub mod types;

pub use counters::{Counters, InstructionCounts};
pub use device::{Arg, BufferId, Device, LaunchReport, Module, Options, Scalar};
pub use error::SimError;
pub use findings::{Access, AccessKind, Finding, FindingKind};
