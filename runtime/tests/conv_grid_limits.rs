//! Launches whose `gridDim.y` is clamped to 65535, with the kernel walking the rest in steps of
//! `gridDim.y`, on shapes that cross the clamp (so the second trip runs) with tiny per-block work:
//! im2col over `C_in·KH·KW` rows; and NCHW backward-data's grid at the limit (its tiled grid
//! does not walk). f32 in the interpreter with every sanitizer check on, against the
//! f64 host reference.

#![cfg(feature = "sim")]

use ptxforge_runtime::launch::{Backend, DeviceBuffer, LaunchError, SimBackend};
use ptxforge_runtime::templates::conv::launch::forward_im2col;
use ptxforge_runtime::templates::conv::{
    reference, Conv2dConfig, ConvDims, ConvShape, MAX_GRID_YZ,
};
use ptxforge_runtime::templates::testing::SplitMix64;
use ptxforge_runtime::templates::KernelFamily;

fn random(
    dev: &SimBackend,
    rng: &mut SplitMix64,
    len: usize,
) -> (Vec<f32>, DeviceBuffer<SimBackend, f32>) {
    let host: Vec<f32> = rng
        .vec_f64(len, -1.0, 1.0)
        .iter()
        .map(|&v| v as f32)
        .collect();
    let buf = dev.upload(&host).expect("upload");
    (host, buf)
}

fn widen(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| f64::from(x)).collect()
}

fn assert_close(what: &str, got: &[f32], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let scale = want.iter().fold(1e-30f64, |m, v| m.max(v.abs()));
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let err = (f64::from(*g) - w).abs() / scale;
        assert!(err <= 1e-5, "{what}: element {i}: got {g}, want {w}");
    }
}

/// `C_in·KH·KW = 7282·9 = 65538` im2col rows: grid.y is clamped to 65535 and the last three rows
/// are the second trip of the row loop (a 1×1 output keeps each block's work to one column).
#[test]
fn im2col_rows_past_the_grid_limit() {
    let cfg = Conv2dConfig::new(7282, 2, 3);
    let shape = ConvShape {
        batch: 1,
        height: 3,
        width: 3,
    };
    let ptx = cfg.compile().expect("compiles").ptx;
    let dims = cfg.check_shape(&shape, true).expect("valid shape");
    let rows = u64::from(cfg.in_channels) * 9;
    assert!(rows > u64::from(MAX_GRID_YZ));
    assert_eq!(cfg.im2col_launch_config(&dims).unwrap().grid.y, MAX_GRID_YZ);
    let dev = SimBackend::new();
    let mut rng = SplitMix64::new(15);
    let (x, x_dev) = random(&dev, &mut rng, dims.input_len(&cfg));
    let (w, w_dev) = random(&dev, &mut rng, ConvDims::weight_len(&cfg));
    let mut cols = dev.alloc::<f32>(dims.im2col_len(&cfg)).expect("alloc");
    let mut y = dev.alloc::<f32>(dims.output_len(&cfg)).expect("alloc");
    forward_im2col(
        &cfg, &dev, &ptx, &shape, &x_dev, &w_dev, None, &mut cols, &mut y,
    )
    .expect("launch");
    let want_cols = reference::im2col(&cfg, &shape, &widen(&x)).expect("reference");
    assert_eq!(
        widen(&dev.download(&cols).unwrap()),
        want_cols,
        "im2col is an exact copy"
    );
    let want_y = reference::forward(&cfg, &shape, &widen(&x), &widen(&w), None).expect("reference");
    assert_close("im2col + gemm", &dev.download(&y).unwrap(), &want_y);
}

/// The NCHW CUDA-core backward-data is the direct kernel's tiling (grid `(⌈W / 32⌉, ⌈H / 32⌉ ·
/// groups · ⌈Cg / 16⌉, N)`), with no walk past the grid: a depthwise config with 65536
/// channel blocks is refused with the axis named, one fewer takes the whole grid axis (the
/// kernel's numerics are `conv_bwd_data_cc`'s).
#[test]
fn backward_data_channel_blocks_past_the_grid_limit() {
    let shape = ConvShape {
        batch: 1,
        height: 1,
        width: 1,
    };
    let refused = Conv2dConfig::new(65536, 65536, 1).with_groups(65536);
    let dims = refused.check_shape(&shape, false).expect("valid shape");
    match refused.backward_data_launch_config(&dims) {
        Err(LaunchError::InvalidDim { name, value, .. }) => {
            assert_eq!((name, value), ("output row tiles × channel blocks", 65536));
        }
        other => panic!("expected the grid-limit error, got {other:?}"),
    }
    let fits = Conv2dConfig::new(MAX_GRID_YZ, MAX_GRID_YZ, 1).with_groups(MAX_GRID_YZ);
    let dims = fits.check_shape(&shape, false).expect("valid shape");
    assert_eq!(
        fits.backward_data_launch_config(&dims).unwrap().grid.y,
        MAX_GRID_YZ
    );
}
