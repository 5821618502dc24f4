//! Values with a published definition, checked against numbers written out by hand here rather
//! than by calling the function the launch and the host reference share (a wrong formula there
//! would pass every numerics test, since both sides would use it).

use ptxforge_runtime::templates::attention::AttentionConfig;
use ptxforge_runtime::templates::conv::{Conv2dConfig, ConvShape};
use ptxforge_runtime::templates::moe::MoeConfig;
use ptxforge_runtime::templates::nf4::format::NF4_CODE;

/// bitsandbytes' NF4 map as its CUDA dequantisation (`dDequantizeNF4`) spells the constants.
#[test]
fn nf4_code_table_is_bitsandbytes() {
    let published: [f32; 16] = [
        -1.0,
        -0.696_192_8,
        -0.525_073_05,
        -0.394_917_5,
        -0.284_441_38,
        -0.184_773_43,
        -0.091_050_036,
        0.0,
        0.079_580_3,
        0.160_930_2,
        0.246_112_3,
        0.337_915_24,
        0.440_709_83,
        0.562_617,
        0.722_956_84,
        1.0,
    ];
    assert_eq!(NF4_CODE, published);
}

/// `1/√D`, worked out by hand for every supported head size.
pub const ATTENTION_SCALES: [(u32, f64); 5] = [
    (32, 0.176_776_695_296_636_87),
    (64, 0.125),
    (96, 0.102_062_072_615_965_77),
    (128, 0.088_388_347_648_318_43),
    (256, 0.0625),
];

#[test]
fn attention_default_scale_is_one_over_root_head_dim() {
    assert_eq!(AttentionConfig::HEAD_DIMS.len(), ATTENTION_SCALES.len());
    for (d, want) in ATTENTION_SCALES {
        let got = AttentionConfig::new(d).default_scale();
        assert!((got - want).abs() <= 1e-16, "D = {d}: {got} vs {want}");
    }
}

/// `C = ceil(cf · T · K / E)` (at least 1 for T ≥ 1), worked out by hand.
#[test]
fn moe_capacity_is_ceil_of_factor_tokens_topk_over_experts() {
    // (experts, top_k, capacity_factor, tokens, capacity)
    let cases = [
        (8, 2, 1.0, 64, 16),   // 128 / 8
        (8, 2, 1.0, 65, 17),   // 16.25 → 17
        (8, 2, 1.25, 100, 32), // 31.25 → 32
        (4, 1, 2.0, 6, 3),     // 12 / 4
        (64, 8, 1.5, 3, 1),    // 0.5625 → 1
        (16, 4, 0.5, 1000, 125),
        (1, 1, 1.1, 10, 11), // 11 exactly, not 12
        (8, 2, 1.0, 0, 0),
    ];
    for (experts, top_k, cf, tokens, want) in cases {
        let cfg = MoeConfig {
            capacity_factor: Some(cf),
            ..MoeConfig::new(experts, top_k, 1, 1)
        };
        assert_eq!(
            cfg.capacity(tokens),
            want,
            "E={experts} K={top_k} cf={cf} T={tokens}"
        );
    }
}

/// `out = floor((in + 2p − d·(k − 1) − 1) / s) + 1`, worked out by hand per axis.
#[test]
fn conv_output_size_matches_the_published_formula() {
    // (in_h, in_w, kernel (h, w), stride, padding, dilation, (out_h, out_w))
    let cases = [
        (7, 7, (3, 3), (2, 2), (1, 1), (1, 1), (4, 4)),
        (224, 224, (7, 7), (2, 2), (3, 3), (1, 1), (112, 112)),
        (10, 9, (3, 1), (1, 3), (0, 0), (2, 1), (6, 3)),
        (5, 6, (1, 3), (1, 1), (0, 2), (1, 2), (5, 6)),
    ];
    for (h, w, (kh, kw), (sh, sw), (ph, pw), (dh, dw), want) in cases {
        let cfg = Conv2dConfig::new(1, 1, 1)
            .with_kernel(kh, kw)
            .with_stride(sh, sw)
            .with_padding(ph, pw)
            .with_dilation(dh, dw);
        let shape = ConvShape {
            batch: 1,
            height: h,
            width: w,
        };
        assert_eq!(cfg.output_size(&shape).unwrap(), want, "{h}x{w} {cfg:?}");
    }
}
