//! Global → shared copies of pieces of row-major f16/bf16 rows into the tensor-core rings: by
//! `cp.async` when the row length keeps every piece 4-byte aligned, element by element with
//! ordinary loads and stores when it does not (odd lengths).

use crate::builder::{GlobalPtr, KernelBuilder, PackedHalf, Pred, Reg, U16, U32};
use crate::ir::CacheLevel;

/// Elements per copy of rows `len` elements long, at most `max` (a power of two ≤ 8): the
/// largest `cp.async` (8, 4 or 2 halves: 16, 8 or 4 bytes) dividing `len`, so every copy of a
/// row is aligned and wholly inside or outside it; 1 (ordinary loads and stores) for odd `len`,
/// which `cp.async` cannot keep 4-byte aligned.
pub(crate) fn copy_elems(len: u32, max: u32) -> u32 {
    [8, 4, 2]
        .into_iter()
        .find(|&c| c <= max && len.is_multiple_of(c))
        .unwrap_or(1)
}

/// `dst[0 .. elems] = src[index ..]` when `ok`, else zeros: one `cp.async` of `elems` halves
/// (zero-filled by src-size 0, reading from `src` itself), or for `elems = 1` an
/// `ld.global.nc` and an `st.shared` (the barrier that publishes the ring slot covers the
/// store as it covers the copies).
pub(crate) fn copy_piece<T: PackedHalf>(
    k: &mut KernelBuilder,
    src: GlobalPtr<T>,
    index: Reg<U32>,
    ok: Pred,
    dst: Reg<U32>,
    elems: u32,
) {
    let index = k.selp(index, 0u32, ok);
    let from = k.elem_addr(src, index);
    if elems == 1 {
        let value = k.var::<U16>(0u16);
        k.if_then(ok, |k| {
            let v = k.ld_global_nc::<U16>(from, 0);
            k.assign(value, v);
        });
        k.st_shared::<U16>(dst, 0, value);
    } else {
        let bytes = elems * T::TYPE.bytes();
        let cache = if bytes == 16 {
            CacheLevel::Cg
        } else {
            CacheLevel::Ca
        };
        let src_bytes = k.selp(bytes, 0u32, ok);
        k.cp_async_zfill(cache, dst, from, bytes, src_bytes);
    }
}
