//! Host launch code of the attention family, generic over the [`Backend`].
//!
//! [`forward`] checks the configuration, the element type, the run-time shape and every buffer
//! length **before** launching, computes the grid/block/dynamic shared memory
//! ([`launch_config`]) and launches [`ENTRY`] from the caller's PTX (the macro's `const PTX`;
//! nothing is generated at launch time).
//!
//! Element types: one generic `T: Element` for Q, K, V and O, which must be the config's dtype
//! (`half::f16`, `half::bf16`, `f32`, `f64`; checked at run time, a mismatch is
//! [`LaunchError::ArgumentType`]). LSE is always `f32`. Buffers must start 16-byte aligned (every
//! backend allocation is): the kernel reads K/V tiles in 16-byte chunks.
//!
//! [`forward_strided`] takes explicit [`AttentionLayouts`] (batch/head/sequence strides per
//! tensor: `[B, S, H, D]`, packed QKV, a KV cache with spare capacity) and checks them before
//! launching ([`LayoutError`]); [`forward`] is the contiguous `[B, H, S, D]` case with exact
//! buffer lengths.

use super::config::{AttentionConfig, AttentionShape, AttentionShapeError, SharedMemoryKind};
use super::kernels::ENTRY;
use super::layout::{AttentionLayouts, LayoutError};
use crate::dtype::DType;
use crate::launch::{
    Backend, DeviceBuffer, Dim3, Element, KernelArg, LaunchConfig, LaunchError, ParamKind,
    ScalarKind,
};

/// Largest grid `y`/`z` extent.
const MAX_GRID_YZ: u32 = 65535;

/// The tensors of one forward launch. Q, K, V are read only; O and LSE are overwritten.
///
/// Layouts (row-major): `q, o [B, Hq, Sq, D]`, `k, v [B, Hkv, Skv, D]`, `lse [B, Hq, Sq]`.
#[derive(Debug)]
pub struct AttentionBuffers<'a, B: Backend + ?Sized, T: Element> {
    pub q: &'a DeviceBuffer<B, T>,
    pub k: &'a DeviceBuffer<B, T>,
    pub v: &'a DeviceBuffer<B, T>,
    pub o: &'a DeviceBuffer<B, T>,
    pub lse: &'a DeviceBuffer<B, f32>,
}

/// The host element kind of a dtype.
pub const fn element_kind(dtype: DType) -> ScalarKind {
    match dtype {
        DType::F16 => ScalarKind::F16,
        DType::BF16 => ScalarKind::BF16,
        DType::F32 => ScalarKind::F32,
        DType::F64 => ScalarKind::F64,
    }
}

/// A shape error as a launch error: a zero or too large dimension is [`LaunchError::InvalidDim`]
/// naming it, `Hq` not a multiple of `Hkv` is [`LaunchError::Shape`].
fn shape_error(e: AttentionShapeError) -> LaunchError {
    let reason = e.to_string();
    match e {
        AttentionShapeError::ZeroDim { name } => LaunchError::InvalidDim {
            name,
            value: 0,
            reason,
        },
        AttentionShapeError::HeadsNotMultiple { .. } => LaunchError::Shape(reason),
        AttentionShapeError::TooLarge { tensor, elements } => LaunchError::InvalidDim {
            name: tensor,
            value: u64::try_from(elements).unwrap_or(u64::MAX),
            reason,
        },
    }
}

/// Checks `cfg` (an invalid configuration is reported as [`LaunchError::InvalidDim`] naming its
/// first offending field) and `shape` (no zero dimension, `Hq % Hkv == 0`, element counts within
/// u32 indices, `Hq` and `B` within the grid's y/z limit), then returns the launch geometry:
/// grid `(⌈Sq / block_m⌉, Hq, B)`, block `(block_m · threads_per_row, 1, 1)`, and the dynamic
/// shared memory (the whole footprint when it exceeds 48 KiB, else 0). A backend launching
/// with dynamic shared memory above 48 KiB must opt in to it for the entry.
pub fn launch_config(
    cfg: &AttentionConfig,
    shape: &AttentionShape,
) -> Result<LaunchConfig, LaunchError> {
    if let Err(errors) = cfg.validate() {
        let first = &errors.0[0];
        return Err(LaunchError::InvalidDim {
            name: first.fields.first().copied().unwrap_or("config"),
            value: 0,
            reason: errors.to_string(),
        });
    }
    shape.validate(cfg.head_dim).map_err(shape_error)?;
    for (name, v) in [("heads_q", shape.heads_q), ("batch", shape.batch)] {
        if v > MAX_GRID_YZ {
            return Err(LaunchError::InvalidDim {
                name,
                value: u64::from(v),
                reason: format!("exceeds the grid limit {MAX_GRID_YZ}"),
            });
        }
    }
    let t = cfg.tiles();
    Ok(LaunchConfig {
        grid: Dim3::new(shape.seq_q.div_ceil(t.block_m), shape.heads_q, shape.batch),
        block: Dim3::x(t.threads),
        dynamic_shared_bytes: match t.shared_kind {
            SharedMemoryKind::Static => 0,
            SharedMemoryKind::Dynamic => t.shared_bytes,
        },
    })
}

/// Checks that every buffer has the length `shape` implies.
fn check_lengths<B: Backend + ?Sized, T: Element>(
    cfg: &AttentionConfig,
    shape: &AttentionShape,
    bufs: &AttentionBuffers<'_, B, T>,
) -> Result<(), LaunchError> {
    let (q_len, kv_len) = (shape.q_len(cfg.head_dim), shape.kv_len(cfg.head_dim));
    for (name, expected, actual) in [
        ("q", q_len, bufs.q.len()),
        ("k", kv_len, bufs.k.len()),
        ("v", kv_len, bufs.v.len()),
        ("o", q_len, bufs.o.len()),
        ("lse", shape.lse_len(), bufs.lse.len()),
    ] {
        if expected != actual {
            return Err(LaunchError::BufferLength {
                name,
                expected,
                actual,
            });
        }
    }
    Ok(())
}

/// Attention forward: `O = softmax(Q·Kᵀ·scale, causal mask) · V` and `LSE` per query row, for
/// every batch and query head (kv head `h / (Hq / Hkv)`), with the module `ptx` compiled from
/// `cfg` (`cfg.compile()`, or the macro's `const PTX`), every tensor contiguous `[B, H, S, D]`.
///
/// `scale` defaults to `1/√D`. Everything is checked before the launch: the configuration, `T`
/// against `cfg.dtype`, the shape (see [`launch_config`]), every buffer length, and that the
/// scale is finite. Rows with no visible key (causal with `Sq > Skv`) get `O = 0` and
/// `LSE = −∞`.
pub fn forward<B: Backend, T: Element>(
    cfg: &AttentionConfig,
    dev: &B,
    ptx: &str,
    shape: &AttentionShape,
    bufs: &AttentionBuffers<'_, B, T>,
    scale: Option<f64>,
) -> Result<(), LaunchError> {
    let launch = checked_launch::<T>(cfg, shape, scale)?;
    check_lengths(cfg, shape, bufs)?;
    let layouts = AttentionLayouts::contiguous(shape, cfg.head_dim);
    launch_entry(cfg, dev, ptx, shape, bufs, &layouts, launch)
}

/// A strided launch that failed its checks: a layout the kernel cannot use, or any error
/// [`forward`] reports.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StridedLaunchError {
    #[error(transparent)]
    Layout(#[from] LayoutError),
    #[error(transparent)]
    Launch(#[from] LaunchError),
}

/// [`forward`] with explicit layouts: Q, K, V and O are read and written where `layouts` says
/// (see [`super::layout`]), so `[B, S, H, D]` tensors, one packed QKV buffer (pass it as `q`,
/// `k` and `v`) or a KV cache with capacity beyond `seq_kv` need no copy. LSE stays contiguous
/// `[B, Hq, Sq]` and must have exactly that length. Buffers may be longer than the layouts
/// reach. Checked before launch: everything [`forward`] checks but the Q/K/V/O lengths, then
/// [`AttentionLayouts::check`] (alignment, bounds, u32 indices, no two outputs overlapping).
pub fn forward_strided<B: Backend, T: Element>(
    cfg: &AttentionConfig,
    dev: &B,
    ptx: &str,
    shape: &AttentionShape,
    bufs: &AttentionBuffers<'_, B, T>,
    layouts: &AttentionLayouts,
    scale: Option<f64>,
) -> Result<(), StridedLaunchError> {
    let launch = checked_launch::<T>(cfg, shape, scale)?;
    if bufs.lse.len() != shape.lse_len() {
        return Err(LaunchError::BufferLength {
            name: "lse",
            expected: shape.lse_len(),
            actual: bufs.lse.len(),
        }
        .into());
    }
    let lens = [bufs.q.len(), bufs.k.len(), bufs.v.len(), bufs.o.len()];
    layouts.check(shape, cfg.head_dim, cfg.tiles().vector, lens)?;
    Ok(launch_entry(cfg, dev, ptx, shape, bufs, layouts, launch)?)
}

/// Checks the configuration, the shape, `T` and the scale; returns the launch geometry.
fn checked_launch<T: Element>(
    cfg: &AttentionConfig,
    shape: &AttentionShape,
    scale: Option<f64>,
) -> Result<(LaunchConfig, f64), LaunchError> {
    let launch = launch_config(cfg, shape)?;
    let kind = element_kind(cfg.dtype);
    if T::KIND != kind {
        return Err(LaunchError::ArgumentType {
            entry: ENTRY.to_string(),
            index: 0,
            expected: ParamKind::Pointer(kind),
        });
    }
    let scale = scale.unwrap_or_else(|| cfg.default_scale());
    if !scale.is_finite() {
        return Err(LaunchError::InvalidDim {
            name: "scale",
            value: 0,
            reason: format!("scale = {scale} is not finite"),
        });
    }
    Ok((launch, scale))
}

/// Launches [`ENTRY`] with its 26 arguments (everything checked by the caller).
fn launch_entry<B: Backend, T: Element>(
    cfg: &AttentionConfig,
    dev: &B,
    ptx: &str,
    shape: &AttentionShape,
    bufs: &AttentionBuffers<'_, B, T>,
    layouts: &AttentionLayouts,
    (launch, scale): (LaunchConfig, f64),
) -> Result<(), LaunchError> {
    let scale_arg = match cfg.dtype {
        DType::F64 => KernelArg::F64(scale),
        _ => KernelArg::F32(scale as f32),
    };
    let mut args = vec![
        KernelArg::buffer(bufs.q),
        KernelArg::buffer(bufs.k),
        KernelArg::buffer(bufs.v),
        KernelArg::buffer(bufs.o),
        KernelArg::buffer(bufs.lse),
        KernelArg::U32(shape.seq_q),
        KernelArg::U32(shape.seq_kv),
        KernelArg::U32(shape.heads_q),
        KernelArg::U32(shape.heads_kv),
        scale_arg,
    ];
    args.extend(layouts.kernel_args().into_iter().map(KernelArg::U32));
    dev.launch(ptx, ENTRY, launch, &args)
}

#[cfg(test)]
mod tests {
    use super::*;

    type Recorder = crate::launch::RecordingBackend;

    fn shape() -> AttentionShape {
        AttentionShape {
            batch: 2,
            heads_q: 4,
            heads_kv: 2,
            seq_q: 130,
            seq_kv: 17,
        }
    }

    fn run<T: Element>(
        cfg: &AttentionConfig,
        s: &AttentionShape,
        lens: [usize; 5],
        scale: Option<f64>,
    ) -> Result<Vec<(String, LaunchConfig, usize)>, LaunchError> {
        let dev = Recorder::default();
        let [q, k, v, o, lse] = lens;
        let (q, k, v, o) = (
            dev.alloc::<T>(q)?,
            dev.alloc::<T>(k)?,
            dev.alloc::<T>(v)?,
            dev.alloc::<T>(o)?,
        );
        let lse = dev.alloc::<f32>(lse)?;
        let bufs = AttentionBuffers {
            q: &q,
            k: &k,
            v: &v,
            o: &o,
            lse: &lse,
        };
        forward(cfg, &dev, "", s, &bufs, scale)?;
        Ok(dev
            .launches()
            .into_iter()
            .map(|l| (l.entry, l.config, l.args.len()))
            .collect())
    }

    fn lens(cfg: &AttentionConfig, s: &AttentionShape) -> [usize; 5] {
        let d = cfg.head_dim;
        [
            s.q_len(d),
            s.kv_len(d),
            s.kv_len(d),
            s.q_len(d),
            s.lse_len(),
        ]
    }

    #[test]
    fn geometry_covers_every_row() {
        let cfg = AttentionConfig {
            dtype: DType::F16,
            ..AttentionConfig::new(64)
        };
        let lc = launch_config(&cfg, &shape()).unwrap();
        let t = cfg.tiles();
        assert_eq!(lc.grid, Dim3::new(130u32.div_ceil(t.block_m), 4, 2));
        assert_eq!(lc.block, Dim3::x(t.threads));
        // The tensor-core path always sizes its shared memory at launch.
        assert_eq!(lc.dynamic_shared_bytes, t.shared_bytes);
        let f32_cfg = AttentionConfig::new(64);
        let lc = launch_config(&f32_cfg, &shape()).unwrap();
        assert_eq!(lc.block, Dim3::x(f32_cfg.tiles().threads));
        assert_eq!(lc.dynamic_shared_bytes, 0);
        let f64_big = AttentionConfig {
            dtype: DType::F64,
            ..AttentionConfig::new(256)
        };
        let lc = launch_config(&f64_big, &shape()).unwrap();
        assert_eq!(lc.dynamic_shared_bytes, f64_big.tiles().shared_bytes);
        assert!(lc.dynamic_shared_bytes > 48 * 1024);
    }

    #[test]
    fn good_launch_passes_twenty_six_arguments() {
        let cfg = AttentionConfig::new(32);
        let s = shape();
        let launches = run::<f32>(&cfg, &s, lens(&cfg, &s), None).unwrap();
        assert_eq!(
            launches,
            vec![(ENTRY.to_string(), launch_config(&cfg, &s).unwrap(), 26)]
        );
    }

    #[test]
    fn rejects_bad_buffers_dims_and_types_before_launching() {
        let cfg = AttentionConfig::new(32);
        let s = shape();
        let good = lens(&cfg, &s);
        for (i, name) in ["q", "k", "v", "o", "lse"].into_iter().enumerate() {
            let mut l = good;
            l[i] += 1;
            assert_eq!(
                run::<f32>(&cfg, &s, l, None),
                Err(LaunchError::BufferLength {
                    name,
                    expected: good[i],
                    actual: good[i] + 1
                })
            );
        }
        assert!(matches!(
            run::<half::f16>(&cfg, &s, good, None),
            Err(LaunchError::ArgumentType {
                expected: ParamKind::Pointer(ScalarKind::F32),
                ..
            })
        ));
        let gqa3 = AttentionShape { heads_kv: 3, ..s };
        assert_eq!(
            run::<f32>(&cfg, &gqa3, good, None),
            Err(LaunchError::Shape(
                "heads_q = 4 is not a multiple of heads_kv = 3".to_string()
            ))
        );
        for (name, zero) in [
            ("batch", AttentionShape { batch: 0, ..s }),
            ("heads_q", AttentionShape { heads_q: 0, ..s }),
            ("heads_kv", AttentionShape { heads_kv: 0, ..s }),
            ("seq_q", AttentionShape { seq_q: 0, ..s }),
            ("seq_kv", AttentionShape { seq_kv: 0, ..s }),
        ] {
            assert!(matches!(
                run::<f32>(&cfg, &zero, lens(&cfg, &zero), None),
                Err(LaunchError::InvalidDim { name: n, value: 0, .. }) if n == name
            ));
        }
        let huge = AttentionShape {
            seq_q: 1 << 26,
            ..s
        };
        assert!(matches!(
            run::<f32>(&cfg, &huge, [0; 5], None),
            Err(LaunchError::InvalidDim { name: "q", .. })
        ));
        let many_heads = AttentionShape {
            heads_q: 70000,
            heads_kv: 70000,
            seq_q: 1,
            seq_kv: 1,
            batch: 1,
        };
        assert!(matches!(
            run::<f32>(&cfg, &many_heads, lens(&cfg, &many_heads), None),
            Err(LaunchError::InvalidDim {
                name: "heads_q",
                ..
            })
        ));
        assert!(matches!(
            run::<f32>(&cfg, &s, good, Some(f64::NAN)),
            Err(LaunchError::InvalidDim { name: "scale", .. })
        ));
        let bad_cfg = AttentionConfig::new(80);
        assert!(matches!(
            run::<f32>(&bad_cfg, &s, lens(&bad_cfg, &s), None),
            Err(LaunchError::InvalidDim {
                name: "head_dim",
                ..
            })
        ));
    }
}
