//! Builds the sample kernels with the typed builder, validates and emits them for every target,
//! and prints one module plus a summary of the emit matrix.

use ptxforge::prelude::*;
use ptxforge::runtime::matrix::matrix;
use ptxforge::runtime::samples::{all_samples_module, SAMPLES};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let ptx = ptxforge::runtime::samples::sample_module(&SAMPLES[4], Arch::Sm80)?;
    println!("{ptx}");
    for arch in Arch::ALL {
        let module = all_samples_module(arch)?;
        println!(
            "{arch}: {} sample kernels, {} bytes of PTX",
            SAMPLES.len(),
            module.len()
        );
    }
    let entries = matrix()?;
    println!(
        "emit matrix: {} modules (run `cargo xtask emit --out DIR` to write them)",
        entries.len()
    );
    Ok(())
}
