//! aprender-gpu NF4 GEMM kernels against `templates::nf4::reference`.
//!
//! aprender's `B_nf4 [K × N]` "column-major block order" stores column `n` of B as `K / 64`
//! consecutive blocks — element `(k, n)` of B is element `(n, k)` of ptxforge's `W [N, K]`, in
//! the same block order — so `C = A · B` is ptxforge's forward `A · Ŵᵀ` and the transposed
//! kernel `A · Bᵀ` is ptxforge's backward-input `G_C · Ŵ`. Two differences are adapted on the
//! host: the scales and nibbles are separate buffers (ptxforge's `absmax` is passed as is), and
//! aprender puts element `2j` in the *low* nibble of byte `j` (bitsandbytes and ptxforge: the
//! high nibble), so every byte is passed with its nibbles swapped. The codebook is the same.

use ptxforge_runtime::templates::nf4::{dequantize, quantize, reference, Nf4Weights};
use ptxforge_runtime::templates::testing::SplitMix64;
use ptxforge_sim::{Arg, Device, Module};

use super::{reference_error, widen, HarnessError, Launch, Outcome, Tolerance};
use crate::generate::{NF4_BLOCK, NF4_K, NF4_N};

/// Launch geometry of the kernel family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tiling {
    /// `tile × tile` outputs per block, one thread each (`tile` = 32 forward, 16 transposed).
    Scalar,
    /// One warp per 16×16 output tile.
    Wmma,
}

struct Data {
    w: Nf4Weights,
    /// `Ŵ [N, K]`, dequantised.
    w_hat: Vec<f32>,
    /// aprender's packing of the same codes.
    nibbles_low_first: Vec<u8>,
}

fn data() -> Result<Data, HarnessError> {
    let (n, k) = (NF4_N as usize, NF4_K as usize);
    let mut rng = SplitMix64::new(0x4E_46_34);
    let w =
        quantize(&rng.vec_f32(n * k, -1.0, 1.0), NF4_BLOCK as usize).map_err(reference_error)?;
    let w_hat = dequantize(&w).map_err(reference_error)?;
    let nibbles_low_first = w.packed.iter().map(|b| b.rotate_left(4)).collect();
    Ok(Data {
        w,
        w_hat,
        nibbles_low_first,
    })
}

/// `Σ_l |a[i, l] · b[l, j]|` for `a [m, inner]` and `b` given by `b_at(l, j)`.
fn abs_products(
    a: &[f32],
    m: usize,
    inner: usize,
    cols: usize,
    b_at: impl Fn(usize, usize) -> f32,
) -> Vec<f64> {
    let mut s = vec![0.0; m * cols];
    for i in 0..m {
        for j in 0..cols {
            s[i * cols + j] = (0..inner)
                .map(|l| (f64::from(a[i * inner + l]) * f64::from(b_at(l, j))).abs())
                .sum();
        }
    }
    s
}

fn tile(tiling: Tiling, scalar_tile: u32) -> ([u32; 3], u32) {
    match tiling {
        Tiling::Scalar => ([scalar_tile * scalar_tile, 1, 1], scalar_tile),
        Tiling::Wmma => ([32, 1, 1], 16),
    }
}

/// Argument order: the scalar kernels take `(a, nibbles, scales, c, m, n, k)`, the WMMA ones
/// `(a, scales, nibbles, c, m, n, k)`.
#[allow(clippy::too_many_arguments)]
fn args(
    tiling: Tiling,
    a: Arg,
    nibbles: Arg,
    scales: Arg,
    c: Arg,
    m: u32,
    n: u32,
    k: u32,
) -> Vec<Arg> {
    let (first, second) = match tiling {
        Tiling::Scalar => (nibbles, scales),
        Tiling::Wmma => (scales, nibbles),
    };
    vec![a, first, second, c, Arg::U32(m), Arg::U32(n), Arg::U32(k)]
}

/// The scalar kernels give every thread of a `tile × tile` block one output and clamp rows
/// beyond `M` to `M − 1`: those threads run the whole dot product and skip only the store.
fn idle_threads(tiling: Tiling, launch: &Launch<'_>, outputs: u64) -> Vec<String> {
    let threads: u64 = launch
        .grid
        .iter()
        .chain(&launch.block)
        .map(|&d| u64::from(d))
        .product();
    if tiling != Tiling::Scalar || threads <= outputs {
        return Vec::new();
    }
    vec![format!(
        "{} of {threads} threads ({:.0}%) compute a clamped duplicate (rows ≥ M or columns \
         past the edge) and discard it",
        threads - outputs,
        100.0 * (threads - outputs) as f64 / threads as f64
    )]
}

/// Forward `C [M, N] = A [M, K] · Ŵᵀ`: grid `(⌈N / tile⌉, ⌈M / tile⌉)`.
pub fn forward(
    module: &Module,
    entry: &str,
    m: u32,
    tiling: Tiling,
) -> Result<Outcome, HarnessError> {
    let (n, k) = (NF4_N, NF4_K);
    let d = data()?;
    let mut rng = SplitMix64::new(0xA0 + u64::from(m));
    let a = rng.vec_f32((m * k) as usize, -1.0, 1.0);
    let want = reference::forward(&a, m as usize, &d.w, n as usize, k as usize)
        .map_err(reference_error)?;
    let scale = abs_products(&a, m as usize, k as usize, n as usize, |l, j| {
        d.w_hat[j * k as usize + l]
    });
    let mut dev = Device::new();
    let a_buf = dev.upload(&a);
    let nib = dev.upload(&d.nibbles_low_first);
    let sc = dev.upload(&d.w.absmax);
    let c = dev.alloc((m * n) as usize * 4);
    let (block, t) = tile(tiling, 32);
    let launch = Launch {
        entry,
        grid: [n.div_ceil(t), m.div_ceil(t), 1],
        block,
        args: args(
            tiling,
            Arg::Buffer(a_buf),
            Arg::Buffer(nib),
            Arg::Buffer(sc),
            Arg::Buffer(c),
            m,
            n,
            k,
        ),
    };
    let report = launch.run(&mut dev, module)?;
    let got: Vec<f32> = dev.download(c)?;
    Ok(Outcome {
        verdict: Tolerance::F32_SUM.verdict("C", &got, &widen(&want), &scale),
        report,
        outputs: u64::from(m * n),
        observations: idle_threads(tiling, &launch, u64::from(m * n)),
        launch: launch.describe(),
    })
}

/// Transposed `G_A [M, K] = G_C [M, N] · Ŵ`: grid `(⌈K / tile⌉, ⌈M / tile⌉)`.
pub fn transposed(
    module: &Module,
    entry: &str,
    m: u32,
    tiling: Tiling,
) -> Result<Outcome, HarnessError> {
    let (n, k) = (NF4_N, NF4_K);
    let d = data()?;
    let mut rng = SplitMix64::new(0xB0 + u64::from(m));
    let g_c = rng.vec_f32((m * n) as usize, -1.0, 1.0);
    let want = reference::backward_input(&g_c, m as usize, &d.w, n as usize, k as usize)
        .map_err(reference_error)?;
    let scale = abs_products(&g_c, m as usize, n as usize, k as usize, |j, l| {
        d.w_hat[j * k as usize + l]
    });
    let mut dev = Device::new();
    let g_buf = dev.upload(&g_c);
    let nib = dev.upload(&d.nibbles_low_first);
    let sc = dev.upload(&d.w.absmax);
    let g_a = dev.alloc((m * k) as usize * 4);
    let (block, t) = tile(tiling, 16);
    let launch = Launch {
        entry,
        grid: [k.div_ceil(t), m.div_ceil(t), 1],
        block,
        args: args(
            tiling,
            Arg::Buffer(g_buf),
            Arg::Buffer(nib),
            Arg::Buffer(sc),
            Arg::Buffer(g_a),
            m,
            n,
            k,
        ),
    };
    let report = launch.run(&mut dev, module)?;
    let got: Vec<f32> = dev.download(g_a)?;
    Ok(Outcome {
        verdict: Tolerance::F32_SUM.verdict("G_A", &got, &widen(&want), &scale),
        report,
        outputs: u64::from(m * k),
        observations: idle_threads(tiling, &launch, u64::from(m * k)),
        launch: launch.describe(),
    })
}
