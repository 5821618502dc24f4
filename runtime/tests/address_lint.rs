//! The 32-bit address lint ([`ptxforge_runtime::lint::address`]) over the emit matrix, and the
//! bounds each family declares for it. [`matrix`] refuses any module the lint flags, so the
//! ptxas matrix and `cargo xtask emit` cannot see one; every family's kernels declare the index
//! bound their configs and launch checks prove (`INDEX_BOUND` of each family and of the samples).

use std::collections::BTreeSet;

use ptxforge_runtime::builder::{KernelBuilder, ModuleBuilder, F32, U32};
use ptxforge_runtime::launch::{Dim3, LaunchConfig};
use ptxforge_runtime::matrix::{matrix, MatrixFailure, MatrixJob};
use ptxforge_runtime::samples::{self, check_launch, SampleLaunchError};
use ptxforge_runtime::templates::attention::{
    self, AttentionLayouts, AttentionShape, AttentionShapeError, LayoutError,
};
use ptxforge_runtime::templates::conv::{self, Conv2dConfig, ConvDims};
use ptxforge_runtime::templates::moe::{self, MoeConfig};
use ptxforge_runtime::templates::nf4::{self, Nf4Config};
use ptxforge_runtime::Arch;

#[test]
fn every_matrix_module_passes_the_address_lint() {
    let entries = matrix().unwrap_or_else(|e| panic!("{e}"));
    let families: BTreeSet<&str> = entries.iter().map(|e| e.family).collect();
    assert_eq!(
        families,
        BTreeSet::from(["attention", "conv2d", "moe", "nf4", "samples"])
    );
    assert!(entries.len() > 500, "only {} modules", entries.len());
}

/// `out[row · cols + col] = 0` with the index a 32-bit product and no declared bound.
fn undeclared_row_major_store(arch: Arch) -> KernelBuilder {
    let mut k = KernelBuilder::new("undeclared", arch);
    let out = k.param_ptr::<F32>("out");
    let cols = k.param::<U32>("cols");
    let (out, cols) = (k.global_ptr(out), k.load_param(cols));
    let (row, col) = (k.ctaid_x(), k.tid_x());
    let index = k.mad_lo(row, cols, col);
    let addr = k.elem_addr(out, index);
    k.st_global(addr, 0, 0.0f32);
    k
}

#[test]
fn the_matrix_refuses_an_undeclared_widened_product() {
    let job = MatrixJob {
        family: "samples",
        name: "undeclared".into(),
        arch: Arch::Sm80,
        build: Box::new(|| {
            let kernel = undeclared_row_major_store(Arch::Sm80);
            Ok(ModuleBuilder::new(Arch::Sm80).kernel(kernel).emit()?)
        }),
    };
    assert!(job.run().is_ok(), "the module itself builds");
    let err = job.run_checked().unwrap_err();
    match &err.source {
        MatrixFailure::AddressLint(findings) => {
            assert_eq!(findings.len(), 1, "{findings:?}");
            assert!(findings[0].instruction.starts_with("mul.wide.u32"), "{err}");
        }
        other => panic!("expected the address lint, got {other}"),
    }
}

/// Every family's declared bound is what its checks enforce: one element past it is rejected,
/// the bound itself accepted (or, where the shape's factors cannot reach it exactly, the largest
/// count below it).
#[test]
fn configs_prove_the_bound_they_declare() {
    for bound in [
        nf4::INDEX_BOUND,
        moe::INDEX_BOUND,
        attention::INDEX_BOUND,
        samples::INDEX_BOUND,
    ] {
        assert_eq!(bound.limit, u64::from(u32::MAX));
    }
    let nf4 = Nf4Config::new;
    // 2 · 2^31 = limit + 1 weight elements; 1 · (2^32 − 2) is within it.
    assert!(nf4(2, 1 << 31).validate().is_err());
    assert!(nf4(1, u32::MAX - 1).validate().is_ok());
    let moe = MoeConfig::new(2, 1, 1 << 16, 1 << 15); // 2 · 2^16 · 2^15 = limit + 1
    assert!(moe.validate().is_err());
    let fits = MoeConfig::new(1, 1, 65535, 65537); // 2^32 − 1
    assert!(fits.validate().is_ok(), "{:?}", fits.validate());
}

#[test]
fn attention_checks_prove_its_bound() {
    let limit = attention::INDEX_BOUND.limit;
    // Contiguous Q of 1 · 1 · Sq · 32 elements: Sq = 2^27 is limit + 1, Sq = 2^27 − 1 the
    // largest multiple of 32 below it.
    let shape = |seq_q| AttentionShape {
        batch: 1,
        heads_q: 1,
        heads_kv: 1,
        seq_q,
        seq_kv: 1,
    };
    assert_eq!(
        shape(1 << 27).validate(32),
        Err(AttentionShapeError::TooLarge {
            tensor: "q",
            elements: u128::from(limit) + 1
        })
    );
    assert_eq!(shape((1 << 27) - 1).validate(32), Ok(()));
    // A strided Q whose last element (offset + 31) is exactly the limit, then one past it.
    let s = shape(1);
    let layouts = |offset: u64| {
        let mut l = AttentionLayouts::contiguous(&s, 32);
        l.q = l.q.at(usize::try_from(offset).unwrap());
        l
    };
    let lens = [1 << 33, 32, 32, 32];
    assert_eq!(layouts(limit - 31).check(&s, 32, 1, lens), Ok(()));
    assert_eq!(
        layouts(limit - 30).check(&s, 32, 1, lens),
        Err(LayoutError::IndexRange {
            tensor: "q",
            max_index: u128::from(limit) + 1
        })
    );
}

#[test]
fn conv_checks_prove_its_bound() {
    let limit = conv::INDEX_BOUND.limit;
    assert_eq!(limit, i32::MAX as u64);
    let limit32 = u32::try_from(limit).unwrap();
    // Weight out · in · 1 · 1: exactly the limit, then one past it.
    let cfg = |out_channels| Conv2dConfig {
        layout: conv::Layout::Nhwc,
        ..Conv2dConfig::new(1, out_channels, 1)
    };
    assert_eq!(cfg(limit32).validate(), Ok(()));
    let err = cfg(limit32 + 1).validate().unwrap_err();
    assert_eq!(err.0[0].fields, ["kernel", "in_channels", "out_channels"]);
    // The input x [N, 1, 1, 1] at launch: N = limit passes, N = limit + 1 is refused.
    let one = Conv2dConfig::new(1, 1, 1);
    let dims = |batch| ConvDims {
        batch,
        in_h: 1,
        in_w: 1,
        out_h: 1,
        out_w: 1,
    };
    one.check_index_range(&dims(limit32), false)
        .unwrap_or_else(|e| panic!("{e}"));
    let err = one
        .check_index_range(&dims(limit32 + 1), false)
        .unwrap_err();
    assert!(err.to_string().contains("index limit"), "{err}");
}

#[test]
fn sample_launches_prove_their_bound() {
    let launch = |blocks: u32, threads: u32| LaunchConfig {
        grid: Dim3::x(blocks),
        block: Dim3::x(threads),
        dynamic_shared_bytes: 0,
    };
    // 2^31 · 2 threads: last index 2^32 − 1; 6700417 · 641 = 2^32 + 1 threads: one past it.
    assert_eq!(check_launch(&launch(1 << 31, 2), &[]), Ok(()));
    assert!(matches!(
        check_launch(&launch(6_700_417, 641), &[]),
        Err(SampleLaunchError::Threads { last, .. }) if last == samples::INDEX_BOUND.limit + 1
    ));
    let limit = samples::INDEX_BOUND.limit;
    assert_eq!(check_launch(&launch(1, 32), &[("x", limit)]), Ok(()));
    assert_eq!(
        check_launch(&launch(1, 32), &[("x", limit + 1)]),
        Err(SampleLaunchError::TooLarge {
            tensor: "x",
            elements: limit + 1
        })
    );
}
