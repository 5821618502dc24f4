//! Blocks on worker threads give the sequential results: the same memory (bytes and init state),
//! findings (deduplicated, counted and capped the same way) and counters, in linear and shuffled
//! block order. Kernels with global atomics keep the sequential order of their atomics.

use std::path::Path;

use ptxforge_sim::cli::{self, RunOutcome};
use ptxforge_sim::{Arg, Device, Module, Options};

fn ptx_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "ptx"))
        .collect();
    v.sort();
    v
}

/// Runs a corpus case (its `// case:` line) with `grid_x_factor` times its blocks along x and
/// the given schedule.
fn run_case(
    text: &str,
    path: &Path,
    grid_x_factor: u32,
    threads: usize,
    shuffle_blocks: Option<u64>,
    max_findings: usize,
) -> RunOutcome {
    let case = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("// case:"))
        .expect("corpus case line");
    let mut args = vec![path.display().to_string()];
    args.extend(case.split_whitespace().map(str::to_string));
    let mut spec = cli::parse_run(&args).expect("case parses");
    spec.grid[0] *= grid_x_factor;
    spec.options.fuel = spec.options.fuel.min(200_000);
    spec.options.threads = threads;
    spec.options.shuffle_blocks = shuffle_blocks;
    spec.options.max_findings = max_findings;
    cli::run_source(text, &spec).expect("case runs")
}

/// Everything a launch leaves behind, in a comparable form: the report, and every buffer's bytes
/// and init bits (the device's debug form holds both).
fn observable(out: &RunOutcome) -> String {
    format!("{:#?}\n{:?}", out.report, out.device)
}

#[test]
fn corpus_kernels_give_identical_results_on_one_and_four_threads() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ptx");
    let files: Vec<_> = ptx_files(&root)
        .into_iter()
        .chain(ptx_files(&root.join("buggy")))
        .collect();
    assert!(files.len() >= 50, "corpus has only {} kernels", files.len());
    let mut failures = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        // ×1: the case as written; ×5: several blocks doing the same work (overlapping stores).
        for factor in [1, 5] {
            for shuffle_blocks in [None, Some(11)] {
                for max_findings in [100, 1] {
                    let run =
                        |threads| run_case(&text, f, factor, threads, shuffle_blocks, max_findings);
                    let (one, four) = (run(1), run(4));
                    if observable(&one) != observable(&four) {
                        failures.push(format!(
                            "{} (grid x ×{factor}, shuffle {shuffle_blocks:?}, max_findings {max_findings}):\n  1 thread: {:?}\n  4 threads: {:?}",
                            f.display(),
                            one.report,
                            four.report
                        ));
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} runs differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Each thread takes a ticket from a global counter and stores it at its global index; blocks
/// also `red` into a per-block slot. Block order decides the tickets.
const TICKETS: &str = r#"
.version 7.0
.target sm_80
.address_size 64
.visible .entry tickets(.param .u64 pctr, .param .u64 pout, .param .u64 psum)
{
	.reg .b32 %r<8>;
	.reg .b64 %rd<8>;
	ld.param.u64 %rd1, [pctr];
	ld.param.u64 %rd2, [pout];
	ld.param.u64 %rd3, [psum];
	mov.u32 %r1, %tid.x;
	mov.u32 %r2, %ctaid.x;
	mov.u32 %r3, %ntid.x;
	mad.lo.s32 %r4, %r2, %r3, %r1;
	atom.add.u32 %r5, [%rd1], 1;
	mul.wide.u32 %rd4, %r4, 4;
	add.s64 %rd5, %rd2, %rd4;
	st.global.u32 [%rd5], %r5;
	mul.wide.u32 %rd6, %r2, 4;
	add.s64 %rd7, %rd3, %rd6;
	red.global.add.u32 [%rd7], %r5;
	ret;
}
"#;

fn tickets(threads: usize, shuffle_blocks: Option<u64>) -> (Vec<u32>, Vec<u32>, Vec<u32>) {
    let m = Module::parse(TICKETS).unwrap();
    let mut d = Device::new();
    let ctr = d.upload(&[0u32]);
    let out = d.alloc(16 * 32 * 4);
    let sum = d.upload(&[0u32; 16]);
    let r = d
        .launch(
            &m,
            "tickets",
            [16, 1, 1],
            [32, 1, 1],
            0,
            &[Arg::Buffer(ctr), Arg::Buffer(out), Arg::Buffer(sum)],
            &Options {
                threads,
                shuffle_blocks,
                ..Options::default()
            },
        )
        .unwrap();
    assert!(r.is_clean(), "{:?}", r.findings);
    (
        d.download(ctr).unwrap(),
        d.download(out).unwrap(),
        d.download(sum).unwrap(),
    )
}

#[test]
fn kernels_with_global_atomics_keep_the_sequential_result() {
    for shuffle in [None, Some(3)] {
        let (ctr, out, sum) = tickets(4, shuffle);
        assert_eq!(ctr, vec![512]);
        assert_eq!((ctr, out.clone(), sum), tickets(1, shuffle));
        let mut sorted = out;
        sorted.sort_unstable();
        assert_eq!(sorted, (0..512).collect::<Vec<_>>(), "every ticket once");
    }
    // Linear order hands out tickets in block order.
    let (_, out, _) = tickets(4, None);
    assert_eq!(out, (0..512).collect::<Vec<_>>());
}

/// Every block stores its block index to `out[tid]` and reads `out[tid]` first into
/// `seen[block * ntid + tid]`; the block's shared-memory atomic (not a global one) does not stop
/// it from running in parallel.
const LAST_WRITER: &str = r#"
.version 7.0
.target sm_80
.address_size 64
.visible .entry last_writer(.param .u64 pout, .param .u64 pseen)
{
	.reg .b32 %r<10>;
	.reg .b64 %rd<8>;
	.shared .align 4 .u32 hits;
	ld.param.u64 %rd1, [pout];
	ld.param.u64 %rd2, [pseen];
	mov.u32 %r1, %tid.x;
	mov.u32 %r2, %ctaid.x;
	mov.u32 %r3, %ntid.x;
	atom.shared.add.u32 %r9, [hits], 1;
	mul.wide.u32 %rd3, %r1, 4;
	add.s64 %rd4, %rd1, %rd3;
	ld.global.u32 %r4, [%rd4];
	st.global.u32 [%rd4], %r2;
	mad.lo.s32 %r5, %r2, %r3, %r1;
	mul.wide.u32 %rd5, %r5, 4;
	add.s64 %rd6, %rd2, %rd5;
	st.global.u32 [%rd6], %r4;
	ret;
}
"#;

fn last_writer(threads: usize, shuffle_blocks: Option<u64>) -> (Vec<u32>, Vec<u32>) {
    let m = Module::parse(LAST_WRITER).unwrap();
    let mut d = Device::new();
    let out = d.upload(&[u32::MAX; 8]);
    let seen = d.alloc(12 * 8 * 4);
    let r = d
        .launch(
            &m,
            "last_writer",
            [12, 1, 1],
            [8, 1, 1],
            0,
            &[Arg::Buffer(out), Arg::Buffer(seen)],
            &Options {
                threads,
                shuffle_blocks,
                ..Options::default()
            },
        )
        .unwrap();
    assert!(r.is_clean(), "{:?}", r.findings);
    (d.download(out).unwrap(), d.download(seen).unwrap())
}

#[test]
fn overlapping_stores_land_in_block_order_and_reads_see_the_launch_start() {
    for shuffle in [None, Some(5), Some(6)] {
        let (out1, seen1) = last_writer(1, shuffle);
        let (out4, seen4) = last_writer(4, shuffle);
        // The last block of the order wins either way.
        assert_eq!(out1, out4, "shuffle {shuffle:?}");
        assert!(out4.iter().all(|&b| b == out4[0] && b < 12));
        // Blocks reading what other blocks store race (in CUDA too): in parallel every block
        // reads the launch-start value, one at a time all but the first read a block index.
        assert_eq!(seen4, vec![u32::MAX; 96], "shuffle {shuffle:?}");
        assert_eq!(seen1.iter().filter(|&&v| v == u32::MAX).count(), 8);
    }
}

#[test]
fn zero_threads_counts_as_one_and_the_default_uses_every_core() {
    let (out0, seen0) = last_writer(0, None);
    let (out1, seen1) = last_writer(1, None);
    assert_eq!((out0, seen0), (out1, seen1));
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(Options::default().threads, cores);
}

#[test]
fn cli_threads_flag_is_kept_by_no_check_all() {
    let args: Vec<String> = "k.ptx --entry k --grid 2 --block 1 --threads 3 --no-check all"
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let spec = cli::parse_run(&args).unwrap();
    assert_eq!(spec.options.threads, 3);
    assert!(!spec.options.memcheck);
    assert!(cli::parse_run(&[args[0].clone(), "--threads".into(), "x".into()]).is_err());
}
