//! 16-byte global accesses of a conv element type: one `ld.global.nc.v4` / `.v2` moves a
//! *chunk* of [`VectorElem::CHUNK`] consecutive elements (8 halves, 4 f32, 2 f64), widened
//! to the accumulation type on load and rounded back on store. Halves move as `.b32` words
//! (two elements each, the lower index in bits 0..16) and are split or packed with `mov.b32`,
//! so no form needs more than sm_70.

use super::common::ConvElem;
use crate::builder::{
    GlobalPtr, KernelBuilder, PackedHalf, Pred, Reg, Scalar, BF16, F16, F32, F64, U32, U64,
};

/// Bytes of one chunk (and of one `ld.global.v4.b32`).
pub(crate) const CHUNK_BYTES: u32 = 16;

/// An element type that moves 16 bytes at a time as `WORDS` words of type `Word`.
pub(crate) trait VectorElem: ConvElem {
    /// Elements per 16-byte chunk.
    const CHUNK: u32 = CHUNK_BYTES / Self::TYPE.bytes();
    /// The register type one vector lane carries.
    type Word: Scalar;
    /// Words per chunk (4 or 2: the `.v4` / `.v2` form).
    const WORDS: usize;
    /// A zero word (the value of chunks outside the problem).
    fn zero_word(k: &mut KernelBuilder) -> Reg<Self::Word>;
    /// The chunk's elements, in order, widened.
    fn widen_words(k: &mut KernelBuilder, words: &[Reg<Self::Word>]) -> Vec<Reg<Self::Acc>>;
    /// The words holding `values` rounded to the storage type.
    fn narrow_words(k: &mut KernelBuilder, values: &[Reg<Self::Acc>]) -> Vec<Reg<Self::Word>>;
}

fn widen_halves<H: PackedHalf + ConvElem>(
    k: &mut KernelBuilder,
    words: &[Reg<U32>],
) -> Vec<Reg<F32>> {
    let mut out = Vec::with_capacity(words.len() * 2);
    for &w in words {
        let (lo, hi) = k.unpack_halves::<H>(w.retype());
        out.push(k.to_f32(lo));
        out.push(k.to_f32(hi));
    }
    out
}

fn narrow_halves<H: PackedHalf + ConvElem>(
    k: &mut KernelBuilder,
    values: &[Reg<F32>],
) -> Vec<Reg<U32>> {
    values
        .chunks_exact(2)
        .map(|pair| {
            let lo = k.from_f32::<H>(pair[0]);
            let hi = k.from_f32::<H>(pair[1]);
            k.pack_halves::<H>(lo, hi).retype()
        })
        .collect()
}

macro_rules! half_vector_elem {
    ($t:ty) => {
        impl VectorElem for $t {
            type Word = U32;
            const WORDS: usize = 4;
            fn zero_word(k: &mut KernelBuilder) -> Reg<U32> {
                k.var::<U32>(0u32)
            }
            fn widen_words(k: &mut KernelBuilder, words: &[Reg<U32>]) -> Vec<Reg<F32>> {
                widen_halves::<$t>(k, words)
            }
            fn narrow_words(k: &mut KernelBuilder, values: &[Reg<F32>]) -> Vec<Reg<U32>> {
                narrow_halves::<$t>(k, values)
            }
        }
    };
}

half_vector_elem!(F16);
half_vector_elem!(BF16);

macro_rules! native_vector_elem {
    ($t:ty, $words:expr) => {
        impl VectorElem for $t {
            type Word = $t;
            const WORDS: usize = $words;
            fn zero_word(k: &mut KernelBuilder) -> Reg<$t> {
                k.zero::<$t>()
            }
            fn widen_words(_: &mut KernelBuilder, words: &[Reg<$t>]) -> Vec<Reg<$t>> {
                words.to_vec()
            }
            fn narrow_words(_: &mut KernelBuilder, values: &[Reg<$t>]) -> Vec<Reg<$t>> {
                values.to_vec()
            }
        }
    };
}

native_vector_elem!(F32, 4);
native_vector_elem!(F64, 2);

/// `ok ? widen(ptr[index .. index + CHUNK]) : 0`, one 16-byte `ld.global.nc` under `ok`
/// (`index` a multiple of the chunk, so the address is 16-byte aligned).
pub(crate) fn load_chunk_or_zero<T: VectorElem>(
    k: &mut KernelBuilder,
    ptr: GlobalPtr<T>,
    index: Reg<U32>,
    ok: Pred,
) -> Vec<Reg<T::Acc>> {
    let words: Vec<Reg<T::Word>> = (0..T::WORDS).map(|_| T::zero_word(k)).collect();
    k.if_then(ok, |k| {
        for (&d, v) in words.iter().zip(load_words(k, ptr, index)) {
            k.assign(d, v);
        }
    });
    T::widen_words(k, &words)
}

/// `widen(ptr[index .. index + CHUNK])`, one 16-byte `ld.global.nc` (`index` a multiple of
/// the chunk).
pub(crate) fn load_chunk<T: VectorElem>(
    k: &mut KernelBuilder,
    ptr: GlobalPtr<T>,
    index: Reg<U32>,
) -> Vec<Reg<T::Acc>> {
    let words = load_words(k, ptr, index);
    T::widen_words(k, &words)
}

/// The words of chunk `ptr[index ..]`: one `ld.global.nc.v4` / `.v2`.
fn load_words<T: VectorElem>(
    k: &mut KernelBuilder,
    ptr: GlobalPtr<T>,
    index: Reg<U32>,
) -> Vec<Reg<T::Word>> {
    let addr = k.elem_addr(ptr, index);
    match T::WORDS {
        4 => k.ld_global_v4::<T::Word>(addr, 0, true).to_vec(),
        _ => k.ld_global_v2::<T::Word>(addr, 0, true).to_vec(),
    }
}

/// `[addr + offset] = words` (from [`VectorElem::narrow_words`]): one 16-byte `st.global`
/// (`addr + offset` 16-byte aligned).
pub(crate) fn store_chunk<W: Scalar>(
    k: &mut KernelBuilder,
    addr: Reg<U64>,
    offset: u32,
    words: &[Reg<W>],
) {
    let offset = offset as i32;
    match *words {
        [a, b, c, d] => k.st_global_v4::<W>(addr, offset, [a, b, c, d]),
        [a, b] => k.st_global_v2::<W>(addr, offset, [a, b]),
        _ => unreachable!("a chunk is 2 or 4 words"),
    }
}
