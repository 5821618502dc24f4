// The conv2d wrappers of a channels-last module (`layout = nhwc`, f16 on sm_80: the
// tensor-core implicit GEMMs) on the CPU backend: forward and both backward passes with
// `x`/`dx [N, H, W, C_in]`, `gy [N, OH, OW, C_out]`, `w`/`dw [C_out, KH, KW, C_in / groups]`,
// against the NCHW host reference transposed to channels-last.
use ptxforge::conv::reference::{self, to_channels_last};
use ptxforge::prelude::*;

#[conv2d_kernel(in_channels = 16, out_channels = 16, kernel = 3, padding = 1, groups = 2,
                bias = true, dtype = f16, arch = sm_80, layout = nhwc)]
pub struct ChannelsLast;

fn main() -> Result<(), LaunchError> {
    let c = ChannelsLast::CONFIG;
    assert!(c.has_tensor_core_backward_data() && c.has_tensor_core_backward_filter());
    let shape = ConvShape { batch: 2, height: 5, width: 7 };
    let dims = c.check_shape(&shape, false).expect("shape");
    let (n, h, w) = (2, 5, 7);
    // NCHW values, exact in f16, for the reference.
    let gen = |len: usize, s: usize| -> Vec<f64> {
        (0..len).map(|i| (((i * 17 + s) % 23) as f64 - 11.0) / 16.0).collect()
    };
    let (x, wt, gy) = (gen(n * 16 * h * w, 1), gen(16 * 8 * 9, 2), gen(n * 16 * h * w, 4));
    let halves = |v: &[f64]| v.iter().map(|&x| f16::from_f64(x)).collect::<Vec<_>>();
    let close = |got: Vec<f16>, want: &[f64]| {
        let scale = want.iter().fold(1e-30f64, |m, v| m.max(v.abs()));
        for (g, r) in got.iter().zip(want) {
            assert!((f64::from(*g) - r).abs() <= 2e-3 * scale, "{g} vs {r}");
        }
    };

    let dev = SimBackend::new();
    let xb = dev.upload(&halves(&to_channels_last(&x, [n, 16, h, w])))?;
    let wb = dev.upload(&halves(&to_channels_last(&wt, [16, 8, 3, 3])))?;
    let gyb = dev.upload(&halves(&to_channels_last(&gy, [n, 16, h, w])))?;

    let mut dx = dev.alloc::<f16>(dims.input_len(&c))?;
    ChannelsLast.backward_data(&dev, &shape, &gyb, &wb, &mut dx)?;
    let want = reference::backward_data(&c, &shape, &gy, &wt).expect("reference");
    close(dev.download(&dx)?, &to_channels_last(&want, [n, 16, h, w]));

    let (want_dw, want_db) = reference::backward_filter(&c, &shape, &x, &gy).expect("reference");
    let mut dw = dev.alloc::<f16>(c.weight_elements() as usize)?;
    let mut db = dev.alloc::<f16>(16)?;
    ChannelsLast.backward_filter(&dev, &shape, &xb, &gyb, &mut dw, &mut db)?;
    close(dev.download(&dw)?, &to_channels_last(&want_dw, [16, 8, 3, 3]));
    close(dev.download(&db)?, &want_db.expect("bias gradient"));
    assert_eq!(ChannelsLast::BWD_DATA_IMPLICIT_GEMM.name, "conv2d_bwd_data_implicit_gemm");
    assert_eq!(ChannelsLast::BWD_FILTER_IMPLICIT_GEMM.name, "conv2d_bwd_filter_implicit_gemm");
    Ok(())
}
