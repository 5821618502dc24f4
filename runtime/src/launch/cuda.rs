//! The CUDA backend (feature `cuda`): real GPUs through cudarc's driver API, loaded dynamically
//! so the crate builds, and [`CudaBackend::new`] fails with a typed error, without a CUDA
//! installation.
//!
//! - **Streams.** A backend is a context and one stream: its own ([`CudaBackend::new`]) or the
//!   caller's ([`CudaBackend::from_stream`]). Launches are queued on that stream and return at
//!   once; nothing here waits except downloads and [`Backend::synchronize`], so a sequence of
//!   wrapper calls with caller-provided buffers can be captured in a CUDA graph.
//! - **Buffers.** A buffer owns a cudarc `CudaSlice` (its own allocation, or a caller's slice
//!   taken over without a copy by [`DeviceBuffer::from_cuda_slice`] and given back by
//!   [`DeviceBuffer::into_cuda_slice`]), or is a borrowed view of part of a caller's slice
//!   ([`DeviceBuffer::view`], [`DeviceBuffer::view_mut`]). Lengths are checked by the wrappers
//!   as for every backend; a buffer of another context is refused before the launch.
//! - **Modules.** Each distinct PTX text is loaded once per backend (the driver JIT-compiles it
//!   for the device). The cache is keyed by the text's address and length, which the launch
//!   wrappers keep fixed (their PTX is a `static`), plus a fingerprint of its first and last
//!   4 KiB, so a launch does not hash the whole module.
//! - **Errors.** Driver failures keep their `CUresult` ([`DriverError`]); a missing driver
//!   library is [`LaunchError::NoDriver`], detected before cudarc is asked for a context.

// The driver calls behind launches, views and copies are `unsafe` in cudarc. They are sound
// here because every argument is checked against the entry's declared parameters (count and
// size) before a launch; views are range-checked against the slice they borrow and refused once
// the borrow has ended; and slices taken over or given back keep their exact byte length and
// owning stream. None of it is visible in the public API.
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use cudarc::driver::sys::CUfunction_attribute_enum;
use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DevicePtr, PushKernelArg,
};
use cudarc::nvrtc::Ptx;

use super::{
    byte_len, check_write_len, from_le_bytes, to_le_bytes, Backend, DeviceBuffer, DriverError,
    DriverErrorKind, Element, KernelArg, LaunchConfig, LaunchError, VIEW_ALIGN_BYTES,
};
use crate::Arch;

/// Static shared memory every kernel may use without opting in.
const DEFAULT_SHARED_LIMIT: u32 = 48 * 1024;
/// The most arguments one launch passes (kernels here take at most about twenty).
const MAX_ARGS: usize = 48;
/// Bytes at each end of a module's text that its fingerprint covers.
const FINGERPRINT_BYTES: usize = 4096;

/// A driver error with the call that raised it.
fn driver(call: &'static str) -> impl Fn(cudarc::driver::DriverError) -> LaunchError {
    move |e| LaunchError::Driver(driver_error(call, e.0))
}

fn driver_error(call: &'static str, code: cudarc::driver::sys::CUresult) -> DriverError {
    let name = format!("{code:?}");
    let kind = match name.as_str() {
        "CUDA_ERROR_OUT_OF_MEMORY" => DriverErrorKind::OutOfMemory,
        "CUDA_ERROR_ILLEGAL_ADDRESS" => DriverErrorKind::IllegalAddress,
        "CUDA_ERROR_MISALIGNED_ADDRESS" => DriverErrorKind::MisalignedAddress,
        "CUDA_ERROR_LAUNCH_FAILED"
        | "CUDA_ERROR_ASSERT"
        | "CUDA_ERROR_ILLEGAL_INSTRUCTION"
        | "CUDA_ERROR_LAUNCH_TIMEOUT" => DriverErrorKind::LaunchFailed,
        "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES" => DriverErrorKind::OutOfResources,
        "CUDA_ERROR_NO_DEVICE" | "CUDA_ERROR_INVALID_DEVICE" => DriverErrorKind::NoDevice,
        "CUDA_ERROR_INVALID_PTX"
        | "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"
        | "CUDA_ERROR_NO_BINARY_FOR_GPU"
        | "CUDA_ERROR_INVALID_IMAGE" => DriverErrorKind::InvalidModule,
        "CUDA_ERROR_NOT_FOUND" => DriverErrorKind::NotFound,
        _ => DriverErrorKind::Other,
    };
    DriverError {
        call,
        code: code as u32,
        name,
        kind,
    }
}

/// Whether the driver library can be loaded, asked before cudarc is (cudarc panics, printing a
/// message, when it cannot find the library).
fn driver_library_present() -> bool {
    ["cuda", "nvcuda"]
        .iter()
        .flat_map(|name| cudarc::get_lib_name_candidates(name))
        // SAFETY: loading the system's CUDA driver library runs its initialisers, which is what
        // every driver call would do first anyway; the handle is dropped at once.
        .any(|candidate| unsafe { libloading::Library::new(candidate) }.is_ok())
}

#[derive(Debug)]
struct Entry {
    function: CudaFunction,
    /// Parameter sizes in bytes, from the `.entry` declaration (shared, so a launch copies no
    /// list).
    param_sizes: Arc<[usize]>,
}

#[derive(Debug)]
struct LoadedModule {
    fingerprint: u64,
    module: Arc<CudaModule>,
    /// Parameter sizes of every entry of the text, read once at load.
    declared: HashMap<String, Vec<usize>>,
    entries: HashMap<String, Entry>,
}

/// The start and end of a module's text and its length: what the cache checks on a hit.
fn fingerprint(ptx: &str) -> u64 {
    let bytes = ptx.as_bytes();
    let head = &bytes[..bytes.len().min(FINGERPRINT_BYTES)];
    let tail = &bytes[bytes.len().saturating_sub(FINGERPRINT_BYTES)..];
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (head, tail, bytes.len()).hash(&mut h);
    h.finish()
}

/// A CUDA device: one context and the stream every launch and copy is queued on.
#[derive(Debug)]
pub struct CudaBackend {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    arch: Option<Arch>,
    /// Loaded modules by (text address, text length).
    modules: Mutex<HashMap<(usize, usize), LoadedModule>>,
}

impl CudaBackend {
    /// Opens device `ordinal` (its primary context) with a new stream of its own. Fails with
    /// [`LaunchError::NoDriver`] when the driver library is missing (nothing is printed, no
    /// panic), and with a [`LaunchError::Driver`] of kind `NoDevice` when there is no such
    /// device.
    pub fn new(ordinal: usize) -> Result<Self, LaunchError> {
        if !driver_library_present() {
            return Err(LaunchError::NoDriver(
                "the CUDA driver library (libcuda) could not be loaded".into(),
            ));
        }
        // The library is present, so cudarc will not panic looking for it; a panic left (a
        // driver older than the bindings lacking a symbol) is still turned into an error.
        let ctx = std::panic::catch_unwind(|| CudaContext::new(ordinal))
            .map_err(|_| {
                LaunchError::NoDriver("the CUDA driver lacks a function cudarc needs".into())
            })?
            .map_err(driver("cuCtxCreate"))?;
        let stream = ctx.new_stream().map_err(driver("cuStreamCreate"))?;
        Self::from_stream(stream)
    }

    /// A backend on the caller's stream (and its context): launches and copies are queued on
    /// `stream` in order with the caller's own work, so buffers the caller writes on it need
    /// no extra synchronisation.
    pub fn from_stream(stream: Arc<CudaStream>) -> Result<Self, LaunchError> {
        let ctx = Arc::clone(stream.context());
        let (major, minor) = ctx
            .compute_capability()
            .map_err(driver("cuDeviceGetAttribute"))?;
        Ok(Self {
            arch: Arch::from_compute_capability(major as u32, minor as u32),
            ctx,
            stream,
            modules: Mutex::new(HashMap::new()),
        })
    }

    /// The stream launches are queued on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The context buffers and modules live in.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The device's architecture ([`Arch::from_compute_capability`]); `None` for devices older
    /// than sm_70, which no kernel here targets.
    pub fn arch(&self) -> Option<Arch> {
        self.arch
    }

    fn modules(&self) -> MutexGuard<'_, HashMap<(usize, usize), LoadedModule>> {
        self.modules.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Entry `entry` of module `ptx` and its parameter sizes, loading the module on first use.
    fn function(
        &self,
        ptx: &str,
        entry: &str,
    ) -> Result<(CudaFunction, Arc<[usize]>), LaunchError> {
        let key = (ptx.as_ptr() as usize, ptx.len());
        let mut modules = self.modules();
        let fresh = match modules.get(&key) {
            Some(m) => m.fingerprint != fingerprint(ptx),
            None => true,
        };
        if fresh {
            let module = self
                .ctx
                .load_module(Ptx::from_src(ptx))
                .map_err(driver("cuModuleLoadData"))?;
            modules.insert(
                key,
                LoadedModule {
                    fingerprint: fingerprint(ptx),
                    module,
                    declared: entry_param_sizes(ptx),
                    entries: HashMap::new(),
                },
            );
        }
        let loaded = modules.get_mut(&key).expect("inserted above");
        if let Some(e) = loaded.entries.get(entry) {
            return Ok((e.function.clone(), Arc::clone(&e.param_sizes)));
        }
        let param_sizes: Arc<[usize]> = loaded
            .declared
            .get(entry)
            .map(|sizes| sizes.as_slice().into())
            .ok_or_else(|| LaunchError::Backend(format!("the module has no entry `{entry}`")))?;
        let function = loaded
            .module
            .load_function(entry)
            .map_err(driver("cuModuleGetFunction"))?;
        loaded.entries.insert(
            entry.to_string(),
            Entry {
                function: function.clone(),
                param_sizes: Arc::clone(&param_sizes),
            },
        );
        Ok((function, param_sizes))
    }

    fn own_context(&self) -> usize {
        self.ctx.cu_ctx() as usize
    }

    fn check_context(&self, raw: &CudaRawBuffer) -> Result<(), LaunchError> {
        if raw.ctx != self.own_context() {
            return Err(LaunchError::ForeignBuffer {
                entry: "(copy)".into(),
                index: 0,
            });
        }
        raw.check_live()
    }
}

/// Reads `.entry name( .param .TYPE name, … )` lists from PTX text: parameter sizes in bytes.
fn entry_param_sizes(ptx: &str) -> HashMap<String, Vec<usize>> {
    let mut out = HashMap::new();
    let mut rest = ptx;
    while let Some(at) = rest.find(".entry ") {
        rest = &rest[at + ".entry ".len()..];
        let Some(open) = rest.find('(') else { break };
        let name = rest[..open].trim().to_string();
        let Some(close) = rest.find(')') else { break };
        let sizes = rest[open + 1..close]
            .split(',')
            .filter_map(|p| p.split_whitespace().nth(1))
            .map(|ty| match ty.trim_start_matches('.') {
                "u8" | "s8" | "b8" => 1,
                "u16" | "s16" | "b16" | "f16" | "bf16" => 2,
                "u64" | "s64" | "b64" | "f64" => 8,
                _ => 4,
            })
            .collect();
        out.insert(name, sizes);
        rest = &rest[close..];
    }
    out
}

/// Device memory of a [`CudaBackend`] buffer: an owned cudarc slice, or a borrowed range of a
/// caller's slice.
pub struct CudaRawBuffer {
    storage: Storage,
    /// The owning context (`CUcontext` as an address), to refuse buffers of another one.
    ctx: usize,
}

enum Storage {
    Owned(CudaSlice<u8>),
    View {
        ptr: u64,
        bytes: usize,
        /// Cleared when the borrow the view came from ends.
        live: Arc<AtomicBool>,
    },
}

impl std::fmt::Debug for CudaRawBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.storage {
            Storage::Owned(s) => write!(f, "CudaRawBuffer::Owned({} bytes)", s.len()),
            Storage::View { bytes, live, .. } => write!(
                f,
                "CudaRawBuffer::View({bytes} bytes, live: {})",
                live.load(Ordering::Acquire)
            ),
        }
    }
}

impl CudaRawBuffer {
    fn owned(slice: CudaSlice<u8>) -> Self {
        Self {
            ctx: slice.context().cu_ctx() as usize,
            storage: Storage::Owned(slice),
        }
    }

    fn check_live(&self) -> Result<(), LaunchError> {
        match &self.storage {
            Storage::View { live, .. } if !live.load(Ordering::Acquire) => {
                Err(LaunchError::StaleView)
            }
            _ => Ok(()),
        }
    }
}

impl<T: Element> DeviceBuffer<CudaBackend, T> {
    /// Takes over a caller's cudarc slice without copying: launches read and write it in place,
    /// and [`into_cuda_slice`](Self::into_cuda_slice) gives it back. The slice must belong to
    /// the context of the backend it is launched on (checked at launch).
    pub fn from_cuda_slice(slice: CudaSlice<T>) -> Self {
        let stream = Arc::clone(slice.stream());
        let len = slice.len();
        let bytes = len * T::KIND.size_bytes();
        let ptr = slice.leak();
        // SAFETY: `ptr` is the allocation `slice` owned, `bytes` long, re-owned on the stream
        // it was allocated on; its bytes are already valid `T`s, so reading them as bytes is.
        let raw = unsafe { stream.upgrade_device_ptr::<u8>(ptr, bytes) };
        Self::from_raw(CudaRawBuffer::owned(raw), len)
    }

    /// Gives the allocation back as a cudarc slice of `len()` elements, without copying.
    /// Fails for a borrowed view, which owns nothing.
    pub fn into_cuda_slice(self) -> Result<CudaSlice<T>, LaunchError> {
        let len = self.len;
        match self.raw.storage {
            Storage::Owned(slice) => {
                let stream = Arc::clone(slice.stream());
                let ptr = slice.leak();
                // SAFETY: the allocation is at least `len * size_of::<T>()` bytes (checked when
                // it was made or taken over) and holds whatever kernels wrote, which every bit
                // pattern of the plain element types here accepts.
                Ok(unsafe { stream.upgrade_device_ptr::<T>(ptr, len) })
            }
            Storage::View { .. } => Err(LaunchError::Backend(
                "a borrowed view owns no allocation to give back".into(),
            )),
        }
    }

    /// A read-only view of `len` elements of `slice` from `offset`, usable wherever the
    /// wrappers take an input buffer. Typed errors if the range does not fit
    /// ([`LaunchError::ViewRange`]) or its start is not on a [`VIEW_ALIGN_BYTES`] boundary
    /// ([`LaunchError::ViewAlignment`]: the kernels' 16-byte accesses would fault).
    pub fn view(
        slice: &CudaSlice<T>,
        offset: usize,
        len: usize,
    ) -> Result<BorrowedBuffer<'_, T>, LaunchError> {
        let (buffer, live) = view_of(slice, offset, len)?;
        Ok(BorrowedBuffer {
            buffer,
            live,
            _borrow: PhantomData,
        })
    }

    /// A writable view of `len` elements of `slice` from `offset`, usable wherever the wrappers
    /// take an output buffer; the same checks as [`Self::view`].
    pub fn view_mut(
        slice: &mut CudaSlice<T>,
        offset: usize,
        len: usize,
    ) -> Result<BorrowedBufferMut<'_, T>, LaunchError> {
        let (buffer, live) = view_of(slice, offset, len)?;
        Ok(BorrowedBufferMut {
            buffer,
            live,
            _borrow: PhantomData,
        })
    }
}

fn view_of<T: Element>(
    slice: &CudaSlice<T>,
    offset: usize,
    len: usize,
) -> Result<(DeviceBuffer<CudaBackend, T>, Arc<AtomicBool>), LaunchError> {
    check_view_range(offset, len, slice.len())?;
    let size = T::KIND.size_bytes();
    check_view_alignment(offset, size)?;
    let (base, _sync) = slice.device_ptr(slice.stream());
    let live = Arc::new(AtomicBool::new(true));
    let raw = CudaRawBuffer {
        ctx: slice.context().cu_ctx() as usize,
        storage: Storage::View {
            ptr: base + (offset * size) as u64,
            bytes: len * size,
            live: Arc::clone(&live),
        },
    };
    Ok((DeviceBuffer::from_raw(raw, len), live))
}

/// A view's start, `offset` elements of `size` bytes into its buffer, on a
/// [`VIEW_ALIGN_BYTES`] boundary (the buffer's own start is: driver allocations are aligned to
/// at least 256 bytes).
fn check_view_alignment(offset: usize, size: usize) -> Result<(), LaunchError> {
    let bytes = offset.saturating_mul(size);
    match bytes.is_multiple_of(VIEW_ALIGN_BYTES) {
        true => Ok(()),
        false => Err(LaunchError::ViewAlignment {
            offset,
            bytes,
            align: VIEW_ALIGN_BYTES,
        }),
    }
}

/// `offset .. offset + len` within `available` elements, without overflow.
fn check_view_range(offset: usize, len: usize, available: usize) -> Result<(), LaunchError> {
    match offset.checked_add(len) {
        Some(end) if end <= available => Ok(()),
        _ => Err(LaunchError::ViewRange {
            offset,
            len,
            available,
        }),
    }
}

/// A read-only view of part of a caller's `CudaSlice`; dereferences to a buffer the wrappers
/// take as input. It cannot outlive the slice; a copy smuggled out of it is refused at launch.
#[derive(Debug)]
pub struct BorrowedBuffer<'a, T: Element> {
    buffer: DeviceBuffer<CudaBackend, T>,
    live: Arc<AtomicBool>,
    _borrow: PhantomData<&'a CudaSlice<T>>,
}

/// A writable view of part of a caller's `CudaSlice`; dereferences (mutably) to a buffer the
/// wrappers take as output. Swapping the inner buffer out does not extend the borrow: the view
/// is refused at launch once this guard is dropped.
#[derive(Debug)]
pub struct BorrowedBufferMut<'a, T: Element> {
    buffer: DeviceBuffer<CudaBackend, T>,
    live: Arc<AtomicBool>,
    _borrow: PhantomData<&'a mut CudaSlice<T>>,
}

impl<T: Element> Deref for BorrowedBuffer<'_, T> {
    type Target = DeviceBuffer<CudaBackend, T>;
    fn deref(&self) -> &Self::Target {
        &self.buffer
    }
}

impl<T: Element> Deref for BorrowedBufferMut<'_, T> {
    type Target = DeviceBuffer<CudaBackend, T>;
    fn deref(&self) -> &Self::Target {
        &self.buffer
    }
}

impl<T: Element> DerefMut for BorrowedBufferMut<'_, T> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.buffer
    }
}

impl<T: Element> Drop for BorrowedBuffer<'_, T> {
    fn drop(&mut self) {
        self.live.store(false, Ordering::Release);
    }
}

impl<T: Element> Drop for BorrowedBufferMut<'_, T> {
    fn drop(&mut self) {
        self.live.store(false, Ordering::Release);
    }
}

impl Backend for CudaBackend {
    type RawBuffer = CudaRawBuffer;

    fn alloc<T: Element>(&self, len: usize) -> Result<DeviceBuffer<Self, T>, LaunchError> {
        let bytes = byte_len::<T>(len)?;
        let raw = self
            .stream
            .alloc_zeros::<u8>(bytes.max(1))
            .map_err(driver("cuMemAlloc"))?;
        Ok(DeviceBuffer::from_raw(CudaRawBuffer::owned(raw), len))
    }

    fn upload<T: Element>(&self, data: &[T]) -> Result<DeviceBuffer<Self, T>, LaunchError> {
        let mut bytes = to_le_bytes(data);
        if bytes.is_empty() {
            bytes.push(0);
        }
        let raw = self
            .stream
            .clone_htod(&bytes)
            .map_err(driver("cuMemcpyHtoD"))?;
        // The host bytes are freed on return: wait for the copy.
        self.synchronize()?;
        Ok(DeviceBuffer::from_raw(
            CudaRawBuffer::owned(raw),
            data.len(),
        ))
    }

    fn write<T: Element>(
        &self,
        buf: &mut DeviceBuffer<Self, T>,
        data: &[T],
    ) -> Result<(), LaunchError> {
        check_write_len(buf, data)?;
        self.check_context(buf.raw())?;
        let bytes = to_le_bytes(data);
        match &mut buf.raw.storage {
            Storage::Owned(slice) => self
                .stream
                .memcpy_htod(&bytes, &mut slice.slice_mut(..bytes.len()))
                .map_err(driver("cuMemcpyHtoD"))?,
            Storage::View { ptr, .. } => {
                // SAFETY: the view is live (checked) and `bytes` is exactly its length; the
                // host bytes outlive the copy because of the synchronise below.
                unsafe {
                    cudarc::driver::result::memcpy_htod_async(*ptr, &bytes, self.stream.cu_stream())
                }
                .map_err(driver("cuMemcpyHtoDAsync"))?
            }
        }
        self.synchronize()
    }

    fn download<T: Element>(&self, buf: &DeviceBuffer<Self, T>) -> Result<Vec<T>, LaunchError> {
        self.check_context(buf.raw())?;
        let want = buf.len() * T::KIND.size_bytes();
        let mut bytes = vec![0u8; want];
        match &buf.raw().storage {
            Storage::Owned(slice) => self
                .stream
                .memcpy_dtoh(&slice.slice(..want), &mut bytes)
                .map_err(driver("cuMemcpyDtoH"))?,
            Storage::View { ptr, .. } => {
                // SAFETY: the view is live and `want` bytes long; the synchronise below ends
                // the copy before `bytes` is read.
                unsafe {
                    cudarc::driver::result::memcpy_dtoh_async(
                        &mut bytes,
                        *ptr,
                        self.stream.cu_stream(),
                    )
                }
                .map_err(driver("cuMemcpyDtoHAsync"))?
            }
        }
        self.synchronize()?;
        Ok(from_le_bytes(&bytes, buf.len()))
    }

    fn launch(
        &self,
        ptx: &str,
        entry: &str,
        config: LaunchConfig,
        args: &[KernelArg<'_, Self>],
    ) -> Result<(), LaunchError> {
        let (f, sizes) = self.function(ptx, entry)?;
        if sizes.len() != args.len() || args.len() > MAX_ARGS {
            return Err(LaunchError::ArgumentCount {
                entry: entry.to_string(),
                expected: sizes.len(),
                actual: args.len(),
            });
        }
        // Scalars (and view addresses) must outlive the builder: store them all before it
        // exists, in fixed arrays so a launch allocates nothing on the host.
        let mut words = [0u32; MAX_ARGS];
        let mut doubles = [0u64; MAX_ARGS];
        for (index, (arg, &size)) in args.iter().zip(sizes.iter()).enumerate() {
            let arg_size = match arg {
                KernelArg::Buffer(raw) => {
                    if raw.ctx != self.own_context() {
                        return Err(LaunchError::ForeignBuffer {
                            entry: entry.to_string(),
                            index,
                        });
                    }
                    raw.check_live()?;
                    if let Storage::View { ptr, .. } = raw.storage {
                        doubles[index] = ptr;
                    }
                    8
                }
                KernelArg::U64(v) => {
                    doubles[index] = *v;
                    8
                }
                KernelArg::F64(v) => {
                    doubles[index] = v.to_bits();
                    8
                }
                KernelArg::U32(v) => {
                    words[index] = *v;
                    4
                }
                KernelArg::S32(v) => {
                    words[index] = *v as u32;
                    4
                }
                KernelArg::F32(v) => {
                    words[index] = v.to_bits();
                    4
                }
            };
            if arg_size != size {
                return Err(LaunchError::ArgumentSize {
                    entry: entry.to_string(),
                    index,
                    expected: size,
                    actual: arg_size,
                });
            }
        }
        if config.dynamic_shared_bytes > DEFAULT_SHARED_LIMIT {
            let attr = CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
            f.set_attribute(attr, config.dynamic_shared_bytes as i32)
                .map_err(driver("cuFuncSetAttribute"))?;
        }
        let mut builder = self.stream.launch_builder(&f);
        for (index, arg) in args.iter().enumerate() {
            match arg {
                KernelArg::Buffer(raw) => match &raw.storage {
                    // Owned slices go through cudarc so its cross-stream event tracking sees
                    // the use.
                    Storage::Owned(slice) => builder.arg(slice),
                    Storage::View { .. } => builder.arg(&doubles[index]),
                },
                KernelArg::U64(_) | KernelArg::F64(_) => builder.arg(&doubles[index]),
                KernelArg::U32(_) | KernelArg::S32(_) | KernelArg::F32(_) => {
                    builder.arg(&words[index])
                }
            };
        }
        let cfg = cudarc::driver::LaunchConfig {
            grid_dim: (config.grid.x, config.grid.y, config.grid.z),
            block_dim: (config.block.x, config.block.y, config.block.z),
            shared_mem_bytes: config.dynamic_shared_bytes,
        };
        // SAFETY: see the module comment; argument count, sizes, contexts and views were
        // checked above. The launch is queued; nothing waits for it here.
        unsafe { builder.launch(cfg) }.map_err(driver("cuLaunchKernel"))?;
        Ok(())
    }

    fn synchronize(&self) -> Result<(), LaunchError> {
        self.stream
            .synchronize()
            .map_err(driver("cuStreamSynchronize"))
    }

    fn arch(&self) -> Option<Arch> {
        self.arch
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_without_a_driver_is_a_typed_error() {
        if driver_library_present() {
            eprintln!("a CUDA driver library is present: this test checks the absent case");
            return;
        }
        match CudaBackend::new(0) {
            Err(LaunchError::NoDriver(reason)) => assert!(reason.contains("libcuda")),
            other => panic!("expected NoDriver, got {other:?}"),
        }
    }

    #[test]
    fn parameter_sizes_come_from_the_entry_declaration() {
        let ptx = ".visible .entry k(\n .param .u64 a,\n .param .u32 n,\n .param .f64 s\n)\n{}\n\
                   .visible .entry j(\n .param .u16 h\n)\n{}";
        let sizes = entry_param_sizes(ptx);
        assert_eq!(sizes["k"], vec![8, 4, 8]);
        assert_eq!(sizes["j"], vec![2]);
    }

    #[test]
    fn views_past_the_end_are_refused() {
        assert!(check_view_range(0, 10, 10).is_ok());
        assert!(check_view_range(4, 6, 10).is_ok());
        assert!(check_view_range(10, 0, 10).is_ok());
        assert_eq!(
            check_view_range(4, 7, 10),
            Err(LaunchError::ViewRange {
                offset: 4,
                len: 7,
                available: 10
            })
        );
        assert!(check_view_range(11, 0, 10).is_err());
        assert!(check_view_range(usize::MAX, 2, 10).is_err());
    }

    #[test]
    fn views_start_on_16_byte_boundaries() {
        assert!(check_view_alignment(0, 2).is_ok());
        assert!(check_view_alignment(8, 2).is_ok());
        assert!(check_view_alignment(4, 4).is_ok());
        assert!(check_view_alignment(2, 8).is_ok());
        assert_eq!(
            check_view_alignment(3, 2),
            Err(LaunchError::ViewAlignment {
                offset: 3,
                bytes: 6,
                align: 16
            })
        );
        assert!(check_view_alignment(1, 8).is_err());
        assert!(check_view_alignment(6, 4).is_err());
    }

    #[test]
    fn fingerprint_sees_both_ends_and_the_length() {
        let long = "x".repeat(3 * FINGERPRINT_BYTES);
        let mut changed_head = long.clone();
        changed_head.replace_range(0..1, "y");
        let mut changed_tail = long.clone();
        changed_tail.replace_range(long.len() - 1.., "y");
        assert_ne!(fingerprint(&long), fingerprint(&changed_head));
        assert_ne!(fingerprint(&long), fingerprint(&changed_tail));
        assert_ne!(fingerprint(&long), fingerprint(&long[1..]));
        assert_eq!(fingerprint(&long), fingerprint(&long.clone()));
    }

    #[test]
    fn driver_codes_keep_their_kind() {
        use cudarc::driver::sys::CUresult;
        let oom = driver_error("cuMemAlloc", CUresult::CUDA_ERROR_OUT_OF_MEMORY);
        assert_eq!(oom.kind, DriverErrorKind::OutOfMemory);
        assert_eq!(oom.code, 2);
        let illegal = driver_error("cuStreamSynchronize", CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);
        assert_eq!(illegal.kind, DriverErrorKind::IllegalAddress);
        assert_eq!(illegal.code, 700);
        let failed = driver_error("cuLaunchKernel", CUresult::CUDA_ERROR_LAUNCH_FAILED);
        assert_eq!(failed.kind, DriverErrorKind::LaunchFailed);
        assert_eq!(failed.code, 719);
        let e: LaunchError = failed.into();
        assert!(e
            .to_string()
            .contains("CUDA_ERROR_LAUNCH_FAILED (code 719)"));
        assert!(std::error::Error::source(&e).is_none() || matches!(e, LaunchError::Driver(_)));
    }
}
