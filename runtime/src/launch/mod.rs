//! The launch layer: kernel entry metadata, launch configuration, the `Backend` trait every
//! device implements (the CPU interpreter, and real GPUs behind the `cuda` feature), and the
//! typed errors launches return.

use std::marker::PhantomData;

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
pub use cuda::CudaBackend;

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

/// A launch failed before, during or after running.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
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
    #[error("the sanitizer found problems in kernel `{entry}`: {report}")]
    Findings { entry: String, report: String },
    #[error("invalid shape: {0}")]
    Shape(String),
    #[error("the kernel module could not be built: {0}")]
    Build(String),
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
}
