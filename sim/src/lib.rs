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
//! (with optional thread count) and `bar.arrive` synchronise the block's threads; `shfl.sync`,
//! `vote.sync` and `bar.warp.sync` wait for every lane of their member mask. Atomics are
//! sequential and therefore atomic. Everything is deterministic: same inputs, same outputs and
//! findings, whatever the number of threads.
//!
//! # Checks (all on by default; see [`Options`])
//! - memcheck: global accesses must fall inside a live allocation (buffers are 256-byte aligned
//!   with unmapped gaps between them); shared/local/param/const accesses inside their window;
//!   every access aligned to its size. The faulting thread stops.
//! - initcheck: a read of global bytes never written or uploaded (per-byte state).
//! - racecheck: two threads of a block touch the same shared bytes, one writing, with no barrier
//!   (or, within a warp, `bar.warp.sync`) between them; atomics do not race with each other. The
//!   finding names both accesses (pc, line, thread).
//! - synccheck: a barrier that some live threads never reach (divergent barrier), threads that
//!   exit while others wait at a barrier, a barrier reached at different instructions in the same
//!   phase, and warp-sync masks naming exited lanes or lanes that never arrive.
//! - fuel: a per-thread instruction budget; an infinite loop becomes `FuelExhausted`.
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
//! - `bar.sync` with a thread count counts threads, not whole warps. A barrier whose expected
//!   threads have exited is released after a synccheck finding (hardware behaviour is undefined).
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
pub mod types;

pub use counters::{Counters, InstructionCounts};
pub use device::{Arg, BufferId, Device, LaunchReport, Module, Options, Scalar};
pub use error::SimError;
pub use findings::{Access, AccessKind, Finding, FindingKind};
