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
//! absmax covers only the values that exist. For odd `len` the missing element `len` is
//! quantised as 0.0 (bitsandbytes pads its loads with zeros), so the last byte's low nibble is
//! code 7.
//!
//! Zero blocks: a block whose absmax is 0 stores absmax 0 and code 7 (the 0.0 code) for every
//! element. (bitsandbytes' CUDA kernel would multiply by `1/0` and get NaN, which its decision
//! tree maps to code 0; both dequantise to 0 · absmax = ±0, so we pick the meaningful code.)
//!
//! Dequantisation: `x̂ = NF4_CODE[code] · absmax[block]`, one f32 multiply.
//!
//! # Double quantisation
//!
//! With `double_quant` the absmax values are stored in 8 bits. bitsandbytes subtracts their mean
//! and quantises the residuals blockwise (blocks of 256) against its *dynamic* 8-bit map. We do
//! **not** reproduce that map: ptxforge uses a documented *linear signed 8-bit* variant with the
//! same structure (see [`quantize_absmax`]): `offset = mean(absmax)` (computed in f64, rounded to
//! f32), per block of [`ABSMAX_BLOCK`] residuals `r = absmax − offset` a scale
//! `scale = max|r| / 127` (f32) and codes `q = clamp(round_half_even(r / scale), −127, 127)`
//! stored offset-binary as `q + 128` in a `u8`. Dequantisation is one fused multiply-add,
//! `absmax ≈ fma(q, scale, offset)` (`fma.rn.f32` on the device), so host and kernels agree
//! bit for bit. NF4 codes and absmax of the first level stay byte-identical to bitsandbytes;
//! only the compressed absmax differ.

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
        if i % 2 == 0 {
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
    if block == 0 || block % 2 != 0 {
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
        absmax.push(amax);
        let recip = 1.0 / amax;
        for (j, &x) in chunk.iter().enumerate() {
            let code = if amax == 0.0 {
                ZERO_CODE
            } else {
                code_of(x * recip)
            };
            let i = b * block + j;
            packed[i / 2] |= if i % 2 == 0 { code << 4 } else { code };
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

/// Double-quantised absmax values (linear signed 8-bit variant; see the module doc).
#[derive(Debug, Clone, PartialEq)]
pub struct QuantizedAbsmax {
    /// One byte per absmax value: `q + 128` with `q ∈ [−127, 127]`.
    pub codes: Vec<u8>,
    /// One step per block of [`ABSMAX_BLOCK`] values: `max|absmax − offset| / 127` (f32).
    pub scale: Vec<f32>,
    /// The mean of all absmax values (f64 mean rounded to f32), subtracted before quantising.
    pub offset: f32,
}

/// Quantises absmax values to 8 bits (see the module doc for the exact arithmetic). Empty input
/// gives empty codes and offset 0.
pub fn quantize_absmax(absmax: &[f32]) -> QuantizedAbsmax {
    let offset = if absmax.is_empty() {
        0.0
    } else {
        (absmax.iter().map(|&a| f64::from(a)).sum::<f64>() / absmax.len() as f64) as f32
    };
    let mut codes = Vec::with_capacity(absmax.len());
    let mut scale = Vec::with_capacity(absmax.len().div_ceil(ABSMAX_BLOCK));
    for chunk in absmax.chunks(ABSMAX_BLOCK) {
        let amax = chunk.iter().fold(0.0f32, |m, &a| m.max((a - offset).abs()));
        let step = amax / 127.0;
        scale.push(step);
        for &a in chunk {
            let q = if step == 0.0 {
                0.0
            } else {
                ((a - offset) / step).round_ties_even().clamp(-127.0, 127.0)
            };
            codes.push((q as i32 + 128) as u8);
        }
    }
    QuantizedAbsmax {
        codes,
        scale,
        offset,
    }
}

/// Reconstructs absmax values: `fma(code − 128, scale[i / 256], offset)` in f32.
pub fn dequantize_absmax(q: &QuantizedAbsmax) -> Result<Vec<f32>, Nf4FormatError> {
    check_len("scale", q.codes.len().div_ceil(ABSMAX_BLOCK), q.scale.len())?;
    Ok(q.codes
        .iter()
        .enumerate()
        .map(|(i, &c)| {
            let v = f32::from(c) - 128.0;
            v.mul_add(q.scale[i / ABSMAX_BLOCK], q.offset)
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
    fn double_quant_round_trips_closely() {
        let mut rng = SplitMix64::new(2);
        let w = rng.vec_f32(64 * 600, -1.0, 1.0);
        let q = quantize(&w, 64).unwrap();
        let dq = Nf4DoubleQuant::new(&q);
        assert_eq!(dq.absmax.codes.len(), 600);
        assert_eq!(dq.absmax.scale.len(), 3);
        let rec = dequantize_absmax(&dq.absmax).unwrap();
        for (blk, (a, r)) in q.absmax.iter().zip(&rec).enumerate() {
            let step = dq.absmax.scale[blk / ABSMAX_BLOCK];
            assert!((a - r).abs() <= step * 0.5 + 1e-6, "{a} vs {r}");
        }
        let w2 = dq.to_weights().unwrap();
        assert_eq!(w2.packed, q.packed);
    }

    #[test]
    fn double_quant_golden() {
        // mean 2; residuals −1, 0, 1, 0 → scale 1/127, codes 1, 128, 255, 128.
        let q = quantize_absmax(&[1.0, 2.0, 3.0, 2.0]);
        assert_eq!(q.offset, 2.0);
        assert_eq!(q.scale, vec![1.0 / 127.0]);
        assert_eq!(q.codes, vec![1, 128, 255, 128]);
        let r = dequantize_absmax(&q).unwrap();
        for (a, b) in r.iter().zip([1.0, 2.0, 3.0, 2.0]) {
            assert!((a - b).abs() < 1e-6);
        }
        // All equal: scale 0, every code 128, exact reconstruction.
        let q = quantize_absmax(&[0.5; 3]);
        assert_eq!(q.codes, vec![128; 3]);
        assert_eq!(dequantize_absmax(&q).unwrap(), vec![0.5; 3]);
        assert_eq!(quantize_absmax(&[]).codes, Vec::<u8>::new());
    }
}
