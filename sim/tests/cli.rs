//! The `ptxforge-sim` binary: exit codes, JSON on stdout, `--dump`.

use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ptxforge-sim"))
}

fn ptx(name: &str) -> String {
    format!("{}/tests/ptx/{name}", env!("CARGO_MANIFEST_DIR"))
}

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
        .args([
            "run",
            &ptx("buggy/oob_global.ptx"),
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
        ])
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
    std::fs::write(&bad, ".version 7.0\n.target sm_80\n.address_size 64\n.visible .entry k()\n{\n .reg .b32 %r<2>;\n mul24.lo.u32 %r1, %r1, %r1;\n}\n").unwrap();
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
    assert!(
        err.contains("line 7") && err.contains("mul24.lo.u32"),
        "{err}"
    );
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
