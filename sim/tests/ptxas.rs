//! Every valid corpus kernel assembles with NVIDIA's ptxas for the target it declares, and again
//! retargeted to sm_70 when it uses nothing newer (bf16, tanh, min.NaN, mma, ldmatrix, cp.async, redux,
//! tf32). Needs `PTXAS` (path to ptxas); without it the test says so
//! loudly and passes, unless `PTXFORGE_REQUIRE_PTXAS=1`.

use std::path::Path;
use std::process::Command;

#[test]
fn valid_corpus_assembles_with_ptxas() {
    let ptxas = match std::env::var("PTXAS") {
        Ok(p) if !p.is_empty() => p,
        _ => {
            if std::env::var("PTXFORGE_REQUIRE_PTXAS").as_deref() == Ok("1") {
                panic!("PTXAS is not set but PTXFORGE_REQUIRE_PTXAS=1");
            }
            eprintln!("\n*** SKIPPED: ptxas not found (set PTXAS=/path/to/ptxas) ***\n");
            return;
        }
    };
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ptx");
    let mut failures = Vec::new();
    let mut checked = 0;
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        let path = e.path();
        if path.extension().is_none_or(|x| x != "ptx") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let target = text
            .lines()
            .find_map(|l| {
                l.trim()
                    .strip_prefix(".target")
                    .map(|t| t.split(',').next().unwrap_or("").trim().to_string())
            })
            .unwrap_or_else(|| "sm_80".into());
        // sm_70 as well, unless the kernel uses sm_80+ types/instructions.
        let mut targets = vec![target.clone()];
        // (tensor-core and async-copy kernels name their own minimum target: sm_75 or sm_80.)
        let sm80_only = [
            "bf16", "tanh", ".NaN", "mma.", "ldmatrix", "cp.async", "tf32", "redux.",
        ]
        .iter()
        .any(|k| text.contains(k));
        if !sm80_only && target != "sm_70" {
            targets.push("sm_70".into());
        }
        for arch in targets {
            // Retarget a copy so `.target` matches `-arch`.
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let tmp = std::env::temp_dir().join(format!(
                "ptxforge-sim-ptxas-{}-{arch}-{name}",
                std::process::id()
            ));
            std::fs::write(
                &tmp,
                text.replace(&format!(".target {target}"), &format!(".target {arch}")),
            )
            .unwrap();
            let out = Command::new(&ptxas)
                .arg(format!("-arch={arch}"))
                .arg(&tmp)
                .args(["-o", "/dev/null"])
                .output()
                .expect("run ptxas");
            let _ = std::fs::remove_file(&tmp);
            checked += 1;
            if !out.status.success() {
                failures.push(format!(
                    "{} ({arch}): {}",
                    path.display(),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "ptxas rejected:\n{}",
        failures.join("\n")
    );
    assert!(checked >= 40, "only {checked} ptxas runs");
}
