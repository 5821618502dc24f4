//! Tensor-core and async-copy instructions beyond the golden corpus: their counters, the
//! asynccheck switch, and `Unsupported` errors naming the exact form of what is not implemented.

use std::path::Path;

use ptxforge_sim::cli::{self, RunOutcome};
use ptxforge_sim::{FindingKind, Module, SimError};

fn run(file: &str, extra: &[&str]) -> RunOutcome {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/ptx")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    let case = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("// case:"))
        .unwrap();
    let mut args = vec![path.display().to_string()];
    args.extend(case.split_whitespace().map(str::to_string));
    args.extend(extra.iter().map(|s| s.to_string()));
    let spec = cli::parse_run(&args).unwrap();
    cli::run_source(&text, &spec).unwrap()
}

#[test]
fn mma_counts_one_warp_instruction_and_its_flops() {
    let c = run("mma_m16n8k16_f32_f16.ptx", &[]).report.counters;
    assert_eq!(c.mma_instructions, 1);
    assert_eq!(c.mma_flops, 2 * 16 * 8 * 16);
    assert_eq!(c.instructions.tensor_core, 32);
    let c = run("mma_m16n8k8_f32_tf32.ptx", &[]).report.counters;
    assert_eq!(c.mma_flops, 2 * 16 * 8 * 8);
}

#[test]
fn ldmatrix_counts_one_wavefront_per_conflict_free_matrix() {
    // Rows (5l mod 32) of a 16-byte-stride tile: the 8 rows of each matrix start in distinct
    // 4-bank groups, so each matrix is one wavefront.
    let c = run("ldmatrix_x1.ptx", &[]).report.counters;
    assert_eq!((c.ldmatrix_requests, c.ldmatrix_wavefronts), (1, 1));
    assert_eq!(c.ldmatrix_matrices, 1);
    assert_eq!(c.ldmatrix_wavefronts_per_matrix(), 1.0);
    // Stride 48 bytes (x4): rows r and r + 8 of the tile map to the same banks (8 · 48 = 384 =
    // 3 · 128), and each matrix's 8 rows (5l mod 32 for l in 8i..8i+8) hit each bank at most
    // twice, so wavefronts lie between 1 and 2 per matrix.
    let c = run("ldmatrix_x4.ptx", &[]).report.counters;
    assert_eq!(c.ldmatrix_requests, 1);
    assert!((4..=8).contains(&c.ldmatrix_wavefronts), "{c:?}");
    assert_eq!(c.ldmatrix_matrices, 4);
    let per_matrix = c.ldmatrix_wavefronts_per_matrix();
    assert!((1.0..=2.0).contains(&per_matrix), "{c:?}");
}

#[test]
fn cp_async_counts_requests_sectors_and_bytes() {
    let c = run("cp_async_pipeline.ptx", &[]).report.counters;
    // Five cp.async instructions, one warp.
    assert_eq!(c.cp_async_requests, 5);
    assert_eq!(c.cp_async_bytes, 32 * (16 + 8 + 4 + 4 + 16));
    // Stage 2 reads 16 bytes on the 12 even and 8 on the 12 odd threads below 24.
    assert_eq!(
        c.cp_async_global_bytes,
        32 * (16 + 8 + 4 + 4) + 12 * (16 + 8)
    );
    // Stage 0: 512 contiguous bytes = 16 sectors; stage 1: three requests over the same 512
    // bytes, 16 sectors each; stage 2: threads 0..23 read (16 or 8 bytes) from 384 bytes = 12.
    assert_eq!(c.cp_async_sectors, 16 + 3 * 16 + 12);
    assert_eq!(c.instructions.async_copy, 32 * (5 + 3 + 3));
    // Shared writes, each lane's slot 16 bytes after its neighbour's: the 16-byte copies take
    // 4 quarter-warp phases of 128 contiguous bytes each (1 wavefront per phase, the fewest);
    // the 8-byte copy 2 half-warp phases whose lanes l and l + 8 share a bank (2 each, fewest
    // 1); each 4-byte copy one phase with 4 lanes per bank (4, fewest 1).
    assert_eq!(c.cp_async_shared_wavefronts, 4 + 4 + 4 + 4 + 4);
    assert_eq!(c.cp_async_shared_min_wavefronts, 4 + 2 + 1 + 1 + 4);
    assert_eq!(c.cp_async_bank_conflict_factor(), 20.0 / 12.0);
}

#[test]
fn asynccheck_can_be_switched_off() {
    let on = run("buggy/async_read_before_wait.ptx", &[]);
    assert!(on
        .report
        .findings
        .iter()
        .any(|f| f.kind == FindingKind::AsyncCopyHazard));
    let off = run(
        "buggy/async_read_before_wait.ptx",
        &["--no-check", "asynccheck"],
    );
    assert!(off.report.findings.is_empty(), "{:?}", off.report.findings);
    let off = run(
        "buggy/async_never_waited.ptx",
        &["--no-check", "asynccheck"],
    );
    assert!(off.report.findings.is_empty(), "{:?}", off.report.findings);
}

#[test]
fn findings_locate_the_hazard_and_the_pending_copy() {
    let out = run("buggy/async_source_overwrite.ptx", &[]);
    let f = &out.report.findings[0];
    assert_eq!(f.kind, FindingKind::AsyncCopyHazard);
    assert_eq!(f.line, 24);
    assert_eq!(f.thread, [0, 0, 0]);
    assert_eq!(f.count, 32);
    let other = f.other.as_ref().unwrap();
    assert_eq!((other.line, other.thread), (23, [0, 0, 0]));
    assert!(f.address.is_some());
}

fn unsupported(body: &str) -> String {
    let text = format!(
        ".version 7.0\n.target sm_80\n.address_size 64\n.visible .entry k()\n{{\n\t.reg .b32 %r<20>;\n\t.reg .b64 %rd<4>;\n\t{body}\n\tret;\n}}\n"
    );
    match Module::parse(&text) {
        Err(SimError::Unsupported { opcode, detail, .. }) => format!("{opcode}: {detail}"),
        other => panic!("expected Unsupported for `{body}`, got {other:?}"),
    }
}

#[test]
fn forms_not_implemented_are_unsupported_and_named() {
    let e = unsupported("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%r0, %r1, %r2, %r3}, {%r4, %r5, %r6, %r7}, {%r8, %r9}, {%r10, %r11, %r12, %r13};");
    assert!(
        e.starts_with("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32"),
        "{e}"
    );
    let e = unsupported("ldmatrix.sync.aligned.m16n16.x1.trans.shared.b8 {%r0, %r1}, [%r2];");
    assert!(e.contains("m16n16"), "{e}");
    let e = unsupported("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r0], [%rd1], %r1, [%r2];");
    assert!(e.starts_with("cp.async.bulk"), "{e}");
}
