//! oxicuda-ptx convolution kernels (NCHW, f32) against `templates::conv::reference`.
//!
//! Layouts read from the generated PTX: input `[N, C, H, W]`, weight `[OC, C/g, KH, KW]`,
//! output `[N, OC, OH, OW]` — the same as ptxforge's — and im2col columns
//! `[N, C·KH·KW, OH·OW]`, which for N = 1, groups = 1 is ptxforge's `[G, Cg·KH·KW, N·OH·OW]`.
//! The bias pointer is passed as null (ptxforge's benchmark configuration has no bias).

use ptxforge_runtime::templates::conv::reference;
use ptxforge_runtime::templates::conv::{Conv2dConfig, ConvShape};
use ptxforge_runtime::templates::testing::SplitMix64;
use ptxforge_sim::{Arg, Device, Module};

use super::{abs, narrow, reference_error, HarnessError, Launch, Outcome, Tolerance};
use crate::generate::{CONV_BATCH, CONV_CHANNELS, CONV_SIZE};

/// Threads per block for the 1-D launches (the generator fixes no block size).
const BLOCK: u32 = 256;

struct Data {
    cfg: Conv2dConfig,
    shape: ConvShape,
    x: Vec<f64>,
    w: Vec<f64>,
    gy: Vec<f64>,
}

fn data(kernel: u32, padding: u32) -> Data {
    let mut cfg = Conv2dConfig::new(CONV_CHANNELS, CONV_CHANNELS, kernel);
    cfg.padding_h = padding;
    cfg.padding_w = padding;
    let shape = ConvShape {
        batch: CONV_BATCH,
        height: CONV_SIZE,
        width: CONV_SIZE,
    };
    let mut rng = SplitMix64::new(0xC0_57 + u64::from(kernel));
    let plane = (CONV_BATCH * CONV_CHANNELS * CONV_SIZE * CONV_SIZE) as usize;
    let weights = (CONV_CHANNELS * CONV_CHANNELS * kernel * kernel) as usize;
    // Values exactly representable in f32, so the f64 reference sees the kernel's inputs.
    let round = |v: Vec<f64>| {
        v.into_iter()
            .map(|x| f64::from(x as f32))
            .collect::<Vec<_>>()
    };
    Data {
        cfg,
        shape,
        x: round(rng.vec_f64(plane, -1.0, 1.0)),
        w: round(rng.vec_f64(weights, -1.0, 1.0)),
        // Stride 1 with "same" padding: the output has the input's size.
        gy: round(rng.vec_f64(plane, -1.0, 1.0)),
    }
}

fn sizes() -> [Arg; 5] {
    [
        Arg::U32(CONV_BATCH),
        Arg::U32(CONV_SIZE),
        Arg::U32(CONV_SIZE),
        Arg::U32(CONV_SIZE),
        Arg::U32(CONV_SIZE),
    ]
}

/// im2col: one thread per output pixel, grid `(⌈OH·OW / 256⌉, N)`.
pub fn im2col(module: &Module, entry: &str) -> Result<Outcome, HarnessError> {
    let d = data(3, 1);
    let want = reference::im2col(&d.cfg, &d.shape, &d.x).map_err(reference_error)?;
    let mut dev = Device::new();
    let x = dev.upload(&narrow(&d.x));
    let cols = dev.alloc(want.len() * 4);
    let pixels = CONV_SIZE * CONV_SIZE;
    let mut args = vec![Arg::Buffer(x), Arg::Buffer(cols)];
    args.extend(sizes());
    let launch = Launch {
        entry,
        grid: [pixels.div_ceil(BLOCK), CONV_BATCH, 1],
        block: [BLOCK, 1, 1],
        args,
    };
    let report = launch.run(&mut dev, module)?;
    let got: Vec<f32> = dev.download(cols)?;
    let verdict = Tolerance::EXACT.verdict("cols", &got, &want, &want);
    Ok(Outcome {
        report,
        outputs: want.len() as u64,
        verdict,
        observations: Vec::new(),
        launch: launch.describe(),
    })
}

/// Forward output and `Σ|terms|` per element.
fn forward_reference(d: &Data) -> Result<(Vec<f64>, Vec<f64>), HarnessError> {
    let y = reference::forward(&d.cfg, &d.shape, &d.x, &d.w, None).map_err(reference_error)?;
    let scale = reference::forward(&d.cfg, &d.shape, &abs(&d.x), &abs(&d.w), None)
        .map_err(reference_error)?;
    Ok((y, scale))
}

fn forward_args(dev: &mut Device, d: &Data, out_len: usize) -> (Vec<Arg>, ptxforge_sim::BufferId) {
    let x = dev.upload(&narrow(&d.x));
    let w = dev.upload(&narrow(&d.w));
    let y = dev.alloc(out_len * 4);
    (
        vec![Arg::Buffer(x), Arg::Buffer(w), Arg::Buffer(y), Arg::U64(0)],
        y,
    )
}

/// Direct: one thread per output, grid `(⌈OW / 16⌉, OH, N·OC)`, block 16.
pub fn direct(module: &Module, entry: &str) -> Result<Outcome, HarnessError> {
    let d = data(3, 1);
    let (want, scale) = forward_reference(&d)?;
    let mut dev = Device::new();
    let (mut args, y) = forward_args(&mut dev, &d, want.len());
    args.extend(sizes());
    let launch = Launch {
        entry,
        grid: [1, CONV_SIZE, CONV_BATCH * CONV_CHANNELS],
        block: [CONV_SIZE, 1, 1],
        args,
    };
    let report = launch.run(&mut dev, module)?;
    let got: Vec<f32> = dev.download(y)?;
    let mut observations = Vec::new();
    let smem = module.static_shared_bytes(entry).unwrap_or(0);
    if smem > 0 && report.counters.shared_requests == 0 {
        observations.push(format!(
            "declares {smem} B of static shared memory (the doc promises shared-memory tiling) \
             but never accesses it"
        ));
    }
    Ok(Outcome {
        verdict: Tolerance::F32_SUM.verdict("y", &got, &want, &scale),
        report,
        outputs: want.len() as u64,
        observations,
        launch: launch.describe(),
    })
}

/// 1×1: one thread per output pixel, grid `(⌈H·W / 256⌉, N·OC)`.
pub fn pointwise(module: &Module, entry: &str) -> Result<Outcome, HarnessError> {
    let d = data(1, 0);
    let (want, scale) = forward_reference(&d)?;
    let mut dev = Device::new();
    let (mut args, y) = forward_args(&mut dev, &d, want.len());
    let spatial = CONV_SIZE * CONV_SIZE;
    args.extend([Arg::U32(CONV_BATCH), Arg::U32(spatial)]);
    let launch = Launch {
        entry,
        grid: [spatial.div_ceil(BLOCK), CONV_BATCH * CONV_CHANNELS, 1],
        block: [BLOCK, 1, 1],
        args,
    };
    let report = launch.run(&mut dev, module)?;
    let got: Vec<f32> = dev.download(y)?;
    Ok(Outcome {
        verdict: Tolerance::F32_SUM.verdict("y", &got, &want, &scale),
        report,
        outputs: want.len() as u64,
        observations: Vec::new(),
        launch: launch.describe(),
    })
}

/// Backward-data: one thread per input element, grid `(⌈W / 16⌉, H, N·C)`, block 16.
pub fn backward_data(module: &Module, entry: &str) -> Result<Outcome, HarnessError> {
    let d = data(3, 1);
    let want = reference::backward_data(&d.cfg, &d.shape, &d.gy, &d.w).map_err(reference_error)?;
    let scale = reference::backward_data(&d.cfg, &d.shape, &abs(&d.gy), &abs(&d.w))
        .map_err(reference_error)?;
    let mut dev = Device::new();
    let gy = dev.upload(&narrow(&d.gy));
    let w = dev.upload(&narrow(&d.w));
    let dx = dev.alloc(want.len() * 4);
    let mut args = vec![Arg::Buffer(gy), Arg::Buffer(w), Arg::Buffer(dx)];
    args.extend(sizes());
    let launch = Launch {
        entry,
        grid: [1, CONV_SIZE, CONV_BATCH * CONV_CHANNELS],
        block: [CONV_SIZE, 1, 1],
        args,
    };
    let report = launch.run(&mut dev, module)?;
    let got: Vec<f32> = dev.download(dx)?;
    Ok(Outcome {
        verdict: Tolerance::F32_SUM.verdict("dx", &got, &want, &scale),
        report,
        outputs: want.len() as u64,
        observations: Vec::new(),
        launch: launch.describe(),
    })
}

/// Backward-filter: one thread per `(ky, kx)` tap, grid `(1, OC·C)`, block 32 (9 active).
pub fn backward_filter(module: &Module, entry: &str) -> Result<Outcome, HarnessError> {
    let d = data(3, 1);
    let (want, _) =
        reference::backward_filter(&d.cfg, &d.shape, &d.x, &d.gy).map_err(reference_error)?;
    let (scale, _) = reference::backward_filter(&d.cfg, &d.shape, &abs(&d.x), &abs(&d.gy))
        .map_err(reference_error)?;
    let mut dev = Device::new();
    let x = dev.upload(&narrow(&d.x));
    let gy = dev.upload(&narrow(&d.gy));
    let dw = dev.alloc(want.len() * 4);
    let mut args = vec![Arg::Buffer(x), Arg::Buffer(gy), Arg::Buffer(dw)];
    args.extend(sizes());
    let launch = Launch {
        entry,
        grid: [1, CONV_CHANNELS * CONV_CHANNELS, 1],
        block: [32, 1, 1],
        args,
    };
    let report = launch.run(&mut dev, module)?;
    let got: Vec<f32> = dev.download(dw)?;
    Ok(Outcome {
        verdict: Tolerance::F32_SUM.verdict("dw", &got, &want, &scale),
        report,
        outputs: want.len() as u64,
        observations: Vec::new(),
        launch: launch.describe(),
    })
}
