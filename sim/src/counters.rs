//! Performance counters of a launch: dynamic thread-instructions by class, warp-level global
//! memory requests with the 32-byte sectors they touch (coalescing), shared-memory requests with
//! their wavefronts (bank conflicts), and barriers; tensor-core `mma` instructions and FLOPs,
//! `ldmatrix` requests with their wavefronts, and `cp.async` requests, sectors and bytes.
//!
//! # Shared-memory wavefronts: the phase model
//!
//! Shared memory has 32 banks of 4-byte words and serves at most 128 bytes per wavefront, so a
//! warp's access of more than 4 bytes per lane is served in phases: the lanes are split into
//! consecutive groups that move 128 bytes together ([`lanes_per_phase`]: the whole warp for
//! accesses of up to 4 bytes, half-warps of 16 lanes for 8 bytes, quarter-warps of 8 lanes for
//! 16 bytes), and bank conflicts arise only between lanes of the same phase. A request's
//! wavefronts are the sum over its phases that have an active lane of the largest number of
//! distinct 4-byte words one bank must serve for that phase (lanes touching the same word
//! share it; at least 1 per phase). The minimum ([`min_wavefronts`]) is what a perfect spread
//! of each phase's distinct words over the 32 banks would take, with the same phases.
//!
//! Basis: the split into half- and quarter-warp phases is the behaviour widely reported from
//! Nsight Compute measurements (`l1tex__data_pipe_lsu_wavefronts_mem_shared`), not a statement
//! of NVIDIA's documentation. The model is the conservative reading: it never counts fewer
//! wavefronts than treating the warp as one 32-bank problem (each bank's distinct words over
//! the warp are at most the sum of its words per phase), so a kernel cannot look
//! conflict-free here while a phase is conflicted. A broadcast costs at least one wavefront
//! per phase (a 16-byte broadcast to a full warp counts 4), which is what the measurements
//! show outside the narrow cases where the hardware packs uniform addresses. `ldmatrix` is
//! counted per 8×8 matrix: its eight 16-byte row addresses are one phase.

use crate::decode::{Class, NUM_CLASSES};

/// Thread-instructions executed, by class (a warp instruction with 20 active lanes counts 20).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InstructionCounts {
    pub int_arith: u64,
    pub float_arith: u64,
    pub half_arith: u64,
    /// `.approx` special functions (ex2, lg2, rsqrt, sin, cos, tanh, rcp/div approx).
    pub special: u64,
    pub conversion: u64,
    pub movement: u64,
    pub mem_global: u64,
    pub mem_shared: u64,
    pub mem_local: u64,
    pub mem_param: u64,
    pub mem_const: u64,
    pub atomic: u64,
    pub control: u64,
    pub barrier: u64,
    pub warp_collective: u64,
    pub other: u64,
    /// `mma` instructions (tensor cores).
    pub tensor_core: u64,
    /// `cp.async` copies, commits and waits.
    pub async_copy: u64,
}

impl InstructionCounts {
    pub fn total(&self) -> u64 {
        self.fields().iter().map(|f| f.1).sum()
    }

    /// `(name, count)` pairs in a fixed order.
    pub fn fields(&self) -> [(&'static str, u64); NUM_CLASSES] {
        [
            ("int_arith", self.int_arith),
            ("float_arith", self.float_arith),
            ("half_arith", self.half_arith),
            ("special", self.special),
            ("conversion", self.conversion),
            ("movement", self.movement),
            ("mem_global", self.mem_global),
            ("mem_shared", self.mem_shared),
            ("mem_local", self.mem_local),
            ("mem_param", self.mem_param),
            ("mem_const", self.mem_const),
            ("atomic", self.atomic),
            ("control", self.control),
            ("barrier", self.barrier),
            ("warp_collective", self.warp_collective),
            ("other", self.other),
            ("tensor_core", self.tensor_core),
            ("async_copy", self.async_copy),
        ]
    }

    pub(crate) fn add(&mut self, o: &InstructionCounts) {
        self.int_arith += o.int_arith;
        self.float_arith += o.float_arith;
        self.half_arith += o.half_arith;
        self.special += o.special;
        self.conversion += o.conversion;
        self.movement += o.movement;
        self.mem_global += o.mem_global;
        self.mem_shared += o.mem_shared;
        self.mem_local += o.mem_local;
        self.mem_param += o.mem_param;
        self.mem_const += o.mem_const;
        self.atomic += o.atomic;
        self.control += o.control;
        self.barrier += o.barrier;
        self.warp_collective += o.warp_collective;
        self.other += o.other;
        self.tensor_core += o.tensor_core;
        self.async_copy += o.async_copy;
    }

    pub(crate) fn from_array(a: &[u64; NUM_CLASSES]) -> Self {
        InstructionCounts {
            int_arith: a[Class::IntArith as usize],
            float_arith: a[Class::FloatArith as usize],
            half_arith: a[Class::HalfArith as usize],
            special: a[Class::Special as usize],
            conversion: a[Class::Conversion as usize],
            movement: a[Class::Movement as usize],
            mem_global: a[Class::MemGlobal as usize],
            mem_shared: a[Class::MemShared as usize],
            mem_local: a[Class::MemLocal as usize],
            mem_param: a[Class::MemParam as usize],
            mem_const: a[Class::MemConst as usize],
            atomic: a[Class::Atomic as usize],
            control: a[Class::Control as usize],
            barrier: a[Class::Barrier as usize],
            warp_collective: a[Class::WarpCollective as usize],
            other: a[Class::Other as usize],
            tensor_core: a[Class::TensorCore as usize],
            async_copy: a[Class::AsyncCopy as usize],
        }
    }
}

/// Counters of one launch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    pub instructions: InstructionCounts,
    /// Warp-level global load requests (active lanes of a warp executing one `ld` together).
    pub global_load_requests: u64,
    pub global_load_sectors: u64,
    /// Distinct bytes those requests read ([`distinct_bytes`]: lanes reading the same address
    /// count once, so a broadcast does not read as more than its sectors).
    pub global_load_bytes: u64,
    pub global_store_requests: u64,
    pub global_store_sectors: u64,
    pub global_store_bytes: u64,
    /// Warp-level shared-memory requests (loads, stores and atomics).
    pub shared_requests: u64,
    /// Wavefronts of those requests, per phase ([`wavefronts`], the model in the module docs).
    pub shared_wavefronts: u64,
    /// The fewest wavefronts those requests could take ([`min_wavefronts`]): 1 per phase with
    /// an active lane (1 per request for a warp's 4-byte accesses, 4 for its 16-byte ones).
    pub shared_min_wavefronts: u64,
    /// Barrier instructions executed (per thread).
    pub barriers: u64,
    /// Barrier completions (per block).
    pub barrier_releases: u64,
    /// Warp-level `mma` instructions.
    pub mma_instructions: u64,
    /// Floating-point operations of those: 2·M·N·K per warp-level `mma`.
    pub mma_flops: u64,
    /// Warp-level `ldmatrix` requests.
    pub ldmatrix_requests: u64,
    /// Shared-memory wavefronts of those: per 8×8 matrix (one phase of 8 row addresses of 16
    /// bytes), the largest number of distinct 4-byte words one bank must serve.
    pub ldmatrix_wavefronts: u64,
    /// 8×8 matrices those requests read (1, 2 or 4 per request: `.x1`, `.x2`, `.x4`).
    pub ldmatrix_matrices: u64,
    /// Warp-level `cp.async` requests (active lanes of a warp issuing one `cp.async` together).
    pub cp_async_requests: u64,
    /// 32-byte global sectors those read (lanes with a zero src-size read none).
    pub cp_async_sectors: u64,
    /// Bytes written to shared memory by `cp.async` (cp-size per lane, zero fill included).
    pub cp_async_bytes: u64,
    /// Distinct bytes `cp.async` read from global memory (src-size per lane; zero fill
    /// excluded; [`distinct_bytes`]).
    pub cp_async_global_bytes: u64,
    /// Shared-memory wavefronts of those requests' writes (zero fill included), per phase as
    /// for ordinary shared stores ([`wavefronts`]; lanes whose destination is not shared
    /// memory take no part).
    pub cp_async_shared_wavefronts: u64,
    /// The fewest wavefronts those writes could take ([`min_wavefronts`]).
    pub cp_async_shared_min_wavefronts: u64,
}

impl Counters {
    /// Adds the counts of `o` (blocks run apart, counted together).
    pub(crate) fn add(&mut self, o: &Counters) {
        self.instructions.add(&o.instructions);
        self.global_load_requests += o.global_load_requests;
        self.global_load_sectors += o.global_load_sectors;
        self.global_load_bytes += o.global_load_bytes;
        self.global_store_requests += o.global_store_requests;
        self.global_store_sectors += o.global_store_sectors;
        self.global_store_bytes += o.global_store_bytes;
        self.shared_requests += o.shared_requests;
        self.shared_wavefronts += o.shared_wavefronts;
        self.shared_min_wavefronts += o.shared_min_wavefronts;
        self.barriers += o.barriers;
        self.barrier_releases += o.barrier_releases;
        self.mma_instructions += o.mma_instructions;
        self.mma_flops += o.mma_flops;
        self.ldmatrix_requests += o.ldmatrix_requests;
        self.ldmatrix_wavefronts += o.ldmatrix_wavefronts;
        self.ldmatrix_matrices += o.ldmatrix_matrices;
        self.cp_async_requests += o.cp_async_requests;
        self.cp_async_sectors += o.cp_async_sectors;
        self.cp_async_bytes += o.cp_async_bytes;
        self.cp_async_global_bytes += o.cp_async_global_bytes;
        self.cp_async_shared_wavefronts += o.cp_async_shared_wavefronts;
        self.cp_async_shared_min_wavefronts += o.cp_async_shared_min_wavefronts;
    }

    /// Average wavefronts per `ldmatrix` request (an x4 without bank conflicts has 4).
    pub fn ldmatrix_wavefronts_per_request(&self) -> f64 {
        ratio(self.ldmatrix_wavefronts, self.ldmatrix_requests)
    }

    /// Average wavefronts per 8×8 matrix an `ldmatrix` read (1.0 = conflict-free, whatever
    /// the mix of `.x1`, `.x2` and `.x4`).
    pub fn ldmatrix_wavefronts_per_matrix(&self) -> f64 {
        ratio(self.ldmatrix_wavefronts, self.ldmatrix_matrices)
    }

    /// Every global read, `ld` and `cp.async` alike: distinct bytes used ÷ bytes of the 32-byte
    /// sectors fetched, request by request (1.0 = every sector fetched is wholly used).
    pub fn global_load_efficiency(&self) -> f64 {
        ratio(
            self.global_load_bytes + self.cp_async_global_bytes,
            (self.global_load_sectors + self.cp_async_sectors) * 32,
        )
    }

    /// [`Self::global_load_efficiency`] of the `ld` instructions alone.
    pub fn ld_global_efficiency(&self) -> f64 {
        ratio(self.global_load_bytes, self.global_load_sectors * 32)
    }

    /// [`Self::global_load_efficiency`] of the `cp.async` copies alone.
    pub fn cp_async_load_efficiency(&self) -> f64 {
        ratio(self.cp_async_global_bytes, self.cp_async_sectors * 32)
    }

    pub fn global_store_efficiency(&self) -> f64 {
        ratio(self.global_store_bytes, self.global_store_sectors * 32)
    }

    /// Average wavefronts per shared request (1.0 = no bank conflicts for accesses of up to 4
    /// bytes per lane; vector accesses need more, see [`Self::shared_bank_conflict_factor`]).
    pub fn shared_wavefronts_per_request(&self) -> f64 {
        ratio(self.shared_wavefronts, self.shared_requests)
    }

    /// Shared wavefronts ÷ the fewest the same requests could take (1.0 = no bank conflicts,
    /// whatever the access width).
    pub fn shared_bank_conflict_factor(&self) -> f64 {
        ratio(self.shared_wavefronts, self.shared_min_wavefronts)
    }

    /// `cp.async` shared-write wavefronts ÷ the fewest the same writes could take (1.0 = the
    /// copies land without bank conflicts).
    pub fn cp_async_bank_conflict_factor(&self) -> f64 {
        ratio(
            self.cp_async_shared_wavefronts,
            self.cp_async_shared_min_wavefronts,
        )
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        1.0
    } else {
        a as f64 / b as f64
    }
}

/// Distinct 32-byte sectors touched by a warp-level access (`addrs` of the active lanes).
pub fn sectors(addrs: &[u64], size: u64) -> u64 {
    span_sectors(addrs.iter().map(|&a| (a, size)))
}

/// Distinct 32-byte sectors touched by `(address, bytes)` spans (one per active lane).
pub fn span_sectors(spans: impl IntoIterator<Item = (u64, u64)>) -> u64 {
    let mut s: Vec<u64> = Vec::with_capacity(64);
    for (a, size) in spans {
        let first = a >> 5;
        let last = (a + size.max(1) - 1) >> 5;
        for x in first..=last.min(first + 8) {
            s.push(x);
        }
    }
    s.sort_unstable();
    s.dedup();
    s.len() as u64
}

/// Distinct bytes covered by `(address, bytes)` spans: what a warp-level access uses of the
/// sectors it fetches (lanes reading the same bytes count them once).
pub fn distinct_bytes(spans: impl IntoIterator<Item = (u64, u64)>) -> u64 {
    let mut v: Vec<(u64, u64)> = spans.into_iter().filter(|&(_, n)| n > 0).collect();
    v.sort_unstable();
    let (mut total, mut covered) = (0, 0);
    for (a, n) in v {
        let end = a + n;
        if end > covered {
            total += end - a.max(covered);
            covered = end;
        }
    }
    total
}

/// Lanes one shared-memory phase serves together when each lane accesses `size` bytes: a
/// phase moves at most 128 bytes (32 banks of 4 bytes), so all 32 lanes for accesses of up to
/// 4 bytes, half-warps of 16 for 8 bytes, quarter-warps of 8 for 16 bytes.
pub fn lanes_per_phase(size: u64) -> usize {
    (128 / size.clamp(4, 128)) as usize
}

/// The distinct 4-byte words the lanes of one phase touch, `size` bytes each.
fn distinct_words(addrs: &[u64], size: u64) -> Vec<u64> {
    let mut words: Vec<u64> = Vec::with_capacity(addrs.len() * 4);
    for &a in addrs {
        let first = a >> 2;
        let last = (a + size.max(1) - 1) >> 2;
        for w in first..=last.min(first + 8) {
            words.push(w);
        }
    }
    words.sort_unstable();
    words.dedup();
    words
}

/// Wavefronts of one phase (`addrs` of its active lanes, or of the 8 rows of an `ldmatrix`
/// matrix): the largest number of distinct 4-byte words any one of the 32 banks must serve
/// (lanes touching the same word share it); at least 1.
pub fn phase_wavefronts(addrs: &[u64], size: u64) -> u64 {
    busiest_bank(&distinct_words(addrs, size))
}

/// The most of `words` (distinct) any one bank holds; at least 1.
fn busiest_bank(words: &[u64]) -> u64 {
    let mut per_bank = [0u64; 32];
    for w in words {
        per_bank[(w % 32) as usize] += 1;
    }
    per_bank.iter().copied().max().unwrap_or(0).max(1)
}

/// The addresses of each phase of a warp-level access that has an active lane (`lanes[l]` is
/// lane `l`'s shared address, `None` when it does not take part).
fn phases(lanes: &[Option<u64>; 32], size: u64) -> impl Iterator<Item = Vec<u64>> + '_ {
    lanes
        .chunks(lanes_per_phase(size))
        .map(|phase| phase.iter().flatten().copied().collect::<Vec<u64>>())
        .filter(|addrs| !addrs.is_empty())
}

/// Shared-memory wavefronts of a warp-level access and the fewest the same access could take
/// with the same phases, from one pass over its phases: the sum over phases of
/// [`phase_wavefronts`] (see the module docs for the model), and of each phase's distinct words
/// spread evenly over the 32 banks (1 per phase for a warp's contiguous accesses, so 4 for
/// 16-byte ones); at least 1 per phase with an active lane, 0 when no lane is active.
pub fn wavefronts_and_min(lanes: &[Option<u64>; 32], size: u64) -> (u64, u64) {
    phases(lanes, size).fold((0, 0), |(taken, fewest), addrs| {
        let words = distinct_words(&addrs, size);
        let even = (words.len() as u64).div_ceil(32).max(1);
        (taken + busiest_bank(&words), fewest + even)
    })
}

/// The first half of [`wavefronts_and_min`].
pub fn wavefronts(lanes: &[Option<u64>; 32], size: u64) -> u64 {
    wavefronts_and_min(lanes, size).0
}

/// The second half of [`wavefronts_and_min`].
pub fn min_wavefronts(lanes: &[Option<u64>; 32], size: u64) -> u64 {
    wavefronts_and_min(lanes, size).1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coalescing() {
        let contiguous: Vec<u64> = (0..32).map(|i| 0x1000 + 4 * i).collect();
        assert_eq!(sectors(&contiguous, 4), 4);
        let strided: Vec<u64> = (0..32).map(|i| 0x1000 + 128 * i).collect();
        assert_eq!(sectors(&strided, 4), 32);
    }

    #[test]
    fn distinct_bytes_count_broadcasts_and_overlaps_once() {
        let each = |addrs: &[u64], n: u64| distinct_bytes(addrs.iter().map(|&a| (a, n)));
        assert_eq!(each(&[0x1000; 32], 4), 4);
        let contiguous: Vec<u64> = (0..32).map(|i| 0x1000 + 4 * i).collect();
        assert_eq!(each(&contiguous, 4), 128);
        assert_eq!(each(&[0, 2, 8], 4), 10);
        assert_eq!(distinct_bytes([(64, 0), (0, 16), (4, 4)]), 16);
        assert_eq!(span_sectors([(30, 4), (64, 0)]), 3);
    }

    #[test]
    fn load_efficiency_covers_ld_and_cp_async() {
        let c = Counters {
            global_load_sectors: 4,
            global_load_bytes: 32,
            cp_async_sectors: 4,
            cp_async_global_bytes: 128,
            ..Counters::default()
        };
        assert_eq!(c.ld_global_efficiency(), 0.25);
        assert_eq!(c.cp_async_load_efficiency(), 1.0);
        assert_eq!(c.global_load_efficiency(), 160.0 / 256.0);
    }

    /// Lane `l` of a full warp at `addr(l)`.
    fn warp(addr: impl Fn(u64) -> u64) -> [Option<u64>; 32] {
        std::array::from_fn(|l| Some(addr(l as u64)))
    }

    #[test]
    fn banks() {
        let contiguous = warp(|l| 4 * l);
        assert_eq!(wavefronts(&contiguous, 4), 1);
        assert_eq!(wavefronts(&warp(|_| 0), 4), 1);
        assert_eq!(wavefronts(&warp(|l| 8 * l), 4), 2);
        let column = warp(|l| 128 * l);
        assert_eq!(wavefronts(&column, 4), 32);
        assert_eq!(min_wavefronts(&column, 4), 1);
        // A warp's contiguous 16-byte accesses: 4 quarter-warps of 128 bytes, one each.
        let vector = warp(|l| 16 * l);
        assert_eq!(
            (wavefronts(&vector, 16), min_wavefronts(&vector, 16)),
            (4, 4)
        );
        // Rows 32 words apart: each quarter-warp's 8 lanes in the same 4 banks.
        let rows = warp(|l| 128 * l);
        assert_eq!((wavefronts(&rows, 16), min_wavefronts(&rows, 16)), (32, 4));
    }

    /// Lane `l` reads 4 floats of row `l % 4` at column `4 · (l / 4)`, rows `stride` floats
    /// apart: a quarter-warp reads 2 column quads of all 4 rows.
    fn quads_of_four_rows(stride: u64) -> [Option<u64>; 32] {
        warp(|l| 4 * (stride * (l % 4) + 4 * (l / 4)))
    }

    #[test]
    fn v4_rows_of_128_floats_conflict_per_quarter_warp() {
        // Every row starts in bank 0: a quarter-warp's 4 rows put 4 words in each of its 8
        // banks. The whole warp spreads 128 words as 4 per bank, the minimum, so only the
        // phases show the conflict.
        let unpadded = quads_of_four_rows(128);
        assert_eq!(
            (wavefronts(&unpadded, 16), min_wavefronts(&unpadded, 16)),
            (16, 4)
        );
        // Rows of 136 floats start 8 banks apart: each quarter-warp covers the 32 banks once.
        let padded = quads_of_four_rows(136);
        assert_eq!(
            (wavefronts(&padded, 16), min_wavefronts(&padded, 16)),
            (4, 4)
        );
    }

    #[test]
    fn v2_conflicts_per_half_warp() {
        // Lane `l` reads 2 floats of row `l % 2` at column `2 · (l / 2)`: a half-warp reads 16
        // banks of both rows.
        let pairs = |stride: u64| warp(|l| 4 * (stride * (l % 2) + 2 * (l / 2)));
        assert_eq!(
            (wavefronts(&pairs(32), 8), min_wavefronts(&pairs(32), 8)),
            (4, 2)
        );
        // Rows 48 floats apart start 16 banks apart: a half-warp covers the 32 banks once.
        assert_eq!(
            (wavefronts(&pairs(48), 8), min_wavefronts(&pairs(48), 8)),
            (2, 2)
        );
        let contiguous = warp(|l| 8 * l);
        assert_eq!(wavefronts(&contiguous, 8), 2);
    }

    #[test]
    fn broadcasts_share_a_word_within_each_phase() {
        let broadcast = warp(|_| 64);
        assert_eq!(
            (wavefronts(&broadcast, 4), min_wavefronts(&broadcast, 4)),
            (1, 1)
        );
        assert_eq!(
            (wavefronts(&broadcast, 8), min_wavefronts(&broadcast, 8)),
            (2, 2)
        );
        assert_eq!(
            (wavefronts(&broadcast, 16), min_wavefronts(&broadcast, 16)),
            (4, 4)
        );
        // Lane pairs reading the same 16 bytes: a quarter-warp reads 64 distinct bytes.
        let pairs = warp(|l| 16 * (l / 2));
        assert_eq!(wavefronts(&pairs, 16), 4);
    }

    #[test]
    fn inactive_lanes_and_phases_take_no_wavefront() {
        let first_quarter: [Option<u64>; 32] =
            std::array::from_fn(|l| (l < 8).then(|| 16 * l as u64));
        assert_eq!(
            (
                wavefronts(&first_quarter, 16),
                min_wavefronts(&first_quarter, 16)
            ),
            (1, 1)
        );
        // Lanes 0 and 8 of two rows 512 bytes apart: different quarter-warps, 1 each; lanes 0
        // and 1 of the same rows: one quarter-warp, 2-way conflicted.
        let mut apart = [None; 32];
        (apart[0], apart[8]) = (Some(0), Some(512));
        let mut together = [None; 32];
        (together[0], together[1]) = (Some(0), Some(512));
        assert_eq!((wavefronts(&apart, 16), wavefronts(&together, 16)), (2, 2));
        assert_eq!(
            (min_wavefronts(&apart, 16), min_wavefronts(&together, 16)),
            (2, 1)
        );
        assert_eq!(wavefronts(&[None; 32], 16), 0);
    }

    /// The phase model never reports fewer wavefronts, or a lower minimum, than counting the
    /// warp's lanes as one 32-bank problem (each bank's words of the warp are the sum of its
    /// words per phase, at most the sum of the phases' maxima).
    #[test]
    fn phases_never_count_below_the_whole_warp() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..4000 {
            let size = [1, 2, 4, 8, 16][(next() % 5) as usize];
            let span = [64, 512, 4096][(next() % 3) as usize];
            let mask = next();
            let lanes: [Option<u64>; 32] = std::array::from_fn(|l| {
                let address = (next() % span) / size * size;
                (mask >> l & 1 == 1).then_some(address)
            });
            let active: Vec<u64> = lanes.iter().flatten().copied().collect();
            if active.is_empty() {
                continue;
            }
            let whole_warp = phase_wavefronts(&active, size);
            let whole_warp_min = (distinct_words(&active, size).len() as u64).div_ceil(32);
            let (w, min) = (wavefronts(&lanes, size), min_wavefronts(&lanes, size));
            assert!(w >= whole_warp, "{lanes:?} × {size}: {w} < {whole_warp}");
            assert!(min >= whole_warp_min.max(1), "{lanes:?} × {size}: {min}");
            assert!(w >= min, "{lanes:?} × {size}: {w} < minimum {min}");
        }
    }
}
