//! `cp.async` as a real asynchronous copy, per thread: a copy reads its global source when it is
//! issued (memcheck and initcheck apply then) and is pending until a `cp.async.wait_group` /
//! `cp.async.wait_all` of the issuing thread retires its group; only then do its bytes (the
//! source bytes, zero-filled past src-size) land in shared memory. `cp.async.commit_group`
//! closes the thread's uncommitted copies into a group; `wait_group N` retires every committed
//! group but the N most recent; `wait_all` commits and retires everything.
//!
//! Asynccheck (only while some copy of the block is pending, so code without `cp.async` pays
//! one branch per shared or global access): a shared access touching a pending destination, a
//! store or atomic to a pending source (within the block), and a thread exiting with copies never
//! waited (they land at the exit). Landing counts as a write by the issuing thread for
//! racecheck, so a reader that synchronises only with the wait of another thread is a race.

use std::collections::HashMap;

use super::global::GlobalSpace;
use super::memops::Region;
use super::{lanes, BlockCtx, Engine, Warp, WARP};
use crate::counters::{distinct_bytes, span_sectors, wavefronts_and_min};
use crate::decode::{CpAsync, MemSpace, SrcSize};
use crate::findings::{Access, AccessKind, Finding, FindingKind};

/// Group number of copies issued after the last commit.
const UNCOMMITTED: u32 = u32::MAX;
/// Source bytes are tracked in chunks of this size (a copy never crosses one: cp-size ≤ 16 and
/// the source is aligned to cp-size).
const CHUNK: usize = 16;

/// One pending copy.
#[derive(Debug, Clone, Copy)]
struct Copy {
    group: u32,
    /// Shared offset and length (cp-size) of the destination.
    dst: u64,
    len: u8,
    data: [u8; 16],
    /// Global buffer, offset and bytes read.
    src: Option<(usize, usize, u8)>,
    pc: u32,
    thread: u32,
}

#[derive(Debug, Default)]
struct ThreadCopies {
    /// Groups committed so far.
    committed: u32,
    copies: Vec<Copy>,
}

/// The block's pending copies.
#[derive(Debug, Default)]
pub(crate) struct AsyncCopies {
    /// Copies issued and not yet landed (0: the hazard checks are skipped).
    pub pending: u32,
    threads: Vec<ThreadCopies>,
    /// Per shared byte: pending copies writing it (tracked with asynccheck only).
    dst_shadow: Vec<u16>,
    /// Per (buffer, 16-byte chunk): pending copies reading it (asynccheck only).
    src_chunks: HashMap<(usize, usize), u32>,
}

impl AsyncCopies {
    fn queue(&mut self, thread: u32) -> &mut ThreadCopies {
        let t = thread as usize;
        if self.threads.len() <= t {
            self.threads.resize_with(t + 1, ThreadCopies::default);
        }
        &mut self.threads[t]
    }

    fn issue(&mut self, copy: Copy, smem: usize, track: bool) {
        if track {
            if self.dst_shadow.len() < smem {
                self.dst_shadow.resize(smem, 0);
            }
            for b in copy.dst..copy.dst + u64::from(copy.len) {
                if let Some(s) = self.dst_shadow.get_mut(b as usize) {
                    *s += 1;
                }
            }
            if let Some((buf, off, _)) = copy.src {
                *self.src_chunks.entry((buf, off / CHUNK)).or_insert(0) += 1;
            }
        }
        self.pending += 1;
        self.queue(copy.thread).copies.push(copy);
    }

    fn commit(&mut self, thread: u32) {
        let q = self.queue(thread);
        let group = q.committed;
        for c in q.copies.iter_mut().filter(|c| c.group == UNCOMMITTED) {
            c.group = group;
        }
        // An empty group still counts: the ISA allows committing no copies.
        q.committed += 1;
    }

    /// Removes the copies of `thread` that `wait_group keep` retires (every copy with `all`).
    fn retire(&mut self, thread: u32, keep: u32, all: bool, out: &mut Vec<Copy>) {
        if all {
            self.commit(thread);
        }
        let q = self.queue(thread);
        let limit = q.committed.saturating_sub(keep);
        let before = out.len();
        q.copies.retain(|c| {
            let done = c.group != UNCOMMITTED && c.group < limit;
            if done {
                out.push(*c);
            }
            !done
        });
        for c in &out[before..] {
            self.pending -= 1;
            for b in c.dst..c.dst + u64::from(c.len) {
                if let Some(s) = self.dst_shadow.get_mut(b as usize) {
                    *s = s.saturating_sub(1);
                }
            }
            if let Some((buf, off, _)) = c.src {
                if let Some(n) = self.src_chunks.get_mut(&(buf, off / CHUNK)) {
                    *n -= 1;
                    if *n == 0 {
                        self.src_chunks.remove(&(buf, off / CHUNK));
                    }
                }
            }
        }
    }

    /// The pending copy (if any) whose destination overlaps shared `[off, off + bytes)`.
    fn dst_conflict(&self, off: u64, bytes: u64) -> Option<Copy> {
        let hit =
            (off..off + bytes).any(|b| self.dst_shadow.get(b as usize).is_some_and(|&n| n > 0));
        if !hit {
            return None;
        }
        self.all()
            .find(|c| c.dst < off + bytes && off < c.dst + u64::from(c.len))
            .copied()
    }

    /// The pending copy (if any) reading global `[off, off + bytes)` of buffer `buf`.
    fn src_conflict(&self, buf: usize, off: usize, bytes: usize) -> Option<Copy> {
        let hit = (off / CHUNK..=(off + bytes.max(1) - 1) / CHUNK)
            .any(|ch| self.src_chunks.contains_key(&(buf, ch)));
        if !hit {
            return None;
        }
        self.all()
            .find(|c| {
                c.src.is_some_and(|(b, o, n)| {
                    b == buf && o < off + bytes && off < o + usize::from(n)
                })
            })
            .copied()
    }

    fn all(&self) -> impl Iterator<Item = &Copy> {
        self.threads.iter().flat_map(|t| t.copies.iter())
    }

    fn has_copies(&self, thread: u32) -> bool {
        self.threads
            .get(thread as usize)
            .is_some_and(|t| !t.copies.is_empty())
    }
}

impl<G: GlobalSpace> Engine<'_, G> {
    /// Issues `cp.async` for the lanes of `exec`.
    pub(super) fn cp_async(
        &mut self,
        bc: &mut BlockCtx,
        w: &mut Warp,
        c: &CpAsync,
        pc: u32,
        exec: u32,
    ) {
        let size = u64::from(c.size);
        let mut spans = [(0u64, 0u64); WARP];
        let (mut ng, mut issued) = (0usize, 0u64);
        let mut dsts: [Option<u64>; WARP] = [None; WARP];
        for l in lanes(exec) {
            let n = match c.src_size {
                SrcSize::Full => size,
                SrcSize::Bytes(s) => self.rd(bc, w, s, l).min(size),
                SrcSize::IgnoreIf(p) => {
                    if self.rd(bc, w, p, l) & 1 != 0 {
                        0
                    } else {
                        size
                    }
                }
            };
            let da = self.effective(bc, w, c.dst, l);
            let dst =
                match self.resolve(bc, w, l, pc, c.dst_space, da, size, size, AccessKind::Write) {
                    Some(Region::Shared(off)) => Some(off),
                    Some(_) => None,
                    None => continue,
                };
            let mut data = [0u8; 16];
            let mut src = None;
            if n > 0 {
                let sa = self.effective(bc, w, c.src, l);
                match self.resolve(
                    bc,
                    w,
                    l,
                    pc,
                    MemSpace::Global,
                    sa,
                    n,
                    size,
                    AccessKind::Read,
                ) {
                    Some(Region::Global(b, o)) => {
                        for (i, byte) in data.iter_mut().take(n as usize).enumerate() {
                            *byte = self.global.read(b, o + i, 1) as u8;
                        }
                        if self.spec.checks.initcheck && !self.global.is_init(b, o, n as usize) {
                            self.report(
                                bc,
                                w,
                                l,
                                pc,
                                FindingKind::Uninitialized,
                                format!("cp.async reads {n} byte(s) at 0x{sa:x} that were never written or uploaded"),
                                Some(sa),
                            );
                        }
                        src = Some((b, o, n as u8));
                        spans[ng] = (sa, n);
                        ng += 1;
                    }
                    Some(_) => {}
                    None => continue,
                }
            }
            issued += 1;
            let Some(dst) = dst else { continue };
            dsts[l] = Some(dst);
            let copy = Copy {
                group: UNCOMMITTED,
                dst,
                len: c.size,
                data,
                src,
                pc,
                thread: w.index * WARP as u32 + l as u32,
            };
            bc.asyncs
                .issue(copy, bc.shared.len(), self.spec.checks.asynccheck);
        }
        if issued > 0 {
            let k = &mut self.counters;
            k.cp_async_requests += 1;
            k.cp_async_bytes += issued * size;
            k.cp_async_global_bytes += distinct_bytes(spans[..ng].iter().copied());
            k.cp_async_sectors += span_sectors(spans[..ng].iter().copied());
            let (taken, fewest) = wavefronts_and_min(&dsts, size);
            k.cp_async_shared_wavefronts += taken;
            k.cp_async_shared_min_wavefronts += fewest;
        }
    }

    /// `cp.async.commit_group` for the lanes of `exec`.
    pub(super) fn cp_async_commit(&mut self, bc: &mut BlockCtx, w: &Warp, exec: u32) {
        for l in lanes(exec) {
            bc.asyncs.commit(w.index * WARP as u32 + l as u32);
        }
    }

    /// `cp.async.wait_group keep` / `cp.async.wait_all`: lands the retired copies.
    pub(super) fn cp_async_wait(
        &mut self,
        bc: &mut BlockCtx,
        w: &Warp,
        exec: u32,
        keep: u32,
        all: bool,
    ) {
        let mut done = Vec::new();
        for l in lanes(exec) {
            bc.asyncs
                .retire(w.index * WARP as u32 + l as u32, keep, all, &mut done);
        }
        self.land(bc, &done);
    }

    fn land(&mut self, bc: &mut BlockCtx, copies: &[Copy]) {
        for c in copies {
            let (start, len) = (c.dst as usize, usize::from(c.len));
            if let Some(dst) = bc.shared.get_mut(start..start + len) {
                dst.copy_from_slice(&c.data[..len]);
            }
            if let Some(r) = &mut self.race {
                // Conflicts with accesses between issue and landing were asynccheck's to report.
                let _ = r.access(c.thread, c.pc, c.dst, u64::from(c.len), AccessKind::Write);
            }
        }
    }

    /// Lanes of `exec` exit: copies they never waited for are reported and land now.
    pub(super) fn exit_with_copies(&mut self, bc: &mut BlockCtx, w: &Warp, pc: u32, exec: u32) {
        let mut done = Vec::new();
        for l in lanes(exec) {
            let thread = w.index * WARP as u32 + l as u32;
            if !bc.asyncs.has_copies(thread) {
                continue;
            }
            let before = done.len();
            bc.asyncs.retire(thread, 0, true, &mut done);
            if self.spec.checks.asynccheck {
                let first = done[before];
                self.report(
                    bc,
                    w,
                    l,
                    pc,
                    FindingKind::AsyncCopyNotWaited,
                    format!(
                        "thread exits with {} cp.async cop{} never waited (first issued at line {}); add cp.async.wait_group/wait_all",
                        done.len() - before,
                        if done.len() - before == 1 { "y" } else { "ies" },
                        self.line_of(first.pc)
                    ),
                    None,
                );
            }
        }
        self.land(bc, &done);
    }

    /// Asynccheck on a shared access by lane `l` (only called while copies are pending).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn async_dst_hazard(
        &mut self,
        bc: &BlockCtx,
        w: &Warp,
        l: usize,
        pc: u32,
        off: u64,
        bytes: u64,
        kind: AccessKind,
    ) {
        if let Some(c) = bc.asyncs.dst_conflict(off, bytes) {
            let message = format!(
                "shared {} of {bytes} byte(s) at offset 0x{off:x} touches the destination of a cp.async (line {}) whose group has not been waited",
                kind.name(),
                self.line_of(c.pc)
            );
            self.hazard(bc, w, l, pc, message, off, kind, &c, c.dst);
        }
    }

    /// Asynccheck on a global store or atomic by lane `l` (only called while copies are pending).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn async_src_hazard(
        &mut self,
        bc: &BlockCtx,
        w: &Warp,
        l: usize,
        pc: u32,
        buf: usize,
        off: usize,
        addr: u64,
        bytes: u64,
        kind: AccessKind,
    ) {
        if let Some(c) = bc.asyncs.src_conflict(buf, off, bytes as usize) {
            let message = format!(
                "global {} of {bytes} byte(s) at 0x{addr:x} overwrites the source of a cp.async (line {}) that is still pending",
                kind.name(),
                self.line_of(c.pc)
            );
            self.hazard(bc, w, l, pc, message, addr, kind, &c, addr);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn hazard(
        &mut self,
        bc: &BlockCtx,
        w: &Warp,
        l: usize,
        pc: u32,
        message: String,
        address: u64,
        kind: AccessKind,
        c: &Copy,
        other_address: u64,
    ) {
        let other = Access {
            kind: AccessKind::Write,
            pc: c.pc as usize,
            line: self.line_of(c.pc),
            thread: self.thread_of(c.thread / WARP as u32, (c.thread % WARP as u32) as usize),
            block: bc.ctaid,
            address: other_address,
        };
        self.findings.push(Finding {
            kind: FindingKind::AsyncCopyHazard,
            message,
            pc: pc as usize,
            line: self.line_of(pc),
            thread: self.thread_of(w.index, l),
            block: bc.ctaid,
            address: Some(address),
            other: Some(other),
            access: Some(kind),
            count: 1,
            source: None,
        });
    }
}
