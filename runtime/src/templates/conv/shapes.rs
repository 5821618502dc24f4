//! Run-time convolution shapes: output size without unsigned underflow, tensor lengths and the
//! u32 index checks.

use super::config::Conv2dConfig;

/// The run-time part of a convolution's input shape `[batch, in_channels, height, width]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConvShape {
    pub batch: u32,
    pub height: u32,
    pub width: u32,
}

/// Output spatial size and the derived tensor sizes of one convolution launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConvDims {
    pub batch: u32,
    pub in_h: u32,
    pub in_w: u32,
    pub out_h: u32,
    pub out_w: u32,
}

/// A run-time convolution shape the kernels cannot handle.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConvError {
    #[error("`{name}` = 0: every input dimension must be at least 1")]
    ZeroDim { name: &'static str },
    #[error(
        "input {axis} {input} + 2 · padding {padding} = {padded} is smaller than the dilated \
         kernel extent {extent} (dilation · (kernel − 1) + 1)"
    )]
    InputTooSmall {
        axis: &'static str,
        input: u32,
        padding: u32,
        padded: u64,
        extent: u64,
    },
    #[error(
        "tensor `{tensor}` would have {elements} elements, more than the u32 index limit {limit}",
        limit = u32::MAX
    )]
    TooLarge {
        tensor: &'static str,
        elements: u128,
    },
}

/// Output length of one axis, `(input + 2·padding − dilation·(kernel − 1) − 1) / stride + 1`,
/// computed in u64 without underflow; `None` when `input + 2·padding` is smaller than the
/// dilated kernel, or `stride`/`kernel`/`dilation` is 0.
pub fn output_len(
    input: u32,
    kernel: u32,
    stride: u32,
    padding: u32,
    dilation: u32,
) -> Option<u64> {
    if kernel == 0 || stride == 0 || dilation == 0 {
        return None;
    }
    let padded = u64::from(input) + 2 * u64::from(padding);
    let extent = u64::from(dilation) * (u64::from(kernel) - 1) + 1;
    let span = padded.checked_sub(extent)?;
    Some(span / u64::from(stride) + 1)
}

impl Conv2dConfig {
    /// Output size `(out_h, out_w)` for `shape` (see [`output_len`]). An input smaller than the
    /// dilated kernel is [`ConvError::InputTooSmall`], never a wrap-around. Assumes a validated
    /// config.
    pub fn output_size(&self, shape: &ConvShape) -> Result<(u32, u32), ConvError> {
        for (name, v) in [
            ("batch", shape.batch),
            ("height", shape.height),
            ("width", shape.width),
        ] {
            if v == 0 {
                return Err(ConvError::ZeroDim { name });
            }
        }
        let axis = |axis: &'static str, input: u32, k: u32, s: u32, p: u32, d: u32| {
            let too_small = || ConvError::InputTooSmall {
                axis,
                input,
                padding: p,
                padded: u64::from(input) + 2 * u64::from(p),
                extent: u64::from(d) * u64::from(k.max(1) - 1) + 1,
            };
            let out = output_len(input, k, s, p, d).ok_or_else(too_small)?;
            u32::try_from(out).map_err(|_| ConvError::TooLarge {
                tensor: "output",
                elements: u128::from(out),
            })
        };
        let out_h = axis(
            "height",
            shape.height,
            self.kernel_h,
            self.stride_h,
            self.padding_h,
            self.dilation_h,
        )?;
        let out_w = axis(
            "width",
            shape.width,
            self.kernel_w,
            self.stride_w,
            self.padding_w,
            self.dilation_w,
        )?;
        Ok((out_h, out_w))
    }

    /// Output size plus the u32 index checks of the input `[N, C_in, H, W]` and output
    /// `[N, C_out, out_h, out_w]` (and, when `im2col`, of the column matrix, see
    /// [`ConvDims::im2col_len`]).
    pub fn check_shape(&self, shape: &ConvShape, im2col: bool) -> Result<ConvDims, ConvError> {
        let (out_h, out_w) = self.output_size(shape)?;
        let dims = ConvDims {
            batch: shape.batch,
            in_h: shape.height,
            in_w: shape.width,
            out_h,
            out_w,
        };
        let mut checks = vec![
            ("input", dims.input_elements(self)),
            ("output", dims.output_elements(self)),
        ];
        if im2col {
            checks.push(("im2col", dims.im2col_elements(self)));
        }
        for (tensor, elements) in checks {
            if elements > u128::from(u32::MAX) {
                return Err(ConvError::TooLarge { tensor, elements });
            }
        }
        Ok(dims)
    }
}

impl ConvDims {
    fn input_elements(&self, cfg: &Conv2dConfig) -> u128 {
        u128::from(self.batch)
            * u128::from(cfg.in_channels)
            * u128::from(self.in_h)
            * u128::from(self.in_w)
    }

    fn output_elements(&self, cfg: &Conv2dConfig) -> u128 {
        u128::from(self.batch)
            * u128::from(cfg.out_channels)
            * u128::from(self.out_h)
            * u128::from(self.out_w)
    }

    fn im2col_elements(&self, cfg: &Conv2dConfig) -> u128 {
        u128::from(cfg.in_channels)
            * u128::from(cfg.kernel_h)
            * u128::from(cfg.kernel_w)
            * u128::from(self.batch)
            * u128::from(self.out_h)
            * u128::from(self.out_w)
    }

    /// Elements of the input `x [N, C_in, H, W]`.
    pub fn input_len(&self, cfg: &Conv2dConfig) -> usize {
        self.input_elements(cfg) as usize
    }

    /// Elements of the output `y [N, C_out, out_h, out_w]`.
    pub fn output_len(&self, cfg: &Conv2dConfig) -> usize {
        self.output_elements(cfg) as usize
    }

    /// Elements of the weight `w [C_out, C_in/groups, kh, kw]`.
    pub fn weight_len(cfg: &Conv2dConfig) -> usize {
        cfg.weight_elements() as usize
    }

    /// Elements of the im2col matrix over all groups: `groups` blocks of
    /// `[(C_in/groups)·kh·kw, N·out_h·out_w]` = `C_in·kh·kw · N·out_h·out_w`.
    pub fn im2col_len(&self, cfg: &Conv2dConfig) -> usize {
        self.im2col_elements(cfg) as usize
    }

    /// Output pixels per image, `out_h · out_w`.
    pub const fn out_pixels(&self) -> usize {
        self.out_h as usize * self.out_w as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_len_formula() {
        assert_eq!(output_len(5, 3, 1, 0, 1), Some(3));
        assert_eq!(output_len(5, 3, 2, 1, 1), Some(3));
        assert_eq!(output_len(7, 3, 1, 0, 2), Some(3)); // extent 5
        assert_eq!(output_len(4, 3, 1, 0, 2), None); // 4 < 5
        assert_eq!(output_len(1, 3, 1, 1, 1), Some(1));
        assert_eq!(
            output_len(u32::MAX, 1, 1, u32::MAX, 1),
            Some(3 * u64::from(u32::MAX))
        );
    }

    #[test]
    fn small_input_is_a_typed_error() {
        let cfg = Conv2dConfig::new(1, 1, 3).with_dilation(2, 1);
        let shape = ConvShape {
            batch: 1,
            height: 4,
            width: 9,
        };
        let err = cfg.output_size(&shape).unwrap_err();
        assert_eq!(
            err,
            ConvError::InputTooSmall {
                axis: "height",
                input: 4,
                padding: 0,
                padded: 4,
                extent: 5
            }
        );
        assert!(err
            .to_string()
            .contains("smaller than the dilated kernel extent 5"));
        let padded = cfg.with_padding(1, 0);
        assert_eq!(padded.output_size(&shape), Ok((2, 7)));
        assert_eq!(
            cfg.output_size(&ConvShape { batch: 0, ..shape }),
            Err(ConvError::ZeroDim { name: "batch" })
        );
    }

    #[test]
    fn check_shape_sizes() {
        let cfg = Conv2dConfig::new(4, 6, 3).with_groups(2).with_padding(1, 1);
        let dims = cfg
            .check_shape(
                &ConvShape {
                    batch: 2,
                    height: 5,
                    width: 7,
                },
                true,
            )
            .unwrap();
        assert_eq!((dims.out_h, dims.out_w), (5, 7));
        assert_eq!(dims.input_len(&cfg), 2 * 4 * 5 * 7);
        assert_eq!(dims.output_len(&cfg), 2 * 6 * 5 * 7);
        assert_eq!(ConvDims::weight_len(&cfg), 6 * 2 * 9);
        assert_eq!(dims.im2col_len(&cfg), 4 * 9 * 2 * 35);
        let big = cfg.check_shape(
            &ConvShape {
                batch: 1024,
                height: 1024,
                width: 1024,
            },
            false,
        );
        assert!(matches!(
            big,
            Err(ConvError::TooLarge {
                tensor: "input",
                ..
            })
        ));
    }
}

impl Conv2dConfig {
    /// Launch geometry of the direct kernel for `dims`: one block per 16 × 16 output tile of one
    /// (image, output channel) plane: grid `(ceil(out_w/16) · ceil(out_h/16), out_channels,
    /// batch)`, block `(16, 16, 1)`, and the dynamic shared memory to request (0 when the input
    /// tile fits static shared memory).
    pub fn direct_launch_config(
        &self,
        dims: &ConvDims,
    ) -> Result<crate::launch::LaunchConfig, crate::launch::LaunchError> {
        use crate::launch::{Dim3, LaunchConfig, LaunchError};
        use crate::templates::attention::SharedMemoryKind;
        const MAX_GRID_YZ: u32 = 65535;
        for (name, v) in [("out_channels", self.out_channels), ("batch", dims.batch)] {
            if v > MAX_GRID_YZ {
                return Err(LaunchError::InvalidDim {
                    name,
                    value: u64::from(v),
                    reason: format!("exceeds the grid limit {MAX_GRID_YZ}"),
                });
            }
        }
        let tile = self.direct_tile();
        let tiles =
            u64::from(dims.out_w.div_ceil(tile.out_w)) * u64::from(dims.out_h.div_ceil(tile.out_h));
        let grid_x = u32::try_from(tiles).map_err(|_| LaunchError::InvalidDim {
            name: "output tiles",
            value: tiles,
            reason: "exceeds the grid limit 2^32 − 1".into(),
        })?;
        Ok(LaunchConfig {
            grid: Dim3::new(grid_x, self.out_channels, dims.batch),
            block: Dim3::new(tile.out_w, tile.out_h, 1),
            dynamic_shared_bytes: match tile.shared_kind {
                SharedMemoryKind::Static => 0,
                SharedMemoryKind::Dynamic => tile.shared_bytes,
            },
        })
    }
}

#[cfg(test)]
mod launch_tests {
    use super::*;

    #[test]
    fn direct_grid_covers_the_output() {
        let cfg = Conv2dConfig::new(3, 5, 3).with_padding(1, 1);
        let dims = cfg
            .check_shape(
                &ConvShape {
                    batch: 2,
                    height: 33,
                    width: 17,
                },
                false,
            )
            .unwrap();
        let lc = cfg.direct_launch_config(&dims).unwrap();
        assert_eq!(lc.grid, crate::launch::Dim3::new(2 * 3, 5, 2));
        assert_eq!(lc.block, crate::launch::Dim3::new(16, 16, 1));
        assert_eq!(lc.dynamic_shared_bytes, 0);
    }
}
