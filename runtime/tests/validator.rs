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
