//! The `ptxforge-sim` binary: exit codes, JSON on stdout, `--dump`.

use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ptxforge-sim"))
}

fn ptx(name: &str) -> String {
    format!("{}/tests/ptx/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// The launch of `buggy/oob_global.ptx` whose thread 32 writes one element past the end.
const OOB_FLAGS: &[&str] = &[
    "--entry",
    "oob",
    "--grid",
    "1",
    "--block",
    "64",
    "--buf",
    "out=u32:zeros:32",
    "--arg",
    "out",
    "--arg",
    "u32:32",
];

#[test]
fn clean_run_exits_zero_and_dumps() {
    let dump = std::env::temp_dir().join(format!("ptxforge-sim-cli-{}.bin", std::process::id()));
    let out = bin()
        .args([
            "run",
            &ptx("loop_sum.ptx"),
            "--entry",
            "loop_sum",
            "--grid",
            "1",
            "--block",
            "8",
            "--buf",
            "out=u32:zeros:8",
            "--arg",
            "out",
        ])
        .args(["--dump", &format!("out={}", dump.display())])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json = String::from_utf8(out.stdout).unwrap();
    assert!(json.starts_with("{\"findings\":[]"), "{json}");
    assert!(json.contains("\"counters\":{\"instructions\":{"), "{json}");
    assert!(json.contains("\"global_store_efficiency\":1"), "{json}");
    let bytes = std::fs::read(&dump).unwrap();
    let vals: Vec<u32> = bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert_eq!(vals, vec![0, 0, 1, 3, 6, 10, 15, 21]);
    let _ = std::fs::remove_file(dump);
}

#[test]
fn findings_exit_one_with_json_report() {
    let out = bin()
        .args(["run", &ptx("buggy/oob_global.ptx")])
        .args(OOB_FLAGS)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let json = String::from_utf8(out.stdout).unwrap();
    assert!(json.contains("\"kind\":\"OutOfBounds\""), "{json}");
    assert!(json.contains("\"thread\":[32,0,0]"), "{json}");
    assert!(json.contains("\"line\":"), "{json}");
}

#[test]
fn no_check_turns_a_check_off() {
    let out = bin()
        .args([
            "run",
            &ptx("buggy/uninit_read.ptx"),
            "--entry",
            "copy",
            "--grid",
            "1",
            "--block",
            "8",
            "--buf",
            "in=f32:uninit:8",
            "--buf",
            "out=f32:zeros:8",
            "--arg",
            "in",
            "--arg",
            "out",
            "--no-check",
            "initcheck",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn usage_parse_and_unsupported_errors_exit_two() {
    let out = bin()
        .args(["run", &ptx("loop_sum.ptx"), "--grid", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = bin().arg("frobnicate").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let dir = std::env::temp_dir();
    let bad = dir.join(format!("ptxforge-sim-bad-{}.ptx", std::process::id()));
    std::fs::write(&bad, ".version 7.0\n.target sm_80\n.address_size 64\n.visible .entry k()\n{\n .reg .b32 %r<2>;\n suq.width.b32 %r1, [%r1];\n}\n").unwrap();
    let out = bin()
        .args([
            "run",
            bad.to_str().unwrap(),
            "--entry",
            "k",
            "--grid",
            "1",
            "--block",
            "1",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 7") && err.contains("suq"), "{err}");
    std::fs::write(&bad, ".version 7.0\n.target sm_80\n.entry k(\n").unwrap();
    let out = bin()
        .args([
            "run",
            bad.to_str().unwrap(),
            "--entry",
            "k",
            "--grid",
            "1",
            "--block",
            "1",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let _ = std::fs::remove_file(bad);
}

fn run_sim(args: &[&str]) -> (Option<i32>, String, String) {
    let out = bin().args(args).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn tmp(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("ptxforge-sim-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn read_u32s(path: &std::path::Path) -> Vec<u32> {
    std::fs::read(path)
        .unwrap()
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// `--init` writes part of a buffer: the rest of an `uninit` buffer stays uninitialised for
/// initcheck, and two inits together initialise it all.
#[test]
fn init_writes_part_of_a_buffer() {
    let kernel = ptx("buggy/uninit_read.ptx");
    let base = [
        "run",
        &kernel,
        "--entry",
        "copy",
        "--grid",
        "1",
        "--block",
        "8",
        "--buf",
        "in=u32:uninit:8",
        "--buf",
        "out=u32:zeros:8",
        "--arg",
        "in",
        "--arg",
        "out",
    ];
    let (code, json, err) = run_sim(&[&base[..], &["--init", "in=0..4:iota"]].concat());
    assert_eq!(code, Some(1), "{err}");
    assert!(json.contains("\"kind\":\"Uninitialized\""), "{json}");
    // The first reader of a never-written byte is thread 4: threads 0..4 read initialised data.
    assert!(json.contains("\"thread\":[4,0,0]"), "{json}");
    assert!(json.contains("\"count\":4"), "{json}");

    let dump = tmp("init_out.bin");
    let dump_arg = format!("out={}", dump.display());
    let extra = [
        "--init",
        "in=0..4:iota",
        "--init",
        "in=4..8:list:9,8,7*2",
        "--dump",
        &dump_arg,
    ];
    let (code, _, err) = run_sim(&[&base[..], &extra].concat());
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(read_u32s(&dump), vec![0, 1, 2, 3, 9, 8, 7, 7]);

    for (bad, msg) in [
        ("in=4..9:zeros", "holds 8 elements"),
        ("in=0..4:list:1,2", "the list has 2"),
        ("nope=0..1:zeros", "names no --buf"),
        ("in=0..2:frob", "unknown init source"),
    ] {
        let (code, _, err) = run_sim(&[&base[..], &["--init", bad]].concat());
        assert_eq!(code, Some(2), "{bad}");
        assert!(err.contains(msg), "{bad}: {err}");
    }
}

/// `--global` sets module-scope `.global` and `.const` variables before the launch; `--dump`
/// reads a module variable back after it.
#[test]
fn global_sets_module_variables() {
    let counter = tmp("counter.bin");
    let out = tmp("vars_out.bin");
    let (code, _, err) = run_sim(&[
        "run",
        &ptx("module_vars.ptx"),
        "--entry",
        "vars",
        "--grid",
        "1",
        "--block",
        "16",
        "--buf",
        "out=u32:zeros:16",
        "--buf",
        "cnt=u32:zeros:1",
        "--arg",
        "out",
        "--arg",
        "cnt",
        "--global",
        "table=u32:list:5,6,7,8",
        "--global",
        "scale=u32:2",
        "--global",
        "counter=u32:0",
        "--dump",
        &format!("counter={}", counter.display()),
        "--dump",
        &format!("out={}", out.display()),
    ]);
    assert_eq!(code, Some(0), "{err}");
    // out[t] = table[t % 4] * scale + bias[t % 2] with bias = 7, -1.
    assert_eq!(read_u32s(&out), [17, 11, 21, 15].repeat(4));
    assert_eq!(read_u32s(&counter), vec![16]);

    let (code, _, err) = run_sim(&[
        "run",
        &ptx("module_vars.ptx"),
        "--entry",
        "vars",
        "--grid",
        "1",
        "--block",
        "1",
        "--global",
        "tabel=u32:1",
    ]);
    assert_eq!(code, Some(2));
    assert!(err.contains("tabel") && err.contains("table"), "{err}");
}

/// A JSON launch spec stands for the flags: same run, relative paths from the spec's folder,
/// later flags add to it.
#[test]
fn json_spec_file_replaces_flags() {
    let spec = tmp("launch.json");
    std::fs::write(
        &spec,
        format!(
            r#"{{
  "kernel": "{}",
  "entry": "loop_sum", "grid": [1], "block": "8",
  "buffers": {{"out": "u32:zeros:8"}},
  "args": ["out"],
  "dumps": {{"out": "spec_out.bin"}}
}}"#,
            ptx("loop_sum.ptx")
        ),
    )
    .unwrap();
    let (code, json, err) = run_sim(&["run", "--spec", spec.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    assert!(json.starts_with("{\"findings\":[]"), "{json}");
    assert_eq!(
        read_u32s(&spec.with_file_name("spec_out.bin")),
        vec![0, 0, 1, 3, 6, 10, 15, 21]
    );
    let (code, text, _) = run_sim(&["run", "--spec", spec.to_str().unwrap(), "--report", "text"]);
    assert_eq!(code, Some(0));
    assert!(text.contains("ERROR SUMMARY: 0 errors"), "{text}");

    std::fs::write(&spec, r#"{"entry": "k", "grid": 1, "blok": 1}"#).unwrap();
    let (code, _, err) = run_sim(&["run", "--spec", spec.to_str().unwrap()]);
    assert_eq!(code, Some(2));
    assert!(err.contains("unknown key `blok`"), "{err}");
}

/// `--report text` prints findings the way compute-sanitizer does, with a summary.
#[test]
fn text_report_reads_like_a_sanitizer() {
    let kernel = ptx("buggy/oob_global.ptx");
    let (code, text, err) =
        run_sim(&[&["run", &kernel][..], OOB_FLAGS, &["--report", "text"]].concat());
    assert_eq!(code, Some(1), "{err}");
    assert!(text.starts_with("========= PTXFORGE-SIM\n"), "{text}");
    assert!(text.contains("========= OutOfBounds: "), "{text}");
    assert!(text.contains("in oob\n"), "{text}");
    assert!(
        text.contains("=========     by thread (32,0,0) in block (0,0,0)"),
        "{text}"
    );
    assert!(
        text.contains("ERROR SUMMARY: 1 error (1 distinct)"),
        "{text}"
    );
    let (code, _, err) = run_sim(&["run", &ptx("loop_sum.ptx"), "--report", "xml"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("unknown report `xml`"), "{err}");
}
