//! Invariant 3 (registers are written before they are read on some path): a forward "maybe
//! written" data-flow over the kernel's basic blocks, on bit sets with one bit per register.
//!
//! `written_in[b]` is the union, over the predecessors `p` of block `b` reachable from the
//! entry, of `written_in[p] ∪ writes[p]`; a read of a register whose bit is clear where it is
//! read (after the writes earlier in its block) is a read no write can reach. The fixed point is
//! found with a worklist: a block is visited again only when its input set grew, so a kernel
//! with hundreds of blocks and thousands of registers costs about one visit per block plus one
//! per loop back edge, not one full sweep of every block per round.

use crate::ir::{Op, Operand, RegId, Stmt};

use super::RegUses;

/// No successor (a block has at most two: its branch target and its fall-through).
const NONE: usize = usize::MAX;

/// The reads no write can reach, as `(statement, register)`: each register once, at its first
/// such read in block order, blocks unreachable from the entry skipped.
pub(super) fn reads_before_write(
    body: &[Stmt],
    n_regs: usize,
    placed: &[Option<usize>],
    uses: &RegUses,
) -> Vec<(usize, RegId)> {
    let Some(cfg) = Cfg::new(body, placed) else {
        return Vec::new();
    };
    let n_blocks = cfg.blocks.len();
    let words = n_regs.div_ceil(64);
    let mut writes = BitRows::new(n_blocks, words);
    for (b, &(start, end)) in cfg.blocks.iter().enumerate() {
        let row = writes.row_mut(b);
        for i in start..end {
            for r in uses.writes(i) {
                set(row, *r);
            }
        }
    }
    let (written_in, reachable) = solve(&cfg, &writes);

    let mut found = Vec::new();
    let mut reported = vec![false; n_regs];
    let mut defs = vec![0u64; words];
    for (b, &(start, end)) in cfg.blocks.iter().enumerate() {
        if !reachable[b] {
            continue;
        }
        defs.copy_from_slice(written_in.row(b));
        // Indexed loops: see the note above `or_into`.
        let mut i = start;
        while i < end {
            let reads = uses.reads(i);
            let mut j = 0;
            while j < reads.len() {
                let r = reads[j];
                if !is_set(&defs, r) && !reported[r.0 as usize] {
                    reported[r.0 as usize] = true;
                    found.push((i, r));
                }
                j += 1;
            }
            let writes = uses.writes(i);
            let mut j = 0;
            while j < writes.len() {
                set(&mut defs, writes[j]);
                j += 1;
            }
            i += 1;
        }
    }
    found
}

/// The least fixed point of the data-flow equations: per block, the registers some path from
/// the entry may have written on entry to it, and whether any path reaches it.
fn solve(cfg: &Cfg, writes: &BitRows) -> (BitRows, Vec<bool>) {
    let n_blocks = cfg.blocks.len();
    let words = writes.words;
    let mut written_in = BitRows::new(n_blocks, words);
    let mut reachable = vec![false; n_blocks];
    // `pending[b]`: block `b`'s input grew (or it was just reached) since it was last visited.
    let mut pending = vec![false; n_blocks];
    reachable[0] = true;
    pending[0] = true;
    let mut out = vec![0u64; words];
    let mut sweep_again = true;
    while sweep_again {
        sweep_again = false;
        for b in 0..n_blocks {
            if !pending[b] {
                continue;
            }
            pending[b] = false;
            or_into(&mut out, written_in.row(b), writes.row(b));
            for s in cfg.succs[b] {
                if s == NONE {
                    continue;
                }
                let newly_reached = !reachable[s];
                reachable[s] = true;
                if grow(written_in.row_mut(s), &out) || newly_reached {
                    pending[s] = true;
                    // A later block is visited in this sweep; an earlier one (a back edge)
                    // needs another.
                    sweep_again |= s <= b;
                }
            }
        }
    }
    (written_in, reachable)
}

// The word loops below index slices in `while` loops rather than zipping iterators: the macro
// crate's dependencies build unoptimised by default (cargo's `build-override`), where every
// iterator adapter step is a function call, and these loops run once per word per block visit.

/// `out = a | b`, word by word.
fn or_into(out: &mut [u64], a: &[u64], b: &[u64]) {
    let mut w = 0;
    while w < out.len() {
        out[w] = a[w] | b[w];
        w += 1;
    }
}

/// `into |= from`; whether `into` gained a bit.
fn grow(into: &mut [u64], from: &[u64]) -> bool {
    let mut grew = false;
    let mut w = 0;
    while w < into.len() {
        let new = from[w] & !into[w];
        if new != 0 {
            into[w] |= new;
            grew = true;
        }
        w += 1;
    }
    grew
}

/// The kernel's basic blocks and their successors.
struct Cfg {
    /// `(start, end)` statement range per block, in body order.
    blocks: Vec<(usize, usize)>,
    /// Per block: its successors, [`NONE`] where there is none.
    succs: Vec<[usize; 2]>,
}

impl Cfg {
    /// `None` for an empty body.
    fn new(body: &[Stmt], placed: &[Option<usize>]) -> Option<Self> {
        // Block leaders: entry, every label, every statement after a branch or ret.
        let mut leaders: Vec<usize> = vec![0];
        for (i, stmt) in body.iter().enumerate() {
            match stmt {
                Stmt::Label(_) => leaders.push(i),
                Stmt::Inst(inst) if inst.op.is_terminator() => leaders.push(i + 1),
                _ => {}
            }
        }
        leaders.retain(|&l| l < body.len());
        leaders.sort_unstable();
        leaders.dedup();
        if leaders.is_empty() {
            return None;
        }
        let block_of = |stmt: usize| leaders.partition_point(|&l| l <= stmt) - 1;
        let blocks: Vec<(usize, usize)> = leaders
            .iter()
            .enumerate()
            .map(|(b, &start)| (start, leaders.get(b + 1).copied().unwrap_or(body.len())))
            .collect();
        let succs = blocks
            .iter()
            .enumerate()
            .map(|(b, &(start, end))| {
                let mut s = [NONE; 2];
                let mut falls_through = true;
                if let Some(Stmt::Inst(inst)) =
                    body.get(end.wrapping_sub(1)).filter(|_| end > start)
                {
                    if let Op::Bra { .. } = inst.op {
                        if let Some(Operand::Label(l)) = inst.args.first() {
                            if let Some(Some(at)) = placed.get(l.0 as usize) {
                                s[0] = block_of(*at);
                            }
                        }
                        falls_through = inst.guard.is_some();
                    } else if matches!(inst.op, Op::Ret) {
                        falls_through = inst.guard.is_some();
                    }
                }
                if falls_through && b + 1 < blocks.len() {
                    s[1] = b + 1;
                }
                s
            })
            .collect();
        Some(Self { blocks, succs })
    }
}

/// One bit set of `words` 64-bit words per block, stored row after row.
struct BitRows {
    words: usize,
    bits: Vec<u64>,
}

impl BitRows {
    fn new(rows: usize, words: usize) -> Self {
        Self {
            words,
            bits: vec![0; rows * words],
        }
    }

    fn row(&self, b: usize) -> &[u64] {
        &self.bits[b * self.words..(b + 1) * self.words]
    }

    fn row_mut(&mut self, b: usize) -> &mut [u64] {
        &mut self.bits[b * self.words..(b + 1) * self.words]
    }
}

fn set(row: &mut [u64], r: RegId) {
    row[r.0 as usize / 64] |= 1 << (r.0 % 64);
}

fn is_set(row: &[u64], r: RegId) -> bool {
    row[r.0 as usize / 64] & (1 << (r.0 % 64)) != 0
}

#[cfg(test)]
mod tests {
    use super::reads_before_write;
    use crate::ir::{Guard, Inst, LabelId, Op, Operand, RegId, Stmt, Type};
    use crate::validate::RegUses;

    const REGS: u32 = 6;
    const LABELS: u32 = 4;

    /// A small deterministic generator (no dependency for one test).
    struct Lcg(u64);

    impl Lcg {
        fn below(&mut self, n: u32) -> u32 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((self.0 >> 33) % u64::from(n)) as u32
        }
    }

    /// A random body of `mov`s, guarded and unguarded branches and returns, with every label
    /// placed once.
    fn random_body(rng: &mut Lcg) -> Vec<Stmt> {
        let mut body: Vec<Stmt> = (0..5 + rng.below(30))
            .map(|_| {
                let guard = (rng.below(2) == 0).then(|| Guard {
                    pred: RegId(rng.below(REGS)),
                    negated: false,
                });
                let (op, args) = match rng.below(8) {
                    0 => (
                        Op::Bra { uni: false },
                        vec![Operand::Label(LabelId(rng.below(LABELS)))],
                    ),
                    1 => (Op::Ret, vec![]),
                    _ => (
                        Op::Mov(Type::U32),
                        vec![
                            Operand::Reg(RegId(rng.below(REGS))),
                            Operand::Reg(RegId(rng.below(REGS))),
                        ],
                    ),
                };
                Stmt::Inst(Inst { guard, op, args })
            })
            .collect();
        for l in 0..LABELS {
            let at = rng.below(body.len() as u32 + 1) as usize;
            body.insert(at, Stmt::Label(LabelId(l)));
        }
        body
    }

    /// The same question answered per statement, with no blocks and no bit sets: a search over
    /// (statement, "r written on the way") states from the entry.
    fn reference(body: &[Stmt], placed: &[Option<usize>], uses: &RegUses) -> Vec<(usize, RegId)> {
        let succs = |i: usize| -> Vec<usize> {
            let mut s = Vec::new();
            let mut falls_through = true;
            if let Stmt::Inst(inst) = &body[i] {
                match (&inst.op, inst.args.first()) {
                    (Op::Bra { .. }, Some(Operand::Label(l))) => {
                        s.extend(placed[l.0 as usize]);
                        falls_through = inst.guard.is_some();
                    }
                    (Op::Ret, _) => falls_through = inst.guard.is_some(),
                    _ => {}
                }
            }
            if falls_through && i + 1 < body.len() {
                s.push(i + 1);
            }
            s
        };
        // seen[r][i][w]: statement i is reached with "r written before it" = w.
        let mut seen = vec![vec![[false; 2]; body.len()]; REGS as usize];
        for (r, seen) in seen.iter_mut().enumerate() {
            let mut stack = vec![(0, false)];
            while let Some((i, written)) = stack.pop() {
                if std::mem::replace(&mut seen[i][usize::from(written)], true) {
                    continue;
                }
                let after = written || uses.writes(i).contains(&RegId(r as u32));
                stack.extend(succs(i).into_iter().map(|s| (s, after)));
            }
        }
        let mut found = Vec::new();
        for (i, _) in body.iter().enumerate() {
            for &r in uses.reads(i) {
                let [unwritten, written] = seen[r.0 as usize][i];
                let reached = unwritten || written;
                if reached && !written && !found.iter().any(|&(_, f)| f == r) {
                    found.push((i, r));
                }
            }
        }
        found
    }

    /// The worklist solver finds exactly the reads the per-statement search finds, on random
    /// control flow with loops (backward branches), guarded exits and unreachable code.
    #[test]
    fn worklist_matches_a_per_statement_search() {
        let mut rng = Lcg(0x5eed);
        for _ in 0..2000 {
            let body = random_body(&mut rng);
            let mut placed = vec![None; LABELS as usize];
            let mut uses = RegUses::with_capacity(body.len());
            for (i, stmt) in body.iter().enumerate() {
                match stmt {
                    Stmt::Inst(inst) => uses.push_inst(inst, &inst.op.signature()),
                    Stmt::Label(l) => {
                        placed[l.0 as usize] = Some(i);
                        uses.push_label();
                    }
                }
            }
            assert_eq!(
                reads_before_write(&body, REGS as usize, &placed, &uses),
                reference(&body, &placed, &uses),
                "{body:#?}"
            );
        }
    }
}
