//! Cluster reports for both modes, `cluster check` (through the daemons) and `cluster srun`
//! (one task per node, no daemons): the judgement and the assembly of the report from what a
//! run found, and this node's own part of an srun step.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ddpcheck_core::capacity::Network;
use ddpcheck_core::cluster::{
    self, ClusterJob, ClusterNode, ClusterReport, DeadNode, Isolation, NodeResult,
};
use ddpcheck_core::expect::Expectation;
use ddpcheck_core::report::{Header, Provenance, ReportKind};
use ddpcheck_core::{BackendKind, Finding, FullBackend, ProbeError, Verdict};

use crate::lock::{default_runtime_dir, lock_path, NodeLock};
use crate::runs::{local_hostname, now_rfc3339, TOOL_VERSION};

/// The reason line of a run that meets its expectation.
const MEETS: &str = "cluster all-reduce meets the expectation";

/// A cluster run's findings, verdict and one-line reason.
pub struct Judged {
    pub findings: Vec<Finding>,
    pub verdict: Verdict,
    pub reason: String,
}

/// Judges a run: core's judgement of the isolation (`unreachable`: nodes never reached), or,
/// where the run failed before measuring (`failure`), that failure's own verdict (UNKNOWN,
/// BUSY, TIMEOUT), as in the rest of ddpcheck: nothing was measured to judge.
pub fn judge(
    expected: &Expectation,
    iso: &Isolation,
    unreachable: &[DeadNode],
    failure: Option<&ProbeError>,
) -> Judged {
    let (findings, verdict) = match failure.and_then(ProbeError::verdict) {
        Some(v) => (Vec::new(), v),
        None => cluster::judge(expected, iso, unreachable),
    };
    let reason = match failure {
        Some(e) => format!("ddpcheck: {}: {e}", verdict.as_str()),
        None => verdict.reason_line(&findings, MEETS),
    };
    Judged {
        findings,
        verdict,
        reason,
    }
}

/// What a cluster run measured and against what, for its report.
pub struct ClusterRun {
    pub started: Instant,
    pub network: Network,
    pub nics_per_node: u32,
    pub gpus_per_node: u32,
    pub expected: Expectation,
    pub isolation: Isolation,
    pub judged: Judged,
    pub nodes: Vec<ClusterNode>,
    pub backend: BackendKind,
    pub backend_label: String,
    /// From the nodes' results: NCCL's version and the transport it chose.
    pub nccl_version: Option<String>,
    pub transport: Option<String>,
    /// The NCCL_* environment the run inherited, where it ran in this process's environment.
    pub nccl_env: BTreeMap<String, String>,
}

/// The cluster report both modes print: header and provenance (this host, now), verdict and
/// exit code, and the cluster figure from the isolation's full run.
pub fn assemble(run: ClusterRun) -> ClusterReport {
    let prov = Provenance {
        hostname: local_hostname(),
        time: now_rfc3339(),
        tool_version: TOOL_VERSION.into(),
        nccl_version: run.nccl_version,
        nccl_env: run.nccl_env,
        ..Default::default()
    };
    let verdict = run.judged.verdict;
    ClusterReport {
        header: Header::new(ReportKind::Cluster, run.backend, run.backend_label, prov),
        verdict,
        exit_code: verdict.exit_code(),
        reason: run.judged.reason,
        wall_seconds: run.started.elapsed().as_secs_f64(),
        network: run.network,
        nics_per_node: run.nics_per_node,
        gpus_per_node: run.gpus_per_node,
        cluster_busbw_gbps: run.isolation.cluster_run.as_ref().map(|(_, b)| *b),
        capacity: Some(run.network.capacity(
            run.nics_per_node,
            run.isolation.cluster_run.as_ref().map(|(_, b)| *b),
            run.expected.busbw_gbps,
        )),
        expected: run.expected,
        transport: run.transport,
        nodes: run.nodes,
        isolation: run.isolation,
        findings: run.judged.findings,
    }
}

/// This node's part of an srun step: the rendezvous entries built here, the backend's join;
/// bounded by `limit` whatever the backend does. Real GPUs take the node lock.
pub fn join_local(
    backend: Arc<dyn FullBackend>,
    job: ClusterJob,
    root: String,
    limit: Duration,
) -> Result<NodeResult, ProbeError> {
    let real = backend.kind() == BackendKind::Real;
    // Real GPUs: one active test per node, shared with the daemon and other local runs.
    let _lock = if real {
        let path = lock_path(&default_runtime_dir());
        Some(NodeLock::try_acquire(&path, "cluster srun").map_err(ProbeError::from)?)
    } else {
        None
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let stage = job.deadline;
    std::thread::spawn(move || {
        let entries = if real {
            ddpcheck_gpu::cluster::fixed_rendezvous(&root, job.world_nodes)
        } else {
            // The sim knows only its own node: every peer is assumed to be like it.
            backend
                .cluster_prepare(&job)
                .map(|mine| vec![mine; job.world_nodes as usize])
        };
        let r = entries.and_then(|e| backend.cluster_join(&job, &e));
        let _ = tx.send(r);
    });
    match rx.recv_timeout(limit) {
        Ok(r) => r,
        Err(_) => {
            // The backend outlived its own deadline: stop its worker processes, report TIMEOUT.
            ddpcheck_gpu::children::terminate_all(Duration::from_secs(3));
            Err(ProbeError::Timeout {
                stage: "cluster all-reduce".into(),
                seconds: stage.as_secs_f64(),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_before_measuring_is_its_own_verdict() {
        let expected = Network::Tcp10.expected(1);
        let iso = Isolation::default();
        let busy = ProbeError::Busy("held".into());
        let j = judge(&expected, &iso, &[], Some(&busy));
        assert_eq!(j.verdict, Verdict::Busy);
        assert!(j.findings.is_empty());
        assert!(j.reason.starts_with("ddpcheck: BUSY: "), "{}", j.reason);
        // Without a failure core judges the run: here nothing was measured.
        let j = judge(&expected, &iso, &[], None);
        assert_eq!(j.verdict, cluster::judge(&expected, &iso, &[]).1);
    }

    #[test]
    fn the_report_takes_the_cluster_figure_and_exit_code() {
        let expected = Network::Tcp10.expected(1);
        let isolation = Isolation {
            cluster_run: Some((vec!["a".into(), "b".into()], 1.0)),
            ..Default::default()
        };
        let judged = judge(&expected, &isolation, &[], None);
        let verdict = judged.verdict;
        let r = assemble(ClusterRun {
            started: Instant::now(),
            network: Network::Tcp10,
            nics_per_node: 1,
            gpus_per_node: 8,
            expected,
            isolation,
            judged,
            nodes: Vec::new(),
            backend: BackendKind::Sim,
            backend_label: "sim:cluster".into(),
            nccl_version: None,
            transport: None,
            nccl_env: BTreeMap::new(),
        });
        assert_eq!(r.cluster_busbw_gbps, Some(1.0));
        assert_eq!(r.exit_code, verdict.exit_code());
        assert_eq!(r.header.backend, BackendKind::Sim);
    }
}
