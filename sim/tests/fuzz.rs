//! Robustness: truncated and mutated corpus texts must never panic the parser, the decoder or
//! (when they still decode) a launch.

use std::path::Path;

use ptxforge_sim::{Arg, Device, Module, Options, SimError};

/// Deterministic xorshift.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn corpus_texts() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ptx");
    let mut out = Vec::new();
    for d in [dir.clone(), dir.join("buggy")] {
        for e in std::fs::read_dir(d).unwrap().flatten() {
            if e.path().extension().is_some_and(|x| x == "ptx") {
                out.push(std::fs::read_to_string(e.path()).unwrap());
            }
        }
    }
    out.sort();
    out
}

fn try_run(text: &str) {
    let Ok(m) = Module::parse(text) else { return };
    for entry in m.entries() {
        let params = m.params(entry).unwrap().to_vec();
        let mut d = Device::new();
        let buf = d.upload(&[0u8; 64]);
        let args: Vec<Arg> = params
            .iter()
            .map(|p| match p.size {
                8 if !p.ty.is_float() => Arg::Buffer(buf),
                8 => Arg::F64(1.0),
                4 if p.ty.is_float() => Arg::F32(1.0),
                4 => Arg::U32(3),
                2 => Arg::U16(3),
                _ => Arg::U8(3),
            })
            .collect();
        let opts = Options {
            fuel: 2_000,
            ..Options::default()
        };
        let _ = d.launch(&m, entry, [2, 1, 1], [40, 1, 1], 64, &args, &opts);
    }
}

#[test]
fn truncated_texts_never_panic() {
    for text in corpus_texts() {
        let n = text.len();
        for cut in (0..n).step_by((n / 40).max(1)) {
            let mut cut = cut;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            let _ = Module::parse(&text[..cut]);
        }
    }
}

#[test]
fn mutated_texts_never_panic() {
    let texts = corpus_texts();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let alphabet: &[u8] = b"%.,;:{}[]()<>+-@!|_0123456789abcdefxrdfpuvsb \n";
    for text in &texts {
        for _ in 0..25 {
            let mut bytes = text.clone().into_bytes();
            for _ in 0..1 + rng.next() % 4 {
                let i = (rng.next() as usize) % bytes.len();
                match rng.next() % 3 {
                    0 => bytes[i] = alphabet[(rng.next() as usize) % alphabet.len()],
                    1 => {
                        bytes.remove(i);
                    }
                    _ => bytes.insert(i, alphabet[(rng.next() as usize) % alphabet.len()]),
                }
            }
            let s = String::from_utf8_lossy(&bytes).into_owned();
            try_run(&s);
        }
    }
}

#[test]
fn every_corpus_kernel_survives_arbitrary_arguments() {
    for text in corpus_texts() {
        try_run(&text);
    }
}

#[test]
fn hostile_inputs_are_errors_not_crashes() {
    let deep = format!(
        ".version 7.0\n.target sm_80\n.address_size 64\n.visible .entry k()\n{}",
        "{".repeat(100_000)
    );
    assert!(Module::parse(&deep).is_err());
    let deep_operand = format!(
        ".version 7.0\n.target sm_80\n.address_size 64\n.visible .entry k()\n{{\n mov.b32 %r1, {};\n}}\n",
        "{".repeat(100_000)
    );
    assert!(Module::parse(&deep_operand).is_err());
    let many_regs = ".version 7.0\n.target sm_80\n.address_size 64\n.visible .entry k()\n{\n .reg .b32 %r<4000000000>;\n ret;\n}\n";
    assert!(Module::parse(many_regs).is_err());
    let big_local = ".version 7.0\n.target sm_80\n.address_size 64\n.visible .entry k()\n{\n .local .b8 x[1099511627776];\n ret;\n}\n";
    assert!(Module::parse(big_local).is_err());
    assert!(Module::parse("\u{1F600}").is_err());
    assert!(Module::parse("").unwrap().entries().is_empty());
}

/// The real-compiler modules (DWARF `.section`s, `.func`/`call`, module variables, `redux`,
/// `match`) cut at many points parse to a module or a `SimError::Parse` with a line inside the
/// text, never a panic.
#[test]
fn truncated_real_compiler_texts_are_parse_errors_with_lines() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/real/ptx");
    let mut names: Vec<_> = std::fs::read_dir(dir).unwrap().flatten().collect();
    names.sort_by_key(|e| e.path());
    for e in names {
        let text = std::fs::read_to_string(e.path()).unwrap();
        let lines = text.lines().count();
        let n = text.len();
        for cut in (0..n).step_by((n / 30).max(1)) {
            let mut cut = cut;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            if let Err(SimError::Parse { line, .. }) = Module::parse(&text[..cut]) {
                assert!(
                    line >= 1 && line <= lines,
                    "{}: line {line}",
                    e.path().display()
                );
            }
        }
    }
}

/// Malformed uses of the forms added for real-compiler PTX are `SimError::Parse` naming their
/// line.
#[test]
fn malformed_new_forms_are_parse_errors_with_their_line() {
    let wrap = |body: &str| {
        format!(".version 7.0\n.target sm_80\n.address_size 64\n.func (.param .b32 r) f(.param .b32 a)\n{{\n ret;\n}}\n.visible .entry k()\n{{\n .reg .b32 %r<4>;\n .reg .pred %p<2>;\n{body}\n ret;\n}}\n")
    };
    let cases = [
        " call.uni (x), f, (y);",
        " call.uni f;",
        " call.uni ;",
        " redux.sync.add.u32 %r1, %r2;",
        " redux.sync.u32 %r1, %r2, -1;",
        " match.sync.b32 %r1, %r2, -1;",
        " match.any.sync.b32 %r1|%p1, %r2, -1;",
        " shf.l.b32 %r1, %r2, %r3, 1;",
        " lop3.b32 %r1, %r2, %r3, %r1;",
        " testp.f32 %p1, %r1;",
        " addc.cc.u32 %r1, %r2;",
        " mov.u32 %r1, no_such_global;",
        " bar.red.popc.u32 %r1, 0;",
        " bar.red.xor.pred %p1, 0, %p1;",
        " bar.red.and.u32 %r1, 0, %p1;",
        " .loc",
        " .loc 1",
        " .loc x 2 3",
        " .loc 1 -2 3",
    ];
    for body in cases {
        match Module::parse(&wrap(body)) {
            Err(SimError::Parse { line: 12, .. }) => {}
            other => panic!("`{body}`: {other:?}"),
        }
    }
    let open_section =
        ".version 7.0\n.target sm_80\n.address_size 64\n.section .debug_info\n{\n.b8 1, 2\n";
    assert!(matches!(
        Module::parse(open_section),
        Err(SimError::Parse { .. })
    ));
    // Valid forms that stay unsupported name themselves.
    let vprintf = ".version 7.0\n.target sm_80\n.address_size 64\n.extern .func (.param .b32 r) vprintf(.param .b64 f, .param .b64 a);\n.visible .entry k()\n{\n .reg .b32 %r<2>;\n .reg .b64 %rd<2>;\n mov.u64 %rd1, 0;\n {\n .param .b64 p0;\n st.param.b64 [p0], %rd1;\n .param .b64 p1;\n st.param.b64 [p1], %rd1;\n .param .b32 r0;\n call.uni (r0), vprintf, (p0, p1);\n }\n ret;\n}\n";
    match Module::parse(vprintf) {
        Err(SimError::Unsupported {
            line: 16, detail, ..
        }) => {
            assert!(detail.contains("vprintf"), "{detail}")
        }
        other => panic!("vprintf: {other:?}"),
    }
}
