//! The CUDA backend on a machine without a GPU: what must hold anyway. Creating a backend with no
//! driver library is a typed error and prints nothing (cudarc's own lookup panics with a message,
//! and aborts under `panic = "abort"`; the backend checks for the library first).
#![cfg(feature = "cuda")]

use std::process::Command;

use ptxforge_runtime::launch::{CudaBackend, LaunchError};

/// Set in the child process this test starts, so the child only creates the backend.
const CHILD: &str = "PTXFORGE_CUDA_NEW_CHILD";

#[test]
fn new_without_a_driver_errs_and_prints_nothing() {
    if std::env::var_os(CHILD).is_some() {
        // Only the outcome's kind goes to stdout; the parent checks nothing else was printed.
        let outcome = match CudaBackend::new(0) {
            Err(LaunchError::NoDriver(_)) => "no-driver",
            _ => "driver-present",
        };
        println!("outcome={outcome}");
        return;
    }
    let exe = std::env::current_exe().expect("test binary path");
    let out = Command::new(exe)
        .args([
            "--exact",
            "new_without_a_driver_errs_and_prints_nothing",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .output()
        .expect("run the child test");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child failed:\n{stdout}\n{stderr}");
    if stdout.contains("outcome=driver-present") {
        eprintln!("a CUDA driver is installed here: the no-driver case cannot be checked");
        return;
    }
    assert!(stdout.contains("outcome=no-driver"), "{stdout}");
    // With --nocapture anything the backend printed would reach the child's own streams.
    assert!(stderr.trim().is_empty(), "printed on stderr: {stderr}");
    assert!(!stdout.contains("panicked"), "printed on stdout: {stdout}");
    assert!(!stdout.contains("libcuda"), "printed on stdout: {stdout}");
}
