//! Host references of the 2-D convolution kernels, NCHW, in f64 ([`to_channels_last`] turns
//! data and results into the NHWC layout).
//!
//! Data are `f64` slices (convert test data with `templates::testing::to_f64`). Layouts:
//! `x [N, C_in, H, W]`, `w [C_out, C_in/G, KH, KW]`, `b [C_out]`, `y [N, C_out, OH, OW]`.
//! With `Cg = C_in/G` and `Og = C_out/G`, output channel `oc` is in group `g = oc / Og` and reads
//! input channels `g·Cg + ci`, `ci < Cg`. Input coordinates of a tap:
//! `ih = oh·SH − PH + kh·DH`, `iw = ow·SW − PW + kw·DW`; taps outside `[0, H) × [0, W)` read the
//! zero padding.
//!
//! Tolerance against kernels: `1e-5` relative to `Σ|terms|` for f32 (f32 accumulation in any
//! order), `2e-2` bf16 / `1e-2` f16 after output rounding, `1e-12` f64.

use super::config::Conv2dConfig;
use super::shapes::{ConvDims, ConvError, ConvShape};

/// Mismatched arguments.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConvRefError {
    #[error(transparent)]
    Shape(#[from] ConvError),
    #[error("`{name}` has {actual} elements, expected {expected}")]
    Length {
        name: &'static str,
        expected: usize,
        actual: usize,
    },
    #[error("bias given = {given} but the config says bias = {expected}")]
    Bias { expected: bool, given: bool },
}

fn check(name: &'static str, expected: usize, actual: usize) -> Result<(), ConvRefError> {
    if expected == actual {
        Ok(())
    } else {
        Err(ConvRefError::Length {
            name,
            expected,
            actual,
        })
    }
}

fn check_bias(cfg: &Conv2dConfig, bias: Option<&[f64]>) -> Result<(), ConvRefError> {
    match bias {
        Some(b) if cfg.bias => check("bias", cfg.out_channels as usize, b.len()),
        None if !cfg.bias => Ok(()),
        _ => Err(ConvRefError::Bias {
            expected: cfg.bias,
            given: bias.is_some(),
        }),
    }
}

/// Plain index arithmetic of one problem, in usize.
struct Geometry {
    n: usize,
    c_in: usize,
    c_out: usize,
    h: usize,
    w: usize,
    oh: usize,
    ow: usize,
    kh: usize,
    kw: usize,
    cg: usize,
    og: usize,
    /// `(stride, padding, dilation)` along `h` and along `w`.
    axes: [(u32, u32, u32); 2],
}

impl Geometry {
    fn new(cfg: &Conv2dConfig, d: &ConvDims) -> Self {
        Self {
            n: d.batch as usize,
            c_in: cfg.in_channels as usize,
            c_out: cfg.out_channels as usize,
            h: d.in_h as usize,
            w: d.in_w as usize,
            oh: d.out_h as usize,
            ow: d.out_w as usize,
            kh: cfg.kernel_h as usize,
            kw: cfg.kernel_w as usize,
            cg: cfg.in_per_group() as usize,
            og: cfg.out_per_group() as usize,
            axes: [
                (cfg.stride_h, cfg.padding_h, cfg.dilation_h),
                (cfg.stride_w, cfg.padding_w, cfg.dilation_w),
            ],
        }
    }

    /// The input row of output row `oh`, tap row `i`; `None` in the padding.
    fn ih(&self, oh: usize, i: usize) -> Option<usize> {
        Self::input_coord(oh, i, self.axes[0], self.h)
    }

    /// The input column of output column `ow`, tap column `j`; `None` in the padding.
    fn iw(&self, ow: usize, j: usize) -> Option<usize> {
        Self::input_coord(ow, j, self.axes[1], self.w)
    }

    /// The input coordinate of output `o`, tap `k` on one axis, `None` in the padding.
    fn input_coord(
        o: usize,
        k: usize,
        (stride, pad, dil): (u32, u32, u32),
        len: usize,
    ) -> Option<usize> {
        let pos = (o * stride as usize + k * dil as usize).checked_sub(pad as usize)?;
        (pos < len).then_some(pos)
    }

    fn x_idx(&self, n: usize, c: usize, ih: usize, iw: usize) -> usize {
        ((n * self.c_in + c) * self.h + ih) * self.w + iw
    }

    fn y_idx(&self, n: usize, oc: usize, oh: usize, ow: usize) -> usize {
        ((n * self.c_out + oc) * self.oh + oh) * self.ow + ow
    }

    fn w_idx(&self, oc: usize, ci: usize, i: usize, j: usize) -> usize {
        ((oc * self.cg + ci) * self.kh + i) * self.kw + j
    }
}

fn prepare(
    cfg: &Conv2dConfig,
    shape: &ConvShape,
    checks: &[(&'static str, Tensor, usize)],
) -> Result<(ConvDims, Geometry), ConvRefError> {
    let dims = cfg.check_shape(shape, false)?;
    let geo = Geometry::new(cfg, &dims);
    for &(name, tensor, actual) in checks {
        let expected = match tensor {
            X => dims.input_len(cfg),
            W => ConvDims::weight_len(cfg),
            Y => dims.output_len(cfg),
        };
        check(name, expected, actual)?;
    }
    Ok((dims, geo))
}

/// Which tensor an argument is, for its length check.
#[derive(Clone, Copy)]
enum Tensor {
    /// `x [N, C_in, H, W]` (and `dx`).
    X,
    /// `w [C_out, C_in/G, KH, KW]`.
    W,
    /// `y [N, C_out, OH, OW]` (and `gy`).
    Y,
}
use Tensor::{W, X, Y};

/// Direct forward:
/// `y[n, oc, oh, ow] = b[oc] + Σ_{ci < Cg, kh, kw} x[n, g·Cg + ci, ih, iw] · w[oc, ci, kh, kw]`.
/// `bias` must be `Some` exactly when `cfg.bias`.
pub fn forward(
    cfg: &Conv2dConfig,
    shape: &ConvShape,
    x: &[f64],
    w: &[f64],
    bias: Option<&[f64]>,
) -> Result<Vec<f64>, ConvRefError> {
    let (dims, g) = prepare(cfg, shape, &[("x", X, x.len()), ("w", W, w.len())])?;
    check_bias(cfg, bias)?;
    let mut y = vec![0.0; dims.output_len(cfg)];
    for n in 0..g.n {
        for oc in 0..g.c_out {
            let c0 = (oc / g.og) * g.cg;
            for oh in 0..g.oh {
                for ow in 0..g.ow {
                    let mut acc = bias.map_or(0.0, |b| b[oc]);
                    for ci in 0..g.cg {
                        for i in 0..g.kh {
                            let Some(ih) = g.ih(oh, i) else {
                                continue;
                            };
                            for j in 0..g.kw {
                                let Some(iw) = g.iw(ow, j) else {
                                    continue;
                                };
                                acc += x[g.x_idx(n, c0 + ci, ih, iw)] * w[g.w_idx(oc, ci, i, j)];
                            }
                        }
                    }
                    y[g.y_idx(n, oc, oh, ow)] = acc;
                }
            }
        }
    }
    Ok(y)
}

/// im2col: the column matrix of every group, `cols [G, Cg·KH·KW, N·OH·OW]` (row-major, groups
/// outermost). Row `r = (ci·KH + kh)·KW + kw` of group `g` and column `c = (n·OH + oh)·OW + ow`
/// hold `x[n, g·Cg + ci, ih, iw]`, or 0 in the padding. The weight `[C_out, Cg·KH·KW]` (its
/// natural layout) then multiplies each group's block: see [`gemm_im2col`].
pub fn im2col(cfg: &Conv2dConfig, shape: &ConvShape, x: &[f64]) -> Result<Vec<f64>, ConvRefError> {
    let (dims, g) = prepare(cfg, shape, &[("x", X, x.len())])?;
    let rows = g.cg * g.kh * g.kw;
    let cols_n = g.n * g.oh * g.ow;
    let mut cols = vec![0.0; dims.im2col_len(cfg)];
    for grp in 0..cfg.groups as usize {
        for ci in 0..g.cg {
            for i in 0..g.kh {
                for j in 0..g.kw {
                    let r = (ci * g.kh + i) * g.kw + j;
                    let row = &mut cols[(grp * rows + r) * cols_n..(grp * rows + r + 1) * cols_n];
                    for n in 0..g.n {
                        for oh in 0..g.oh {
                            let Some(ih) = g.ih(oh, i) else {
                                continue;
                            };
                            for ow in 0..g.ow {
                                if let Some(iw) = g.iw(ow, j) {
                                    row[(n * g.oh + oh) * g.ow + ow] =
                                        x[g.x_idx(n, grp * g.cg + ci, ih, iw)];
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    Ok(cols)
}

/// The GEMM completing [`im2col`]: for each group `g`,
/// `Y_g [Og, N·OH·OW] = W_g [Og, Cg·KH·KW] · cols_g (+ b)`, then column
/// `(n·OH + oh)·OW + ow` of row `oc_local` is stored to `y[n, g·Og + oc_local, oh, ow]` (NCHW).
pub fn gemm_im2col(
    cfg: &Conv2dConfig,
    shape: &ConvShape,
    cols: &[f64],
    w: &[f64],
    bias: Option<&[f64]>,
) -> Result<Vec<f64>, ConvRefError> {
    let (dims, g) = prepare(cfg, shape, &[("w", W, w.len())])?;
    check("cols", dims.im2col_len(cfg), cols.len())?;
    check_bias(cfg, bias)?;
    let rows = g.cg * g.kh * g.kw;
    let cols_n = g.n * g.oh * g.ow;
    let mut y = vec![0.0; dims.output_len(cfg)];
    for oc in 0..g.c_out {
        let grp = oc / g.og;
        let wrow = &w[oc * rows..(oc + 1) * rows];
        let block = &cols[grp * rows * cols_n..(grp + 1) * rows * cols_n];
        for col in 0..cols_n {
            let mut acc = bias.map_or(0.0, |b| b[oc]);
            for (r, wv) in wrow.iter().enumerate() {
                acc += wv * block[r * cols_n + col];
            }
            let (n, pix) = (col / (g.oh * g.ow), col % (g.oh * g.ow));
            y[g.y_idx(n, oc, pix / g.ow, pix % g.ow)] = acc;
        }
    }
    Ok(y)
}

/// `[N, C, H, W]` → `[N, H, W, C]` (NCHW data in the NHWC layout; also a weight `[O, I, KH,
/// KW]` → `[O, KH, KW, I]`, the NHWC modules' weight order).
pub fn to_channels_last(v: &[f64], [n, c, h, w]: [usize; 4]) -> Vec<f64> {
    assert_eq!(v.len(), n * c * h * w, "length of [{n}, {c}, {h}, {w}]");
    let mut out = vec![0.0; v.len()];
    for b in 0..n {
        for ch in 0..c {
            for y in 0..h {
                for x in 0..w {
                    out[((b * h + y) * w + x) * c + ch] = v[((b * c + ch) * h + y) * w + x];
                }
            }
        }
    }
    out
}

/// Backward-data, gather form: `dx[n, c, ih, iw] = Σ_{oc ∈ group(c), kh, kw} gy[n, oc, oh, ow] ·
/// w[oc, c − g·Cg, kh, kw]` over the `(oh, ow)` with `oh·SH = ih + PH − kh·DH` (exactly
/// divisible, `0 ≤ oh < OH`) and likewise for `ow`. This is the adjoint of [`forward`] without
/// bias: `⟨forward(x), gy⟩ = ⟨x, backward_data(gy)⟩`.
pub fn backward_data(
    cfg: &Conv2dConfig,
    shape: &ConvShape,
    gy: &[f64],
    w: &[f64],
) -> Result<Vec<f64>, ConvRefError> {
    let (dims, g) = prepare(cfg, shape, &[("gy", Y, gy.len()), ("w", W, w.len())])?;
    // Output coordinate on one axis for input `pos` and tap `k`, if any.
    let out_coord = |pos: usize, k: usize, stride: u32, pad: u32, dil: u32, len: usize| {
        let num = (pos + pad as usize).checked_sub(k * dil as usize)?;
        let s = stride as usize;
        (num % s == 0 && num / s < len).then_some(num / s)
    };
    let mut dx = vec![0.0; dims.input_len(cfg)];
    for n in 0..g.n {
        for c in 0..g.c_in {
            let grp = c / g.cg;
            let ci = c % g.cg;
            for ih in 0..g.h {
                for iw in 0..g.w {
                    let mut acc = 0.0;
                    for oc in grp * g.og..(grp + 1) * g.og {
                        for i in 0..g.kh {
                            let Some(oh) =
                                out_coord(ih, i, cfg.stride_h, cfg.padding_h, cfg.dilation_h, g.oh)
                            else {
                                continue;
                            };
                            for j in 0..g.kw {
                                if let Some(ow) = out_coord(
                                    iw,
                                    j,
                                    cfg.stride_w,
                                    cfg.padding_w,
                                    cfg.dilation_w,
                                    g.ow,
                                ) {
                                    acc += gy[g.y_idx(n, oc, oh, ow)] * w[g.w_idx(oc, ci, i, j)];
                                }
                            }
                        }
                    }
                    dx[g.x_idx(n, c, ih, iw)] = acc;
                }
            }
        }
    }
    Ok(dx)
}

/// Backward-filter: `dw[oc, ci, kh, kw] = Σ_{n, oh, ow} gy[n, oc, oh, ow] · x[n, g·Cg + ci, ih,
/// iw]` (padding taps contribute 0), and when `cfg.bias`, `db[oc] = Σ_{n, oh, ow} gy[n, oc, oh,
/// ow]`. Returns `(dw, db)`; `db` is `None` without bias.
pub fn backward_filter(
    cfg: &Conv2dConfig,
    shape: &ConvShape,
    x: &[f64],
    gy: &[f64],
) -> Result<(Vec<f64>, Option<Vec<f64>>), ConvRefError> {
    let (_, g) = prepare(cfg, shape, &[("x", X, x.len()), ("gy", Y, gy.len())])?;
    let mut dw = vec![0.0; ConvDims::weight_len(cfg)];
    for oc in 0..g.c_out {
        let c0 = (oc / g.og) * g.cg;
        for ci in 0..g.cg {
            for i in 0..g.kh {
                for j in 0..g.kw {
                    let mut acc = 0.0;
                    for n in 0..g.n {
                        for oh in 0..g.oh {
                            let Some(ih) = g.ih(oh, i) else {
                                continue;
                            };
                            for ow in 0..g.ow {
                                if let Some(iw) = g.iw(ow, j) {
                                    acc +=
                                        gy[g.y_idx(n, oc, oh, ow)] * x[g.x_idx(n, c0 + ci, ih, iw)];
                                }
                            }
                        }
                    }
                    dw[g.w_idx(oc, ci, i, j)] = acc;
                }
            }
        }
    }
    let db = cfg.bias.then(|| {
        (0..g.c_out)
            .map(|oc| {
                (0..g.n)
                    .flat_map(|n| (0..g.oh * g.ow).map(move |p| (n, p)))
                    .map(|(n, p)| gy[g.y_idx(n, oc, p / g.ow, p % g.ow)])
                    .sum()
            })
            .collect()
    });
    Ok((dw, db))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::templates::testing::SplitMix64;

    fn dot(a: &[f64], b: &[f64]) -> f64 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    fn shape(n: u32, h: u32, w: u32) -> ConvShape {
        ConvShape {
            batch: n,
            height: h,
            width: w,
        }
    }

    /// Configurations covering groups, depthwise, stride, padding, dilation, 1×1, rectangles.
    fn cases() -> Vec<(Conv2dConfig, ConvShape)> {
        vec![
            (Conv2dConfig::new(2, 3, 3), shape(2, 5, 6)),
            (
                Conv2dConfig::new(2, 3, 3)
                    .with_padding(1, 1)
                    .with_bias(true),
                shape(1, 4, 4),
            ),
            (
                Conv2dConfig::new(4, 6, 3).with_groups(2).with_stride(2, 1),
                shape(2, 7, 5),
            ),
            (
                Conv2dConfig::new(3, 6, 3).with_groups(3).with_padding(1, 2),
                shape(1, 5, 5),
            ),
            (
                Conv2dConfig::new(2, 2, 3)
                    .with_dilation(2, 3)
                    .with_padding(2, 1)
                    .with_bias(true),
                shape(1, 8, 9),
            ),
            (Conv2dConfig::new(3, 4, 1).with_stride(2, 2), shape(2, 5, 4)),
            (
                Conv2dConfig::new(4, 4, 2)
                    .with_kernel(2, 3)
                    .with_stride(3, 2)
                    .with_groups(4),
                shape(1, 7, 8),
            ),
        ]
    }

    #[test]
    fn hand_computed_forward() {
        // 1 → 1 channel, 3×3 input 1..9, 2×2 kernel of ones, bias 10: window sums + 10.
        let cfg = Conv2dConfig::new(1, 1, 2).with_bias(true);
        let x: Vec<f64> = (1..=9).map(f64::from).collect();
        let y = forward(&cfg, &shape(1, 3, 3), &x, &[1.0; 4], Some(&[10.0])).unwrap();
        assert_eq!(y, vec![22.0, 26.0, 34.0, 38.0]);
        // Padding 1, stride 2: outputs at (−1, −1), (−1, 1), (1, −1), (1, 1) windows.
        let cfg = Conv2dConfig::new(1, 1, 2)
            .with_padding(1, 1)
            .with_stride(2, 2);
        let y = forward(&cfg, &shape(1, 3, 3), &x, &[1.0; 4], None).unwrap();
        assert_eq!(y, vec![1.0, 5.0, 11.0, 28.0]);
        // Dilation 2 with a 2×2 kernel picks the corners: 1 + 3 + 7 + 9.
        let cfg = Conv2dConfig::new(1, 1, 2).with_dilation(2, 2);
        assert_eq!(
            forward(&cfg, &shape(1, 3, 3), &x, &[1.0; 4], None).unwrap(),
            vec![20.0]
        );
    }

    #[test]
    fn depthwise_is_per_channel() {
        let cfg = Conv2dConfig::new(2, 2, 1).with_groups(2);
        let x = [1.0, 2.0, 3.0, 4.0]; // 2 channels of 1×2
        let y = forward(&cfg, &shape(1, 1, 2), &x, &[10.0, 100.0], None).unwrap();
        assert_eq!(y, vec![10.0, 20.0, 300.0, 400.0]);
    }

    #[test]
    fn im2col_layout() {
        // 1 channel 2×2 input, 2×2 kernel, padding 0: one column holding the 4 pixels.
        let cfg = Conv2dConfig::new(1, 1, 2);
        let cols = im2col(&cfg, &shape(1, 2, 2), &[1.0, 2.0, 3.0, 4.0]).unwrap();
        assert_eq!(cols, vec![1.0, 2.0, 3.0, 4.0]);
        // 1×1 kernel over 2 images of 1×2: row 0, columns (n, pixel).
        let cfg = Conv2dConfig::new(1, 1, 1);
        let cols = im2col(&cfg, &shape(2, 1, 2), &[1.0, 2.0, 3.0, 4.0]).unwrap();
        assert_eq!(cols, vec![1.0, 2.0, 3.0, 4.0]);
    }

    #[test]
    fn im2col_gemm_equals_direct() {
        let mut rng = SplitMix64::new(10);
        for (cfg, s) in cases() {
            let dims = cfg.check_shape(&s, true).unwrap();
            let x = rng.vec_f64(dims.input_len(&cfg), -1.0, 1.0);
            let w = rng.vec_f64(ConvDims::weight_len(&cfg), -1.0, 1.0);
            let b = rng.vec_f64(cfg.out_channels as usize, -1.0, 1.0);
            let bias = cfg.bias.then_some(b.as_slice());
            let direct = forward(&cfg, &s, &x, &w, bias).unwrap();
            let cols = im2col(&cfg, &s, &x).unwrap();
            let gemm = gemm_im2col(&cfg, &s, &cols, &w, bias).unwrap();
            for (a, b) in direct.iter().zip(&gemm) {
                assert!((a - b).abs() < 1e-12, "{cfg:?}");
            }
        }
    }

    #[test]
    fn backward_data_is_the_adjoint() {
        let mut rng = SplitMix64::new(11);
        for (cfg, s) in cases() {
            let cfg = cfg.with_bias(false);
            let dims = cfg.check_shape(&s, false).unwrap();
            let x = rng.vec_f64(dims.input_len(&cfg), -1.0, 1.0);
            let w = rng.vec_f64(ConvDims::weight_len(&cfg), -1.0, 1.0);
            let gy = rng.vec_f64(dims.output_len(&cfg), -1.0, 1.0);
            let y = forward(&cfg, &s, &x, &w, None).unwrap();
            let dx = backward_data(&cfg, &s, &gy, &w).unwrap();
            let (l, r) = (dot(&y, &gy), dot(&x, &dx));
            assert!(
                (l - r).abs() < 1e-10 * (1.0 + l.abs()),
                "{cfg:?}: {l} vs {r}"
            );
        }
    }

    #[test]
    fn backward_filter_is_the_gradient() {
        // y is linear in (w, b): ⟨conv_w,b(x), gy⟩ = ⟨w, dw⟩ + ⟨b, db⟩.
        let mut rng = SplitMix64::new(12);
        for (cfg, s) in cases() {
            let dims = cfg.check_shape(&s, false).unwrap();
            let x = rng.vec_f64(dims.input_len(&cfg), -1.0, 1.0);
            let w = rng.vec_f64(ConvDims::weight_len(&cfg), -1.0, 1.0);
            let b = rng.vec_f64(cfg.out_channels as usize, -1.0, 1.0);
            let gy = rng.vec_f64(dims.output_len(&cfg), -1.0, 1.0);
            let bias = cfg.bias.then_some(b.as_slice());
            let y = forward(&cfg, &s, &x, &w, bias).unwrap();
            let (dw, db) = backward_filter(&cfg, &s, &x, &gy).unwrap();
            assert_eq!(db.is_some(), cfg.bias);
            let l = dot(&y, &gy);
            let r = dot(&w, &dw) + db.map_or(0.0, |db| dot(&b, &db));
            assert!(
                (l - r).abs() < 1e-10 * (1.0 + l.abs()),
                "{cfg:?}: {l} vs {r}"
            );
        }
    }

    #[test]
    fn errors_are_typed() {
        let cfg = Conv2dConfig::new(1, 1, 3);
        assert!(matches!(
            forward(&cfg, &shape(1, 2, 5), &[0.0; 10], &[0.0; 9], None),
            Err(ConvRefError::Shape(ConvError::InputTooSmall {
                axis: "height",
                ..
            }))
        ));
        assert_eq!(
            forward(&cfg, &shape(1, 3, 3), &[0.0; 8], &[0.0; 9], None),
            Err(ConvRefError::Length {
                name: "x",
                expected: 9,
                actual: 8
            })
        );
        assert_eq!(
            forward(&cfg, &shape(1, 3, 3), &[0.0; 9], &[0.0; 9], Some(&[1.0])),
            Err(ConvRefError::Bias {
                expected: false,
                given: true
            })
        );
    }
}
