//! What a launch reports about the kernel itself: [`Finding`]s (sanitizer hits, fuel exhaustion)
//! with their location, deduplicated and capped per launch.

use std::collections::HashMap;

/// The kind of fault a finding reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FindingKind {
    /// Access outside any allocation, or outside the shared/local/param window.
    OutOfBounds,
    /// Access not aligned to its size.
    Misaligned,
    /// Read of global bytes never written or uploaded.
    Uninitialized,
    /// Two threads of a block touch the same shared bytes, one writing, without a barrier between.
    SharedRace,
    /// Lanes of one warp store different values to the same shared or global address in one
    /// instruction: one of them lands, which one is unspecified. (Equal values are no finding.)
    WarpWriteConflict,
    /// A barrier reached by only some live threads of the block, or at different barrier instructions.
    DivergentBarrier,
    /// Threads exited while the rest of the block waits at a barrier.
    ExitBeforeBarrier,
    /// A warp-synchronous instruction whose member mask does not match the arriving lanes.
    WarpSyncMask,
    /// A thread ran out of its instruction budget (likely an infinite loop).
    FuelExhausted,
    /// The block can make no progress (reported even with synccheck off).
    Deadlock,
    /// `trap` executed.
    Trap,
    /// A device-side `assert` failed (`call __assertfail`); the message quotes it.
    AssertFailed,
    /// A thread's call stack grew past the interpreter's bound (unbounded recursion).
    CallDepthExceeded,
    /// A `cp.async` destination read or written before the group that writes it was waited, or
    /// its global source written while the copy is pending.
    AsyncCopyHazard,
    /// A thread exited with `cp.async` copies it never waited for.
    AsyncCopyNotWaited,
    /// An `.aligned` warp instruction (`mma`, `ldmatrix`) executed by a warp that is not
    /// converged (some lanes elsewhere or predicated off) or not full.
    UnconvergedWarp,
}

impl FindingKind {
    pub fn name(self) -> &'static str {
        match self {
            FindingKind::OutOfBounds => "OutOfBounds",
            FindingKind::Misaligned => "Misaligned",
            FindingKind::Uninitialized => "Uninitialized",
            FindingKind::SharedRace => "SharedRace",
            FindingKind::WarpWriteConflict => "WarpWriteConflict",
            FindingKind::DivergentBarrier => "DivergentBarrier",
            FindingKind::ExitBeforeBarrier => "ExitBeforeBarrier",
            FindingKind::WarpSyncMask => "WarpSyncMask",
            FindingKind::FuelExhausted => "FuelExhausted",
            FindingKind::Deadlock => "Deadlock",
            FindingKind::Trap => "Trap",
            FindingKind::AssertFailed => "AssertFailed",
            FindingKind::CallDepthExceeded => "CallDepthExceeded",
            FindingKind::AsyncCopyHazard => "AsyncCopyHazard",
            FindingKind::AsyncCopyNotWaited => "AsyncCopyNotWaited",
            FindingKind::UnconvergedWarp => "UnconvergedWarp",
        }
    }
}

/// How an access touched memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AccessKind {
    Read,
    Write,
    Atomic,
}

impl AccessKind {
    pub fn name(self) -> &'static str {
        match self {
            AccessKind::Read => "read",
            AccessKind::Write => "write",
            AccessKind::Atomic => "atomic",
        }
    }
}

/// One side of a race: which instruction, which thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    pub kind: AccessKind,
    pub pc: usize,
    pub line: usize,
    pub thread: [u32; 3],
    pub block: [u32; 3],
    pub address: u64,
}

/// A fault of the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub kind: FindingKind,
    pub message: String,
    /// Instruction index in the entry.
    pub pc: usize,
    /// PTX source line.
    pub line: usize,
    pub thread: [u32; 3],
    pub block: [u32; 3],
    pub address: Option<u64>,
    /// Racecheck: the earlier conflicting access.
    pub other: Option<Access>,
    /// The access kind of this finding's own access, when it is a memory access.
    pub access: Option<AccessKind>,
    /// How many occurrences were folded into this one (same kind, pc, and other pc).
    pub count: u64,
    /// The high-level source line of the instruction, from the nearest preceding `.loc`
    /// directive (`None` when the PTX carries no line information).
    pub source: Option<SourceLoc>,
}

/// A position in the source the PTX was compiled from (`.file` name, `.loc` line and column).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SourceLoc {
    pub file: String,
    pub line: u32,
    pub column: u32,
}

impl std::fmt::Display for SourceLoc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.file, self.line)?;
        if self.column > 0 {
            write!(f, ":{}", self.column)?;
        }
        Ok(())
    }
}

/// Collects findings: deduplicates by (kind, pc, other pc) and keeps the first `cap`.
#[derive(Debug, Default)]
pub struct Findings {
    pub list: Vec<Finding>,
    index: HashMap<(FindingKind, usize, Option<usize>), usize>,
    pub dropped: u64,
    pub cap: usize,
}

impl Findings {
    pub fn new(cap: usize) -> Self {
        Findings {
            cap,
            ..Findings::default()
        }
    }

    pub fn push(&mut self, f: Finding) {
        self.push_counted(f, 1);
    }

    /// `f` standing for `count` occurrences: what `count` pushes of it in a row would do.
    fn push_counted(&mut self, mut f: Finding, count: u64) {
        let key = (f.kind, f.pc, f.other.as_ref().map(|o| o.pc));
        if let Some(&i) = self.index.get(&key) {
            self.list[i].count += count;
            return;
        }
        if self.list.len() >= self.cap {
            self.dropped += count;
            return;
        }
        f.count = count;
        self.index.insert(key, self.list.len());
        self.list.push(f);
    }

    /// Adds the findings `later` collected, as if its pushes had been made here after the ones
    /// already made. Exact when `later` dropped nothing: a finding's first occurrence decides
    /// whether it is kept, and `later` lists findings in first-occurrence order, so pushing each
    /// with its count keeps, counts and drops exactly what the individual pushes would.
    pub fn absorb(&mut self, later: Findings) {
        debug_assert_eq!(later.dropped, 0, "absorbed findings must be uncapped");
        for f in later.list {
            let count = f.count;
            self.push_counted(f, count);
        }
        self.dropped += later.dropped;
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(kind: FindingKind, pc: usize, block: u32) -> Finding {
        Finding {
            kind,
            message: format!("{kind:?} at {pc} in block {block}"),
            pc,
            line: pc,
            thread: [0; 3],
            block: [block, 0, 0],
            address: None,
            other: None,
            access: None,
            count: 1,
            source: None,
        }
    }

    /// Pushing block by block into one capped list equals collecting each block uncapped and
    /// absorbing the blocks in order (what parallel launches do).
    #[test]
    fn absorbing_per_block_lists_equals_pushing_in_order() {
        use FindingKind::*;
        let blocks: Vec<Vec<Finding>> = (0..6u32)
            .map(|b| {
                (0..7usize)
                    .map(|i| {
                        let kind = [OutOfBounds, Uninitialized, Trap][(i + b as usize) % 3];
                        finding(kind, (i * 3 + b as usize) % 5, b)
                    })
                    .collect()
            })
            .collect();
        for cap in [1, 2, 3, 5, 100] {
            let mut pushed = Findings::new(cap);
            let mut absorbed = Findings::new(cap);
            for b in &blocks {
                let mut own = Findings::new(usize::MAX);
                for f in b {
                    pushed.push(f.clone());
                    own.push(f.clone());
                }
                absorbed.absorb(own);
            }
            assert_eq!(pushed.list, absorbed.list, "cap {cap}");
            assert_eq!(pushed.dropped, absorbed.dropped, "cap {cap}");
        }
    }
}
