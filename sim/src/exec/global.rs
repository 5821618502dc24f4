//! How a block sees global memory. [`GlobalSpace`] is what the engine needs (locate, read, write,
//! init state); it has two implementations:
//! - `GlobalMem` itself, for blocks that run one at a time: every store lands at once and later
//!   blocks see it.
//! - [`SnapshotView`], for blocks that run on worker threads: reads see the device memory as of
//!   launch start (shared, read-only) plus the block's own stores, which go to private
//!   copy-on-write pages. After the block, [`SnapshotView::take_log`] turns those pages into a
//!   [`WriteLog`]; the launcher applies the logs in block order, so the final memory equals the
//!   sequential run's whenever no block reads bytes another block writes in the same launch.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::memory::{Fault, GlobalMem};

/// Global memory as the engine uses it.
pub(crate) trait GlobalSpace {
    /// Finds the live buffer holding `[addr, addr + size)`; returns (buffer index, offset).
    fn locate(&self, addr: u64, size: u64) -> Result<(usize, usize), Fault>;
    /// Reads `size` (≤ 8) little-endian bytes.
    fn read(&self, buf: usize, off: usize, size: usize) -> u64;
    /// Writes `size` (≤ 8) little-endian bytes and marks them initialised.
    fn write(&mut self, buf: usize, off: usize, size: usize, val: u64);
    /// Whether every byte of `[off, off + size)` was written or uploaded.
    fn is_init(&self, buf: usize, off: usize, size: usize) -> bool;
}

impl GlobalSpace for GlobalMem {
    #[inline]
    fn locate(&self, addr: u64, size: u64) -> Result<(usize, usize), Fault> {
        GlobalMem::locate(self, addr, size)
    }

    #[inline]
    fn read(&self, buf: usize, off: usize, size: usize) -> u64 {
        GlobalMem::read(self, buf, off, size)
    }

    #[inline]
    fn write(&mut self, buf: usize, off: usize, size: usize, val: u64) {
        GlobalMem::write(self, buf, off, size, val);
        self.buffers[buf].mark_init(off, size);
    }

    #[inline]
    fn is_init(&self, buf: usize, off: usize, size: usize) -> bool {
        self.buffers[buf].is_init(off, size)
    }
}

/// Bytes per copy-on-write page (buffers are 256-byte aligned, so pages never straddle two).
const PAGE: usize = 256;

/// A block's private copy of one page of a buffer.
#[derive(Debug, Clone)]
struct Page {
    buf: u32,
    /// Page index within the buffer.
    index: u32,
    /// The page as the block sees it: the snapshot's bytes overwritten by the block's stores.
    data: [u8; PAGE],
    /// One bit per byte: stored by this block.
    written: [u64; PAGE / 64],
}

/// Hashes a page key (`buf << 32 | index`) with one multiply: keys are small dense integers.
#[derive(Default)]
struct PageKeyHasher(u64);

impl Hasher for PageKeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u64(&mut self, k: u64) {
        self.0 = (k ^ (k >> 29)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// The global stores of one block, as runs of bytes, to be applied after the launch.
#[derive(Debug, Default)]
pub(crate) struct WriteLog {
    /// (buffer, offset, length) of each run, in `bytes` one after the other.
    runs: Vec<(u32, usize, usize)>,
    bytes: Vec<u8>,
}

impl WriteLog {
    /// Stores the logged bytes into `mem` and marks them initialised.
    pub fn apply(&self, mem: &mut GlobalMem) {
        let mut at = 0;
        for &(buf, off, len) in &self.runs {
            let b = &mut mem.buffers[buf as usize];
            b.data[off..off + len].copy_from_slice(&self.bytes[at..at + len]);
            b.mark_init(off, len);
            at += len;
        }
    }
}

/// Launch-start global memory plus one block's own stores (see the module doc).
#[derive(Debug)]
pub(crate) struct SnapshotView<'a> {
    base: &'a GlobalMem,
    pages: Vec<Page>,
    page_of: HashMap<u64, u32, BuildHasherDefault<PageKeyHasher>>,
    /// Per buffer: whether the block has stored into it (reads of other buffers skip the lookup).
    dirty: Vec<bool>,
}

impl<'a> SnapshotView<'a> {
    pub fn new(base: &'a GlobalMem) -> Self {
        SnapshotView {
            base,
            pages: Vec::new(),
            page_of: HashMap::default(),
            dirty: vec![false; base.buffers.len()],
        }
    }

    #[inline]
    fn key(buf: usize, index: usize) -> u64 {
        ((buf as u64) << 32) | index as u64
    }

    #[inline]
    fn page(&self, buf: usize, off: usize) -> Option<&Page> {
        if !self.dirty[buf] {
            return None;
        }
        let i = *self.page_of.get(&Self::key(buf, off / PAGE))?;
        Some(&self.pages[i as usize])
    }

    fn page_mut(&mut self, buf: usize, off: usize) -> &mut Page {
        let index = off / PAGE;
        let key = Self::key(buf, index);
        let i = match self.page_of.get(&key) {
            Some(&i) => i as usize,
            None => {
                let src = &self.base.buffers[buf].data;
                let start = index * PAGE;
                let end = (start + PAGE).min(src.len());
                let mut data = [0u8; PAGE];
                data[..end - start].copy_from_slice(&src[start..end]);
                self.pages.push(Page {
                    buf: buf as u32,
                    index: index as u32,
                    data,
                    written: [0; PAGE / 64],
                });
                self.dirty[buf] = true;
                let i = self.pages.len() - 1;
                self.page_of.insert(key, i as u32);
                i
            }
        };
        &mut self.pages[i]
    }

    fn read_byte(&self, buf: usize, off: usize) -> u8 {
        match self.page(buf, off) {
            Some(p) => p.data[off % PAGE],
            None => self.base.buffers[buf].data[off],
        }
    }

    fn byte_init(&self, buf: usize, off: usize) -> bool {
        let at = off % PAGE;
        self.page(buf, off)
            .is_some_and(|p| p.written[at / 64] >> (at % 64) & 1 == 1)
            || self.base.buffers[buf].is_init(off, 1)
    }

    /// Hands out the block's stores and forgets them, ready for the next block.
    pub fn take_log(&mut self) -> WriteLog {
        let mut log = WriteLog::default();
        for p in self.pages.drain(..) {
            let bit = |i: usize| p.written[i / 64] >> (i % 64) & 1 == 1;
            let mut i = 0;
            while i < PAGE {
                if !bit(i) {
                    i += 1;
                    continue;
                }
                let start = i;
                while i < PAGE && bit(i) {
                    i += 1;
                }
                log.runs
                    .push((p.buf, p.index as usize * PAGE + start, i - start));
                log.bytes.extend_from_slice(&p.data[start..i]);
            }
            self.dirty[p.buf as usize] = false;
        }
        self.page_of.clear();
        log
    }
}

impl GlobalSpace for SnapshotView<'_> {
    #[inline]
    fn locate(&self, addr: u64, size: u64) -> Result<(usize, usize), Fault> {
        self.base.locate(addr, size)
    }

    #[inline]
    fn read(&self, buf: usize, off: usize, size: usize) -> u64 {
        if !self.dirty[buf] {
            return self.base.read(buf, off, size);
        }
        let mut v = [0u8; 8];
        if off / PAGE == (off + size - 1) / PAGE {
            let at = off % PAGE;
            match self.page(buf, off) {
                Some(p) => v[..size].copy_from_slice(&p.data[at..at + size]),
                None => return self.base.read(buf, off, size),
            }
        } else {
            for (i, b) in v.iter_mut().enumerate().take(size) {
                *b = self.read_byte(buf, off + i);
            }
        }
        u64::from_le_bytes(v)
    }

    fn write(&mut self, buf: usize, off: usize, size: usize, val: u64) {
        let bytes = val.to_le_bytes();
        let mut i = 0;
        while i < size {
            // The part of the access inside one page.
            let at = (off + i) % PAGE;
            let n = (size - i).min(PAGE - at);
            let p = self.page_mut(buf, off + i);
            p.data[at..at + n].copy_from_slice(&bytes[i..i + n]);
            for j in at..at + n {
                p.written[j / 64] |= 1 << (j % 64);
            }
            i += n;
        }
    }

    #[inline]
    fn is_init(&self, buf: usize, off: usize, size: usize) -> bool {
        if !self.dirty[buf] {
            return self.base.buffers[buf].is_init(off, size);
        }
        (off..off + size).all(|i| self.byte_init(buf, i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_view_sees_its_own_stores_and_logs_only_them() {
        let mut mem = GlobalMem::default();
        let a = mem.alloc(1000, true);
        let b = mem.alloc(600, false);
        for (i, x) in mem.buffers[a].data.iter_mut().enumerate() {
            *x = i as u8;
        }
        let before = mem.clone();
        let mut v = SnapshotView::new(&before);
        assert_eq!(v.read(a, 4, 4), 0x0706_0504);
        // A store straddling a page boundary, and one into an uninitialised buffer.
        v.write(a, 254, 4, 0xaabb_ccdd);
        v.write(b, 300, 2, 0x1234);
        assert_eq!(v.read(a, 254, 4), 0xaabb_ccdd);
        assert_eq!(v.read(a, 252, 2), 0xfdfc);
        assert_eq!(
            v.read(a, 258, 1),
            2,
            "byte 258 of a keeps its snapshot value"
        );
        assert!(v.is_init(b, 300, 2));
        assert!(!v.is_init(b, 299, 2));
        assert!(!v.is_init(b, 0, 1));
        let log = v.take_log();
        assert_eq!(
            v.read(a, 254, 4),
            u32::from_le_bytes([254, 255, 0, 1]).into()
        );
        assert!(!v.is_init(b, 300, 2), "the view forgets the block's stores");
        log.apply(&mut mem);
        assert_eq!(mem.read(a, 254, 4), 0xaabb_ccdd);
        assert_eq!(
            mem.read(a, 250, 4),
            u32::from_le_bytes([250, 251, 252, 253]).into()
        );
        assert_eq!(mem.read(b, 300, 2), 0x1234);
        assert!(mem.buffers[b].is_init(300, 2));
        assert!(!mem.buffers[b].is_init(302, 1));
        assert!(!mem.buffers[b].is_init(299, 1));
    }
}
