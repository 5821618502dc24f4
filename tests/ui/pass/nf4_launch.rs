// The NF4 wrappers on the CPU backend: upload_weights quantises as the kernel reads, both
// forward entries and backward_input match the host reference.
use ptxforge::nf4::{quantize, reference};
use ptxforge::prelude::*;

#[nf4_gemm(n = 32, k = 64, block = 32)]
pub struct Proj;

fn main() -> Result<(), LaunchError> {
    let (n, k, m) = (32usize, 64usize, 3usize);
    let w: Vec<f32> = (0..n * k).map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0).collect();
    let a: Vec<f32> = (0..m * k).map(|i| ((i * 13 % 29) as f32 - 14.0) / 14.0).collect();
    let g_c: Vec<f32> = (0..m * n).map(|i| ((i * 7 % 17) as f32 - 8.0) / 8.0).collect();
    let host = quantize(&w, 32).expect("quantize");

    let dev = SimBackend::new();
    let weights = Proj.upload_weights(&dev, &w)?;
    let (ab, gb) = (dev.upload(&a)?, dev.upload(&g_c)?);
    let close = |got: &[f32], want: &[f32]| {
        assert_eq!(got.len(), want.len());
        for (g, r) in got.iter().zip(want) {
            assert!((g - r).abs() <= 1e-4 * (1.0 + r.abs()), "{g} vs {r}");
        }
    };

    let want = reference::forward(&a, m, &host, n, k).expect("reference");
    let mut c = dev.alloc::<f32>(m * n)?;
    Proj.forward(&dev, m as u32, &ab, &weights, &mut c)?;
    close(&dev.download(&c)?, &want);
    Proj.forward_gemv(&dev, m as u32, &ab, &weights, &mut c)?;
    close(&dev.download(&c)?, &want);
    Proj.forward_tiled(&dev, m as u32, &ab, &weights, &mut c)?;
    close(&dev.download(&c)?, &want);

    let want = reference::backward_input(&g_c, m, &host, n, k).expect("reference");
    let mut g_a = dev.alloc::<f32>(m * k)?;
    Proj.backward_input(&dev, m as u32, &gb, &weights, &mut g_a)?;
    close(&dev.download(&g_a)?, &want);

    // A wrong length is a typed error, before anything launches.
    let short = dev.alloc::<f32>(1)?;
    assert!(matches!(
        Proj.forward(&dev, m as u32, &short, &weights, &mut c),
        Err(LaunchError::BufferLength { name: "a", .. })
    ));
    Ok(())
}
