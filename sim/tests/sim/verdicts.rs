//! core's preflight verdicts on the simulated profiles and faults: healthy passes, degraded PCIe,
//! slow links, busy and broken GPUs, hangs, topology classes.

use super::*;
use ddpcheck_core::explain::platform::{FabricState, GpuFabricState};
use ddpcheck_core::preflight::judge_fabric;
use ddpcheck_core::report::StepStatus;

#[test]
fn healthy_profiles_pass_the_preflight_against_the_reference_table() {
    // The bridged H100 PCIe pair reproduces the one published figure (116 GB/s,
    // NVIDIA/nccl#1161), which the table's NV12 row (A100 SXM, ~230) reads as a warning;
    // cli/tests/field_profiles.rs holds what it is judged.
    for p in profiles().into_iter().filter(|p| *p != "h100pcie-nvbridge") {
        let r = preflight(p);
        assert_eq!(
            r.verdict,
            Verdict::Ok,
            "{p}: {} {:#?}",
            r.reason,
            r.findings
        );
        assert_eq!(r.header.backend, BackendKind::Sim);
        assert_eq!(r.header.backend_label, format!("sim:{p}"));
        // The expected-busbw table of core/src/expect.rs covers the profile and agrees with it.
        let e = r
            .expected
            .as_ref()
            .unwrap_or_else(|| panic!("{p}: no expectation"));
        let ok = r.findings.iter().find(|f| f.code == "busbw_ok");
        assert!(
            ok.is_some(),
            "{p}: expected {} GB/s, findings {:#?}",
            e.busbw_gbps,
            r.findings
        );
        assert!(
            r.findings.iter().all(|f| f.severity == Severity::Info),
            "{p}"
        );
        assert!(r
            .header
            .provenance
            .nccl_version
            .clone()
            .unwrap()
            .ends_with("(sim)"));
    }
}

#[test]
fn degraded_pcie_warns_naming_the_gpu_and_width() {
    let b = sim("h200x2-nvlink");
    let gpu1 = b.inventory().unwrap().gpus[1].uuid.clone();
    let r = preflight("h200x2-nvlink+degraded-pcie");
    assert_eq!(r.verdict, Verdict::Warning, "{}", r.reason);
    assert!(
        r.reason.contains(&gpu1) && r.reason.contains("x8"),
        "{}",
        r.reason
    );
    let f = r
        .findings
        .iter()
        .find(|f| f.code == "pcie_downtrained")
        .unwrap();
    assert!(
        f.message.contains("gen4 x8") && f.message.contains("gen5 x16"),
        "{}",
        f.message
    );
    // NVLink carries the all-reduce: its bandwidth is unchanged.
    let healthy = preflight("h200x2-nvlink").all_reduce.unwrap();
    let degraded = r.all_reduce.unwrap();
    assert_eq!(healthy.peak_busbw(0), degraded.peak_busbw(0));
    // On a PCIe-only node the same fault also slows the ring.
    let r = preflight("a6000x4-phb+degraded-pcie");
    assert_eq!(r.verdict, Verdict::Warning, "{}", r.reason);
    let (_, bw) = r.all_reduce.unwrap().peak_busbw(0).unwrap();
    assert!(bw < 3.5, "{bw}");
}

/// idle-downclock: gen1 at rest, the maximum once a collective ran; degraded-pcie stays below
/// its maximum under load too. Bandwidth and the preflight verdict are unchanged.
#[test]
fn idle_downclock_trains_up_under_load_degraded_pcie_does_not() {
    let b = sim("h200x2-nvlink+idle-downclock");
    let gpus = b.inventory().unwrap().gpus;
    let gen_width = |l: &ddpcheck_core::explain::platform::SysfsLink| {
        (l.current_gts, l.max_gts, l.current_width)
    };
    let rest = b.link_state(&gpus).unwrap();
    assert_eq!(gpus[0].pcie.unwrap().gen_current, 1);
    assert_eq!(gen_width(&rest[0].link), (Some(2.5), Some(32.0), Some(16)));
    b.collectives(
        &sweep_req(&b, &[Collective::AllReduce], 2, &[]),
        &mut |_| {},
    )
    .unwrap();
    let load = b.link_state(&gpus).unwrap();
    assert_eq!(gen_width(&load[0].link), (Some(32.0), Some(32.0), Some(16)));
    assert_eq!(load[1].pci_bus_id, gpus[1].pci_bus_id);

    let d = sim("h200x2-nvlink+degraded-pcie");
    let gpus = d.inventory().unwrap().gpus;
    d.collectives(
        &sweep_req(&d, &[Collective::AllReduce], 2, &[]),
        &mut |_| {},
    )
    .unwrap();
    let load = d.link_state(&gpus).unwrap();
    assert_eq!(gen_width(&load[1].link), (Some(16.0), Some(32.0), Some(8)));

    let r = preflight("a6000x4-phb+idle-downclock");
    assert_eq!(r.verdict, preflight("a6000x4-phb").verdict, "{}", r.reason);
}

#[test]
fn slow_link_is_warning_or_critical_everywhere() {
    for p in profiles() {
        let r = preflight(&format!("{p}+slow-link"));
        assert!(
            matches!(r.verdict, Verdict::Warning | Verdict::Critical),
            "{p}: {}",
            r.reason
        );
        assert!(
            r.findings.iter().any(|f| f.code == "busbw_below_expected"),
            "{p}"
        );
    }
}

#[test]
fn busy_gpu_gives_busy_and_names_the_process() {
    for p in profiles() {
        let r = preflight(&format!("{p}+busy"));
        assert_eq!(r.verdict, Verdict::Busy, "{p}");
        assert!(r.reason.contains("4242"), "{}", r.reason);
        let procs = &r.gpus[0].processes;
        assert_eq!(procs[0].name.as_deref(), Some("python3"));
    }
    // Direct GPU work on the busy GPU is refused, not run.
    let b = sim("t4x2-pcie+busy");
    let req = sweep_req(&b, &[Collective::AllReduce], 2, &[]);
    assert!(matches!(
        b.collectives(&req, &mut |_| {}),
        Err(ProbeError::Busy(_))
    ));
}

#[test]
fn hang_times_out_at_the_deadline() {
    let opts = PreflightOptions {
        deadline: Duration::from_millis(200),
        ..PreflightOptions::default()
    };
    let t0 = Instant::now();
    let r = preflight_with("h200x2-nvlink+hang", &opts);
    let wall = t0.elapsed();
    assert_eq!(r.verdict, Verdict::Timeout, "{}", r.reason);
    assert!(wall >= Duration::from_millis(200), "{wall:?}");
    assert!(wall < Duration::from_secs(5), "{wall:?}");
    // The request's own hang hook behaves the same on a healthy profile.
    let opts = PreflightOptions {
        inject_hang: true,
        ..opts
    };
    assert_eq!(preflight_with("t4x2-pcie", &opts).verdict, Verdict::Timeout);
}

#[test]
fn broken_gpus_are_critical() {
    for p in profiles() {
        for f in ["stuck-nvml", "gpu-lost", "ecc", "wrong-result"] {
            let r = preflight(&format!("{p}+{f}"));
            assert_eq!(r.verdict, Verdict::Critical, "{p}+{f}: {}", r.reason);
        }
    }
    let r = preflight("h200x2-nvlink+wrong-result");
    assert!(r.findings.iter().any(|f| f.code == "allreduce_wrong"));
    let r = preflight("a6000x4-phb+ecc");
    assert!(r.findings.iter().any(|f| f.code == "ecc_uncorrected"));
    assert_eq!(r.gpus[0].health.ecc_uncorrected_volatile, Some(2));
    // A lost GPU cannot run collectives: a GPU failure, not a crash.
    let b = sim("h200x2-nvlink+gpu-lost");
    let req = sweep_req(&b, &[Collective::AllReduce], 2, &[]);
    assert!(matches!(
        b.collectives(&req, &mut |_| {}),
        Err(ProbeError::GpuFailed(_))
    ));
}

#[test]
fn topology_uses_the_profile_classes() {
    for (p, class) in [
        ("a6000x4-phb", LinkClass::Phb),
        ("t4x2-pcie", LinkClass::Phb),
        ("h200x2-nvlink", LinkClass::Nv(18)),
        ("h200x8-nvswitch", LinkClass::Nv(18)),
    ] {
        let b = sim(p);
        let gpus = b.inventory().unwrap().gpus;
        let t = b.topology(&gpus).unwrap();
        t.validate().unwrap();
        assert!(t.pairs().iter().all(|x| x.link == class), "{p}");
        // A subset of the GPUs gives the subset's matrix.
        assert_eq!(b.topology(&gpus[..2]).unwrap().gpus.len(), 2);
    }
}

/// An NVSwitch node whose Fabric Manager is down: the GPUs' fabric registration, read before
/// any CUDA work, is CRITICAL on eight GPUs and on one (where no collective runs that would
/// fail), and no GPU work starts.
#[test]
fn a_fabric_not_registered_is_critical_before_any_cuda_work_on_one_gpu_or_eight() {
    for filter in ["", "0"] {
        let opts = PreflightOptions {
            gpu_filter: filter.into(),
            ..PreflightOptions::default()
        };
        let r = preflight_with("h200x8-nvswitch+no-fabric-manager", &opts);
        assert_eq!(r.verdict, Verdict::Critical, "{filter:?}: {}", r.reason);
        let f = r
            .findings
            .iter()
            .find(|f| f.code == "fabric_manager_down")
            .unwrap();
        assert_eq!(f.severity, Severity::Critical);
        assert!(r.reason.contains("Not Started") && r.reason.contains("nvidia-fabricmanager"));
        let step = |n: &str| r.steps.iter().find(|s| s.name == n).unwrap();
        assert_eq!(step("fabric").detail, "Not Started (simulated NVML)");
        for skipped in ["host_copies", "all_reduce"] {
            assert_eq!(step(skipped).status, StepStatus::Skipped, "{skipped}");
        }
    }
    let up = preflight("h200x8-nvswitch");
    let fabric = up.steps.iter().find(|s| s.name == "fabric").unwrap();
    assert_eq!(fabric.detail, "Completed (simulated NVML)");
    assert!(up.findings.iter().all(|f| f.code != "fabric_manager_down"));
    let pcie = preflight("h200x2-nvlink");
    let fabric = pcie.steps.iter().find(|s| s.name == "fabric").unwrap();
    assert_eq!(fabric.detail, "no NVLink fabric");
}

#[test]
fn a_registered_fabric_reporting_a_health_issue_warns() {
    let mut f = GpuFabricState::of_gpu(FabricState::Completed, Some("Success".into()), "NVML");
    assert!(judge_fabric(&f).is_none(), "registered and healthy");
    f.health = vec!["bandwidth degraded".into()];
    f.gpus_unhealthy = 1;
    let w = judge_fabric(&f).unwrap();
    assert_eq!(
        (w.code.as_str(), w.severity),
        ("fabric_manager_down", Severity::Warning)
    );
    assert!(w
        .message
        .contains("of 1 GPU is registered but reports bandwidth degraded"));
    let failed = GpuFabricState::of_gpu(FabricState::Completed, Some("Failure".into()), "NVML");
    let c = judge_fabric(&failed).unwrap();
    assert_eq!(
        c.severity,
        Severity::Critical,
        "completed with a failure is not registered"
    );
    assert!(
        c.message.contains("Completed, status Failure"),
        "{}",
        c.message
    );
}
