//! Builder misuse the types cannot catch is a validation error naming kernel, instruction and
//! reason: never a panic, never emitted.

use ptxforge_runtime::builder::{KernelBuilder, ModuleBuilder, BF16, F32, F64, U32};
use ptxforge_runtime::ir::{Inst, Op, Operand, Precision, Rounding, Stmt, Type};
use ptxforge_runtime::validate::{validate, ValidationError};
use ptxforge_runtime::Arch;

fn errors(k: KernelBuilder, arch: Arch) -> Vec<ValidationError> {
    ModuleBuilder::new(arch)
        .kernel(k)
        .build()
        .expect_err("the kernel must be rejected")
        .0
}

fn assert_reason(errs: &[ValidationError], needle: &str) {
    assert!(
        errs.iter()
            .any(|e| e.to_string().contains(needle) && e.kernel == "bad"),
        "no error mentioning {needle:?} in {errs:#?}"
    );
}

#[test]
fn label_never_placed() {
    let mut k = KernelBuilder::new("bad", Arch::Sm80);
    let l = k.label("nowhere");
    k.bra(l);
    let errs = errors(k, Arch::Sm80);
    assert_reason(&errs, "label `nowhere` is never placed");
    assert_eq!(errs[0].stmt, Some(0));
}

#[test]
fn register_read_before_any_write() {
    let mut k = KernelBuilder::new("bad", Arch::Sm80);
    let r = k.reg::<U32>();
    let _ = k.add(r, 1u32);
    let errs = errors(k, Arch::Sm80);
    assert_reason(&errs, "is read before any write reaches it");
    assert_eq!(errs[0].mnemonic.as_deref(), Some("add.u32"));
}

#[test]
fn write_on_one_path_is_enough() {
    // Written only inside an if: a read after it is reached by a write on some path.
    let mut k = KernelBuilder::new("ok", Arch::Sm80);
    let v = k.reg::<U32>();
    let tid = k.tid_x();
    let p = k.setp_lt(tid, 4u32);
    k.if_then(p, |k| k.assign(v, 7u32));
    let _ = k.add(v, 1u32);
    ModuleBuilder::new(Arch::Sm80)
        .kernel(k)
        .build()
        .expect("valid");
}

#[test]
fn loop_carried_write_reaches_the_head() {
    let mut k = KernelBuilder::new("ok", Arch::Sm80);
    let acc = k.var::<F32>(0.0f32);
    k.for_range(0u32, 8u32, 1u32, |k, _| {
        k.add_into(acc, acc, 1.0f32);
    });
    ModuleBuilder::new(Arch::Sm80)
        .kernel(k)
        .build()
        .expect("valid");
}

#[test]
fn bf16_arithmetic_needs_sm90_and_cvt_from_bf16_too() {
    let mut k = KernelBuilder::new("bad", Arch::Sm80);
    let x = k.half_const::<BF16>(1.0);
    let _ = k.add(x, x);
    let _ = k.cvt::<F32, BF16>(x, None);
    let errs = errors(k, Arch::Sm80);
    assert_reason(&errs, "add.bf16");
    assert_reason(&errs, "needs sm_90 or newer; the target is sm_80");
    assert!(
        errs.iter().filter(|e| e.reason.contains("sm_90")).count() >= 2,
        "{errs:#?}"
    );
}

#[test]
fn bf16_conversion_needs_sm80() {
    let mut k = KernelBuilder::new("bad", Arch::Sm75);
    let x = k.var::<F32>(1.5f32);
    let _ = k.cvt::<BF16, F32>(
        x,
        Some(ptxforge_runtime::ir::CvtRounding::Float(Rounding::Rn)),
    );
    assert_reason(
        &errors(k, Arch::Sm75),
        "needs sm_80 or newer; the target is sm_75",
    );
}

#[test]
fn static_shared_memory_over_48k() {
    let mut k = KernelBuilder::new("bad", Arch::Sm90);
    let _ = k.shared_array::<F32>("big", 16 * 1024);
    assert_reason(&errors(k, Arch::Sm90), "exceeds the 49152 B static limit");
}

#[test]
fn dynamic_shared_memory_over_the_arch_maximum() {
    let mut k = KernelBuilder::new("bad", Arch::Sm86);
    let arr = k.dynamic_shared::<F32>(200 * 1024);
    let _ = k.shared_base(arr);
    assert_reason(
        &errors(k, Arch::Sm86),
        "exceeds sm_86's maximum of 101376 B",
    );
    // The same kernel fits an sm_90.
    let mut k = KernelBuilder::new("big", Arch::Sm90);
    let arr = k.dynamic_shared::<F32>(200 * 1024);
    let _ = k.shared_base(arr);
    ModuleBuilder::new(Arch::Sm90)
        .kernel(k)
        .build()
        .expect("fits sm_90");
}

#[test]
fn f64_division_and_math_need_rounding() {
    let mut k = KernelBuilder::new("bad", Arch::Sm80);
    let x = k.var::<F64>(2.0f64);
    let _ = k.div(x, x, Precision::Approx);
    let _ = k.math(ptxforge_runtime::ir::MathFn::Ex2, x, Precision::Approx);
    let errs = errors(k, Arch::Sm80);
    assert_reason(&errs, "div.approx does not exist for .f64");
    assert_reason(&errs, "there is no f64 ex2");
}

#[test]
fn raw_ir_errors_are_data_not_panics() {
    let mut k = KernelBuilder::new("bad", Arch::Sm80);
    let f = k.var::<F32>(1.0f32);
    let mut module = ModuleBuilder::new(Arch::Sm80).kernel(k).module();
    let body = &mut module.kernels[0].body;
    // fma without its operands, an f32 register used as f64, a register id out of range.
    body.insert(
        1,
        Stmt::Inst(Inst {
            guard: None,
            op: Op::Fma {
                ty: Type::F32,
                rnd: Rounding::Rn,
                ftz: false,
            },
            args: vec![],
        }),
    );
    body.insert(
        2,
        Stmt::Inst(Inst {
            guard: None,
            op: Op::Un {
                op: ptxforge_runtime::ir::UnOp::Neg,
                ty: Type::F64,
                ftz: false,
            },
            args: vec![Operand::Reg(f.id()), Operand::Reg(f.id())],
        }),
    );
    body.insert(
        3,
        Stmt::Inst(Inst {
            guard: None,
            op: Op::Mov(Type::U32),
            args: vec![
                Operand::Reg(ptxforge_runtime::ir::RegId(999)),
                Operand::Reg(f.id()),
            ],
        }),
    );
    let errs = validate(module).expect_err("rejected").0;
    let find = |s: usize| {
        errs.iter()
            .find(|e| e.stmt == Some(s))
            .unwrap_or_else(|| panic!("no error at {s}: {errs:#?}"))
    };
    assert!(find(1).reason.contains("takes 4 operands, got 0"));
    assert!(find(2).reason.contains("cannot carry .f64"));
    assert!(find(3).reason.contains("register id 999 does not exist"));
}

#[test]
fn predicated_barrier_is_rejected() {
    let mut k = KernelBuilder::new("bad", Arch::Sm80);
    let tid = k.tid_x();
    let p = k.setp_lt(tid, 4u32);
    k.bar_sync();
    let mut module = ModuleBuilder::new(Arch::Sm80).kernel(k).module();
    for stmt in &mut module.kernels[0].body {
        if let Stmt::Inst(inst) = stmt {
            if inst.op == Op::BarSync {
                inst.guard = Some(ptxforge_runtime::ir::Guard {
                    pred: p.id(),
                    negated: false,
                });
            }
        }
    }
    let errs = validate(module).expect_err("rejected").0;
    assert!(
        errs.iter().any(|e| e.reason.contains("predicated barrier")),
        "{errs:#?}"
    );
}

#[test]
fn comments_must_be_single_line_ascii() {
    let mut k = KernelBuilder::new("bad", Arch::Sm80);
    k.comment("tile × tile");
    k.comment("two\nlines");
    let errs = errors(k, Arch::Sm80);
    assert_reason(&errs, "is not single-line ASCII");
    assert_eq!(errs.len(), 2, "{errs:#?}");
}

// ---- tensor cores and async copies -------------------------------------------------------

mod tensor_core {
    use super::{assert_reason, errors};
    use ptxforge_runtime::arch::PtxVersion;
    use ptxforge_runtime::builder::{
        F16x2, FragA, FragB, FragC, KernelBuilder, ModuleBuilder, F16, F32, M16N8K16, M16N8K8,
        TF32, U32,
    };
    use ptxforge_runtime::ir::{
        CacheLevel, CvtRounding, Guard, Mma, MmaShape, Op, Rounding, Stmt, Type,
    };
    use ptxforge_runtime::validate::validate;
    use ptxforge_runtime::Arch;

    /// A shared tile address and one m16n8k16 f16 mma on fragments loaded from it.
    fn one_mma(k: &mut KernelBuilder) {
        let tile = k.shared_array::<F16>("tile", 512);
        let addr = k.shared_base(tile);
        let a: FragA<M16N8K16, F16> = k.ldmatrix(addr, 0);
        let b: FragB<M16N8K16, F16> = k.ldmatrix_trans(addr, 0);
        let c = k.frag_c_zero::<M16N8K16, F16, F32>();
        let _ = k.mma(&a, &b, &c);
    }

    /// The statement indices holding an instruction matching `pred`.
    fn stmts(k: &ptxforge_runtime::ir::Kernel, pred: impl Fn(&Op) -> bool) -> Vec<usize> {
        k.body
            .iter()
            .enumerate()
            .filter_map(|(i, s)| match s {
                Stmt::Inst(inst) if pred(&inst.op) => Some(i),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn mma_m16n8k16_and_cp_async_need_sm80_ldmatrix_sm75() {
        let mut k = KernelBuilder::new("bad", Arch::Sm75);
        one_mma(&mut k);
        let errs = errors(k, Arch::Sm75);
        let e = errs
            .iter()
            .find(|e| {
                e.mnemonic.as_deref() == Some("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32")
            })
            .expect("mma rejected");
        assert!(
            e.reason
                .contains("needs sm_80 or newer; the target is sm_75"),
            "{e}"
        );
        assert!(!errs.iter().any(|e| e
            .mnemonic
            .as_deref()
            .is_some_and(|m| m.starts_with("ldmatrix"))));

        let mut k = KernelBuilder::new("bad", Arch::Sm70);
        let tile = k.shared_array::<F16>("tile", 512);
        let addr = k.shared_base(tile);
        let _: FragA<M16N8K8, F16> = k.ldmatrix(addr, 0);
        let errs = errors(k, Arch::Sm70);
        assert_reason(&errs, "(`ldmatrix.sync.aligned.m8n8.x2.shared.b16`): needs sm_75 or newer; the target is sm_70");

        let mut k = KernelBuilder::new("bad", Arch::Sm75);
        let tile = k.shared_array::<F16>("tile", 512);
        let dst = k.shared_base(tile);
        let src = k.var::<ptxforge_runtime::builder::U64>(0u64);
        k.cp_async(CacheLevel::Ca, dst, src, 4);
        k.cp_async_commit();
        k.cp_async_wait_all();
        let errs = errors(k, Arch::Sm75);
        assert_reason(&errs, "(`cp.async.ca.shared.global`): needs sm_80 or newer");
        assert_reason(&errs, "(`cp.async.commit_group`): needs sm_80 or newer");
        assert_reason(&errs, "(`cp.async.wait_all`): needs sm_80 or newer");
    }

    #[test]
    fn forms_are_gated_on_the_ptx_version() {
        let mut k = KernelBuilder::new("bad", Arch::Sm75);
        let tile = k.shared_array::<F16>("tile", 512);
        let addr = k.shared_base(tile);
        let a: FragA<M16N8K8, F16> = k.ldmatrix(addr, 0);
        let b: FragB<M16N8K8, F16> = k.ldmatrix_trans(addr, 0);
        let c = k.frag_c_zero::<M16N8K8, F16, F32>();
        let _ = k.mma(&a, &b, &c);
        let mut module = ModuleBuilder::new(Arch::Sm75).kernel(k).module();
        assert_eq!(
            module.version,
            PtxVersion::new(6, 5),
            "the builder raises .version"
        );
        module.version = PtxVersion::new(6, 3);
        let errs = validate(module).expect_err("rejected").0;
        for m in [
            "ldmatrix.sync.aligned.m8n8.x2.shared.b16",
            "ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16",
            "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32",
        ] {
            assert!(
                errs.iter().any(|e| e.kernel == "bad"
                    && e.mnemonic.as_deref() == Some(m)
                    && e.reason == "needs PTX ISA 6.5; the module is 6.3"),
                "{m}: {errs:#?}"
            );
        }
    }

    #[test]
    fn cp_async_sizes() {
        for (cache, size, src, needle) in [
            (
                CacheLevel::Ca,
                12,
                None,
                "cp-size 12 is not one of 4, 8, 16",
            ),
            (
                CacheLevel::Cg,
                8,
                None,
                "cp.async.cg copies 16 bytes only; cp-size is 8",
            ),
            (
                CacheLevel::Ca,
                8,
                Some(9u32),
                "src-size 9 is outside 0..=8 (the cp-size)",
            ),
        ] {
            let mut k = KernelBuilder::new("bad", Arch::Sm80);
            let tile = k.shared_array::<F16>("tile", 512);
            let dst = k.shared_base(tile);
            let src_addr = k.var::<ptxforge_runtime::builder::U64>(0u64);
            match src {
                None => k.cp_async(cache, dst, src_addr, size),
                Some(s) => k.cp_async_zfill(cache, dst, src_addr, size, s),
            }
            let errs = errors(k, Arch::Sm80);
            assert_reason(&errs, needle);
            assert!(errs[0]
                .mnemonic
                .as_deref()
                .unwrap()
                .starts_with("cp.async."));
        }
    }

    #[test]
    fn mma_in_a_per_lane_if_is_rejected() {
        let mut k = KernelBuilder::new("bad", Arch::Sm80);
        let tid = k.tid_x();
        let p = k.setp_lt(tid, 16u32);
        k.if_then(p, one_mma);
        let errs = errors(k, Arch::Sm80);
        assert_reason(&errs, "warp-wide instruction inside divergent control flow");
        assert!(errs.iter().any(|e| e
            .mnemonic
            .as_deref()
            .is_some_and(|m| m.starts_with("mma.sync"))));
        assert!(errs.iter().any(|e| e
            .mnemonic
            .as_deref()
            .is_some_and(|m| m.starts_with("ldmatrix"))));
    }

    #[test]
    fn ldmatrix_in_a_loop_with_a_per_lane_trip_count_is_rejected() {
        // The trip count comes from a global load (per-lane data), through an add.
        let mut k = KernelBuilder::new("bad", Arch::Sm80);
        let p = k.param_ptr::<U32>("trips");
        let p = k.global_ptr(p);
        let zero = k.var::<U32>(0u32);
        let addr = k.elem_addr(p, zero);
        let loaded = k.ld_global::<U32>(addr, 0);
        let trips = k.add(loaded, 1u32);
        k.for_range(0u32, trips, 1u32, |k, _| {
            let tile = k.shared_array::<F16>("tile", 512);
            let addr = k.shared_base(tile);
            let _: FragA<M16N8K16, F16> = k.ldmatrix(addr, 0);
        });
        let errs = errors(k, Arch::Sm80);
        assert_reason(&errs, "(`ldmatrix.sync.aligned.m8n8.x4.shared.b16`): warp-wide instruction inside divergent control flow");
    }

    #[test]
    fn mma_after_a_uniform_branch_is_accepted() {
        // Block-uniform conditions (ctaid, parameters, loop counters over them) keep the warp
        // converged: this is what the sample GEMM's pipeline relies on.
        let mut k = KernelBuilder::new("ok", Arch::Sm80);
        let n = k.param::<U32>("n");
        let n = k.load_param(n);
        let block = k.ctaid_x();
        let p = k.setp_lt(block, n);
        k.if_then(p, |k| {
            k.for_range(0u32, n, 1u32, |k, _| one_mma(k));
        });
        ModuleBuilder::new(Arch::Sm80)
            .kernel(k)
            .build()
            .expect("valid");
    }

    #[test]
    fn predicated_mma_is_rejected() {
        let mut k = KernelBuilder::new("bad", Arch::Sm80);
        let n = k.param::<U32>("n");
        let n = k.load_param(n);
        let p = k.setp_lt(n, 4u32);
        one_mma(&mut k);
        let mut module = ModuleBuilder::new(Arch::Sm80).kernel(k).module();
        let at = stmts(&module.kernels[0], |op| matches!(op, Op::Mma(_)))[0];
        if let Stmt::Inst(inst) = &mut module.kernels[0].body[at] {
            inst.guard = Some(Guard {
                pred: p.id(),
                negated: false,
            });
        }
        let errs = validate(module).expect_err("rejected").0;
        let e = errs
            .iter()
            .find(|e| e.stmt == Some(at))
            .expect("error at the mma");
        assert!(e.reason.contains("predicated warp-wide instruction"), "{e}");
        assert_eq!(e.kernel, "bad");
    }

    #[test]
    fn fragments_of_the_wrong_size_or_register_type() {
        // Too few registers for an m16n8k16 A fragment (the types allow building one by hand).
        let mut k = KernelBuilder::new("bad", Arch::Sm80);
        let x = k.var::<F32>(1.0f32);
        let pair = k.pack_f32_pair::<F16>(x, x);
        let a = FragA::<M16N8K16, F16>::from_regs(&[pair, pair, pair]);
        let b = FragB::<M16N8K16, F16>::from_regs(&[pair, pair]);
        let c = k.frag_c_zero::<M16N8K16, F16, F32>();
        let _ = k.mma(&a, &b, &c);
        let errs = errors(k, Arch::Sm80);
        assert_reason(&errs, "operand 1: vector of 3 registers where 4 are needed");

        // An f32-class register where an f16x2 A register belongs (raw IR).
        let mut k = KernelBuilder::new("bad", Arch::Sm80);
        one_mma(&mut k);
        let x = k.var::<F32>(1.0f32);
        let mut module = ModuleBuilder::new(Arch::Sm80).kernel(k).module();
        let at = stmts(&module.kernels[0], |op| matches!(op, Op::Mma(_)))[0];
        if let Stmt::Inst(inst) = &mut module.kernels[0].body[at] {
            if let ptxforge_runtime::ir::Operand::Vec(regs) = &mut inst.args[1] {
                regs[0] = x.id();
            }
        }
        let errs = validate(module).expect_err("rejected").0;
        assert!(
            errs.iter().any(|e| e.stmt == Some(at)
                && e.operand == Some(1)
                && e.reason.contains("(.f32) cannot carry .f16x2")),
            "{errs:#?}"
        );
    }

    #[test]
    fn unsupported_mma_forms_and_conversions() {
        let mut k = KernelBuilder::new("bad", Arch::Sm90);
        one_mma(&mut k);
        let x = k.var::<F32>(1.0f32);
        let _ = k.cvt::<TF32, F32>(x, Some(CvtRounding::Float(Rounding::Rn)));
        let mut module = ModuleBuilder::new(Arch::Sm90).kernel(k).module();
        let at = stmts(&module.kernels[0], |op| matches!(op, Op::Mma(_)))[0];
        if let Stmt::Inst(inst) = &mut module.kernels[0].body[at] {
            // bf16 exists only as m16n8k16 (and m16n8k8 only for f16/tf32).
            inst.op = Op::Mma(Mma {
                shape: MmaShape::M16N8K8,
                d: Type::F32,
                a: Type::BF16,
                b: Type::BF16,
                c: Type::F32,
            });
        }
        let errs = validate(module).expect_err("rejected").0;
        assert!(
            errs.iter()
                .any(|e| e.stmt == Some(at) && e.reason.contains("unsupported mma form")),
            "{errs:#?}"
        );
        assert!(
            errs.iter()
                .any(|e| e.mnemonic.as_deref() == Some("cvt.rn.tf32.f32")
                    && e.reason.contains("exists only as cvt.rna.tf32.f32")),
            "{errs:#?}"
        );

        let mut k = KernelBuilder::new("bad", Arch::Sm80);
        let x = k.var::<F32>(1.0f32);
        let _ = k.cvt::<F16x2, F32>(x, Some(CvtRounding::Float(Rounding::Rz)));
        let errs = errors(k, Arch::Sm80);
        assert_reason(&errs, "packed conversion exists only as cvt.rn.f16x2.f32");
    }

    #[test]
    fn frag_types_only_combine_as_the_isa_allows() {
        // The legal combinations are trait impls; these lines would not compile:
        //   k.mma(&FragA<M16N8K8, BF16>, ..)          (no bf16 m16n8k8)
        //   k.mma(&a_k16, &b_k8, &c)                   (shapes differ)
        //   k.frag_c_zero::<M16N8K16, BF16, F16>()     (f16 accumulators need f16 inputs)
        // What compiles validates and emits:
        let mut k = KernelBuilder::new("ok", Arch::Sm80);
        one_mma(&mut k);
        let c16 = k.frag_c_zero::<M16N8K16, F16, F16>();
        let tile = k.shared_array::<F16>("tile2", 512);
        let addr = k.shared_base(tile);
        let a: FragA<M16N8K16, F16> = k.ldmatrix(addr, 0);
        let b: FragB<M16N8K16, F16> = k.ldmatrix_trans(addr, 0);
        let _: FragC<M16N8K16, F16> = k.mma(&a, &b, &c16);
        let ptx = ModuleBuilder::new(Arch::Sm80)
            .kernel(k)
            .emit()
            .expect("valid");
        assert!(ptx.contains("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {"));
    }
}
