//! The `ptxforge-sim run` command line: argument parsing, buffer sources, typed value lists, and
//! running a kernel file. Also used by the corpus tests, whose case lines use the same syntax.
//!
//! ```text
//! ptxforge-sim run KERNEL.ptx --entry NAME --grid X[,Y[,Z]] --block X[,Y[,Z]] [--smem BYTES]
//!     [--buf NAME=TYPE:SOURCE]...   SOURCE: file:PATH | zeros:N | iota:N | uninit:N | rand:N:SEED | list:V,V,..
//!     [--arg NAME | --arg TYPE:VALUE]...
//!     [--dump NAME=PATH]... [--no-check KIND]... [--shuffle-blocks SEED] [--fuel N] [--threads N]
//! ```

use std::collections::HashMap;

use crate::device::{Arg, BufferId, Device, LaunchReport, Module, Options};
use crate::error::SimError;
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

#[derive(Debug, Clone, PartialEq)]
pub struct BufSpec {
    pub name: String,
    pub ty: Ty,
    pub source: Source,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ArgSpec {
    Buffer(String),
    Scalar(Arg),
}

/// A parsed `run` command.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSpec {
    pub kernel: String,
    pub entry: String,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub smem: u32,
    pub bufs: Vec<BufSpec>,
    pub args: Vec<ArgSpec>,
    pub dumps: Vec<(String, String)>,
    pub options: Options,
}

fn dims(s: &str) -> Result<[u32; 3], String> {
    let mut d = [1u32; 3];
    let parts: Vec<&str> = s.split(',').collect();
    if parts.is_empty() || parts.len() > 3 {
        return Err(format!("bad dimensions `{s}`"));
    }
    for (i, p) in parts.iter().enumerate() {
        d[i] = p
            .trim()
            .parse()
            .map_err(|_| format!("bad dimension `{p}` in `{s}`"))?;
    }
    Ok(d)
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

fn kind_off(options: &mut Options, k: &str) -> Result<(), String> {
    match k {
        "memcheck" => options.memcheck = false,
        "initcheck" => options.initcheck = false,
        "racecheck" => options.racecheck = false,
        "synccheck" => options.synccheck = false,
        "asynccheck" => options.asynccheck = false,
        "all" => {
            *options = Options {
                fuel: options.fuel,
                shuffle_blocks: options.shuffle_blocks,
                threads: options.threads,
                max_findings: options.max_findings,
                ..Options::unchecked()
            }
        }
        _ => {
            return Err(format!(
                "unknown check `{k}` (memcheck, initcheck, racecheck, synccheck, asynccheck, all)"
            ))
        }
    }
    Ok(())
}

/// Parses the arguments after `run` (the kernel path first, options in any order after it).
pub fn parse_run(args: &[String]) -> Result<RunSpec, String> {
    let mut it = args.iter();
    let kernel = it.next().ok_or("missing KERNEL.ptx")?.clone();
    let mut spec = RunSpec {
        kernel,
        entry: String::new(),
        grid: [1, 1, 1],
        block: [1, 1, 1],
        smem: 0,
        bufs: Vec::new(),
        args: Vec::new(),
        dumps: Vec::new(),
        options: Options::default(),
    };
    let (mut have_grid, mut have_block) = (false, false);
    while let Some(flag) = it.next() {
        let mut val = || {
            it.next()
                .cloned()
                .ok_or_else(|| format!("`{flag}` needs a value"))
        };
        match flag.as_str() {
            "--entry" => spec.entry = val()?,
            "--grid" => {
                spec.grid = dims(&val()?)?;
                have_grid = true;
            }
            "--block" => {
                spec.block = dims(&val()?)?;
                have_block = true;
            }
            "--smem" => spec.smem = val()?.parse().map_err(|_| "bad --smem".to_string())?,
            "--buf" => {
                let v = val()?;
                let (name, rest) = v
                    .split_once('=')
                    .ok_or_else(|| format!("`--buf NAME=TYPE:SOURCE` expected, got `{v}`"))?;
                let (ty, src) = rest
                    .split_once(':')
                    .ok_or_else(|| format!("`--buf NAME=TYPE:SOURCE` expected, got `{v}`"))?;
                spec.bufs.push(BufSpec {
                    name: name.to_string(),
                    ty: parse_ty(ty)?,
                    source: parse_source(src)?,
                });
            }
            "--arg" => {
                let v = val()?;
                if v.contains(':') {
                    spec.args.push(ArgSpec::Scalar(parse_scalar(&v)?));
                } else {
                    spec.args.push(ArgSpec::Buffer(v));
                }
            }
            "--dump" => {
                let v = val()?;
                let (n, p) = v
                    .split_once('=')
                    .ok_or_else(|| format!("`--dump NAME=PATH` expected, got `{v}`"))?;
                spec.dumps.push((n.to_string(), p.to_string()));
            }
            "--no-check" => kind_off(&mut spec.options, &val()?)?,
            "--shuffle-blocks" => {
                spec.options.shuffle_blocks = Some(
                    val()?
                        .parse()
                        .map_err(|_| "bad --shuffle-blocks seed".to_string())?,
                )
            }
            "--fuel" => spec.options.fuel = val()?.parse().map_err(|_| "bad --fuel".to_string())?,
            "--threads" => {
                spec.options.threads = val()?.parse().map_err(|_| "bad --threads".to_string())?
            }
            other => return Err(format!("unknown option `{other}`")),
        }
    }
    if spec.entry.is_empty() {
        return Err("missing --entry NAME".into());
    }
    if !have_grid || !have_block {
        return Err("missing --grid or --block".into());
    }
    for a in &spec.args {
        if let ArgSpec::Buffer(n) = a {
            if !spec.bufs.iter().any(|b| &b.name == n) {
                return Err(format!(
                    "--arg `{n}` names no --buf (scalars are written TYPE:VALUE)"
                ));
            }
        }
    }
    Ok(spec)
}

/// Errors of a `run` beyond usage: what exit code 2 reports.
#[derive(Debug)]
pub enum RunError {
    Usage(String),
    Sim(SimError),
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Usage(m) => write!(f, "{m}"),
            RunError::Sim(e) => write!(f, "{e}"),
        }
    }
}

/// The result of [`run_source`]: the report plus the device and its named buffers.
#[derive(Debug)]
pub struct RunOutcome {
    pub report: LaunchReport,
    pub device: Device,
    pub buffers: HashMap<String, (BufferId, Ty)>,
}

/// Runs `spec` on PTX `text` (the file is not read here).
pub fn run_source(text: &str, spec: &RunSpec) -> Result<RunOutcome, RunError> {
    let module = Module::parse(text).map_err(RunError::Sim)?;
    let mut device = Device::new();
    let mut buffers = HashMap::new();
    for b in &spec.bufs {
        let (bytes, len) = source_bytes(b.ty, &b.source).map_err(RunError::Usage)?;
        let id = match bytes {
            Some(bytes) => device.upload::<u8>(&bytes),
            None => device.alloc(len),
        };
        buffers.insert(b.name.clone(), (id, b.ty));
    }
    let args = spec
        .args
        .iter()
        .map(|a| match a {
            ArgSpec::Scalar(s) => Ok(*s),
            ArgSpec::Buffer(n) => buffers
                .get(n)
                .map(|b| Arg::Buffer(b.0))
                .ok_or_else(|| RunError::Usage(format!("unknown buffer `{n}`"))),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let report = device
        .launch(
            &module,
            &spec.entry,
            spec.grid,
            spec.block,
            spec.smem,
            &args,
            &spec.options,
        )
        .map_err(RunError::Sim)?;
    Ok(RunOutcome {
        report,
        device,
        buffers,
    })
}

/// `ptxforge-sim` main: returns the exit code (0 clean, 1 findings, 2 usage/parse/unsupported).
pub fn main_with(args: &[String]) -> i32 {
    const USAGE: &str = "usage: ptxforge-sim run KERNEL.ptx --entry NAME --grid X[,Y[,Z]] --block X[,Y[,Z]] [--smem BYTES]\n       [--buf NAME=TYPE:SOURCE]... [--arg NAME | --arg TYPE:VALUE]... [--dump NAME=PATH]...\n       [--no-check KIND]... [--shuffle-blocks SEED] [--fuel N] [--threads N]";
    let Some((cmd, rest)) = args.split_first() else {
        eprintln!("{USAGE}");
        return 2;
    };
    if cmd != "run" {
        eprintln!("unknown command `{cmd}`\n{USAGE}");
        return 2;
    }
    let spec = match parse_run(rest) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}\n{USAGE}");
            return 2;
        }
    };
    let text = match std::fs::read_to_string(&spec.kernel) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: cannot read `{}`: {e}", spec.kernel);
            return 2;
        }
    };
    let out = match run_source(&text, &spec) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    for (name, path) in &spec.dumps {
        let Some((id, _)) = out.buffers.get(name) else {
            eprintln!("error: --dump names unknown buffer `{name}`");
            return 2;
        };
        let bytes = out.device.download::<u8>(*id).unwrap_or_default();
        if let Err(e) = std::fs::write(path, bytes) {
            eprintln!("error: cannot write `{path}`: {e}");
            return 2;
        }
    }
    println!("{}", crate::json::report_json(&out.report));
    i32::from(!out.report.is_clean())
}
