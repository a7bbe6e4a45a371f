//! The host-copy worker end to end against the fake libcuda (nccl/testdata/fake_gpu.c), whose
//! copies advance its clock at a set rate per GPU: the rates come back, a missing call skips
//! with one line, a copy that never ends meets the worker's deadline.

use super::*;
use std::time::{Duration, Instant};

use ddpcheck_core::hostcopy::CopyDirection;
use ddpcheck_core::topology::GpuRef;

use crate::nccl::loader;

const CHILD_VAR: &str = "DDPCHECK_TEST_COPY_WORKER_CHILD";

/// Not a test on its own: the body of the worker child in the tests below.
#[test]
fn copy_worker_child_entry() {
    if std::env::var_os(CHILD_VAR).is_none() {
        return;
    }
    let code = crate::worker::main_from_args(&[crate::worker::HOST_COPIES_ARG.to_string()]);
    // SAFETY: ends the child test process with the worker's code.
    unsafe { libc::_exit(code) }
}

/// The fake libcuda, built with `defines`; `None` (and a note) without a C compiler.
fn fake_cuda(defines: &[&str]) -> Option<tempfile::TempDir> {
    let dir = tempfile::tempdir().unwrap();
    let so = dir.path().join("libcuda.so.1");
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/src/nccl/testdata/fake_gpu.c");
    let built = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-pthread", "-O1"])
        .args(defines)
        .arg("-o")
        .arg(&so)
        .arg(src)
        .status()
        .is_ok_and(|s| s.success());
    if !built {
        eprintln!("no C compiler: skipping the fake-GPU host-copy test");
        return None;
    }
    Some(dir)
}

fn child(libs: &std::path::Path, extra: &[(&str, &str)]) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args([
        "--exact",
        "hostcopy::tests::copy_worker_child_entry",
        "--nocapture",
        "--quiet",
        "--test-threads=1",
    ])
    .env(CHILD_VAR, "1")
    .env(loader::CUDA_ENV, libs.join("libcuda.so.1"))
    .env("FAKE_GPUS", "2")
    .envs(extra.iter().copied());
    c
}

fn request(deadline: Duration) -> CopyRequest {
    let gpu = |i: u32| GpuRef {
        index: i,
        uuid: format!("GPU-{i}"),
        pci_bus_id: format!("00000000:1{i}:00.0"),
    };
    CopyRequest {
        sizes: vec![1 << 20, 16 << 20],
        ..CopyRequest::preflight(vec![gpu(0), gpu(1)], deadline)
    }
}

fn opts(deadline: Duration) -> Options {
    Options::test_binary_child(deadline)
}

#[test]
fn fake_gpus_copy_at_their_set_rates() {
    let Some(libs) = fake_cuda(&[]) else { return };
    let req = request(Duration::from_secs(30));
    let mut notes = Vec::new();
    let run = run_copy_worker(
        child(libs.path(), &[("FAKE_COPY_GBPS", "26,6.5")]),
        &req,
        &opts(req.deadline),
        &mut |p| notes.push(p),
    )
    .unwrap();
    assert!(run.cuda_library.unwrap().ends_with("libcuda.so.1"));
    assert_eq!(run.gpus.len(), 2);
    for (g, want) in run.gpus.iter().zip([26.0, 6.5]) {
        assert_eq!(g.samples.len(), 2 * req.sizes.len(), "{}", g.gpu.uuid);
        assert!(g.samples.iter().all(|s| s.iters == req.iters));
        for d in CopyDirection::BOTH {
            let best = g.best(d).unwrap();
            assert!(
                (best.gbps / want - 1.0).abs() < 0.05,
                "{} {d:?}: {}",
                g.gpu.uuid,
                best.gbps
            );
        }
    }
    assert_eq!(run.gpus[1].gpu.pci_bus_id, "00000000:11:00.0");
    // One note per GPU, with its figures.
    assert_eq!(notes.len(), 2, "{notes:?}");
    assert!(notes[1].message.contains("host-to-device 6."), "{notes:?}");
}

#[test]
fn a_driver_without_the_copy_calls_is_unavailable_in_one_line() {
    let Some(libs) = fake_cuda(&["-DFAKE_NO_HOST_COPIES"]) else {
        return;
    };
    let req = request(Duration::from_secs(30));
    match run_copy_worker(
        child(libs.path(), &[]),
        &req,
        &opts(req.deadline),
        &mut |_| {},
    ) {
        Err(ProbeError::Unavailable(m)) => {
            assert!(m.contains("has no cuMemHostAlloc"), "{m}");
            assert!(!m.contains('\n'), "{m}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_copy_that_never_ends_meets_the_worker_deadline() {
    let Some(libs) = fake_cuda(&[]) else { return };
    let deadline = Duration::from_millis(1500);
    let req = request(deadline);
    let t = Instant::now();
    let r = run_copy_worker(
        child(libs.path(), &[("FAKE_COPY_HANG", "1")]),
        &req,
        &opts(deadline),
        &mut |_| {},
    );
    match r {
        Err(ProbeError::Timeout { stage, seconds }) => {
            // The worker's own event, naming what it was doing.
            assert!(stage.starts_with("host copies (GPU 0"), "{stage}");
            assert!(
                stage.contains("host-to-device copies of 1048576 B"),
                "{stage}"
            );
            assert_eq!(seconds, 1.5);
        }
        other => panic!("{other:?}"),
    }
    assert!(
        t.elapsed() < deadline + Duration::from_millis(1500),
        "{:?}",
        t.elapsed()
    );
}

#[test]
fn a_gpu_cuda_does_not_see_is_unavailable_and_bad_requests_start_nothing() {
    let Some(libs) = fake_cuda(&[]) else { return };
    let mut req = request(Duration::from_secs(30));
    req.gpus[1].pci_bus_id = "00000000:99:00.0".into();
    match run_copy_worker(
        child(libs.path(), &[]),
        &req,
        &opts(req.deadline),
        &mut |_| {},
    ) {
        Err(ProbeError::Unavailable(m)) => assert!(m.contains("not visible"), "{m}"),
        other => panic!("{other:?}"),
    }
    let mut req = request(Duration::from_secs(5));
    req.sizes.clear();
    let cfg = RealConfig {
        worker_exe: "/nonexistent/never-started".into(),
        ..RealConfig::default()
    };
    let r = run_host_copies(&cfg, &req, &mut |_| {});
    assert!(matches!(r, Err(ProbeError::Invalid(_))), "{r:?}");
}
