//! Project tasks: `cargo xtask test`, `cargo xtask examples`, `cargo xtask emit --out DIR`.

mod bench;
mod examples;
mod ptxas_install;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("test") => test(&args[1..]),
        Some("emit") => emit(&args[1..]),
        Some("examples") => examples::run_all(),
        Some("bench") => bench(&args[1..]),
        Some("bench-optimised") => bench_optimised(&args[1..]),
        _ => Err(USAGE.to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

const USAGE: &str = "usage: cargo xtask <command>
  test            install ptxas if needed, then fmt check, clippy, the whole test suite (ptxas required)
  examples        run every example (each exits non-zero when it disagrees with its reference)
  emit --out DIR  write every kernel of the test matrix as DIR/<family>/<name>.<arch>.ptx
  bench [--out F] measure code generation, ptxas resources, interpreter counters and throughput; write F (BENCHMARKS.md)";

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

fn run(cmd: &mut Command) -> Result<(), String> {
    eprintln!("xtask: running {cmd:?}");
    let status = cmd
        .status()
        .map_err(|e| format!("could not start {cmd:?}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{cmd:?} failed with {status}"))
    }
}

fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(workspace_root());
    c
}

fn test(extra: &[String]) -> Result<(), String> {
    let root = workspace_root();
    let ptxas = ptxas_install::ensure(&root)?;
    eprintln!("xtask: using ptxas at {}", ptxas.display());
    let report = root.join("target").join("ptxas-report.txt");
    let _ = std::fs::remove_file(&report);
    let with_env = |mut c: Command| {
        c.env("PTXAS", &ptxas)
            .env("PTXFORGE_REQUIRE_PTXAS", "1")
            .env("PTXFORGE_PTXAS_REPORT", &report);
        c
    };
    run(cargo().args(["fmt", "--all", "--", "--check"]))?;
    run(with_env(cargo()).args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]))?;
    run(with_env(cargo()).args(["test", "--workspace"]).args(extra))?;
    examples::run_all()?;
    // The CUDA backend must keep building without a CUDA installation (it loads the driver at run time).
    run(cargo().args([
        "clippy",
        "--package",
        "ptxforge",
        "--features",
        "cuda",
        "--",
        "-D",
        "warnings",
    ]))?;
    match std::fs::read_to_string(&report) {
        Ok(text) => eprintln!(
            "xtask: {}",
            text.lines().next().unwrap_or("ptxas report empty")
        ),
        Err(_) => return Err("the ptxas matrix test did not write its report".into()),
    }
    Ok(())
}

/// Re-runs itself optimised, so code-generation times are those of an optimised build (macro
/// expansion runs optimised code too, `[profile.dev.build-override]`).
fn bench(args: &[String]) -> Result<(), String> {
    run(cargo()
        .args([
            "run",
            "--quiet",
            "--release",
            "--package",
            "xtask",
            "--",
            "bench-optimised",
        ])
        .args(args))
}

fn bench_optimised(args: &[String]) -> Result<(), String> {
    let root = workspace_root();
    let out = match args {
        [] => root.join("BENCHMARKS.md"),
        [flag, file] if flag == "--out" => PathBuf::from(file),
        _ => return Err(format!("bench takes [--out FILE]\n{USAGE}")),
    };
    let ptxas = ptxas_install::ensure(&root)?;
    let md = bench::bench(&root, &ptxas)?;
    std::fs::write(&out, md).map_err(|e| format!("{}: {e}", out.display()))?;
    eprintln!("xtask: wrote {}", out.display());
    Ok(())
}

fn emit(args: &[String]) -> Result<(), String> {
    let out = match args {
        [flag, dir] if flag == "--out" => PathBuf::from(dir),
        _ => return Err(format!("emit needs --out DIR\n{USAGE}")),
    };
    let entries = ptxforge_runtime::matrix::matrix().map_err(|e| e.to_string())?;
    for e in &entries {
        let path = out.join(e.path());
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|err| format!("{}: {err}", dir.display()))?;
        }
        std::fs::write(&path, &e.ptx).map_err(|err| format!("{}: {err}", path.display()))?;
    }
    eprintln!(
        "xtask: wrote {} PTX modules under {}",
        entries.len(),
        out.display()
    );
    Ok(())
}
