//! Racecheck for shared memory. Every shared byte remembers its last writer and up to two
//! readers, each stamped with the block's synchronisation epoch (bumped by every completed
//! barrier, and for each new block) and the warp's `bar.warp.sync` generation. An access
//! conflicts with a remembered one when both are in the same epoch, come from different threads,
//! at least one writes, they are not both atomics, and no `bar.warp.sync` of their (common) warp
//! separates them. A conflict names both accesses.
//!
//! Several lanes of one warp writing the same bytes in one `st` instruction do not race (one of
//! the values lands): every store instruction gets a stamp ([`RaceDetector::begin_store`]) and
//! accesses with the same stamp never conflict. Whether the values differ is checked by the
//! engine, which reports that as a `WarpWriteConflict` instead.
//!
//! Lanes of a warp are not implicitly synchronous (independent thread scheduling, sm_70+): two
//! lanes exchanging data through shared memory need `bar.warp.sync` or a barrier in between.

use crate::findings::AccessKind;

#[derive(Debug, Clone, Copy, Default)]
struct Rec {
    /// Linear thread index + 1; 0 = empty.
    thread: u32,
    pc: u32,
    epoch: u32,
    wgen: u32,
    /// Stamp of the store instruction (0: not a store under a stamp).
    stamp: u32,
    atomic: bool,
}

#[derive(Debug, Clone, Copy, Default)]
struct Shadow {
    write: Rec,
    read1: Rec,
    read2: Rec,
}

/// The earlier access of a detected race.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conflict {
    pub thread: u32,
    pub pc: u32,
    pub kind: AccessKind,
    /// Shared offset of the first conflicting byte.
    pub offset: u64,
}

#[derive(Debug, Default)]
pub struct RaceDetector {
    shadow: Vec<Shadow>,
    epoch: u32,
    warp_gen: Vec<u32>,
    /// Stamp of the warp-level store being executed (0 outside [`Self::begin_store`] ..
    /// [`Self::end_store`]).
    stamp: u32,
    next_stamp: u32,
}

impl RaceDetector {
    /// Starts a new block: everything remembered so far becomes stale.
    pub fn new_block(&mut self, smem_bytes: usize, warps: usize) {
        self.epoch = self.epoch.wrapping_add(1).max(1);
        if self.shadow.len() < smem_bytes {
            self.shadow.resize(smem_bytes, Shadow::default());
        }
        self.warp_gen.clear();
        self.warp_gen.resize(warps, 0);
    }

    /// A barrier completed: accesses before it are ordered before accesses after it.
    pub fn barrier(&mut self) {
        self.epoch = self.epoch.wrapping_add(1).max(1);
    }

    /// `bar.warp.sync` completed in `warp`.
    pub fn warp_sync(&mut self, warp: usize) {
        if let Some(g) = self.warp_gen.get_mut(warp) {
            *g = g.wrapping_add(1);
        }
    }

    /// A warp-level store instruction starts: its lanes' writes do not race with each other.
    pub fn begin_store(&mut self) {
        self.next_stamp = self.next_stamp.wrapping_add(1).max(1);
        self.stamp = self.next_stamp;
    }

    /// The store instruction of [`Self::begin_store`] is done.
    pub fn end_store(&mut self) {
        self.stamp = 0;
    }

    fn conflicts(&self, r: &Rec, thread: u32, atomic: bool) -> bool {
        if r.thread == 0 || r.epoch != self.epoch || r.thread == thread + 1 {
            return false;
        }
        if r.stamp != 0 && r.stamp == self.stamp {
            return false;
        }
        if r.atomic && atomic {
            return false;
        }
        let (w_old, w_new) = ((r.thread - 1) / 32, thread / 32);
        if w_old == w_new && self.warp_gen.get(w_new as usize).copied() != Some(r.wgen) {
            return false;
        }
        true
    }

    /// Records an access of `size` bytes at shared offset `off` by linear thread `thread`; returns
    /// the first conflicting earlier access.
    pub fn access(
        &mut self,
        thread: u32,
        pc: u32,
        off: u64,
        size: u64,
        kind: AccessKind,
    ) -> Option<Conflict> {
        let atomic = kind == AccessKind::Atomic;
        let writes = kind != AccessKind::Read;
        let wgen = self
            .warp_gen
            .get((thread / 32) as usize)
            .copied()
            .unwrap_or(0);
        let new = Rec {
            thread: thread + 1,
            pc,
            epoch: self.epoch,
            wgen,
            stamp: self.stamp,
            atomic,
        };
        let mut found = None;
        for byte in off..off + size {
            let Some(s) = self.shadow.get(byte as usize).copied() else {
                continue;
            };
            if found.is_none() {
                let wk = if s.write.atomic {
                    AccessKind::Atomic
                } else {
                    AccessKind::Write
                };
                let cands = [
                    (s.write, wk),
                    (s.read1, AccessKind::Read),
                    (s.read2, AccessKind::Read),
                ];
                let n = if writes { 3 } else { 1 };
                for &(r, k) in &cands[..n] {
                    if self.conflicts(&r, thread, atomic) {
                        found = Some(Conflict {
                            thread: r.thread - 1,
                            pc: r.pc,
                            kind: k,
                            offset: byte,
                        });
                        break;
                    }
                }
            }
            let stale = |r: &Rec, epoch: u32| r.thread == 0 || r.epoch != epoch;
            let epoch = self.epoch;
            let s = &mut self.shadow[byte as usize];
            if writes {
                s.write = new;
                s.read1 = Rec::default();
                s.read2 = Rec::default();
            } else if stale(&s.read1, epoch) || s.read1.thread == new.thread {
                s.read1 = new;
            } else if stale(&s.read2, epoch) || s.read2.thread == new.thread {
                s.read2 = new;
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_then_read_by_other_thread_races() {
        let mut r = RaceDetector::default();
        r.new_block(64, 2);
        assert!(r.access(0, 1, 0, 4, AccessKind::Write).is_none());
        let c = r.access(40, 2, 0, 4, AccessKind::Read).unwrap();
        assert_eq!((c.thread, c.pc, c.kind), (0, 1, AccessKind::Write));
    }

    #[test]
    fn barrier_orders() {
        let mut r = RaceDetector::default();
        r.new_block(64, 2);
        r.access(0, 1, 0, 4, AccessKind::Write);
        r.barrier();
        assert!(r.access(40, 2, 0, 4, AccessKind::Read).is_none());
    }

    #[test]
    fn atomics_do_not_race_with_each_other() {
        let mut r = RaceDetector::default();
        r.new_block(64, 2);
        r.access(0, 1, 0, 4, AccessKind::Atomic);
        assert!(r.access(40, 1, 0, 4, AccessKind::Atomic).is_none());
        assert!(r.access(41, 3, 0, 4, AccessKind::Read).is_some());
    }

    #[test]
    fn warp_sync_orders_lanes_of_one_warp() {
        let mut r = RaceDetector::default();
        r.new_block(64, 2);
        r.access(0, 1, 0, 4, AccessKind::Write);
        assert!(r.access(1, 2, 0, 4, AccessKind::Read).is_some());
        r.access(0, 1, 8, 4, AccessKind::Write);
        r.warp_sync(0);
        assert!(r.access(1, 2, 8, 4, AccessKind::Read).is_none());
    }

    #[test]
    fn lanes_of_one_store_instruction_do_not_race() {
        let mut r = RaceDetector::default();
        r.new_block(64, 2);
        r.begin_store();
        for lane in 0..32 {
            assert!(r.access(lane, 1, 0, 4, AccessKind::Write).is_none());
        }
        r.end_store();
        // The next store instruction (same pc, another iteration) does race with them.
        r.begin_store();
        assert!(r.access(3, 1, 0, 4, AccessKind::Write).is_some());
        r.end_store();
        assert!(r.access(5, 2, 0, 4, AccessKind::Read).is_some());
    }

    #[test]
    fn reads_then_write() {
        let mut r = RaceDetector::default();
        r.new_block(64, 2);
        r.access(3, 1, 0, 4, AccessKind::Read);
        let c = r.access(5, 2, 0, 4, AccessKind::Write).unwrap();
        assert_eq!((c.thread, c.kind), (3, AccessKind::Read));
    }
}
