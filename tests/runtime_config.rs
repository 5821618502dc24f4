//! Configurations read at run time (`config.compile_cached()`) against the attribute for the
//! same configuration: the same module text, and the same results from the same inputs on the
//! interpreter, through the same wrapper surface.

use ptxforge::conv::{ConvDims, Layout};
use ptxforge::moe::{ExpertWeights, MoeConfig};
use ptxforge::nf4::Nf4Config;
use ptxforge::prelude::*;

#[nf4_gemm(n = 64, k = 128, dtype = f32)]
#[derive(Debug)]
pub struct Proj;

#[moe_kernel(experts = 4, top_k = 2, hidden = 32, expert_dim = 64, dtype = f32, ffn = linear)]
#[derive(Debug)]
pub struct Moe;

#[conv2d_kernel(in_channels = 16, out_channels = 32, kernel = 1, dtype = f16, arch = sm_80)]
#[derive(Debug)]
pub struct Pointwise;

#[conv2d_kernel(in_channels = 16, out_channels = 32, kernel = 3, padding = 1, dtype = f16,
                arch = sm_80, layout = nhwc)]
#[derive(Debug)]
pub struct ChannelsLast;

fn values(n: usize, seed: usize) -> Vec<f32> {
    (0..n)
        .map(|i| (((i * 37 + seed * 11) % 23) as f32 - 11.0) / 16.0)
        .collect()
}

#[test]
fn nf4_handle_matches_the_attribute() {
    // As if read from a config file: the same numbers the attribute was given.
    let handle = Nf4Config::new(64, 128).compile_cached().expect("compiles");
    assert_eq!(handle.ptx(), Proj::PTX);
    assert_eq!(*handle.config(), Proj::CONFIG);
    let dev = SimBackend::new();
    let w = values(64 * 128, 1);
    let a = dev.upload(&values(3 * 128, 2)).unwrap();
    let (macro_w, handle_w) = (
        Proj.upload_weights(&dev, &w).unwrap(),
        handle.upload_weights(&dev, &w).unwrap(),
    );
    let mut by_macro = dev.alloc::<f32>(3 * 64).unwrap();
    let mut by_handle = dev.alloc::<f32>(3 * 64).unwrap();
    Proj.forward(&dev, 3, &a, &macro_w, &mut by_macro).unwrap();
    handle
        .forward(&dev, 3, &a, &handle_w, &mut by_handle)
        .unwrap();
    let (want, got) = (
        dev.download(&by_macro).unwrap(),
        dev.download(&by_handle).unwrap(),
    );
    assert_eq!(want, got);
    assert!(want.iter().any(|&x| x != 0.0));
    // The same length checks as the attribute's wrappers.
    let short = dev.alloc::<f32>(10).unwrap();
    assert!(matches!(
        handle.forward(&dev, 3, &short, &handle_w, &mut by_handle),
        Err(LaunchError::BufferLength { .. })
    ));
}

#[test]
fn moe_handle_matches_the_attribute() {
    let mut config = MoeConfig::new(4, 2, 32, 64);
    config.dtype = DType::F32;
    config.ffn = ptxforge::moe::Ffn::Linear;
    let handle = config.compile_cached().expect("compiles");
    assert_eq!(handle.ptx(), Moe::PTX);
    let dev = SimBackend::new();
    let tokens = 5u32;
    let x = dev.upload(&values(5 * 32, 3)).unwrap();
    let logits = dev.upload(&values(5 * 4, 4)).unwrap();
    let w = dev.upload(&values(4 * 64 * 32, 5)).unwrap();
    let mut by_macro = dev.alloc::<f32>(5 * 64).unwrap();
    let mut by_handle = dev.alloc::<f32>(5 * 64).unwrap();
    let want_stats = Moe
        .forward(&dev, tokens, &x, &logits, &w, &mut by_macro)
        .unwrap();
    let mut ws = handle.workspace::<_, f32>(&dev, tokens).unwrap();
    handle
        .forward_with(
            &dev,
            tokens,
            &mut ws,
            &x,
            &logits,
            ExpertWeights::Linear { w: &w },
            &mut by_handle,
        )
        .unwrap();
    assert_eq!(ws.stats(&dev).unwrap(), want_stats);
    assert_eq!(
        dev.download(&by_macro).unwrap(),
        dev.download(&by_handle).unwrap()
    );
}

/// A conv handle's `forward` launches what the attribute's does (the NCHW 1 × 1 on the
/// pointwise tensor-core GEMM, the NHWC 3 × 3 on the NHWC one) with the same results.
#[test]
fn conv_handle_forward_takes_the_attributes_entries() {
    let shape = ConvShape {
        batch: 2,
        height: 4,
        width: 6,
    };
    let cases = [
        (
            Pointwise::CONFIG,
            Pointwise::PTX,
            "conv2d_implicit_gemm_pointwise",
        ),
        (
            ChannelsLast::CONFIG,
            ChannelsLast::PTX,
            "conv2d_implicit_gemm",
        ),
    ];
    for (config, ptx, entry) in cases {
        let handle = config.compile_cached().expect("compiles");
        assert_eq!(handle.ptx(), ptx);
        let dev = SimBackend::new();
        let dims = config.check_shape(&shape, false).expect("valid shape");
        let upload = |n: usize, seed: usize| {
            let v: Vec<f16> = values(n, seed).into_iter().map(f16::from_f32).collect();
            dev.upload(&v).unwrap()
        };
        let x = upload(dims.input_len(&config), 3);
        let w = upload(ConvDims::weight_len(&config), 4);
        let mut by_macro = dev.alloc::<f16>(dims.output_len(&config)).unwrap();
        let mut by_handle = dev.alloc::<f16>(dims.output_len(&config)).unwrap();
        match config.layout {
            Layout::Nchw => Pointwise.forward(&dev, &shape, &x, &w, &mut by_macro),
            Layout::Nhwc => ChannelsLast.forward(&dev, &shape, &x, &w, &mut by_macro),
        }
        .unwrap();
        handle
            .forward(&dev, &shape, &x, &w, None, &mut by_handle)
            .unwrap();
        let entries: Vec<String> = dev.take_launch_log().into_iter().map(|r| r.entry).collect();
        assert_eq!(entries, [entry, entry]);
        let (want, got) = (
            dev.download(&by_macro).unwrap(),
            dev.download(&by_handle).unwrap(),
        );
        assert_eq!(want, got);
        assert!(want.iter().any(|&y| y != f16::ZERO));
    }
}
