//! Modelled H100 time: a MODEL, not a measurement. Turns the interpreter's counters into a
//! roofline lower bound — the time no H100 can beat while doing the work the counters saw — and
//! puts the job's ideal roofline time beside it.
//!
//! - **bound** = max of DRAM bytes / 3.35 TB/s, tensor FLOPs / tensor peak (989 TFLOP/s dense
//!   f16/bf16, half that for tf32), FP32-pipe thread-instructions × 2 / 67 TFLOP/s (each float
//!   instruction takes one FMA lane-slot: an FMA is 2 FLOPs in it), issued warp instructions /
//!   (132 SMs × 4 schedulers × 1.98 GHz) and shared-memory wavefronts / (132 SMs × 1.98 GHz)
//!   (an SM's shared memory serves one 128-byte wavefront per cycle; the wavefronts are the
//!   interpreter's: ordinary shared requests, `ldmatrix` and `cp.async` writes, bank
//!   conflicts included). DRAM bytes are the 32-byte sectors the loads, stores
//!   and `cp.async` copies moved, capped at the bytes of the buffers the job touches (a perfect
//!   L2 reads each byte from DRAM once). Warp instructions are thread-instructions ÷ 32 (fewer
//!   than issued when warps are partly active, so still a lower bound).
//! - **ideal** = max of the job's compulsory bytes (inputs read once, outputs written once) / BW
//!   and its required FLOPs / the peak of its precision.
//! - **ideal / bound** ≤ 1: how close the kernel's own work is to the job's roofline.
//!
//! Counters of realistic shapes come from smaller launches: [`lagrange_weights`] fit a
//! polynomial in one size parameter through sample points (exact when per-block work is affine in the K loop,
//! or quadratic in the sequence length for attention), and [`Work::scaled`] multiplies by the
//! ratio of identically-working blocks.
//!
//! The five-term bound spreads the work over all 132 SMs, whatever the grid. The
//! **waves-aware bound** ([`waves_aware`]) adds what the grid allows: per launch, the blocks an
//! SM holds at once ([`blocks_per_sm`]: threads, registers from `ptxas -v`, shared memory and
//! the block limit of an H100 SM), the waves `⌈blocks / (132 · blocks per SM)⌉`, and the
//! compute terms on the busiest SM (the one that runs `⌈blocks / 132⌉` blocks), launches one
//! after another as a stream runs them.

use ptxforge_sim::Counters;

/// The peak rates the model divides by.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Peak {
    pub dram_bytes_per_s: f64,
    pub tensor_f16_flops_per_s: f64,
    pub tensor_tf32_flops_per_s: f64,
    /// FP32 FMA FLOP/s (2 per lane per cycle).
    pub fma_flops_per_s: f64,
    /// Warp instructions issued per second over the whole GPU.
    pub warp_issue_per_s: f64,
    /// Shared-memory wavefronts (128 bytes each) served per second over the whole GPU.
    pub shared_wavefronts_per_s: f64,
}

/// H100 SXM5: HBM3 3.35 TB/s, 989 dense f16/bf16 TFLOP/s, 67 FP32 TFLOP/s, 132 SMs × 4
/// schedulers at the 1.98 GHz boost clock, each SM's shared memory one 128-byte wavefront per
/// cycle (32 banks of 4 bytes).
pub const H100: Peak = Peak {
    dram_bytes_per_s: 3.35e12,
    tensor_f16_flops_per_s: 989e12,
    tensor_tf32_flops_per_s: 494.5e12,
    fma_flops_per_s: 67e12,
    warp_issue_per_s: 132.0 * 4.0 * 1.98e9,
    shared_wavefronts_per_s: 132.0 * 1.98e9,
};

/// The arithmetic a job needs, which decides its ideal peak (and the tensor peak of its `mma`s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// f16/bf16 inputs, f32 accumulation: tensor cores at the f16 rate.
    F16Tensor,
    /// f32 inputs rounded to tf32 (opt-in).
    Tf32Tensor,
    /// IEEE f32 on the FMA pipe.
    F32Fma,
}

impl Precision {
    fn peak(self, p: &Peak) -> f64 {
        match self {
            Precision::F16Tensor => p.tensor_f16_flops_per_s,
            Precision::Tf32Tensor => p.tensor_tf32_flops_per_s,
            Precision::F32Fma => p.fma_flops_per_s,
        }
    }
}

/// Counters as real numbers, so that they can be scaled and extrapolated.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Work {
    pub thread_instructions: f64,
    /// Thread-instructions of `mma` (a warp-wide `mma` counts 32).
    pub tensor_instructions: f64,
    /// Thread-instructions on the FP32 pipe (f32 and packed-half arithmetic).
    pub fp_instructions: f64,
    pub mma_flops: f64,
    /// Distinct bytes read by `ld.global` and `cp.async` (zero fill excluded), and the 32-byte
    /// sectors they moved.
    pub load_bytes: f64,
    pub load_sectors: f64,
    pub store_sectors: f64,
    /// Shared-memory wavefronts: ordinary requests, `ldmatrix` and `cp.async` writes.
    pub shared_wavefronts: f64,
}

impl Work {
    pub fn from_counters(c: &Counters) -> Work {
        let i = &c.instructions;
        Work {
            thread_instructions: i.total() as f64,
            tensor_instructions: i.tensor_core as f64,
            fp_instructions: (i.float_arith + i.half_arith) as f64,
            mma_flops: c.mma_flops as f64,
            load_bytes: (c.global_load_bytes + c.cp_async_global_bytes) as f64,
            load_sectors: (c.global_load_sectors + c.cp_async_sectors) as f64,
            store_sectors: c.global_store_sectors as f64,
            shared_wavefronts: (c.shared_wavefronts
                + c.ldmatrix_wavefronts
                + c.cp_async_shared_wavefronts) as f64,
        }
    }

    fn fields(&self) -> [f64; 8] {
        [
            self.thread_instructions,
            self.tensor_instructions,
            self.fp_instructions,
            self.mma_flops,
            self.load_bytes,
            self.load_sectors,
            self.store_sectors,
            self.shared_wavefronts,
        ]
    }

    fn from_fields(f: [f64; 8]) -> Work {
        Work {
            thread_instructions: f[0],
            tensor_instructions: f[1],
            fp_instructions: f[2],
            mma_flops: f[3],
            load_bytes: f[4],
            load_sectors: f[5],
            store_sectors: f[6],
            shared_wavefronts: f[7],
        }
    }

    /// Every count times `s` (`s` identically-working copies of the sampled blocks).
    pub fn scaled(&self, s: f64) -> Work {
        Work::from_fields(self.fields().map(|x| x * s))
    }

    pub fn plus(&self, o: &Work) -> Work {
        let (a, b) = (self.fields(), o.fields());
        Work::from_fields(std::array::from_fn(|i| a[i] + b[i]))
    }

    /// Bytes the SMs moved through L1 in 32-byte sectors.
    pub fn sector_bytes(&self) -> f64 {
        32.0 * (self.load_sectors + self.store_sectors)
    }

    /// Bytes requested ÷ bytes moved by global loads and async copies (1.0 = coalesced).
    pub fn load_efficiency(&self) -> f64 {
        if self.load_sectors == 0.0 {
            1.0
        } else {
            self.load_bytes / (32.0 * self.load_sectors)
        }
    }

    /// Share of thread-instructions that are `mma`.
    pub fn tensor_share(&self) -> f64 {
        if self.thread_instructions == 0.0 {
            0.0
        } else {
            self.tensor_instructions / self.thread_instructions
        }
    }
}

/// The weight of each sample value at `at` in the polynomial through the samples at `xs`
/// (degree = samples − 1; Lagrange form): `f(at) = Σ weight_i · f(x_i)` for every polynomial of
/// degree < `xs.len()`. Two samples fit a K loop, three a causal attention's quadratic in the
/// sequence length.
pub fn lagrange_weights(xs: &[f64], at: f64) -> Vec<f64> {
    xs.iter()
        .enumerate()
        .map(|(i, xi)| {
            xs.iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, xj)| (at - xj) / (xi - xj))
                .product()
        })
        .collect()
}

/// What the job needs, whoever runs it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Job {
    /// Inputs read once plus outputs written once.
    pub compulsory_bytes: f64,
    /// Every buffer the launches touch (compulsory plus intermediates): the DRAM cap.
    pub footprint_bytes: f64,
    /// FLOPs the job needs (2 per multiply-add).
    pub flops: f64,
    pub precision: Precision,
}

/// The five terms of the lower bound, in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bound {
    pub dram_s: f64,
    pub tensor_s: f64,
    pub fma_s: f64,
    pub issue_s: f64,
    pub shared_s: f64,
}

impl Bound {
    pub fn seconds(&self) -> f64 {
        self.dram_s
            .max(self.tensor_s)
            .max(self.fma_s)
            .max(self.issue_s)
            .max(self.shared_s)
    }

    /// Which term decides the bound.
    pub fn limiter(&self) -> &'static str {
        let s = self.seconds();
        if s == self.dram_s {
            "DRAM"
        } else if s == self.tensor_s {
            "tensor"
        } else if s == self.fma_s {
            "FMA"
        } else if s == self.issue_s {
            "issue"
        } else {
            "shared"
        }
    }
}

/// The lower bound on H100-class `peak` of a kernel doing `work` for `job`. The `mma`s run at the
/// tensor rate of the job's precision (f16 for f32 jobs, whose kernels use no `mma`).
pub fn bound(work: &Work, job: &Job, peak: &Peak) -> Bound {
    let tensor_peak = match job.precision {
        Precision::Tf32Tensor => peak.tensor_tf32_flops_per_s,
        _ => peak.tensor_f16_flops_per_s,
    };
    Bound {
        dram_s: work.sector_bytes().min(job.footprint_bytes) / peak.dram_bytes_per_s,
        tensor_s: work.mma_flops / tensor_peak,
        fma_s: 2.0 * work.fp_instructions / peak.fma_flops_per_s,
        issue_s: work.thread_instructions / 32.0 / peak.warp_issue_per_s,
        shared_s: work.shared_wavefronts / peak.shared_wavefronts_per_s,
    }
}

/// The job's ideal roofline time: compulsory bytes at full bandwidth or required FLOPs at the
/// peak of its precision, whichever is longer.
pub fn ideal(job: &Job, peak: &Peak) -> f64 {
    (job.compulsory_bytes / peak.dram_bytes_per_s).max(job.flops / job.precision.peak(peak))
}

/// What one SM holds at once, and how fast it issues.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sm {
    pub count: u32,
    pub registers: u32,
    /// Registers are allocated per warp in units of this many.
    pub register_unit: u32,
    pub shared_bytes: u32,
    /// Shared memory the driver reserves for each resident block.
    pub reserved_shared_per_block: u32,
    pub threads: u32,
    pub blocks: u32,
    pub schedulers: u32,
    pub clock_hz: f64,
}

/// An H100 SXM5 SM (compute capability 9.0): 65536 registers (per warp in units of 256), 228
/// KiB of shared memory (1 KiB reserved per block), 2048 threads, 32 blocks, 4 schedulers at
/// 1.98 GHz; 132 of them.
pub const H100_SM: Sm = Sm {
    count: 132,
    registers: 65536,
    register_unit: 256,
    shared_bytes: 228 * 1024,
    reserved_shared_per_block: 1024,
    threads: 2048,
    blocks: 32,
    schedulers: 4,
    clock_hz: 1.98e9,
};

/// One launch as the occupancy sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Launch {
    pub blocks: u64,
    pub threads_per_block: u32,
    /// Per thread, from `ptxas -v`.
    pub registers: u32,
    /// Static (from `ptxas -v`) plus dynamic shared memory per block.
    pub shared_bytes: u32,
}

impl Launch {
    fn warps_per_block(&self) -> u32 {
        self.threads_per_block.div_ceil(32)
    }
}

/// What caps the blocks an SM holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Occupancy {
    Threads,
    Registers,
    SharedMemory,
    Blocks,
}

impl Occupancy {
    pub fn name(self) -> &'static str {
        match self {
            Occupancy::Threads => "threads",
            Occupancy::Registers => "registers",
            Occupancy::SharedMemory => "smem",
            Occupancy::Blocks => "block limit",
        }
    }
}

/// Blocks of `launch` one SM holds at once, and the limit that decides it (the first of
/// threads, registers, shared memory, blocks on a tie). Registers: each warp takes
/// `⌈registers · 32 / unit⌉ · unit`, so an SM holds `⌊65536 / that⌋` warps and
/// `⌊warps / warps per block⌋` blocks. Shared memory: `⌊228 KiB / (bytes + 1 KiB)⌋`.
pub fn blocks_per_sm(launch: &Launch, sm: &Sm) -> (u32, Occupancy) {
    let warps = launch.warps_per_block().max(1);
    let by_threads = sm.threads / (warps * 32);
    let per_warp = (launch.registers * 32).div_ceil(sm.register_unit) * sm.register_unit;
    let by_registers = sm
        .registers
        .checked_div(per_warp)
        .map_or(u32::MAX, |w| w / warps);
    let by_shared = sm.shared_bytes / (launch.shared_bytes + sm.reserved_shared_per_block);
    [
        (by_threads, Occupancy::Threads),
        (by_registers, Occupancy::Registers),
        (by_shared, Occupancy::SharedMemory),
        (sm.blocks, Occupancy::Blocks),
    ]
    .into_iter()
    .min_by_key(|(n, _)| *n)
    .expect("four limits")
}

/// `⌈blocks / (SMs · blocks per SM)⌉`: how many times the grid refills the part.
pub fn waves(launch: &Launch, per_sm: u32, sm: &Sm) -> u64 {
    launch
        .blocks
        .div_ceil(u64::from(sm.count) * u64::from(per_sm.max(1)))
}

/// The compute time of one launch doing `work` on its busiest SM, in seconds: that SM runs
/// `⌈blocks / SMs⌉` blocks, so the tensor, FP32 and shared-memory terms grow by `SMs ·
/// ⌈blocks / SMs⌉ / blocks` over work spread evenly; its issue term is, wave by wave, the resident blocks'
/// warp instructions over the SM's schedulers, and never less than one warp's own
/// instructions (a warp issues at most one per cycle), which is what a grid of few, narrow
/// blocks pays.
pub fn busiest_sm_seconds(launch: &Launch, work: &Work, job: &Job, peak: &Peak, sm: &Sm) -> f64 {
    if launch.blocks == 0 {
        return 0.0;
    }
    let spread = bound(work, job, peak);
    let sms = u64::from(sm.count);
    let busiest = launch.blocks.div_ceil(sms);
    let imbalance = (sms * busiest) as f64 / launch.blocks as f64;
    let (per_sm, _) = blocks_per_sm(launch, sm);
    let waves = waves(launch, per_sm, sm);
    let full = u64::from(per_sm.max(1)) * sms;
    let last = launch.blocks - (waves - 1) * full;
    let block_warp_instructions = work.thread_instructions / 32.0 / launch.blocks as f64;
    let warp_instructions = block_warp_instructions / f64::from(launch.warps_per_block().max(1));
    let wave_cycles = |resident: u64| {
        (resident as f64 * block_warp_instructions / f64::from(sm.schedulers))
            .max(warp_instructions)
    };
    let issue_cycles = (waves - 1) as f64 * wave_cycles(u64::from(per_sm.max(1)))
        + wave_cycles(last.div_ceil(sms));
    (imbalance * spread.tensor_s)
        .max(imbalance * spread.fma_s)
        .max(imbalance * spread.shared_s)
        .max(issue_cycles / sm.clock_hz)
}

/// The waves-aware bound of a job run as `launches` (each with its work), one after another:
/// max(the job's DRAM term, Σ each launch's [`busiest_sm_seconds`]). Never below
/// [`bound`]'s five terms on the summed work.
pub fn waves_aware(launches: &[(Launch, Work)], job: &Job, peak: &Peak, sm: &Sm) -> WavesBound {
    let total = launches
        .iter()
        .fold(Work::default(), |acc, (_, w)| acc.plus(w));
    WavesBound {
        dram_s: bound(&total, job, peak).dram_s,
        busiest_sm_s: launches
            .iter()
            .map(|(l, w)| busiest_sm_seconds(l, w, job, peak, sm))
            .sum(),
    }
}

/// The two terms of the waves-aware bound, in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WavesBound {
    pub dram_s: f64,
    pub busiest_sm_s: f64,
}

impl WavesBound {
    pub fn seconds(&self) -> f64 {
        self.dram_s.max(self.busiest_sm_s)
    }

    pub fn limiter(&self) -> &'static str {
        if self.dram_s >= self.busiest_sm_s {
            "DRAM"
        } else {
            "busiest SM"
        }
    }
}

/// Microseconds with three significant figures.
pub fn us(seconds: f64) -> String {
    let v = seconds * 1e6;
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ptxforge_sim::InstructionCounts;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1e-30)
    }

    /// Shared-memory wavefronts of all three kinds add up, one per SM per cycle: 2^30 of them
    /// on 132 SMs at 1.98 GHz take 4.108 ms, more than the 2^35 / 32 warp instructions'
    /// 1.027 ms, so shared memory decides the bound.
    #[test]
    fn shared_wavefronts_are_a_term_of_the_bound() {
        let c = Counters {
            shared_wavefronts: 1 << 28,
            ldmatrix_wavefronts: 1 << 29,
            cp_async_shared_wavefronts: 1 << 28,
            instructions: InstructionCounts {
                int_arith: 1 << 35,
                ..InstructionCounts::default()
            },
            ..Counters::default()
        };
        let w = Work::from_counters(&c);
        assert_eq!(w.shared_wavefronts, (1u64 << 30) as f64);
        let job = Job {
            compulsory_bytes: 1e6,
            footprint_bytes: 1e6,
            flops: 1e9,
            precision: Precision::F16Tensor,
        };
        let b = bound(&w, &job, &H100);
        assert!(
            close(b.shared_s, 1_073_741_824.0 / (132.0 * 1.98e9)),
            "{b:?}"
        );
        assert_eq!(b.limiter(), "shared");
        assert!(close(b.seconds(), b.shared_s));
        // Doubled on a busiest SM that runs 2 of 133 blocks' share: 132·2/133 of the spread.
        let launch = Launch {
            blocks: 133,
            threads_per_block: 128,
            registers: 32,
            shared_bytes: 0,
        };
        let t = busiest_sm_seconds(&launch, &w, &job, &H100, &H100_SM);
        assert!(
            close(t, b.shared_s * 264.0 / 133.0),
            "{t} vs {}",
            b.shared_s
        );
    }

    /// A hand-computed counter set: 64 MiB of sectors, 1 TFLOP of mma, 2^30 float
    /// thread-instructions and 2^35 thread-instructions in all.
    #[test]
    fn bound_terms_match_hand_computed_numbers() {
        let c = Counters {
            global_load_sectors: 1 << 21, // 64 MiB
            global_load_bytes: 1 << 26,
            mma_flops: 1_000_000_000_000,
            instructions: InstructionCounts {
                float_arith: 1 << 30,
                int_arith: (1 << 35) - (1 << 30),
                ..InstructionCounts::default()
            },
            ..Counters::default()
        };
        let w = Work::from_counters(&c);
        assert_eq!(w.thread_instructions, (1u64 << 35) as f64);
        assert_eq!(w.load_efficiency(), 1.0);
        let job = Job {
            compulsory_bytes: 1e6,
            footprint_bytes: 1e12,
            flops: 1e12,
            precision: Precision::F16Tensor,
        };
        let b = bound(&w, &job, &H100);
        assert!(close(b.dram_s, 67_108_864.0 / 3.35e12), "{b:?}");
        assert!(close(b.tensor_s, 1e12 / 989e12), "{b:?}");
        assert!(close(b.fma_s, 2.0 * 1_073_741_824.0 / 67e12), "{b:?}");
        // 2^35 / 32 = 2^30 warp instructions over 1.04544e12 per second: 1.027 ms.
        assert!(close(b.issue_s, 1_073_741_824.0 / 1.045_44e12), "{b:?}");
        assert_eq!(b.limiter(), "issue");
        assert!(close(b.seconds(), b.issue_s));
        assert_eq!(b.shared_s, 0.0);
        // Ideal: 1 TFLOP at 989 TFLOP/s beats 1 MB at 3.35 TB/s.
        assert!(close(ideal(&job, &H100), 1e12 / 989e12));
        // The footprint caps DRAM bytes: 1 MB of buffers cannot cost 64 MiB of DRAM traffic.
        let small = Job {
            footprint_bytes: 1e6,
            ..job
        };
        assert!(close(bound(&w, &small, &H100).dram_s, 1e6 / 3.35e12));
        // tf32 mma runs at half the f16 rate.
        let tf32 = Job {
            precision: Precision::Tf32Tensor,
            ..job
        };
        assert!(close(bound(&w, &tf32, &H100).tensor_s, 1e12 / 494.5e12));
    }

    fn launch(blocks: u64, threads: u32, registers: u32, shared: u32) -> Launch {
        Launch {
            blocks,
            threads_per_block: threads,
            registers,
            shared_bytes: shared,
        }
    }

    /// Blocks per SM and waves, worked by hand on an H100 SM.
    #[test]
    fn occupancy_matches_hand_computed_cases() {
        let sm = &H100_SM;
        // 128 threads, 90 registers, 30 KiB: a warp takes ⌈90·32/256⌉·256 = 3072 registers,
        // 65536 / 3072 = 21 warps = 5 blocks of 4; shared 233472 / 31744 = 7; threads 16.
        let l = launch(784, 128, 90, 30720);
        assert_eq!(blocks_per_sm(&l, sm), (5, Occupancy::Registers));
        // 784 / (132·5) = 1.19: 2 waves.
        assert_eq!(waves(&l, 5, sm), 2);
        // 33 registers round up to 40 per thread (1280 a warp): 51 warps = 12 blocks of 4, not
        // the 15 that 33 · 32 = 1056 registers a warp would give.
        assert_eq!(
            blocks_per_sm(&launch(1, 128, 33, 0), sm),
            (12, Occupancy::Registers)
        );
        // 256 threads, 32 registers, no shared memory: 2048 / 256 = 8 blocks (threads);
        // registers would allow 65536 / 1024 / 8 = 8 too, and threads come first.
        assert_eq!(
            blocks_per_sm(&launch(1, 256, 32, 0), sm),
            (8, Occupancy::Threads)
        );
        // 32 threads, 16 registers: 64 by threads, 128 by registers, 228 by shared memory,
        // so the 32-block limit decides.
        assert_eq!(
            blocks_per_sm(&launch(1, 32, 16, 0), sm),
            (32, Occupancy::Blocks)
        );
        // 100 KiB of shared memory: 233472 / (102400 + 1024) = 2 blocks.
        let big = launch(1000, 128, 32, 100 * 1024);
        assert_eq!(blocks_per_sm(&big, sm), (2, Occupancy::SharedMemory));
        // 1000 / 264 = 3.8: 4 waves; 264 blocks fill exactly one.
        assert_eq!(waves(&big, 2, sm), 4);
        assert_eq!(waves(&launch(264, 128, 32, 100 * 1024), 2, sm), 1);
        // 255 registers, 1024 threads: 8192 registers a warp, 8 warps an SM: no block fits.
        assert_eq!(blocks_per_sm(&launch(1, 1024, 255, 0), sm).0, 0);
    }

    /// The busiest SM: 36 blocks of 4 warps leave 96 SMs idle, so 36 blocks' issue time is
    /// one block's warp instructions over 4 schedulers, not the total over 132 · 4; 264
    /// blocks (2 per SM) take two blocks' worth; a 1-warp block pays its warp's instructions.
    #[test]
    fn busiest_sm_charges_idle_sms_and_narrow_blocks() {
        let job = Job {
            compulsory_bytes: 0.0,
            footprint_bytes: 0.0,
            flops: 0.0,
            precision: Precision::F16Tensor,
        };
        let per_block = 1.0e6; // warp instructions per block
        let work = |blocks: u64| Work {
            thread_instructions: 32.0 * per_block * blocks as f64,
            ..Work::default()
        };
        let f = H100_SM.clock_hz;
        let few = launch(36, 128, 90, 30720);
        let t = busiest_sm_seconds(&few, &work(36), &job, &H100, &H100_SM);
        assert!(close(t, per_block / 4.0 / f), "{t}");
        // The four-term issue term spreads the same work over every scheduler: 132/36 less.
        let spread = bound(&work(36), &job, &H100).issue_s;
        assert!(close(t / spread, 132.0 / 36.0), "{}", t / spread);
        let two = launch(264, 128, 90, 30720);
        let t = busiest_sm_seconds(&two, &work(264), &job, &H100, &H100_SM);
        assert!(close(t, 2.0 * per_block / 4.0 / f), "{t}");
        // 2 waves of 5 resident blocks (784 blocks): 5 blocks then ⌈124 / 132⌉ = 1.
        let many = launch(784, 128, 90, 30720);
        let t = busiest_sm_seconds(&many, &work(784), &job, &H100, &H100_SM);
        assert!(close(t, 6.0 * per_block / 4.0 / f), "{t}");
        let narrow = launch(10, 32, 32, 0);
        let t = busiest_sm_seconds(&narrow, &work(10), &job, &H100, &H100_SM);
        assert!(close(t, per_block / f), "{t}");
        // The job: DRAM against the launches one after another.
        let both = waves_aware(
            &[(few, work(36)), (narrow, work(10))],
            &job,
            &H100,
            &H100_SM,
        );
        assert!(close(
            both.busiest_sm_s,
            per_block / 4.0 / f + per_block / f
        ));
        assert_eq!(both.limiter(), "busiest SM");
    }

    /// The work at `at` from the work at sample sizes, through [`lagrange_weights`].
    fn extrapolate(points: &[(f64, Work)], at: f64) -> Work {
        let xs: Vec<f64> = points.iter().map(|(x, _)| *x).collect();
        lagrange_weights(&xs, at)
            .iter()
            .zip(points)
            .fold(Work::default(), |out, (weight, (_, w))| {
                out.plus(&w.scaled(*weight))
            })
    }

    /// Two points recover a line exactly and three a parabola, outside the sampled range too.
    #[test]
    fn extrapolation_is_exact_on_polynomials() {
        let at = |x: f64, f: &dyn Fn(f64) -> f64| Work {
            thread_instructions: f(x),
            mma_flops: 2.0 * f(x),
            ..Work::default()
        };
        let line = |x: f64| 100.0 + 7.0 * x;
        let pts: Vec<_> = [512.0, 1024.0].iter().map(|&x| (x, at(x, &line))).collect();
        let w = extrapolate(&pts, 4096.0);
        assert!(close(w.thread_instructions, line(4096.0)));
        assert!(close(w.mma_flops, 2.0 * line(4096.0)));
        let quad = |x: f64| 5.0 + 3.0 * x + 0.25 * x * x;
        let pts: Vec<_> = [128.0, 256.0, 384.0]
            .iter()
            .map(|&x| (x, at(x, &quad)))
            .collect();
        assert!(close(
            extrapolate(&pts, 4096.0).thread_instructions,
            quad(4096.0)
        ));
        assert_eq!(w.scaled(2.0).thread_instructions, 2.0 * line(4096.0));
    }
}
