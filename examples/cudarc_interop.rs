//! A cudarc program that owns its context, stream and buffers, and calls a generated wrapper on
//! them without copies: the backend is built on the program's stream
//! (`CudaBackend::from_stream`), an input slice is taken over (`DeviceBuffer::from_cuda_slice`)
//! and given back (`into_cuda_slice`), and the output is written into the second half of a
//! larger slice the program keeps (`DeviceBuffer::view_mut`). The wrapper only queues the
//! launch on the program's stream; the program synchronises when it reads. The same inputs run
//! on the CPU interpreter and the two results are compared.
//!
//! Run on a machine with a GPU: `cargo run --example cudarc_interop --features cuda`. Without a
//! CUDA driver it says so and exits non-zero.

use std::process::ExitCode;

use ptxforge::cudarc::driver::{CudaContext, CudaSlice};
use ptxforge::prelude::*;

/// A 512 → 256 projection with NF4 weights, shipped for Ampere and Hopper: the wrapper launches
/// the sm_90 module on an H100 and the sm_80 one on an A100 or an Ada card.
#[nf4_gemm(n = 256, k = 512, dtype = f32, arch = [sm_80, sm_90])]
#[derive(Debug)]
pub struct Proj;

/// Both backends accumulate in f32 in the same order per output; allow for the GPU's fused
/// multiply-adds.
const TOLERANCE: f32 = 1e-4;

fn main() -> Result<ExitCode, Box<dyn std::error::Error>> {
    // Ask the backend first: it reports a missing driver as an error instead of a panic.
    if let Err(e) = CudaBackend::new(0) {
        eprintln!("no GPU to run on: {e}");
        return Ok(ExitCode::FAILURE);
    }
    let (n, k) = (Proj::CONFIG.n as usize, Proj::CONFIG.k as usize);
    let weight: Vec<f32> = (0..n * k)
        .map(|i| ((i * 37 % 29) as f32 - 14.0) / 16.0)
        .collect();
    let x: Vec<f32> = (0..k).map(|i| ((i * 11 % 7) as f32 - 3.0) / 4.0).collect();

    // The program's own context, stream and buffers.
    let ctx = CudaContext::new(0)?;
    let stream = ctx.new_stream()?;
    let x_slice: CudaSlice<f32> = stream.clone_htod(&x)?;
    let mut outputs: CudaSlice<f32> = stream.alloc_zeros(2 * n)?;

    let dev = CudaBackend::from_stream(stream.clone())?;
    println!("device architecture: {:?}", dev.arch());
    let weights = Proj.upload_weights(&dev, &weight)?;
    let x_buf = DeviceBuffer::from_cuda_slice(x_slice);
    {
        // Write `c` into outputs[n..2n]; the view cannot outlive the borrow of `outputs`.
        let mut c = DeviceBuffer::view_mut(&mut outputs, n, n)?;
        Proj.forward(&dev, 1, &x_buf, &weights, &mut c)?;
    }
    // Queued on the program's stream: wait before reading on the host.
    stream.synchronize()?;
    let on_gpu = stream.clone_dtoh(&outputs)?;
    let x_slice: CudaSlice<f32> = x_buf.into_cuda_slice()?;
    assert_eq!(x_slice.len(), k);

    // The same wrapper on the interpreter, from the same inputs.
    let sim = SimBackend::new();
    let sim_weights = Proj.upload_weights(&sim, &weight)?;
    let sim_x = sim.upload(&x)?;
    let mut sim_c = sim.alloc::<f32>(n)?;
    Proj.forward(&sim, 1, &sim_x, &sim_weights, &mut sim_c)?;
    let on_cpu = sim.download(&sim_c)?;

    let untouched = on_gpu[..n].iter().all(|&v| v == 0.0);
    let worst = on_gpu[n..]
        .iter()
        .zip(&on_cpu)
        .map(|(g, c)| (g - c).abs() / c.abs().max(1.0))
        .fold(0.0f32, f32::max);
    println!("GPU vs interpreter: worst relative difference {worst:.2e}; first half untouched: {untouched}");
    Ok(if worst <= TOLERANCE && untouched {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
