//! Modelled H100 time: a MODEL, not a measurement. Turns the interpreter's counters into a
//! roofline lower bound — the time no H100 can beat while doing the work the counters saw — and
//! puts the job's ideal roofline time beside it.
//!
//! - **bound** = max of DRAM bytes / 3.35 TB/s, tensor FLOPs / tensor peak (989 TFLOP/s dense
//!   f16/bf16, half that for tf32), FP32-pipe thread-instructions × 2 / 67 TFLOP/s (each float
//!   instruction takes one FMA lane-slot: an FMA is 2 FLOPs in it) and issued warp instructions /
//!   (132 SMs × 4 schedulers × 1.98 GHz). DRAM bytes are the 32-byte sectors the loads, stores
//!   and `cp.async` copies moved, capped at the bytes of the buffers the job touches (a perfect
//!   L2 reads each byte from DRAM once). Warp instructions are thread-instructions ÷ 32 (fewer
//!   than issued when warps are partly active, so still a lower bound).
//! - **ideal** = max of the job's compulsory bytes (inputs read once, outputs written once) / BW
//!   and its required FLOPs / the peak of its precision.
//! - **ideal / bound** ≤ 1: how close the kernel's own work is to the job's roofline.
//!
//! Counters of realistic shapes come from smaller launches: [`extrapolate`] fits a polynomial in
//! one size parameter through sample points (exact when per-block work is affine in the K loop,
//! or quadratic in the sequence length for attention), and [`Work::scaled`] multiplies by the
//! ratio of identically-working blocks.

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
}

/// H100 SXM5: HBM3 3.35 TB/s, 989 dense f16/bf16 TFLOP/s, 67 FP32 TFLOP/s, 132 SMs × 4
/// schedulers at the 1.98 GHz boost clock.
pub const H100: Peak = Peak {
    dram_bytes_per_s: 3.35e12,
    tensor_f16_flops_per_s: 989e12,
    tensor_tf32_flops_per_s: 494.5e12,
    fma_flops_per_s: 67e12,
    warp_issue_per_s: 132.0 * 4.0 * 1.98e9,
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
        }
    }

    fn fields(&self) -> [f64; 7] {
        [
            self.thread_instructions,
            self.tensor_instructions,
            self.fp_instructions,
            self.mma_flops,
            self.load_bytes,
            self.load_sectors,
            self.store_sectors,
        ]
    }

    fn from_fields(f: [f64; 7]) -> Work {
        Work {
            thread_instructions: f[0],
            tensor_instructions: f[1],
            fp_instructions: f[2],
            mma_flops: f[3],
            load_bytes: f[4],
            load_sectors: f[5],
            store_sectors: f[6],
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

/// The work measured at sample sizes `points` (size, work), extended to `at` by the polynomial
/// through them (degree = points − 1; Lagrange form). Two points fit a K loop, three a causal
/// attention's quadratic in the sequence length.
pub fn extrapolate(points: &[(f64, Work)], at: f64) -> Work {
    let mut out = Work::default();
    for (i, (xi, wi)) in points.iter().enumerate() {
        let weight: f64 = points
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, (xj, _))| (at - xj) / (xi - xj))
            .product();
        out = out.plus(&wi.scaled(weight));
    }
    out
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

/// The four terms of the lower bound, in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bound {
    pub dram_s: f64,
    pub tensor_s: f64,
    pub fma_s: f64,
    pub issue_s: f64,
}

impl Bound {
    pub fn seconds(&self) -> f64 {
        self.dram_s
            .max(self.tensor_s)
            .max(self.fma_s)
            .max(self.issue_s)
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
        } else {
            "issue"
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
    }
}

/// The job's ideal roofline time: compulsory bytes at full bandwidth or required FLOPs at the
/// peak of its precision, whichever is longer.
pub fn ideal(job: &Job, peak: &Peak) -> f64 {
    (job.compulsory_bytes / peak.dram_bytes_per_s).max(job.flops / job.precision.peak(peak))
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
