//! The `ptxforge-sim run` command line: argument parsing and running a kernel file. Also used by
//! the corpus tests, whose case lines use the same syntax.
//!
//! ```text
//! ptxforge-sim run [KERNEL.ptx] [--spec LAUNCH.json] --entry NAME --grid X[,Y[,Z]] --block X[,Y[,Z]]
//!     [--smem BYTES]
//!     [--buf NAME=TYPE:SOURCE]...   SOURCE: file:PATH | zeros:N | iota:N | uninit:N | rand:N:SEED | list:V,V,..
//!     [--init NAME=FIRST..END:VALUES]...   VALUES: zeros | iota | rand[:SEED] | fill:V | list:V,V,..
//!     [--global NAME=TYPE:VALUES]...       VALUES: V,V,.. or a SOURCE (not uninit)
//!     [--arg NAME | --arg TYPE:VALUE]...
//!     [--dump NAME=PATH]... [--no-check KIND]... [--shuffle-blocks SEED] [--fuel N] [--threads N]
//!     [--report json|text]
//! ```
//!
//! `--spec` reads a JSON launch spec (see [`flags_from_json`]) standing for flags at its place; flags after
//! it add to or override it. `--dump` names a buffer or a module variable.

mod spec_file;
mod values;

use std::collections::HashMap;

use crate::device::{Arg, BufferId, Device, LaunchReport, Module, Options};
use crate::error::SimError;
use crate::types::Ty;

pub use spec_file::{flags_from_json, spec_flags};
pub use values::{
    expand_list, parse_global, parse_init, parse_scalar, parse_source, parse_ty, source_bytes,
    value_bits, GlobalSpec, InitSpec, Source,
};

/// How the report is printed on stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReportFormat {
    /// One JSON object (stable field names, see [`crate::json`]).
    #[default]
    Json,
    /// The sanitizer-style human report ([`crate::text`]).
    Text,
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
    pub inits: Vec<InitSpec>,
    pub globals: Vec<GlobalSpec>,
    pub dumps: Vec<(String, String)>,
    pub options: Options,
    pub report: ReportFormat,
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

/// Splices the flags each `--spec FILE` stands for in its place.
fn expand_specs(args: &[String]) -> Result<Vec<String>, String> {
    let mut out = Vec::with_capacity(args.len());
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--spec" {
            let path = it.next().ok_or("`--spec` needs a value")?;
            out.extend(spec_flags(path)?);
        } else {
            out.push(a.clone());
        }
    }
    Ok(out)
}

/// Parses the arguments after `run`: the kernel path first unless `--spec` or `--kernel` gives
/// it, options in any order after it.
pub fn parse_run(args: &[String]) -> Result<RunSpec, String> {
    let args = expand_specs(args)?;
    let mut it = args.iter().peekable();
    let kernel = match it.peek() {
        Some(a) if !a.starts_with("--") => it.next().cloned().unwrap_or_default(),
        _ => String::new(),
    };
    let mut spec = RunSpec {
        kernel,
        entry: String::new(),
        grid: [1, 1, 1],
        block: [1, 1, 1],
        smem: 0,
        bufs: Vec::new(),
        args: Vec::new(),
        inits: Vec::new(),
        globals: Vec::new(),
        dumps: Vec::new(),
        options: Options::default(),
        report: ReportFormat::Json,
    };
    let (mut have_grid, mut have_block) = (false, false);
    while let Some(flag) = it.next() {
        let mut val = || {
            it.next()
                .cloned()
                .ok_or_else(|| format!("`{flag}` needs a value"))
        };
        match flag.as_str() {
            "--kernel" => spec.kernel = val()?,
            "--entry" => spec.entry = val()?,
            "--init" => spec.inits.push(parse_init(&val()?)?),
            "--global" => spec.globals.push(parse_global(&val()?)?),
            "--report" => {
                spec.report = match val()?.as_str() {
                    "json" => ReportFormat::Json,
                    "text" => ReportFormat::Text,
                    other => return Err(format!("unknown report `{other}` (json, text)")),
                }
            }
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
    if spec.kernel.is_empty() {
        return Err("missing KERNEL.ptx (first argument, --kernel or a spec's \"kernel\")".into());
    }
    if spec.entry.is_empty() {
        return Err("missing --entry NAME".into());
    }
    if !have_grid || !have_block {
        return Err("missing --grid or --block".into());
    }
    let has_buf = |n: &str| spec.bufs.iter().any(|b| b.name == n);
    for a in &spec.args {
        if let ArgSpec::Buffer(n) = a {
            if !has_buf(n) {
                return Err(format!(
                    "--arg `{n}` names no --buf (scalars are written TYPE:VALUE)"
                ));
            }
        }
    }
    for i in &spec.inits {
        if !has_buf(&i.name) {
            return Err(format!("--init `{}` names no --buf", i.name));
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
    /// The parsed kernel (for module variables: [`Device::read_symbol`]).
    pub module: Module,
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
    for i in &spec.inits {
        let (id, ty) = buffers[&i.name];
        let (bytes, _) = source_bytes(ty, &i.source).map_err(RunError::Usage)?;
        let size = ty.bytes() as usize;
        let len = device.len_bytes(id).map_err(RunError::Sim)?;
        if i.end * size > len {
            return Err(RunError::Usage(format!(
                "--init {}={}..{}: the buffer holds {} elements",
                i.name,
                i.first,
                i.end,
                len / size
            )));
        }
        device
            .write_at::<u8>(id, i.first * size, &bytes.unwrap_or_default())
            .map_err(RunError::Sim)?;
    }
    for g in &spec.globals {
        let (bytes, _) = source_bytes(g.ty, &g.source).map_err(RunError::Usage)?;
        device
            .write_symbol::<u8>(&module, &g.name, &bytes.unwrap_or_default())
            .map_err(RunError::Sim)?;
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
        module,
        buffers,
    })
}

/// `ptxforge-sim` main: returns the exit code (0 clean, 1 findings, 2 usage/parse/unsupported).
pub fn main_with(args: &[String]) -> i32 {
    const USAGE: &str = "usage: ptxforge-sim run [KERNEL.ptx] [--spec LAUNCH.json] --entry NAME --grid X[,Y[,Z]] --block X[,Y[,Z]]\n       [--smem BYTES] [--buf NAME=TYPE:SOURCE]... [--init NAME=FIRST..END:VALUES]... [--global NAME=TYPE:VALUES]...\n       [--arg NAME | --arg TYPE:VALUE]... [--dump NAME=PATH]... [--no-check KIND]... [--shuffle-blocks SEED]\n       [--fuel N] [--threads N] [--report json|text]";
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
    let mut out = match run_source(&text, &spec) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    for (name, path) in &spec.dumps {
        let bytes = match dump_bytes(&mut out, name) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("error: --dump {name}: {e}");
                return 2;
            }
        };
        if let Err(e) = std::fs::write(path, bytes) {
            eprintln!("error: cannot write `{path}`: {e}");
            return 2;
        }
    }
    match spec.report {
        ReportFormat::Json => println!("{}", crate::json::report_json(&out.report)),
        ReportFormat::Text => print!("{}", crate::text::report_text(&spec.entry, &out.report)),
    }
    i32::from(!out.report.is_clean())
}

/// The bytes of buffer `name`, or else of module variable `name`, after the launch.
fn dump_bytes(out: &mut RunOutcome, name: &str) -> Result<Vec<u8>, SimError> {
    match out.buffers.get(name) {
        Some((id, _)) => out.device.download::<u8>(*id),
        None => out.device.read_symbol::<u8>(&out.module, name),
    }
}
