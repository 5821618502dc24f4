//! Memory instructions (`ld`, `st`, `atom`, `red`) for a warp group: address resolution by
//! state space, memcheck (bounds and alignment), initcheck on global reads, racecheck on shared
//! accesses, and the coalescing / bank-conflict counters of the warp-level request.

use super::global::GlobalSpace;
use super::{lanes, BlockCtx, Engine, Warp, WARP};
use crate::counters::{distinct_bytes, sectors, wavefronts_and_min};
use crate::decode::{Addr, AtomFn, Inst, MemSpace, Op};
use crate::findings::{Access, AccessKind, Finding, FindingKind};
use crate::memory::{read_bytes, write_bytes, LOCAL_WINDOW, SHARED_WINDOW, WINDOW_SIZE};
use crate::types::extend;

/// Where one lane's access lands.
#[derive(Debug, Clone, Copy)]
pub(super) enum Region {
    Global(usize, usize),
    Shared(u64),
    Local(u64),
    Param(u64),
    Const(u64),
    /// Out of bounds with memcheck off: reads give 0, writes are dropped.
    Dropped,
}

impl<G: GlobalSpace> Engine<'_, G> {
    pub(super) fn memory_op(
        &mut self,
        bc: &mut BlockCtx,
        w: &mut Warp,
        inst: &Inst,
        pc: u32,
        exec: u32,
    ) {
        let mut gaddrs: [u64; WARP] = [0; WARP];
        // Shared address of each active lane, by lane: the wavefront counters group lanes into
        // phases.
        let mut saddrs: [Option<u64>; WARP] = [None; WARP];
        let (mut ng, mut ns) = (0usize, 0usize);
        let (bytes, is_load) = match inst.op {
            Op::Ld { n, size, .. } => (u64::from(n) * u64::from(size), true),
            Op::St { n, size, .. } => (u64::from(n) * u64::from(size), false),
            Op::Atom { size, .. } => (u64::from(size), false),
            _ => return,
        };
        let is_store = matches!(inst.op, Op::St { .. });
        // Global or shared address of each storing lane, for the write-conflict check.
        let mut stores = WarpStores::default();
        if is_store {
            if let Some(r) = &mut self.race {
                r.begin_store();
            }
        }
        for l in lanes(exec) {
            let (space, addr, kind) = match inst.op {
                Op::Ld { space, addr, .. } => (space, addr, AccessKind::Read),
                Op::St { space, addr, .. } => (space, addr, AccessKind::Write),
                Op::Atom { space, addr, .. } => (space, addr, AccessKind::Atomic),
                _ => return,
            };
            let a = self.effective(bc, w, addr, l);
            let Some(region) = self.resolve(bc, w, l, pc, space, a, bytes, bytes, kind) else {
                continue;
            };
            match region {
                Region::Global(..) => {
                    gaddrs[ng] = a;
                    ng += 1;
                    if is_store {
                        stores.push(a, l);
                    }
                }
                Region::Shared(off) => {
                    saddrs[l] = Some(off);
                    ns += 1;
                    if is_store {
                        stores.push(SHARED_WINDOW + off, l);
                    }
                }
                _ => {}
            }
            match inst.op {
                Op::Ld {
                    d,
                    n,
                    size,
                    sign,
                    dmask,
                    ..
                } => {
                    for (i, dst) in d.iter().take(n as usize).enumerate() {
                        let off = i as u64 * u64::from(size);
                        let v = self.load(bc, w, l, region, off, size as usize);
                        w.regs[*dst as usize * WARP + l] =
                            extend(v, u32::from(size) * 8, sign) & dmask;
                    }
                    if let Region::Global(b, o) = region {
                        if self.spec.checks.initcheck && !self.global.is_init(b, o, bytes as usize)
                        {
                            let first = (0..bytes as usize)
                                .find(|&i| !self.global.is_init(b, o + i, 1))
                                .unwrap_or(0);
                            self.report(
                                bc,
                                w,
                                l,
                                pc,
                                FindingKind::Uninitialized,
                                format!("read of {bytes} byte(s) at 0x{a:x}: byte 0x{:x} was never written or uploaded", a + first as u64),
                                Some(a),
                            );
                        }
                    }
                }
                Op::St { s, n, size, .. } => {
                    for (i, src) in s.iter().take(n as usize).enumerate() {
                        let v = self.rd(bc, w, *src, l);
                        self.store(
                            bc,
                            w,
                            l,
                            region,
                            i as u64 * u64::from(size),
                            size as usize,
                            v,
                        );
                    }
                }
                Op::Atom {
                    f, size, d, b, c, ..
                } => {
                    let old = self.load(bc, w, l, region, 0, size as usize);
                    if let Region::Global(bi, o) = region {
                        if self.spec.checks.initcheck && !self.global.is_init(bi, o, size as usize)
                        {
                            self.report(
                                bc,
                                w,
                                l,
                                pc,
                                FindingKind::Uninitialized,
                                format!("atomic on uninitialised bytes at 0x{a:x}"),
                                Some(a),
                            );
                        }
                    }
                    let (bv, cv) = (self.rd(bc, w, b, l), self.rd(bc, w, c, l));
                    let new = match f {
                        AtomFn::Bin(f) => f(old, bv),
                        AtomFn::Tern(f) => f(old, bv, cv),
                    };
                    self.store(bc, w, l, region, 0, size as usize, new);
                    w.regs[d as usize * WARP + l] = old;
                }
                _ => {}
            }
        }
        if is_store {
            if let Some(r) = &mut self.race {
                r.end_store();
                self.write_conflicts(bc, w, inst, pc, &mut stores);
            }
        }
        if ng > 0 {
            let sec = sectors(&gaddrs[..ng], bytes);
            let used = distinct_bytes(gaddrs[..ng].iter().map(|&a| (a, bytes)));
            let c = &mut self.counters;
            if is_load {
                c.global_load_requests += 1;
                c.global_load_sectors += sec;
                c.global_load_bytes += used;
            } else {
                c.global_store_requests += 1;
                c.global_store_sectors += sec;
                c.global_store_bytes += used;
            }
        }
        if ns > 0 {
            self.counters.shared_requests += 1;
            let size = bytes.min(16);
            let (taken, fewest) = wavefronts_and_min(&saddrs, size);
            self.counters.shared_wavefronts += taken;
            self.counters.shared_min_wavefronts += fewest;
        }
    }

    /// Lanes of one store instruction that wrote the same address: one value lands, so it is
    /// no race; when their values differ, which one is unspecified (`WarpWriteConflict`).
    fn write_conflicts(
        &mut self,
        bc: &BlockCtx,
        w: &Warp,
        inst: &Inst,
        pc: u32,
        stores: &mut WarpStores,
    ) {
        let Op::St { s, n, .. } = inst.op else {
            return;
        };
        let Some((addr, l1, l2)) = stores.same_address(|a, b| {
            s.iter()
                .take(n as usize)
                .any(|v| self.rd(bc, w, *v, a) != self.rd(bc, w, *v, b))
        }) else {
            return;
        };
        let space = if addr >= SHARED_WINDOW {
            "shared"
        } else {
            "global"
        };
        let shown = if addr >= SHARED_WINDOW {
            addr - SHARED_WINDOW
        } else {
            addr
        };
        let (t1, t2) = (self.thread_of(w.index, l1), self.thread_of(w.index, l2));
        let line = self.line_of(pc);
        self.findings.push(Finding {
            kind: FindingKind::WarpWriteConflict,
            message: format!(
                "threads {t1:?} and {t2:?} of one warp store different values to {space} address 0x{shown:x} in the same instruction (line {line}): which value lands is unspecified"
            ),
            pc: pc as usize,
            line,
            thread: t2,
            block: bc.ctaid,
            address: Some(shown),
            other: Some(Access {
                kind: AccessKind::Write,
                pc: pc as usize,
                line,
                thread: t1,
                block: bc.ctaid,
                address: shown,
            }),
            access: Some(AccessKind::Write),
            count: 1,
            source: None,
        });
    }

    pub(super) fn effective(&self, bc: &BlockCtx, w: &Warp, addr: Addr, l: usize) -> u64 {
        self.rd(bc, w, addr.base, l)
            .wrapping_add(addr.offset as u64)
    }

    /// Checks one lane's access of `bytes` bytes that must be `align`-byte aligned and locates
    /// it; `None` when the lane faulted.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn resolve(
        &mut self,
        bc: &mut BlockCtx,
        w: &mut Warp,
        l: usize,
        pc: u32,
        space: MemSpace,
        a: u64,
        bytes: u64,
        align: u64,
        kind: AccessKind,
    ) -> Option<Region> {
        let memcheck = self.spec.checks.memcheck;
        let space = match space {
            MemSpace::Generic if (SHARED_WINDOW..SHARED_WINDOW + WINDOW_SIZE).contains(&a) => {
                MemSpace::Shared
            }
            MemSpace::Generic if (LOCAL_WINDOW..LOCAL_WINDOW + WINDOW_SIZE).contains(&a) => {
                MemSpace::Local
            }
            MemSpace::Generic => MemSpace::Global,
            s => s,
        };
        let off = match space {
            MemSpace::Shared if a >= SHARED_WINDOW => a - SHARED_WINDOW,
            MemSpace::Local if a >= LOCAL_WINDOW => a - LOCAL_WINDOW,
            _ => a,
        };
        if memcheck && align > 1 && off % align != 0 && space != MemSpace::Param {
            self.report(
                bc,
                w,
                l,
                pc,
                FindingKind::Misaligned,
                format!(
                    "{} of {bytes} bytes at {} address 0x{a:x} is not {align}-byte aligned",
                    kind.name(),
                    space_name(space)
                ),
                Some(a),
            );
            self.fault_lane(bc, w, l);
            return None;
        }
        let (limit, name) = match space {
            MemSpace::Global | MemSpace::Generic => match self.global.locate(a, bytes) {
                Ok((b, o)) => {
                    if bc.asyncs.pending != 0
                        && kind != AccessKind::Read
                        && self.spec.checks.asynccheck
                    {
                        self.async_src_hazard(bc, w, l, pc, b, o, a, bytes, kind);
                    }
                    return Some(Region::Global(b, o));
                }
                Err(fault) => {
                    if !memcheck {
                        return Some(Region::Dropped);
                    }
                    self.report(
                        bc,
                        w,
                        l,
                        pc,
                        FindingKind::OutOfBounds,
                        format!("global {}: {}", kind.name(), fault.message),
                        Some(a),
                    );
                    self.fault_lane(bc, w, l);
                    return None;
                }
            },
            MemSpace::Shared => (bc.shared.len() as u64, "shared"),
            MemSpace::Local => (self.spec.prog.local_size, "local"),
            MemSpace::Param => (self.spec.params.len() as u64, "param"),
            MemSpace::Const => (self.spec.consts.len() as u64, "const"),
        };
        if !matches!(off.checked_add(bytes), Some(e) if e <= limit) {
            if !memcheck {
                return Some(Region::Dropped);
            }
            self.report(
                bc,
                w,
                l,
                pc,
                FindingKind::OutOfBounds,
                format!("{name} {} of {bytes} bytes at offset 0x{off:x} is outside the {limit} bytes of {name} memory", kind.name()),
                Some(a),
            );
            self.fault_lane(bc, w, l);
            return None;
        }
        let region = match space {
            MemSpace::Shared => Region::Shared(off),
            MemSpace::Local => Region::Local(off),
            MemSpace::Param => Region::Param(off),
            _ => Region::Const(off),
        };
        if let Region::Shared(off) = region {
            if bc.asyncs.pending != 0 && self.spec.checks.asynccheck {
                self.async_dst_hazard(bc, w, l, pc, off, bytes, kind);
            }
        }
        if let (Region::Shared(off), Some(race)) = (region, self.race.as_mut()) {
            let thread = w.index * WARP as u32 + l as u32;
            if let Some(c) = race.access(thread, pc, off, bytes, kind) {
                let line = self.line_of(pc);
                let other_line = self.line_of(c.pc);
                let me = self.thread_of(w.index, l);
                let other =
                    self.thread_of(c.thread / WARP as u32, (c.thread % WARP as u32) as usize);
                let message = format!(
                    "shared {} at offset 0x{:x} by thread {me:?} (line {line}) conflicts with {} by thread {other:?} (line {other_line}) with no barrier in between",
                    kind.name(),
                    c.offset,
                    c.kind.name(),
                );
                self.findings.push(Finding {
                    kind: FindingKind::SharedRace,
                    message,
                    pc: pc as usize,
                    line,
                    thread: me,
                    block: bc.ctaid,
                    address: Some(c.offset),
                    other: Some(Access {
                        kind: c.kind,
                        pc: c.pc as usize,
                        line: other_line,
                        thread: other,
                        block: bc.ctaid,
                        address: c.offset,
                    }),
                    access: Some(kind),
                    count: 1,
                    source: None,
                });
            }
        }
        Some(region)
    }

    pub(super) fn load(
        &self,
        bc: &BlockCtx,
        w: &Warp,
        l: usize,
        r: Region,
        off: u64,
        size: usize,
    ) -> u64 {
        match r {
            Region::Global(b, o) => self.global.read(b, o + off as usize, size),
            Region::Shared(o) => read_bytes(&bc.shared, o + off, size).unwrap_or(0),
            Region::Local(o) => {
                let base = l as u64 * self.spec.prog.local_size;
                read_bytes(&w.local, base + o + off, size).unwrap_or(0)
            }
            Region::Param(o) => read_bytes(&self.spec.params, o + off, size).unwrap_or(0),
            Region::Const(o) => read_bytes(self.spec.consts, o + off, size).unwrap_or(0),
            Region::Dropped => 0,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn store(
        &mut self,
        bc: &mut BlockCtx,
        w: &mut Warp,
        l: usize,
        r: Region,
        off: u64,
        size: usize,
        v: u64,
    ) {
        match r {
            Region::Global(b, o) => {
                self.global.write(b, o + off as usize, size, v);
            }
            Region::Shared(o) => {
                write_bytes(&mut bc.shared, o + off, size, v);
            }
            Region::Local(o) => {
                let base = l as u64 * self.spec.prog.local_size;
                write_bytes(&mut w.local, base + o + off, size, v);
            }
            Region::Param(_) | Region::Const(_) | Region::Dropped => {}
        }
    }
}

/// The addresses one store instruction wrote, lane by lane.
#[derive(Default)]
struct WarpStores {
    items: [(u64, u8); WARP],
    len: usize,
    /// Addresses strictly increase with the lane so far (coalesced stores): no repeats.
    increasing: bool,
}

impl WarpStores {
    fn push(&mut self, addr: u64, lane: usize) {
        self.increasing = self.len == 0 || (self.increasing && self.items[self.len - 1].0 < addr);
        self.items[self.len] = (addr, lane as u8);
        self.len += 1;
    }

    /// The first address (lowest) that two lanes wrote with values that `differ`, with the
    /// two lanes (lower first). Stores of one instruction are equally sized and aligned, so
    /// they either coincide or are disjoint.
    fn same_address(
        &mut self,
        mut differ: impl FnMut(usize, usize) -> bool,
    ) -> Option<(u64, usize, usize)> {
        if self.len < 2 || self.increasing {
            return None;
        }
        let items = &mut self.items[..self.len];
        items.sort_unstable();
        let mut start = 0;
        while start < items.len() {
            let mut end = start + 1;
            while end < items.len() && items[end].0 == items[start].0 {
                end += 1;
            }
            let first = usize::from(items[start].1);
            if let Some(&(a, other)) = items[start + 1..end]
                .iter()
                .find(|&&(_, l)| differ(first, usize::from(l)))
            {
                return Some((a, first, usize::from(other)));
            }
            start = end;
        }
        None
    }
}

fn space_name(s: MemSpace) -> &'static str {
    match s {
        MemSpace::Global | MemSpace::Generic => "global",
        MemSpace::Shared => "shared",
        MemSpace::Local => "local",
        MemSpace::Param => "param",
        MemSpace::Const => "const",
    }
}
