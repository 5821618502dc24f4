//! Launches whose `gridDim.y` is clamped to 65535, with the kernel walking the rest in steps of
//! `gridDim.y`, on shapes that cross the clamp (so the second trip runs) with tiny per-block work:
//! im2col over `C_in·KH·KW` rows; and the tiled `conv2d_direct` / NCHW `conv2d_bwd_data`,
//! whose tiles (`N · ⌈OH / 32⌉ · groups · ⌈Og / 16⌉`, backward-data's times its `SH·SW`
//! stride phases, along y) are clamped the same way, launched
//! raw on a grid smaller than that so each block walks several tiles (the host clamp itself is
//! `geometry`'s unit test). f32 in the interpreter with every sanitizer check on,
//! against the f64 host reference.

#![cfg(feature = "sim")]

use ptxforge_runtime::launch::{Backend, DeviceBuffer, KernelArg, SimBackend};
use ptxforge_runtime::templates::conv::kernels::{
    fast_div_constants, ENTRY_BWD_DATA, ENTRY_DIRECT,
};
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

/// The raw `conv2d_direct` / `conv2d_bwd_data` entry of `cfg` launched on `shape` with
/// `buffers`, on the host's grid shrunk to `(·, y, 1)`: each block walks several tiles
/// (`batch · tiles_h · channel_blocks` past `y`), as it does past the 65535 clamp, without a
/// 65536-block interpreter run.
fn launch_walking(
    cfg: &Conv2dConfig,
    dev: &SimBackend,
    entry: &str,
    shape: &ConvShape,
    buffers: Vec<KernelArg<'_, SimBackend>>,
    y: u32,
) {
    let ptx = cfg.compile().expect("compiles").ptx;
    let dims = cfg.check_shape(shape, false).expect("valid shape");
    let mut launch = if entry == ENTRY_DIRECT {
        cfg.direct_launch_config(&dims)
    } else {
        cfg.backward_data_launch_config(&dims)
    }
    .expect("grid");
    assert!(
        y < launch.grid.y,
        "{entry}: grid y {y} must be below the tiles walked, {}",
        launch.grid.y
    );
    launch.grid.y = y;
    let (ow_magic, ow_shift) = fast_div_constants(dims.out_w);
    let (ohw_magic, ohw_shift) = fast_div_constants(dims.out_h * dims.out_w);
    let (w_magic, w_shift) = fast_div_constants(dims.in_w);
    let scalars = [
        dims.batch, dims.in_h, dims.in_w, dims.out_h, dims.out_w, ow_magic, ow_shift, ohw_magic,
        ohw_shift, w_magic, w_shift,
    ];
    let mut args = buffers;
    args.extend(scalars.map(KernelArg::U32));
    dev.launch(&ptx, entry, launch, &args)
        .unwrap_or_else(|e| panic!("{entry}: {e}"));
}

/// `cfg`'s raw `entry` (`conv2d_direct`, or NCHW `conv2d_bwd_data` with `dx` of `shape`) on
/// the grid shrunk to `(·, 7, 1)` ([`launch_walking`]) against the host reference.
fn check_walk(cfg: &Conv2dConfig, entry: &str, seed: u64) {
    let shape = ConvShape {
        batch: 3,
        height: 70,
        width: 20,
    };
    let dims = cfg.check_shape(&shape, false).expect("valid shape");
    let backward = entry == ENTRY_BWD_DATA;
    let (source_len, result_len) = if backward {
        (dims.output_len(cfg), dims.input_len(cfg))
    } else {
        (dims.input_len(cfg), dims.output_len(cfg))
    };
    let dev = SimBackend::new();
    let mut rng = SplitMix64::new(seed);
    let (source, source_dev) = random(&dev, &mut rng, source_len);
    let (w, w_dev) = random(&dev, &mut rng, ConvDims::weight_len(cfg));
    let bias = cfg
        .bias
        .then(|| random(&dev, &mut rng, cfg.out_channels as usize));
    let result = dev.alloc::<f32>(result_len).expect("alloc");
    let mut buffers = vec![KernelArg::buffer(&source_dev), KernelArg::buffer(&w_dev)];
    buffers.extend(bias.as_ref().map(|(_, b)| KernelArg::buffer(b)));
    buffers.push(KernelArg::buffer(&result));
    launch_walking(cfg, &dev, entry, &shape, buffers, 7);
    let (source, w) = (widen(&source), widen(&w));
    let want = if backward {
        reference::backward_data(cfg, &shape, &source, &w)
    } else {
        let bias = bias.map(|(b, _)| widen(&b));
        reference::forward(cfg, &shape, &source, &w, bias.as_deref())
    }
    .expect("reference");
    assert_close(entry, &dev.download(&result).unwrap(), &want);
}

/// 3 images of 70 × 20 and 2 groups of 20 output channels (2 channel blocks of 16 + 4 each):
/// 3 images × 3 row tiles × 4 channel blocks = 36 tiles, walked by 7 block rows (6, 5, 5, 5,
/// 5, 5, 5 trips, crossing images and row tiles); with bias, whose stage the next tile of a
/// block overwrites (racecheck on).
#[test]
fn direct_walks_the_y_indices_and_images() {
    let cfg = Conv2dConfig::new(4, 40, 3)
        .with_groups(2)
        .with_padding(1, 1)
        .with_bias(true);
    check_walk(&cfg, ENTRY_DIRECT, 17);
}

/// NCHW backward-data at stride 2 on the same walk: `dx` 3 × 40 × 70 × 20, 2 groups of 20
/// input channels: 3 images × 2 row tiles of the 35 × 10 phase grids × 4 channel blocks × 4
/// phases = 96 tiles over 7 block rows.
#[test]
fn backward_data_walks_the_y_indices_and_images() {
    let cfg = Conv2dConfig::new(40, 4, 3)
        .with_groups(2)
        .with_stride(2, 2)
        .with_padding(1, 1);
    check_walk(&cfg, ENTRY_BWD_DATA, 18);
}
