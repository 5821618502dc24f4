// The conv2d wrappers on the CPU backend: a strided 1×1 convolution with bias (so `forward`
// takes the 1×1 entry and `forward_1x1` exists), every forward path and both backward passes
// against the host reference.
use ptxforge::conv::reference;
use ptxforge::prelude::*;

#[conv2d_kernel(in_channels = 4, out_channels = 6, kernel = 1, stride = 2, bias = true, groups = 2)]
pub struct Pointwise;

fn main() -> Result<(), LaunchError> {
    let c = Pointwise::CONFIG;
    let shape = ConvShape { batch: 2, height: 5, width: 7 };
    let dims = c.check_shape(&shape, true).expect("shape");
    let gen = |len: usize, s: usize| -> Vec<f32> {
        (0..len).map(|i| (((i * 17 + s) % 23) as f32 - 11.0) / 11.0).collect()
    };
    let (x, w, b) = (gen(dims.input_len(&c), 1), gen(c.weight_elements() as usize, 2), gen(6, 3));
    let gy = gen(dims.output_len(&c), 4);
    let widen = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<_>>();
    let close = |got: Vec<f32>, want: &[f64]| {
        assert_eq!(got.len(), want.len());
        for (g, r) in got.iter().zip(want) {
            assert!((f64::from(*g) - r).abs() <= 1e-5 * (1.0 + r.abs()), "{g} vs {r}");
        }
    };

    let dev = SimBackend::new();
    let (xb, wb, bb, gyb) = (dev.upload(&x)?, dev.upload(&w)?, dev.upload(&b)?, dev.upload(&gy)?);
    let want = reference::forward(&c, &shape, &widen(&x), &widen(&w), Some(&widen(&b))).expect("reference");
    let mut y = dev.alloc::<f32>(dims.output_len(&c))?;
    for path in 0..3 {
        match path {
            0 => Pointwise.forward(&dev, &shape, &xb, &wb, &bb, &mut y)?,
            1 => Pointwise.forward_1x1(&dev, &shape, &xb, &wb, &bb, &mut y)?,
            _ => Pointwise.forward_direct(&dev, &shape, &xb, &wb, &bb, &mut y)?,
        };
        close(dev.download(&y)?, &want);
    }
    let mut cols = dev.alloc::<f32>(dims.im2col_len(&c))?;
    Pointwise.forward_im2col(&dev, &shape, &xb, &wb, &bb, &mut cols, &mut y)?;
    close(dev.download(&y)?, &want);

    let mut dx = dev.alloc::<f32>(dims.input_len(&c))?;
    Pointwise.backward_data(&dev, &shape, &gyb, &wb, &mut dx)?;
    close(dev.download(&dx)?, &reference::backward_data(&c, &shape, &widen(&gy), &widen(&w)).expect("reference"));

    let (want_dw, want_db) = reference::backward_filter(&c, &shape, &widen(&x), &widen(&gy)).expect("reference");
    let mut dw = dev.alloc::<f32>(c.weight_elements() as usize)?;
    let mut db = dev.alloc::<f32>(6)?;
    Pointwise.backward_filter(&dev, &shape, &xb, &gyb, &mut dw, &mut db)?;
    close(dev.download(&dw)?, &want_dw);
    close(dev.download(&db)?, &want_db.expect("bias gradient"));
    assert_eq!(Pointwise::CONV2D_1X1.name, "conv2d_1x1");
    assert_eq!(Pointwise::BWD_BIAS.name, "conv2d_bwd_bias");
    Ok(())
}
