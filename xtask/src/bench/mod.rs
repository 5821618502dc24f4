//! `cargo xtask bench`: measures and writes BENCHMARKS.md. Every figure carries the command that
//! produced it. Sections: code generation time, ptxas resources per kernel and target,
//! interpreter counters per kernel, interpreter throughput.

mod bank_conflicts;
mod counters;
mod families;
mod model;
mod realistic;
mod triton;

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use ptxforge_runtime::matrix::{jobs, MatrixEntry};
use ptxforge_runtime::ptxas::{assemble, EntryReport};
use ptxforge_runtime::Arch;

/// Runs of each code-generation job; the median is reported.
const CODEGEN_RUNS: usize = 5;

pub fn bench(root: &Path, ptxas: &Path) -> Result<String, String> {
    let mut md = String::new();
    md.push_str("# Benchmarks\n\n");
    md.push_str("Written by `cargo xtask bench` on the machine it ran on; rerun it to refresh. ");
    md.push_str(
        "Timings are medians of repeated runs on a shared 2-core machine (expect ±10% noise).\n\n",
    );
    let entries = codegen_section(&mut md)?;
    macro_section(&mut md, root)?;
    ptxas_section(
        &mut md,
        &entries,
        ptxas,
        &root.join("target").join("bench-ptxas"),
    )?;
    counters::section(&mut md)?;
    counters::tensor_core_section(&mut md)?;
    families::section(&mut md, ptxas, &root.join("target").join("bench-ptxas"))?;
    realistic::section(&mut md, ptxas, &root.join("target").join("bench-ptxas"))?;
    triton::section(&mut md, root)?;
    peers_section(&mut md, root, ptxas)?;
    throughput_section(&mut md, root)?;
    md.push_str(
        "## GPU\n\nNo GPU benchmarks yet: no GPU was available to the sessions that wrote this \
         (NF4 GEMV bandwidth, expert/NF4 GEMM vs cuBLAS, attention TFLOP/s and conv vs im2col + \
         cuBLAS need `--features cuda` on a device).\n",
    );
    Ok(md)
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// (a) Build + validate + emit time per family configuration.
fn codegen_section(md: &mut String) -> Result<Vec<MatrixEntry>, String> {
    let jobs = jobs();
    let mut entries = Vec::with_capacity(jobs.len());
    let mut rows: Vec<(&'static str, String, Arch, f64, usize)> = Vec::new();
    for job in &jobs {
        let mut times = Vec::with_capacity(CODEGEN_RUNS);
        let mut last = None;
        for _ in 0..CODEGEN_RUNS {
            let t = Instant::now();
            let entry = job.run().map_err(|e| e.to_string())?;
            times.push(t.elapsed().as_secs_f64() * 1e6);
            last = Some(entry);
        }
        let entry = last.expect("ran at least once");
        rows.push((
            job.family,
            job.name.clone(),
            job.arch,
            median(times),
            entry.ptx.len(),
        ));
        entries.push(entry);
    }
    md.push_str("## Code generation\n\n");
    md.push_str("Median time to build (typed builder), validate and emit one module, per family and target ");
    let _ = writeln!(
        md,
        "({CODEGEN_RUNS} runs each). Command: `cargo xtask bench`.\n"
    );
    md.push_str(
        "| family | modules | median µs | max µs | mean PTX bytes |\n|---|---|---|---|---|\n",
    );
    let mut families: Vec<&str> = rows.iter().map(|r| r.0).collect();
    families.dedup();
    for fam in families {
        let of: Vec<_> = rows.iter().filter(|r| r.0 == fam).collect();
        let times: Vec<f64> = of.iter().map(|r| r.3).collect();
        let max = times.iter().copied().fold(0.0, f64::max);
        let bytes = of.iter().map(|r| r.4).sum::<usize>() / of.len();
        let _ = writeln!(
            md,
            "| {fam} | {} | {:.0} | {:.0} | {bytes} |",
            of.len(),
            median(times),
            max
        );
    }
    md.push_str("\nPer module on sm_80:\n\n| family | module | µs |\n|---|---|---|\n");
    for (fam, name, arch, us, _) in &rows {
        if *arch == Arch::Sm80 {
            let _ = writeln!(md, "| {fam} | {name} | {us:.0} |");
        }
    }
    md.push('\n');
    Ok(entries)
}

/// (a, macros) Expansion time per invocation (the macros crate's ignored timing test, release)
/// and the build-time overhead of the macros on an example crate.
fn macro_section(md: &mut String, root: &Path) -> Result<(), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(&cargo)
        .current_dir(root)
        .args([
            "test",
            "--quiet",
            "--release",
            "-p",
            "ptxforge-macros",
            "--",
            "--ignored",
            "expansion_time",
            "--nocapture",
        ])
        .output()
        .map_err(|e| format!("could not run the expansion timing: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "expansion timing failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    md.push_str(
        "## Macro expansion

",
    );
    md.push_str(
        "Median time of one attribute expansion (parse, check, build and validate every entry, \
         emit PTX, generate tokens), with the macro crate and the runtime built as cargo builds \
         a proc macro's dependencies by default (no `-C opt-level`: cargo's default \
         `build-override`, what a downstream crate's build gets unless it sets one; this \
         workspace's own dev builds use opt-level 3). Goal: ≤ 50 ms per invocation. Command: \
         `cargo test -p ptxforge-macros --release -- --ignored expansion_time --nocapture`.\n\n\
         | family | median ms per expansion | goal |\n|---|---|---|\n",
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    for line in text.lines().filter_map(|l| l.strip_prefix("expansion_ms ")) {
        let mut parts = line.split_whitespace();
        let (Some(family), Some(ms)) = (parts.next(), parts.next()) else {
            continue;
        };
        let verdict = match ms.parse::<f64>() {
            Ok(v) if v <= 50.0 => "meets",
            Ok(_) => "MISSES",
            Err(_) => "?",
        };
        let _ = writeln!(md, "| {family} | {ms} | {verdict} |");
    }
    // Build-time overhead: rebuild an example that uses a macro and one that does not, each
    // after touching its source, so only that example crate is recompiled.
    let rebuild = |example: &str| -> Result<f64, String> {
        let path = root.join("examples").join(format!("{example}.rs"));
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut times = Vec::new();
        for _ in 0..3 {
            std::fs::write(&path, &text).map_err(|e| format!("{}: {e}", path.display()))?;
            let t = Instant::now();
            let status = Command::new(&cargo)
                .current_dir(root)
                .args(["build", "--quiet", "--example", example])
                .status()
                .map_err(|e| format!("could not build {example}: {e}"))?;
            if !status.success() {
                return Err(format!("building {example} failed"));
            }
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
        Ok(median(times))
    };
    let with_macro = rebuild("moe_layer")?;
    let without = rebuild("builder_kernels")?;
    let _ = writeln!(
        md,
        "\nBuild-time overhead on an example crate (debug build, only the example recompiled, median \
         of 3): `moe_layer` (one `#[moe_kernel]`, 130 KB of PTX) {with_macro:.0} ms, \
         `builder_kernels` (no macro) {without:.0} ms, difference {:.0} ms. Command: `cargo xtask bench`.\n",
        with_macro - without
    );
    Ok(())
}

/// (b) `ptxas -v` per kernel and target.
fn ptxas_section(
    md: &mut String,
    entries: &[MatrixEntry],
    ptxas: &Path,
    scratch: &Path,
) -> Result<(), String> {
    let mut rows: Vec<(String, Arch, EntryReport)> = Vec::new();
    for e in entries {
        let report = assemble(ptxas, &e.ptx, e.arch, scratch)
            .map_err(|err| format!("{}: {err}", e.path()))?;
        if !report.warnings.is_empty() {
            return Err(format!(
                "{}: ptxas warnings: {:?}",
                e.path(),
                report.warnings
            ));
        }
        for r in report.entries {
            rows.push((format!("{}/{}", e.family, e.name), e.arch, r));
        }
    }
    let spills: u32 = rows
        .iter()
        .map(|r| r.2.spill_stores + r.2.spill_loads)
        .sum();
    md.push_str("## ptxas resources\n\n");
    let _ = writeln!(
        md,
        "`ptxas -arch=<target> -v` (CUDA 12.9) on every module of the emit matrix: {} kernel × target pairs, \
         {spills} bytes of spills in total. Command: `cargo xtask bench` (the same modules as `cargo xtask emit`).\n",
        rows.len()
    );
    md.push_str("| module | entry | registers (sm_70 / sm_80 / sm_90) | max shared B | stack B | spills B |\n");
    md.push_str("|---|---|---|---|---|---|\n");
    let mut keys: Vec<(String, String)> = rows
        .iter()
        .map(|r| (r.0.clone(), r.2.entry.clone()))
        .collect();
    keys.sort();
    keys.dedup();
    for (module, entry) in keys {
        let of: Vec<_> = rows
            .iter()
            .filter(|r| r.0 == module && r.2.entry == entry)
            .collect();
        let regs = |arch: Arch| {
            of.iter()
                .find(|r| r.1 == arch)
                .map_or("–".to_string(), |r| r.2.registers.to_string())
        };
        let smem = of.iter().map(|r| r.2.shared_bytes).max().unwrap_or(0);
        let stack = of.iter().map(|r| r.2.stack_bytes).max().unwrap_or(0);
        let spill = of
            .iter()
            .map(|r| r.2.spill_stores + r.2.spill_loads)
            .max()
            .unwrap_or(0);
        let _ = writeln!(
            md,
            "| {module} | {entry} | {} / {} / {} | {smem} | {stack} | {spill} |",
            regs(Arch::Sm70),
            regs(Arch::Sm80),
            regs(Arch::Sm90)
        );
    }
    md.push('\n');
    Ok(())
}

/// (2) The peer crates' kernels in our interpreter, on the same shapes as ours. The `peers/`
/// crate is its own workspace so that `cargo xtask test` never builds the peers.
fn peers_section(md: &mut String, root: &Path, ptxas: &Path) -> Result<(), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(root)
        .env("PTXAS", ptxas)
        .args([
            "run",
            "--quiet",
            "--release",
            "--manifest-path",
            "peers/Cargo.toml",
        ])
        .output()
        .map_err(|e| format!("could not run the peers comparison: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "peers comparison failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    md.push_str(
        "## Side by side with the peers

",
    );
    md.push_str(
        "Public PTX generators run in our interpreter on the same shapes as the counters above. \
         Command: `cargo run --manifest-path peers/Cargo.toml --release` (run by `cargo xtask bench`).\n\n",
    );
    counters::same_shapes_section(md)?;
    md.push_str(String::from_utf8_lossy(&out.stdout).trim_end());
    md.push_str("\n\n");
    Ok(())
}

/// (d) Interpreter throughput: the sim crate's own benchmark, checks off and each check on.
fn throughput_section(md: &mut String, root: &Path) -> Result<(), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(root)
        .args([
            "run",
            "--quiet",
            "--release",
            "-p",
            "ptxforge-sim",
            "--example",
            "throughput",
        ])
        .output()
        .map_err(|e| format!("could not run the throughput example: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "throughput example failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    md.push_str("## Interpreter throughput\n\n");
    md.push_str(
        "Thread-instructions per second on one core, all checks off and each check on alone. ",
    );
    md.push_str("Goal: ≥ 50 M/s with checks off on the FMA loop. ");
    md.push_str(
        "Command: `cargo run -p ptxforge-sim --release --example throughput`.\n\n```text\n",
    );
    md.push_str(String::from_utf8_lossy(&out.stdout).trim_end());
    md.push_str("\n```\n\n");
    Ok(())
}
