//! Runs every kernel of `tests/ptx/` with the case written in its header and compares outputs:
//!
//! ```text
//! // case: --entry NAME --grid 1 --block 32 --buf out=u32:zeros:32 --arg out   (CLI syntax)
//! // expect: out=u32:0,1,2*30                                                 (values, v*N repeats)
//! ```
//!
//! Valid kernels must run without findings. Kernels in `tests/ptx/buggy/` declare
//! `// expect-finding: KIND` (and optionally `// expect-message: TEXT`) and must produce it.

use std::path::{Path, PathBuf};

use ptxforge_sim::cli::{self, Source};
use ptxforge_sim::types::Ty;
use ptxforge_sim::FindingKind;

pub fn ptx_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "ptx"))
        .collect();
    v.sort();
    v
}

fn header(text: &str, key: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix(key).map(|v| v.trim().to_string()))
        .collect()
}

fn split_args(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_string).collect()
}

fn values_match(ty: Ty, got: u64, want: &str) -> bool {
    if want == "nan" {
        let f = |b: u64| match ty {
            Ty::F32 => f32::from_bits(b as u32).is_nan(),
            Ty::F64 => f64::from_bits(b).is_nan(),
            Ty::F16 => (b & 0x7c00) == 0x7c00 && (b & 0x3ff) != 0,
            Ty::Bf16 => (b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0,
            _ => false,
        };
        return f(got);
    }
    cli::value_bits(ty, want).is_ok_and(|w| w == got)
}

fn run_case(path: &Path) -> Result<Vec<ptxforge_sim::Finding>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let case = header(&text, "// case:");
    let [case] = case.as_slice() else {
        return Err("needs exactly one `// case:` line".into());
    };
    let mut args = vec![path.display().to_string()];
    args.extend(split_args(case));
    let spec = cli::parse_run(&args)?;
    let out = cli::run_source(&text, &spec).map_err(|e| e.to_string())?;
    let mut errors = Vec::new();
    for exp in header(&text, "// expect:") {
        let (name, rest) = exp.split_once('=').ok_or("bad expect")?;
        let (ty, vals) = rest.split_once(':').ok_or("bad expect")?;
        let ty = cli::parse_ty(ty)?;
        let want: Vec<String> = match cli::parse_source(vals) {
            Ok(Source::Iota(n)) => (0..n).map(|i| i.to_string()).collect(),
            Ok(Source::Zeros(n)) => vec!["0".to_string(); n],
            _ => cli::expand_list(vals),
        };
        let (id, _) = out.buffers.get(name).ok_or(format!("no buffer `{name}`"))?;
        let bytes = out.device.download::<u8>(*id).map_err(|e| e.to_string())?;
        let size = ty.bytes() as usize;
        let got: Vec<u64> = bytes
            .chunks_exact(size)
            .map(|c| {
                let mut b = [0u8; 8];
                b[..size].copy_from_slice(c);
                u64::from_le_bytes(b)
            })
            .collect();
        if got.len() < want.len() {
            errors.push(format!(
                "{name}: buffer has {} elements, expected {}",
                got.len(),
                want.len()
            ));
            continue;
        }
        for (i, w) in want.iter().enumerate() {
            if !values_match(ty, got[i], w) {
                errors.push(format!(
                    "{name}[{i}] = 0x{:x}, expected {w} (0x{:x})",
                    got[i],
                    cli::value_bits(ty, w).unwrap_or(0)
                ));
                if errors.len() > 8 {
                    break;
                }
            }
        }
    }
    if errors.is_empty() {
        Ok(out.report.findings)
    } else {
        Err(errors.join("\n    "))
    }
}

#[test]
fn valid_corpus_kernels_compute_expected_outputs_cleanly() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ptx");
    let files = ptx_files(&dir);
    let mut failures = Vec::new();
    for f in &files {
        match run_case(f) {
            Ok(findings) if findings.is_empty() => {}
            Ok(findings) => failures.push(format!(
                "{}: unexpected findings: {:#?}",
                f.display(),
                findings
            )),
            Err(e) => failures.push(format!("{}: {e}", f.display())),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} kernels failed:\n  {}",
        failures.len(),
        files.len(),
        failures.join("\n  ")
    );
    assert!(files.len() >= 40, "corpus has only {} kernels", files.len());
}

#[test]
fn buggy_kernels_are_caught_by_the_right_check() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ptx/buggy");
    let files = ptx_files(&dir);
    let mut failures = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let kinds = header(&text, "// expect-finding:");
        let msgs = header(&text, "// expect-message:");
        match run_case(f) {
            Ok(findings) => {
                for k in &kinds {
                    if !findings.iter().any(|x| x.kind.name() == k) {
                        failures.push(format!(
                            "{}: expected a {k} finding, got {:?}",
                            f.display(),
                            findings.iter().map(|x| x.kind).collect::<Vec<_>>()
                        ));
                    }
                }
                for m in &msgs {
                    if !findings.iter().any(|x| x.message.contains(m.as_str())) {
                        failures.push(format!(
                            "{}: no finding message contains `{m}`: {findings:#?}",
                            f.display()
                        ));
                    }
                }
                if kinds.is_empty() {
                    failures.push(format!("{}: no `// expect-finding:` line", f.display()));
                }
                // Findings must never be of an unrelated kind.
                for x in &findings {
                    if !kinds.iter().any(|k| k == x.kind.name()) {
                        failures.push(format!(
                            "{}: unexpected extra finding {:?}: {}",
                            f.display(),
                            x.kind,
                            x.message
                        ));
                    }
                }
            }
            Err(e) => failures.push(format!("{}: {e}", f.display())),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(files.len() >= 8, "only {} buggy kernels", files.len());
    let _ = FindingKind::OutOfBounds;
}
