//! Small builder-made kernels covering every builder feature the families use: per-type vector
//! add, saxpy, warp-shuffle and shared-memory reductions, an atomic histogram, a tiled GEMM, a
//! row softmax, ballots, dynamic shared memory and float conversions. They are part of the ptxas
//! matrix and run in the interpreter against plain-Rust references, so they test the builder,
//! validator and emitter end to end. Every sample declares [`INDEX_BOUND`]; [`check_launch`]
//! checks a launch against it.

mod gemm_tiled;
mod index_bound;
mod tensor_core;

pub use gemm_tiled::{GEMM_THREADS, GEMM_TILE, GEMM_TILE_K};
pub use index_bound::{check_launch, SampleLaunchError, INDEX_BOUND};
pub use tensor_core::{
    TC_BLOCK_THREADS, TC_STAGES, TC_TILE_K, TC_TILE_M, TC_TILE_N, TC_TILING, TF32_TILING,
};

use crate::arch::Arch;
use crate::builder::{
    Float, GlobalPtr, KernelBuilder, ModuleBuilder, Reg, Scalar, BF16, F16, F32, F64, U32,
};
use crate::ir::{AtomOp, CmpOp, MathFn, Precision, Rounding, VoteMode};
use crate::launch::Dim3;
use crate::validate::ValidationErrors;
use index_bound::sample_kernel;

/// Threads per block of the block-level samples.
pub const BLOCK: u32 = 256;
/// Bins of the histogram sample.
pub const HISTOGRAM_BINS: u32 = 64;

/// One sample: its entry name and how to build it.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub name: &'static str,
    pub build: fn(Arch) -> KernelBuilder,
}

/// Every sample kernel.
pub const SAMPLES: &[Sample] = &[
    Sample {
        name: "vec_add_f16",
        build: |a| vec_add::<F16>("vec_add_f16", a),
    },
    Sample {
        name: "vec_add_bf16",
        build: |a| vec_add::<BF16>("vec_add_bf16", a),
    },
    Sample {
        name: "vec_add_f32",
        build: |a| vec_add::<F32>("vec_add_f32", a),
    },
    Sample {
        name: "vec_add_f64",
        build: |a| vec_add::<F64>("vec_add_f64", a),
    },
    Sample {
        name: "saxpy_f32",
        build: saxpy,
    },
    Sample {
        name: "warp_reduce_sum_f32",
        build: warp_reduce_sum,
    },
    Sample {
        name: "block_reduce_sum_f32",
        build: block_reduce_sum,
    },
    Sample {
        name: "histogram_u32",
        build: histogram,
    },
    Sample {
        name: "gemm_tiled_f32",
        build: gemm_tiled::gemm_tiled,
    },
    Sample {
        name: "softmax_row_f32",
        build: softmax_row,
    },
    Sample {
        name: "ballot_count_positive_f32",
        build: ballot_count_positive,
    },
    Sample {
        name: "reverse_dynamic_smem_u32",
        build: reverse_dynamic_smem,
    },
    Sample {
        name: "convert_f32_to_bf16",
        build: |a| convert_from_f32::<BF16>("convert_f32_to_bf16", a),
    },
    Sample {
        name: "convert_f32_to_f16",
        build: |a| convert_from_f32::<F16>("convert_f32_to_f16", a),
    },
    Sample {
        name: "rsqrt_norm_f64",
        build: rsqrt_norm_f64,
    },
    Sample {
        name: "exp_f64",
        build: exp_f64,
    },
];

/// A sample that only some targets can build (tensor cores, async copies).
#[derive(Debug, Clone, Copy)]
pub struct TargetedSample {
    pub sample: Sample,
    /// Whether `arch` has what the sample uses.
    pub supports: fn(Arch) -> bool,
    /// For a block-tiled GEMM sample (`(a, b, c, m, n, k)` parameters), how to launch it.
    pub gemm_tiling: Option<GemmTiling>,
}

/// How a block-tiled GEMM sample is launched: one block of `threads` per `tile_m × tile_n`
/// output tile, no dynamic shared memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmTiling {
    pub tile_m: u32,
    pub tile_n: u32,
    pub threads: u32,
}

impl GemmTiling {
    /// The grid covering an `m × n` output (x along N, y along M).
    pub fn grid(&self, m: u32, n: u32) -> Dim3 {
        Dim3::new(n.div_ceil(self.tile_n), m.div_ceil(self.tile_m), 1)
    }

    /// The block.
    pub fn block(&self) -> Dim3 {
        Dim3::x(self.threads)
    }
}

/// The tensor-core samples: block-tiled GEMMs (`C = A · B`, f32 out; see
/// `samples/tensor_core.rs` and `samples/tensor_core/tf32_gemm.rs`) and one-warp tiles.
pub const TENSOR_CORE_SAMPLES: &[TargetedSample] = &[
    TargetedSample {
        sample: Sample {
            name: "gemm_tc_f16_m16n8k16",
            build: |a| tensor_core::gemm_m16n8k16::<F16>("gemm_tc_f16_m16n8k16", a),
        },
        supports: |a| a.has_mma_m16n8k16() && a.has_cp_async(),
        gemm_tiling: Some(TC_TILING),
    },
    TargetedSample {
        sample: Sample {
            name: "gemm_tc_bf16_m16n8k16",
            build: |a| tensor_core::gemm_m16n8k16::<BF16>("gemm_tc_bf16_m16n8k16", a),
        },
        supports: |a| a.has_mma_m16n8k16() && a.has_cp_async(),
        gemm_tiling: Some(TC_TILING),
    },
    TargetedSample {
        sample: Sample {
            name: "gemm_tc_tf32_m16n8k8",
            build: |a| tensor_core::gemm_m16n8k8_tf32("gemm_tc_tf32_m16n8k8", a),
        },
        supports: |a| a.has_mma_m16n8k16() && a.has_cp_async(),
        gemm_tiling: Some(TF32_TILING),
    },
    TargetedSample {
        sample: Sample {
            name: "gemm_tc_f16_m16n8k8",
            build: |a| tensor_core::gemm_m16n8k8_f16("gemm_tc_f16_m16n8k8", a),
        },
        supports: |a| a.has_mma_m16n8k8() && a.has_ldmatrix(),
        gemm_tiling: Some(TC_TILING),
    },
    TargetedSample {
        sample: Sample {
            name: "mma_tf32_m16n8k8",
            build: |a| tensor_core::mma_tf32_tile("mma_tf32_m16n8k8", a),
        },
        supports: Arch::has_mma_m16n8k16,
        gemm_tiling: None,
    },
    TargetedSample {
        sample: Sample {
            name: "mma_f16_accumulate_m16n8k16",
            build: |a| tensor_core::mma_f16_accumulate_tile("mma_f16_accumulate_m16n8k16", a),
        },
        supports: Arch::has_mma_m16n8k16,
        gemm_tiling: None,
    },
    TargetedSample {
        sample: Sample {
            name: "pack_f32_pairs",
            build: |a| tensor_core::pack_f32_pairs("pack_f32_pairs", a),
        },
        supports: Arch::has_packed_f32_conversion,
        gemm_tiling: None,
    },
];

/// The loaded parameters `(a, b, c, m, n, k)` of every GEMM sample:
/// `C[M, N] (f32) = A[M, K] · B[K, N]`, A and B of `T`.
struct GemmParams<T: Scalar> {
    a: GlobalPtr<T>,
    b: GlobalPtr<T>,
    c: GlobalPtr<F32>,
    m: Reg<U32>,
    n: Reg<U32>,
    k: Reg<U32>,
}

impl<T: Scalar> GemmParams<T> {
    fn declare(k: &mut KernelBuilder) -> Self {
        let (a, b, c) = (
            k.param_ptr::<T>("a"),
            k.param_ptr::<T>("b"),
            k.param_ptr::<F32>("c"),
        );
        let (m, n, kk) = (
            k.param::<U32>("m"),
            k.param::<U32>("n"),
            k.param::<U32>("k"),
        );
        let (a, b, c) = (k.global_ptr(a), k.global_ptr(b), k.global_ptr(c));
        let (m, n, kk) = (k.load_param(m), k.load_param(n), k.load_param(kk));
        Self {
            a,
            b,
            c,
            m,
            n,
            k: kk,
        }
    }
}

/// A module holding one sample, for `arch`.
pub fn sample_module(sample: &Sample, arch: Arch) -> Result<String, ValidationErrors> {
    ModuleBuilder::new(arch).kernel((sample.build)(arch)).emit()
}

/// A module holding every sample, for `arch`.
pub fn all_samples_module(arch: Arch) -> Result<String, ValidationErrors> {
    let mut m = ModuleBuilder::new(arch);
    for s in SAMPLES {
        m.push((s.build)(arch));
    }
    m.emit()
}

/// Elements of `T` one `vec_add` thread handles: a 16-byte vector of f32 or f64, 4 halves
/// (8 bytes).
pub const fn vec_add_width(elem_bytes: u32) -> u32 {
    if elem_bytes == 8 {
        2
    } else {
        4
    }
}

/// `c[i] = a[i] + b[i]` for `i < n`, computed in f32 for the half types. Thread `t` handles
/// elements `w·t .. w·t + w` ([`vec_add_width`]) with one vector load of each input and one
/// vector store when all `w` are inside, element by element in the ragged tail; `a`, `b`, `c`
/// must be `w`-element aligned (allocations are).
fn vec_add<T: Float>(name: &str, arch: Arch) -> KernelBuilder {
    let mut k = sample_kernel(name, arch);
    let (a, b, c) = (
        k.param_ptr::<T>("a"),
        k.param_ptr::<T>("b"),
        k.param_ptr::<T>("c"),
    );
    let n = k.param::<U32>("n");
    let (a, b, c) = (k.global_ptr(a), k.global_ptr(b), k.global_ptr(c));
    let n = k.load_param(n);
    let width = vec_add_width(T::TYPE.bytes());
    let t = k.global_index_x();
    let first = k.mul_lo(t, width);
    let end = k.add(first, width);
    let whole = k.setp(CmpOp::Le, end, n);
    let sum = |k: &mut KernelBuilder, x: Reg<T>, y: Reg<T>| -> Reg<T> {
        if T::TYPE.is_half() {
            let (xf, yf) = (k.to_f32(x), k.to_f32(y));
            let s = k.add(xf, yf);
            k.from_f32::<T>(s)
        } else {
            k.add(x, y)
        }
    };
    let (a_at, b_at, c_at) = (
        k.elem_addr(a, first),
        k.elem_addr(b, first),
        k.elem_addr(c, first),
    );
    k.if_else(
        whole,
        |k| {
            if width == 4 {
                let x = k.ld_global_v4::<T>(a_at, 0, true);
                let y = k.ld_global_v4::<T>(b_at, 0, true);
                let z: [Reg<T>; 4] = std::array::from_fn(|e| sum(k, x[e], y[e]));
                k.st_global_v4(c_at, 0, z);
            } else {
                let x = k.ld_global_v2::<T>(a_at, 0, true);
                let y = k.ld_global_v2::<T>(b_at, 0, true);
                let z: [Reg<T>; 2] = std::array::from_fn(|e| sum(k, x[e], y[e]));
                k.st_global_v2(c_at, 0, z);
            }
        },
        |k| {
            for e in 0..width {
                let i = k.add(first, e);
                let inside = k.setp_lt(i, n);
                let offset = (e * T::TYPE.bytes()) as i32;
                k.if_then(inside, |k| {
                    let x = k.ld_global_nc::<T>(a_at, offset);
                    let y = k.ld_global_nc::<T>(b_at, offset);
                    let z = sum(k, x, y);
                    k.st_global(c_at, offset, z);
                });
            }
        },
    );
    k
}

/// `y[i] = alpha · x[i] + y[i]`.
fn saxpy(arch: Arch) -> KernelBuilder {
    let mut k = sample_kernel("saxpy_f32", arch);
    let (x, y) = (k.param_ptr::<F32>("x"), k.param_ptr::<F32>("y"));
    let (alpha, n) = (k.param::<F32>("alpha"), k.param::<U32>("n"));
    let (x, y) = (k.global_ptr(x), k.global_ptr(y));
    let (alpha, n) = (k.load_param(alpha), k.load_param(n));
    k.for_global_index(n, |k, i| {
        let xa = k.elem_addr(x, i);
        let ya = k.elem_addr(y, i);
        let xv = k.ld_global_nc::<F32>(xa, 0);
        let yv = k.ld_global::<F32>(ya, 0);
        let r = k.fma(alpha, xv, yv);
        k.st_global(ya, 0, r);
    });
    k
}

/// One warp per 32 elements: `out[w] = Σ x[32w .. 32w+32]` by butterfly shuffles.
/// Elements past `n` count as zero.
fn warp_reduce_sum(arch: Arch) -> KernelBuilder {
    let mut k = sample_kernel("warp_reduce_sum_f32", arch);
    let (x, out) = (k.param_ptr::<F32>("x"), k.param_ptr::<F32>("out"));
    let n = k.param::<U32>("n");
    let (x, out) = (k.global_ptr(x), k.global_ptr(out));
    let n = k.load_param(n);
    let i = k.global_index_x();
    let v = k.var::<F32>(0.0f32);
    let in_bounds = k.setp_lt(i, n);
    k.if_then(in_bounds, |k| {
        let addr = k.elem_addr(x, i);
        let loaded = k.ld_global_nc::<F32>(addr, 0);
        k.assign(v, loaded);
    });
    let total = k.warp_sum_f32(v);
    let lane = k.laneid();
    let warp = k.shr(i, 5u32);
    let is_lane0 = k.setp(CmpOp::Eq, lane, 0u32);
    let first_in_bounds = k.setp_lt(i, n);
    let writes = k.and_pred(is_lane0, first_in_bounds);
    k.if_then(writes, |k| {
        let addr = k.elem_addr(out, warp);
        k.st_global(addr, 0, total);
    });
    k
}

/// One block of `BLOCK` threads per `BLOCK` elements: tree reduction in shared memory.
/// `out[block] = Σ x[block·BLOCK ..]`.
fn block_reduce_sum(arch: Arch) -> KernelBuilder {
    let mut k = sample_kernel("block_reduce_sum_f32", arch);
    k.require_block([BLOCK, 1, 1]);
    let (x, out) = (k.param_ptr::<F32>("x"), k.param_ptr::<F32>("out"));
    let n = k.param::<U32>("n");
    let (x, out) = (k.global_ptr(x), k.global_ptr(out));
    let n = k.load_param(n);
    let partial = k.shared_array::<F32>("partial", BLOCK);
    let tid = k.tid_x();
    let i = k.global_index_x();
    k.comment("load one element per thread (zero past n)");
    let v = k.var::<F32>(0.0f32);
    let in_bounds = k.setp_lt(i, n);
    k.if_then(in_bounds, |k| {
        let addr = k.elem_addr(x, i);
        let loaded = k.ld_global_nc::<F32>(addr, 0);
        k.assign(v, loaded);
    });
    let slot = k.shared_elem(partial, tid);
    k.st_shared(slot, 0, v);
    k.bar_sync();
    k.comment("tree reduction: halve the active threads each step");
    let mut stride = BLOCK / 2;
    while stride > 0 {
        let active = k.setp_lt(tid, stride);
        k.if_then(active, |k| {
            let mine = k.ld_shared::<F32>(slot, 0);
            let other = k.ld_shared::<F32>(slot, (stride * 4) as i32);
            let s = k.add(mine, other);
            k.st_shared(slot, 0, s);
        });
        k.bar_sync();
        stride /= 2;
    }
    let is_first = k.setp(CmpOp::Eq, tid, 0u32);
    k.if_then(is_first, |k| {
        let total = k.ld_shared::<F32>(slot, 0);
        let block = k.ctaid_x();
        let addr = k.elem_addr(out, block);
        k.st_global(addr, 0, total);
    });
    k
}

/// `bins[v % HISTOGRAM_BINS] += 1` for each input value: per-block shared histogram with
/// shared atomics, merged into global bins with `red.global.add`.
fn histogram(arch: Arch) -> KernelBuilder {
    let mut k = sample_kernel("histogram_u32", arch);
    k.require_block([BLOCK, 1, 1]);
    let (values, bins) = (k.param_ptr::<U32>("values"), k.param_ptr::<U32>("bins"));
    let n = k.param::<U32>("n");
    let (values, bins) = (k.global_ptr(values), k.global_ptr(bins));
    let n = k.load_param(n);
    let local = k.shared_array::<U32>("local_bins", HISTOGRAM_BINS);
    let tid = k.tid_x();
    k.comment("zero the block's bins");
    let zeroes = k.setp_lt(tid, HISTOGRAM_BINS);
    k.if_then(zeroes, |k| {
        let slot = k.shared_elem(local, tid);
        k.st_shared(slot, 0, 0u32);
    });
    k.bar_sync();
    k.comment("count with shared atomics");
    k.for_global_index(n, |k, i| {
        let addr = k.elem_addr(values, i);
        let v = k.ld_global_nc::<U32>(addr, 0);
        let bin = k.rem(v, HISTOGRAM_BINS);
        let slot = k.shared_elem(local, bin);
        k.red_shared::<U32>(AtomOp::Add, slot, 1u32);
    });
    k.bar_sync();
    k.comment("merge into the global bins");
    k.if_then(zeroes, |k| {
        let slot = k.shared_elem(local, tid);
        let count = k.ld_shared::<U32>(slot, 0);
        let addr = k.elem_addr(bins, tid);
        k.red_global::<U32>(AtomOp::Add, addr, count);
    });
    k
}

/// Row softmax of `x [rows, cols]`: one warp per row, max-subtracted, `exp` via `ex2.approx`.
/// A row of up to [`SOFTMAX_MAX_COLS`] columns is read once into registers (lane `l` holds
/// columns `l + 32·s`); a longer one streams through global memory in three passes (maximum,
/// sum, normalise), so every row is written whatever its length.
fn softmax_row(arch: Arch) -> KernelBuilder {
    let mut k = sample_kernel("softmax_row_f32", arch);
    k.require_block([32, 1, 1]);
    let (x, y) = (k.param_ptr::<F32>("x"), k.param_ptr::<F32>("y"));
    let cols = k.param::<U32>("cols");
    let (x, y) = (k.global_ptr(x), k.global_ptr(y));
    let cols = k.load_param(cols);
    let lane = k.tid_x();
    let row = k.ctaid_x();
    let row_start = k.mul_lo(row, cols);
    let xr = k.offset_ptr(x, row_start);
    let yr = k.offset_ptr(y, row_start);
    let fits = k.setp(CmpOp::Le, cols, SOFTMAX_MAX_COLS);
    k.if_else(
        fits,
        |k| softmax_held(k, cols, lane, xr, yr),
        |k| softmax_streamed(k, cols, lane, xr, yr),
    );
    k
}

/// The row held in registers: one global read per element.
fn softmax_held(
    k: &mut KernelBuilder,
    cols: Reg<U32>,
    lane: Reg<U32>,
    xr: GlobalPtr<F32>,
    yr: GlobalPtr<F32>,
) {
    let xl = k.elem_addr(xr, lane);
    let yl = k.elem_addr(yr, lane);
    // Slot `s` holds column `lane + 32·s`, which exists iff `s < (cols + 31 − lane) / 32`.
    let with_slack = k.add(cols, 31u32);
    let with_slack = k.sub(with_slack, lane);
    let slots = k.shr(with_slack, 5u32);
    let held: Vec<Reg<F32>> = (0..SOFTMAX_SLOTS).map(|_| k.reg::<F32>()).collect();
    k.comment("read the row once; row maximum");
    let m = k.var::<F32>(f32::NEG_INFINITY);
    for_each_slot(k, slots, |k, s| {
        let v = k.ld_global_nc::<F32>(xl, slot_offset(s));
        k.assign(held[s as usize], v);
        k.max_into(m, m, v);
    });
    let m = k.warp_max_f32(m);
    k.comment("exponentials and their sum");
    let sum = k.var::<F32>(0.0f32);
    for_each_slot(k, slots, |k, s| {
        let v = held[s as usize];
        let d = k.sub(v, m);
        let e = k.exp_approx(d);
        k.assign(v, e);
        k.add_into(sum, sum, e);
    });
    let sum = k.warp_sum_f32(sum);
    let inv = k.math(MathFn::Rcp, sum, Precision::Rounded(Rounding::Rn));
    k.comment("normalise");
    for_each_slot(k, slots, |k, s| {
        let p = k.mul(held[s as usize], inv);
        k.st_global(yl, slot_offset(s), p);
    });
}

/// A row longer than the registers hold: three strided passes over global memory.
fn softmax_streamed(
    k: &mut KernelBuilder,
    cols: Reg<U32>,
    lane: Reg<U32>,
    xr: GlobalPtr<F32>,
    yr: GlobalPtr<F32>,
) {
    let exp_of = |k: &mut KernelBuilder, j: Reg<U32>, m: Reg<F32>| {
        let addr = k.elem_addr(xr, j);
        let v = k.ld_global_nc::<F32>(addr, 0);
        let d = k.sub(v, m);
        k.exp_approx(d)
    };
    k.comment("long row: maximum");
    let m = k.var::<F32>(f32::NEG_INFINITY);
    k.for_range(lane, cols, 32u32, |k, j| {
        let addr = k.elem_addr(xr, j);
        let v = k.ld_global_nc::<F32>(addr, 0);
        k.max_into(m, m, v);
    });
    let m = k.warp_max_f32(m);
    k.comment("long row: sum of exponentials");
    let sum = k.var::<F32>(0.0f32);
    k.for_range(lane, cols, 32u32, |k, j| {
        let e = exp_of(k, j, m);
        k.add_into(sum, sum, e);
    });
    let sum = k.warp_sum_f32(sum);
    let inv = k.math(MathFn::Rcp, sum, Precision::Rounded(Rounding::Rn));
    k.comment("long row: normalise");
    k.for_range(lane, cols, 32u32, |k, j| {
        let e = exp_of(k, j, m);
        let p = k.mul(e, inv);
        let out = k.elem_addr(yr, j);
        k.st_global(out, 0, p);
    });
}

/// Registers per lane holding a softmax row.
const SOFTMAX_SLOTS: u32 = 32;
/// Longest row `softmax_row_f32` takes (32 columns per lane register).
pub const SOFTMAX_MAX_COLS: u32 = 32 * SOFTMAX_SLOTS;

/// Byte offset of slot `s` (column `lane + 32·s`) from the lane's first column.
fn slot_offset(s: u32) -> i32 {
    (s * 32 * 4) as i32
}

/// Runs `body(s)` for the slots `s < slots` (ascending, unrolled): each slot is one compare and
/// branch past the rest, so a short row pays only for the slots it has.
fn for_each_slot(
    k: &mut KernelBuilder,
    slots: Reg<U32>,
    mut body: impl FnMut(&mut KernelBuilder, u32),
) {
    let done = k.label("slots_done");
    for s in 0..SOFTMAX_SLOTS {
        let past = k.setp(CmpOp::Le, slots, s);
        k.bra_if(past, false, done);
        body(k, s);
    }
    k.place(done);
}

/// Per warp: `counts[warp] = #{lanes with x > 0}` via `vote.sync.ballot` and `popc`; also
/// `all_positive[warp] = 1` when every lane's value is positive (`vote.sync.all`).
fn ballot_count_positive(arch: Arch) -> KernelBuilder {
    let mut k = sample_kernel("ballot_count_positive_f32", arch);
    let (x, counts, all) = (
        k.param_ptr::<F32>("x"),
        k.param_ptr::<U32>("counts"),
        k.param_ptr::<U32>("all_positive"),
    );
    let (x, counts, all) = (k.global_ptr(x), k.global_ptr(counts), k.global_ptr(all));
    let i = k.global_index_x();
    let addr = k.elem_addr(x, i);
    let v = k.ld_global_nc::<F32>(addr, 0);
    let positive = k.setp(CmpOp::Gt, v, 0.0f32);
    let mask = k.ballot(positive);
    let count = k.popc(mask);
    let every = k.vote(VoteMode::All, positive);
    let every_u32 = k.selp(1u32, 0u32, every);
    let lane = k.laneid();
    let is_lane0 = k.setp(CmpOp::Eq, lane, 0u32);
    k.if_then(is_lane0, |k| {
        let warp = k.shr(i, 5u32);
        let ca = k.elem_addr(counts, warp);
        k.st_global(ca, 0, count);
        let aa = k.elem_addr(all, warp);
        k.st_global(aa, 0, every_u32);
    });
    k
}

/// Reverses each block's `ntid.x` elements through dynamic shared memory:
/// `y[b·B + t] = x[b·B + (B − 1 − t)]`. Launch with `ntid.x · 4` bytes of dynamic shared memory.
fn reverse_dynamic_smem(arch: Arch) -> KernelBuilder {
    let mut k = sample_kernel("reverse_dynamic_smem_u32", arch);
    k.max_block([1024, 1, 1]);
    let (x, y) = (k.param_ptr::<U32>("x"), k.param_ptr::<U32>("y"));
    let (x, y) = (k.global_ptr(x), k.global_ptr(y));
    let buf = k.dynamic_shared::<U32>(4 * 1024);
    let tid = k.tid_x();
    let ntid = k.ntid_x();
    let i = k.global_index_x();
    let addr = k.elem_addr(x, i);
    let v = k.ld_global_nc::<U32>(addr, 0);
    let slot = k.shared_elem(buf, tid);
    k.st_shared(slot, 0, v);
    k.bar_sync();
    let last = k.sub(ntid, 1u32);
    let mirror = k.sub(last, tid);
    let mirror_slot = k.shared_elem(buf, mirror);
    let w = k.ld_shared::<U32>(mirror_slot, 0);
    let out = k.elem_addr(y, i);
    k.st_global(out, 0, w);
    k
}

/// `y[i] = D(x[i])`, f32 narrowed with round-to-nearest-even (software path for bf16 before
/// sm_80), then widened back into `z[i]` as f32.
fn convert_from_f32<D: Float>(name: &str, arch: Arch) -> KernelBuilder {
    let mut k = sample_kernel(name, arch);
    let (x, y, z) = (
        k.param_ptr::<F32>("x"),
        k.param_ptr::<D>("y"),
        k.param_ptr::<F32>("z"),
    );
    let n = k.param::<U32>("n");
    let (x, y, z) = (k.global_ptr(x), k.global_ptr(y), k.global_ptr(z));
    let n = k.load_param(n);
    k.for_global_index(n, |k, i| {
        let xa = k.elem_addr(x, i);
        let v = k.ld_global_nc::<F32>(xa, 0);
        let narrow = k.from_f32::<D>(v);
        let ya = k.elem_addr(y, i);
        k.st_global(ya, 0, narrow);
        let wide = k.to_f32(narrow);
        let za = k.elem_addr(z, i);
        k.st_global(za, 0, wide);
    });
    k
}

/// `y[i] = x[i] / sqrt(x[i]·x[i] + 1)` in f64 with IEEE-rounded `sqrt` and `div`.
fn rsqrt_norm_f64(arch: Arch) -> KernelBuilder {
    let mut k = sample_kernel("rsqrt_norm_f64", arch);
    let (x, y) = (k.param_ptr::<F64>("x"), k.param_ptr::<F64>("y"));
    let n = k.param::<U32>("n");
    let (x, y) = (k.global_ptr(x), k.global_ptr(y));
    let n = k.load_param(n);
    k.for_global_index(n, |k, i| {
        let xa = k.elem_addr(x, i);
        let v = k.ld_global_nc::<F64>(xa, 0);
        let sq = k.fma(v, v, 1.0f64);
        let root = k.math(MathFn::Sqrt, sq, Precision::Rounded(Rounding::Rn));
        let r = k.div(v, root, Precision::Rounded(Rounding::Rn));
        let ya = k.elem_addr(y, i);
        k.st_global(ya, 0, r);
    });
    k
}

/// `y[i] = e^x[i]` in f64 (software exponential, see `KernelBuilder::exp_f64`).
fn exp_f64(arch: Arch) -> KernelBuilder {
    let mut k = sample_kernel("exp_f64", arch);
    let (x, y) = (k.param_ptr::<F64>("x"), k.param_ptr::<F64>("y"));
    let n = k.param::<U32>("n");
    let (x, y) = (k.global_ptr(x), k.global_ptr(y));
    let n = k.load_param(n);
    k.for_global_index(n, |k, i| {
        let xa = k.elem_addr(x, i);
        let v = k.ld_global_nc::<F64>(xa, 0);
        let e = k.exp_f64(v);
        let ya = k.elem_addr(y, i);
        k.st_global(ya, 0, e);
    });
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sample_validates_on_every_arch() {
        for arch in Arch::ALL {
            for s in SAMPLES {
                if let Err(e) = sample_module(s, arch) {
                    panic!("{} on {arch}: {e}", s.name);
                }
            }
        }
    }

    #[test]
    fn tensor_core_samples_validate_where_supported_and_fail_soft_elsewhere() {
        for arch in Arch::ALL {
            for t in TENSOR_CORE_SAMPLES {
                match (sample_module(&t.sample, arch), (t.supports)(arch)) {
                    (Ok(_), true) => {}
                    (Err(e), true) => panic!("{} on {arch}: {e}", t.sample.name),
                    (Ok(_), false) => panic!("{} validated on {arch}", t.sample.name),
                    (Err(e), false) => {
                        assert!(e.to_string().contains("or newer; the target is"), "{e}")
                    }
                }
            }
        }
    }

    #[test]
    fn emission_is_deterministic() {
        for arch in [Arch::Sm70, Arch::Sm90] {
            assert_eq!(
                all_samples_module(arch).unwrap(),
                all_samples_module(arch).unwrap()
            );
        }
    }
}
