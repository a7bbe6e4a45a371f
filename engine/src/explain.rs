//! `ddpcheck explain`'s run on a backend: read the platform, measure each GPU pair with a short
//! all-reduce sweep (NCCL's transport read from its log, the PCIe links read again under load),
//! judge with `core::explain`, and where asked measure the env fixes again (the A/B). After a preflight, the same judgement on what
//! that preflight measured (`causes_after_preflight`), for the daemon's cause metric.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ddpcheck_core::backend::{CollectiveRequest, CollectiveRun, Progress};
use ddpcheck_core::collective::{judged_peak, Collective};
use ddpcheck_core::explain::platform::{normalise_bdf, LinkReading};
use ddpcheck_core::explain::{
    self, AbFigure, ExplainInput, NodeMeasurement, PairMeasurement, PlatformFacts,
};
use ddpcheck_core::hostcopy::{self, CopyRequest, HostCopyRun};
use ddpcheck_core::node_gpus::{busy_gpus, busy_reason, select_gpus, GpuInfo, ProbeState};
use ddpcheck_core::report::{ExplainReport, Header, PreflightReport, ReportKind};
use ddpcheck_core::topology::TopologyMatrix;
use ddpcheck_core::Finding;
use ddpcheck_core::{FullBackend, ProbeError, Verdict};

use ddpcheck_core::num::len_u32;
use ddpcheck_core::params::ExplainParams;

use crate::runs::{env_label, nccl_env_from_process, provenance};

/// Runs `explain` on a backend. Faults of a measurement become part of the answer (the pair's
/// error, a verdict); only invalid input is `Err`.
pub fn run_explain(
    backend: &dyn FullBackend,
    params: &ExplainParams,
    history_busbw: &[f64],
    progress: &mut dyn FnMut(Progress),
) -> Result<ExplainReport, ProbeError> {
    let inv = backend.inventory()?;
    let gpus = select_gpus(&inv.gpus, &params.gpus)?;
    if gpus.is_empty() {
        return Err(ProbeError::Unavailable("no GPU found on this node".into()));
    }
    let busy = busy_gpus(&gpus);
    if !busy.is_empty() {
        return Err(ProbeError::Busy(busy_reason(&busy)));
    }
    let topology = backend
        .topology(&gpus)
        .ok()
        .filter(|t| t.validate().is_ok());
    let mut platform = backend
        .platform(&gpus)
        .unwrap_or_else(|e| PlatformFacts::unknown(&e.to_string()));
    let env = nccl_env_from_process();
    let mut prov = provenance(&inv, &gpus);
    let mut copies = measure_host_copies(backend, params, &gpus, &mut platform, progress)?;
    let (measurements, mut failures) = measure_pairs(
        backend,
        params,
        &gpus,
        topology.as_ref(),
        &mut platform,
        progress,
    )?;
    let node_measurement = match topology.as_ref() {
        Some(_) if gpus.len() > 2 => Some(measure_node(
            backend,
            params,
            &gpus,
            &mut platform,
            &mut failures,
            progress,
        )?),
        _ => None,
    };
    let mut explanation = explain::explain(&ExplainInput {
        gpus: &gpus,
        topology: topology.as_ref(),
        platform: &platform,
        nccl_env: &env,
        measurements: &measurements,
        node_measurement: node_measurement.as_ref(),
        history_busbw,
    });
    if params.ab {
        run_ab(backend, params, &gpus, &mut explanation, progress)?;
    }
    prov.nccl_version = failures.nccl_version.clone();
    failures.verdicts.append(&mut copies.verdicts);
    if let Some(e) = copies.error.take() {
        failures.first_error.get_or_insert(e);
    }
    let verdict = failures.verdicts.iter().fold(
        explanation
            .verdict()
            .worse(Verdict::from_findings(&copies.findings)),
        |v, f| v.worse(*f),
    );
    // The worse of the worst cause and the worst copy finding gives the one line.
    let copy_worst = copies
        .findings
        .iter()
        .filter(|f| f.severity > ddpcheck_core::Severity::Info)
        .max_by_key(|f| f.severity);
    let reason = match (
        explanation.worst(),
        copy_worst,
        failures.first_error.as_deref(),
    ) {
        (Some(c), Some(f), _) if f.severity > c.severity => f.message.clone(),
        (Some(c), _, _) => c.message.clone(),
        (None, Some(f), _) => f.message.clone(),
        (None, None, Some(e)) => e.to_string(),
        (None, None, None) => explanation
            .platform_limit_summary()
            .unwrap_or_else(|| "no cause of low bandwidth found".to_string()),
    };
    Ok(ExplainReport {
        header: Header::new(ReportKind::Explain, backend.kind(), backend.label(), prov),
        reason: format!("ddpcheck: {}: {reason}", verdict.as_str()),
        exit_code: verdict.exit_code(),
        verdict,
        gpus,
        topology,
        platform,
        measurements,
        host_copies: copies.run,
        host_copy_findings: copies.findings,
        explanation,
    })
}

/// Each GPU's host copies as explain measured them, judged, and what failed.
#[derive(Default)]
struct Copies {
    run: Option<HostCopyRun>,
    findings: Vec<Finding>,
    verdicts: Vec<Verdict>,
    error: Option<String>,
}

/// Times each GPU's host↔device copies, reading the links under that load (on one GPU the
/// only load explain puts on its link); a GPU that is stuck or lost starts none.
fn measure_host_copies(
    backend: &dyn FullBackend,
    params: &ExplainParams,
    gpus: &[GpuInfo],
    platform: &mut PlatformFacts,
    progress: &mut dyn FnMut(Progress),
) -> Result<Copies, ProbeError> {
    let mut out = Copies::default();
    if gpus.iter().any(|g| g.state != ProbeState::Ok) {
        return Ok(out);
    }
    progress(Progress {
        stage: "host_copies".into(),
        done: 0,
        total: 1,
        message: "host↔device copies on each GPU's link".into(),
    });
    let req = CopyRequest::preflight(gpus.iter().map(GpuInfo::gpu_ref).collect(), params.deadline);
    req.validate()?;
    let (run, links) = under_load(backend, gpus, || backend.host_copies(&req, &mut |_| {}));
    match run {
        Ok(run) => {
            keep_under_load(platform, links);
            out.findings = hostcopy::judge(gpus, &run);
            out.run = Some(run);
        }
        Err(ProbeError::Invalid(e)) => return Err(ProbeError::Invalid(e)),
        Err(ProbeError::Unavailable(why)) => out.findings.push(Finding::new(
            "host_copy_unmeasured",
            ddpcheck_core::Severity::Info,
            ddpcheck_core::Subject::Node,
            format!("host↔device copies not measured: {why}"),
        )),
        Err(e) => {
            out.verdicts.push(e.verdict().unwrap_or(Verdict::Unknown));
            out.error = Some(format!("host copies: {e}"));
        }
    }
    Ok(out)
}

/// The causes of low bandwidth on the GPUs a preflight ran on, from the platform and that
/// preflight's figures (no measurement of its own): its all-reduce stands for the pair where it
/// ran on two GPUs; with more, the pairs are judged without a figure. NCCL's transport is not
/// logged by a preflight, so the chains predict it from the NCCL variables the preflight ran with.
pub fn causes_after_preflight(
    backend: &dyn FullBackend,
    report: &PreflightReport,
    history_busbw: &[f64],
) -> explain::Explanation {
    let platform = backend
        .platform(&report.gpus)
        .unwrap_or_else(|e| PlatformFacts::unknown(&e.to_string()));
    let measurements: Vec<PairMeasurement> = match (report.gpus.as_slice(), &report.all_reduce) {
        ([a, b], Some(sweep)) => vec![PairMeasurement {
            a: a.index,
            b: b.index,
            busbw_gbps: judged_peak(sweep).map(|(_, busbw)| busbw),
            bytes: judged_peak(sweep).map(|(bytes, _)| bytes),
            transport: None,
            error: None,
            ..PairMeasurement::default()
        }],
        _ => Vec::new(),
    };
    // With more GPUs the preflight's all-reduce is the node's.
    let node = report
        .all_reduce
        .as_ref()
        .filter(|_| report.gpus.len() > 2)
        .map(|sweep| NodeMeasurement {
            busbw_gbps: judged_peak(sweep).map(|(_, busbw)| busbw),
            bytes: judged_peak(sweep).map(|(bytes, _)| bytes),
            transport: None,
            error: None,
        });
    explain::explain(&ExplainInput {
        gpus: &report.gpus,
        topology: report.topology.as_ref(),
        platform: &platform,
        nccl_env: &report.header.provenance.nccl_env,
        measurements: &measurements,
        node_measurement: node.as_ref(),
        history_busbw,
    })
}

/// What failed while measuring, as verdicts, and the NCCL version the runs reported.
#[derive(Default)]
struct Failures {
    verdicts: Vec<Verdict>,
    first_error: Option<String>,
    nccl_version: Option<String>,
}

fn pair_request(
    params: &ExplainParams,
    gpus: [&GpuInfo; 2],
    env: Vec<(String, String)>,
) -> CollectiveRequest {
    group_request(params, &gpus, env)
}

/// A short all-reduce sweep of `gpus` with NCCL's transport recorded.
fn group_request(
    params: &ExplainParams,
    gpus: &[&GpuInfo],
    env: Vec<(String, String)>,
) -> CollectiveRequest {
    CollectiveRequest {
        ops: vec![Collective::AllReduce],
        gpus: gpus.iter().map(|g| g.gpu_ref()).collect(),
        min_bytes: (params.max_bytes / 4).max(1),
        max_bytes: params.max_bytes,
        step_factor: 2,
        warmup_iters: 2,
        iters: 5,
        in_place: false,
        check: true,
        env,
        deadline: params.deadline,
        inject_hang: false,
        group: None,
        record_transport: true,
    }
}

/// Measures each pair of the topology; the links read under load go into `platform`.
fn measure_pairs(
    backend: &dyn FullBackend,
    params: &ExplainParams,
    gpus: &[GpuInfo],
    topology: Option<&TopologyMatrix>,
    platform: &mut PlatformFacts,
    progress: &mut dyn FnMut(Progress),
) -> Result<(Vec<PairMeasurement>, Failures), ProbeError> {
    let mut out = Vec::new();
    let mut failures = Failures::default();
    let Some(t) = topology else {
        return Ok((out, failures));
    };
    let pairs = t.pairs();
    for (n, p) in pairs.iter().enumerate() {
        let find = |uuid: &str| gpus.iter().find(|g| g.uuid == uuid);
        let (Some(a), Some(b)) = (find(&p.a.uuid), find(&p.b.uuid)) else {
            continue;
        };
        let mut m = PairMeasurement {
            a: a.index,
            b: b.index,
            ..PairMeasurement::default()
        };
        progress(Progress {
            stage: "pairs".into(),
            done: len_u32(n),
            total: len_u32(pairs.len()),
            message: format!("GPU{}–GPU{} all-reduce", a.index, b.index),
        });
        if a.state != ProbeState::Ok || b.state != ProbeState::Ok {
            let why = "a GPU of the pair is stuck or lost";
            m.error = Some(why.into());
            failures.verdicts.push(Verdict::Critical);
            failures.first_error.get_or_insert_with(|| why.into());
            out.push(m);
            continue;
        }
        let req = pair_request(params, [a, b], Vec::new());
        req.validate()?;
        let (run, links) = collective_under_load(backend, &req, &[a.clone(), b.clone()]);
        let r = read_run(run, links, platform, &mut failures)?;
        (m.busbw_gbps, m.bytes, m.transport, m.error) =
            (r.busbw_gbps, r.bytes, r.transport, r.error);
        (m.wrong, m.timed_out) = (r.wrong, r.timed_out);
        out.push(m);
    }
    Ok((out, failures))
}

/// What one all-reduce run of a pair or of the node gave.
#[derive(Default)]
struct RunReading {
    busbw_gbps: Option<f64>,
    bytes: Option<u64>,
    transport: Option<String>,
    error: Option<String>,
    wrong: Option<u64>,
    timed_out: bool,
}

/// A run's large-message figure and transport, its links kept as read under load (only a run
/// that went through loaded them); a failed run's verdict and error go into `failures` and its
/// reading says why; an invalid request ends the explain.
fn read_run(
    run: Result<CollectiveRun, ProbeError>,
    links: Vec<LinkReading>,
    platform: &mut PlatformFacts,
    failures: &mut Failures,
) -> Result<RunReading, ProbeError> {
    let mut r = RunReading::default();
    match run {
        Ok(run) => {
            keep_under_load(platform, links);
            failures.nccl_version = failures.nccl_version.take().or(run.nccl_version.clone());
            let sweep = run.sweeps.iter().find(|s| s.op == Collective::AllReduce);
            if let Some((bytes, busbw)) = sweep.and_then(judged_peak) {
                r.busbw_gbps = Some(busbw);
                r.bytes = Some(bytes);
            }
            r.transport = run.transport;
            r.wrong = sweep.and_then(|s| s.wrong_total()).filter(|w| *w > 0);
        }
        Err(ProbeError::Invalid(e)) => return Err(ProbeError::Invalid(e)),
        Err(e) => {
            r.timed_out = matches!(e, ProbeError::Timeout { .. });
            failures
                .verdicts
                .push(e.verdict().unwrap_or(Verdict::Unknown));
            failures.first_error.get_or_insert_with(|| e.to_string());
            r.error = Some(e.to_string());
        }
    }
    Ok(r)
}

/// The all-reduce of every GPU together: the node's figure, set against its ring's slowest hop.
fn measure_node(
    backend: &dyn FullBackend,
    params: &ExplainParams,
    gpus: &[GpuInfo],
    platform: &mut PlatformFacts,
    failures: &mut Failures,
    progress: &mut dyn FnMut(Progress),
) -> Result<NodeMeasurement, ProbeError> {
    let mut m = NodeMeasurement::default();
    progress(Progress {
        stage: "node".into(),
        done: 0,
        total: 1,
        message: format!("all {} GPUs all-reduce", gpus.len()),
    });
    if gpus.iter().any(|g| g.state != ProbeState::Ok) {
        m.error = Some("a GPU is stuck or lost".into());
        return Ok(m);
    }
    let refs: Vec<&GpuInfo> = gpus.iter().collect();
    let req = group_request(params, &refs, Vec::new());
    req.validate()?;
    let (run, links) = collective_under_load(backend, &req, gpus);
    let r = read_run(run, links, platform, failures)?;
    (m.busbw_gbps, m.bytes, m.transport, m.error) = (r.busbw_gbps, r.bytes, r.transport, r.error);
    Ok(m)
}

/// How often the links are read while a pair's collective runs.
const LINK_POLL: Duration = Duration::from_millis(50);

/// Runs the collective while a sampler thread reads the pair's links every [`LINK_POLL`],
/// then reads them once more right after it ends. On real GPUs a pair's sweep is mostly
/// process start and NCCL init, and its all-reduce can be shorter than a poll, so a read
/// partway through is not assured; the read right after catches the link before it drops
/// back to its idle speed. Every reading is returned; the caller keeps the fastest.
fn collective_under_load(
    backend: &dyn FullBackend,
    req: &CollectiveRequest,
    pair: &[GpuInfo],
) -> (Result<CollectiveRun, ProbeError>, Vec<LinkReading>) {
    under_load(backend, pair, || backend.collectives(req, &mut |_| {}))
}

/// Runs `work` while the GPUs' links are read, as [`collective_under_load`] says.
fn under_load<T>(
    backend: &dyn FullBackend,
    pair: &[GpuInfo],
    work: impl FnOnce() -> T,
) -> (T, Vec<LinkReading>) {
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let sampler = s.spawn(|| {
            let mut seen = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(LINK_POLL);
                seen.extend(backend.link_state(pair).unwrap_or_default());
            }
            seen
        });
        let run = work();
        stop.store(true, Ordering::Relaxed);
        let mut seen = sampler.join().unwrap_or_default();
        seen.extend(backend.link_state(pair).unwrap_or_default());
        (run, seen)
    })
}

/// Keeps the fastest reading under load of each GPU in its platform facts (readings with no
/// link speed, where sysfs had none, are left out).
fn keep_under_load(platform: &mut PlatformFacts, readings: Vec<LinkReading>) {
    for r in readings
        .into_iter()
        .filter(|r| r.link.current_gts.is_some())
    {
        let want = normalise_bdf(&r.pci_bus_id);
        if let Some(g) = platform
            .gpus
            .iter_mut()
            .find(|g| normalise_bdf(&g.pci_bus_id) == want)
        {
            g.link_under_load = Some(match g.link_under_load.take() {
                Some(old) => old.faster(r.link),
                None => r.link,
            });
        }
    }
}

/// Measures each pair with an env fix again under that fix.
fn run_ab(
    backend: &dyn FullBackend,
    params: &ExplainParams,
    gpus: &[GpuInfo],
    e: &mut explain::Explanation,
    progress: &mut dyn FnMut(Progress),
) -> Result<(), ProbeError> {
    // Pairs with a figure and a fix that is an NCCL setting, or a platform limit's alternative.
    let todo: Vec<explain::PairChain> = e
        .pairs
        .iter()
        .filter(|c| explain::ab_wanted(c))
        .cloned()
        .collect();
    for chain in todo {
        let (a, b) = (chain.a.index, chain.b.index);
        let fix = explain::ab_overrides(&chain).to_vec();
        let before = chain.busbw_gbps.unwrap_or_default();
        let before_error = chain
            .busbw_gbps
            .is_none()
            .then(|| chain.measure_error.clone())
            .flatten();
        let (Some(ga), Some(gb)) = (
            gpus.iter().find(|g| g.index == a),
            gpus.iter().find(|g| g.index == b),
        ) else {
            continue;
        };
        progress(Progress {
            stage: "ab".into(),
            done: 0,
            total: 1,
            message: format!("GPU{a}–GPU{b} under {}", env_label(&fix)),
        });
        let req = pair_request(params, [ga, gb], fix.clone());
        req.validate()?;
        let mut ab = AbFigure {
            overrides: fix,
            before_gbps: before,
            before_error,
            after_gbps: None,
            after_transport: None,
            error: None,
        };
        match backend.collectives(&req, &mut |_| {}) {
            Ok(run) => {
                ab.after_gbps = run
                    .sweeps
                    .iter()
                    .find(|s| s.op == Collective::AllReduce)
                    .and_then(judged_peak)
                    .map(|(_, b)| b);
                ab.after_transport = run.transport;
            }
            Err(err) => ab.error = Some(err.to_string()),
        }
        explain::attach_ab(e, a, b, ab);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use ddpcheck_core::explain::CauseKind;
    use ddpcheck_core::params::PreflightParams;
    use ddpcheck_sim::SimBackend;

    use super::*;
    use crate::runs::run_preflight;

    fn after_preflight(spec: &str) -> (PreflightReport, explain::Explanation) {
        let sim = SimBackend::parse(spec).unwrap();
        let r = run_preflight(&sim, &PreflightParams::default(), Vec::new(), &mut |_| {}).unwrap();
        let e = causes_after_preflight(&sim, &r, &[]);
        (r, e)
    }

    fn kinds(e: &explain::Explanation) -> Vec<CauseKind> {
        e.all_causes().map(|c| c.kind).collect()
    }

    #[test]
    fn a_healthy_node_has_no_cause() {
        let (_, e) = after_preflight("h200x2-nvlink");
        assert_eq!(kinds(&e), Vec::<CauseKind>::new());
    }

    #[test]
    fn the_platform_and_the_links_give_their_causes() {
        let (_, e) = after_preflight("t4x2-pcie+vm");
        assert!(
            kinds(&e).contains(&CauseKind::VirtualMachine),
            "{:?}",
            kinds(&e)
        );
        let (_, e) = after_preflight("a6000x4-phb+degraded-pcie");
        assert!(
            kinds(&e).contains(&CauseKind::PcieDowntrained),
            "{:?}",
            kinds(&e)
        );
    }

    fn explained(spec: &str) -> ExplainReport {
        let sim = SimBackend::parse(spec).unwrap();
        run_explain(&sim, &ExplainParams::default(), &[], &mut |_| {}).unwrap()
    }

    /// The links are read again under load: an idle gen1 link that trains to gen5 is noted, a
    /// degraded one stays a fault; both readings are in the report.
    #[test]
    fn links_are_read_again_under_load() {
        let r = explained("h200x2-nvlink+idle-downclock");
        let g = &r.platform.gpus[0];
        assert_eq!(g.link.current_gts, Some(2.5));
        assert_eq!(g.link_under_load.as_ref().unwrap().current_gts, Some(32.0));
        let k = kinds(&r.explanation);
        assert!(k.contains(&CauseKind::PcieIdleDownclock), "{k:?}");
        assert!(!k.contains(&CauseKind::PcieDowntrained), "{k:?}");
        assert_eq!(r.verdict, Verdict::Ok, "{}", r.reason);

        let r = explained("h200x2-nvlink+degraded-pcie");
        let g = &r.platform.gpus[1];
        assert_eq!(g.link_under_load.as_ref().unwrap().current_width, Some(8));
        let c = r
            .explanation
            .all_causes()
            .find(|c| c.kind == CauseKind::PcieDowntrained)
            .unwrap();
        assert!(c.message.contains("under load"), "{}", c.message);
    }

    fn explained_ab(spec: &str) -> ExplainReport {
        let sim = SimBackend::parse(spec).unwrap();
        let params = ExplainParams {
            ab: true,
            ..ExplainParams::default()
        };
        run_explain(&sim, &params, &[], &mut |_| {}).unwrap()
    }

    /// PCIe gen3 x16, one direction after 128b/130b: 15.75 GB/s.
    const GEN3_X16: f64 = 8.0 * 128.0 / 130.0 * 16.0 / 8.0;

    fn limit(causes: &[explain::Cause], kind: CauseKind) -> &explain::Cause {
        causes.iter().find(|c| c.kind == kind).unwrap()
    }

    /// The first field report's story from its machine's profile: 4.3 GB/s at 4 GPUs is about a
    /// quarter of PCIe gen3 x16, staged through host memory, and forcing P2P halves it.
    #[test]
    fn the_a6000_field_report_is_shm_staging_at_a_quarter_of_gen3_x16() {
        let r = explained_ab("a6000x4-phb");
        assert_eq!(r.verdict, Verdict::Ok, "{}", r.reason);
        let node = r.explanation.node.as_ref().unwrap();
        let busbw = node.busbw_gbps.unwrap();
        assert!((busbw - 4.3).abs() < 0.1, "{busbw}");
        let cap = node.capacity.as_ref().unwrap();
        assert_eq!(cap.path, "PCIe gen3 x16");
        assert!((cap.gbps - GEN3_X16).abs() < 1e-9);
        let f = cap.fraction.unwrap();
        assert!(
            (f - busbw / GEN3_X16).abs() < 1e-9 && (0.25..0.30).contains(&f),
            "{f}"
        );
        let c = limit(&node.causes, CauseKind::ShmStaging);
        assert_eq!(c.action, explain::Action::PlatformLimit);
        assert!(c.message.contains("27% of PCIe gen3 x16"), "{}", c.message);
        assert!(c.message.contains("crosses PCIe twice"), "{}", c.message);
        assert!(
            r.reason
                .contains("27% of PCIe gen3 x16, a platform limit (SHM staging"),
            "{}",
            r.reason
        );
        for p in &r.explanation.pairs {
            let ab = p.ab.as_ref().unwrap();
            let x = ab.after_gbps.unwrap() / ab.before_gbps;
            assert!((0.45..0.6).contains(&x), "forced P2P ×{x}");
            let c = limit(&p.causes, CauseKind::ShmStaging);
            assert!(
                c.message.contains("NCCL's default is right here"),
                "{}",
                c.message
            );
            let f = p.capacity.as_ref().unwrap().fraction.unwrap();
            assert!((f - p.busbw_gbps.unwrap() / GEN3_X16).abs() < 1e-9, "{f}");
        }
        assert!(c.message.contains("×0.5"), "{}", c.message);
    }

    /// The second field report's: 4.05 GB/s on 2xT4 is a quarter of gen3 x16, the same mechanism.
    #[test]
    fn the_t4_field_report_is_shm_staging_at_a_quarter_of_gen3_x16() {
        let r = explained_ab("t4x2-pcie");
        assert_eq!(r.verdict, Verdict::Ok, "{}", r.reason);
        assert!(r.explanation.node.is_none());
        let p = &r.explanation.pairs[0];
        let cap = p.capacity.as_ref().unwrap();
        assert_eq!(cap.path, "PCIe gen3 x16");
        let f = cap.fraction.unwrap();
        assert!(
            (f - p.busbw_gbps.unwrap() / GEN3_X16).abs() < 1e-9 && (0.24..0.28).contains(&f),
            "{f}"
        );
        let c = limit(&p.causes, CauseKind::ShmStaging);
        assert!(c.message.contains("26% of PCIe gen3 x16"), "{}", c.message);
        let ab = p.ab.as_ref().unwrap();
        assert!(ab.after_gbps.unwrap() / ab.before_gbps < 0.6);
        assert!(
            c.message.contains("NCCL's default is right here"),
            "{}",
            c.message
        );
        // In a VM without P2P the mechanism is the VM's.
        let r = explained("t4x2-pcie+vm");
        let k = kinds(&r.explanation);
        assert!(k.contains(&CauseKind::VmNoP2p), "{k:?}");
    }

    /// Explain times each GPU's copies too: on one GPU (no pair to measure) the degraded link is
    /// found by its copies, read under their load, and the verdict is theirs.
    #[test]
    fn one_gpu_is_explained_by_its_own_copies() {
        let sim = SimBackend::parse("h200x2-nvlink+degraded-pcie").unwrap();
        let params = ExplainParams {
            gpus: "1".into(),
            ..ExplainParams::default()
        };
        let r = run_explain(&sim, &params, &[], &mut |_| {}).unwrap();
        assert!(r.measurements.is_empty());
        assert_eq!(r.host_copies.as_ref().unwrap().gpus.len(), 1);
        let codes: Vec<&str> = r
            .host_copy_findings
            .iter()
            .map(|f| f.code.as_str())
            .collect();
        assert!(codes.contains(&"host_copy_below_capacity"), "{codes:?}");
        assert_eq!(r.verdict, Verdict::Warning, "{}", r.reason);
        let g = &r.platform.gpus[0];
        assert_eq!(g.link_under_load.as_ref().unwrap().current_width, Some(8));
        let healthy = SimBackend::parse("h200x2-nvlink").unwrap();
        let r = run_explain(&healthy, &params, &[], &mut |_| {}).unwrap();
        assert_eq!(r.verdict, Verdict::Ok, "{}", r.reason);
        assert_eq!(r.host_copy_findings[0].code, "host_copy_ok");
    }

    /// A pair whose collective fails gives no reading under load (it never loaded the link).
    #[test]
    fn a_failed_run_reads_no_link_under_load() {
        let r = explained("h200x8-nvswitch+no-fabric-manager+idle-downclock");
        assert!(r.platform.gpus.iter().all(|g| g.link_under_load.is_none()));
        let k = kinds(&r.explanation);
        assert!(!k.contains(&CauseKind::PcieIdleDownclock), "{k:?}");
    }

    /// On two GPUs the preflight's all-reduce is the pair's figure, judged against the reference.
    #[test]
    fn two_gpus_judge_the_preflight_figure_as_the_pair() {
        let (r, e) = after_preflight("t4x2-pcie+slow-link");
        let peak = r.all_reduce.as_ref().and_then(judged_peak).unwrap().1;
        assert_eq!(e.pairs.len(), 1);
        assert_eq!(e.pairs[0].busbw_gbps, Some(peak));
        assert!(!e.pairs[0].transport_measured);
        assert!(
            kinds(&e).contains(&CauseKind::BelowExpected),
            "{:?}",
            kinds(&e)
        );
    }
}
