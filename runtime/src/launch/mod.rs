//! The launch layer: kernel entry metadata, launch configuration, the `Backend` trait every
//! device implements (the CPU interpreter, and real GPUs behind the `cuda` feature), and the
//! typed errors launches return.

use std::marker::PhantomData;

use crate::Arch;

mod element;
pub use element::{from_le_bytes, to_le_bytes, Element, ScalarKind};

mod record;
pub use record::{RecordedLaunch, RecordingBackend};

#[cfg(feature = "sim")]
mod sim;
#[cfg(feature = "sim")]
pub use sim::{LaunchRecord, SimBackend, SimBuffer};

#[cfg(feature = "cuda")]
mod cuda;
#[cfg(feature = "cuda")]
pub use cuda::{BorrowedBuffer, BorrowedBufferMut, CudaBackend, CudaRawBuffer};

/// A 3-D extent (grid or block).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Dim3 {
    pub x: u32,
    pub y: u32,
    pub z: u32,
}

impl Dim3 {
    pub const fn new(x: u32, y: u32, z: u32) -> Self {
        Self { x, y, z }
    }

    pub const fn x(x: u32) -> Self {
        Self { x, y: 1, z: 1 }
    }

    /// Total count, in u64 so it cannot overflow.
    pub const fn volume(self) -> u64 {
        self.x as u64 * self.y as u64 * self.z as u64
    }
}

/// Grid, block and dynamic shared memory of one launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LaunchConfig {
    pub grid: Dim3,
    pub block: Dim3,
    pub dynamic_shared_bytes: u32,
}

/// The kind of one kernel parameter, as declared in the PTX entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ParamKind {
    /// A global-memory pointer (`.u64`) to elements of the given kind.
    Pointer(ScalarKind),
    /// A scalar passed by value.
    Scalar(ScalarKind),
}

/// One declared kernel parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ParamInfo {
    pub name: &'static str,
    pub kind: ParamKind,
}

/// Compile-time metadata of one kernel entry in a module's PTX (the macros emit one `const`
/// per entry; it mirrors `templates::EntryInfo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KernelEntry {
    /// The `.entry` name.
    pub name: &'static str,
    pub params: &'static [ParamInfo],
    /// The exact block shape the kernel requires (`.reqntid`), when it has one.
    pub required_block: Option<Dim3>,
    /// Static shared memory in bytes.
    pub static_shared_bytes: u32,
    /// The most dynamic shared memory the entry is launched with.
    pub max_dynamic_shared_bytes: u32,
}

/// What kind of failure a CUDA driver call reported: the cases a caller may act on (retry
/// with less memory, stop using a context a kernel broke) are told apart; the code is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DriverErrorKind {
    /// `CUDA_ERROR_OUT_OF_MEMORY`.
    OutOfMemory,
    /// `CUDA_ERROR_ILLEGAL_ADDRESS`: a kernel accessed memory it does not own; the context is
    /// unusable afterwards.
    IllegalAddress,
    /// `CUDA_ERROR_MISALIGNED_ADDRESS`.
    MisalignedAddress,
    /// `CUDA_ERROR_LAUNCH_FAILED` (and other sticky launch faults: assert, illegal
    /// instruction, timeout).
    LaunchFailed,
    /// `CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES`: too many registers or threads for the launch.
    OutOfResources,
    /// `CUDA_ERROR_NO_DEVICE` / `CUDA_ERROR_INVALID_DEVICE`: no such device.
    NoDevice,
    /// The driver could not use the PTX (invalid, unsupported version, no binary for the GPU).
    InvalidModule,
    /// `CUDA_ERROR_NOT_FOUND`: e.g. a missing entry in a loaded module.
    NotFound,
    /// Any other code.
    Other,
}

/// A CUDA driver call failed: which call, the `CUresult` code and its symbolic name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("CUDA driver call `{call}` failed: {name} (code {code})")]
pub struct DriverError {
    /// The operation that failed (`cuModuleLoadData`, `cuLaunchKernel`, …).
    pub call: &'static str,
    /// The raw `CUresult`.
    pub code: u32,
    /// The symbolic name, `CUDA_ERROR_OUT_OF_MEMORY`.
    pub name: String,
    pub kind: DriverErrorKind,
}

/// The alignment in bytes of a view's start within its buffer (`CudaBackend`'s
/// `DeviceBuffer::view` / `view_mut`): every buffer a kernel takes is read from its start
/// with 16-byte accesses where the shapes allow.
pub const VIEW_ALIGN_BYTES: usize = 16;

/// A launch failed before, during or after running.
///
/// Non-exhaustive: backends gain failure kinds; match the ones you handle and keep a `_` arm.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum LaunchError {
    #[error("buffer `{name}` has {actual} elements, expected {expected}")]
    BufferLength {
        name: &'static str,
        expected: usize,
        actual: usize,
    },
    #[error("invalid dimension `{name}` = {value}: {reason}")]
    InvalidDim {
        name: &'static str,
        value: u64,
        reason: String,
    },
    #[error("kernel `{entry}` expects {expected} arguments, got {actual}")]
    ArgumentCount {
        entry: String,
        expected: usize,
        actual: usize,
    },
    #[error("argument {index} of kernel `{entry}` should be {expected:?}")]
    ArgumentType {
        entry: String,
        index: usize,
        expected: ParamKind,
    },
    #[error("argument {index} of kernel `{entry}` is {actual} bytes, the parameter is {expected}")]
    ArgumentSize {
        entry: String,
        index: usize,
        expected: usize,
        actual: usize,
    },
    #[error("the sanitizer found problems in kernel `{entry}`: {report}")]
    Findings { entry: String, report: String },
    #[error("invalid shape: {0}")]
    Shape(String),
    #[error("the kernel module could not be built: {0}")]
    Build(String),
    /// The CUDA driver library (libcuda) is not installed or cannot be loaded.
    #[error("no CUDA driver: {0}")]
    NoDriver(String),
    /// A driver call failed; the code is kept as the source.
    #[error("{0}")]
    Driver(#[from] DriverError),
    /// A buffer belongs to another device context than the backend launching it.
    #[error("argument {index} of kernel `{entry}` is a buffer of another CUDA context")]
    ForeignBuffer { entry: String, index: usize },
    /// A borrowed view was used after the borrow it came from ended.
    #[error("a borrowed view of a caller's buffer was used after its borrow ended")]
    StaleView,
    /// A view's first element is not [`VIEW_ALIGN_BYTES`]-aligned within its buffer: the
    /// kernels read and write with 16-byte vector accesses and `cp.async` copies from each
    /// buffer's start, which fault on a misaligned address (and leave the context unusable).
    #[error(
        "a view at element offset {offset} starts {bytes} bytes into its buffer, not a multiple \
         of {align}: the kernels' 16-byte accesses need aligned starts"
    )]
    ViewAlignment {
        offset: usize,
        bytes: usize,
        align: usize,
    },
    /// A view of `len` elements at `offset` does not fit a buffer of `available` elements.
    #[error("a view of {len} elements at offset {offset} does not fit a buffer of {available}")]
    ViewRange {
        offset: usize,
        len: usize,
        available: usize,
    },
    /// None of the kernel's embedded targets runs on the device.
    #[error("the device is {device}; the kernel embeds modules for {targets} only, all newer")]
    NoTargetForDevice { device: String, targets: String },
    #[error("backend error: {0}")]
    Backend(String),
}

/// A typed device buffer of `len` elements of `T` on backend `B`.
#[derive(Debug)]
pub struct DeviceBuffer<B: Backend + ?Sized, T: Element> {
    raw: B::RawBuffer,
    len: usize,
    _elem: PhantomData<T>,
}

impl<B: Backend + ?Sized, T: Element> DeviceBuffer<B, T> {
    /// Wraps a raw allocation of at least `len * size_of::<T>()` bytes. Backends only.
    pub fn from_raw(raw: B::RawBuffer, len: usize) -> Self {
        Self {
            raw,
            len,
            _elem: PhantomData,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn raw(&self) -> &B::RawBuffer {
        &self.raw
    }
}

/// Bytes of `len` elements of `T`, for a backend's `alloc`; an overflowing size is
/// [`LaunchError::InvalidDim`] `len`.
pub(crate) fn byte_len<T: Element>(len: usize) -> Result<usize, LaunchError> {
    len.checked_mul(T::KIND.size_bytes())
        .ok_or_else(|| LaunchError::InvalidDim {
            name: "len",
            value: len as u64,
            reason: "byte size overflows usize".into(),
        })
}

/// A backend's `write` takes exactly the buffer's length: else [`LaunchError::BufferLength`].
pub(crate) fn check_write_len<B: Backend + ?Sized, T: Element>(
    buf: &DeviceBuffer<B, T>,
    data: &[T],
) -> Result<(), LaunchError> {
    if data.len() == buf.len() {
        Ok(())
    } else {
        Err(LaunchError::BufferLength {
            name: "data",
            expected: buf.len(),
            actual: data.len(),
        })
    }
}

/// One kernel argument: a buffer's device address or a scalar.
#[derive(Debug)]
pub enum KernelArg<'a, B: Backend + ?Sized> {
    Buffer(&'a B::RawBuffer),
    U32(u32),
    S32(i32),
    U64(u64),
    F32(f32),
    F64(f64),
}

impl<'a, B: Backend + ?Sized> KernelArg<'a, B> {
    pub fn buffer<T: Element>(buf: &'a DeviceBuffer<B, T>) -> Self {
        KernelArg::Buffer(buf.raw())
    }
}

/// A device that can hold buffers and run PTX kernels.
pub trait Backend {
    /// An untyped device allocation.
    type RawBuffer: std::fmt::Debug;

    /// Allocates `len` elements, contents unspecified (the interpreter flags reads of them).
    fn alloc<T: Element>(&self, len: usize) -> Result<DeviceBuffer<Self, T>, LaunchError>;
    /// Allocates and fills a buffer with `data`.
    fn upload<T: Element>(&self, data: &[T]) -> Result<DeviceBuffer<Self, T>, LaunchError>;
    /// Overwrites a buffer with `data` (same length).
    fn write<T: Element>(
        &self,
        buf: &mut DeviceBuffer<Self, T>,
        data: &[T],
    ) -> Result<(), LaunchError>;
    /// Copies a buffer back to the host.
    fn download<T: Element>(&self, buf: &DeviceBuffer<Self, T>) -> Result<Vec<T>, LaunchError>;
    /// Runs entry `entry` of the module `ptx`. Backends parse or load each distinct module once
    /// and reuse it. Launch wrappers pass the macro's `const` PTX here: no code is generated at
    /// launch time.
    fn launch(
        &self,
        ptx: &str,
        entry: &str,
        config: LaunchConfig,
        args: &[KernelArg<'_, Self>],
    ) -> Result<(), LaunchError>;

    /// Waits until every launch and copy issued so far has finished, and reports a fault any of
    /// them raised. Launches may be asynchronous (the CUDA backend's are); downloads wait on
    /// their own. Backends that run launches to completion (the interpreter) return at once.
    fn synchronize(&self) -> Result<(), LaunchError> {
        Ok(())
    }

    /// The device's architecture, when the backend runs on a real device: wrappers of a kernel
    /// built for several targets pick the best one for it ([`Arch::best_for`]). `None` for
    /// backends that run every target (the interpreter, the recorder).
    fn arch(&self) -> Option<Arch> {
        None
    }
}

/// The module of a multi-target kernel to launch on `dev`: the highest target `dev` runs.
/// `targets` lists `(target, module)` pairs; a typed error when the device runs none.
pub fn select_target<'t, B: Backend + ?Sized, M>(
    dev: &B,
    targets: &'t [(Arch, M)],
) -> Result<&'t M, LaunchError> {
    let device = dev.arch();
    targets
        .iter()
        .filter(|(target, _)| device.is_none_or(|d| d.at_least(*target)))
        .max_by_key(|(target, _)| *target)
        .map(|(_, module)| module)
        .ok_or_else(|| LaunchError::NoTargetForDevice {
            device: device.map_or_else(|| "unknown".into(), |a| a.name().to_string()),
            targets: targets
                .iter()
                .map(|(a, _)| a.name())
                .collect::<Vec<_>>()
                .join(", "),
        })
}
