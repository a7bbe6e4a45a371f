//! The versioned JSON reports (`schema_version`), as `--json` prints them and the daemon stores
//! them. docs/schema.md and docs/report.schema.json document this shape; a test keeps them true.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::backend::{BackendKind, CollectiveRun};
use crate::collective::Sweep;
use crate::ddp::DdpResult;
use crate::expect::Expectation;
use crate::finding::Finding;
use crate::node_gpus::GpuInfo;
use crate::topology::{GpuRef, TopologyMatrix};
use crate::verdict::Verdict;

/// Bumped on any change that breaks a reader of the JSON.
pub const SCHEMA_VERSION: u32 = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReportKind {
    Preflight,
    Topo,
    BenchCollectives,
    BenchDdp,
    Recommend,
    /// `ddpcheck cluster check`: one all-reduce across nodes through their daemons.
    Cluster,
    /// `ddpcheck explain`: why this node is slow, cause by cause, pair by pair.
    Explain,
}

/// Where every number of a report comes from (invariant 5).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    pub hostname: String,
    /// RFC 3339, UTC.
    pub time: String,
    pub tool_version: String,
    pub driver_version: Option<String>,
    pub cuda_version: Option<String>,
    pub nccl_version: Option<String>,
    pub torch_version: Option<String>,
    /// NCCL_* variables in force for the measurement.
    pub nccl_env: BTreeMap<String, String>,
    pub gpus: Vec<GpuRef>,
}

/// Common head of every report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Header {
    pub schema_version: u32,
    pub kind: ReportKind,
    /// `real` or `sim`: simulated numbers are always labelled.
    pub backend: BackendKind,
    /// `sim:PROFILE+FAULT` or `real`.
    pub backend_label: String,
    pub provenance: Provenance,
}

impl Header {
    /// Whether its figures were measured between CPU ranks over gloo, not on GPUs.
    pub fn on_cpu_ranks(&self) -> bool {
        self.backend_label == CPU_RANKS_LABEL
    }

    pub fn new(
        kind: ReportKind,
        backend: BackendKind,
        label: String,
        provenance: Provenance,
    ) -> Self {
        Header {
            schema_version: SCHEMA_VERSION,
            kind,
            backend,
            backend_label: label,
            provenance,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    Ok,
    Skipped,
    Failed,
}

/// One timed step of the preflight.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepTiming {
    pub name: String,
    pub seconds: f64,
    pub status: StepStatus,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PreflightReport {
    #[serde(flatten)]
    pub header: Header,
    pub verdict: Verdict,
    pub exit_code: i32,
    /// One line for schedulers, prefixed `ddpcheck:`.
    pub reason: String,
    pub wall_seconds: f64,
    pub steps: Vec<StepTiming>,
    pub gpus: Vec<GpuInfo>,
    pub topology: Option<TopologyMatrix>,
    pub all_reduce: Option<Sweep>,
    pub expected: Option<Expectation>,
    /// Each GPU's host↔device copies over its own link; absent when the step did not run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_copies: Option<crate::hostcopy::HostCopyRun>,
    pub findings: Vec<Finding>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TopoReport {
    #[serde(flatten)]
    pub header: Header,
    pub gpus: Vec<GpuInfo>,
    pub topology: TopologyMatrix,
}

/// One environment's run in a collective benchmark (`--env-ab` makes several).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EnvRun {
    /// `current`, or the candidate's `NAME=VALUE[,…]`.
    pub label: String,
    pub overrides: Vec<(String, String)>,
    pub run: CollectiveRun,
}

/// The backend label of collectives timed between CPU processes over torch's gloo
/// (`bench collectives --device cpu`): real measurements, of CPUs, never of GPUs.
pub const CPU_RANKS_LABEL: &str = "cpu-ranks:gloo";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BenchCollectivesReport {
    #[serde(flatten)]
    pub header: Header,
    pub runs: Vec<EnvRun>,
}

impl BenchCollectivesReport {
    /// The all-reduce sweep of the first run: what the step-time model reads.
    pub fn all_reduce(&self) -> Option<&Sweep> {
        self.runs.first().and_then(|r| {
            r.run
                .sweeps
                .iter()
                .find(|s| s.op == crate::collective::Collective::AllReduce)
        })
    }
}

/// `ddpcheck explain`: the platform read, each pair measured, and the explanation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExplainReport {
    #[serde(flatten)]
    pub header: Header,
    pub verdict: Verdict,
    pub exit_code: i32,
    /// One line, `ddpcheck: VERDICT: …`.
    pub reason: String,
    pub gpus: Vec<GpuInfo>,
    pub topology: Option<TopologyMatrix>,
    pub platform: crate::explain::PlatformFacts,
    pub measurements: Vec<crate::explain::PairMeasurement>,
    /// Each GPU's host↔device copies (as the preflight times them), read under their load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_copies: Option<crate::hostcopy::HostCopyRun>,
    /// Their judgement (core's `hostcopy::judge`), apart from the causes of pair bandwidth.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_copy_findings: Vec<crate::finding::Finding>,
    #[serde(flatten)]
    pub explanation: crate::explain::Explanation,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DdpReport {
    #[serde(flatten)]
    pub header: Header,
    /// What finished; where `stopped` is set, what finished before the deadline.
    pub results: Vec<DdpResult>,
    /// The reference asked for (`--reference`): what the speedups rest on where the 1-GPU
    /// launch timed it; each row's own `reference` says what it rests on. Reports written before
    /// the field rest on the 1-GPU step in DDP.
    #[serde(default = "crate::ddp::Reference::before_the_field")]
    pub reference: crate::ddp::Reference,
    /// The deadline stopped the benchmark after `results`: TIMEOUT (exit 5), with what
    /// finished before it kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<DdpStopped>,
}

/// Where a deadline stopped a DDP benchmark: the run it stopped and the deadline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DdpStopped {
    pub stage: String,
    pub seconds: f64,
}

impl DdpStopped {
    /// From the backend's timeout; `None` for any other error (only a deadline keeps results).
    pub fn from_error(e: &crate::probe_error::ProbeError) -> Option<DdpStopped> {
        match e {
            crate::probe_error::ProbeError::Timeout { stage, seconds } => Some(DdpStopped {
                stage: stage.clone(),
                seconds: *seconds,
            }),
            _ => None,
        }
    }

    /// The timeout as the error it is (exit 5).
    pub fn error(&self) -> crate::probe_error::ProbeError {
        crate::probe_error::ProbeError::Timeout {
            stage: self.stage.clone(),
            seconds: self.seconds,
        }
    }
}
