//! The CPU backend: runs kernels in the `ptxforge-sim` interpreter with every check on.
//!
//! Each distinct PTX module is parsed and decoded once and cached by content. A launch whose
//! kernel trips a check (out of bounds, uninitialised read, shared-memory race, divergent
//! barrier, …) fails with [`LaunchError::Findings`]. The interpreter counters of every launch
//! are kept until [`SimBackend::take_launch_log`].

use std::collections::HashMap;
use std::fmt::Write as _;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use ptxforge_sim::{Arg, BufferId, Counters, Device, Module, Options};

use super::{
    byte_len, check_write_len, from_le_bytes, to_le_bytes, Backend, DeviceBuffer, Element,
    KernelArg, LaunchConfig, LaunchError,
};

/// A buffer in the interpreter's device memory; freed when dropped (its address range is never
/// reused, so a kernel given a stale address is still caught by memcheck).
#[derive(Debug)]
pub struct SimBuffer {
    id: BufferId,
    /// Element size in bytes, so findings can give element indices.
    elem_bytes: usize,
    owner: Weak<Mutex<State>>,
}

impl Drop for SimBuffer {
    fn drop(&mut self) {
        if let Some(state) = self.owner.upgrade() {
            let mut state = state.lock().unwrap_or_else(|p| p.into_inner());
            // Freeing can only fail for an id that is already gone; nothing to do then.
            let _ = state.device.free(self.id);
        }
    }
}

/// What one launch did, for counters and benchmarks.
#[derive(Debug, Clone, PartialEq)]
pub struct LaunchRecord {
    pub entry: String,
    pub config: LaunchConfig,
    pub counters: Counters,
}

#[derive(Debug, Default)]
struct State {
    device: Device,
    modules: HashMap<u64, Arc<Module>>,
    log: Vec<LaunchRecord>,
}

/// The interpreter backend: always available, deterministic, checks on.
#[derive(Debug)]
pub struct SimBackend {
    state: Arc<Mutex<State>>,
    options: Options,
}

impl Default for SimBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl SimBackend {
    /// A backend with every check on (memcheck, initcheck, racecheck, synccheck, fuel).
    pub fn new() -> Self {
        Self::with_options(Options::default())
    }

    /// A backend with explicit interpreter options (e.g. checks off for throughput runs).
    pub fn with_options(options: Options) -> Self {
        Self {
            state: Arc::new(Mutex::new(State::default())),
            options,
        }
    }

    /// Wraps a fresh allocation so it is freed when dropped.
    fn buffer<T: Element>(&self, id: BufferId) -> SimBuffer {
        SimBuffer {
            id,
            elem_bytes: T::KIND.size_bytes(),
            owner: Arc::downgrade(&self.state),
        }
    }

    /// Buffers currently allocated on this backend (dropped ones are freed).
    pub fn live_buffers(&self) -> usize {
        self.state().device.live_buffers()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the interpreter state half-updated in a
        // way later launches depend on, so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The launches since the last call (entry, configuration, interpreter counters).
    pub fn take_launch_log(&self) -> Vec<LaunchRecord> {
        std::mem::take(&mut self.state().log)
    }

    /// How many distinct PTX modules have been parsed (each is parsed once).
    pub fn cached_modules(&self) -> usize {
        self.state().modules.len()
    }
}

fn sim_error(e: ptxforge_sim::SimError) -> LaunchError {
    LaunchError::Backend(e.to_string())
}

fn content_key(ptx: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    ptx.hash(&mut h);
    h.finish()
}

impl Backend for SimBackend {
    type RawBuffer = SimBuffer;

    fn alloc<T: Element>(&self, len: usize) -> Result<DeviceBuffer<Self, T>, LaunchError> {
        let bytes = byte_len::<T>(len)?;
        let id = self.state().device.alloc(bytes);
        Ok(DeviceBuffer::from_raw(self.buffer::<T>(id), len))
    }

    fn upload<T: Element>(&self, data: &[T]) -> Result<DeviceBuffer<Self, T>, LaunchError> {
        let bytes = to_le_bytes(data);
        let id = self.state().device.upload::<u8>(&bytes);
        Ok(DeviceBuffer::from_raw(self.buffer::<T>(id), data.len()))
    }

    fn write<T: Element>(
        &self,
        buf: &mut DeviceBuffer<Self, T>,
        data: &[T],
    ) -> Result<(), LaunchError> {
        check_write_len(buf, data)?;
        let bytes = to_le_bytes(data);
        self.state()
            .device
            .write::<u8>(buf.raw().id, &bytes)
            .map_err(sim_error)
    }

    fn download<T: Element>(&self, buf: &DeviceBuffer<Self, T>) -> Result<Vec<T>, LaunchError> {
        let bytes = self
            .state()
            .device
            .download::<u8>(buf.raw().id)
            .map_err(sim_error)?;
        Ok(from_le_bytes(&bytes, buf.len()))
    }

    fn launch(
        &self,
        ptx: &str,
        entry: &str,
        config: LaunchConfig,
        args: &[KernelArg<'_, Self>],
    ) -> Result<(), LaunchError> {
        let args_in = args;
        let args: Vec<Arg> = args
            .iter()
            .map(|a| match a {
                KernelArg::Buffer(b) => Arg::Buffer(b.id),
                KernelArg::U32(v) => Arg::U32(*v),
                KernelArg::S32(v) => Arg::S32(*v),
                KernelArg::U64(v) => Arg::U64(*v),
                KernelArg::F32(v) => Arg::F32(*v),
                KernelArg::F64(v) => Arg::F64(*v),
            })
            .collect();
        let mut state = self.state();
        let key = content_key(ptx);
        let module = match state.modules.get(&key) {
            Some(m) => Arc::clone(m),
            None => {
                let m = Arc::new(Module::parse(ptx).map_err(sim_error)?);
                state.modules.insert(key, Arc::clone(&m));
                m
            }
        };
        let dims = |d: super::Dim3| [d.x, d.y, d.z];
        let report = state
            .device
            .launch(
                &module,
                entry,
                dims(config.grid),
                dims(config.block),
                config.dynamic_shared_bytes,
                &args,
                &self.options,
            )
            .map_err(sim_error)?;
        state.log.push(LaunchRecord {
            entry: entry.to_string(),
            config,
            counters: report.counters,
        });
        if report.findings.is_empty() {
            return Ok(());
        }
        let buffers = argument_buffers(&state.device, &module, entry, args_in);
        let mut text = String::new();
        for f in report.findings.iter().take(5) {
            let at = f
                .address
                .map(|a| match locate(a, &buffers) {
                    Some(place) => format!(" at {place}"),
                    None => format!(" at address {a:#x}"),
                })
                .unwrap_or_default();
            let _ = write!(
                text,
                "\n  {}{at}: {} (line {}, thread {:?}, block {:?})",
                f.kind.name(),
                f.message,
                f.line,
                f.thread,
                f.block,
            );
        }
        if report.findings.len() > 5 {
            let _ = write!(text, "\n  … and {} more", report.findings.len() - 5);
        }
        Err(LaunchError::Findings {
            entry: entry.to_string(),
            report: text,
        })
    }
}

/// A buffer argument of a launch: its parameter name, address range and element size.
#[derive(Debug)]
struct NamedBuffer {
    name: String,
    base: u64,
    bytes: u64,
    elem_bytes: u64,
}

/// The buffer arguments of a launch, named after the entry's parameters.
fn argument_buffers(
    device: &Device,
    module: &Module,
    entry: &str,
    args: &[KernelArg<'_, SimBackend>],
) -> Vec<NamedBuffer> {
    let params = module.params(entry).unwrap_or(&[]);
    args.iter()
        .enumerate()
        .filter_map(|(i, a)| match a {
            KernelArg::Buffer(b) => Some(NamedBuffer {
                name: params
                    .get(i)
                    .map_or_else(|| format!("argument {i}"), |p| p.name.clone()),
                base: device.address(b.id).ok()?,
                bytes: device.len_bytes(b.id).ok()? as u64,
                elem_bytes: b.elem_bytes.max(1) as u64,
            }),
            _ => None,
        })
        .collect()
}

/// `name[index]` of the buffer argument holding global address `address`, or the element just
/// past one (within the unmapped gap the interpreter leaves after each buffer).
fn locate(address: u64, buffers: &[NamedBuffer]) -> Option<String> {
    let b = buffers
        .iter()
        .filter(|b| b.base <= address && address - b.base < b.bytes + GAP_BYTES)
        .max_by_key(|b| b.base)?;
    let index = (address - b.base) / b.elem_bytes;
    let len = b.bytes / b.elem_bytes;
    Some(if index < len {
        format!("`{}[{index}]`", b.name)
    } else {
        format!("`{}[{index}]` (past the end of its {len} elements)", b.name)
    })
}

/// How far past a buffer's end an address is still reported against it.
const GAP_BYTES: u64 = 64 * 1024;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dropped_buffers_are_freed() {
        let dev = SimBackend::new();
        let kept = dev.upload(&[1.0f32, 2.0]).unwrap();
        for _ in 0..100 {
            let a = dev.upload(&[0u32; 64]).unwrap();
            let b = dev.alloc::<f64>(16).unwrap();
            assert_eq!(dev.live_buffers(), 3);
            drop((a, b));
        }
        assert_eq!(dev.live_buffers(), 1);
        assert_eq!(dev.download(&kept).unwrap(), vec![1.0, 2.0]);
        // A buffer outliving its backend drops without effect.
        let orphan = {
            let other = SimBackend::new();
            other.alloc::<u8>(4).unwrap()
        };
        drop(orphan);
    }

    /// Both host-side backends refuse an allocation whose byte size overflows and a write of
    /// another length than the buffer's, leaving the buffer as it was.
    #[test]
    fn bad_sizes_are_refused() {
        fn check<B: Backend>(dev: &B) {
            let too_big = dev.alloc::<f64>(usize::MAX / 4).err();
            assert!(
                matches!(too_big, Some(LaunchError::InvalidDim { name: "len", .. })),
                "{too_big:?}"
            );
            let mut buf = dev.upload(&[1.0f32, 2.0]).unwrap();
            let short = dev.write(&mut buf, &[3.0]);
            assert!(
                matches!(
                    short,
                    Err(LaunchError::BufferLength {
                        name: "data",
                        expected: 2,
                        actual: 1
                    })
                ),
                "{short:?}"
            );
            assert_eq!(dev.download(&buf).unwrap(), vec![1.0, 2.0]);
            dev.write(&mut buf, &[3.0, 4.0]).unwrap();
            assert_eq!(dev.download(&buf).unwrap(), vec![3.0, 4.0]);
        }
        check(&SimBackend::new());
        check(&super::super::RecordingBackend::new());
    }

    /// A kernel that writes `a[n]` for thread `n`: launched with one thread too many, memcheck
    /// reports the stray store as `a[4]`, past the end of the 4 elements, by parameter name.
    #[test]
    fn findings_name_the_buffer_and_element() {
        let ptx = "
.version 7.0
.target sm_80
.address_size 64
.visible .entry store_tid(.param .u64 a)
{
    .reg .b32 %r<3>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [a];
    cvta.to.global.u64 %rd1, %rd1;
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r1;
    ret;
}
";
        let dev = SimBackend::new();
        let a = dev.alloc::<u32>(4).unwrap();
        let config = LaunchConfig {
            grid: super::super::Dim3::x(1),
            block: super::super::Dim3::x(5),
            dynamic_shared_bytes: 0,
        };
        let err = dev
            .launch(ptx, "store_tid", config, &[KernelArg::buffer(&a)])
            .unwrap_err();
        let LaunchError::Findings { report, .. } = err else {
            panic!("expected findings, got {err:?}");
        };
        assert!(
            report.contains("OutOfBounds at `a[4]` (past the end of its 4 elements)"),
            "{report}"
        );
        assert!(!report.contains("at address"), "{report}");
    }
}
