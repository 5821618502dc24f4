// The MoE wrappers on the CPU backend: the whole layer, the same layer phase by phase through a
// workspace, and the host reference agree.
use ptxforge::moe::reference::{self, ExpertWeights};
use ptxforge::prelude::*;

#[moe_kernel(experts = 4, top_k = 2, hidden = 32, expert_dim = 16, ffn = linear, dtype = f32)]
struct Router;

fn data(len: usize, seed: u32) -> Vec<f32> {
    (0..len as u32)
        .map(|i| ((i.wrapping_mul(2654435761).wrapping_add(seed) >> 8) % 1000) as f32 / 500.0 - 1.0)
        .collect()
}

fn main() -> Result<(), LaunchError> {
    let c = Router::CONFIG;
    let tokens = 8u32;
    let (t, e, h, f) = (tokens as usize, c.experts as usize, c.hidden as usize, c.expert_dim as usize);
    assert_eq!(Router::GATING.name, "moe_gating");
    assert_eq!(Router::EXPERT_LINEAR.name, "moe_expert_linear");
    assert!(Router::PTX.contains(".entry moe_unpermute"));

    let (x, logits, w) = (data(t * h, 1), data(t * e, 2), data(e * f * h, 3));
    let dev = SimBackend::new();
    let (xb, lb, wb) = (dev.upload(&x)?, dev.upload(&logits)?, dev.upload(&w)?);
    let mut out = dev.alloc::<f32>(t * f)?;
    let stats = Router.forward(&dev, tokens, &xb, &lb, &wb, &mut out)?;
    let whole = dev.download(&out)?;

    let mut ws = Router.workspace::<SimBackend>(&dev, tokens)?;
    let mut out2 = dev.alloc::<f32>(t * f)?;
    Router.gating(&dev, tokens, &lb, &mut ws)?;
    Router.permute(&dev, tokens, &mut ws)?;
    Router.experts(&dev, tokens, &xb, &wb, &mut ws)?;
    Router.unpermute(&dev, tokens, &ws, &mut out2)?;
    assert_eq!(dev.download(&out2)?, whole);

    let widen = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<_>>();
    let want = reference::forward(&c, &widen(&x), &widen(&logits), ExpertWeights::Linear { w: &widen(&w) }, t)
        .expect("reference");
    assert_eq!(stats.counts, want.counts());
    let scale = want.out.iter().fold(1e-30f64, |m, v| m.max(v.abs()));
    for (got, want) in whole.iter().zip(&want.out) {
        assert!((f64::from(*got) - want).abs() <= 1e-5 * scale, "{got} vs {want}");
    }
    Ok(())
}
