//! Every tensor-core, ldmatrix, cp.async and packing form the builder can emit, in one kernel per
//! generation, assembled by ptxas for each target that has it (errors, warnings and spills
//! fail). The GEMM samples cover the forms they use numerically; this covers the rest of the
//! table's spellings against the real assembler. Skips loudly without ptxas unless
//! `PTXFORGE_REQUIRE_PTXAS=1`.

use ptxforge_runtime::arch::Arch;
use ptxforge_runtime::builder::{
    FragA, FragB, KernelBuilder, ModuleBuilder, BF16, F16, F32, M16N8K16, M16N8K8, TF32, U32,
};
use ptxforge_runtime::ir::CacheLevel;
use ptxforge_runtime::ptxas::{assemble, locate, required};
use ptxforge_runtime::samples::{sample_module, TENSOR_CORE_SAMPLES};

/// ldmatrix of every count with and without `.trans`, and the m16n8k8 f16 mma with both
/// accumulator types (sm_75 forms).
fn turing_forms(k: &mut KernelBuilder, out: ptxforge_runtime::builder::GlobalPtr<F32>) {
    let tile = k.shared_array::<F16>("tile", 1024);
    let at = k.shared_base(tile);
    let a: FragA<M16N8K8, F16> = k.ldmatrix(at, 0);
    let b: FragB<M16N8K8, F16> = k.ldmatrix_trans(at, 64);
    let a16: FragA<M16N8K16, F16> = k.ldmatrix(at, 128);
    let b16: FragB<M16N8K16, F16> = k.ldmatrix(at, 256);
    let (b_lo, _b_hi) = k.ldmatrix_b_pair_trans::<F16>(at, 512);
    let _ = (a16, b16, b_lo);
    let _: FragA<M16N8K8, F16> = k.ldmatrix_trans(at, 768);
    let _: FragB<M16N8K8, F16> = k.ldmatrix(at, 896);
    let c = k.frag_c_zero::<M16N8K8, F16, F32>();
    let d = k.mma(&a, &b, &c);
    let c16 = k.frag_c_zero::<M16N8K8, F16, F16>();
    let d16 = k.mma(&a, &b, &c16);
    let tid = k.tid_x();
    let addr = k.elem_addr(out, tid);
    for (i, r) in d.f32_regs().into_iter().enumerate() {
        k.st_global(addr, 4 * i as i32, r);
    }
    let (lo, hi) = k.unpack_halves::<F16>(d16.packed_regs()[0]);
    let packed = k.pack_halves::<F16>(hi, lo);
    let word = k.var::<U32>(0x0102_0304u32);
    let bits = k.prmt(word, 0u32, 0x3210u32);
    let _ = packed;
    let as_f32 = k.bitcast_f32(bits);
    k.st_global(addr, 16, as_f32);
}

/// The sm_80 forms: m16n8k16 f16 (f32 and f16 accumulators) and bf16, m16n8k8 tf32, every
/// cp.async variant and wait, the packed and tf32 conversions.
fn ampere_forms(k: &mut KernelBuilder, out: ptxforge_runtime::builder::GlobalPtr<F32>) {
    turing_forms(k, out);
    let tile = k.shared_array::<BF16>("tile_bf16", 1024);
    let at = k.shared_base(tile);
    let a: FragA<M16N8K16, BF16> = k.ldmatrix(at, 0);
    let b: FragB<M16N8K16, BF16> = k.ldmatrix_trans(at, 256);
    let c = k.frag_c_zero::<M16N8K16, BF16, F32>();
    let d = k.mma(&a, &b, &c);
    let f16_tile = k.shared_array::<F16>("tile_f16", 1024);
    let f16_at = k.shared_base(f16_tile);
    let a16: FragA<M16N8K16, F16> = k.ldmatrix(f16_at, 0);
    let b16: FragB<M16N8K16, F16> = k.ldmatrix_trans(f16_at, 256);
    let c16 = k.frag_c_zero::<M16N8K16, F16, F16>();
    let _ = k.mma(&a16, &b16, &c16);
    let regs = d.f32_regs();
    let t: Vec<_> = regs.iter().map(|r| k.to_tf32(*r)).collect();
    let a_tf32 = FragA::<M16N8K8, TF32>::from_regs(&t);
    let b_tf32 = FragB::<M16N8K8, TF32>::from_regs(&t[..2]);
    let c_tf32 = k.frag_c_zero::<M16N8K8, TF32, F32>();
    let d_tf32 = k.mma(&a_tf32, &b_tf32, &c_tf32);
    let _ = k.pack_f32_pair::<F16>(regs[0], regs[1]);
    let _ = k.pack_f32_pair::<BF16>(regs[2], regs[3]);
    let tid = k.tid_x();
    let src = k.elem_addr(out, tid);
    let dst = k.shared_base(tile);
    k.cp_async(CacheLevel::Ca, dst, src, 4);
    k.cp_async(CacheLevel::Ca, dst, src, 8);
    k.cp_async(CacheLevel::Ca, dst, src, 16);
    k.cp_async(CacheLevel::Cg, dst, src, 16);
    k.cp_async_zfill(CacheLevel::Ca, dst, src, 8, 4u32);
    k.cp_async_zfill(CacheLevel::Cg, dst, src, 16, tid);
    k.cp_async_commit();
    k.cp_async_wait_group(1);
    k.cp_async_wait_all();
    for (i, r) in d_tf32.f32_regs().into_iter().enumerate() {
        k.st_global(src, 32 + 4 * i as i32, r);
    }
}

const TURING_SPELLINGS: &[&str] = &[
    "ldmatrix.sync.aligned.m8n8.x1.shared.b16",
    "ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16",
    "ldmatrix.sync.aligned.m8n8.x2.shared.b16",
    "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16",
    "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
    "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16",
    "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32",
    "mma.sync.aligned.m16n8k8.row.col.f16.f16.f16.f16",
    "prmt.b32",
];

const AMPERE_SPELLINGS: &[&str] = &[
    "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
    "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16",
    "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32",
    "cvt.rna.tf32.f32",
    "cvt.rn.f16x2.f32",
    "cvt.rn.bf16x2.f32",
    "cp.async.ca.shared.global",
    "cp.async.cg.shared.global",
    "cp.async.commit_group;",
    "cp.async.wait_group 1;",
    "cp.async.wait_all;",
];

fn build(arch: Arch) -> String {
    let mut k = KernelBuilder::new("tc_forms", arch);
    let out = k.param_ptr::<F32>("out");
    let out = k.global_ptr(out);
    if arch.has_mma_m16n8k16() {
        ampere_forms(&mut k, out);
    } else {
        turing_forms(&mut k, out);
    }
    ModuleBuilder::new(arch)
        .kernel(k)
        .emit()
        .unwrap_or_else(|e| panic!("{arch}: {e}"))
}

/// ptxas, or `None` after a loud skip (a failure under `PTXFORGE_REQUIRE_PTXAS=1`).
fn ptxas_or_skip() -> Option<std::path::PathBuf> {
    let found = locate();
    if found.is_none() {
        assert!(
            !required(),
            "PTXFORGE_REQUIRE_PTXAS=1 but ptxas was not found"
        );
        eprintln!("SKIPPED: ptxas not found; set PTXAS");
    }
    found
}

#[test]
fn every_form_assembles_where_the_target_has_it() {
    let Some(ptxas) = ptxas_or_skip() else {
        return;
    };
    let scratch = std::env::temp_dir().join(format!("ptxforge-tc-{}", std::process::id()));
    let mut failures = Vec::new();
    for arch in Arch::ALL.into_iter().filter(|a| a.has_mma_m16n8k8()) {
        let ptx = build(arch);
        let mut spellings = TURING_SPELLINGS.to_vec();
        if arch.has_mma_m16n8k16() {
            spellings.extend(AMPERE_SPELLINGS);
        }
        for s in spellings {
            assert!(ptx.contains(s), "{arch}: `{s}` not emitted");
        }
        match assemble(&ptxas, &ptx, arch, &scratch) {
            Err(e) => failures.push(format!("{arch}: {e}")),
            Ok(report) => {
                assert_eq!(
                    report.entries.len(),
                    1,
                    "{arch}: ptxas -v reports the entry"
                );
                failures.extend(report.warnings.iter().map(|w| format!("{arch}: {w}")));
                for e in &report.entries {
                    if e.spill_stores + e.spill_loads > 0 {
                        failures.push(format!("{arch}: spills"));
                    }
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Every block-tiled tensor-core GEMM sample assembles on every target it supports with no
/// warning and no spill (the tf32 sample holds 64 accumulators and its fragments per lane);
/// prints each one's registers.
#[test]
fn gemm_samples_assemble_without_spills() {
    let Some(ptxas) = ptxas_or_skip() else {
        return;
    };
    let scratch = std::env::temp_dir().join(format!("ptxforge-tc-gemm-{}", std::process::id()));
    let mut failures = Vec::new();
    for t in TENSOR_CORE_SAMPLES
        .iter()
        .filter(|t| t.gemm_tiling.is_some())
    {
        for arch in Arch::ALL.into_iter().filter(|&a| (t.supports)(a)) {
            let name = t.sample.name;
            let ptx = sample_module(&t.sample, arch).unwrap_or_else(|e| panic!("{name}: {e}"));
            match assemble(&ptxas, &ptx, arch, &scratch) {
                Err(e) => failures.push(format!("{name} on {arch}: {e}")),
                Ok(report) => {
                    failures.extend(report.warnings.iter().map(|w| format!("{name}: {w}")));
                    for e in &report.entries {
                        println!(
                            "{name} on {arch}: {} registers, {} B shared, spills {}/{}",
                            e.registers, e.shared_bytes, e.spill_stores, e.spill_loads
                        );
                        if e.spill_stores + e.spill_loads + e.stack_bytes > 0 {
                            failures.push(format!("{name} on {arch}: spills or stack"));
                        }
                    }
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    assert!(failures.is_empty(), "{failures:#?}");
}
