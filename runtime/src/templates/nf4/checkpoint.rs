//! Loading NF4 weights from a safetensors file as HuggingFace transformers saves a
//! bitsandbytes-quantised model (`load_in_4bit`, `bnb_4bit_quant_type="nf4"`).
//!
//! For a quantised weight `<name>` (e.g. `model.layers.0.self_attn.q_proj.weight`) the file holds:
//!
//! | tensor | dtype, shape | meaning |
//! |---|---|---|
//! | `<name>` | u8 `[ceil(n·k/2), 1]` | packed codes, element `2j` in the high nibble of byte `j` |
//! | `<name>.absmax` | f32 `[blocks]`, or u8 `[blocks]` when nested | per-block absmax |
//! | `<name>.quant_map` | f32 `[16]` | the NF4 code values ([`NF4_CODE`]) |
//! | `<name>.nested_absmax` | f32 `[ceil(blocks/256)]` | nested only |
//! | `<name>.nested_quant_map` | f32 `[256]` | nested only: the 8-bit map the codes index |
//! | `<name>.quant_state.bitsandbytes__nf4` | u8 `[len]` | UTF-8 JSON: `quant_type`, `blocksize`, `dtype`, `shape`, and when nested `nested_blocksize`, `nested_dtype`, `nested_offset` |
//!
//! (`QuantState.as_dict(packed=True)` in bitsandbytes.) Everything is checked before anything is
//! returned; a file that is not such a state is a [`CheckpointError`] naming the tensor at fault.
//! The loaded state is the stored bytes, never re-quantised: [`LoadedNf4::dequantize`] and the
//! kernels reproduce `bitsandbytes.functional.dequantize_4bit` bit for bit (the f16/bf16
//! tensor-core GEMMs dequantise in the activation type, within `3u · |ŵ|`: see `kernels`).

use safetensors::{Dtype, SafeTensors};
use serde_json::Value;

use super::format::{
    Nf4DoubleQuant, Nf4Weights, QuantizedAbsmax, ABSMAX_BLOCK, DYNAMIC_MAP_LEN, NF4_CODE,
};
use super::launch::DeviceWeights;
use super::Nf4Config;
use crate::launch::Backend;

/// Suffix of the packed JSON metadata tensor of an NF4 state.
pub const METADATA_SUFFIX: &str = ".quant_state.bitsandbytes__nf4";

/// A checkpoint that is not a bitsandbytes NF4 state, named by the tensor at fault.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CheckpointError {
    #[error("not a safetensors file: {0}")]
    Parse(String),
    #[error("tensor `{tensor}` is missing")]
    Missing { tensor: String },
    #[error("tensor `{tensor}` has dtype {actual}, expected {expected}")]
    Dtype {
        tensor: String,
        expected: &'static str,
        actual: String,
    },
    #[error("tensor `{tensor}` has shape {actual:?}, expected {expected}")]
    Shape {
        tensor: String,
        expected: String,
        actual: Vec<usize>,
    },
    #[error(
        "tensor `{tensor}` is not NF4's code map: entry {index} is {actual}, NF4 has {expected}"
    )]
    QuantMap {
        tensor: String,
        index: usize,
        actual: f32,
        expected: f32,
    },
    #[error("tensor `{tensor}`: {reason}")]
    Metadata { tensor: String, reason: String },
    #[error("tensor `{tensor}` does not fit the kernel configuration: {reason}")]
    Config { tensor: String, reason: String },
}

/// The quantised state of one weight, as stored.
#[derive(Debug, Clone, PartialEq)]
pub enum Nf4State {
    /// f32 absmax (`compress_statistics=False`).
    Single(Nf4Weights),
    /// 8-bit absmax with bitsandbytes' nested state (`compress_statistics=True`).
    Double(Nf4DoubleQuant),
}

/// One NF4 weight `W [n, k]` read from a checkpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedNf4 {
    /// The weight's name (the packed tensor's key).
    pub name: String,
    /// Rows (output features).
    pub n: u32,
    /// Columns (input features).
    pub k: u32,
    /// Quantisation block size.
    pub block: u32,
    /// The dtype the weight had before quantisation (`dtype` in the metadata, e.g. `bfloat16`).
    pub dtype: String,
    pub state: Nf4State,
}

/// A parsed safetensors file holding bitsandbytes NF4 states.
#[derive(Debug)]
pub struct Nf4Checkpoint<'a> {
    tensors: SafeTensors<'a>,
}

impl<'a> Nf4Checkpoint<'a> {
    /// Parses the safetensors header of `bytes` (the tensors are read on [`Self::load`]).
    pub fn parse(bytes: &'a [u8]) -> Result<Self, CheckpointError> {
        SafeTensors::deserialize(bytes)
            .map(|tensors| Self { tensors })
            .map_err(|e| CheckpointError::Parse(e.to_string()))
    }

    /// The names of the NF4 weights in the file (keys with a `quant_state.bitsandbytes__nf4`
    /// tensor), sorted.
    pub fn weight_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .tensors
            .names()
            .into_iter()
            .filter_map(|n| n.strip_suffix(METADATA_SUFFIX).map(str::to_string))
            .collect();
        names.sort();
        names
    }

    /// Loads and checks the state of weight `name` (the packed tensor's key).
    pub fn load(&self, name: &str) -> Result<LoadedNf4, CheckpointError> {
        let meta = Metadata::read(self, name)?;
        let len = u64::from(meta.n) * u64::from(meta.k);
        let blocks = len.div_ceil(u64::from(meta.block));
        let packed = self.bytes(name, Dtype::U8, "u8")?;
        check_numel(name, &packed.1, len.div_ceil(2))?;
        let quant_map_name = format!("{name}.quant_map");
        let quant_map = self.f32s(&quant_map_name)?;
        check_numel(&quant_map_name, &quant_map.1, NF4_CODE.len() as u64)?;
        for (index, (&actual, &expected)) in quant_map.0.iter().zip(&NF4_CODE).enumerate() {
            if actual.to_bits() != expected.to_bits() {
                return Err(CheckpointError::QuantMap {
                    tensor: quant_map_name,
                    index,
                    actual,
                    expected,
                });
            }
        }
        let absmax_name = format!("{name}.absmax");
        let (len, block) = (len as usize, meta.block as usize);
        let state = match meta.nested_offset {
            None => {
                let absmax = self.f32s(&absmax_name)?;
                check_numel(&absmax_name, &absmax.1, blocks)?;
                Nf4State::Single(Nf4Weights {
                    packed: packed.0,
                    absmax: absmax.0,
                    len,
                    block,
                })
            }
            Some(offset) => {
                let codes = self.bytes(&absmax_name, Dtype::U8, "u8 (nested absmax codes)")?;
                check_numel(&absmax_name, &codes.1, blocks)?;
                let nested_name = format!("{name}.nested_absmax");
                let nested = self.f32s(&nested_name)?;
                check_numel(
                    &nested_name,
                    &nested.1,
                    blocks.div_ceil(ABSMAX_BLOCK as u64),
                )?;
                let map_name = format!("{name}.nested_quant_map");
                let map = self.f32s(&map_name)?;
                check_numel(&map_name, &map.1, DYNAMIC_MAP_LEN as u64)?;
                Nf4State::Double(Nf4DoubleQuant {
                    packed: packed.0,
                    absmax: QuantizedAbsmax {
                        codes: codes.0,
                        map: map.0,
                        nested_absmax: nested.0,
                        offset,
                    },
                    len,
                    block,
                })
            }
        };
        Ok(LoadedNf4 {
            name: name.to_string(),
            n: meta.n,
            k: meta.k,
            block: meta.block,
            dtype: meta.dtype,
            state,
        })
    }

    fn view(&self, tensor: &str) -> Result<safetensors::tensor::TensorView<'_>, CheckpointError> {
        self.tensors
            .tensor(tensor)
            .map_err(|_| CheckpointError::Missing {
                tensor: tensor.to_string(),
            })
    }

    /// A tensor's bytes and shape, after checking its dtype.
    fn bytes(
        &self,
        tensor: &str,
        dtype: Dtype,
        expected: &'static str,
    ) -> Result<(Vec<u8>, Vec<usize>), CheckpointError> {
        let view = self.view(tensor)?;
        if view.dtype() != dtype {
            return Err(CheckpointError::Dtype {
                tensor: tensor.to_string(),
                expected,
                actual: format!("{:?}", view.dtype()),
            });
        }
        Ok((view.data().to_vec(), view.shape().to_vec()))
    }

    /// An f32 tensor's values (little-endian, as safetensors stores them) and shape.
    fn f32s(&self, tensor: &str) -> Result<(Vec<f32>, Vec<usize>), CheckpointError> {
        let (bytes, shape) = self.bytes(tensor, Dtype::F32, "f32")?;
        let values = bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        Ok((values, shape))
    }
}

/// Checks that a tensor has `expected` elements (any shape: bitsandbytes stores the packed codes
/// as `[len, 1]`).
fn check_numel(tensor: &str, shape: &[usize], expected: u64) -> Result<(), CheckpointError> {
    let numel = shape.iter().map(|&d| d as u64).product::<u64>();
    if numel == expected {
        return Ok(());
    }
    Err(CheckpointError::Shape {
        tensor: tensor.to_string(),
        expected: format!("{expected} elements"),
        actual: shape.to_vec(),
    })
}

/// The JSON metadata of one weight's state.
struct Metadata {
    n: u32,
    k: u32,
    block: u32,
    dtype: String,
    /// `nested_offset`, present iff the absmax are double-quantised.
    nested_offset: Option<f32>,
}

impl Metadata {
    fn read(file: &Nf4Checkpoint<'_>, name: &str) -> Result<Self, CheckpointError> {
        let tensor = format!("{name}{METADATA_SUFFIX}");
        let bad = |reason: String| CheckpointError::Metadata {
            tensor: tensor.clone(),
            reason,
        };
        let (bytes, _) = file.bytes(&tensor, Dtype::U8, "u8 (packed JSON)")?;
        let json: Value =
            serde_json::from_slice(&bytes).map_err(|e| bad(format!("not JSON: {e}")))?;
        let field = |key: &str| json.get(key).ok_or_else(|| bad(format!("no `{key}`")));
        let uint = |key: &str| -> Result<u32, CheckpointError> {
            field(key)?
                .as_u64()
                .and_then(|v| u32::try_from(v).ok())
                .ok_or_else(|| bad(format!("`{key}` is not a u32")))
        };
        match field("quant_type")?.as_str() {
            Some("nf4") => {}
            other => return Err(bad(format!("quant_type is {other:?}, expected \"nf4\""))),
        }
        let block = uint("blocksize")?;
        let shape: Vec<u32> = field("shape")?
            .as_array()
            .map(|dims| {
                dims.iter()
                    .filter_map(|d| d.as_u64().and_then(|v| u32::try_from(v).ok()))
                    .collect()
            })
            .unwrap_or_default();
        let [n, k] = shape[..] else {
            return Err(bad(format!(
                "shape {} is not a 2-D weight [n, k]",
                field("shape")?
            )));
        };
        let dtype = field("dtype")?
            .as_str()
            .ok_or_else(|| bad("`dtype` is not a string".to_string()))?
            .to_string();
        let nested_offset = match json.get("nested_offset") {
            None => None,
            Some(v) => {
                let nested_block = uint("nested_blocksize")?;
                if nested_block as usize != ABSMAX_BLOCK {
                    return Err(bad(format!(
                        "nested_blocksize = {nested_block}; the kernels read blocks of {ABSMAX_BLOCK}"
                    )));
                }
                let offset = v
                    .as_f64()
                    .ok_or_else(|| bad("`nested_offset` is not a number".to_string()))?;
                // The JSON holds the f32 offset printed as an f64: rounding back is exact.
                Some(offset as f32)
            }
        };
        Ok(Self {
            n,
            k,
            block,
            dtype,
            nested_offset,
        })
    }
}

impl LoadedNf4 {
    /// Whether the absmax are double-quantised.
    pub fn double_quant(&self) -> bool {
        matches!(self.state, Nf4State::Double(_))
    }

    /// The kernel configuration this weight needs (`n`, `k`, `block`, `double_quant`; dtype and
    /// arch at their defaults, set them for your activations).
    pub fn config(&self) -> Nf4Config {
        Nf4Config {
            block: self.block,
            double_quant: self.double_quant(),
            ..Nf4Config::new(self.n, self.k)
        }
    }

    /// The dequantised weight, `n · k` f32 values, as `bitsandbytes.functional.dequantize_4bit`
    /// computes it.
    pub fn dequantize(&self) -> Result<Vec<f32>, super::Nf4FormatError> {
        match &self.state {
            Nf4State::Single(w) => super::format::dequantize(w),
            Nf4State::Double(dq) => super::format::dequantize(&dq.to_weights()?),
        }
    }

    /// Checks that `cfg` was compiled for this weight (shape, block, double quantisation; and
    /// that it is valid), then uploads the state as it is stored.
    pub fn upload<B: Backend>(
        &self,
        cfg: &Nf4Config,
        dev: &B,
    ) -> Result<DeviceWeights<B>, CheckpointLoadError> {
        let want = self.config();
        let mismatch =
            |what: &str, cfg_value: String, file_value: String| CheckpointError::Config {
                tensor: self.name.clone(),
                reason: format!("the kernel has {what} = {cfg_value}, the weight {file_value}"),
            };
        if (cfg.n, cfg.k) != (want.n, want.k) {
            return Err(mismatch(
                "[n, k]",
                format!("[{}, {}]", cfg.n, cfg.k),
                format!("[{}, {}]", want.n, want.k),
            )
            .into());
        }
        if cfg.block != want.block {
            return Err(mismatch("block", cfg.block.to_string(), want.block.to_string()).into());
        }
        if cfg.double_quant != want.double_quant {
            return Err(mismatch(
                "double_quant",
                cfg.double_quant.to_string(),
                want.double_quant.to_string(),
            )
            .into());
        }
        if let Err(errs) = cfg.validate() {
            return Err(CheckpointError::Config {
                tensor: self.name.clone(),
                reason: errs.to_string(),
            }
            .into());
        }
        Ok(match &self.state {
            Nf4State::Single(w) => DeviceWeights::upload(dev, w)?,
            Nf4State::Double(dq) => DeviceWeights::upload_double_quant(dev, dq)?,
        })
    }
}

/// A checkpoint that does not fit the kernel, or a device error while uploading it.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointLoadError {
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error(transparent)]
    Launch(#[from] crate::launch::LaunchError),
}
