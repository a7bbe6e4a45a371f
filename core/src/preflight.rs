//! The preflight: its steps in order, each timed, and the judgement of what they measured.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::backend::{CollectiveRequest, NodeBackend, Progress};
use crate::collective::{Collective, Sweep};
use crate::expect::Expectation;
use crate::finding::{Evidence, Finding, Severity, Subject};
use crate::full_backend::FullBackend;
use crate::hostcopy::{self, CopyRequest, HostCopier, HostCopyRun};
use crate::node_gpus::{busy_gpus, busy_reason, select_gpus, GpuInfo, ProbeState};
use crate::probe_error::ProbeError;
use crate::report::{Header, PreflightReport, Provenance, ReportKind, StepStatus, StepTiming};
use crate::topology::TopologyMatrix;
use crate::verdict::Verdict;

mod judge;

pub use judge::{
    expected_for, judge_allreduce, judge_fabric, judge_gpus, judge_nccl_env, judge_pcie,
    judge_topology,
};

#[derive(Clone, Debug)]
pub struct PreflightOptions {
    /// `CUDA_VISIBLE_DEVICES`/`SLURM_JOB_GPUS`-style selection; empty for all GPUs.
    pub gpu_filter: String,
    pub min_bytes: u64,
    pub max_bytes: u64,
    pub step_factor: u64,
    pub warmup_iters: u32,
    pub iters: u32,
    pub deadline: Duration,
    /// The node's recent large-message all-reduce busbw (GB/s), newest last.
    pub history_busbw: Vec<f64>,
    /// NCCL_* environment the check runs under (judged against the topology).
    pub nccl_env: BTreeMap<String, String>,
    /// Caller-supplied, since core does no I/O.
    pub hostname_fallback: String,
    pub now_rfc3339: String,
    pub tool_version: String,
    pub inject_hang: bool,
    /// Time each GPU's host↔device copies (`--no-host-copies` turns it off).
    pub host_copies: bool,
}

impl Default for PreflightOptions {
    fn default() -> Self {
        PreflightOptions {
            gpu_filter: String::new(),
            min_bytes: 8 << 20,
            max_bytes: 256 << 20,
            step_factor: 2,
            warmup_iters: 2,
            iters: 5,
            deadline: Duration::from_secs(30),
            history_busbw: Vec::new(),
            nccl_env: BTreeMap::new(),
            hostname_fallback: String::new(),
            now_rfc3339: String::new(),
            tool_version: String::new(),
            inject_hang: false,
            host_copies: true,
        }
    }
}

/// Collects timed steps.
struct Steps {
    list: Vec<StepTiming>,
}

impl Steps {
    fn time<T>(
        &mut self,
        name: &str,
        f: impl FnOnce() -> Result<T, ProbeError>,
    ) -> Result<T, ProbeError> {
        let t0 = Instant::now();
        let r = f();
        self.list.push(StepTiming {
            name: name.to_string(),
            seconds: t0.elapsed().as_secs_f64(),
            status: if r.is_ok() {
                StepStatus::Ok
            } else {
                StepStatus::Failed
            },
            detail: r.as_ref().err().map(|e| e.to_string()).unwrap_or_default(),
        });
        r
    }
    fn note(&mut self, name: &str, seconds: f64, detail: String) {
        self.list.push(StepTiming {
            name: name.to_string(),
            seconds,
            status: StepStatus::Ok,
            detail,
        });
    }
    fn skip(&mut self, name: &str, why: &str) {
        self.list.push(StepTiming {
            name: name.to_string(),
            seconds: 0.0,
            status: StepStatus::Skipped,
            detail: why.to_string(),
        });
    }
}

/// What a preflight has gathered so far; any step may end it with the report of that much.
struct Gathered {
    started: Instant,
    steps: Steps,
    prov: Provenance,
    findings: Vec<Finding>,
    gpus: Vec<GpuInfo>,
    topology: Option<TopologyMatrix>,
    sweep: Option<Sweep>,
    expected: Option<Expectation>,
    host_copies: Option<HostCopyRun>,
}

/// How a preflight ends early: its verdict and the reason shown when no finding gives one.
type Ended = (Verdict, String);

impl Gathered {
    fn new(opts: &PreflightOptions) -> Self {
        Gathered {
            started: Instant::now(),
            steps: Steps { list: Vec::new() },
            prov: Provenance {
                hostname: opts.hostname_fallback.clone(),
                time: opts.now_rfc3339.clone(),
                tool_version: opts.tool_version.clone(),
                nccl_env: opts.nccl_env.clone(),
                ..Provenance::default()
            },
            findings: Vec::new(),
            gpus: Vec::new(),
            topology: None,
            sweep: None,
            expected: None,
            host_copies: None,
        }
    }

    fn report(
        self,
        backend: &dyn NodeBackend,
        (verdict, reason_fallback): Ended,
    ) -> PreflightReport {
        PreflightReport {
            header: Header::new(
                ReportKind::Preflight,
                backend.kind(),
                backend.label(),
                self.prov,
            ),
            reason: verdict.reason_line(&self.findings, &reason_fallback),
            exit_code: verdict.exit_code(),
            verdict,
            wall_seconds: self.started.elapsed().as_secs_f64(),
            steps: self.steps.list,
            gpus: self.gpus,
            topology: self.topology,
            all_reduce: self.sweep,
            expected: self.expected,
            host_copies: self.host_copies,
            findings: self.findings,
        }
    }
}

/// Runs the preflight on a backend and judges it. Never panics on a backend fault: every
/// [`ProbeError`] becomes a verdict; only an invalid request is returned as `Err`.
pub fn run(
    backend: &dyn FullBackend,
    opts: &PreflightOptions,
    progress: &mut dyn FnMut(Progress),
) -> Result<PreflightReport, ProbeError> {
    let mut g = Gathered::new(opts);
    let mut say = |stage: &str, done: u32, msg: String| {
        progress(Progress {
            stage: stage.into(),
            done,
            total: 6,
            message: msg,
        })
    };
    say("inventory", 0, "reading GPUs".into());
    if let Some(ended) = read_inventory(backend, opts, &mut g)? {
        return Ok(g.report(backend, ended));
    }
    say("health", 1, format!("{} GPUs", g.gpus.len()));
    judge_health(&mut g);
    say("fabric", 1, "NVLink fabric registration".into());
    read_fabric(backend, &mut g);
    say("topology", 2, "pair matrix".into());
    read_topology(backend, opts, &mut g)?;
    if let Some((verdict, reason, why)) = blocked(&g) {
        g.steps.skip("host_copies", why);
        g.steps.skip("all_reduce", why);
        return Ok(g.report(backend, (verdict, reason)));
    }
    if opts.inject_hang && g.gpus.len() < 2 {
        // Refused before any GPU work: nothing that could hang would run.
        return Err(no_hang_on_one_gpu());
    }
    if opts.host_copies {
        say(
            "host_copies",
            3,
            "host↔device copies on each GPU's link".into(),
        );
        let copied =
            measure_host_copies(backend, opts, &mut g, &mut |p| say(&p.stage, 3, p.message))?;
        if let Some(ended) = copied {
            return Ok(g.report(backend, ended));
        }
    } else {
        g.steps.skip("host_copies", "turned off (--no-host-copies)");
    }
    if let Some((verdict, reason, why)) = no_collective(&g) {
        g.steps.skip("all_reduce", why);
        return Ok(g.report(backend, (verdict, reason)));
    }
    say("all_reduce", 4, "NCCL init and all-reduce sweep".into());
    let swept = sweep_all_reduce(backend, opts, &mut g, &mut |p| say(&p.stage, 4, p.message))?;
    if let Some(ended) = swept {
        return Ok(g.report(backend, ended));
    }
    say("verdict", 5, "judging".into());
    judge_sweep(opts, &mut g);
    let verdict = Verdict::from_findings(&g.findings);
    Ok(g.report(backend, (verdict, "node healthy".into())))
}

/// Reads the inventory and selects the job's GPUs; ends the preflight when it cannot be read
/// or no GPU is there.
fn read_inventory(
    backend: &dyn NodeBackend,
    opts: &PreflightOptions,
    g: &mut Gathered,
) -> Result<Option<Ended>, ProbeError> {
    let inv = match g.steps.time("inventory", || backend.inventory()) {
        Ok(inv) => inv,
        Err(e) => {
            let v = e.verdict().ok_or_else(|| e.clone())?;
            return Ok(Some((v, e.to_string())));
        }
    };
    if !inv.hostname.is_empty() {
        g.prov.hostname = inv.hostname.clone();
    }
    g.prov.driver_version = inv.driver_version.clone();
    g.prov.cuda_version = inv.cuda_driver_version.clone();
    g.gpus = select_gpus(&inv.gpus, &opts.gpu_filter)?;
    g.prov.gpus = g.gpus.iter().map(GpuInfo::gpu_ref).collect();
    if g.gpus.is_empty() {
        return Ok(Some((
            Verdict::Unknown,
            "no GPU found on this node".to_string(),
        )));
    }
    Ok(None)
}

/// Judges each GPU's health and PCIe link.
fn judge_health(g: &mut Gathered) {
    let t0 = Instant::now();
    g.findings.extend(judge_gpus(&g.gpus));
    g.findings.extend(judge_pcie(&g.gpus));
    g.steps.note(
        "health",
        t0.elapsed().as_secs_f64(),
        format!(
            "{} GPU{} read",
            g.gpus.len(),
            if g.gpus.len() == 1 { "" } else { "s" }
        ),
    );
}

/// Reads and judges the GPUs' fabric registration before any CUDA work (a GPU of an NVSwitch
/// system that Fabric Manager has not registered cannot start CUDA, one GPU or many). Where it
/// cannot be read (no NVML call for it, a stuck call) the step says why and judges nothing:
/// the collective, where one runs, still fails on such a node.
fn read_fabric(backend: &dyn FullBackend, g: &mut Gathered) {
    let t0 = Instant::now();
    let read = backend.fabric_state(&g.gpus);
    let seconds = t0.elapsed().as_secs_f64();
    match read {
        Ok(Some(f)) => {
            let detail = format!("{} ({})", f.state.as_smi(), f.source);
            g.findings.extend(judge_fabric(&f));
            g.steps.note("fabric", seconds, detail);
        }
        Ok(None) => g.steps.note("fabric", seconds, "no NVLink fabric".into()),
        Err(e) => g.steps.list.push(StepTiming {
            name: "fabric".into(),
            seconds,
            status: StepStatus::Skipped,
            detail: format!("not read: {e}"),
        }),
    }
}

/// Reads and judges the pair matrix (and the NCCL environment against it); an unreadable one
/// is a warning, a malformed one the backend's error.
fn read_topology(
    backend: &dyn NodeBackend,
    opts: &PreflightOptions,
    g: &mut Gathered,
) -> Result<(), ProbeError> {
    g.topology = match g.steps.time("topology", || backend.topology(&g.gpus)) {
        Ok(t) => Some(t),
        Err(e) => {
            g.findings.push(Finding::new(
                "topology_unreadable",
                Severity::Warning,
                Subject::Node,
                format!("topology could not be read: {e}"),
            ));
            None
        }
    };
    if let Some(t) = &g.topology {
        if let Err(e) = t.validate() {
            return Err(ProbeError::Worker(format!(
                "backend returned a malformed topology: {e}"
            )));
        }
        g.findings.extend(judge_topology(t));
        g.findings.extend(judge_nccl_env(&opts.nccl_env, t));
    }
    Ok(())
}

/// Cases where no GPU work may start: (verdict, reason, why the steps are skipped).
fn blocked(g: &Gathered) -> Option<(Verdict, String, &'static str)> {
    // Foreign compute on the job's GPUs: BUSY before any CUDA context is made; nothing is killed.
    let busy = busy_gpus(&g.gpus);
    if g.gpus.iter().any(|x| x.state != ProbeState::Ok) {
        // A lost or stuck GPU cannot run one; the findings already say CRITICAL.
        Some((
            Verdict::from_findings(&g.findings),
            "GPU probe failed".to_string(),
            "a GPU is stuck or lost",
        ))
    } else if !busy.is_empty() {
        Some((
            Verdict::Busy,
            busy_reason(&busy),
            "GPUs in use by other processes",
        ))
    } else if g
        .findings
        .iter()
        .any(|f| f.code == "fabric_manager_down" && f.severity == Severity::Critical)
    {
        Some((
            Verdict::Critical,
            "NVLink fabric not registered".to_string(),
            "the NVSwitch fabric is not up: CUDA cannot start",
        ))
    } else {
        None
    }
}

/// Cases where no collective runs: (verdict, reason, why the step is skipped).
fn no_collective(g: &Gathered) -> Option<(Verdict, String, &'static str)> {
    if g.gpus.len() >= 2 {
        return None;
    }
    // The scheduler's one line carries the GPU's own link figures where they were measured.
    let figures = g
        .host_copies
        .as_ref()
        .and_then(|r| r.gpus.first())
        .map(hostcopy::GpuCopies::figures)
        .filter(|f| !f.is_empty());
    let reason = match figures {
        Some(f) => format!("single GPU healthy: copies {f}"),
        None => "single GPU healthy".to_string(),
    };
    Some((
        Verdict::from_findings(&g.findings),
        reason,
        "one GPU: no interconnect to test",
    ))
}

/// Passing would claim the watchdog was tested: nothing runs on one GPU that could hang.
fn no_hang_on_one_gpu() -> ProbeError {
    ProbeError::Invalid(
        "a hang injected into the all-reduce step cannot be tested on one GPU: \
         no collective runs there"
            .into(),
    )
}

/// Times and judges each GPU's host↔device copies. A library or symbol the backend lacks skips
/// the step with its one line; a timeout, a failed GPU or a crashed child ends the preflight
/// with its verdict, as a failed all-reduce does.
fn measure_host_copies(
    backend: &dyn HostCopier,
    opts: &PreflightOptions,
    g: &mut Gathered,
    progress: &mut dyn FnMut(Progress),
) -> Result<Option<Ended>, ProbeError> {
    let req = CopyRequest::preflight(g.gpus.iter().map(GpuInfo::gpu_ref).collect(), opts.deadline);
    req.validate()?;
    let t0 = Instant::now();
    let run = backend.host_copies(&req, progress);
    let seconds = t0.elapsed().as_secs_f64();
    let (status, detail) = match run {
        Ok(run) => {
            // Ahead of what was read: a tie of severities names the last finding in the one-line
            // reason, so a downtrained link read from NVML stays the reason where there is one,
            // and the copies are the reason only where nothing read says why.
            let mut judged = hostcopy::judge(&g.gpus, &run);
            judged.append(&mut g.findings);
            g.findings = judged;
            let n = run.gpus.len();
            g.host_copies = Some(run);
            let sizes: Vec<String> = req
                .sizes
                .iter()
                .map(|b| format!("{} MiB", b >> 20))
                .collect();
            let detail = format!(
                "{n} GPU{}, pinned, {} ×{}",
                if n == 1 { "" } else { "s" },
                sizes.join("/"),
                req.iters
            );
            (StepStatus::Ok, detail)
        }
        Err(ProbeError::Unavailable(why)) => {
            g.findings.push(Finding::new(
                "host_copy_unmeasured",
                Severity::Info,
                Subject::Node,
                format!("host↔device copies not measured: {why}"),
            ));
            (StepStatus::Skipped, why)
        }
        Err(e) => {
            g.steps.list.push(StepTiming {
                name: "host_copies".into(),
                seconds,
                status: StepStatus::Failed,
                detail: e.to_string(),
            });
            let v = e.verdict().ok_or_else(|| e.clone())?;
            let v = v.worse(Verdict::from_findings(&g.findings));
            return Ok(Some((v, e.to_string())));
        }
    };
    g.steps.list.push(StepTiming {
        name: "host_copies".into(),
        seconds,
        status,
        detail,
    });
    Ok(None)
}

/// The all-reduce sweep with its correctness check; a failed one ends the preflight with its
/// verdict (or the findings', if worse).
fn sweep_all_reduce(
    backend: &dyn NodeBackend,
    opts: &PreflightOptions,
    g: &mut Gathered,
    progress: &mut dyn FnMut(Progress),
) -> Result<Option<Ended>, ProbeError> {
    let req = CollectiveRequest {
        ops: vec![Collective::AllReduce],
        gpus: g.gpus.iter().map(GpuInfo::gpu_ref).collect(),
        min_bytes: opts.min_bytes,
        max_bytes: opts.max_bytes,
        step_factor: opts.step_factor,
        warmup_iters: opts.warmup_iters,
        iters: opts.iters,
        in_place: false,
        check: true,
        // Explicit, so a backend that does not read the process environment (sim) sees it too.
        env: opts
            .nccl_env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        deadline: opts.deadline,
        inject_hang: opts.inject_hang,
        group: None,
        record_transport: false,
    };
    req.validate()?;
    let t0 = Instant::now();
    let run = backend.collectives(&req, progress);
    let total = t0.elapsed().as_secs_f64();
    let run = match run {
        Ok(r) => r,
        Err(e) => {
            g.steps.list.push(StepTiming {
                name: "all_reduce".into(),
                seconds: total,
                status: StepStatus::Failed,
                detail: e.to_string(),
            });
            let v = e.verdict().ok_or_else(|| e.clone())?;
            if matches!(e, ProbeError::Timeout { .. }) {
                // A warning, so the verdict stays TIMEOUT; the last of the worst names the line.
                g.findings.extend(p2p_suspect(
                    g,
                    &opts.nccl_env,
                    Severity::Warning,
                    &e.to_string(),
                ));
            }
            let v = v.worse(Verdict::from_findings(&g.findings));
            return Ok(Some((v, e.to_string())));
        }
    };
    g.prov.nccl_version = run.nccl_version.clone();
    for (k, v) in &run.env {
        g.prov.nccl_env.insert(k.clone(), v.clone());
    }
    let version = run.nccl_version.as_deref().unwrap_or("?");
    g.steps.note(
        "nccl_init",
        run.init_seconds,
        match &run.nccl_library {
            Some(lib) => format!("NCCL {version} ({lib})"),
            None => format!("NCCL {version}"),
        },
    );
    g.steps.note(
        "all_reduce",
        (total - run.init_seconds).max(0.0),
        "sweep with correctness check".into(),
    );
    g.sweep = run
        .sweeps
        .into_iter()
        .find(|s| s.op == Collective::AllReduce);
    Ok(None)
}

/// Judges the sweep against the reference for this class of node and the node's history.
fn judge_sweep(opts: &PreflightOptions, g: &mut Gathered) {
    g.expected = expected_for(&g.gpus, g.topology.as_ref());
    if let Some(s) = &g.sweep {
        g.findings
            .extend(judge_allreduce(s, g.expected.as_ref(), &opts.history_busbw));
    }
    if let Some(w) = g
        .sweep
        .as_ref()
        .and_then(Sweep::wrong_total)
        .filter(|w| *w > 0)
    {
        let what = format!("all-reduce returned {w} wrong elements");
        g.findings
            .extend(p2p_suspect(g, &opts.nccl_env, Severity::Critical, &what));
    }
}

/// Where the all-reduce hung or returned wrong values and a pair's transport is P2P over PCIe
/// that is forced or on a GeForce card, the finding that names it as the likely cause and
/// NCCL_P2P_DISABLE=1 as the thing to try (pushed last, so it gives the one line).
fn p2p_suspect(
    g: &Gathered,
    env: &BTreeMap<String, String>,
    severity: Severity,
    what: &str,
) -> Option<Finding> {
    let t = g.topology.as_ref()?;
    let model = g.gpus.first().map_or("", |x| x.name.as_str());
    let (pair, why) = crate::explain::consumer::first_suspect(&t.pairs(), model, env)?;
    Some(
        Finding::new(
            "p2p_pcie_suspect",
            severity,
            Subject::Node,
            format!(
                "{what}; {}",
                crate::explain::consumer::likely_cause_words(&pair, &why)
            ),
        )
        .with(
            Evidence::new("peer-to-peer over PCIe", format!("{pair}: {why}"))
                .source(crate::explain::consumer::HANG_SOURCE),
        ),
    )
}
