//! NF4 states written by real bitsandbytes (`tests/data/bnb/make_fixtures.py`: torch 2.15.0,
//! bitsandbytes 0.50.2, CPU) and saved as transformers saves them: the loader reads them as
//! they are, the host quantiser reproduces them byte for byte, the host dequantiser and every
//! kernel path (in the interpreter, every sanitizer check on) reproduce
//! `bitsandbytes.functional.dequantize_4bit` bit for bit, and malformed files are typed errors
//! naming the tensor.
#![cfg(feature = "sim")]

use ptxforge_runtime::launch::{Backend, SimBackend};
use ptxforge_runtime::templates::nf4::launch as nf4_launch;
use ptxforge_runtime::templates::nf4::{
    dynamic_map, quantize, quantize_absmax, quantize_absmax_with_offset, CheckpointError,
    CheckpointLoadError, LoadedNf4, Nf4Checkpoint, Nf4State,
};
use ptxforge_runtime::templates::testing::SplitMix64;
use ptxforge_runtime::templates::KernelFamily;
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};

const WEIGHTS: &[u8] = include_bytes!("data/bnb/nf4_weights.safetensors");
const REFERENCE: &[u8] = include_bytes!("data/bnb/nf4_reference.safetensors");
const NAMES: [&str; 4] = [
    "proj_a.weight",
    "proj_b.weight",
    "proj_c.weight",
    "proj_d.weight",
];

fn reference(key: &str) -> Vec<f32> {
    let file = SafeTensors::deserialize(REFERENCE).unwrap();
    let view = file.tensor(key).unwrap();
    assert_eq!(view.dtype(), Dtype::F32);
    view.data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

fn load(name: &str) -> LoadedNf4 {
    Nf4Checkpoint::parse(WEIGHTS).unwrap().load(name).unwrap()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn lists_and_loads_every_weight() {
    let file = Nf4Checkpoint::parse(WEIGHTS).unwrap();
    assert_eq!(file.weight_names(), NAMES);
    for (name, (n, k), double) in [
        ("proj_a.weight", (64, 128), false),
        ("proj_b.weight", (64, 128), true),
        ("proj_c.weight", (96, 256), false),
        ("proj_d.weight", (96, 256), true),
    ] {
        let w = file.load(name).unwrap();
        assert_eq!((w.n, w.k, w.block, w.double_quant()), (n, k, 64, double));
        assert_eq!(w.dtype, "float32");
    }
}

#[test]
fn host_quantiser_reproduces_bitsandbytes_bytes() {
    for name in NAMES {
        let loaded = load(name);
        let stem = name.trim_end_matches(".weight");
        let original = reference(&format!("{stem}.original"));
        let ours = quantize(&original, 64).unwrap();
        match &loaded.state {
            Nf4State::Single(w) => {
                assert_eq!(ours.packed, w.packed, "{name}: packed");
                assert_eq!(bits(&ours.absmax), bits(&w.absmax), "{name}: absmax");
            }
            Nf4State::Double(dq) => {
                assert_eq!(ours.packed, dq.packed, "{name}: packed");
                let stored = &dq.absmax;
                assert_eq!(
                    bits(&stored.map),
                    bits(&dynamic_map()),
                    "{name}: nested map"
                );
                let again = quantize_absmax_with_offset(&ours.absmax, stored.offset);
                assert_eq!(again.codes, stored.codes, "{name}: nested codes");
                assert_eq!(
                    bits(&again.nested_absmax),
                    bits(&stored.nested_absmax),
                    "{name}: nested absmax"
                );
                // Our own offset is the exact mean; torch's f32 mean may differ by an ulp.
                let own = quantize_absmax(&ours.absmax);
                let ulps = own.offset.to_bits().abs_diff(stored.offset.to_bits());
                assert!(
                    ulps <= 1,
                    "{name}: offset {} vs {}",
                    own.offset,
                    stored.offset
                );
                if ulps == 0 {
                    assert_eq!(own.codes, stored.codes, "{name}: codes from our offset");
                }
            }
        }
    }
}

#[test]
fn host_dequantisation_matches_bitsandbytes_bit_for_bit() {
    for name in NAMES {
        let stem = name.trim_end_matches(".weight");
        let expected = reference(&format!("{stem}.dequantized"));
        assert_eq!(
            bits(&load(name).dequantize().unwrap()),
            bits(&expected),
            "{name}"
        );
    }
}

/// One-hot activations make every output a single product `1 · ŵ`, so each kernel path's
/// decoded weights can be compared with bitsandbytes' bit for bit: forward rows pick columns of
/// `Ŵ` (every row `j`, so every block's absmax), backward rows pick rows of `Ŵ`.
#[test]
fn every_kernel_path_decodes_bitsandbytes_weights_exactly() {
    for name in NAMES {
        let loaded = load(name);
        let stem = name.trim_end_matches(".weight");
        let expected = reference(&format!("{stem}.dequantized"));
        let cfg = loaded.config();
        let (n, k) = (cfg.n as usize, cfg.k as usize);
        let ptx = cfg.compile().unwrap().ptx;
        let dev = SimBackend::new();
        let weights = loaded.upload(&cfg, &dev).unwrap();

        let cols = [0usize, 1, 63, 64, 65, k / 2 + 3, k - 2, k - 1];
        let mut a = vec![0.0f32; cols.len() * k];
        for (i, &c) in cols.iter().enumerate() {
            a[i * k + c] = 1.0;
        }
        let want: Vec<u32> = cols
            .iter()
            .flat_map(|&c| (0..n).map(move |j| (j, c)))
            .map(|(j, c)| expected[j * k + c].to_bits())
            .collect();
        let a_dev = dev.upload(&a).unwrap();
        let m = cols.len() as u32;
        for tiled in [false, true] {
            let mut c_dev = dev.alloc::<f32>(cols.len() * n).unwrap();
            if tiled {
                nf4_launch::forward_tiled(&cfg, &dev, &ptx, m, &a_dev, &weights, &mut c_dev)
            } else {
                nf4_launch::forward_gemv(&cfg, &dev, &ptx, m, &a_dev, &weights, &mut c_dev)
            }
            .unwrap();
            let got = bits(&dev.download(&c_dev).unwrap());
            assert_eq!(got, want, "{name}: forward (tiled = {tiled})");
        }

        let rows = [0usize, 1, 7, n / 2, n - 2, n - 1, 33, 64.min(n - 3)];
        let mut g_c = vec![0.0f32; rows.len() * n];
        for (i, &r) in rows.iter().enumerate() {
            g_c[i * n + r] = 1.0;
        }
        let want: Vec<u32> = rows
            .iter()
            .flat_map(|&r| expected[r * k..(r + 1) * k].iter().map(|x| x.to_bits()))
            .collect();
        let g_c_dev = dev.upload(&g_c).unwrap();
        let m = rows.len() as u32;
        for tiled in [false, true] {
            let mut g_a = dev.alloc::<f32>(rows.len() * k).unwrap();
            if tiled {
                nf4_launch::backward_input_tiled(&cfg, &dev, &ptx, m, &g_c_dev, &weights, &mut g_a)
            } else {
                nf4_launch::backward_gemv(&cfg, &dev, &ptx, m, &g_c_dev, &weights, &mut g_a)
            }
            .unwrap();
            let got = bits(&dev.download(&g_a).unwrap());
            assert_eq!(got, want, "{name}: backward (tiled = {tiled})");
        }
    }
}

/// The forward on the loaded weights against `A · dequantize_4bit(W)ᵀ` (f64), random `A`.
#[test]
fn forward_on_loaded_weights_matches_the_bitsandbytes_reference() {
    let mut rng = SplitMix64::new(14);
    for name in NAMES {
        let loaded = load(name);
        let stem = name.trim_end_matches(".weight");
        let wd = reference(&format!("{stem}.dequantized"));
        let cfg = loaded.config();
        let (n, k) = (cfg.n as usize, cfg.k as usize);
        let ptx = cfg.compile().unwrap().ptx;
        let dev = SimBackend::new();
        let weights = loaded.upload(&cfg, &dev).unwrap();
        for m in [3usize, 20] {
            let a = rng.vec_f32(m * k, -1.0, 1.0);
            let a_dev = dev.upload(&a).unwrap();
            let mut c_dev = dev.alloc::<f32>(m * n).unwrap();
            nf4_launch::forward(&cfg, &dev, &ptx, m as u32, &a_dev, &weights, &mut c_dev).unwrap();
            let c = dev.download(&c_dev).unwrap();
            for i in 0..m {
                for j in 0..n {
                    let (mut exact, mut size) = (0.0f64, 0.0f64);
                    for l in 0..k {
                        let p = f64::from(a[i * k + l]) * f64::from(wd[j * k + l]);
                        exact += p;
                        size += p.abs();
                    }
                    let err = (f64::from(c[i * n + j]) - exact).abs();
                    assert!(
                        err <= 1e-5 * size + 1e-6,
                        "{name} m={m} [{i},{j}]: {} vs {exact}",
                        c[i * n + j]
                    );
                }
            }
        }
    }
}

/// Rewrites the fixture with `edit` applied to the tensors of `proj_d.weight` and loads it.
fn load_edited(
    edit: impl Fn(&mut Vec<(String, Dtype, Vec<usize>, Vec<u8>)>),
) -> Result<LoadedNf4, CheckpointError> {
    let file = SafeTensors::deserialize(WEIGHTS).unwrap();
    let mut tensors: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = file
        .tensors()
        .into_iter()
        .filter(|(n, _)| n.starts_with("proj_d."))
        .map(|(n, v)| (n, v.dtype(), v.shape().to_vec(), v.data().to_vec()))
        .collect();
    edit(&mut tensors);
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    let bytes = safetensors::serialize(views, None).unwrap();
    Nf4Checkpoint::parse(&bytes)?.load("proj_d.weight")
}

fn set(
    tensors: &mut [(String, Dtype, Vec<usize>, Vec<u8>)],
    name: &str,
    dtype: Dtype,
    shape: Vec<usize>,
    data: Vec<u8>,
) {
    let t = tensors.iter_mut().find(|t| t.0 == name).unwrap();
    *t = (name.to_string(), dtype, shape, data);
}

fn json_with(replace: (&str, &str)) -> Vec<u8> {
    let file = SafeTensors::deserialize(WEIGHTS).unwrap();
    let meta = file
        .tensor("proj_d.weight.quant_state.bitsandbytes__nf4")
        .unwrap();
    let text = String::from_utf8(meta.data().to_vec()).unwrap();
    assert!(text.contains(replace.0));
    text.replace(replace.0, replace.1).into_bytes()
}

#[test]
fn malformed_states_are_typed_errors_naming_the_tensor() {
    assert!(load_edited(|_| {}).is_ok());
    // Missing keys.
    for key in [
        "proj_d.weight.nested_absmax",
        "proj_d.weight.quant_map",
        "proj_d.weight.quant_state.bitsandbytes__nf4",
        "proj_d.weight",
    ] {
        let err = load_edited(|t| t.retain(|x| x.0 != key)).unwrap_err();
        assert_eq!(
            err,
            CheckpointError::Missing {
                tensor: key.to_string()
            }
        );
    }
    // Wrong dtype: f32 absmax where nested codes (u8) are expected.
    let err = load_edited(|t| {
        set(
            t,
            "proj_d.weight.absmax",
            Dtype::F32,
            vec![384],
            vec![0; 384 * 4],
        )
    })
    .unwrap_err();
    assert!(
        matches!(&err, CheckpointError::Dtype { tensor, .. } if tensor == "proj_d.weight.absmax"),
        "{err}"
    );
    // Shapes that disagree with the metadata.
    let err = load_edited(|t| {
        set(
            t,
            "proj_d.weight.nested_absmax",
            Dtype::F32,
            vec![3],
            vec![0; 12],
        )
    })
    .unwrap_err();
    assert!(
        matches!(&err, CheckpointError::Shape { tensor, actual, .. }
            if tensor == "proj_d.weight.nested_absmax" && actual == &[3]),
        "{err}"
    );
    let err = load_edited(|t| {
        set(
            t,
            "proj_d.weight",
            Dtype::U8,
            vec![12287, 1],
            vec![0; 12287],
        )
    })
    .unwrap_err();
    assert!(
        matches!(&err, CheckpointError::Shape { tensor, .. } if tensor == "proj_d.weight"),
        "{err}"
    );
    // A quant_map that is not NF4's (FP4's first entry is 0).
    let err = load_edited(|t| {
        let map = t
            .iter_mut()
            .find(|x| x.0 == "proj_d.weight.quant_map")
            .unwrap();
        map.3[..4].copy_from_slice(&0.0f32.to_le_bytes());
    })
    .unwrap_err();
    assert_eq!(
        err,
        CheckpointError::QuantMap {
            tensor: "proj_d.weight.quant_map".to_string(),
            index: 0,
            actual: 0.0,
            expected: -1.0,
        }
    );
    // Metadata: another quant type, a nested block size the kernels do not read, no shape.
    let meta = "proj_d.weight.quant_state.bitsandbytes__nf4";
    for (from, to, needle) in [
        ("\"nf4\"", "\"fp4\"", "quant_type"),
        (
            "\"nested_blocksize\": 256",
            "\"nested_blocksize\": 128",
            "nested_blocksize",
        ),
        ("\"shape\": [96, 256]", "\"shape\": [24576]", "shape"),
    ] {
        let data = json_with((from, to));
        let err =
            load_edited(|t| set(t, meta, Dtype::U8, vec![data.len()], data.clone())).unwrap_err();
        match &err {
            CheckpointError::Metadata { tensor, reason } => {
                assert_eq!(tensor, meta);
                assert!(reason.contains(needle), "{reason}");
            }
            other => panic!("{from}: {other}"),
        }
    }
    assert!(matches!(
        Nf4Checkpoint::parse(b"not a safetensors file"),
        Err(CheckpointError::Parse(_))
    ));
}

#[test]
fn upload_rejects_a_configuration_for_another_weight() {
    let loaded = load("proj_d.weight");
    let dev = SimBackend::new();
    for cfg in [
        ptxforge_runtime::templates::nf4::Nf4Config {
            n: 95,
            ..loaded.config()
        },
        ptxforge_runtime::templates::nf4::Nf4Config {
            block: 128,
            ..loaded.config()
        },
        ptxforge_runtime::templates::nf4::Nf4Config {
            double_quant: false,
            ..loaded.config()
        },
    ] {
        match loaded.upload(&cfg, &dev) {
            Err(CheckpointLoadError::Checkpoint(CheckpointError::Config { tensor, .. })) => {
                assert_eq!(tensor, "proj_d.weight")
            }
            other => panic!("{other:?}"),
        }
    }
}
