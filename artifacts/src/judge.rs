//! The one judge over what the artifacts show: core's `explain` (causes, expectations, capacity
//! arithmetic, fixes) and the preflight's `judge_gpus`, `judge_pcie`, `judge_topology`,
//! `judge_nccl_env` and `judge_allreduce`, exactly as the live `explain` and `check` call them;
//! the report labelled with each file's provenance and what stays undecided.

use ddpcheck_core::explain::{
    self, Cause, Explanation, NodeMeasurement, PairMeasurement, PlatformFacts,
};
use ddpcheck_core::node_gpus::GpuInfo;
use ddpcheck_core::preflight;
use ddpcheck_core::topology::TopologyMatrix;
use ddpcheck_core::{Finding, Severity, Verdict};
use serde::{Deserialize, Serialize};

use crate::folder::{Provenance, Read};
use crate::node::{assemble, Assembled};
use crate::ArtifactError;
use crate::Format;

/// The report's `kind`.
pub const KIND: &str = "explain_artifacts";
/// Its schema version: fields are only added.
pub const SCHEMA_VERSION: u32 = 1;

/// Versions the artifacts name.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Versions {
    pub driver: Option<String>,
    pub cuda: Option<String>,
    pub nccl: Option<String>,
}

/// `explain --from-artifacts`' report (docs/explain.md, "Reading a user's artifacts").
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ArtifactsReport {
    /// `explain_artifacts`.
    pub kind: String,
    pub schema_version: u32,
    pub tool_version: String,
    /// `ok`, `warning`, `critical` or `unknown`.
    pub verdict: String,
    pub exit_code: i32,
    /// One line, `ddpcheck: VERDICT: …`.
    pub reason: String,
    /// Every cause of `explanation`, node and GPU ones first, then each pair's, then the node
    /// all-reduce's.
    pub causes: Vec<Cause>,
    /// `check`'s findings on the same readings (health, PCIe, topology, NCCL variables, the
    /// all-reduce against its reference).
    pub findings: Vec<Finding>,
    pub provenance: Vec<Provenance>,
    pub undecided: Vec<String>,
    pub versions: Versions,
    /// The NCCL variables in force, as the NCCL log says they were set (empty without a log).
    pub nccl_env: std::collections::BTreeMap<String, String>,
    pub gpus: Vec<GpuInfo>,
    pub topology: Option<TopologyMatrix>,
    pub platform: PlatformFacts,
    pub measurements: Vec<PairMeasurement>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_measurement: Option<NodeMeasurement>,
    /// The per-pair chains and the node's all-reduce, as the live report has them.
    pub explanation: Explanation,
}

impl ArtifactsReport {
    pub fn verdict(&self) -> Verdict {
        match self.verdict.as_str() {
            "ok" => Verdict::Ok,
            "warning" => Verdict::Warning,
            "critical" => Verdict::Critical,
            _ => Verdict::Unknown,
        }
    }
}

/// `check`'s judgement of the same readings; the all-reduce against the reference only where
/// the topology is known (the reference comes from the links the matrix shows).
fn findings(a: &Assembled, undecided: &mut Vec<String>) -> Vec<Finding> {
    let mut f = preflight::judge_gpus(&a.gpus);
    f.extend(preflight::judge_pcie(&a.gpus));
    if let Some(t) = &a.topology {
        f.extend(preflight::judge_topology(t));
        f.extend(preflight::judge_nccl_env(&a.nccl_env, t));
    }
    if let Some(s) = &a.sweep {
        let expected = a
            .topology
            .as_ref()
            .and_then(|t| preflight::expected_for(&a.gpus, Some(t)));
        if a.topology.is_none() {
            undecided.push("no topo matrix: the all-reduce is not set against a reference (only its #wrong is judged)".into());
        }
        f.extend(preflight::judge_allreduce(s, expected.as_ref(), &[]));
    }
    f
}

fn reason(verdict: Verdict, e: &Explanation, findings: &[Finding]) -> String {
    let worst_finding = findings
        .iter()
        .filter(|f| f.severity > Severity::Info)
        .max_by_key(|f| f.severity);
    let line = match (e.worst(), worst_finding) {
        (Some(c), Some(f)) if f.severity > c.severity => f.message.clone(),
        (Some(c), _) => c.message.clone(),
        (None, Some(f)) => f.message.clone(),
        (None, None) => e
            .platform_limit_summary()
            .unwrap_or_else(|| "no cause of low bandwidth found in the artifacts".to_string()),
    };
    format!("ddpcheck: {}: {line}", verdict.as_str())
}

/// Causes of the network between nodes, from each NCCL log read (core's
/// `explain::network::net_socket` on its channels, network lines and variables).
fn network_causes(reads: &[Read], env: &std::collections::BTreeMap<String, String>) -> Vec<Cause> {
    reads
        .iter()
        .filter_map(|r| match &r.reading {
            crate::Reading::NcclLog(l) => {
                let via: Vec<String> = l.channels.iter().map(|c| c.via.clone()).collect();
                let mut env = env.clone();
                env.extend(l.env.clone());
                explain::network::net_socket(&via, &l.network, &env)
            }
            _ => None,
        })
        .take(1)
        .collect()
}

/// What the operator expects of the node, beyond what the artifacts show.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Expectations {
    /// The machine type's GPU count (`--expect-gpus`).
    pub gpus: Option<usize>,
}

/// The node's GPU count against the operator's: judged only where an inventory of the node lists
/// its GPUs (`nvidia-smi -q`, `topo -m`); a job's files (nccl-tests, NCCL's log) or a cut
/// `nvlink -s` name only the GPUs they used.
fn gpu_count(
    reads: &[Read],
    seen: usize,
    x: Expectations,
    undecided: &mut Vec<String>,
) -> Option<Cause> {
    let expected = x.gpus?;
    let inventory = [Format::SmiQuery, Format::TopoMatrix]
        .into_iter()
        .find_map(|f| reads.iter().find(|r| r.provenance.format == f))
        .map(|r| format!("{} ({})", r.provenance.command, r.provenance.file));
    let Some(listed_by) = inventory else {
        undecided.push(format!(
            "--expect-gpus {expected}: no nvidia-smi -q or topo -m lists the node's GPUs (a job's files name only those it used): the count is not judged"
        ));
        return None;
    };
    explain::gpu_count::missing(
        seen,
        expected,
        &listed_by,
        &format!("--expect-gpus {expected}"),
    )
}

/// Judges what was read.
pub fn judge(reads: &[Read], tool_version: &str) -> Result<ArtifactsReport, ArtifactError> {
    judge_expecting(reads, tool_version, Expectations::default())
}

/// Judges what was read against what the operator expects of the node.
pub fn judge_expecting(
    reads: &[Read],
    tool_version: &str,
    expect: Expectations,
) -> Result<ArtifactsReport, ArtifactError> {
    let a = assemble(reads)?;
    let explanation = explain::explain(&a.explain_input());
    let mut explanation = explanation;
    explanation
        .causes
        .extend(network_causes(reads, &a.nccl_env));
    let mut undecided = a.undecided.clone();
    if !a.gpus.is_empty() {
        explanation
            .causes
            .extend(gpu_count(reads, a.gpus.len(), expect, &mut undecided));
    }
    let findings = findings(&a, &mut undecided);
    // A run that failed is UNKNOWN, as a live worker's error.
    let failed = a
        .measurements
        .iter()
        .filter_map(|m| m.error.as_deref())
        .chain(a.node_measurement.iter().filter_map(|n| n.error.as_deref()))
        .next()
        .map(str::to_string);
    // Nothing named the GPUs: nothing of the node was judged, which is no OK; a fault found in
    // what was read (the network between nodes) still speaks.
    let verdict = if a.gpus.is_empty() {
        match explanation.verdict() {
            Verdict::Ok => Verdict::Unknown,
            v => v,
        }
    } else {
        let v = explanation
            .verdict()
            .worse(Verdict::from_findings(&findings));
        if failed.is_some() {
            v.worse(Verdict::Unknown)
        } else {
            v
        }
    };
    Ok(ArtifactsReport {
        kind: KIND.to_string(),
        schema_version: SCHEMA_VERSION,
        tool_version: tool_version.to_string(),
        verdict: verdict.as_str().to_ascii_lowercase(),
        exit_code: verdict.exit_code(),
        reason: match (&failed, a.gpus.is_empty()) {
            (_, true) if verdict != Verdict::Unknown => reason(verdict, &explanation, &findings),
            (_, true) => format!(
                "ddpcheck: {}: {}",
                verdict.as_str(),
                crate::node::gpus::NO_GPUS
            ),
            (Some(f), false) if verdict == Verdict::Unknown => {
                format!(
                    "ddpcheck: {}: the nccl-tests run failed: {f}",
                    verdict.as_str()
                )
            }
            _ => reason(verdict, &explanation, &findings),
        },
        causes: explanation.all_causes().cloned().collect(),
        findings,
        provenance: reads.iter().map(|r| r.provenance.clone()).collect(),
        undecided,
        versions: Versions {
            driver: a.driver_version.clone(),
            cuda: a.cuda_version.clone(),
            nccl: a.nccl_version.clone(),
        },
        nccl_env: a.nccl_env,
        gpus: a.gpus,
        topology: a.topology,
        platform: a.platform,
        measurements: a.measurements,
        node_measurement: a.node_measurement,
        explanation,
    })
}
