//! Simulated device memory: global buffers (with per-byte initialisation state for initcheck) and
//! the address map. Global buffers get distinct, 256-byte-aligned addresses with unmapped gaps
//! between them, so an overrun never lands in a neighbour. Shared and local memory live in
//! per-block / per-thread byte vectors; in the generic address space they appear at the fixed
//! windows [`SHARED_WINDOW`] and [`LOCAL_WINDOW`].

/// First global buffer address.
pub const GLOBAL_BASE: u64 = 0x1_0000_0000;
/// Unmapped bytes between consecutive buffers (at least).
pub const BUFFER_GAP: u64 = 64 * 1024;
/// Generic address of shared-memory offset 0.
pub const SHARED_WINDOW: u64 = 0x7f00_0000_0000;
/// Generic address of local-memory offset 0.
pub const LOCAL_WINDOW: u64 = 0x7e00_0000_0000;
/// Size of each generic window.
pub const WINDOW_SIZE: u64 = 1 << 32;

/// One device allocation.
#[derive(Debug, Clone)]
pub struct Buffer {
    pub base: u64,
    pub data: Vec<u8>,
    /// One bit per byte: written or uploaded.
    pub init: Vec<u64>,
    pub live: bool,
}

impl Buffer {
    pub fn is_init(&self, off: usize, size: usize) -> bool {
        (off..off + size).all(|i| self.init[i / 64] >> (i % 64) & 1 == 1)
    }

    pub fn mark_init(&mut self, off: usize, size: usize) {
        for i in off..off + size {
            self.init[i / 64] |= 1 << (i % 64);
        }
    }

    pub fn mark_all_init(&mut self) {
        self.init.iter_mut().for_each(|w| *w = u64::MAX);
    }
}

/// Why a global access failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    pub message: String,
}

/// All global buffers of a device.
#[derive(Debug, Clone, Default)]
pub struct GlobalMem {
    pub buffers: Vec<Buffer>,
    next: u64,
}

impl GlobalMem {
    /// Allocates `bytes` (uninitialised unless `init`) and returns the buffer index.
    pub fn alloc(&mut self, bytes: usize, init: bool) -> usize {
        if self.next == 0 {
            self.next = GLOBAL_BASE;
        }
        let base = self.next;
        let span = (bytes as u64).div_ceil(256) * 256;
        self.next = base + span + BUFFER_GAP;
        let mut b = Buffer {
            base,
            data: vec![0; bytes],
            init: vec![0; bytes.div_ceil(64)],
            live: true,
        };
        if init {
            b.mark_all_init();
        }
        self.buffers.push(b);
        self.buffers.len() - 1
    }

    /// Finds the live buffer holding `[addr, addr + size)`; returns (buffer index, offset).
    #[inline]
    pub fn locate(&self, addr: u64, size: u64) -> Result<(usize, usize), Fault> {
        let idx = self.buffers.partition_point(|b| b.base <= addr);
        if idx == 0 {
            return Err(self.describe(addr, size, None));
        }
        let b = &self.buffers[idx - 1];
        let end = b.base + b.data.len() as u64;
        if b.live && addr.checked_add(size).is_some_and(|e| e <= end) {
            return Ok((idx - 1, (addr - b.base) as usize));
        }
        Err(self.describe(addr, size, Some(idx - 1)))
    }

    fn describe(&self, addr: u64, size: u64, near: Option<usize>) -> Fault {
        let message = match near {
            Some(i) => {
                let b = &self.buffers[i];
                let end = b.base + b.data.len() as u64;
                if !b.live && addr < end.max(b.base + 1) {
                    format!("{size}-byte access at 0x{addr:x} is inside freed buffer #{i}")
                } else if addr < end {
                    format!(
                        "{size}-byte access at 0x{addr:x} runs past the end of buffer #{i} (0x{:x}, {} bytes)",
                        b.base,
                        b.data.len()
                    )
                } else {
                    format!(
                        "{size}-byte access at 0x{addr:x} is {} bytes past the end of buffer #{i} (0x{:x}, {} bytes)",
                        addr - end,
                        b.base,
                        b.data.len()
                    )
                }
            }
            None => format!("{size}-byte access at 0x{addr:x} is not inside any allocation"),
        };
        Fault { message }
    }

    #[inline]
    pub fn read(&self, buf: usize, off: usize, size: usize) -> u64 {
        let mut v = [0u8; 8];
        v[..size].copy_from_slice(&self.buffers[buf].data[off..off + size]);
        u64::from_le_bytes(v)
    }

    #[inline]
    pub fn write(&mut self, buf: usize, off: usize, size: usize, val: u64) {
        self.buffers[buf].data[off..off + size].copy_from_slice(&val.to_le_bytes()[..size]);
    }
}

/// Reads `size` (≤ 8) little-endian bytes at `off` of `mem`, or `None` when out of range.
#[inline]
pub fn read_bytes(mem: &[u8], off: u64, size: usize) -> Option<u64> {
    let off = usize::try_from(off).ok()?;
    let bytes = mem.get(off..off.checked_add(size)?)?;
    let mut v = [0u8; 8];
    v[..size].copy_from_slice(bytes);
    Some(u64::from_le_bytes(v))
}

/// Writes `size` (≤ 8) little-endian bytes at `off`; `false` when out of range.
#[inline]
pub fn write_bytes(mem: &mut [u8], off: u64, size: usize, val: u64) -> bool {
    let Ok(off) = usize::try_from(off) else {
        return false;
    };
    let Some(end) = off.checked_add(size) else {
        return false;
    };
    match mem.get_mut(off..end) {
        Some(dst) => {
            dst.copy_from_slice(&val.to_le_bytes()[..size]);
            true
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_aligned_and_separated() {
        let mut g = GlobalMem::default();
        let a = g.alloc(10, false);
        let b = g.alloc(300, true);
        assert_eq!(g.buffers[a].base % 256, 0);
        assert_eq!(g.buffers[b].base % 256, 0);
        assert!(g.buffers[b].base >= g.buffers[a].base + 256 + BUFFER_GAP);
        assert!(g.locate(g.buffers[a].base + 8, 2).is_ok());
        assert!(g.locate(g.buffers[a].base + 8, 4).is_err());
        assert!(g.locate(g.buffers[a].base + 10, 1).is_err());
        assert!(g.locate(5, 1).is_err());
        assert!(!g.buffers[a].is_init(0, 1));
        assert!(g.buffers[b].is_init(0, 300));
    }
}
