//! Global → shared copies of pieces of row-major rows (f16/bf16, or f32 for tf32) into the
//! tensor-core rings: by `cp.async` when the row length keeps every piece 4-byte aligned,
//! element by element with ordinary loads and stores when it does not (odd lengths of halves).

use crate::builder::{GlobalPtr, KernelBuilder, Pred, Reg, Scalar, U16, U32, U64};
use crate::ir::CacheLevel;

/// Elements per copy of rows `len` elements long, at most `max` (a power of two ≤ 8, the
/// elements of 16 bytes): the largest copy (8, 4 or 2 elements) dividing `len`, so every copy
/// of a row is aligned and wholly inside or outside it; else 1 (for halves, ordinary loads and
/// stores, as `cp.async` cannot keep 2-byte pieces 4-byte aligned; for f32, a 4-byte copy).
pub(crate) fn copy_elems(len: u32, max: u32) -> u32 {
    [8, 4, 2]
        .into_iter()
        .find(|&c| c <= max && len.is_multiple_of(c))
        .unwrap_or(1)
}

/// `dst[0 .. elems] = src[index ..]` when `ok`, else zeros: one `cp.async` of `elems` elements
/// (zero-filled by src-size 0, reading from `src` itself), or for a single half an
/// `ld.global.nc` and an `st.shared` (the barrier that publishes the ring slot covers the
/// store as it covers the copies).
pub(crate) fn copy_piece<T: Scalar>(
    k: &mut KernelBuilder,
    src: GlobalPtr<T>,
    index: Reg<U32>,
    ok: Pred,
    dst: Reg<U32>,
    elems: u32,
) {
    let index = k.selp(index, 0u32, ok);
    let from = k.elem_addr(src, index);
    copy_piece_from::<T>(k, from, ok, None, dst, 0, elems);
}

/// [`copy_piece`] from a global address already formed (`from` must be a valid address even
/// when not `ok`) to `[dst+offset]`; `src_bytes`, the `cp.async` source size, is
/// `ok ? bytes : 0` computed here when not given.
pub(crate) fn copy_piece_from<T: Scalar>(
    k: &mut KernelBuilder,
    from: Reg<U64>,
    ok: Pred,
    src_bytes: Option<Reg<U32>>,
    dst: Reg<U32>,
    offset: i32,
    elems: u32,
) {
    let bytes = elems * T::TYPE.bytes();
    if bytes < 4 {
        debug_assert_eq!(bytes, 2, "one half");
        let value = k.var::<U16>(0u16);
        k.if_then(ok, |k| {
            let v = k.ld_global_nc::<U16>(from, 0);
            k.assign(value, v);
        });
        k.st_shared::<U16>(dst, offset, value);
    } else {
        let cache = if bytes == 16 {
            CacheLevel::Cg
        } else {
            CacheLevel::Ca
        };
        let src_bytes = src_bytes.unwrap_or_else(|| k.selp(bytes, 0u32, ok));
        k.cp_async_zfill_at(cache, dst, offset, from, bytes, src_bytes);
    }
}
