//! The NF4 storage format, bitsandbytes-compatible, and its host quantise/dequantise helpers.
//!
//! # Layout
//!
//! A weight of `len` values (row-major `W [n, k]` flattened) is cut into blocks of `block`
//! consecutive values; block `b` covers elements `b·block .. min((b+1)·block, len)`. Each block
//! stores one `f32` absmax (`max |x|` over the block). Each value is normalised,
//! `x · (1 / absmax)` (the reciprocal first, in f32, exactly as bitsandbytes' CUDA kernel does),
//! and replaced by the 4-bit index of the nearest [`NF4_CODE`] entry, chosen by the midpoint
//! thresholds between adjacent codes ([`thresholds`]): the index is the number of thresholds
//! strictly below the value, so a value exactly on a midpoint takes the lower code (bitsandbytes'
//! `dQuantizeNF4` tests `x > threshold`). Element `2j` goes in the **high** nibble of byte `j`,
//! element `2j + 1` in the low nibble; `packed.len() = ceil(len / 2)`.
//!
//! Ragged tails (bitsandbytes behaviour): the last block may be shorter than `block`; its
//! absmax covers only the values that exist, its values are normalised by a division `x /
//! absmax` (bitsandbytes' quantiser divides in the tail and multiplies by the reciprocal in full
//! blocks), and an all-zero tail stores absmax `1e-38` (bitsandbytes clamps it there). For odd `len` the missing element `len` is
//! quantised as 0.0 (bitsandbytes pads its loads with zeros), so the last byte's low nibble is
//! code 7.
//!
//! Zero blocks: a full block whose absmax is 0 stores absmax 0 and code 7 (the 0.0 code) for
//! every element, as bitsandbytes' quantiser does (it normalises by `max(absmax, 1e-38)`).
//!
//! Dequantisation: `x̂ = NF4_CODE[code] · absmax[block]`, one f32 multiply.
//!
//! # Double quantisation (bitsandbytes' `compress_statistics=True`)
//!
//! With `double_quant` the absmax values are stored in 8 bits exactly as bitsandbytes'
//! `quantize_4bit(.., compress_statistics=True)` stores them, so a checkpoint's nested state loads
//! as it is ([`super::checkpoint`]):
//!
//! - `offset = mean(absmax)`, one f32 (bitsandbytes' `_absmax.mean()`);
//! - the residuals `r = absmax − offset` (f32) are cut into blocks of [`ABSMAX_BLOCK`] = 256, each
//!   with one f32 `nested_absmax = max |r|` over the block;
//! - each residual is normalised, `r · (1 / nested_absmax)` (the reciprocal first, as
//!   bitsandbytes' blockwise kernel does), and replaced by the index of the nearest entry of
//!   bitsandbytes' signed dynamic 8-bit map ([`dynamic_map`], `create_dynamic_map(signed=True)`),
//!   found by that kernel's pivot search ([`quantize_dynamic`]);
//! - dequantisation: `absmax = map[code] · nested_absmax[i / 256] + offset`, a multiply and an add
//!   each rounded to f32 (`mul.rn.f32`, `add.rn.f32` in the kernels: never fused), as
//!   bitsandbytes' `dequantize_blockwise(..) + offset` computes it.
//!
//! The offset is a torch f32 `mean()`, whose summation order depends on the CPU's vector width;
//! [`quantize_absmax`] takes the exact mean rounded to f32, which may differ from a given torch
//! build's by one ulp. Given bitsandbytes' offset, [`quantize_absmax_with_offset`] reproduces its
//! codes and nested absmax byte for byte (checked against real bitsandbytes output in
//! `runtime/tests/nf4_checkpoint.rs`). bitsandbytes' CPU library searches the map with an
//! approximate binary search and, for residuals within about 1 % of a midpoint between two map
//! entries, sometimes picks the farther one (about 0.15 % of codes on Gaussian data; none in the
//! test files); its CUDA kernel's pivot search, which [`quantize_dynamic`] follows, picks the
//! nearest. Either way the stored codes decode identically.

/// Second-level block size of double quantisation (absmax values per 8-bit block).
pub const ABSMAX_BLOCK: usize = 256;

/// The 16 NF4 code values (bitsandbytes' `NF4` map), index 0..15, ascending.
// The digits are bitsandbytes' (f64 prints of the f32 values), kept verbatim for comparison.
#[allow(clippy::excessive_precision)]
pub const NF4_CODE: [f32; 16] = [
    -1.0,
    -0.696_192_800_998_687_7,
    -0.525_073_051_452_636_7,
    -0.394_917_488_098_144_53,
    -0.284_441_381_692_886_35,
    -0.184_773_430_228_233_34,
    -0.091_050_036_251_544_95,
    0.0,
    0.079_580_299_556_255_34,
    0.160_930_201_411_247_25,
    0.246_112_301_945_686_34,
    0.337_915_241_718_292_24,
    0.440_709_829_330_444_34,
    0.562_617_003_917_694_1,
    0.722_956_836_223_602_3,
    1.0,
];

/// The code of 0.0.
pub const ZERO_CODE: u8 = 7;

/// The smallest absmax bitsandbytes stores for a ragged last block (its `clamp(min=1e-38)`).
pub const RAGGED_MIN_ABSMAX: f32 = 1e-38;

/// The 15 decision thresholds: `t[i]` is the midpoint of `NF4_CODE[i]` and `NF4_CODE[i + 1]`,
/// computed in f64 from the f32 codes and rounded to f32 (these are the constants of
/// bitsandbytes' decision tree).
pub fn thresholds() -> [f32; 15] {
    let mut t = [0.0f32; 15];
    for (i, slot) in t.iter_mut().enumerate() {
        let mid = (f64::from(NF4_CODE[i]) + f64::from(NF4_CODE[i + 1])) / 2.0;
        *slot = mid as f32;
    }
    t
}

/// The code of one normalised value: the number of thresholds strictly below `x` (so ties go
/// to the lower code; values outside `[-1, 1]` clamp to codes 0 and 15; NaN gives code 0 as in
/// bitsandbytes).
pub fn quantize_value(x: f32) -> u8 {
    thresholds().iter().filter(|&&t| x > t).count() as u8
}

/// A 4-bit-quantised tensor of `len` values.
#[derive(Debug, Clone, PartialEq)]
pub struct Nf4Weights {
    /// `ceil(len / 2)` bytes, element `2j` in the high nibble of byte `j`.
    pub packed: Vec<u8>,
    /// One absmax per block, `ceil(len / block)` values.
    pub absmax: Vec<f32>,
    /// Number of values.
    pub len: usize,
    /// Block size.
    pub block: usize,
}

/// An invalid argument to the format helpers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Nf4FormatError {
    #[error("block = {block} must be a positive even number")]
    InvalidBlock { block: usize },
    #[error("`{name}` has {actual} elements, expected {expected}")]
    Length {
        name: &'static str,
        expected: usize,
        actual: usize,
    },
}

impl Nf4Weights {
    /// The 4-bit code of element `i` (`i < len`).
    pub fn code(&self, i: usize) -> u8 {
        let byte = self.packed[i / 2];
        if i.is_multiple_of(2) {
            byte >> 4
        } else {
            byte & 0x0F
        }
    }

    /// Checks that the buffers have the lengths `len` and `block` imply.
    pub fn check(&self) -> Result<(), Nf4FormatError> {
        check_block(self.block)?;
        check_len("packed", self.len.div_ceil(2), self.packed.len())?;
        check_len("absmax", self.len.div_ceil(self.block), self.absmax.len())
    }
}

fn check_block(block: usize) -> Result<(), Nf4FormatError> {
    if block == 0 || !block.is_multiple_of(2) {
        return Err(Nf4FormatError::InvalidBlock { block });
    }
    Ok(())
}

fn check_len(name: &'static str, expected: usize, actual: usize) -> Result<(), Nf4FormatError> {
    if expected == actual {
        Ok(())
    } else {
        Err(Nf4FormatError::Length {
            name,
            expected,
            actual,
        })
    }
}

/// Quantises `w` (any length) in blocks of `block` (positive and even; the kernels accept 32,
/// 64, 128, 256). See the module doc for the exact rules; the output is byte-identical to
/// bitsandbytes' `quantize_4bit(quant_type="nf4")` for finite inputs with a nonzero absmax.
pub fn quantize(w: &[f32], block: usize) -> Result<Nf4Weights, Nf4FormatError> {
    check_block(block)?;
    let t = thresholds();
    let code_of = |x: f32| t.iter().filter(|&&th| x > th).count() as u8;
    let mut packed = vec![0u8; w.len().div_ceil(2)];
    let mut absmax = Vec::with_capacity(w.len().div_ceil(block));
    for (b, chunk) in w.chunks(block).enumerate() {
        let amax = chunk.iter().fold(0.0f32, |m, x| m.max(x.abs()));
        let ragged = chunk.len() < block;
        // bitsandbytes clamps the ragged block's absmax to 1e-38 (and stores it clamped).
        let stored = if ragged {
            amax.max(RAGGED_MIN_ABSMAX)
        } else {
            amax
        };
        absmax.push(stored);
        let recip = 1.0 / amax;
        for (j, &x) in chunk.iter().enumerate() {
            let code = if amax == 0.0 {
                ZERO_CODE
            } else if ragged {
                code_of(x / amax)
            } else {
                code_of(x * recip)
            };
            let i = b * block + j;
            packed[i / 2] |= if i.is_multiple_of(2) { code << 4 } else { code };
        }
    }
    if w.len() % 2 == 1 {
        // The padding element is a zero: code 7 in the last low nibble.
        if let Some(last) = packed.last_mut() {
            *last |= ZERO_CODE;
        }
    }
    Ok(Nf4Weights {
        packed,
        absmax,
        len: w.len(),
        block,
    })
}

/// Dequantises: `x̂[i] = NF4_CODE[code(i)] · absmax[i / block]` (f32).
pub fn dequantize(q: &Nf4Weights) -> Result<Vec<f32>, Nf4FormatError> {
    q.check()?;
    Ok((0..q.len)
        .map(|i| NF4_CODE[usize::from(q.code(i))] * q.absmax[i / q.block])
        .collect())
}

/// Entries of bitsandbytes' dynamic 8-bit map.
pub const DYNAMIC_MAP_LEN: usize = 256;

/// bitsandbytes' signed dynamic 8-bit map (`create_dynamic_map(signed=True)`), ascending.
///
/// Construction: for `i = 0 .. 7` (decade `e = i − 6`) the `2^i` midpoints of
/// `torch.linspace(0.1, 1, 2^i + 1)` (f32), each times `10^e` in f32, and their negatives; then 0
/// and 1: 127 + 127 + 2 = 256 values, sorted. The values are stored as bitsandbytes 0.50.2 makes
/// them (f32 bits) because torch's vectorised f32 `linspace` rounds some interior points
/// differently from the scalar formula ([`dynamic_map_construction`] reproduces the table to
/// within two ulps; the test files' `nested_quant_map` equal this table bit for bit).
pub fn dynamic_map() -> [f32; DYNAMIC_MAP_LEN] {
    DYNAMIC_MAP_BITS.map(f32::from_bits)
}

/// [`dynamic_map`] as f32 bit patterns.
const DYNAMIC_MAP_BITS: [u32; DYNAMIC_MAP_LEN] = [
    0xbf7e3333, 0xbf7a999a, 0xbf770000, 0xbf736666, 0xbf6fcccd, 0xbf6c3333, 0xbf68999a, 0xbf650000,
    0xbf616666, 0xbf5dcccd, 0xbf5a3333, 0xbf56999a, 0xbf530000, 0xbf4f6666, 0xbf4bcccd, 0xbf483333,
    0xbf44999a, 0xbf410000, 0xbf3d6666, 0xbf39cccd, 0xbf363334, 0xbf32999a, 0xbf2f0000, 0xbf2b6666,
    0xbf27cccd, 0xbf243334, 0xbf20999a, 0xbf1d0000, 0xbf196666, 0xbf15cccd, 0xbf123334, 0xbf0e999a,
    0xbf0b0000, 0xbf076666, 0xbf03cccc, 0xbf003333, 0xbef93332, 0xbef20000, 0xbeeacccc, 0xbee3999a,
    0xbedc6666, 0xbed53333, 0xbece0000, 0xbec6cccc, 0xbebf999a, 0xbeb86666, 0xbeb13333, 0xbeaa0000,
    0xbea2cccc, 0xbe9b999a, 0xbe946666, 0xbe8d3334, 0xbe860000, 0xbe7d9999, 0xbe6f3333, 0xbe60cccd,
    0xbe526666, 0xbe440000, 0xbe35999a, 0xbe273333, 0xbe18cccd, 0xbe0a6666, 0xbdf80000, 0xbddb3334,
    0xbdc9eb85, 0xbdc428f7, 0xbdbe6667, 0xbdb8a3d7, 0xbdb2e148, 0xbdad1eb8, 0xbda75c2a, 0xbda1999a,
    0xbd9bd70a, 0xbd96147b, 0xbd9051eb, 0xbd8a8f5d, 0xbd84cccd, 0xbd7e147b, 0xbd728f5d, 0xbd670a3d,
    0xbd5b851f, 0xbd500000, 0xbd447ae1, 0xbd38f5c3, 0xbd2d70a3, 0xbd21eb85, 0xbd166667, 0xbd0ae148,
    0xbcfeb852, 0xbce7ae15, 0xbcd0a3d7, 0xbcb9999a, 0xbca28f5d, 0xbc8b851f, 0xbc68f5c3, 0xbc3ae148,
    0xbc1f3b64, 0xbc160418, 0xbc0ccccd, 0xbc039581, 0xbbf4bc6a, 0xbbe24dd3, 0xbbcfdf3b, 0xbbbd70a4,
    0xbbab020d, 0xbb989374, 0xbb8624dd, 0xbb676c8a, 0xbb428f5c, 0xbb1db22d, 0xbaf1a9fc, 0xbaa7ef9d,
    0xba7765ff, 0xba59e83e, 0xba3c6a80, 0xba1eecc1, 0xba016f01, 0xb9c7e283, 0xb98ce705, 0xb923d70b,
    0xb8ba1f4b, 0xb88aefb3, 0xb8378034, 0xb7b24206, 0xb70205ff, 0xb65a1a94, 0xb513a3b7, 0x00000000,
    0x3513a3b7, 0x365a1a94, 0x370205ff, 0x37b24206, 0x38378034, 0x388aefb3, 0x38ba1f4b, 0x3923d70b,
    0x398ce705, 0x39c7e283, 0x3a016f01, 0x3a1eecc1, 0x3a3c6a80, 0x3a59e83e, 0x3a7765ff, 0x3aa7ef9d,
    0x3af1a9fc, 0x3b1db22d, 0x3b428f5c, 0x3b676c8a, 0x3b8624dd, 0x3b989374, 0x3bab020d, 0x3bbd70a4,
    0x3bcfdf3b, 0x3be24dd3, 0x3bf4bc6a, 0x3c039581, 0x3c0ccccd, 0x3c160418, 0x3c1f3b64, 0x3c3ae148,
    0x3c68f5c3, 0x3c8b851f, 0x3ca28f5d, 0x3cb9999a, 0x3cd0a3d7, 0x3ce7ae15, 0x3cfeb852, 0x3d0ae148,
    0x3d166667, 0x3d21eb85, 0x3d2d70a3, 0x3d38f5c3, 0x3d447ae1, 0x3d500000, 0x3d5b851f, 0x3d670a3d,
    0x3d728f5d, 0x3d7e147b, 0x3d84cccd, 0x3d8a8f5d, 0x3d9051eb, 0x3d96147b, 0x3d9bd70a, 0x3da1999a,
    0x3da75c2a, 0x3dad1eb8, 0x3db2e148, 0x3db8a3d7, 0x3dbe6667, 0x3dc428f7, 0x3dc9eb85, 0x3ddb3334,
    0x3df80000, 0x3e0a6666, 0x3e18cccd, 0x3e273333, 0x3e35999a, 0x3e440000, 0x3e526666, 0x3e60cccd,
    0x3e6f3333, 0x3e7d9999, 0x3e860000, 0x3e8d3334, 0x3e946666, 0x3e9b999a, 0x3ea2cccc, 0x3eaa0000,
    0x3eb13333, 0x3eb86666, 0x3ebf999a, 0x3ec6cccc, 0x3ece0000, 0x3ed53333, 0x3edc6666, 0x3ee3999a,
    0x3eeacccc, 0x3ef20000, 0x3ef93332, 0x3f003333, 0x3f03cccc, 0x3f076666, 0x3f0b0000, 0x3f0e999a,
    0x3f123334, 0x3f15cccd, 0x3f196666, 0x3f1d0000, 0x3f20999a, 0x3f243334, 0x3f27cccd, 0x3f2b6666,
    0x3f2f0000, 0x3f32999a, 0x3f363334, 0x3f39cccd, 0x3f3d6666, 0x3f410000, 0x3f44999a, 0x3f483333,
    0x3f4bcccd, 0x3f4f6666, 0x3f530000, 0x3f56999a, 0x3f5a3333, 0x3f5dcccd, 0x3f616666, 0x3f650000,
    0x3f68999a, 0x3f6c3333, 0x3f6fcccd, 0x3f736666, 0x3f770000, 0x3f7a999a, 0x3f7e3333, 0x3f800000,
];

/// The construction of [`dynamic_map`] with a scalar f32 `linspace` (`step = (end − start) /
/// (steps − 1)`, first half `start + step · i`, second half `end − step · (steps − 1 − i)`),
/// within two ulps of bitsandbytes' table.
pub fn dynamic_map_construction() -> [f32; DYNAMIC_MAP_LEN] {
    let mut data: Vec<f32> = Vec::with_capacity(DYNAMIC_MAP_LEN);
    for i in 0..7i32 {
        let scale = 10f64.powi(i - 6) as f32;
        let bounds = linspace_f32(0.1, 1.0, (1usize << i) + 1);
        for pair in bounds.windows(2) {
            let mean = (pair[0] + pair[1]) / 2.0;
            let v = scale * mean;
            data.push(v);
            data.push(-v);
        }
    }
    data.push(0.0);
    data.push(1.0);
    data.sort_by(f32::total_cmp);
    let mut map = [0.0f32; DYNAMIC_MAP_LEN];
    map.copy_from_slice(&data);
    map
}

fn linspace_f32(start: f32, end: f32, steps: usize) -> Vec<f32> {
    let step = (end - start) / (steps - 1) as f32;
    let half = steps / 2;
    (0..steps)
        .map(|i| {
            if i < half {
                start + step * i as f32
            } else {
                end - step * (steps - 1 - i) as f32
            }
        })
        .collect()
}

/// The index of the map entry nearest `x`, by bitsandbytes' blockwise-quantisation pivot search
/// (`dQuantize`): seven halving steps from entry 127 remember the last entries below and above
/// `x`, then `x` is compared with the midpoint between the final entry and that neighbour (ties
/// keep the final entry). `map` must be ascending.
pub fn quantize_dynamic(map: &[f32; DYNAMIC_MAP_LEN], x: f32) -> u8 {
    let (mut pivot, mut upper_pivot, mut lower_pivot) = (127usize, 255usize, 0usize);
    let (mut lower, mut upper) = (-1.0f32, 1.0f32);
    let mut val = map[pivot];
    let mut step = 64;
    while step > 0 {
        if x > val {
            lower_pivot = pivot;
            lower = val;
            pivot += step;
        } else {
            upper_pivot = pivot;
            upper = val;
            pivot -= step;
        }
        val = map[pivot];
        step >>= 1;
    }
    if upper_pivot == 255 {
        upper = map[upper_pivot];
    }
    if lower_pivot == 0 {
        lower = map[lower_pivot];
    }
    let index = if x > val {
        if x > (upper + val) * 0.5 {
            upper_pivot
        } else {
            pivot
        }
    } else if x < (lower + val) * 0.5 {
        lower_pivot
    } else {
        pivot
    };
    index as u8
}

/// Double-quantised absmax values, as bitsandbytes stores them (see the module doc).
#[derive(Debug, Clone, PartialEq)]
pub struct QuantizedAbsmax {
    /// One map index per absmax value (a checkpoint's `weight.absmax`, u8).
    pub codes: Vec<u8>,
    /// The 8-bit map the codes index (`weight.nested_quant_map`): [`dynamic_map`] when made here.
    pub map: Vec<f32>,
    /// One f32 per block of [`ABSMAX_BLOCK`] codes: `max |absmax − offset|` over the block
    /// (`weight.nested_absmax`).
    pub nested_absmax: Vec<f32>,
    /// The mean of all absmax values, subtracted before quantising (`nested_offset`).
    pub offset: f32,
}

/// The exact mean of `absmax` (f64 sum) rounded to f32; 0 for no values.
fn mean_f32(absmax: &[f32]) -> f32 {
    if absmax.is_empty() {
        return 0.0;
    }
    (absmax.iter().map(|&a| f64::from(a)).sum::<f64>() / absmax.len() as f64) as f32
}

/// Quantises absmax values to 8 bits as bitsandbytes does, with `offset = mean(absmax)` (see the
/// module doc for the one-ulp caveat on the mean).
pub fn quantize_absmax(absmax: &[f32]) -> QuantizedAbsmax {
    quantize_absmax_with_offset(absmax, mean_f32(absmax))
}

/// Quantises absmax values to 8 bits around a given `offset`: per block of 256 residuals
/// `r = absmax − offset`, `nested_absmax = max |r|` and codes `quantize_dynamic(r · (1 /
/// nested_absmax))`. A block whose residuals are all 0 stores nested absmax 0 and the code of
/// 0.0 (bitsandbytes would divide by zero).
pub fn quantize_absmax_with_offset(absmax: &[f32], offset: f32) -> QuantizedAbsmax {
    let map = dynamic_map();
    let zero_code = quantize_dynamic(&map, 0.0);
    let mut codes = Vec::with_capacity(absmax.len());
    let mut nested_absmax = Vec::with_capacity(absmax.len().div_ceil(ABSMAX_BLOCK));
    for chunk in absmax.chunks(ABSMAX_BLOCK) {
        let amax = chunk.iter().fold(0.0f32, |m, &a| m.max((a - offset).abs()));
        nested_absmax.push(amax);
        let recip = 1.0 / amax;
        for &a in chunk {
            codes.push(if amax == 0.0 {
                zero_code
            } else {
                quantize_dynamic(&map, (a - offset) * recip)
            });
        }
    }
    QuantizedAbsmax {
        codes,
        map: map.to_vec(),
        nested_absmax,
        offset,
    }
}

/// Reconstructs absmax values: `map[code] · nested_absmax[i / 256] + offset`, the product and the
/// sum each rounded to f32.
pub fn dequantize_absmax(q: &QuantizedAbsmax) -> Result<Vec<f32>, Nf4FormatError> {
    check_len(
        "nested_absmax",
        q.codes.len().div_ceil(ABSMAX_BLOCK),
        q.nested_absmax.len(),
    )?;
    check_len("map", DYNAMIC_MAP_LEN, q.map.len())?;
    Ok(q.codes
        .iter()
        .enumerate()
        .map(|(i, &c)| {
            let scaled = q.map[usize::from(c)] * q.nested_absmax[i / ABSMAX_BLOCK];
            scaled + q.offset
        })
        .collect())
}

/// NF4 weights with double-quantised absmax, as the kernels with `double_quant = true` read
/// them.
#[derive(Debug, Clone, PartialEq)]
pub struct Nf4DoubleQuant {
    /// The packed NF4 codes, identical to [`Nf4Weights::packed`].
    pub packed: Vec<u8>,
    /// The compressed absmax.
    pub absmax: QuantizedAbsmax,
    pub len: usize,
    pub block: usize,
}

impl Nf4DoubleQuant {
    /// Compresses the absmax of `w`.
    pub fn new(w: &Nf4Weights) -> Self {
        Self {
            packed: w.packed.clone(),
            absmax: quantize_absmax(&w.absmax),
            len: w.len,
            block: w.block,
        }
    }

    /// The equivalent single-level weights (absmax reconstructed), for [`dequantize`] and the
    /// reference GEMMs.
    pub fn to_weights(&self) -> Result<Nf4Weights, Nf4FormatError> {
        let w = Nf4Weights {
            packed: self.packed.clone(),
            absmax: dequantize_absmax(&self.absmax)?,
            len: self.len,
            block: self.block,
        };
        w.check()?;
        Ok(w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::templates::testing::SplitMix64;

    #[test]
    fn thresholds_match_bitsandbytes_tree() {
        let t = thresholds();
        // Constants of bitsandbytes' dQuantizeNF4 decision tree.
        let known: [(usize, f64); 12] = [
            (7, 0.03979014977812767),
            (11, 0.3893125355243683),
            (13, 0.6427869200706482),
            (14, 0.8614784181118011),
            (12, 0.5016634166240692),
            (9, 0.2035212516784668),
            (10, 0.2920137718319893),
            (8, 0.1202552504837513),
            (3, -0.33967943489551544),
            (5, -0.13791173323988914),
            (6, -0.045525018125772476),
            (4, -0.23460740596055984),
        ];
        for (i, v) in known {
            assert_eq!(t[i], v as f32, "threshold {i}");
        }
        assert!(t.windows(2).all(|p| p[0] < p[1]));
    }

    #[test]
    fn values_on_codes_pack_byte_exact() {
        // absmax 1 (the block contains 1.0), so normalisation is exact.
        let w: Vec<f32> = NF4_CODE.to_vec();
        let q = quantize(&w, 16 * 2).unwrap();
        assert_eq!(q.absmax, vec![1.0]);
        assert_eq!(
            q.packed,
            vec![0x01, 0x23, 0x45, 0x67, 0x89, 0xAB, 0xCD, 0xEF]
        );
        assert_eq!(dequantize(&q).unwrap(), w);
    }

    #[test]
    fn midpoints_round_to_the_lower_code() {
        let t = thresholds();
        let mid = t[7]; // between code 7 (0.0) and code 8
        let below = f32::from_bits(mid.to_bits() - 1);
        let above = f32::from_bits(mid.to_bits() + 1);
        let w = [1.0, mid, below, above, -t[3], t[3]];
        let q = quantize(&w, 32).unwrap();
        // codes: 15, 7, 7, 8, (−t3 ≈ 0.3397 → between t[10] and t[11]: 11), t3 exactly → 3
        assert_eq!(q.packed, vec![0xF7, 0x78, 0xB3]);
    }

    #[test]
    fn negative_scaling_and_zero_block() {
        // Block 0: absmax 2 from a negative value; block 1 all zero.
        let w = [-2.0, -1.0, 0.5, 2.0 * NF4_CODE[14], 0.0, 0.0, -0.0, 0.0];
        let q = quantize(&w, 4).unwrap();
        assert_eq!(q.absmax, vec![2.0, 0.0]);
        // −1 → code 0; −0.5 → −0.5 lies between t[1] (≈ −0.6107) and t[2] (≈ −0.4600): code 2;
        // 0.25 → between t[9] (≈0.2035) and t[10] (≈0.2920): code 10; 0.7229… → 14.
        assert_eq!(q.packed, vec![0x02, 0xAE, 0x77, 0x77]);
        let d = dequantize(&q).unwrap();
        assert_eq!(d[0], -2.0);
        assert_eq!(&d[4..], &[0.0, 0.0, 0.0, 0.0]);
    }

    #[test]
    fn odd_length_and_ragged_block() {
        // 5 values, block 4: blocks [0..4) and a ragged [4..5); element 5 pads as code 7.
        let w = [1.0, 0.0, -1.0, 0.0, -3.0];
        let q = quantize(&w, 4).unwrap();
        assert_eq!(q.absmax, vec![1.0, 3.0]);
        assert_eq!(q.packed, vec![0xF7, 0x07, 0x07]);
        assert_eq!(q.len, 5);
        assert_eq!(dequantize(&q).unwrap(), vec![1.0, 0.0, -1.0, 0.0, -3.0]);
    }

    #[test]
    fn rejects_bad_blocks_and_lengths() {
        assert_eq!(
            quantize(&[1.0], 0),
            Err(Nf4FormatError::InvalidBlock { block: 0 })
        );
        assert_eq!(
            quantize(&[1.0], 3),
            Err(Nf4FormatError::InvalidBlock { block: 3 })
        );
        let mut q = quantize(&[1.0; 10], 4).unwrap();
        q.absmax.pop();
        assert!(matches!(
            dequantize(&q),
            Err(Nf4FormatError::Length { name: "absmax", .. })
        ));
    }

    #[test]
    fn quantisation_error_is_within_half_a_code_gap() {
        let mut rng = SplitMix64::new(1);
        let w = rng.vec_f32(1000, -3.0, 3.0);
        let q = quantize(&w, 64).unwrap();
        let d = dequantize(&q).unwrap();
        let max_gap = NF4_CODE.windows(2).map(|p| p[1] - p[0]).fold(0.0, f32::max);
        for (i, (&x, &y)) in w.iter().zip(&d).enumerate() {
            let amax = q.absmax[i / 64];
            assert!(
                (x - y).abs() <= amax * max_gap / 2.0 * 1.0001,
                "{i}: {x} vs {y}"
            );
        }
        // Nearest code: no other code is strictly closer.
        for (i, &x) in w.iter().enumerate() {
            let amax = q.absmax[i / 64];
            let xn = x * (1.0 / amax);
            let c = usize::from(q.code(i));
            let best = NF4_CODE
                .iter()
                .map(|v| (v - xn).abs())
                .fold(f32::INFINITY, f32::min);
            assert!((NF4_CODE[c] - xn).abs() <= best + 1e-7);
        }
    }

    #[test]
    fn dynamic_map_is_bitsandbytes_signed_map() {
        let map = dynamic_map();
        assert!(map.windows(2).all(|p| p[0] < p[1]));
        assert_eq!(map[255], 1.0);
        assert_eq!(map[127], 0.0);
        // bitsandbytes' first entries (f32 bits of create_dynamic_map(signed=True)).
        let first: [u32; 4] = [0xbf7e3333, 0xbf7a999a, 0xbf770000, 0xbf736666];
        for (i, bits) in first.into_iter().enumerate() {
            assert_eq!(map[i].to_bits(), bits, "entry {i}");
        }
        // Every entry picks itself; midpoints between neighbours keep the pivot's side.
        for (i, &v) in map.iter().enumerate() {
            assert_eq!(usize::from(quantize_dynamic(&map, v)), i, "{v}");
        }
        assert_eq!(quantize_dynamic(&map, -1.0), 0);
        // Symmetric, and the documented construction within two ulps.
        for i in 0..127 {
            assert_eq!(map[i], -map[254 - i]);
        }
        for (a, b) in map.iter().zip(dynamic_map_construction()) {
            assert!(a.to_bits().abs_diff(b.to_bits()) <= 2, "{a} vs {b}");
        }
    }

    #[test]
    fn double_quant_round_trips_closely() {
        let mut rng = SplitMix64::new(2);
        let w = rng.vec_f32(64 * 600, -1.0, 1.0);
        let q = quantize(&w, 64).unwrap();
        let dq = Nf4DoubleQuant::new(&q);
        assert_eq!(dq.absmax.codes.len(), 600);
        assert_eq!(dq.absmax.nested_absmax.len(), 3);
        let rec = dequantize_absmax(&dq.absmax).unwrap();
        let map = dynamic_map();
        let widest_gap = map.windows(2).map(|p| p[1] - p[0]).fold(0.0, f32::max);
        for (blk, (a, r)) in q.absmax.iter().zip(&rec).enumerate() {
            let scale = dq.absmax.nested_absmax[blk / ABSMAX_BLOCK];
            assert!(
                (a - r).abs() <= scale * widest_gap * 0.5 + 1e-6,
                "{a} vs {r}"
            );
        }
        let w2 = dq.to_weights().unwrap();
        assert_eq!(w2.packed, q.packed);
    }

    #[test]
    fn double_quant_golden() {
        // mean 2; residuals −1, 0, 1, 0: nested absmax 1, codes of −1, 0, 1, 0 in the map.
        let q = quantize_absmax(&[1.0, 2.0, 3.0, 2.0]);
        assert_eq!(q.offset, 2.0);
        assert_eq!(q.nested_absmax, vec![1.0]);
        assert_eq!(q.codes, vec![0, 127, 255, 127]);
        // The map's lowest entry is −0.99296875, not −1 (bitsandbytes' map has no −1).
        let lowest = dynamic_map()[0];
        assert_eq!(
            dequantize_absmax(&q).unwrap(),
            vec![lowest + 2.0, 2.0, 3.0, 2.0]
        );
        // All equal: nested absmax 0, every code that of 0.0, exact reconstruction.
        let q = quantize_absmax(&[0.5; 3]);
        assert_eq!(q.codes, vec![127; 3]);
        assert_eq!(dequantize_absmax(&q).unwrap(), vec![0.5; 3]);
        assert_eq!(quantize_absmax(&[]).codes, Vec::<u8>::new());
    }
}
