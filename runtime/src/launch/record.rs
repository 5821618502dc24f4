//! A backend that runs nothing: it keeps buffers as host bytes and records every launch (the
//! PTX it was given, the entry, the grid and block, the argument kinds). Tests use it to check
//! what a launch wrapper would do — phase order, geometry, argument lists, that bad input
//! launches nothing, that the PTX passed is the caller's `const` — without the interpreter.

use std::cell::RefCell;

use crate::Arch;

use super::{
    byte_len, check_write_len, from_le_bytes, to_le_bytes, Backend, DeviceBuffer, Element,
    KernelArg, LaunchConfig, LaunchError, ScalarKind,
};

/// One recorded launch.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedLaunch {
    /// Address and length of the PTX text passed (to check no code was generated per launch).
    pub ptx_addr: usize,
    pub ptx_len: usize,
    pub entry: String,
    pub config: LaunchConfig,
    /// Per argument: `None` for a buffer, else the scalar's kind.
    pub args: Vec<Option<ScalarKind>>,
}

/// The recording backend (single-threaded).
#[derive(Debug, Default)]
pub struct RecordingBackend {
    buffers: RefCell<Vec<Vec<u8>>>,
    launches: RefCell<Vec<RecordedLaunch>>,
    arch: Option<Arch>,
}

impl RecordingBackend {
    pub fn new() -> Self {
        Self::default()
    }

    /// A recorder that reports a device architecture, so tests can check which module a
    /// multi-target kernel's wrappers pick for a given device.
    pub fn with_arch(arch: Arch) -> Self {
        Self {
            arch: Some(arch),
            ..Self::default()
        }
    }

    /// The launches so far, in order.
    pub fn launches(&self) -> Vec<RecordedLaunch> {
        self.launches.borrow().clone()
    }

    /// The entry names launched so far, in order.
    pub fn entries(&self) -> Vec<String> {
        self.launches
            .borrow()
            .iter()
            .map(|l| l.entry.clone())
            .collect()
    }

    /// Forgets the launches so far.
    pub fn clear(&self) {
        self.launches.borrow_mut().clear();
    }

    fn store(&self, bytes: Vec<u8>) -> usize {
        let mut buffers = self.buffers.borrow_mut();
        buffers.push(bytes);
        buffers.len() - 1
    }
}

impl Backend for RecordingBackend {
    /// Index into the backend's buffer list.
    type RawBuffer = usize;

    fn alloc<T: Element>(&self, len: usize) -> Result<DeviceBuffer<Self, T>, LaunchError> {
        let bytes = byte_len::<T>(len)?;
        Ok(DeviceBuffer::from_raw(self.store(vec![0; bytes]), len))
    }

    fn upload<T: Element>(&self, data: &[T]) -> Result<DeviceBuffer<Self, T>, LaunchError> {
        Ok(DeviceBuffer::from_raw(
            self.store(to_le_bytes(data)),
            data.len(),
        ))
    }

    fn write<T: Element>(
        &self,
        buf: &mut DeviceBuffer<Self, T>,
        data: &[T],
    ) -> Result<(), LaunchError> {
        check_write_len(buf, data)?;
        self.buffers.borrow_mut()[*buf.raw()] = to_le_bytes(data);
        Ok(())
    }

    fn download<T: Element>(&self, buf: &DeviceBuffer<Self, T>) -> Result<Vec<T>, LaunchError> {
        let buffers = self.buffers.borrow();
        Ok(from_le_bytes(&buffers[*buf.raw()], buf.len()))
    }

    fn launch(
        &self,
        ptx: &str,
        entry: &str,
        config: LaunchConfig,
        args: &[KernelArg<'_, Self>],
    ) -> Result<(), LaunchError> {
        let args = args
            .iter()
            .map(|a| match a {
                KernelArg::Buffer(_) => None,
                KernelArg::U32(_) => Some(ScalarKind::U32),
                KernelArg::S32(_) => Some(ScalarKind::S32),
                KernelArg::U64(_) => Some(ScalarKind::U64),
                KernelArg::F32(_) => Some(ScalarKind::F32),
                KernelArg::F64(_) => Some(ScalarKind::F64),
            })
            .collect();
        self.launches.borrow_mut().push(RecordedLaunch {
            ptx_addr: ptx.as_ptr() as usize,
            ptx_len: ptx.len(),
            entry: entry.to_string(),
            config,
            args,
        });
        Ok(())
    }

    fn arch(&self) -> Option<Arch> {
        self.arch
    }
}
