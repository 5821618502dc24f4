//! The CUDA backend (feature `cuda`): real GPUs through cudarc's driver API, loaded dynamically
//! so the crate builds without a CUDA installation.
//!
//! Each distinct PTX module is loaded once per context (the driver JIT-compiles it for the
//! device) and cached by content, as are its functions. Before a launch the arguments are
//! checked against the entry's parameter list read from the PTX text, so a mismatched launch is
//! a typed error instead of undefined behaviour. Launches are synchronous.

// The driver calls behind `launch` and `alloc` are `unsafe` in cudarc. They are sound here
// because every argument is checked against the entry's declared parameters (count and size)
// before the launch, buffers stay borrowed for the duration of the synchronous launch, and
// allocations are zero-filled.
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, MutexGuard};

use cudarc::driver::sys::CUfunction_attribute_enum;
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, PushKernelArg};
use cudarc::nvrtc::Ptx;

use super::{
    from_le_bytes, to_le_bytes, Backend, DeviceBuffer, Element, KernelArg, LaunchConfig,
    LaunchError,
};

/// Static shared memory every kernel may use without opting in.
const DEFAULT_SHARED_LIMIT: u32 = 48 * 1024;

#[derive(Debug, Default)]
struct Cache {
    modules: HashMap<u64, Arc<CudaModule>>,
    /// Entry parameter sizes in bytes, per module.
    params: HashMap<u64, HashMap<String, Vec<usize>>>,
    functions: HashMap<(u64, String), CudaFunction>,
}

/// A CUDA device (one context, its default stream).
#[derive(Debug)]
pub struct CudaBackend {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    cache: Mutex<Cache>,
}

fn driver(e: impl std::fmt::Debug) -> LaunchError {
    LaunchError::Backend(format!("CUDA driver: {e:?}"))
}

impl CudaBackend {
    /// Opens device `ordinal`. Fails with a typed error when no driver or device is present.
    pub fn new(ordinal: usize) -> Result<Self, LaunchError> {
        let ctx = std::panic::catch_unwind(|| CudaContext::new(ordinal))
            .map_err(|_| {
                LaunchError::Backend("the CUDA driver library could not be loaded".into())
            })?
            .map_err(driver)?;
        let stream = ctx.default_stream();
        Ok(Self {
            ctx,
            stream,
            cache: Mutex::new(Cache::default()),
        })
    }

    fn cache(&self) -> MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn function(&self, ptx: &str, entry: &str) -> Result<(CudaFunction, Vec<usize>), LaunchError> {
        let key = {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            ptx.hash(&mut h);
            h.finish()
        };
        let mut cache = self.cache();
        if let std::collections::hash_map::Entry::Vacant(slot) = cache.modules.entry(key) {
            slot.insert(self.ctx.load_module(Ptx::from_src(ptx)).map_err(driver)?);
            cache.params.insert(key, entry_param_sizes(ptx));
        }
        let sizes = cache.params[&key]
            .get(entry)
            .cloned()
            .ok_or_else(|| LaunchError::Backend(format!("the module has no entry `{entry}`")))?;
        let f = match cache.functions.get(&(key, entry.to_string())) {
            Some(f) => f.clone(),
            None => {
                let f = cache.modules[&key].load_function(entry).map_err(driver)?;
                cache.functions.insert((key, entry.to_string()), f.clone());
                f
            }
        };
        Ok((f, sizes))
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

impl Backend for CudaBackend {
    type RawBuffer = CudaSlice<u8>;

    fn alloc<T: Element>(&self, len: usize) -> Result<DeviceBuffer<Self, T>, LaunchError> {
        let bytes =
            len.checked_mul(T::KIND.size_bytes())
                .ok_or_else(|| LaunchError::InvalidDim {
                    name: "len",
                    value: len as u64,
                    reason: "byte size overflows usize".into(),
                })?;
        let raw = self
            .stream
            .alloc_zeros::<u8>(bytes.max(1))
            .map_err(driver)?;
        Ok(DeviceBuffer::from_raw(raw, len))
    }

    fn upload<T: Element>(&self, data: &[T]) -> Result<DeviceBuffer<Self, T>, LaunchError> {
        let mut bytes = to_le_bytes(data);
        if bytes.is_empty() {
            bytes.push(0);
        }
        let raw = self.stream.clone_htod(&bytes).map_err(driver)?;
        Ok(DeviceBuffer::from_raw(raw, data.len()))
    }

    fn write<T: Element>(
        &self,
        buf: &mut DeviceBuffer<Self, T>,
        data: &[T],
    ) -> Result<(), LaunchError> {
        if data.len() != buf.len() {
            return Err(LaunchError::BufferLength {
                name: "data",
                expected: buf.len(),
                actual: data.len(),
            });
        }
        let fresh = self.stream.clone_htod(&to_le_bytes(data)).map_err(driver)?;
        *buf = DeviceBuffer::from_raw(fresh, data.len());
        Ok(())
    }

    fn download<T: Element>(&self, buf: &DeviceBuffer<Self, T>) -> Result<Vec<T>, LaunchError> {
        let bytes = self.stream.clone_dtoh(buf.raw()).map_err(driver)?;
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
        if sizes.len() != args.len() {
            return Err(LaunchError::ArgumentCount {
                entry: entry.to_string(),
                expected: sizes.len(),
                actual: args.len(),
            });
        }
        for (index, (arg, &size)) in args.iter().zip(&sizes).enumerate() {
            let arg_size = match arg {
                KernelArg::Buffer(_) | KernelArg::U64(_) | KernelArg::F64(_) => 8,
                KernelArg::U32(_) | KernelArg::S32(_) | KernelArg::F32(_) => 4,
            };
            if arg_size != size {
                return Err(LaunchError::Backend(format!(
                    "argument {index} of `{entry}` is {arg_size} bytes, the parameter is {size}"
                )));
            }
        }
        if config.dynamic_shared_bytes > DEFAULT_SHARED_LIMIT {
            let attr = CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
            f.set_attribute(attr, config.dynamic_shared_bytes as i32)
                .map_err(driver)?;
        }
        // Scalars must outlive the builder: store them all before it exists.
        let words: Vec<u32> = args
            .iter()
            .filter_map(|a| match a {
                KernelArg::U32(v) => Some(*v),
                KernelArg::S32(v) => Some(*v as u32),
                KernelArg::F32(v) => Some(v.to_bits()),
                _ => None,
            })
            .collect();
        let doubles: Vec<u64> = args
            .iter()
            .filter_map(|a| match a {
                KernelArg::U64(v) => Some(*v),
                KernelArg::F64(v) => Some(v.to_bits()),
                _ => None,
            })
            .collect();
        let (mut next_word, mut next_double) = (words.iter(), doubles.iter());
        let mut builder = self.stream.launch_builder(&f);
        for arg in args {
            match arg {
                KernelArg::Buffer(slice) => builder.arg(*slice),
                KernelArg::U64(_) | KernelArg::F64(_) => {
                    builder.arg(next_double.next().expect("counted"))
                }
                KernelArg::U32(_) | KernelArg::S32(_) | KernelArg::F32(_) => {
                    builder.arg(next_word.next().expect("counted"))
                }
            };
        }
        let cfg = cudarc::driver::LaunchConfig {
            grid_dim: (config.grid.x, config.grid.y, config.grid.z),
            block_dim: (config.block.x, config.block.y, config.block.z),
            shared_mem_bytes: config.dynamic_shared_bytes,
        };
        // SAFETY: see the module comment; argument count and sizes were checked above.
        unsafe { builder.launch(cfg) }.map_err(driver)?;
        self.stream.synchronize().map_err(driver)
    }
}
