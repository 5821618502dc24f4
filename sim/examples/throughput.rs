//! Interpreter throughput in thread-instructions per second, with all checks off and with each
//! check on alone, on an FMA-heavy loop and on a memory-heavy shared-memory kernel. These rows
//! run blocks on one host thread (per-core figure); the last two rows run them on every core
//! (`Options::threads` = available parallelism), checks off and all on.
//!
//! `cargo run -p ptxforge-sim --release --example throughput`

use std::time::Instant;

use ptxforge_sim::{Arg, Device, Module, Options};

const FMA_LOOP: &str = r#"
.version 7.0
.target sm_80
.address_size 64
.visible .entry fma_loop(.param .u64 pout, .param .u32 piters)
{
	.reg .pred %p<2>;
	.reg .b32 %r<8>;
	.reg .f32 %f<8>;
	.reg .b64 %rd<4>;
	ld.param.u64 %rd1, [pout];
	ld.param.u32 %r1, [piters];
	mov.u32 %r2, %tid.x;
	mov.u32 %r3, %ctaid.x;
	mov.u32 %r4, %ntid.x;
	mad.lo.s32 %r5, %r3, %r4, %r2;
	cvt.rn.f32.u32 %f1, %r5;
	mov.f32 %f2, 0f3F800000;
	mov.f32 %f3, 0f3F000000;
	mov.f32 %f4, 0f00000000;
	mov.u32 %r6, 0;
$L__loop:
	fma.rn.f32 %f4, %f1, %f2, %f4;
	fma.rn.f32 %f2, %f2, %f3, %f1;
	fma.rn.f32 %f1, %f4, %f3, %f2;
	fma.rn.f32 %f3, %f3, %f3, %f4;
	add.s32 %r6, %r6, 1;
	setp.lt.u32 %p1, %r6, %r1;
	@%p1 bra $L__loop;
	mul.wide.u32 %rd2, %r5, 4;
	add.s64 %rd3, %rd1, %rd2;
	st.global.f32 [%rd3], %f4;
	ret;
}
"#;

const SMEM: &str = r#"
.version 7.0
.target sm_80
.address_size 64
.visible .entry smem_sum(.param .u64 pin, .param .u64 pout, .param .u32 piters)
{
	.reg .pred %p<2>;
	.reg .b32 %r<16>;
	.reg .f32 %f<4>;
	.reg .b64 %rd<8>;
	.shared .align 4 .f32 s[256];
	ld.param.u64 %rd1, [pin];
	ld.param.u64 %rd2, [pout];
	ld.param.u32 %r1, [piters];
	mov.u32 %r2, %tid.x;
	mov.u32 %r3, %ctaid.x;
	mad.lo.s32 %r4, %r3, 256, %r2;
	mul.wide.u32 %rd3, %r4, 4;
	add.s64 %rd4, %rd1, %rd3;
	mov.u32 %r5, s;
	shl.b32 %r6, %r2, 2;
	add.s32 %r7, %r5, %r6;
	xor.b32 %r8, %r2, 1;
	shl.b32 %r9, %r8, 2;
	add.s32 %r10, %r5, %r9;
	mov.f32 %f3, 0f00000000;
	mov.u32 %r11, 0;
$L__loop:
	ld.global.f32 %f1, [%rd4];
	st.shared.f32 [%r7], %f1;
	bar.sync 0;
	ld.shared.f32 %f2, [%r10];
	add.f32 %f3, %f3, %f2;
	bar.sync 0;
	add.s32 %r11, %r11, 1;
	setp.lt.u32 %p1, %r11, %r1;
	@%p1 bra $L__loop;
	add.s64 %rd5, %rd2, %rd3;
	st.global.f32 [%rd5], %f3;
	ret;
}
"#;

fn configs() -> Vec<(String, Options)> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let off = Options {
        threads: 1,
        ..Options::unchecked()
    };
    let on = Options {
        threads: 1,
        ..Options::default()
    };
    let per_core = vec![
        ("all checks off", off.clone()),
        (
            "memcheck only",
            Options {
                memcheck: true,
                ..off.clone()
            },
        ),
        (
            "initcheck only",
            Options {
                initcheck: true,
                ..off.clone()
            },
        ),
        (
            "racecheck only",
            Options {
                racecheck: true,
                ..off.clone()
            },
        ),
        (
            "synccheck only",
            Options {
                synccheck: true,
                ..off.clone()
            },
        ),
        ("all checks on", on.clone()),
    ];
    let all_cores = [
        (
            format!("checks off, {cores} thr"),
            Options {
                threads: cores,
                ..off
            },
        ),
        (
            format!("checks on, {cores} thr"),
            Options {
                threads: cores,
                ..on
            },
        ),
    ];
    per_core
        .into_iter()
        .map(|(label, o)| (label.to_string(), o))
        .chain(all_cores)
        .collect()
}

fn bench(name: &str, text: &str, entry: &str, blocks: u32, iters: u32) {
    let m = Module::parse(text).expect("benchmark kernel parses");
    println!("{name}: {blocks} blocks x 256 threads, {iters} iterations");
    let mut per_core: Vec<(Options, f64)> = Vec::new();
    for (label, opts) in configs() {
        let mut d = Device::new();
        let n = blocks as usize * 256;
        let input = d.upload(&vec![1.0f32; n]);
        let out = d.alloc(n * 4);
        let args = if entry == "fma_loop" {
            vec![Arg::Buffer(out), Arg::U32(iters)]
        } else {
            vec![Arg::Buffer(input), Arg::Buffer(out), Arg::U32(iters)]
        };
        let t = Instant::now();
        let r = d
            .launch(&m, entry, [blocks, 1, 1], [256, 1, 1], 0, &args, &opts)
            .expect("launch");
        let dt = t.elapsed().as_secs_f64();
        let instrs = r.counters.instructions.total();
        assert!(r.is_clean(), "{:?}", r.findings);
        let rate = instrs as f64 / dt / 1e6;
        // Multi-threaded rows: speed-up over the single-thread row with the same checks.
        let single = Options {
            threads: 1,
            ..opts.clone()
        };
        let speedup = match per_core.iter().find(|(o, _)| *o == single) {
            Some((_, base)) if opts.threads > 1 => format!("  (x{:.2})", rate / base),
            _ => {
                per_core.push((single, rate));
                String::new()
            }
        };
        println!(
            "  {label:<20} {instrs:>12} thread-instructions in {dt:>7.3} s = {rate:>7.1} M thread-instr/s{speedup}"
        );
    }
}

fn main() {
    bench("FMA loop", FMA_LOOP, "fma_loop", 64, 400);
    bench("shared-memory loop", SMEM, "smem_sum", 32, 100);
}
