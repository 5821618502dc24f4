//! PTX written by real compilers (NVRTC 12.9 and Triton 3.x, see `tests/real/README.md`) run in
//! the interpreter with every check on, against outputs computed independently with numpy.
//!
//! Each [`Case`] names a module of `tests/real/ptx/`, an entry, the launch shape and the
//! kernel's parameters in order. Inputs come from `tests/real/data/<case>/<name>.bin`, expected
//! outputs from `<name>.expected.bin` (f32 for every float output, whatever its device type).
//! Valid kernels must match and report no finding; the deliberately wrong ones must report the
//! named finding kinds and nothing else. A case in [`KNOWN_UNSUPPORTED`] must still fail with
//! `SimError::Unsupported` naming the listed form: when support lands this test fails until the
//! entry is removed, so that the case then has to match its expected outputs.

use std::path::{Path, PathBuf};

use ptxforge_sim::{Arg, Device, Finding, Module, Options, SimError};

/// Device element type of an output buffer.
#[derive(Debug, Clone, Copy)]
enum Elem {
    F16,
    F32,
    I32,
    U32,
}

impl Elem {
    fn bytes(self) -> usize {
        match self {
            Elem::F16 => 2,
            _ => 4,
        }
    }
}

/// `|got - want| <= atol + rtol * |want|`.
#[derive(Debug, Clone, Copy)]
struct Tol {
    atol: f64,
    rtol: f64,
}

const EXACT: Tol = Tol {
    atol: 0.0,
    rtol: 0.0,
};

const fn tol(atol: f64, rtol: f64) -> Tol {
    Tol { atol, rtol }
}

/// One kernel parameter, in declaration order.
#[derive(Debug, Clone, Copy)]
enum P {
    /// A buffer uploaded from `data/<case>/<name>.bin`.
    In(&'static str),
    /// A zero-filled buffer compared afterwards with `data/<case>/<name>.expected.bin`.
    Out(&'static str, Elem, Tol),
    /// A zero-filled buffer of this many bytes whose contents are not compared.
    Zeros(usize),
    /// A buffer of this many bytes that is never written (initcheck).
    Uninit(usize),
    /// A `.u32` parameter.
    Int(u32),
    /// A `.f32` parameter.
    Float(f32),
    /// A null pointer: Triton's global and profile scratch, which these kernels do not use.
    Null,
}

/// What a launch must report.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// No finding, and every `Out` matches.
    Clean,
    /// Findings of exactly these kinds (each at least once, no other kind).
    Findings(&'static [&'static str]),
    /// A finding whose message contains this text (any kind; no outputs compared).
    Message(&'static str),
}

#[derive(Debug)]
struct Case {
    name: &'static str,
    ptx: &'static str,
    entry: &'static str,
    grid: [u32; 3],
    block: [u32; 3],
    smem: u32,
    params: &'static [P],
    expect: Expect,
}

use Elem::*;
use P::*;

#[allow(clippy::too_many_arguments)] // one row of the table, in reading order
const fn case(
    name: &'static str,
    ptx: &'static str,
    entry: &'static str,
    grid: [u32; 3],
    block: [u32; 3],
    smem: u32,
    params: &'static [P],
    expect: Expect,
) -> Case {
    Case {
        name,
        ptx,
        entry,
        grid,
        block,
        smem,
        params,
        expect,
    }
}

const fn x(n: u32) -> [u32; 3] {
    [n, 1, 1]
}

// Triton matmul: M=96, N=80, K=80 against 64x64x32 tiles; the unit strides were specialised
// away, so the runtime parameters are M, N, K, stride_am, stride_bk, stride_cm.
const MM: [P; 6] = [Int(96), Int(80), Int(80), Int(80), Int(80), Int(80)];
const F16_OUT: Tol = tol(1e-3, 2e-3); // one f16 rounding of an f32 sum
const TF32: Tol = tol(2e-2, 0.0); // K=80 products of 10-bit-mantissa operands in (-1, 1)
const F32_SUM: Tol = tol(1e-4, 1e-5);

#[rustfmt::skip] // one case per row
const CASES: &[Case] = &[
    // --- Triton 3.x, default num_warps=4 / num_stages=3, sm_80 ---
    case("triton_matmul_f16_f16", "triton_matmul_f16_f16.ptx", "matmul", [2, 2, 1], x(128), 16384,
        &[In("a"), In("b"), Out("c", F16, F16_OUT), MM[0], MM[1], MM[2], MM[3], MM[4], MM[5], Null, Null],
        Expect::Clean),
    case("triton_matmul_f16_f32", "triton_matmul_f16_f32.ptx", "matmul", [2, 2, 1], x(128), 16384,
        &[In("a"), In("b"), Out("c", F32, F32_SUM), MM[0], MM[1], MM[2], MM[3], MM[4], MM[5], Null, Null],
        Expect::Clean),
    case("triton_matmul_tf32", "triton_matmul_tf32.ptx", "matmul", [2, 2, 1], x(128), 32768,
        &[In("a"), In("b"), Out("c", F32, TF32), MM[0], MM[1], MM[2], MM[3], MM[4], MM[5], Null, Null],
        Expect::Clean),
    case("triton_matmul_f32_ieee", "triton_matmul_f32_ieee.ptx", "matmul", [2, 2, 1], x(128), 32768,
        &[In("a"), In("b"), Out("c", F32, F32_SUM), MM[0], MM[1], MM[2], MM[3], MM[4], MM[5], Null, Null],
        Expect::Clean),
    // 2 heads, 80 keys/queries (ragged against BLOCK_M=64, BLOCK_N=32), head dim 64.
    case("triton_attention_fwd", "triton_attention_fwd.ptx", "attention_fwd", [2, 2, 1], x(128), 24576,
        &[In("q"), In("k"), In("v"), Out("o", F16, tol(2.5e-3, 0.0)), Float(0.125), Int(80), Int(80 * 64), Int(64), Null, Null],
        Expect::Clean),
    case("triton_softmax", "triton_softmax.ptx", "softmax_rows", x(37), x(128), 16,
        &[Out("y", F32, tol(1e-7, 1e-5)), In("x"), Int(100), Int(100), Int(100), Null, Null],
        Expect::Clean),
    // --- NVRTC 12.9, compute_80 ---
    case("cg_block_sum_i32", "cuda_cg_reduce_i32.ptx", "cg_block_sum_i32", x(4), x(256), 0,
        &[In("x"), Out("out", I32, EXACT), Int(1000)],
        Expect::Clean),
    case("cg_block_sum_f32", "cuda_cg_reduce_f32.ptx", "cg_block_sum_f32", x(4), x(256), 0,
        &[In("x"), Out("out", F32, F32_SUM), Int(1000)],
        Expect::Clean),
    case("cg_block_max_f32", "cuda_cg_reduce_f32.ptx", "cg_block_max_f32", x(4), x(256), 0,
        &[In("x"), Out("out", F32, EXACT), Int(1000)],
        Expect::Clean),
    case("block_vote", "cuda_block_vote.ptx", "block_vote", x(5), x(200), 0,
        &[In("x"), Out("out", U32, EXACT), Int(950)],
        Expect::Clean),
    case("warp_agg_count", "cuda_block_vote.ptx", "warp_agg_count", x(8), x(128), 0,
        &[In("x"), Out("count", U32, EXACT), Out("rank", U32, EXACT), Int(1000)],
        Expect::Clean),
    case("tile_sum_partial", "cuda_block_vote.ptx", "tile_sum_partial", x(10), x(100), 0,
        &[In("x"), Out("out", F32, F32_SUM), Int(1000)],
        Expect::Clean),
    case("scan_inclusive_i32", "cuda_scan.ptx", "scan_inclusive_i32", x(4), x(256), 0,
        &[In("x"), Out("y", I32, EXACT), Int(1000)],
        Expect::Clean),
    case("histogram_match_any", "cuda_histogram.ptx", "histogram_match_any", x(4), x(128), 64 * 4,
        &[In("keys"), Out("hist", U32, EXACT), Int(3000), Int(64)],
        Expect::Clean),
    case("transpose_smem", "cuda_transpose.ptx", "transpose_smem", [2, 3, 1], [32, 8, 1], 0,
        &[In("in"), Out("out", F32, EXACT), Int(70), Int(45)],
        Expect::Clean),
    case("layernorm_f32", "cuda_rownorm.ptx", "layernorm_f32", x(12), x(128), 0,
        &[In("x"), In("gamma"), In("beta"), Out("y", F32, tol(2e-5, 2e-5)), Int(300), Float(1e-5)],
        Expect::Clean),
    case("softmax_f32", "cuda_rownorm.ptx", "softmax_f32", x(12), x(128), 0,
        &[In("x"), Out("y", F32, tol(1e-8, 1e-5)), Int(333)],
        Expect::Clean),
    case("checked_sqrt_pass", "cuda_assert.ptx", "checked_sqrt", x(3), x(128), 0,
        &[In("x"), Out("y", F32, EXACT), Int(300)],
        Expect::Clean),
    case("checked_sqrt_fails", "cuda_assert.ptx", "checked_sqrt", x(3), x(128), 0,
        &[In("x"), Zeros(300 * 4), Int(300)],
        Expect::Message("assert.cu:6: void checked_sqrt(const float *, float *, int): assertion `v >= 0.0f` failed")),
    case("device_globals", "cuda_device_globals.ptx", "scale_poly", x(1), x(256), 0,
        &[In("x"), Out("y", F32, tol(1e-6, 1e-6)), Out("calls", U32, EXACT), Int(200)],
        Expect::Clean),
    case("mma_tile_16x8x16", "cuda_mma.ptx", "mma_tile_16x8x16", x(1), x(32), 0,
        &[In("a"), In("b"), Out("c", F32, tol(1e-5, 1e-6))],
        Expect::Clean),
    case("mma_gemm_pipelined", "cuda_mma.ptx", "mma_gemm_pipelined", [2, 2, 1], x(128), 0,
        &[In("a"), In("b"), Out("c", F32, F32_SUM), Int(64), Int(64), Int(128)],
        Expect::Clean),
    // --- NVRTC, deliberately wrong ---
    case("bug_out_of_bounds", "cuda_buggy.ptx", "bug_out_of_bounds", x(1), x(128), 0,
        &[In("x"), Zeros(400), Int(100)],
        Expect::Findings(&["OutOfBounds"])),
    case("bug_shared_race", "cuda_buggy.ptx", "bug_shared_race", x(1), x(128), 0,
        &[In("x"), Zeros(512)],
        Expect::Findings(&["SharedRace"])),
    case("bug_missing_syncthreads", "cuda_buggy.ptx", "bug_missing_syncthreads", x(2), x(256), 0,
        &[In("x"), Zeros(8)],
        Expect::Findings(&["SharedRace"])),
    // The halves meet at different bar.sync instructions; after that finding the lower half
    // waits at the second barrier while the upper half exits.
    case("bug_divergent_barrier", "cuda_buggy.ptx", "bug_divergent_barrier", x(1), x(64), 0,
        &[In("x"), Zeros(256)],
        Expect::Findings(&["DivergentBarrier", "ExitBeforeBarrier"])),
    case("bug_exit_before_barrier", "cuda_buggy.ptx", "bug_exit_before_barrier", x(1), x(64), 0,
        &[In("x"), Zeros(256)],
        Expect::Findings(&["ExitBeforeBarrier"])),
    case("bug_uninitialized_read", "cuda_buggy.ptx", "bug_uninitialized_read", x(1), x(128), 0,
        &[Uninit(400), Zeros(400), Int(100)],
        Expect::Findings(&["Uninitialized"])),
    case("bug_misaligned", "cuda_buggy.ptx", "bug_misaligned", x(1), x(32), 0,
        &[In("bytes"), Zeros(128)],
        Expect::Findings(&["Misaligned"])),
    case("bug_shfl_divergent", "cuda_buggy.ptx", "bug_shfl_divergent", x(1), x(32), 0,
        &[In("x"), Zeros(128)],
        Expect::Findings(&["WarpSyncMask"])),
];

/// How the interpreter refuses a case today.
#[derive(Debug, Clone, Copy)]
#[allow(dead_code)] // constructed only while some case is listed
enum Refusal {
    /// `SimError::Unsupported` whose opcode or detail contains this form.
    Unsupported(&'static str),
}

/// Cases the interpreter refuses today. Each must still be refused exactly so; remove the entry
/// when support lands (this test then fails until it is removed and the case matches).
const KNOWN_UNSUPPORTED: &[(&str, Refusal)] = &[];

/// Findings the interpreter reports on valid kernels where hardware and compute-sanitizer
/// would not: (case, kind). Each must still appear (remove the entry when the check is fixed);
/// all other findings still fail the case and its outputs are still compared.
const KNOWN_FALSE_FINDINGS: &[(&str, &str)] = &[];

fn real_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/real")
}

/// A data file of the case; a missing one is a broken corpus, not an interpreter result.
fn read_data(case: &Case, file: &str) -> Vec<u8> {
    let path = real_dir().join("data").join(case.name).join(file);
    std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run tests/real/regen.py)", path.display()))
}

/// Findings and the bytes of every `Out` buffer, in parameter order.
type Outcome = (Vec<Finding>, Vec<Vec<u8>>);

fn run(case: &Case, options: &Options) -> Result<Outcome, SimError> {
    let path = real_dir().join("ptx").join(case.ptx);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run tests/real/regen.py)", path.display()));
    let module = Module::parse(&text)?;
    let mut device = Device::new();
    let mut args = Vec::new();
    let mut outs = Vec::new();
    for p in case.params {
        let arg = match *p {
            In(name) => Arg::Buffer(device.upload(&read_data(case, &format!("{name}.bin")))),
            Out(name, elem, _) => {
                let want = read_data(case, &format!("{name}.expected.bin"));
                let id = device.upload(&vec![0u8; want.len() / 4 * elem.bytes()]);
                outs.push(id);
                Arg::Buffer(id)
            }
            Zeros(bytes) => Arg::Buffer(device.upload(&vec![0u8; bytes])),
            Uninit(bytes) => Arg::Buffer(device.alloc(bytes)),
            Int(v) => Arg::U32(v),
            Float(v) => Arg::F32(v),
            Null => Arg::U64(0),
        };
        args.push(arg);
    }
    let report = device.launch(
        &module, case.entry, case.grid, case.block, case.smem, &args, options,
    )?;
    let bytes = outs
        .into_iter()
        .map(|id| device.download::<u8>(id))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((report.findings, bytes))
}

fn decode(elem: Elem, bytes: &[u8]) -> Vec<f64> {
    bytes
        .chunks_exact(elem.bytes())
        .map(|c| match elem {
            F16 => half::f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f64(),
            F32 => f64::from(f32::from_le_bytes(c.try_into().unwrap())),
            I32 => f64::from(i32::from_le_bytes(c.try_into().unwrap())),
            U32 => f64::from(u32::from_le_bytes(c.try_into().unwrap())),
        })
        .collect()
}

/// Compares every `Out` of `case` with its expected file; the mismatches, worst first.
fn compare(case: &Case, outs: &[Vec<u8>]) -> Vec<String> {
    let mut errors = Vec::new();
    let expected = case.params.iter().filter_map(|p| match *p {
        Out(name, elem, tol) => Some((name, elem, tol)),
        _ => None,
    });
    for ((name, elem, tol), got) in expected.zip(outs) {
        let want_elem = if matches!(elem, F16 | F32) { F32 } else { elem };
        let want = decode(want_elem, &read_data(case, &format!("{name}.expected.bin")));
        let got = decode(elem, got);
        let mut bad: Vec<(f64, usize)> = got
            .iter()
            .zip(&want)
            .enumerate()
            .filter_map(|(i, (g, w))| {
                let err = (g - w).abs();
                let ok = err <= tol.atol + tol.rtol * w.abs();
                (!ok).then_some((if err.is_nan() { f64::INFINITY } else { err }, i))
            })
            .collect();
        bad.sort_by(|a, b| b.0.total_cmp(&a.0));
        if !bad.is_empty() {
            let worst: Vec<String> = bad
                .iter()
                .take(4)
                .map(|&(_, i)| format!("[{i}] got {} want {}", got[i], want[i]))
                .collect();
            errors.push(format!(
                "{name}: {} of {} elements off ({tol:?}); worst {}",
                bad.len(),
                want.len(),
                worst.join(", ")
            ));
        }
    }
    errors
}

fn check_findings(case: &Case, findings: &[Finding]) -> Vec<String> {
    let describe = || {
        findings
            .iter()
            .map(|f| format!("{:?} at line {}: {}", f.kind, f.line, f.message))
            .collect::<Vec<_>>()
            .join("; ")
    };
    let known_false: Vec<&str> = KNOWN_FALSE_FINDINGS
        .iter()
        .filter(|(name, _)| *name == case.name)
        .map(|&(_, kind)| kind)
        .collect();
    let mut errors: Vec<String> = known_false
        .iter()
        .filter(|k| !findings.iter().any(|f| f.kind.name() == **k))
        .map(|k| {
            format!("the known false {k} finding is gone: remove it from KNOWN_FALSE_FINDINGS")
        })
        .collect();
    let findings: Vec<&Finding> = findings
        .iter()
        .filter(|f| !known_false.contains(&f.kind.name()))
        .collect();
    match case.expect {
        Expect::Clean => errors.extend(
            findings
                .iter()
                .map(|f| format!("unexpected {:?} at line {}: {}", f.kind, f.line, f.message)),
        ),
        Expect::Findings(kinds) => {
            let missing = kinds
                .iter()
                .filter(|k| !findings.iter().any(|f| f.kind.name() == **k));
            errors.extend(missing.map(|k| format!("no {k} finding; findings: {}", describe())));
            let extra = findings.iter().filter(|f| !kinds.contains(&f.kind.name()));
            errors.extend(extra.map(|f| format!("unrelated finding {:?}: {}", f.kind, f.message)));
        }
        Expect::Message(text) => {
            if !findings.iter().any(|f| f.message.contains(text)) {
                errors.push(format!("no finding mentions `{text}`: {}", describe()));
            }
        }
    }
    errors
}

/// Finding kinds, sorted and without repeats.
fn kinds(findings: &[Finding]) -> Vec<&'static str> {
    let mut k: Vec<&str> = findings.iter().map(|f| f.kind.name()).collect();
    k.sort_unstable();
    k.dedup();
    k
}

/// How one case ended.
enum Verdict {
    Matched,
    Unsupported,
    Failed(String),
}

/// Whether `error` is the refusal the case is listed with.
fn refused_as_listed(error: &SimError, refusal: Refusal) -> bool {
    match (error, refusal) {
        (SimError::Unsupported { opcode, detail, .. }, Refusal::Unsupported(form)) => {
            opcode.contains(form) || detail.contains(form)
        }
        _ => false,
    }
}

/// Runs a case that is expected to run: its findings and outputs, then the same launch with
/// parallel blocks in a shuffled order, which must give the same bytes and finding kinds.
fn check_run(case: &Case, findings: &[Finding], outs: &[Vec<u8>]) -> Vec<String> {
    let mut errors = check_findings(case, findings);
    if matches!(case.expect, Expect::Clean) {
        errors.extend(compare(case, outs));
    }
    let shuffled = Options {
        threads: 4,
        shuffle_blocks: Some(0x5eed),
        ..Options::default()
    };
    match run(case, &shuffled) {
        Ok((findings2, outs2)) => {
            if outs2 != outs {
                errors
                    .push("outputs differ between sequential and shuffled parallel blocks".into());
            }
            if kinds(&findings2) != kinds(findings) {
                errors.push(format!(
                    "finding kinds differ under shuffled parallel blocks: {:?} vs {:?}",
                    kinds(findings),
                    kinds(&findings2)
                ));
            }
        }
        Err(e) => errors.push(format!("shuffled parallel run: {e}")),
    }
    errors
}

fn judge(case: &Case) -> Verdict {
    let sequential = Options {
        threads: 1,
        ..Options::default()
    };
    let known = KNOWN_UNSUPPORTED
        .iter()
        .find(|(name, _)| *name == case.name)
        .map(|&(_, refusal)| refusal);
    match (known, run(case, &sequential)) {
        (Some(refusal), Err(e)) if refused_as_listed(&e, refusal) => Verdict::Unsupported,
        (Some(refusal), Err(e)) => Verdict::Failed(format!("listed as {refusal:?} but: {e}")),
        (Some(refusal), Ok(_)) => Verdict::Failed(format!(
            "listed as {refusal:?} but it runs now: remove it from KNOWN_UNSUPPORTED"
        )),
        (None, Err(e)) => Verdict::Failed(e.to_string()),
        (None, Ok((findings, outs))) => {
            let errors = check_run(case, &findings, &outs);
            if errors.is_empty() {
                Verdict::Matched
            } else {
                Verdict::Failed(errors.join("\n      "))
            }
        }
    }
}

#[test]
fn real_compiler_ptx_runs_and_matches_independent_references() {
    let mut failures = Vec::new();
    let (mut matched, mut unsupported) = (0, 0);
    for case in CASES {
        match judge(case) {
            Verdict::Matched => matched += 1,
            Verdict::Unsupported => unsupported += 1,
            Verdict::Failed(why) => failures.push(format!("{}: {why}", case.name)),
        }
    }
    println!(
        "real-compiler corpus: {} cases, {} ran and matched, {} known unsupported, {} failed",
        CASES.len(),
        matched,
        unsupported,
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n  {}",
        failures.len(),
        CASES.len(),
        failures.join("\n  ")
    );
}

#[test]
fn every_known_entry_names_a_case() {
    let listed = KNOWN_UNSUPPORTED.iter().map(|(name, _)| name);
    for name in listed.chain(KNOWN_FALSE_FINDINGS.iter().map(|(name, _)| name)) {
        assert!(
            CASES.iter().any(|c| c.name == *name),
            "a KNOWN_ list names no case `{name}`"
        );
    }
}

/// `buggy.cu` is compiled with `-lineinfo`: every finding on it names its `.cu` line from the
/// `.loc` directives, next to the PTX line (the out-of-bounds read is `y[i] = x[i + 1] - x[i]`).
#[test]
fn findings_on_lineinfo_ptx_name_the_cuda_source_line() {
    let options = Options {
        threads: 1,
        ..Options::default()
    };
    let buggy = CASES.iter().filter(|c| c.ptx == "cuda_buggy.ptx");
    let mut seen = 0;
    for case in buggy {
        let (findings, _) = run(case, &options).unwrap_or_else(|e| panic!("{}: {e}", case.name));
        for f in &findings {
            let src = f.source.as_ref().unwrap_or_else(|| {
                panic!(
                    "{}: {:?} at PTX line {} has no source",
                    case.name, f.kind, f.line
                )
            });
            assert_eq!(src.file, "sim/tests/real/cuda/buggy.cu", "{}", case.name);
            assert!(src.line > 0 && f.line > 0, "{}: {src}", case.name);
            seen += 1;
        }
        if case.name == "bug_out_of_bounds" {
            let oob = findings.iter().find(|f| f.kind.name() == "OutOfBounds");
            let src = oob
                .and_then(|f| f.source.as_ref())
                .map(|s| (s.line, s.column));
            assert_eq!(src.map(|s| s.0), Some(6), "{findings:#?}");
        }
    }
    assert!(seen >= 7, "only {seen} findings on buggy.cu");
}
