//! Project tasks: `cargo xtask test`, `cargo xtask examples`, `cargo xtask emit --out DIR`.

mod bench;
mod examples;
mod gpu;
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
        Some("gpu-suite") => gpu_suite(&args[1..]),
        Some("gpu-bench") => gpu_bench(&args[1..]),
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
  test            install ptxas if needed, then fmt check, clippy, the whole test suite (ptxas required), rustdoc -D warnings
  examples        run every example (each exits non-zero when it disagrees with its reference)
  test --gpu      the GPU suite: every numerics case on CudaBackend and the interpreter, compared
                  with each other and the host reference, then the examples on the GPU (needs a GPU)
  emit --out DIR  write every kernel of the test matrix as DIR/<family>/<name>.<arch>.ptx
  bench [--out F] measure code generation, ptxas resources, interpreter counters and throughput; write F (BENCHMARKS.md)
  bench --gpu [--out F]  time the kernels on the GPU with CUDA events against copy bandwidth, cuBLAS
                  and PyTorch; write F (target/BENCHMARKS-GPU.md) (needs a GPU)";

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

/// Cargo in the workspace root. Every xtask command is one full build, never an edit loop, so
/// incremental caches (2.6 GB over the suite) would only take disk.
fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(workspace_root())
        .env("CARGO_INCREMENTAL", "0");
    c
}

fn test(extra: &[String]) -> Result<(), String> {
    if extra.first().map(String::as_str) == Some("--gpu") {
        return test_gpu(&extra[1..]);
    }
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
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]))?;
    // The GPU suite and benchmarks must keep building too (their plumbing ran above, on the CPU).
    run(cargo().args([
        "clippy",
        "--package",
        "xtask",
        "--features",
        "cuda",
        "--",
        "-D",
        "warnings",
    ]))?;
    // The API docs: every intra-doc link resolves and none points at a private item.
    run(cargo()
        .env("RUSTDOCFLAGS", "-D warnings")
        .args(["doc", "--workspace", "--no-deps"]))?;
    match std::fs::read_to_string(&report) {
        Ok(text) => eprintln!(
            "xtask: {}",
            text.lines().next().unwrap_or("ptxas report empty")
        ),
        Err(_) => return Err("the ptxas matrix test did not write its report".into()),
    }
    Ok(())
}

/// `cargo xtask test --gpu`: the GPU suite in an optimised xtask built with the CUDA backend,
/// then the examples on the GPU. Fails (non-zero) on a machine without a GPU.
fn test_gpu(extra: &[String]) -> Result<(), String> {
    run(&mut cuda_xtask("gpu-suite", extra))?;
    // The examples that use the GPU (the others run on the interpreter in `cargo xtask test`).
    run(cargo().args([
        "run",
        "--release",
        "--features",
        "cuda",
        "--example",
        "cudarc_interop",
    ]))?;
    Ok(())
}

/// This xtask again, optimised and with the CUDA backend, running `command`.
fn cuda_xtask(command: &str, args: &[String]) -> Command {
    let mut c = cargo();
    c.args([
        "run",
        "--quiet",
        "--release",
        "--package",
        "xtask",
        "--features",
        "cuda",
        "--",
    ])
    .arg(command)
    .args(args);
    c
}

#[cfg(feature = "cuda")]
fn cuda_device() -> Result<ptxforge_runtime::launch::CudaBackend, String> {
    ptxforge_runtime::launch::CudaBackend::new(0)
        .map_err(|e| format!("no GPU: {e}; the --gpu commands need a CUDA device and driver"))
}

#[cfg(feature = "cuda")]
fn gpu_suite(_args: &[String]) -> Result<(), String> {
    let dev = cuda_device()?;
    let reports = gpu::run_suite(&dev, gpu::Size::Full)?;
    let (table, ok) = gpu::report(&reports);
    println!("{table}");
    let path = workspace_root().join("target").join("gpu-suite.md");
    std::fs::write(&path, &table).map_err(|e| format!("{}: {e}", path.display()))?;
    if ok {
        Ok(())
    } else {
        Err("the GPU suite found differences beyond tolerance".into())
    }
}

#[cfg(feature = "cuda")]
fn gpu_bench(args: &[String]) -> Result<(), String> {
    let root = workspace_root();
    let out = match args {
        [] => root.join("target").join("BENCHMARKS-GPU.md"),
        [flag, file] if flag == "--out" => PathBuf::from(file),
        _ => return Err(format!("bench --gpu takes [--out FILE]\n{USAGE}")),
    };
    let dev = cuda_device()?;
    let md = gpu::bench::run(&root, &dev)?;
    println!("{md}");
    std::fs::write(&out, md).map_err(|e| format!("{}: {e}", out.display()))?;
    eprintln!("xtask: wrote {}", out.display());
    Ok(())
}

#[cfg(not(feature = "cuda"))]
fn gpu_suite(_args: &[String]) -> Result<(), String> {
    Err("this xtask was built without the CUDA backend: run `cargo xtask test --gpu`".into())
}

#[cfg(not(feature = "cuda"))]
fn gpu_bench(_args: &[String]) -> Result<(), String> {
    Err("this xtask was built without the CUDA backend: run `cargo xtask bench --gpu`".into())
}

/// Re-runs itself optimised, so code-generation times are those of an optimised build (macro
/// expansion runs optimised code too, `[profile.dev.build-override]`).
fn bench(args: &[String]) -> Result<(), String> {
    if args.first().map(String::as_str) == Some("--gpu") {
        return run(&mut cuda_xtask("gpu-bench", &args[1..]));
    }
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
