//! The execution engine: runs a grid of blocks, each block as warps of 32 lanes.
//!
//! Scheduling: blocks run one after another (in linear order, or a seeded shuffle), or on worker
//! threads with their results merged in that order ([`parallel`]; [`run`] decides). Within a
//! block, warps take turns in fixed order, each for a slice of instructions or until it blocks.
//! Within a warp, the lanes at the lowest pc among the runnable lanes execute the instruction
//! together (min-pc reconvergence): for uniform code this is exact lockstep, divergent paths run
//! one after the other and merge again where their pcs meet. That group is what the counters see
//! as one warp-level request.
//!
//! Lanes leave the runnable set when they wait at a block barrier (`bar.sync`), park at a warp
//! collective whose member lanes have not all arrived, exit, or fault. A barrier completes when
//! its expected thread count has arrived; a block in which nothing can run is resolved by
//! synccheck (and reported even with synccheck off as a deadlock).

mod async_copy;
mod call;
mod collective;
mod global;
mod memops;
mod parallel;
mod tensor;

use crate::checks::race::RaceDetector;
use crate::checks::CheckConfig;
use crate::counters::{Counters, InstructionCounts};
use crate::decode::{BarRed, BarRedOp, Inst, Op, Program, Special, Src, NUM_CLASSES};
use crate::findings::{Access, Finding, FindingKind, Findings};
use crate::memory::GlobalMem;
use crate::sem::cvt::convert;
use async_copy::AsyncCopies;
use global::GlobalSpace;

pub(crate) const WARP: usize = 32;
/// Instructions a warp runs before the next warp of the block gets a turn.
const SLICE: u32 = 2048;

/// Everything fixed for one launch.
#[derive(Debug)]
pub(crate) struct LaunchSpec<'a> {
    pub prog: &'a Program,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub params: Vec<u8>,
    pub consts: &'a [u8],
    /// Device address of each module-scope `.global` variable.
    pub global_addrs: Vec<u64>,
    /// Total shared bytes per block (static + dynamic).
    pub smem_bytes: u64,
    pub dynamic_smem: u64,
    pub checks: CheckConfig,
    /// Linear block indices in execution order.
    pub block_order: Vec<u32>,
    pub findings_cap: usize,
    /// Host threads that may run blocks at once (see [`run`]).
    pub workers: usize,
}

/// One warp's lanes: registers (`regs[reg * 32 + lane]`), pcs and state masks.
#[derive(Debug)]
pub(crate) struct Warp {
    pub index: u32,
    pub regs: Vec<u64>,
    pub pc: [u32; WARP],
    pub present: u32,
    pub running: u32,
    pub at_bar: u32,
    pub parked: u32,
    pub exited: u32,
    pub faulted: u32,
    pub bar_id: [u8; WARP],
    pub coll_mask: [u32; WARP],
    pub fuel: [u64; WARP],
    pub steps: u64,
    pub local: Vec<u8>,
    /// Each lane's pending calls, innermost last.
    pub calls: Vec<Vec<call::Frame>>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Bar {
    arrived: u32,
    expected: u32,
    first_pc: u32,
    first_thread: u32,
    /// Another pc that arrived at this barrier in the same phase (divergent barrier).
    mixed: Option<(u32, u32)>,
    /// `bar.red`: arriving threads whose predicate was true.
    red_true: u32,
    /// The block's partial last warp has been counted as a whole warp in this phase.
    padded: bool,
}

/// Per-block state shared by its warps.
#[derive(Debug)]
pub(crate) struct BlockCtx {
    pub ctaid: [u32; 3],
    pub shared: Vec<u8>,
    bars: [Bar; 16],
    pending_release: u16,
    pub nthreads: u32,
    /// A thread of this block faulted: later sync problems are consequences, not new findings.
    pub faulted: bool,
    /// `cp.async` copies issued and not yet landed.
    pub asyncs: AsyncCopies,
}

/// How the group's pc advances after a step.
enum Flow {
    /// Every group lane still running goes to pc + 1.
    Next,
    /// Every group lane still running goes to the target.
    Jump(u32),
    /// The step has set the pcs itself.
    Split,
}

pub(crate) struct Engine<'a, G: GlobalSpace> {
    pub spec: &'a LaunchSpec<'a>,
    pub global: &'a mut G,
    pub class_counts: [u64; NUM_CLASSES],
    pub counters: Counters,
    pub findings: Findings,
    pub race: Option<RaceDetector>,
}

#[inline]
fn lanes(mut m: u32) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        if m == 0 {
            None
        } else {
            let l = m.trailing_zeros() as usize;
            m &= m - 1;
            Some(l)
        }
    })
}

/// Runs a launch and returns its counters and findings (with the number dropped by the cap).
///
/// Blocks run on up to `spec.workers` host threads ([`parallel`]) when the program has no global
/// atomics, else one at a time in `spec.block_order`. The results are the same either way for
/// every kernel whose blocks do not read what other blocks of the same launch write.
pub(crate) fn run(spec: &LaunchSpec<'_>, global: &mut GlobalMem) -> (Counters, Findings) {
    let workers = spec.workers.min(spec.block_order.len());
    if workers > 1 && !spec.prog.global_atomics {
        return parallel::run(spec, global, workers);
    }
    let mut engine = Engine::new(spec, global, spec.findings_cap);
    for &b in &spec.block_order {
        engine.run_block(b);
    }
    (engine.take_counters(), engine.findings)
}

impl<'a, G: GlobalSpace> Engine<'a, G> {
    pub fn new(spec: &'a LaunchSpec<'a>, global: &'a mut G, findings_cap: usize) -> Self {
        Engine {
            spec,
            global,
            class_counts: [0; NUM_CLASSES],
            counters: Counters::default(),
            findings: Findings::new(findings_cap),
            race: spec.checks.racecheck.then(RaceDetector::default),
        }
    }

    /// The counters of every block run so far.
    fn take_counters(&mut self) -> Counters {
        let mut c = std::mem::take(&mut self.counters);
        c.instructions = InstructionCounts::from_array(&self.class_counts);
        self.class_counts = [0; NUM_CLASSES];
        c
    }

    pub fn thread_of(&self, warp: u32, lane: usize) -> [u32; 3] {
        let lin = warp * WARP as u32 + lane as u32;
        let [bx, by, _] = self.spec.block;
        [lin % bx, (lin / bx) % by, lin / (bx * by)]
    }

    fn run_block(&mut self, lin: u32) {
        let [gx, gy, _] = self.spec.grid;
        let ctaid = [lin % gx, (lin / gx) % gy, lin / (gx * gy)];
        let nthreads = self.spec.block.iter().product::<u32>();
        let nwarps = nthreads.div_ceil(WARP as u32);
        let prog = self.spec.prog;
        let mut warps: Vec<Warp> = (0..nwarps)
            .map(|wi| {
                let n = (nthreads - wi * WARP as u32).min(WARP as u32);
                let present = if n == 32 { u32::MAX } else { (1u32 << n) - 1 };
                Warp {
                    index: wi,
                    regs: vec![0; prog.nregs as usize * WARP],
                    pc: [0; WARP],
                    present,
                    running: present,
                    at_bar: 0,
                    parked: 0,
                    exited: 0,
                    faulted: 0,
                    bar_id: [0; WARP],
                    coll_mask: [0; WARP],
                    fuel: [0; WARP],
                    steps: 0,
                    local: vec![0; prog.local_size as usize * WARP],
                    calls: vec![Vec::new(); WARP],
                }
            })
            .collect();
        let mut bc = BlockCtx {
            ctaid,
            shared: vec![0; self.spec.smem_bytes as usize],
            bars: [Bar::default(); 16],
            pending_release: 0,
            nthreads,
            faulted: false,
            asyncs: AsyncCopies::default(),
        };
        if let Some(r) = &mut self.race {
            r.new_block(self.spec.smem_bytes as usize, nwarps as usize);
        }
        loop {
            let mut progress = false;
            for wi in 0..warps.len() {
                let w = &mut warps[wi];
                if w.running != 0 || w.parked != 0 {
                    progress |= self.run_warp(&mut bc, w);
                }
                if bc.pending_release != 0 {
                    self.release(&mut bc, &mut warps);
                }
            }
            if warps
                .iter()
                .all(|w| w.running == 0 && w.at_bar == 0 && w.parked == 0)
            {
                break;
            }
            if !progress && !self.resolve_deadlock(&mut bc, &mut warps) {
                break;
            }
        }
    }

    /// Runs one warp for up to a slice; returns whether anything executed.
    fn run_warp(&mut self, bc: &mut BlockCtx, w: &mut Warp) -> bool {
        let insts = &self.spec.prog.insts;
        let fuel_limit = self.spec.checks.fuel;
        let mut progressed = false;
        let mut cur: Option<(u32, u32)> = None;
        for _ in 0..SLICE {
            let (pc, group) = match cur {
                Some(c) => c,
                None => {
                    if w.running == 0 {
                        if w.parked != 0 {
                            self.force_collective(bc, w);
                            progressed = true;
                            continue;
                        }
                        return progressed;
                    }
                    select(w)
                }
            };
            progressed = true;
            let Some(inst) = insts.get(pc as usize) else {
                // Only reachable through a corrupt pc; treat as exit.
                w.running &= !group;
                w.exited |= group;
                cur = None;
                continue;
            };
            let flow = self.step(bc, w, inst, pc, group);
            for l in 0..WARP {
                w.fuel[l] += u64::from((group >> l) & 1);
            }
            w.steps += 1;
            let still = group & w.running;
            cur = match flow {
                Flow::Next | Flow::Jump(_) => {
                    let npc = if let Flow::Jump(t) = flow { t } else { pc + 1 };
                    if still != 0 && still == w.running {
                        Some((npc, still))
                    } else {
                        for l in lanes(still) {
                            w.pc[l] = npc;
                        }
                        None
                    }
                }
                Flow::Split => None,
            };
            if w.steps > fuel_limit {
                if let Some((npc, g)) = cur.take() {
                    for l in lanes(g) {
                        w.pc[l] = npc;
                    }
                }
                self.check_fuel(bc, w, pc);
            }
        }
        if let Some((npc, g)) = cur {
            for l in lanes(g) {
                w.pc[l] = npc;
            }
        }
        progressed
    }

    fn check_fuel(&mut self, bc: &mut BlockCtx, w: &mut Warp, pc: u32) {
        let limit = self.spec.checks.fuel;
        let live = w.running | w.at_bar | w.parked;
        for l in lanes(live) {
            if w.fuel[l] > limit {
                let line = self.line_of(pc);
                let thread = self.thread_of(w.index, l);
                self.findings.push(Finding {
                    kind: FindingKind::FuelExhausted,
                    message: format!("thread executed more than {limit} instructions (infinite loop?); last pc {pc} (line {line})"),
                    pc: pc as usize,
                    line,
                    thread,
                    block: bc.ctaid,
                    address: None,
                    other: None,
                    access: None,
                    count: 1,
                    source: None,
                });
                self.fault_lane(bc, w, l);
            }
        }
    }

    pub fn line_of(&self, pc: u32) -> usize {
        self.spec
            .prog
            .insts
            .get(pc as usize)
            .map_or(0, |i| i.line as usize)
    }

    /// Stops lane `l` after a fault.
    pub fn fault_lane(&mut self, bc: &mut BlockCtx, w: &mut Warp, l: usize) {
        let bit = 1u32 << l;
        w.running &= !bit;
        w.at_bar &= !bit;
        w.parked &= !bit;
        w.faulted |= bit;
        bc.faulted = true;
    }

    /// Records a finding located at lane `l` of `w`.
    #[allow(clippy::too_many_arguments)]
    pub fn report(
        &mut self,
        bc: &BlockCtx,
        w: &Warp,
        l: usize,
        pc: u32,
        kind: FindingKind,
        message: String,
        address: Option<u64>,
    ) {
        let line = self.line_of(pc);
        let thread = self.thread_of(w.index, l);
        self.findings.push(Finding {
            kind,
            message,
            pc: pc as usize,
            line,
            thread,
            block: bc.ctaid,
            address,
            other: None,
            access: None,
            count: 1,
            source: None,
        });
    }

    #[inline(always)]
    pub fn rd(&self, bc: &BlockCtx, w: &Warp, s: Src, l: usize) -> u64 {
        match s {
            Src::Reg(r) => w.regs[r as usize * WARP + l],
            Src::Imm(v) => v,
            Src::Special(sp) => self.special(bc, w, sp, l),
        }
    }

    fn special(&self, bc: &BlockCtx, w: &Warp, s: Special, l: usize) -> u64 {
        let lane_bit = 1u64 << l;
        match s {
            Special::Tid(c) => u64::from(self.thread_of(w.index, l)[c as usize]),
            Special::Ntid(c) => u64::from(self.spec.block[c as usize]),
            Special::Ctaid(c) => u64::from(bc.ctaid[c as usize]),
            Special::Nctaid(c) => u64::from(self.spec.grid[c as usize]),
            Special::LaneId => l as u64,
            Special::WarpId => u64::from(w.index),
            Special::NWarpId => u64::from(bc.nthreads.div_ceil(WARP as u32)),
            Special::SmId | Special::GridId => 0,
            Special::NSmId => 1,
            Special::Clock => w.fuel[l],
            Special::LanemaskEq => lane_bit,
            Special::LanemaskLe => (lane_bit << 1).wrapping_sub(1) & 0xffff_ffff,
            Special::LanemaskLt => lane_bit - 1,
            Special::LanemaskGe => !(lane_bit - 1) & 0xffff_ffff,
            Special::LanemaskGt => !((lane_bit << 1).wrapping_sub(1)) & 0xffff_ffff,
            Special::DynamicSmemSize => self.spec.dynamic_smem,
            Special::TotalSmemSize => self.spec.smem_bytes,
            Special::ReservedSmem => 0,
            Special::GlobalAddr(i) => self.spec.global_addrs.get(i as usize).copied().unwrap_or(0),
        }
    }

    fn guard_mask(&self, w: &Warp, inst: &Inst, group: u32) -> u32 {
        match inst.guard {
            None => group,
            Some((r, neg)) => {
                let base = r as usize * WARP;
                let mut m = 0;
                for l in lanes(group) {
                    if (w.regs[base + l] & 1 != 0) != neg {
                        m |= 1 << l;
                    }
                }
                m
            }
        }
    }

    /// Executes `inst` for the lanes of `group` (all at `pc`).
    fn step(&mut self, bc: &mut BlockCtx, w: &mut Warp, inst: &Inst, pc: u32, group: u32) -> Flow {
        let exec = self.guard_mask(w, inst, group);
        self.class_counts[inst.class as usize] += u64::from(exec.count_ones());
        match inst.op {
            Op::Mov { d, a } => {
                for l in lanes(exec) {
                    w.regs[d as usize * WARP + l] = self.rd(bc, w, a, l);
                }
            }
            Op::Alu1 { f, d, a } => {
                for l in lanes(exec) {
                    w.regs[d as usize * WARP + l] = f(self.rd(bc, w, a, l));
                }
            }
            Op::Alu2 { f, d, a, b } => {
                if let (Src::Reg(ra), Src::Reg(rb)) = (a, b) {
                    let (ra, rb, rd) = (ra as usize * WARP, rb as usize * WARP, d as usize * WARP);
                    for l in lanes(exec) {
                        w.regs[rd + l] = f(w.regs[ra + l], w.regs[rb + l]);
                    }
                } else {
                    for l in lanes(exec) {
                        w.regs[d as usize * WARP + l] =
                            f(self.rd(bc, w, a, l), self.rd(bc, w, b, l));
                    }
                }
            }
            Op::Alu3 { f, d, a, b, c } => {
                if let (Src::Reg(ra), Src::Reg(rb), Src::Reg(rc)) = (a, b, c) {
                    let (ra, rb, rc, rd) = (
                        ra as usize * WARP,
                        rb as usize * WARP,
                        rc as usize * WARP,
                        d as usize * WARP,
                    );
                    for l in lanes(exec) {
                        w.regs[rd + l] = f(w.regs[ra + l], w.regs[rb + l], w.regs[rc + l]);
                    }
                } else {
                    for l in lanes(exec) {
                        let v = f(
                            self.rd(bc, w, a, l),
                            self.rd(bc, w, b, l),
                            self.rd(bc, w, c, l),
                        );
                        w.regs[d as usize * WARP + l] = v;
                    }
                }
            }
            Op::Alu4 { f, d, a, b, c, e } => {
                for l in lanes(exec) {
                    let v = f(
                        self.rd(bc, w, a, l),
                        self.rd(bc, w, b, l),
                        self.rd(bc, w, c, l),
                        self.rd(bc, w, e, l),
                    );
                    w.regs[d as usize * WARP + l] = v;
                }
            }
            Op::Setp {
                f,
                comb,
                d,
                q,
                a,
                b,
                c,
                c_neg,
            } => {
                for l in lanes(exec) {
                    let t = f(self.rd(bc, w, a, l), self.rd(bc, w, b, l));
                    let cv = (self.rd(bc, w, c, l) & 1 != 0) != c_neg;
                    let combine = |x: bool| match comb {
                        1 => x && cv,
                        2 => x || cv,
                        3 => x ^ cv,
                        _ => x,
                    };
                    w.regs[d as usize * WARP + l] = u64::from(combine(t));
                    w.regs[q as usize * WARP + l] = u64::from(combine(!t));
                }
            }
            Op::Carry {
                f,
                d,
                a,
                b,
                c,
                cc,
                cin,
                cout,
            } => {
                let ccr = cc as usize * WARP;
                for l in lanes(exec) {
                    let carry = cin && w.regs[ccr + l] & 1 != 0;
                    let (v, out) = f(
                        self.rd(bc, w, a, l),
                        self.rd(bc, w, b, l),
                        self.rd(bc, w, c, l),
                        carry,
                    );
                    w.regs[d as usize * WARP + l] = v;
                    if cout {
                        w.regs[ccr + l] = u64::from(out);
                    }
                }
            }
            Op::Selp { d, a, b, p } => {
                for l in lanes(exec) {
                    let v = if self.rd(bc, w, p, l) & 1 != 0 {
                        self.rd(bc, w, a, l)
                    } else {
                        self.rd(bc, w, b, l)
                    };
                    w.regs[d as usize * WARP + l] = v;
                }
            }
            Op::Cvt { ref spec, d, a } => {
                for l in lanes(exec) {
                    w.regs[d as usize * WARP + l] = convert(spec, self.rd(bc, w, a, l));
                }
            }
            Op::CvtPack { ref spec, d, a, b } => {
                for l in lanes(exec) {
                    let hi = convert(spec, self.rd(bc, w, a, l));
                    let lo = convert(spec, self.rd(bc, w, b, l));
                    w.regs[d as usize * WARP + l] = (hi << 16) | (lo & 0xffff);
                }
            }
            Op::Pack { d, parts, n, ew } => {
                let emask = if ew >= 64 { u64::MAX } else { (1u64 << ew) - 1 };
                for l in lanes(exec) {
                    let mut v = 0u64;
                    for (i, p) in parts.iter().take(n as usize).enumerate() {
                        v |= (self.rd(bc, w, *p, l) & emask) << (i as u32 * u32::from(ew));
                    }
                    w.regs[d as usize * WARP + l] = v;
                }
            }
            Op::Unpack { ds, n, ew, a } => {
                let emask = if ew >= 64 { u64::MAX } else { (1u64 << ew) - 1 };
                for l in lanes(exec) {
                    let v = self.rd(bc, w, a, l);
                    for (i, d) in ds.iter().take(n as usize).enumerate() {
                        w.regs[*d as usize * WARP + l] = (v >> (i as u32 * u32::from(ew))) & emask;
                    }
                }
            }
            Op::Ld { .. } | Op::St { .. } | Op::Atom { .. } => {
                self.memory_op(bc, w, inst, pc, exec)
            }
            Op::Bra { target } => {
                if exec == group {
                    return Flow::Jump(target);
                }
                if exec == 0 {
                    return Flow::Next;
                }
                for l in lanes(group) {
                    w.pc[l] = if exec & (1 << l) != 0 { target } else { pc + 1 };
                }
                return Flow::Split;
            }
            Op::Bar {
                arrive,
                id,
                count,
                red,
            } => {
                if exec != 0 {
                    self.barrier(bc, w, pc, exec, arrive, id, count, red);
                }
            }
            Op::Shfl { .. }
            | Op::Vote { .. }
            | Op::WarpSync { .. }
            | Op::Redux { .. }
            | Op::Match { .. } => {
                return self.collective(bc, w, inst, pc, group, exec);
            }
            Op::ActiveMask { d } => {
                for l in lanes(exec) {
                    w.regs[d as usize * WARP + l] = u64::from(group);
                }
            }
            Op::Mma { .. } => self.mma(bc, w, inst, pc, exec),
            Op::Ldmatrix { .. } => self.ldmatrix(bc, w, inst, pc, exec),
            Op::CpAsync(ref c) => self.cp_async(bc, w, c, pc, exec),
            Op::CpAsyncCommit => self.cp_async_commit(bc, w, exec),
            Op::CpAsyncWait { keep, all } => self.cp_async_wait(bc, w, exec, keep, all),
            Op::Exit => self.exit_lanes(bc, w, pc, exec),
            Op::Call(ref c) => return self.call(bc, w, c, pc, group, exec),
            Op::Ret => return self.ret(bc, w, pc, group, exec),
            Op::AssertFail(ref a) => self.assert_fail(bc, w, a, pc, exec),
            Op::Trap => {
                if let Some(l) = lanes(exec).next() {
                    self.report(
                        bc,
                        w,
                        l,
                        pc,
                        FindingKind::Trap,
                        "trap executed".into(),
                        None,
                    );
                }
                for l in lanes(exec) {
                    self.fault_lane(bc, w, l);
                }
            }
            Op::Nop => {}
        }
        Flow::Next
    }

    /// The lanes of `exec` exit the thread.
    fn exit_lanes(&mut self, bc: &mut BlockCtx, w: &mut Warp, pc: u32, exec: u32) {
        if bc.asyncs.pending != 0 {
            self.exit_with_copies(bc, w, pc, exec);
        }
        w.running &= !exec;
        w.exited |= exec;
    }

    #[allow(clippy::too_many_arguments)]
    fn barrier(
        &mut self,
        bc: &mut BlockCtx,
        w: &mut Warp,
        pc: u32,
        exec: u32,
        arrive: bool,
        id: Src,
        count: Option<Src>,
        red: Option<BarRed>,
    ) {
        let first = exec.trailing_zeros() as usize;
        let id = (self.rd(bc, w, id, first) & 15) as usize;
        let expected = match count {
            Some(c) => self.rd(bc, w, c, first) as u32,
            None => bc.nthreads,
        };
        let n = exec.count_ones();
        self.counters.barriers += u64::from(n);
        let thread = w.index * WARP as u32 + first as u32;
        let bar = &mut bc.bars[id];
        if bar.arrived == 0 {
            bar.expected = expected.max(1);
            bar.first_pc = pc;
            bar.first_thread = thread;
        } else if bar.first_pc != pc && bar.mixed.is_none() {
            bar.mixed = Some((pc, thread));
        }
        bar.arrived += n;
        // With a thread count (a multiple of the warp size), arrivals are counted per warp: the
        // block's partial last warp stands for a whole warp, its absent lanes included.
        let absent =
            (WARP as u32).saturating_sub(bc.nthreads.saturating_sub(w.index * WARP as u32));
        if count.is_some() && absent > 0 && !bar.padded {
            bar.arrived += absent;
            bar.padded = true;
        }
        if let Some(r) = red {
            for l in lanes(exec) {
                if (self.rd(bc, w, r.c, l) & 1 != 0) != r.neg {
                    bc.bars[id].red_true += 1;
                }
            }
        }
        let bar = &bc.bars[id];
        let reached = bar.arrived >= bar.expected;
        if !arrive {
            w.running &= !exec;
            w.at_bar |= exec;
            for l in lanes(exec) {
                w.bar_id[l] = id as u8;
                w.pc[l] = pc + 1;
            }
        }
        if reached {
            bc.pending_release |= 1 << id;
        }
    }

    /// Completes the barriers whose count was reached.
    fn release(&mut self, bc: &mut BlockCtx, warps: &mut [Warp]) {
        let pending = bc.pending_release;
        bc.pending_release = 0;
        for id in lanes(u32::from(pending)) {
            let bar = bc.bars[id];
            if let Some((pc2, t2)) = bar.mixed {
                if self.spec.checks.synccheck && !bc.faulted {
                    let (l1, l2) = (self.line_of(bar.first_pc), self.line_of(pc2));
                    let t1 =
                        self.thread_of(bar.first_thread / 32, (bar.first_thread % 32) as usize);
                    let t2c = self.thread_of(t2 / 32, (t2 % 32) as usize);
                    self.findings.push(Finding {
                        kind: FindingKind::DivergentBarrier,
                        message: format!(
                            "barrier {id} was reached at different instructions: line {l1} (thread {t1:?}) and line {l2} (thread {t2c:?})"
                        ),
                        pc: bar.first_pc as usize,
                        line: l1,
                        thread: t1,
                        block: bc.ctaid,
                        address: None,
                        other: Some(Access {
                            kind: crate::findings::AccessKind::Read,
                            pc: pc2 as usize,
                            line: l2,
                            thread: t2c,
                            block: bc.ctaid,
                            address: 0,
                        }),
                        access: None,
                        count: 1,
                        source: None,
                    });
                }
            }
            for w in warps.iter_mut() {
                let mut m = 0u32;
                for l in lanes(w.at_bar) {
                    if w.bar_id[l] as usize == id {
                        m |= 1 << l;
                    }
                }
                w.at_bar &= !m;
                w.running |= m;
                self.write_bar_red(w, m, &bar);
            }
            bc.bars[id] = Bar::default();
            self.counters.barrier_releases += 1;
            if let Some(r) = &mut self.race {
                r.barrier();
            }
        }
    }

    /// Gives the lanes `released` from barrier `bar` that waited at a `bar.red` its result.
    fn write_bar_red(&self, w: &mut Warp, released: u32, bar: &Bar) {
        for l in lanes(released) {
            // A waiting lane's pc is already past its barrier instruction.
            let at = self.spec.prog.insts.get(w.pc[l].wrapping_sub(1) as usize);
            let Some(Inst {
                op: Op::Bar { red: Some(r), .. },
                ..
            }) = at
            else {
                continue;
            };
            let v = match r.op {
                BarRedOp::Popc => u64::from(bar.red_true),
                BarRedOp::And => u64::from(bar.red_true == bar.arrived),
                BarRedOp::Or => u64::from(bar.red_true > 0),
            };
            w.regs[r.d as usize * WARP + l] = v;
        }
    }

    /// Nothing in the block can run but some threads wait at barriers.
    fn resolve_deadlock(&mut self, bc: &mut BlockCtx, warps: &mut [Warp]) -> bool {
        let mut waiting = 0u32;
        let mut exited = 0u32;
        let mut ids = 0u16;
        let mut first_wait: Option<(u32, usize)> = None;
        let mut first_exit: Option<(u32, usize)> = None;
        for w in warps.iter() {
            waiting += w.at_bar.count_ones();
            let ex = w.exited & w.present;
            exited += ex.count_ones();
            for l in lanes(w.at_bar) {
                ids |= 1 << w.bar_id[l];
                first_wait.get_or_insert((w.index, l));
            }
            if let Some(l) = lanes(ex).next() {
                first_exit.get_or_insert((w.index, l));
            }
        }
        let Some((ww, wl)) = first_wait else {
            return false;
        };
        let id = warps[ww as usize].bar_id[wl] as usize;
        let bar = bc.bars[id];
        let line = self.line_of(bar.first_pc);
        let thread = self.thread_of(ww, wl);
        if !bc.faulted {
            let single = ids.count_ones() == 1;
            let (kind, message) = if single && exited > 0 {
                let ex = first_exit
                    .map(|(w, l)| self.thread_of(w, l))
                    .unwrap_or_default();
                (
                    FindingKind::ExitBeforeBarrier,
                    format!(
                        "{waiting} thread(s) wait at barrier {id} (line {line}) expecting {} arrivals, but {exited} thread(s) of the block exited before reaching it (first: thread {ex:?})",
                        bar.expected
                    ),
                )
            } else if single {
                (
                    FindingKind::DivergentBarrier,
                    format!(
                        "barrier {id} (line {line}) expects {} threads but only {} arrive",
                        bar.expected, bar.arrived
                    ),
                )
            } else {
                (
                    FindingKind::DivergentBarrier,
                    format!("threads of the block wait at different barriers ({} ids) and can never all meet; first at line {line}", ids.count_ones()),
                )
            };
            let kind = if self.spec.checks.synccheck {
                Some(kind)
            } else if kind == FindingKind::ExitBeforeBarrier {
                None
            } else {
                Some(FindingKind::Deadlock)
            };
            if let Some(kind) = kind {
                self.findings.push(Finding {
                    kind,
                    message,
                    pc: bar.first_pc as usize,
                    line,
                    thread,
                    block: bc.ctaid,
                    address: None,
                    other: None,
                    access: None,
                    count: 1,
                    source: None,
                });
            }
        }
        // Release everyone so the block can finish.
        for w in warps.iter_mut() {
            w.running |= w.at_bar;
            w.at_bar = 0;
        }
        bc.bars = [Bar::default(); 16];
        if let Some(r) = &mut self.race {
            r.barrier();
        }
        true
    }
}

/// The lanes at the lowest pc among the running lanes.
fn select(w: &Warp) -> (u32, u32) {
    let mut best = u32::MAX;
    let mut group = 0u32;
    for l in lanes(w.running) {
        let pc = w.pc[l];
        if pc < best {
            best = pc;
            group = 1 << l;
        } else if pc == best {
            group |= 1 << l;
        }
    }
    (best, group)
}
