//! Where each element of Q, K, V and O lives: explicit batch/head/sequence strides, so
//! `[B, S, H, D]` tensors (flash-attn, candle), packed QKV and a preallocated KV cache whose
//! capacity exceeds `seq_kv` are read and written in place, without copies.
//!
//! Element `(b, h, s, d)` of a tensor is at index `offset + b·batch + h·head + s·seq + d` of its
//! buffer (in elements; the head dimension `d` is always contiguous). LSE stays contiguous
//! `[B, Hq, Sq]`. [`AttentionLayouts::contiguous`] is the default `[B, H, S, D]` layout.
//!
//! Rules, checked by [`AttentionLayouts::check`] before any launch ([`LayoutError`] names the
//! tensor):
//! - every offset and stride is a multiple of the kernel's vector width (its 8- or 16-byte
//!   accesses must stay aligned);
//! - no element reaches past its buffer, and every index fits the kernel's u32 element indices;
//! - O's strides map distinct `(b, h, s, d)` to distinct elements (two outputs never overlap).
//!   The check is the usual sufficient one: sorted by stride, each dimension's stride exceeds
//!   the largest offset the smaller ones reach.

use super::{AttentionShape, INDEX_BOUND};

/// Strides (and a start offset), in elements, of one `[B, H, S, D]`-indexed tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TensorLayout {
    /// Index of element `(0, 0, 0, 0)`.
    pub offset: usize,
    /// Elements between consecutive batches.
    pub batch: usize,
    /// Elements between consecutive heads.
    pub head: usize,
    /// Elements between consecutive sequence positions.
    pub seq: usize,
}

impl TensorLayout {
    /// Row-major `[B, heads, seq, D]`.
    pub const fn bhsd(heads: u32, seq: u32, head_dim: u32) -> Self {
        let (h, s, d) = (heads as usize, seq as usize, head_dim as usize);
        Self {
            offset: 0,
            batch: h * s * d,
            head: s * d,
            seq: d,
        }
    }

    /// Row-major `[B, seq, heads, D]` (flash-attn's and candle's layout).
    pub const fn bshd(heads: u32, seq: u32, head_dim: u32) -> Self {
        let (h, s, d) = (heads as usize, seq as usize, head_dim as usize);
        Self {
            offset: 0,
            batch: s * h * d,
            head: d,
            seq: h * d,
        }
    }

    /// The same layout starting `offset` elements further.
    pub const fn at(self, offset: usize) -> Self {
        Self { offset, ..self }
    }

    /// The largest index the tensor touches for `batch × heads × seq × head_dim` elements
    /// (every extent ≥ 1), in u128 so that no stride overflows.
    fn max_index(&self, batch: u32, heads: u32, seq: u32, head_dim: u32) -> u128 {
        let last = |n: u32, stride: usize| u128::from(n - 1) * stride as u128;
        self.offset as u128
            + last(batch, self.batch)
            + last(heads, self.head)
            + last(seq, self.seq)
            + u128::from(head_dim - 1)
    }

    /// Whether distinct `(b, h, s, d)` always land on distinct elements.
    fn is_injective(&self, batch: u32, heads: u32, seq: u32, head_dim: u32) -> bool {
        let mut dims: Vec<(u128, u128)> = [
            (1u128, head_dim),
            (self.seq as u128, seq),
            (self.head as u128, heads),
            (self.batch as u128, batch),
        ]
        .into_iter()
        .filter(|&(_, extent)| extent > 1)
        .map(|(stride, extent)| (stride, u128::from(extent)))
        .collect();
        dims.sort_unstable();
        let mut reach = 0u128;
        for (stride, extent) in dims {
            if stride <= reach {
                return false;
            }
            reach += stride * (extent - 1);
        }
        true
    }
}

/// The layouts of the four tensors of one attention launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AttentionLayouts {
    pub q: TensorLayout,
    pub k: TensorLayout,
    pub v: TensorLayout,
    pub o: TensorLayout,
}

/// A layout the kernel cannot use, found before launch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    #[error(
        "`{tensor}`: {what} = {value} is not a multiple of {vector} elements (the kernel's \
         aligned vector accesses)"
    )]
    Misaligned {
        tensor: &'static str,
        what: &'static str,
        value: usize,
        vector: u32,
    },
    #[error("`{tensor}` reaches element {max_index}, past its buffer of {len} elements")]
    OutOfBounds {
        tensor: &'static str,
        max_index: u128,
        len: usize,
    },
    #[error("`{tensor}` reaches element {max_index}, beyond the kernel's u32 element indices")]
    IndexRange {
        tensor: &'static str,
        max_index: u128,
    },
    #[error(
        "`{tensor}` strides (batch {batch}, head {head}, seq {seq}) make two outputs share an \
         element"
    )]
    Overlap {
        tensor: &'static str,
        batch: usize,
        head: usize,
        seq: usize,
    },
}

impl AttentionLayouts {
    /// Row-major `[B, H, S, D]` for every tensor (the default).
    pub const fn contiguous(shape: &AttentionShape, head_dim: u32) -> Self {
        let q = TensorLayout::bhsd(shape.heads_q, shape.seq_q, head_dim);
        let kv = TensorLayout::bhsd(shape.heads_kv, shape.seq_kv, head_dim);
        Self {
            q,
            k: kv,
            v: kv,
            o: q,
        }
    }

    /// Row-major `[B, S, H, D]` for every tensor.
    pub const fn bshd(shape: &AttentionShape, head_dim: u32) -> Self {
        let q = TensorLayout::bshd(shape.heads_q, shape.seq_q, head_dim);
        let kv = TensorLayout::bshd(shape.heads_kv, shape.seq_kv, head_dim);
        Self {
            q,
            k: kv,
            v: kv,
            o: q,
        }
    }

    /// Self-attention on one packed buffer `QKV [B, S, Hq + 2·Hkv, D]` (the output of one fused
    /// projection: Q heads, then K heads, then V heads per position; `S = seq_q = seq_kv`), and
    /// `O [B, S, Hq, D]`. Pass the packed buffer as `q`, `k` and `v`.
    pub const fn packed_qkv(shape: &AttentionShape, head_dim: u32) -> Self {
        let d = head_dim as usize;
        let (hq, hkv, s) = (
            shape.heads_q as usize,
            shape.heads_kv as usize,
            shape.seq_q as usize,
        );
        let row = (hq + 2 * hkv) * d;
        let q = TensorLayout {
            offset: 0,
            batch: s * row,
            head: d,
            seq: row,
        };
        Self {
            q,
            k: q.at(hq * d),
            v: q.at((hq + hkv) * d),
            o: TensorLayout::bshd(shape.heads_q, shape.seq_q, head_dim),
        }
    }

    /// K and V in a preallocated cache `[B, Hkv, capacity, D]` of which the first `seq_kv`
    /// positions are filled; Q and O contiguous `[B, Hq, Sq, D]`.
    pub const fn kv_cache(shape: &AttentionShape, head_dim: u32, capacity: u32) -> Self {
        let kv = TensorLayout::bhsd(shape.heads_kv, capacity, head_dim);
        let q = TensorLayout::bhsd(shape.heads_q, shape.seq_q, head_dim);
        Self {
            q,
            k: kv,
            v: kv,
            o: q,
        }
    }

    /// Checks every rule of the module doc against the buffer lengths `[q, k, v, o]` and the
    /// kernel's vector width `vector` (elements).
    pub fn check(
        &self,
        shape: &AttentionShape,
        head_dim: u32,
        vector: u32,
        lens: [usize; 4],
    ) -> Result<(), LayoutError> {
        let tensors = [
            ("q", &self.q, shape.heads_q, shape.seq_q, lens[0]),
            ("k", &self.k, shape.heads_kv, shape.seq_kv, lens[1]),
            ("v", &self.v, shape.heads_kv, shape.seq_kv, lens[2]),
            ("o", &self.o, shape.heads_q, shape.seq_q, lens[3]),
        ];
        for (tensor, layout, heads, seq, len) in tensors {
            for (what, value) in [
                ("offset", layout.offset),
                ("batch stride", layout.batch),
                ("head stride", layout.head),
                ("seq stride", layout.seq),
            ] {
                if value % vector as usize != 0 {
                    return Err(LayoutError::Misaligned {
                        tensor,
                        what,
                        value,
                        vector,
                    });
                }
            }
            let max_index = layout.max_index(shape.batch, heads, seq, head_dim);
            if max_index > u128::from(INDEX_BOUND.limit) {
                return Err(LayoutError::IndexRange { tensor, max_index });
            }
            if max_index >= len as u128 {
                return Err(LayoutError::OutOfBounds {
                    tensor,
                    max_index,
                    len,
                });
            }
        }
        if !self
            .o
            .is_injective(shape.batch, shape.heads_q, shape.seq_q, head_dim)
        {
            return Err(LayoutError::Overlap {
                tensor: "o",
                batch: self.o.batch,
                head: self.o.head,
                seq: self.o.seq,
            });
        }
        Ok(())
    }

    /// The 16 `u32` kernel arguments: offset, batch, head and seq stride of q, k, v, o (call
    /// after [`Self::check`], which bounds every one by the u32 index range).
    pub fn kernel_args(&self) -> [u32; 16] {
        let mut out = [0u32; 16];
        for (i, l) in [self.q, self.k, self.v, self.o].iter().enumerate() {
            for (j, v) in [l.offset, l.batch, l.head, l.seq].into_iter().enumerate() {
                out[4 * i + j] = u32::try_from(v).unwrap_or(u32::MAX);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> AttentionShape {
        AttentionShape {
            batch: 2,
            heads_q: 4,
            heads_kv: 2,
            seq_q: 5,
            seq_kv: 7,
        }
    }

    #[test]
    fn standard_layouts_pass_with_exact_buffers() {
        let s = shape();
        let (q, kv) = (s.q_len(32), s.kv_len(32));
        for l in [
            AttentionLayouts::contiguous(&s, 32),
            AttentionLayouts::bshd(&s, 32),
        ] {
            assert_eq!(l.check(&s, 32, 4, [q, kv, kv, q]), Ok(()));
            assert!(matches!(
                l.check(&s, 32, 4, [q, kv - 1, kv, q]),
                Err(LayoutError::OutOfBounds { tensor: "k", .. })
            ));
        }
        let self_attn = AttentionShape { seq_kv: 5, ..s };
        let packed = 2 * 5 * (4 + 2 * 2) * 32;
        let l = AttentionLayouts::packed_qkv(&self_attn, 32);
        assert_eq!(
            l.check(&self_attn, 32, 4, [packed, packed, packed, q]),
            Ok(())
        );
        let cache = 2 * 2 * 16 * 32;
        let l = AttentionLayouts::kv_cache(&s, 32, 16);
        assert_eq!(l.check(&s, 32, 4, [q, cache, cache, q]), Ok(()));
    }

    #[test]
    fn rejects_overlap_misalignment_and_index_range() {
        let s = shape();
        let q = s.q_len(32);
        let kv = s.kv_len(32);
        let mut l = AttentionLayouts::contiguous(&s, 32);
        l.o.seq = 16; // rows of 32 elements 16 apart overlap
        assert!(matches!(
            l.check(&s, 32, 4, [q, kv, kv, q]),
            Err(LayoutError::Overlap { tensor: "o", .. })
        ));
        // Inputs may overlap (broadcast K/V over batches with batch stride 0).
        let mut l = AttentionLayouts::contiguous(&s, 32);
        l.k.batch = 0;
        assert_eq!(l.check(&s, 32, 4, [q, kv, kv, q]), Ok(()));
        l.o.batch = 0;
        assert!(matches!(
            l.check(&s, 32, 4, [q, kv, kv, q]),
            Err(LayoutError::Overlap { .. })
        ));
        let mut l = AttentionLayouts::contiguous(&s, 32);
        l.v.offset = 2;
        assert!(matches!(
            l.check(&s, 32, 4, [q, kv, kv + 2, q]),
            Err(LayoutError::Misaligned {
                tensor: "v",
                what: "offset",
                ..
            })
        ));
        let mut l = AttentionLayouts::contiguous(&s, 32);
        l.q.batch = 1 << 32; // (B − 1) · 2³² alone passes the u32 index range
        assert!(matches!(
            l.check(&s, 32, 4, [usize::MAX, kv, kv, q]),
            Err(LayoutError::IndexRange { tensor: "q", .. })
        ));
    }
}
