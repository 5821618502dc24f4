//! Finds ptxas, or installs a pinned copy from the PyPI wheel `nvidia-cuda-nvcc-cu12` into
//! `target/tools/`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The pinned wheel version (CUDA 12.9, PTX ISA 8.8).
const WHEEL_VERSION: &str = "12.9.86";
/// The assembler's path inside the wheel.
const PTXAS_IN_WHEEL: &str = "nvidia/cuda_nvcc/bin/ptxas";

/// `$PTXAS`, else `ptxas` on PATH, else `target/tools/ptxas` (downloaded if missing).
pub fn ensure(root: &Path) -> Result<PathBuf, String> {
    if let Some(p) = ptxforge_runtime::ptxas::locate() {
        return Ok(p);
    }
    let tools = root.join("target").join("tools");
    let ptxas = tools.join("ptxas");
    if ptxas.is_file() {
        return Ok(ptxas);
    }
    let wheels = tools.join("wheel");
    std::fs::create_dir_all(&wheels).map_err(|e| format!("{}: {e}", wheels.display()))?;
    eprintln!("xtask: downloading nvidia-cuda-nvcc-cu12=={WHEEL_VERSION} from PyPI for ptxas");
    let python = python()?;
    let status = Command::new(&python)
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--platform",
            "manylinux2014_x86_64",
        ])
        .arg(format!("nvidia-cuda-nvcc-cu12=={WHEEL_VERSION}"))
        .arg("-d")
        .arg(&wheels)
        .status()
        .map_err(|e| format!("could not run pip: {e}"))?;
    if !status.success() {
        return Err(format!(
            "pip download of nvidia-cuda-nvcc-cu12=={WHEEL_VERSION} failed"
        ));
    }
    let extract = format!(
        "import glob, sys, zipfile\n\
         whl = sorted(glob.glob(sys.argv[1] + '/nvidia_cuda_nvcc_cu12-{WHEEL_VERSION}-*.whl'))[0]\n\
         data = zipfile.ZipFile(whl).read('{PTXAS_IN_WHEEL}')\n\
         open(sys.argv[2], 'wb').write(data)\n"
    );
    let status = Command::new(&python)
        .args(["-c", &extract])
        .arg(&wheels)
        .arg(&ptxas)
        .status()
        .map_err(|e| format!("could not run python: {e}"))?;
    if !status.success() {
        return Err("could not extract ptxas from the wheel".into());
    }
    make_executable(&ptxas)?;
    Ok(ptxas)
}

fn python() -> Result<String, String> {
    for candidate in ["python3", "python"] {
        if Command::new(candidate)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            return Ok(candidate.to_string());
        }
    }
    Err("python3 with pip is needed to download ptxas".into())
}

#[cfg(unix)]
fn make_executable(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(not(unix))]
fn make_executable(_: &Path) -> Result<(), String> {
    Ok(())
}
