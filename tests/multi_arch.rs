//! Kernels built for several targets (`arch = [..]`): one module per target is embedded, and
//! the wrappers launch the highest target the device runs, or fail with a typed error before
//! launching anything when every target is newer than the device.

use ptxforge::prelude::*;
use ptxforge::runtime::launch::RecordingBackend;

#[nf4_gemm(n = 64, k = 128, dtype = f32, arch = [sm_90, sm_75])]
#[derive(Debug)]
pub struct Proj;

fn run(dev: &RecordingBackend) -> Result<(), LaunchError> {
    let weights = Proj.upload_weights(dev, &vec![0.5f32; 64 * 128])?;
    let a = dev.upload(&vec![1.0f32; 128])?;
    let mut c = dev.alloc::<f32>(64)?;
    Proj.forward(dev, 1, &a, &weights, &mut c)
}

/// The module text a recorded launch used.
fn launched_target(dev: &RecordingBackend) -> &'static str {
    let launch = dev.launches().pop().expect("one launch");
    if (launch.ptx_addr, launch.ptx_len) == (Proj::PTX.as_ptr() as usize, Proj::PTX.len()) {
        return "sm_75";
    }
    let [(_, (_, low)), (_, (_, high))] = Proj::__targets() else {
        panic!("two targets expected");
    };
    match (launch.ptx_addr, launch.ptx_len) {
        at if at == (low.as_ptr() as usize, low.len()) => "sm_75",
        at if at == (high.as_ptr() as usize, high.len()) => "sm_90",
        _ => panic!("launched a module that is not embedded"),
    }
}

#[test]
fn one_module_per_target_lowest_first() {
    assert!(Proj::PTX.contains("\n.target sm_75\n"));
    assert!(Proj::PTX_SM_90.contains("\n.target sm_90\n"));
    assert_eq!(Proj::CONFIG.arch, Arch::Sm75);
    let targets: Vec<Arch> = Proj::__targets().iter().map(|(a, _)| *a).collect();
    assert_eq!(targets, [Arch::Sm75, Arch::Sm90]);
    assert_eq!(Proj::__targets()[1].1 .0.arch, Arch::Sm90);
}

#[test]
fn wrappers_pick_the_highest_target_the_device_runs() {
    for (device, want) in [
        (Arch::Sm75, "sm_75"),
        (Arch::Sm80, "sm_75"),
        (Arch::Sm89, "sm_75"),
        (Arch::Sm90, "sm_90"),
        (Arch::Sm90a, "sm_90"),
    ] {
        let dev = RecordingBackend::with_arch(device);
        run(&dev).unwrap_or_else(|e| panic!("{device}: {e}"));
        assert_eq!(launched_target(&dev), want, "device {device}");
    }
    // A backend without a device architecture (the interpreter) runs the highest.
    let dev = RecordingBackend::new();
    run(&dev).expect("launch");
    assert_eq!(launched_target(&dev), "sm_90");
}

#[test]
fn a_device_below_every_target_is_a_typed_error_before_launch() {
    let dev = RecordingBackend::with_arch(Arch::Sm70);
    match run(&dev) {
        Err(LaunchError::NoTargetForDevice { device, targets }) => {
            assert_eq!(device, "sm_70");
            assert_eq!(targets, "sm_75, sm_90");
        }
        other => panic!("expected NoTargetForDevice, got {other:?}"),
    }
    assert!(dev.launches().is_empty());
}

#[test]
fn both_targets_compute_the_same_on_the_interpreter() {
    let (n, k) = (64usize, 128usize);
    let w: Vec<f32> = (0..n * k)
        .map(|i| ((i * 7 % 13) as f32 - 6.0) / 8.0)
        .collect();
    let x: Vec<f32> = (0..k).map(|i| (i % 5) as f32 - 2.0).collect();
    let dev = SimBackend::new();
    let weights = Proj.upload_weights(&dev, &w).unwrap();
    let a = dev.upload(&x).unwrap();
    let mut outs = Vec::new();
    for (arch, (config, ptx)) in Proj::__targets() {
        let mut c = dev.alloc::<f32>(n).unwrap();
        ptxforge::runtime::templates::nf4::launch::forward(
            config, &dev, ptx, 1, &a, &weights, &mut c,
        )
        .unwrap_or_else(|e| panic!("{arch}: {e}"));
        outs.push(dev.download(&c).unwrap());
    }
    assert_eq!(outs[0], outs[1]);
    let mut c = dev.alloc::<f32>(n).unwrap();
    Proj.forward(&dev, 1, &a, &weights, &mut c).unwrap();
    assert_eq!(dev.download(&c).unwrap(), outs[1]);
}
