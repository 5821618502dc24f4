//! Blocks on worker threads, with the results of the sequential run.
//!
//! Workers take the next block position of the launch's block order from a shared counter and
//! run it with an engine of their own (registers, shared memory, race detector, counters). Each
//! block sees global memory through a [`SnapshotView`]: the memory as of launch start plus its
//! own stores, which it records in a [`WriteLog`]; its findings go to a list of its own,
//! deduplicated but not capped. When every block is done, the launcher walks the blocks in the
//! launch's block order (linear or shuffled), applies each write log to device memory and
//! absorbs each findings list into the launch's capped list — exactly what running the blocks one
//! at a time in that order would have produced, because nothing a block does depends on another
//! block except through global memory. Counters are sums and do not depend on the order.
//!
//! What this cannot reproduce: a block that reads bytes an earlier block (in block order) wrote
//! in the same launch sees the launch-start value here, the new value when run sequentially.
//! CUDA does not order blocks either, so such a kernel has a data race on the GPU; programs with
//! global atomics (the legitimate way for blocks to communicate) never come here
//! ([`super::run`] runs them one block at a time).

use std::sync::atomic::{AtomicUsize, Ordering};

use super::global::{SnapshotView, WriteLog};
use super::{Engine, LaunchSpec};
use crate::counters::Counters;
use crate::findings::Findings;
use crate::memory::GlobalMem;

/// What one block left behind.
struct BlockOutcome {
    log: WriteLog,
    findings: Findings,
}

/// What one worker ran: (position in block order, outcome) per block, and its counters.
struct WorkerOutcome {
    blocks: Vec<(usize, BlockOutcome)>,
    counters: Counters,
}

/// Runs the launch's blocks on `workers` threads and merges their results in block order.
pub(super) fn run(
    spec: &LaunchSpec<'_>,
    global: &mut GlobalMem,
    workers: usize,
) -> (Counters, Findings) {
    let snapshot: &GlobalMem = global;
    let next = AtomicUsize::new(0);
    let done: Vec<WorkerOutcome> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| s.spawn(|| worker(spec, snapshot, &next)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    let mut counters = Counters::default();
    let mut by_position: Vec<Option<BlockOutcome>> = std::iter::repeat_with(|| None)
        .take(spec.block_order.len())
        .collect();
    for w in done {
        counters.add(&w.counters);
        for (pos, outcome) in w.blocks {
            by_position[pos] = Some(outcome);
        }
    }
    let mut findings = Findings::new(spec.findings_cap);
    for outcome in by_position.into_iter().flatten() {
        outcome.log.apply(global);
        findings.absorb(outcome.findings);
    }
    (counters, findings)
}

/// Runs blocks until none is left; every block starts from the launch-start memory.
fn worker(spec: &LaunchSpec<'_>, snapshot: &GlobalMem, next: &AtomicUsize) -> WorkerOutcome {
    let mut view = SnapshotView::new(snapshot);
    let mut engine = Engine::new(spec, &mut view, usize::MAX);
    let mut blocks = Vec::new();
    loop {
        let pos = next.fetch_add(1, Ordering::Relaxed);
        let Some(&block) = spec.block_order.get(pos) else {
            break;
        };
        engine.run_block(block);
        let findings = std::mem::replace(&mut engine.findings, Findings::new(usize::MAX));
        let log = engine.global.take_log();
        blocks.push((pos, BlockOutcome { log, findings }));
    }
    WorkerOutcome {
        blocks,
        counters: engine.take_counters(),
    }
}
