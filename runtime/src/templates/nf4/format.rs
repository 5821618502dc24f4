//! The NF4 storage format (bitsandbytes-compatible).

/// Second-level block size of double quantisation (absmax values per 8-bit block).
pub const ABSMAX_BLOCK: usize = 256;
