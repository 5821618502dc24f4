//! Launching generates no code: every launch a generated wrapper makes hands the backend the
//! macro's PTX text itself, recorded by the runtime's `RecordingBackend`, for every family and
//! every wrapper. Bad input launches nothing.
//!
//! "Itself" is checked by address: every launch of a kernel passes the one `static` copy of
//! `Self::PTX` (`__ptx_static()`), whose text is `Self::PTX`. (`Self::PTX.as_ptr()` at the call
//! site is not a usable reference: a `const` is copied into each codegen unit that uses it, so
//! its address differs between functions in a debug build.)

use half::bf16;
use ptxforge::prelude::*;
use ptxforge::runtime::launch::{RecordedLaunch, RecordingBackend};

#[moe_kernel(experts = 8, top_k = 2, hidden = 64, expert_dim = 96, dtype = bf16, ffn = swiglu)]
#[derive(Debug)]
struct Mixtral;

#[nf4_gemm(n = 64, k = 128, double_quant = true)]
#[derive(Debug)]
struct Proj;

#[attention_kernel(head_dim = 64, causal)]
#[derive(Debug)]
struct Attn;

#[conv2d_kernel(in_channels = 4, out_channels = 8, kernel = 1, bias = true)]
#[derive(Debug)]
struct Conv;

/// Every launch (there were `expected_entries`) used `ptx` itself, which is `PTX`.
fn assert_const_ptx(
    launches: &[RecordedLaunch],
    ptx: &'static str,
    text: &'static str,
    expected_entries: usize,
) {
    assert_eq!(ptx, text);
    assert_eq!(launches.len(), expected_entries, "{launches:?}");
    for launch in launches {
        assert_eq!(
            (launch.ptx_addr, launch.ptx_len),
            (ptx.as_ptr() as usize, ptx.len()),
            "entry {} was launched with another PTX string",
            launch.entry
        );
        assert!(ptx.contains(&format!(".entry {}(", launch.entry)));
    }
}

#[test]
fn moe_wrappers_pass_the_const_ptx() -> Result<(), LaunchError> {
    let dev = RecordingBackend::new();
    let tokens = 16u32;
    let x = dev.alloc::<bf16>(16 * 64)?;
    let logits = dev.alloc::<bf16>(16 * 8)?;
    let w = dev.alloc::<bf16>(8 * 96 * 64)?;
    let mut out = dev.alloc::<bf16>(16 * 64)?;
    Mixtral.forward(&dev, tokens, &x, &logits, &w, &w, &w, &mut out)?;
    assert_eq!(
        dev.entries(),
        [
            Mixtral::GATING.name,
            Mixtral::PERMUTE.name,
            Mixtral::SCHEDULE.name,
            Mixtral::EXPERT_SWIGLU_UP.name,
            Mixtral::EXPERT_SWIGLU_DOWN.name,
            Mixtral::UNPERMUTE.name
        ]
    );
    assert_const_ptx(&dev.launches(), Mixtral::__ptx_static(), Mixtral::PTX, 6);

    dev.clear();
    let mut ws = Mixtral.workspace(&dev, tokens)?;
    Mixtral.gating(&dev, tokens, &logits, &mut ws)?;
    Mixtral.permute(&dev, tokens, &mut ws)?;
    Mixtral.experts(&dev, tokens, &x, &w, &w, &w, &mut ws)?;
    Mixtral.unpermute(&dev, tokens, &ws, &mut out)?;
    Mixtral.forward_with(&dev, tokens, &mut ws, &x, &logits, &w, &w, &w, &mut out)?;
    // The phase wrappers (permute also queues the schedule) and one forward_with: 6 + 6.
    assert_const_ptx(&dev.launches(), Mixtral::__ptx_static(), Mixtral::PTX, 12);

    // A wrong length is caught before the first launch.
    dev.clear();
    let short = dev.alloc::<bf16>(3)?;
    let result = Mixtral.forward(&dev, tokens, &short, &logits, &w, &w, &w, &mut out);
    assert!(matches!(
        result,
        Err(LaunchError::BufferLength { name: "x", .. })
    ));
    assert!(dev.launches().is_empty());
    Ok(())
}

#[test]
fn nf4_wrappers_pass_the_const_ptx() -> Result<(), LaunchError> {
    let dev = RecordingBackend::new();
    let weights = Proj.upload_weights(&dev, &vec![0.5; 64 * 128])?;
    let a = dev.alloc::<f32>(32 * 128)?;
    let mut c = dev.alloc::<f32>(32 * 64)?;
    Proj.forward(&dev, 32, &a, &weights, &mut c)?;
    Proj.forward_tiled(&dev, 32, &a, &weights, &mut c)?;
    let a1 = dev.alloc::<f32>(128)?;
    let mut c1 = dev.alloc::<f32>(64)?;
    Proj.forward(&dev, 1, &a1, &weights, &mut c1)?;
    Proj.forward_gemv(&dev, 1, &a1, &weights, &mut c1)?;
    let mut g_a = dev.alloc::<f32>(32 * 128)?;
    Proj.backward_input(&dev, 32, &c, &weights, &mut g_a)?;
    assert_eq!(
        dev.entries(),
        [
            "nf4_gemm",
            "nf4_gemm",
            "nf4_gemv",
            "nf4_gemv",
            "nf4_backward_input"
        ]
    );
    assert_const_ptx(&dev.launches(), Proj::__ptx_static(), Proj::PTX, 5);
    Ok(())
}

#[test]
fn attention_wrapper_passes_the_const_ptx() -> Result<(), LaunchError> {
    let dev = RecordingBackend::new();
    let shape = AttentionShape {
        batch: 2,
        heads_q: 4,
        heads_kv: 1,
        seq_q: 33,
        seq_kv: 40,
    };
    let q = dev.alloc::<f32>(shape.q_len(64))?;
    let kv = dev.alloc::<f32>(shape.kv_len(64))?;
    let mut o = dev.alloc::<f32>(shape.q_len(64))?;
    let mut lse = dev.alloc::<f32>(shape.lse_len())?;
    Attn.forward(&dev, &shape, &q, &kv, &kv, &mut o, &mut lse, Some(0.125))?;
    assert_const_ptx(&dev.launches(), Attn::__ptx_static(), Attn::PTX, 1);
    assert_eq!(
        dev.launches()[0].config.block.volume(),
        Attn::FORWARD.required_block.unwrap().volume()
    );
    Ok(())
}

#[test]
fn conv_wrappers_pass_the_const_ptx() -> Result<(), LaunchError> {
    let dev = RecordingBackend::new();
    let shape = ConvShape {
        batch: 1,
        height: 6,
        width: 6,
    };
    let x = dev.alloc::<f32>(4 * 36)?;
    let w = dev.alloc::<f32>(8 * 4)?;
    let b = dev.alloc::<f32>(8)?;
    let mut y = dev.alloc::<f32>(8 * 36)?;
    let mut cols = dev.alloc::<f32>(4 * 36)?;
    Conv.forward(&dev, &shape, &x, &w, &b, &mut y)?;
    Conv.forward_1x1(&dev, &shape, &x, &w, &b, &mut y)?;
    Conv.forward_direct(&dev, &shape, &x, &w, &b, &mut y)?;
    Conv.forward_im2col(&dev, &shape, &x, &w, &b, &mut cols, &mut y)?;
    let mut dx = dev.alloc::<f32>(4 * 36)?;
    Conv.backward_data(&dev, &shape, &y, &w, &mut dx)?;
    let (mut dw, mut db) = (dev.alloc::<f32>(8 * 4)?, dev.alloc::<f32>(8)?);
    Conv.backward_filter(&dev, &shape, &x, &y, &mut dw, &mut db)?;
    assert_eq!(
        dev.entries(),
        [
            "conv2d_1x1",
            "conv2d_1x1",
            "conv2d_direct",
            "conv2d_im2col",
            "conv2d_gemm",
            "conv2d_bwd_data",
            "conv2d_bwd_filter",
            "conv2d_bwd_bias"
        ]
    );
    assert_const_ptx(&dev.launches(), Conv::__ptx_static(), Conv::PTX, 8);
    Ok(())
}

/// The entry constants mirror the module the runtime builds for the same configuration.
#[test]
fn entry_consts_match_the_runtime_module() {
    use ptxforge::runtime::templates::KernelFamily;
    let compiled = Mixtral::CONFIG.compile().expect("valid configuration");
    assert_eq!(compiled.ptx, Mixtral::PTX);
    let consts = [
        Mixtral::GATING,
        Mixtral::PERMUTE,
        Mixtral::SCHEDULE,
        Mixtral::EXPERT_SWIGLU_UP,
        Mixtral::EXPERT_SWIGLU_DOWN,
        Mixtral::UNPERMUTE,
    ];
    assert_eq!(compiled.entries.len(), consts.len());
    for (info, entry) in compiled.entries.iter().zip(consts) {
        assert_eq!(info.name, entry.name);
        let params: Vec<(String, _)> = entry
            .params
            .iter()
            .map(|p| (p.name.to_owned(), p.kind))
            .collect();
        assert_eq!(info.params, params);
        assert_eq!(
            info.required_block,
            entry.required_block.map(|b| [b.x, b.y, b.z])
        );
        assert_eq!(info.static_shared_bytes, entry.static_shared_bytes);
        assert_eq!(
            info.max_dynamic_shared_bytes,
            entry.max_dynamic_shared_bytes
        );
    }
}
