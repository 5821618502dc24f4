//! Host API behaviour: typed errors for bad input, findings with full reports, counters,
//! determinism and block shuffling.

use ptxforge_sim::{Arg, Device, FindingKind, Module, Options, SimError};

fn corpus(name: &str) -> String {
    std::fs::read_to_string(format!("{}/tests/ptx/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

const COPY: &str = r#"
.version 7.0
.target sm_80
.address_size 64
.visible .entry copy(.param .u64 pin, .param .u64 pout, .param .u32 pn)
{
	.reg .pred %p<2>;
	.reg .b32 %r<4>;
	.reg .b64 %rd<6>;
	ld.param.u64 %rd1, [pin];
	ld.param.u64 %rd2, [pout];
	ld.param.u32 %r1, [pn];
	mov.u32 %r2, %tid.x;
	setp.ge.u32 %p1, %r2, %r1;
	@%p1 bra $L__end;
	mul.wide.u32 %rd3, %r2, 4;
	add.s64 %rd4, %rd1, %rd3;
	ld.global.u32 %r3, [%rd4];
	add.s64 %rd5, %rd2, %rd3;
	st.global.u32 [%rd5], %r3;
$L__end:
	ret;
}
"#;

#[test]
fn copy_runs_and_lists_entries() {
    let m = Module::parse(COPY).unwrap();
    assert_eq!(m.entries(), vec!["copy"]);
    let mut d = Device::new();
    let a = d.upload(&(0..64u32).collect::<Vec<_>>());
    let b = d.alloc(64 * 4);
    let r = d
        .launch(
            &m,
            "copy",
            [1, 1, 1],
            [64, 1, 1],
            0,
            &[Arg::Buffer(a), Arg::Buffer(b), Arg::U32(64)],
            &Options::default(),
        )
        .unwrap();
    assert!(r.is_clean(), "{:?}", r.findings);
    assert_eq!(d.download::<u32>(b).unwrap(), (0..64).collect::<Vec<_>>());
    assert_eq!(r.counters.global_load_requests, 2);
    assert_eq!(r.counters.global_load_efficiency(), 1.0);
    assert_eq!(r.counters.global_store_efficiency(), 1.0);
}

#[test]
fn buffer_too_small_is_an_out_of_bounds_finding_not_a_panic() {
    let m = Module::parse(COPY).unwrap();
    let mut d = Device::new();
    let a = d.upload(&[1u32; 16]);
    let b = d.alloc(16 * 4);
    let r = d
        .launch(
            &m,
            "copy",
            [1, 1, 1],
            [32, 1, 1],
            0,
            &[Arg::Buffer(a), Arg::Buffer(b), Arg::U32(32)],
            &Options::default(),
        )
        .unwrap();
    assert_eq!(r.findings.len(), 1, "{:?}", r.findings);
    let f = &r.findings[0];
    assert_eq!(f.kind, FindingKind::OutOfBounds);
    assert_eq!(f.thread, [16, 0, 0]);
    assert_eq!(f.count, 16, "one deduplicated finding for threads 16..31");
    assert_eq!(f.line, 18, "the load from the short input faults first");
    assert!(f.address.is_some());
    // The in-bounds half was still copied.
    assert_eq!(&d.download::<u32>(b).unwrap()[..16], &[1; 16]);
}

#[test]
fn arg_mismatches_are_typed_errors() {
    let m = Module::parse(COPY).unwrap();
    let mut d = Device::new();
    let a = d.upload(&[0u32; 4]);
    let o = Options::default();
    let e = d
        .launch(&m, "copy", [1, 1, 1], [1, 1, 1], 0, &[Arg::Buffer(a)], &o)
        .unwrap_err();
    assert!(
        matches!(
            e,
            SimError::ArgCount {
                expected: 3,
                given: 1,
                ..
            }
        ),
        "{e}"
    );
    let e = d
        .launch(
            &m,
            "copy",
            [1, 1, 1],
            [1, 1, 1],
            0,
            &[Arg::Buffer(a), Arg::Buffer(a), Arg::U64(4)],
            &o,
        )
        .unwrap_err();
    assert!(matches!(e, SimError::ArgType { index: 2, .. }), "{e}");
    let e = d
        .launch(
            &m,
            "copy",
            [1, 1, 1],
            [1, 1, 1],
            0,
            &[Arg::Buffer(a), Arg::Buffer(a), Arg::F32(1.0)],
            &o,
        )
        .unwrap_err();
    assert!(matches!(e, SimError::ArgType { index: 2, .. }), "{e}");
    let e = d
        .launch(
            &m,
            "copy",
            [1, 1, 1],
            [1, 1, 1],
            0,
            &[Arg::U32(1), Arg::Buffer(a), Arg::U32(4)],
            &o,
        )
        .unwrap_err();
    assert!(matches!(e, SimError::ArgType { index: 0, .. }), "{e}");
    let e = d
        .launch(&m, "nope", [1, 1, 1], [1, 1, 1], 0, &[], &o)
        .unwrap_err();
    assert!(matches!(e, SimError::UnknownEntry { .. }), "{e}");
    let e = d
        .launch(
            &m,
            "copy",
            [1, 1, 1],
            [2048, 1, 1],
            0,
            &[Arg::Buffer(a), Arg::Buffer(a), Arg::U32(4)],
            &o,
        )
        .unwrap_err();
    assert!(matches!(e, SimError::BadLaunch(_)), "{e}");
    let e = d
        .launch(
            &m,
            "copy",
            [0, 1, 1],
            [1, 1, 1],
            0,
            &[Arg::Buffer(a), Arg::Buffer(a), Arg::U32(4)],
            &o,
        )
        .unwrap_err();
    assert!(matches!(e, SimError::BadLaunch(_)), "{e}");
    d.free(a).unwrap();
    let e = d
        .launch(
            &m,
            "copy",
            [1, 1, 1],
            [1, 1, 1],
            0,
            &[Arg::Buffer(a), Arg::Buffer(a), Arg::U32(4)],
            &o,
        )
        .unwrap_err();
    assert!(matches!(e, SimError::BadBuffer(_)), "{e}");
    assert!(matches!(d.free(a), Err(SimError::BadBuffer(_))));
    assert!(matches!(d.download::<u32>(a), Err(SimError::BadBuffer(_))));
}

#[test]
fn buffer_api_errors() {
    let mut d = Device::new();
    let b = d.alloc(6);
    assert!(matches!(
        d.download::<u32>(b),
        Err(SimError::BufferSize { .. })
    ));
    assert!(matches!(
        d.write(b, &[1u32, 2]),
        Err(SimError::BufferSize { .. })
    ));
    d.write(b, &[7u16, 8, 9]).unwrap();
    assert_eq!(d.download::<u16>(b).unwrap(), vec![7, 8, 9]);
    assert_eq!(d.len_bytes(b).unwrap(), 6);
    let h = d.upload(&[
        half::f16::from_f32(1.5),
        half::bf16::from_f32(2.0).to_bits().into_f16(),
    ]);
    assert_eq!(
        d.download::<half::f16>(h).unwrap()[0],
        half::f16::from_f32(1.5)
    );
}

trait IntoF16 {
    fn into_f16(self) -> half::f16;
}
impl IntoF16 for u16 {
    fn into_f16(self) -> half::f16 {
        half::f16::from_bits(self)
    }
}

#[test]
fn malformed_and_unsupported_ptx_are_typed_errors_with_lines() {
    let bad = ".version 7.0\n.target sm_80\n.address_size 64\n.visible .entry k()\n{\n  mov.u32 %r1 5;\n}\n";
    match Module::parse(bad) {
        Err(SimError::Parse { line, .. }) => assert_eq!(line, 6),
        other => panic!("{other:?}"),
    }
    let unsupported = ".version 7.0\n.target sm_80\n.address_size 64\n.visible .entry k()\n{\n .reg .b32 %r<3>;\n  suq.width.b32 %r1, [%r2];\n}\n";
    match Module::parse(unsupported) {
        Err(SimError::Unsupported { line, opcode, .. }) => {
            assert_eq!(line, 7);
            assert_eq!(opcode, "suq.width.b32");
        }
        other => panic!("{other:?}"),
    }
    let unknown_reg = ".version 7.0\n.target sm_80\n.address_size 64\n.visible .entry k()\n{\n  mov.u32 %r1, 5;\n}\n";
    assert!(matches!(
        Module::parse(unknown_reg),
        Err(SimError::Parse { line: 6, .. })
    ));
    let bad_label = ".version 7.0\n.target sm_80\n.address_size 64\n.visible .entry k()\n{\n  bra $nowhere;\n}\n";
    assert!(matches!(
        Module::parse(bad_label),
        Err(SimError::Parse { line: 6, .. })
    ));
    let unknown_mod = ".version 7.0\n.target sm_80\n.address_size 64\n.visible .entry k()\n{\n .reg .b32 %r<3>;\n  add.wat.u32 %r1, %r2, %r2;\n}\n";
    assert!(matches!(
        Module::parse(unknown_mod),
        Err(SimError::Unsupported { line: 7, .. })
    ));
}

#[test]
fn race_report_names_both_accesses() {
    let text = corpus("buggy/shared_race.ptx");
    let m = Module::parse(&text).unwrap();
    let mut d = Device::new();
    let out = d.alloc(256);
    let r = d
        .launch(
            &m,
            "race",
            [1, 1, 1],
            [64, 1, 1],
            0,
            &[Arg::Buffer(out)],
            &Options::default(),
        )
        .unwrap();
    let races: Vec<_> = r
        .findings
        .iter()
        .filter(|f| f.kind == FindingKind::SharedRace)
        .collect();
    assert!(!races.is_empty());
    let f = races[0];
    let other = f.other.as_ref().expect("race names the other access");
    // Thread 0 reads s[1] (ld.shared, line 20) which thread 1 wrote (st.shared, line 19).
    assert_eq!((f.line, f.thread), (20, [0, 0, 0]));
    assert_eq!((other.line, other.thread), (19, [1, 0, 0]));
    assert_ne!(f.pc, other.pc);
    assert_eq!(other.kind, ptxforge_sim::AccessKind::Write);
    assert_eq!(f.access, Some(ptxforge_sim::AccessKind::Read));
    assert_eq!(f.block, [0, 0, 0]);
    assert_eq!(f.address, Some(4));
    // With racecheck off the kernel is clean.
    let r = d
        .launch(
            &m,
            "race",
            [1, 1, 1],
            [64, 1, 1],
            0,
            &[Arg::Buffer(out)],
            &Options {
                racecheck: false,
                ..Options::default()
            },
        )
        .unwrap();
    assert!(r.is_clean());
}

#[test]
fn shared_bank_conflicts_and_strided_global_access_are_counted() {
    let text = r#"
.version 7.0
.target sm_80
.address_size 64
.visible .entry strided(.param .u64 pout, .param .u32 pstride)
{
	.reg .b32 %r<8>;
	.reg .b64 %rd<4>;
	.shared .align 4 .b8 s[4096];
	ld.param.u64 %rd1, [pout];
	ld.param.u32 %r1, [pstride];
	mov.u32 %r2, %tid.x;
	mul.lo.s32 %r3, %r2, %r1;
	shl.b32 %r4, %r3, 2;
	mov.u32 %r5, s;
	add.s32 %r6, %r5, %r4;
	st.shared.u32 [%r6], %r2;
	mul.wide.u32 %rd2, %r4, 1;
	add.s64 %rd3, %rd1, %rd2;
	st.global.u32 [%rd3], %r2;
	ret;
}
"#;
    let m = Module::parse(text).unwrap();
    let mut d = Device::new();
    let out = d.alloc(32 * 32 * 4);
    let run = |d: &mut Device, stride: u32| {
        d.launch(
            &m,
            "strided",
            [1, 1, 1],
            [32, 1, 1],
            0,
            &[Arg::Buffer(out), Arg::U32(stride)],
            &Options::default(),
        )
        .unwrap()
        .counters
    };
    let c1 = run(&mut d, 1);
    assert_eq!(c1.shared_wavefronts_per_request(), 1.0);
    assert_eq!(c1.global_store_efficiency(), 1.0);
    let c2 = run(&mut d, 2);
    assert_eq!(c2.shared_wavefronts_per_request(), 2.0);
    assert_eq!(c2.global_store_efficiency(), 0.5);
    let c32 = run(&mut d, 32);
    assert_eq!(c32.shared_wavefronts_per_request(), 32.0);
    assert_eq!(c32.global_store_sectors, 32);
    assert_eq!(c32.global_store_efficiency(), 4.0 / 32.0);
    assert_eq!(c32.instructions.mem_shared, 32);
    assert_eq!(c32.instructions.total(), 32 * 12);
}

#[test]
fn runs_are_deterministic_and_shuffled_block_order_gives_the_same_result() {
    let text = corpus("atom_counter.ptx");
    let m = Module::parse(&text).unwrap();
    let run = |shuffle: Option<u64>| {
        let mut d = Device::new();
        let ctr = d.upload(&[0u32]);
        let seen = d.upload(&[0u32; 256]);
        let r = d
            .launch(
                &m,
                "counter",
                [4, 1, 1],
                [64, 1, 1],
                0,
                &[Arg::Buffer(ctr), Arg::Buffer(seen)],
                &Options {
                    shuffle_blocks: shuffle,
                    ..Options::default()
                },
            )
            .unwrap();
        (
            r,
            d.download::<u32>(ctr).unwrap(),
            d.download::<u32>(seen).unwrap(),
        )
    };
    let a = run(None);
    let b = run(None);
    assert_eq!(a.0, b.0);
    assert_eq!(a.1, b.1);
    let s = run(Some(7));
    assert_eq!(s.1, vec![256]);
    assert_eq!(s.2, vec![1; 256]);
    assert_eq!(s.0.counters, a.0.counters);
}

#[test]
fn each_check_can_be_switched_off() {
    let text = corpus("buggy/uninit_read.ptx");
    let m = Module::parse(&text).unwrap();
    let mut d = Device::new();
    let a = d.alloc(32);
    let b = d.alloc(32);
    let on = d
        .launch(
            &m,
            "copy",
            [1, 1, 1],
            [8, 1, 1],
            0,
            &[Arg::Buffer(a), Arg::Buffer(b)],
            &Options::default(),
        )
        .unwrap();
    assert_eq!(on.findings[0].kind, FindingKind::Uninitialized);
    let off = d
        .launch(
            &m,
            "copy",
            [1, 1, 1],
            [8, 1, 1],
            0,
            &[Arg::Buffer(a), Arg::Buffer(b)],
            &Options {
                initcheck: false,
                ..Options::default()
            },
        )
        .unwrap();
    assert!(off.is_clean());
    // After the kernel wrote `b`, reading it is fine.
    let again = d
        .launch(
            &m,
            "copy",
            [1, 1, 1],
            [8, 1, 1],
            0,
            &[Arg::Buffer(b), Arg::Buffer(a)],
            &Options::default(),
        )
        .unwrap();
    assert!(again.is_clean(), "{:?}", again.findings);
}

/// Module-scope variables persist on the device between launches and can be read and written
/// from the host (`cudaMemcpyToSymbol` / `FromSymbol`); unknown names are typed errors.
#[test]
fn module_variables_are_settable_from_the_host() {
    let module = Module::parse(&corpus("module_vars.ptx")).unwrap();
    assert_eq!(
        module.variables(),
        ["table", "counter", "zeroed", "scale", "bias"]
    );
    let mut dev = Device::new();
    assert_eq!(dev.read_symbol::<u32>(&module, "counter").unwrap(), [100]);
    dev.write_symbol(&module, "table", &[5u32, 6]).unwrap();
    dev.write_symbol(&module, "scale", &[3u32]).unwrap();
    dev.write_symbol(&module, "zeroed", &[0u32, 1000]).unwrap();
    let out = dev.upload(&[0u32; 16]);
    let cnt = dev.upload(&[0u32; 1]);
    let opts = Options::default();
    let args = [Arg::Buffer(out), Arg::Buffer(cnt)];
    let r = dev
        .launch(&module, "vars", [1, 1, 1], [16, 1, 1], 0, &args, &opts)
        .unwrap();
    assert!(r.is_clean(), "{:?}", r.findings);
    // table = 5,6,3,4; scale 3; bias 7,-1; plus zeroed[1] = 1000.
    let want: Vec<u32> = (0..16usize)
        .map(|t| [5, 6, 3, 4][t % 4] * 3 + [7, -1][t % 2] + 1000)
        .map(|v: i32| v as u32)
        .collect();
    assert_eq!(dev.download::<u32>(out).unwrap(), want);
    assert_eq!(dev.read_symbol::<u32>(&module, "counter").unwrap(), [116]);
    // A second launch sees the counter where the first left it.
    dev.launch(&module, "vars", [1, 1, 1], [16, 1, 1], 0, &args, &opts)
        .unwrap();
    assert_eq!(dev.read_symbol::<u32>(&module, "counter").unwrap(), [132]);
    let id = dev.symbol_buffer(&module, "counter").unwrap();
    assert_eq!(dev.download::<u32>(id).unwrap(), [132]);
    assert!(matches!(
        dev.write_symbol(&module, "nope", &[1u32]),
        Err(SimError::UnknownSymbol { .. })
    ));
    assert!(matches!(
        dev.write_symbol(&module, "scale", &[1u32, 2]),
        Err(SimError::BufferSize { .. })
    ));
}

/// The findings of one kind, in report order.
fn of_kind(r: &ptxforge_sim::LaunchReport, kind: FindingKind) -> Vec<&ptxforge_sim::Finding> {
    r.findings.iter().filter(|f| f.kind == kind).collect()
}

/// Launches `entry` as one block of `threads` threads with every check on.
fn launch_block(
    d: &mut Device,
    m: &Module,
    entry: &str,
    threads: u32,
    args: &[Arg],
) -> ptxforge_sim::LaunchReport {
    d.launch(
        m,
        entry,
        [1, 1, 1],
        [threads, 1, 1],
        0,
        args,
        &Options::default(),
    )
    .unwrap()
}

/// `write_at` initialises part of a buffer: initcheck flags only the bytes it left alone, and
/// writes past the end are a typed error.
#[test]
fn write_at_initialises_part_of_a_buffer() {
    let m = Module::parse(COPY).unwrap();
    let mut d = Device::new();
    let src = d.alloc(16 * 4);
    let dst = d.upload(&[0u32; 16]);
    d.write_at(src, 4, &[40u32, 50, 60, 70]).unwrap();
    let args = [Arg::Buffer(src), Arg::Buffer(dst), Arg::U32(16)];
    let r = launch_block(&mut d, &m, "copy", 16, &args);
    let uninit = of_kind(&r, FindingKind::Uninitialized);
    assert_eq!(uninit.len(), 1, "{:?}", r.findings);
    assert_eq!(uninit[0].thread, [0, 0, 0]);
    assert_eq!(
        uninit[0].count, 12,
        "threads 0..4 and 8..16 read unwritten bytes"
    );
    assert_eq!(&d.download::<u32>(dst).unwrap()[4..8], &[40, 50, 60, 70]);
    assert!(matches!(
        d.write_at(src, 14, &[1u32, 2, 3]),
        Err(SimError::BufferSize { .. })
    ));
}

/// `.file`/`.loc` line information: a finding names the source line of the nearest preceding
/// `.loc` (in the entry or in a called `.func`) next to the PTX line; without `.loc` it has none.
#[test]
fn findings_carry_the_source_line_of_the_nearest_loc() {
    let ptx = r#"
.version 7.0
.target sm_80
.address_size 64
.file 1 "/src/kernels/scale.cu", 1700000000, 1234
.file 2 "/src/kernels/helpers.cuh"

.func store_at(.param .b64 p, .param .b32 v)
{
	.reg .b32 %r<2>;
	.reg .b64 %rd<2>;
	.loc 2 7 5
	ld.param.b64 %rd1, [p];
	ld.param.b32 %r1, [v];
	.loc 2 9 3, function_name $L__info_string0, inlined_at 1 20 7
	st.global.u32 [%rd1], %r1;
	ret;
}

.visible .entry scale(.param .u64 pout)
{
	.reg .b32 %r<3>;
	.reg .b64 %rd<4>;
	ld.param.u64 %rd1, [pout];
	.loc 1 12 10
	mov.u32 %r1, %tid.x;
	mul.wide.u32 %rd2, %r1, 4;
	add.s64 %rd3, %rd1, %rd2;
	.loc 1 0 0
	add.s64 %rd3, %rd3, 4;
	.loc 1 14 3
	{
	.param .b64 a0;
	.param .b32 a1;
	st.param.b64 [a0], %rd3;
	st.param.b32 [a1], %r1;
	call.uni store_at, (a0, a1);
	}
	.loc 1 15 3
	ld.global.u32 %r2, [%rd1+16];
	ret;
}
"#;
    let m = Module::parse(ptx).unwrap();
    let mut d = Device::new();
    let out = d.upload(&[0u32; 4]);
    let r = launch_block(&mut d, &m, "scale", 4, &[Arg::Buffer(out)]);
    let oob = of_kind(&r, FindingKind::OutOfBounds);
    assert_eq!(oob.len(), 2, "{:#?}", r.findings);
    // The store in the callee: its `.loc` (file 2) wins over the caller's.
    let store = oob
        .iter()
        .find(|f| f.line == 16)
        .expect("store finding at PTX line 16");
    let src = store.source.as_ref().expect("source location");
    assert_eq!(
        (src.file.as_str(), src.line, src.column),
        ("/src/kernels/helpers.cuh", 9, 3)
    );
    assert_eq!(src.to_string(), "/src/kernels/helpers.cuh:9:3");
    let load = oob
        .iter()
        .find(|f| f.line == 40)
        .expect("load finding at PTX line 40");
    assert_eq!(
        load.source.as_ref().map(|s| s.to_string()).as_deref(),
        Some("/src/kernels/scale.cu:15:3")
    );
    // The same kernel without line information: no source, same PTX lines.
    let bare: String = ptx
        .lines()
        .map(|l| {
            if l.trim_start().starts_with(".loc") {
                ""
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let m = Module::parse(&bare).unwrap();
    let r = launch_block(&mut d, &m, "scale", 4, &[Arg::Buffer(out)]);
    assert!(r.findings.iter().all(|f| f.source.is_none()));
    assert!(r.findings.iter().any(|f| f.line == 16));
}

/// `bar.sync 1, 64` in a block of 48 threads: arrivals count per warp, so the partial second
/// warp (16 threads) stands for 32 and the barrier completes; the data exchanged through it is
/// right and nothing is reported. A count of 96 is never reached (a real deadlock).
#[test]
fn counted_barrier_counts_the_partial_last_warp_as_a_warp() {
    let src = r#"
.version 7.0
.target sm_80
.address_size 64
.visible .entry swap(.param .u64 pout, .param .u32 pcount)
{
	.reg .b32 %r<8>;
	.reg .b64 %rd<4>;
	.shared .align 4 .b32 buf[48];
	ld.param.u64 %rd1, [pout];
	ld.param.u32 %r6, [pcount];
	mov.u32 %r1, %tid.x;
	mov.u32 %r2, buf;
	shl.b32 %r3, %r1, 2;
	add.u32 %r4, %r2, %r3;
	st.shared.u32 [%r4], %r1;
	bar.sync 1, %r6;
	sub.u32 %r5, 47, %r1;
	shl.b32 %r5, %r5, 2;
	add.u32 %r5, %r2, %r5;
	ld.shared.u32 %r7, [%r5];
	mul.wide.u32 %rd2, %r1, 4;
	add.s64 %rd3, %rd1, %rd2;
	st.global.u32 [%rd3], %r7;
	ret;
}
"#;
    let m = Module::parse(src).unwrap();
    let mut d = Device::new();
    let out = d.upload(&[0u32; 48]);
    let r = launch_block(&mut d, &m, "swap", 48, &[Arg::Buffer(out), Arg::U32(64)]);
    assert!(r.findings.is_empty(), "{:?}", r.findings);
    let want: Vec<u32> = (0..48).rev().collect();
    assert_eq!(d.download::<u32>(out).unwrap(), want);
    let r = launch_block(&mut d, &m, "swap", 48, &[Arg::Buffer(out), Arg::U32(96)]);
    assert!(
        !r.findings.is_empty(),
        "a count of 96 in a 48-thread block is never reached"
    );
}
