// The attention wrapper on the CPU backend, GQA with a causal mask, against the host reference.
use ptxforge::attention::reference;
use ptxforge::prelude::*;

#[attention_kernel(head_dim = 32, causal = true, dtype = f32)]
pub struct Attn;

fn main() -> Result<(), LaunchError> {
    let shape = AttentionShape { batch: 1, heads_q: 4, heads_kv: 2, seq_q: 10, seq_kv: 12 };
    let d = 32;
    let gen = |len: usize, s: usize| -> Vec<f32> {
        (0..len).map(|i| (((i * 31 + s) % 97) as f32 - 48.0) / 48.0).collect()
    };
    let (q, k, v) = (gen(shape.q_len(d), 1), gen(shape.kv_len(d), 2), gen(shape.kv_len(d), 3));
    let dev = SimBackend::new();
    let (qb, kb, vb) = (dev.upload(&q)?, dev.upload(&k)?, dev.upload(&v)?);
    let mut o = dev.alloc::<f32>(shape.q_len(d))?;
    let mut lse = dev.alloc::<f32>(shape.lse_len())?;
    Attn.forward(&dev, &shape, &qb, &kb, &vb, &mut o, &mut lse, None)?;

    let widen = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<_>>();
    let scale = 1.0 / f64::from(d).sqrt();
    let want = reference::forward(&shape, d, &widen(&q), &widen(&k), &widen(&v), true, scale)
        .expect("reference");
    for (got, want) in dev.download(&o)?.iter().zip(&want.o) {
        assert!((f64::from(*got) - want).abs() <= 1e-5, "{got} vs {want}");
    }
    for (got, want) in dev.download(&lse)?.iter().zip(&want.lse) {
        assert!((got - want).abs() <= 1e-5 * want.abs().max(1.0), "{got} vs {want}");
    }
    assert_eq!(Attn::FORWARD.name, "attention_forward");
    Ok(())
}
