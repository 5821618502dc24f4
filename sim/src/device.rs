//! The host API: [`Module`] (parsed and decoded PTX), [`Device`] (simulated device memory and
//! launches), launch [`Arg`]s, [`Options`] and the [`LaunchReport`]. Host misuse (unknown entry,
//! argument mismatch, bad buffer, impossible launch configuration) is a [`SimError`]; faults of
//! the kernel are [`Finding`]s in the report.

use crate::checks::CheckConfig;
use crate::counters::Counters;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::decode::{self, GlobalVar, ParamInfo, Program};
use crate::error::SimError;
use crate::exec::{self, LaunchSpec};
use crate::findings::Finding;
use crate::memory::GlobalMem;
use crate::parse;
use crate::types::Ty;

/// A parsed and decoded PTX module.
#[derive(Debug, Clone)]
pub struct Module {
    /// Identifies the module's variables in a [`Device`] (clones share them).
    id: u64,
    entries: Vec<Program>,
    consts: Vec<u8>,
    /// Module-scope `.const` variables: name, offset in `consts`, size.
    const_vars: Vec<(String, u64, u64)>,
    globals: Vec<GlobalVar>,
    target: Vec<String>,
    version: Option<String>,
}

static NEXT_MODULE_ID: AtomicU64 = AtomicU64::new(1);

impl Module {
    /// Parses and decodes every `.entry` of `ptx_text`.
    pub fn parse(ptx_text: &str) -> Result<Module, SimError> {
        let ast = parse::parse(ptx_text)?;
        let (const_syms, consts) = decode::layout_consts(&ast.vars)?;
        let globals = decode::layout_globals(&ast.vars)?;
        let const_vars = ast
            .vars
            .iter()
            .filter_map(|v| {
                let off = *const_syms.get(&v.name)?;
                (v.space == parse::ast::Space::Const).then(|| (v.name.clone(), off, v.size()))
            })
            .collect();
        let entries = ast
            .functions
            .iter()
            .filter(|f| f.is_entry)
            .map(|f| decode::decode_entry(&ast, f, &const_syms))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Module {
            id: NEXT_MODULE_ID.fetch_add(1, Ordering::Relaxed),
            entries,
            consts,
            const_vars,
            globals,
            target: ast.target,
            version: ast.version,
        })
    }

    /// Names of the module-scope `.global` and `.const` variables, in declaration order.
    pub fn variables(&self) -> Vec<&str> {
        let g = self.globals.iter().map(|g| g.name.as_str());
        g.chain(self.const_vars.iter().map(|c| c.0.as_str()))
            .collect()
    }

    fn unknown_symbol(&self, name: &str) -> SimError {
        SimError::UnknownSymbol {
            name: name.to_string(),
            available: self.variables().join(", "),
        }
    }

    /// Names of the module's entries, in source order.
    pub fn entries(&self) -> Vec<&str> {
        self.entries.iter().map(|e| e.name.as_str()).collect()
    }

    /// Declared parameters of an entry.
    pub fn params(&self, entry: &str) -> Option<&[ParamInfo]> {
        self.entry(entry).map(|p| p.params.as_slice())
    }

    /// Static shared memory of an entry, in bytes.
    pub fn static_shared_bytes(&self, entry: &str) -> Option<u64> {
        self.entry(entry).map(|p| p.static_smem)
    }

    /// `.target` of the module (e.g. `["sm_80"]`).
    pub fn target(&self) -> &[String] {
        &self.target
    }

    pub fn version(&self) -> Option<&str> {
        self.version.as_deref()
    }

    fn entry(&self, name: &str) -> Option<&Program> {
        self.entries.iter().find(|e| e.name == name)
    }
}

/// Handle of a device buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BufferId(u32);

impl BufferId {
    pub fn index(self) -> u32 {
        self.0
    }
}

/// A host scalar type that can be copied to and from device buffers (little-endian).
pub trait Scalar: Copy + 'static {
    const SIZE: usize;
    fn write_le(self, out: &mut Vec<u8>);
    fn read_le(bytes: &[u8]) -> Self;
}

macro_rules! scalar {
    ($($t:ty),*) => {$(
        impl Scalar for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            fn write_le(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn read_le(bytes: &[u8]) -> Self {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(&bytes[..Self::SIZE]);
                <$t>::from_le_bytes(a)
            }
        }
    )*};
}
scalar!(
    u8,
    u16,
    u32,
    u64,
    i8,
    i16,
    i32,
    i64,
    f32,
    f64,
    half::f16,
    half::bf16
);

fn to_bytes<T: Scalar>(data: &[T]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() * T::SIZE);
    for &x in data {
        x.write_le(&mut out);
    }
    out
}

/// A kernel argument, in parameter order.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arg {
    /// A buffer's device address (for a `.u64`/`.b64`/`.s64` pointer parameter).
    Buffer(BufferId),
    U8(u8),
    U16(u16),
    U32(u32),
    S32(i32),
    U64(u64),
    S64(i64),
    F32(f32),
    F64(f64),
}

impl Arg {
    fn describe(&self) -> &'static str {
        match self {
            Arg::Buffer(_) => "a buffer",
            Arg::U8(_) => "u8",
            Arg::U16(_) => "u16",
            Arg::U32(_) => "u32",
            Arg::S32(_) => "s32",
            Arg::U64(_) => "u64",
            Arg::S64(_) => "s64",
            Arg::F32(_) => "f32",
            Arg::F64(_) => "f64",
        }
    }
}

/// Which checks run, the fuel limit and the block schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Out-of-bounds and misaligned global/shared/local/param accesses.
    pub memcheck: bool,
    /// Reads of global bytes never written or uploaded.
    pub initcheck: bool,
    /// Shared-memory races between barriers.
    pub racecheck: bool,
    /// Divergent barriers, exits before barriers, bad warp-sync masks.
    pub synccheck: bool,
    /// `cp.async` hazards: a pending copy's shared destination read or written before its group
    /// is waited, its global source written while pending, a thread exiting with copies never
    /// waited.
    pub asynccheck: bool,
    /// Instructions one thread may execute before `FuelExhausted`.
    pub fuel: u64,
    /// Run blocks in a shuffled order (seeded, deterministic) instead of linear order.
    pub shuffle_blocks: Option<u64>,
    /// Host threads that run blocks at once (default: the available parallelism; 0 counts as 1).
    /// Results do not depend on it: blocks then see global memory as of launch start plus
    /// their own stores, and their stores, findings and counters are merged in block order. A
    /// kernel with global atomics or reductions runs one block at a time whatever this says. A
    /// block that reads what another block of the same launch writes (a race in CUDA too) sees
    /// the launch-start value when blocks run in parallel, the other block's value when not.
    pub threads: usize,
    /// Distinct findings kept per launch (further ones are counted in `findings_dropped`).
    pub max_findings: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            memcheck: true,
            initcheck: true,
            racecheck: true,
            synccheck: true,
            asynccheck: true,
            fuel: 50_000_000,
            shuffle_blocks: None,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            max_findings: 100,
        }
    }
}

impl Options {
    /// Every check off (counters still run): for throughput and plain execution.
    pub fn unchecked() -> Self {
        Options {
            memcheck: false,
            initcheck: false,
            racecheck: false,
            synccheck: false,
            asynccheck: false,
            ..Options::default()
        }
    }
}

/// Result of a launch that ran.
#[derive(Debug, Clone, PartialEq)]
pub struct LaunchReport {
    pub findings: Vec<Finding>,
    pub counters: Counters,
    /// Findings beyond `Options::max_findings`.
    pub findings_dropped: u64,
}

impl LaunchReport {
    pub fn is_clean(&self) -> bool {
        self.findings.is_empty()
    }
}

/// Largest shared memory per block the simulator accepts (sm_90: 227 KiB).
pub const MAX_SHARED_BYTES: u64 = 227 * 1024;

/// The simulated device: global memory and launches.
#[derive(Default)]
pub struct Device {
    mem: GlobalMem,
    /// Variables of each module used on this device, by module id.
    modules: HashMap<u64, ModuleVars>,
}

/// Module ids are process-wide counters: leave them out, so equal devices print equally.
impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut consts: Vec<&[u8]> = self.modules.values().map(|m| m.consts.as_slice()).collect();
        consts.sort_unstable();
        f.debug_struct("Device")
            .field("mem", &self.mem)
            .field("module_consts", &consts)
            .finish()
    }
}

/// A module's variables on a device: created with their initialisers when the module is first
/// used (launched or accessed), then kept for the device's lifetime, like CUDA's
/// `__device__`/`__constant__` variables.
#[derive(Debug)]
struct ModuleVars {
    /// One buffer per `.global` variable, in declaration order.
    globals: Vec<BufferId>,
    consts: Vec<u8>,
}

/// Where a module-scope variable lives on the device.
enum Var {
    Global(BufferId),
    Const(usize, usize),
}

impl Device {
    pub fn new() -> Device {
        Device::default()
    }

    /// Allocates `bytes` of uninitialised memory (initcheck flags reads before writes).
    pub fn alloc(&mut self, bytes: usize) -> BufferId {
        BufferId(self.mem.alloc(bytes, false) as u32)
    }

    /// Allocates a buffer holding `data`.
    pub fn upload<T: Scalar>(&mut self, data: &[T]) -> BufferId {
        let bytes = to_bytes(data);
        let i = self.mem.alloc(bytes.len(), true);
        self.mem.buffers[i].data.copy_from_slice(&bytes);
        BufferId(i as u32)
    }

    fn buf(&self, id: BufferId) -> Result<&crate::memory::Buffer, SimError> {
        self.mem
            .buffers
            .get(id.0 as usize)
            .filter(|b| b.live)
            .ok_or(SimError::BadBuffer(id.0))
    }

    /// Overwrites the start of a buffer with `data` (which must fit).
    pub fn write<T: Scalar>(&mut self, id: BufferId, data: &[T]) -> Result<(), SimError> {
        self.write_at(id, 0, data)
    }

    /// Overwrites elements `first..first + data.len()` of a buffer of `T`s (which must fit).
    /// Only those bytes become initialised: on an [`alloc`](Device::alloc)ed buffer, initcheck
    /// still flags reads of the rest.
    pub fn write_at<T: Scalar>(
        &mut self,
        id: BufferId,
        first: usize,
        data: &[T],
    ) -> Result<(), SimError> {
        let bytes = to_bytes(data);
        let len = self.buf(id)?.data.len();
        let start = first.saturating_mul(T::SIZE);
        let end = start.saturating_add(bytes.len());
        if end > len {
            return Err(SimError::BufferSize {
                id: id.0,
                message: format!(
                    "writing bytes {start}..{end} of a {len}-byte buffer (elements {first}..{} of {} bytes each)",
                    first + data.len(),
                    T::SIZE
                ),
            });
        }
        let b = &mut self.mem.buffers[id.0 as usize];
        b.data[start..end].copy_from_slice(&bytes);
        b.mark_init(start, bytes.len());
        Ok(())
    }

    /// Copies a whole buffer out as `T`s.
    pub fn download<T: Scalar>(&self, id: BufferId) -> Result<Vec<T>, SimError> {
        let b = self.buf(id)?;
        if b.data.len() % T::SIZE != 0 {
            return Err(SimError::BufferSize {
                id: id.0,
                message: format!(
                    "{} bytes is not a whole number of {}-byte elements",
                    b.data.len(),
                    T::SIZE
                ),
            });
        }
        Ok(b.data.chunks_exact(T::SIZE).map(T::read_le).collect())
    }

    pub fn len_bytes(&self, id: BufferId) -> Result<usize, SimError> {
        Ok(self.buf(id)?.data.len())
    }

    /// Device address of a buffer.
    pub fn address(&self, id: BufferId) -> Result<u64, SimError> {
        Ok(self.buf(id)?.base)
    }

    /// Buffers allocated and not yet freed.
    pub fn live_buffers(&self) -> usize {
        self.mem.buffers.iter().filter(|b| b.live).count()
    }

    /// Frees a buffer; its address range is never reused, so stale pointers are caught.
    pub fn free(&mut self, id: BufferId) -> Result<(), SimError> {
        self.buf(id)?;
        let b = &mut self.mem.buffers[id.0 as usize];
        b.live = false;
        b.data = Vec::new();
        b.init = Vec::new();
        Ok(())
    }

    /// The module's variables on this device, created on first use.
    fn module_vars(&mut self, module: &Module) -> &mut ModuleVars {
        if !self.modules.contains_key(&module.id) {
            let globals = module
                .globals
                .iter()
                .map(|g| {
                    // Buffers are 256-byte aligned, which covers any `.align`.
                    debug_assert!(g.align <= 256);
                    let i = self.mem.alloc(g.init.len().max(1), true);
                    self.mem.buffers[i].data[..g.init.len()].copy_from_slice(&g.init);
                    BufferId(i as u32)
                })
                .collect();
            let vars = ModuleVars {
                globals,
                consts: module.consts.clone(),
            };
            self.modules.insert(module.id, vars);
        }
        self.modules
            .get_mut(&module.id)
            .expect("module variables were just created")
    }

    fn var(&mut self, module: &Module, name: &str) -> Result<Var, SimError> {
        if let Some(i) = module.globals.iter().position(|g| g.name == name) {
            return Ok(Var::Global(self.module_vars(module).globals[i]));
        }
        match module.const_vars.iter().find(|c| c.0 == name) {
            Some(&(_, off, size)) => Ok(Var::Const(off as usize, size as usize)),
            None => Err(module.unknown_symbol(name)),
        }
    }

    /// The buffer holding module-scope `.global` variable `name` (what `cudaGetSymbolAddress`
    /// gives): read and write it with the buffer functions.
    pub fn symbol_buffer(&mut self, module: &Module, name: &str) -> Result<BufferId, SimError> {
        match self.var(module, name)? {
            Var::Global(id) => Ok(id),
            Var::Const(..) => Err(SimError::BufferSize {
                id: 0,
                message: format!("`{name}` is a .const variable, not a buffer; use write_symbol"),
            }),
        }
    }

    /// Overwrites the start of module-scope variable `name` (`.global` or `.const`) with
    /// `data`, as `cudaMemcpyToSymbol` does; later launches of the module see it.
    pub fn write_symbol<T: Scalar>(
        &mut self,
        module: &Module,
        name: &str,
        data: &[T],
    ) -> Result<(), SimError> {
        match self.var(module, name)? {
            Var::Global(id) => self.write(id, data),
            Var::Const(off, size) => {
                let bytes = to_bytes(data);
                if bytes.len() > size {
                    return Err(SimError::BufferSize {
                        id: 0,
                        message: format!(
                            "writing {} bytes into the {size}-byte .const variable `{name}`",
                            bytes.len()
                        ),
                    });
                }
                let vars = self.module_vars(module);
                vars.consts[off..off + bytes.len()].copy_from_slice(&bytes);
                Ok(())
            }
        }
    }

    /// The contents of module-scope variable `name` as `T`s (`cudaMemcpyFromSymbol`).
    pub fn read_symbol<T: Scalar>(
        &mut self,
        module: &Module,
        name: &str,
    ) -> Result<Vec<T>, SimError> {
        match self.var(module, name)? {
            Var::Global(id) => self.download(id),
            Var::Const(off, size) => {
                let bytes = &self.module_vars(module).consts[off..off + size];
                Ok(bytes.chunks_exact(T::SIZE).map(T::read_le).collect())
            }
        }
    }

    /// Runs `entry` over `grid` × `block` threads.
    #[allow(clippy::too_many_arguments)]
    pub fn launch(
        &mut self,
        module: &Module,
        entry: &str,
        grid: [u32; 3],
        block: [u32; 3],
        dynamic_smem: u32,
        args: &[Arg],
        options: &Options,
    ) -> Result<LaunchReport, SimError> {
        warn_if_unoptimized();
        let prog = module.entry(entry).ok_or_else(|| SimError::UnknownEntry {
            name: entry.to_string(),
            available: module.entries().join(", "),
        })?;
        check_dims(prog, grid, block)?;
        let params = self.param_buffer(prog, args)?;
        let dynamic = u64::from(dynamic_smem);
        let smem_bytes = if dynamic > 0 {
            prog.dynamic_smem_offset + dynamic
        } else {
            prog.static_smem
        };
        if smem_bytes > MAX_SHARED_BYTES {
            return Err(SimError::BadLaunch(format!(
                "{smem_bytes} bytes of shared memory per block exceeds {MAX_SHARED_BYTES}"
            )));
        }
        let nblocks = grid.iter().map(|&g| u64::from(g)).product::<u64>();
        let mut order: Vec<u32> = (0..nblocks as u32).collect();
        if let Some(seed) = options.shuffle_blocks {
            shuffle(&mut order, seed);
        }
        let global_addrs = self
            .module_vars(module)
            .globals
            .clone()
            .into_iter()
            .map(|id| self.address(id))
            .collect::<Result<Vec<_>, _>>()?;
        let consts = &self.modules[&module.id].consts;
        let spec = LaunchSpec {
            prog,
            grid,
            block,
            params,
            consts,
            global_addrs,
            smem_bytes,
            dynamic_smem: dynamic,
            checks: CheckConfig {
                memcheck: options.memcheck,
                initcheck: options.initcheck,
                racecheck: options.racecheck,
                synccheck: options.synccheck,
                asynccheck: options.asynccheck,
                fuel: options.fuel,
            },
            block_order: order,
            findings_cap: options.max_findings.max(1),
            workers: options.threads.max(1),
        };
        let (counters, mut findings) = exec::run(&spec, &mut self.mem);
        for f in &mut findings.list {
            f.source = prog.source_of(f.pc);
        }
        Ok(LaunchReport {
            findings: findings.list,
            counters,
            findings_dropped: findings.dropped,
        })
    }

    fn param_buffer(&self, prog: &Program, args: &[Arg]) -> Result<Vec<u8>, SimError> {
        if args.len() != prog.params.len() {
            return Err(SimError::ArgCount {
                entry: prog.name.clone(),
                expected: prog.params.len(),
                given: args.len(),
            });
        }
        let mut buf = vec![0u8; prog.param_size as usize];
        for (i, (arg, p)) in args.iter().zip(&prog.params).enumerate() {
            let mismatch = |message: String| SimError::ArgType {
                index: i,
                param: p.name.clone(),
                message,
            };
            let (bits, size, is_float): (u64, u64, Option<bool>) = match *arg {
                Arg::Buffer(id) => {
                    let addr = self.address(id)?;
                    if p.size != 8 || p.ty.is_float() {
                        return Err(mismatch(format!(
                            "a buffer address needs a 64-bit integer parameter, `{}` is .{}",
                            p.name,
                            ty_name(p)
                        )));
                    }
                    (addr, 8, Some(false))
                }
                Arg::U8(v) => (u64::from(v), 1, Some(false)),
                Arg::U16(v) => (u64::from(v), 2, Some(false)),
                Arg::U32(v) => (u64::from(v), 4, Some(false)),
                Arg::S32(v) => (u64::from(v as u32), 4, Some(false)),
                Arg::U64(v) => (v, 8, Some(false)),
                Arg::S64(v) => (v as u64, 8, Some(false)),
                Arg::F32(v) => (u64::from(v.to_bits()), 4, Some(true)),
                Arg::F64(v) => (v.to_bits(), 8, Some(true)),
            };
            if size != p.size {
                return Err(mismatch(format!(
                    "{} ({size} bytes) passed for a {}-byte .{} parameter",
                    arg.describe(),
                    p.size,
                    ty_name(p)
                )));
            }
            let typed = !p.is_array && !matches!(p.ty, Ty::B8 | Ty::B16 | Ty::B32 | Ty::B64);
            if typed && is_float.is_some_and(|f| f != p.ty.is_float()) {
                return Err(mismatch(format!(
                    "{} passed for a .{} parameter",
                    arg.describe(),
                    ty_name(p)
                )));
            }
            let off = p.offset as usize;
            buf[off..off + size as usize].copy_from_slice(&bits.to_le_bytes()[..size as usize]);
        }
        Ok(buf)
    }
}

fn ty_name(p: &ParamInfo) -> String {
    format!("{:?}", p.ty).to_lowercase()
}

fn check_dims(prog: &Program, grid: [u32; 3], block: [u32; 3]) -> Result<(), SimError> {
    if grid.contains(&0) || block.contains(&0) {
        return Err(SimError::BadLaunch(format!(
            "grid {grid:?} and block {block:?} must be non-zero"
        )));
    }
    let threads = block.iter().map(|&b| u64::from(b)).product::<u64>();
    if threads > 1024 || block[2] > 64 {
        return Err(SimError::BadLaunch(format!(
            "block {block:?} has {threads} threads (max 1024, z ≤ 64)"
        )));
    }
    if grid[1] > 65535 || grid[2] > 65535 || grid[0] > i32::MAX as u32 {
        return Err(SimError::BadLaunch(format!(
            "grid {grid:?} exceeds the device limits"
        )));
    }
    let blocks = grid.iter().map(|&g| u64::from(g)).product::<u64>();
    if blocks > u64::from(u32::MAX) {
        return Err(SimError::BadLaunch(format!(
            "grid {grid:?} has too many blocks"
        )));
    }
    if let Some(req) = prog.perf.reqntid {
        if req.iter().product::<u32>() != threads as u32 || (req != block && req[1..] != [1, 1]) {
            return Err(SimError::BadLaunch(format!(
                "entry `{}` requires block {req:?} (.reqntid), got {block:?}",
                prog.name
            )));
        }
    }
    if let Some(max) = prog.perf.maxntid {
        if threads > u64::from(max.iter().product::<u32>()) {
            return Err(SimError::BadLaunch(format!(
                "block {block:?} exceeds .maxntid {max:?} of `{}`",
                prog.name
            )));
        }
    }
    Ok(())
}

/// Deterministic Fisher–Yates with SplitMix64.
fn shuffle(v: &mut [u32], seed: u64) {
    let mut s = seed;
    let mut next = || {
        s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    for i in (1..v.len()).rev() {
        let j = (next() % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
}

/// The advice `warn_if_unoptimized` prints: the two `Cargo.toml` lines that optimise the
/// interpreter in a dependent crate's debug builds.
pub const UNOPTIMIZED_ADVICE: &str = "ptxforge-sim: the PTX interpreter was compiled without \
optimisation (opt-level 0) and runs kernels 6-10x slower. Add these two lines to your \
Cargo.toml:\n\n[profile.dev.package.ptxforge-sim]\nopt-level = 3\n";

/// Says once per process, on stderr, that the interpreter is unoptimised and how to fix it
/// (only in a build at opt-level 0; see `build.rs`).
fn warn_if_unoptimized() {
    #[cfg(ptxforge_sim_unoptimized)]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| eprintln!("{UNOPTIMIZED_ADVICE}"));
    }
}
