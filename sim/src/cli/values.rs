//! Values on the command line: element types, buffer sources (`zeros:N`, `rand:N:SEED`, ...),
//! typed value lists and scalar arguments, turned into little-endian bytes.

use crate::device::Arg;
use crate::sem::{round_to, Rnd, BF16, F16};
use crate::types::Ty;

/// Where a buffer's initial contents come from.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    File(String),
    Zeros(usize),
    Iota(usize),
    Uninit(usize),
    Rand(usize, u64),
    List(Vec<String>),
}

/// Parses a buffer/element type name (`u32`, `f16`, ...).
pub fn parse_ty(s: &str) -> Result<Ty, String> {
    match s {
        "u8" | "u16" | "u32" | "u64" | "s32" | "s64" | "f16" | "bf16" | "f32" | "f64" | "s8"
        | "s16" => Ty::parse(s).ok_or_else(|| format!("unknown type `{s}`")),
        _ => Err(format!(
            "unknown type `{s}` (expected u8 u16 u32 u64 s32 s64 f16 bf16 f32 f64)"
        )),
    }
}

fn count(s: &str) -> Result<usize, String> {
    s.parse().map_err(|_| format!("bad element count `{s}`"))
}

/// Parses `SOURCE` of `--buf`.
pub fn parse_source(s: &str) -> Result<Source, String> {
    let (kind, rest) = s
        .split_once(':')
        .ok_or_else(|| format!("bad buffer source `{s}`"))?;
    Ok(match kind {
        "file" => Source::File(rest.to_string()),
        "zeros" => Source::Zeros(count(rest)?),
        "iota" => Source::Iota(count(rest)?),
        "uninit" => Source::Uninit(count(rest)?),
        "rand" => {
            let (n, seed) = rest
                .split_once(':')
                .ok_or_else(|| format!("`rand:N:SEED` expected, got `{s}`"))?;
            Source::Rand(
                count(n)?,
                seed.parse().map_err(|_| format!("bad seed `{seed}`"))?,
            )
        }
        "list" => Source::List(expand_list(rest)),
        _ => {
            return Err(format!(
                "unknown buffer source `{kind}` (file, zeros, iota, uninit, rand, list)"
            ))
        }
    })
}

/// Splits `a,b,c*3` into values (with `v*N` repetition).
pub fn expand_list(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    for item in s.split(',').map(str::trim).filter(|x| !x.is_empty()) {
        match item.rsplit_once('*') {
            Some((v, n)) if n.parse::<usize>().is_ok() => {
                for _ in 0..n.parse::<usize>().unwrap_or(0) {
                    out.push(v.to_string());
                }
            }
            _ => out.push(item.to_string()),
        }
    }
    out
}

fn parse_int(s: &str) -> Option<i128> {
    let (neg, t) = match s.strip_prefix('-') {
        Some(t) => (true, t),
        None => (false, s),
    };
    let v = if let Some(h) = t.strip_prefix("0x") {
        i128::from_str_radix(h, 16).ok()?
    } else {
        t.parse::<i128>().ok()?
    };
    Some(if neg { -v } else { v })
}

fn parse_float(s: &str) -> Option<f64> {
    match s {
        "nan" | "NaN" => Some(f64::NAN),
        "inf" | "+inf" => Some(f64::INFINITY),
        "-inf" => Some(f64::NEG_INFINITY),
        _ => s.parse().ok(),
    }
}

/// Raw little-endian bits of one value of type `ty` (`0x…` is raw bits for float types).
pub fn value_bits(ty: Ty, s: &str) -> Result<u64, String> {
    let err = || format!("bad {ty:?} value `{s}`");
    if ty.is_float() {
        if let Some(h) = s.strip_prefix("0x") {
            return u64::from_str_radix(h, 16).map_err(|_| err());
        }
        let x = parse_float(s).ok_or_else(err)?;
        return Ok(match ty {
            Ty::F32 => u64::from((x as f32).to_bits()),
            Ty::F64 => x.to_bits(),
            Ty::F16 => round_to(x, 0, F16, Rnd::Rn),
            _ => round_to(x, 0, BF16, Rnd::Rn),
        });
    }
    let v = parse_int(s).ok_or_else(err)?;
    let bits = ty.bits();
    // Accept both the signed and the unsigned spelling of a value of this width.
    let (lo, hi) = (-(1i128 << (bits - 1)), (1i128 << bits) - 1);
    if v < lo || v > hi {
        return Err(format!("{ty:?} value `{s}` out of range"));
    }
    Ok((v as u64) & ty.mask())
}

fn push_bits(out: &mut Vec<u8>, ty: Ty, bits: u64) {
    out.extend_from_slice(&bits.to_le_bytes()[..ty.bytes() as usize]);
}

/// Bytes of a buffer source (`None` for `uninit`, with its byte length).
pub fn source_bytes(ty: Ty, src: &Source) -> Result<(Option<Vec<u8>>, usize), String> {
    let size = ty.bytes() as usize;
    let mut out = Vec::new();
    match src {
        Source::File(p) => {
            let b = std::fs::read(p).map_err(|e| format!("cannot read `{p}`: {e}"))?;
            let n = b.len();
            return Ok((Some(b), n));
        }
        Source::Uninit(n) => return Ok((None, n * size)),
        Source::Zeros(n) => out.resize(n * size, 0),
        Source::Iota(n) => {
            for i in 0..*n {
                push_bits(&mut out, ty, value_bits(ty, &i.to_string())?);
            }
        }
        Source::Rand(n, seed) => {
            let mut s = *seed;
            for _ in 0..*n {
                s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let mut z = s;
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                z ^= z >> 31;
                let bits = if ty.is_float() {
                    // Uniform in [-1, 1).
                    let u = (z >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0;
                    value_bits(ty, &format!("{u:e}"))?
                } else {
                    z & ty.mask()
                };
                push_bits(&mut out, ty, bits);
            }
        }
        Source::List(vals) => {
            for v in vals {
                push_bits(&mut out, ty, value_bits(ty, v)?);
            }
        }
    }
    let n = out.len();
    Ok((Some(out), n))
}

/// Parses a scalar `--arg TYPE:VALUE`.
pub fn parse_scalar(s: &str) -> Result<Arg, String> {
    let (t, v) = s
        .split_once(':')
        .ok_or_else(|| format!("bad argument `{s}`"))?;
    let ty = parse_ty(t)?;
    let bits = value_bits(ty, v)?;
    Ok(match ty {
        Ty::U8 | Ty::S8 => Arg::U8(bits as u8),
        Ty::U16 | Ty::S16 | Ty::F16 | Ty::Bf16 => Arg::U16(bits as u16),
        Ty::U32 => Arg::U32(bits as u32),
        Ty::S32 => Arg::S32(bits as u32 as i32),
        Ty::U64 => Arg::U64(bits),
        Ty::S64 => Arg::S64(bits as i64),
        Ty::F32 => Arg::F32(f32::from_bits(bits as u32)),
        _ => Arg::F64(f64::from_bits(bits)),
    })
}

/// `--init NAME=FIRST..END:SOURCE`: writes elements `FIRST..END` of buffer `NAME`, leaving the
/// rest as its `--buf` source made it (on an `uninit` buffer, initcheck still sees the rest).
#[derive(Debug, Clone, PartialEq)]
pub struct InitSpec {
    pub name: String,
    pub first: usize,
    pub end: usize,
    /// The values, exactly `end - first` of them.
    pub source: Source,
}

/// Parses `NAME=FIRST..END:SOURCE` where SOURCE is `zeros`, `iota` (the element indices
/// `FIRST..END`), `rand` or `rand:SEED` (seed 0 by default), `fill:V` or `list:V,V,..` (exactly
/// `END - FIRST` values, `v*N` repeats).
pub fn parse_init(s: &str) -> Result<InitSpec, String> {
    let usage = || format!("`--init NAME=FIRST..END:SOURCE` expected, got `{s}`");
    let (name, rest) = s.split_once('=').ok_or_else(usage)?;
    let (range, src) = rest.split_once(':').ok_or_else(usage)?;
    let (a, b) = range.split_once("..").ok_or_else(usage)?;
    let (first, end) = (count(a.trim())?, count(b.trim())?);
    if end < first {
        return Err(format!("empty range `{range}` in `--init {s}`"));
    }
    let n = end - first;
    let (kind, arg) = src.split_once(':').unwrap_or((src, ""));
    let source = match (kind, arg) {
        ("zeros", "") => Source::Zeros(n),
        ("iota", "") => Source::List((first..end).map(|i| i.to_string()).collect()),
        ("rand", "") => Source::Rand(n, 0),
        ("rand", seed) => Source::Rand(n, seed.parse().map_err(|_| format!("bad seed `{seed}`"))?),
        ("fill", v) if !v.is_empty() => Source::List(vec![v.to_string(); n]),
        ("list", vals) => {
            let vals = expand_list(vals);
            if vals.len() != n {
                return Err(format!(
                    "`--init {s}`: the range {first}..{end} holds {n} elements but the list has {}",
                    vals.len()
                ));
            }
            Source::List(vals)
        }
        _ => {
            return Err(format!(
                "unknown init source `{src}` (zeros, iota, rand, rand:SEED, fill:V, list:V,V,..)"
            ))
        }
    };
    Ok(InitSpec {
        name: name.to_string(),
        first,
        end,
        source,
    })
}

/// `--global NAME=TYPE:VALUES`: the new contents of the start of a module-scope `.global` or
/// `.const` variable.
#[derive(Debug, Clone, PartialEq)]
pub struct GlobalSpec {
    pub name: String,
    pub ty: Ty,
    pub source: Source,
}

/// Parses `NAME=TYPE:VALUES` where VALUES is a buffer source other than `uninit`, or plain values
/// `V,V,..` (`--global scale=f32:2.5`, `--global table=u32:list:1,2,3`, `--global w=f32:rand:64:1`).
pub fn parse_global(s: &str) -> Result<GlobalSpec, String> {
    let usage = || format!("`--global NAME=TYPE:VALUES` expected, got `{s}`");
    let (name, rest) = s.split_once('=').ok_or_else(usage)?;
    let (ty, vals) = rest.split_once(':').ok_or_else(usage)?;
    let source = match parse_source(vals) {
        Ok(Source::Uninit(_)) => {
            return Err(format!(
                "`--global {s}`: a module variable is always initialised"
            ))
        }
        Ok(src) => src,
        // Not a `KIND:...` source: plain values.
        Err(_) => Source::List(expand_list(vals)),
    };
    Ok(GlobalSpec {
        name: name.to_string(),
        ty: parse_ty(ty)?,
        source,
    })
}
