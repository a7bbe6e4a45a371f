//! Each GPU's host copies over its own link on the simulated nodes, and how their failures skip or
//! end the preflight.

use super::*;

/// Every GPU's own link: a healthy H200 copies at about 55 GB/s each way; degraded-pcie's GPU,
/// alone on a one-GPU check, gets a bandwidth verdict of its own (WARNING, both bounds broken).
#[test]
fn host_copies_judge_each_gpus_own_link() {
    let one = |spec: &str, gpu: &str| {
        let opts = PreflightOptions {
            gpu_filter: gpu.into(),
            ..PreflightOptions::default()
        };
        preflight_with(spec, &opts)
    };
    let r = one("h200x2-nvlink", "1");
    assert_eq!(r.verdict, Verdict::Ok, "{}", r.reason);
    let copies = r.host_copies.as_ref().unwrap();
    assert_eq!(copies.gpus.len(), 1);
    for d in ddpcheck_core::hostcopy::CopyDirection::BOTH {
        let best = copies.gpus[0].best(d).unwrap();
        assert_eq!(best.bytes, 256 << 20);
        assert!(within(best.gbps, 54.8, 0.02), "{d:?}: {}", best.gbps);
    }
    assert!(
        r.reason
            .contains("single GPU healthy: copies host-to-device 54."),
        "{}",
        r.reason
    );
    let step = r.steps.iter().find(|s| s.name == "host_copies").unwrap();
    assert_eq!(step.status, ddpcheck_core::report::StepStatus::Ok);

    let r = one("h200x2-nvlink+degraded-pcie", "1");
    assert_eq!(r.verdict, Verdict::Warning, "{}", r.reason);
    let codes: Vec<&str> = r.findings.iter().map(|f| f.code.as_str()).collect();
    for want in ["host_copy_below_capacity", "host_copy_below_reference"] {
        assert_eq!(
            codes.iter().filter(|c| **c == want).count(),
            2,
            "{want}: {codes:?}"
        );
    }
    // gen4 x8 under load: 15.75 GB/s × 0.87.
    let best = r.host_copies.as_ref().unwrap().gpus[0]
        .best(ddpcheck_core::hostcopy::CopyDirection::HostToDevice)
        .unwrap()
        .gbps;
    assert!(within(best, 13.7, 0.02), "{best}");
    // The link read from NVML stays the reason; the copies measure what it costs.
    assert!(
        r.reason.contains("PCIe link runs at gen4 x8"),
        "{}",
        r.reason
    );
    let f = r
        .findings
        .iter()
        .find(|f| f.code == "host_copy_below_capacity")
        .unwrap();
    assert!(
        f.message.contains("NVML reads gen4 x8 now"),
        "{}",
        f.message
    );
    // The healthy GPU of the same node is not flagged.
    let r = one("h200x2-nvlink+degraded-pcie", "0");
    assert!(
        !r.findings
            .iter()
            .any(|f| f.code.starts_with("host_copy_below")),
        "{:#?}",
        r.findings
    );

    // Turned off: the step is skipped and nothing is measured.
    let opts = PreflightOptions {
        host_copies: false,
        ..PreflightOptions::default()
    };
    let r = preflight_with("h200x2-nvlink+degraded-pcie", &opts);
    assert!(r.host_copies.is_none());
    let step = r.steps.iter().find(|s| s.name == "host_copies").unwrap();
    assert_eq!(step.status, ddpcheck_core::report::StepStatus::Skipped);
    // A busy GPU: no copies start either.
    let r = preflight("h200x2-nvlink+busy");
    assert!(r.host_copies.is_none());
}

/// A simulated node whose host copies fail as given: the preflight's handling of each failure.
struct CopiesFail(SimBackend, ProbeError);

impl NodeBackend for CopiesFail {
    fn kind(&self) -> BackendKind {
        self.0.kind()
    }
    fn label(&self) -> String {
        self.0.label()
    }
    fn inventory(&self) -> Result<ddpcheck_core::node_gpus::NodeInventory, ProbeError> {
        self.0.inventory()
    }
    fn topology(
        &self,
        gpus: &[ddpcheck_core::node_gpus::GpuInfo],
    ) -> Result<ddpcheck_core::topology::TopologyMatrix, ProbeError> {
        self.0.topology(gpus)
    }
    fn collectives(
        &self,
        req: &CollectiveRequest,
        progress: &mut dyn FnMut(ddpcheck_core::backend::Progress),
    ) -> Result<CollectiveRun, ProbeError> {
        self.0.collectives(req, progress)
    }
    fn ddp(
        &self,
        req: &DdpRequest,
        progress: &mut dyn FnMut(ddpcheck_core::backend::Progress),
    ) -> Result<Vec<DdpResult>, ProbeError> {
        self.0.ddp(req, progress)
    }
}

impl HostCopier for CopiesFail {
    fn host_copies(
        &self,
        _req: &ddpcheck_core::hostcopy::CopyRequest,
        _progress: &mut dyn FnMut(ddpcheck_core::backend::Progress),
    ) -> Result<ddpcheck_core::hostcopy::HostCopyRun, ProbeError> {
        Err(self.1.clone())
    }
}

// The platform and cluster runs answer their defaults, as this double did before.
impl PlatformReader for CopiesFail {}
impl ClusterMember for CopiesFail {}

/// A driver without the copy calls skips the step with its one line and the all-reduce still
/// judges the node; a copy that hangs or a crashed child ends the preflight with its verdict.
#[test]
fn host_copy_failures_skip_or_end_the_preflight() {
    let with = |e: ProbeError| {
        let b = CopiesFail(sim("h200x2-nvlink"), e);
        preflight::run(&b, &PreflightOptions::default(), &mut |_| {}).unwrap()
    };
    let step = |r: &PreflightReport, name: &str| r.steps.iter().find(|s| s.name == name).cloned();
    let r = with(ProbeError::Unavailable(
        "libcuda.so.1 has no cuMemHostAlloc".into(),
    ));
    assert_eq!(r.verdict, Verdict::Ok, "{}", r.reason);
    let s = step(&r, "host_copies").unwrap();
    assert_eq!(s.status, ddpcheck_core::report::StepStatus::Skipped);
    assert_eq!(s.detail, "libcuda.so.1 has no cuMemHostAlloc");
    assert!(r.findings.iter().any(|f| f.code == "host_copy_unmeasured"));
    assert!(r.all_reduce.is_some());

    let r = with(ProbeError::Timeout {
        stage: "host copies (GPU 0 host-to-device copies of 1048576 B)".into(),
        seconds: 30.0,
    });
    assert_eq!(r.verdict, Verdict::Timeout, "{}", r.reason);
    assert_eq!(
        step(&r, "host_copies").unwrap().status,
        ddpcheck_core::report::StepStatus::Failed
    );
    assert!(step(&r, "all_reduce").is_none() && r.all_reduce.is_none());

    let r = with(ProbeError::Worker(
        "host-copy worker exited (signal 11)".into(),
    ));
    assert_eq!(r.verdict, Verdict::Unknown, "{}", r.reason);
    let r = with(ProbeError::GpuFailed(
        "cuMemcpyHtoDAsync failed: 700".into(),
    ));
    assert_eq!(r.verdict, Verdict::Critical, "{}", r.reason);
    // A bad request is the caller's error, not a verdict.
    let b = CopiesFail(sim("h200x2-nvlink"), ProbeError::Invalid("x".into()));
    assert!(preflight::run(&b, &PreflightOptions::default(), &mut |_| {}).is_err());
}
