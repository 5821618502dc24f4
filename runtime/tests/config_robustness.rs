//! `validate()` never panics: every configuration field takes edge values (0, 1, 2, 3, 7, 64,
//! 1000, u32::MAX − 1, u32::MAX) in seeded random combinations, on every arch and dtype. The
//! macros call `validate()` at compile time, so a panic here is a bad error message there.

use ptxforge_runtime::templates::attention::AttentionConfig;
use ptxforge_runtime::templates::conv::Conv2dConfig;
use ptxforge_runtime::templates::moe::{Ffn, MoeConfig};
use ptxforge_runtime::templates::nf4::Nf4Config;
use ptxforge_runtime::templates::testing::SplitMix64;
use ptxforge_runtime::{Arch, DType};

const EDGES: [u32; 9] = [0, 1, 2, 3, 7, 64, 1000, u32::MAX - 1, u32::MAX];
const CASES: usize = 3000;

fn pick(rng: &mut SplitMix64) -> u32 {
    EDGES[rng.below(EDGES.len() as u64) as usize]
}

fn arch(rng: &mut SplitMix64) -> Arch {
    Arch::ALL[rng.below(Arch::ALL.len() as u64) as usize]
}

fn dtype(rng: &mut SplitMix64) -> DType {
    DType::ALL[rng.below(4) as usize]
}

#[test]
fn validate_never_panics() {
    let mut rng = SplitMix64::new(0x5eed);
    let factors = [
        0.0f32,
        -1.0,
        1e-30,
        0.5,
        1.25,
        1e30,
        f32::NAN,
        f32::INFINITY,
    ];
    for _ in 0..CASES {
        let mut moe = MoeConfig::new(
            pick(&mut rng),
            pick(&mut rng),
            pick(&mut rng),
            pick(&mut rng),
        );
        moe.capacity_factor = match rng.below(4) {
            0 => None,
            _ => Some(factors[rng.below(factors.len() as u64) as usize]),
        };
        moe.ffn = if rng.below(2) == 0 {
            Ffn::Linear
        } else {
            Ffn::Swiglu
        };
        moe.dtype = dtype(&mut rng);
        moe.arch = arch(&mut rng);
        let _ = moe.validate();

        let mut nf4 = Nf4Config::new(pick(&mut rng), pick(&mut rng));
        nf4.block = pick(&mut rng);
        nf4.double_quant = rng.below(2) == 0;
        nf4.dtype = dtype(&mut rng);
        nf4.arch = arch(&mut rng);
        let _ = nf4.validate();

        let mut att = AttentionConfig::new(pick(&mut rng));
        att.block_m = pick(&mut rng);
        att.block_n = pick(&mut rng);
        att.causal = rng.below(2) == 0;
        att.dtype = dtype(&mut rng);
        att.arch = arch(&mut rng);
        let _ = att.validate();

        let mut conv = Conv2dConfig::new(pick(&mut rng), pick(&mut rng), pick(&mut rng));
        conv.kernel_w = pick(&mut rng);
        conv.stride_h = pick(&mut rng);
        conv.stride_w = pick(&mut rng);
        conv.padding_h = pick(&mut rng);
        conv.padding_w = pick(&mut rng);
        conv.dilation_h = pick(&mut rng);
        conv.dilation_w = pick(&mut rng);
        conv.groups = pick(&mut rng);
        conv.bias = rng.below(2) == 0;
        conv.dtype = dtype(&mut rng);
        conv.arch = arch(&mut rng);
        let _ = conv.validate();
    }
}
