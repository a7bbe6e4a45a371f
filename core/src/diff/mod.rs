//! What changed between two runs of a node (saved reports, the daemon's history, or artifact
//! folders read into the same facts), and how much of the difference in bandwidth or step time
//! each change can explain by capacity arithmetic; what stays unexplained is said.
//!
//! Pure judgement over [`RunFacts`]: no I/O. `from_report` builds them from saved reports; an
//! artifact reader fills the same struct.

mod causes;
mod ceiling;
mod changes;
mod from_report;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use ceiling::{PathCeiling, SHM_STAGED_SHARE};
pub use from_report::{
    from_collectives, from_ddp, from_explain, from_parts, from_preflight, Parts,
};

use crate::explain::Transport;
use crate::topology::{LinkClass, P2pStatus};

/// A figure within this share of the other is the same figure: the repeat spread of one
/// node's all-reduce is a few percent (docs/explain.md).
pub const SAME_WITHIN: f64 = 0.05;

/// What a run was, as far as comparing goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunKind {
    Preflight,
    BenchCollectives,
    Explain,
    BenchDdp,
    /// Artifacts a user already has (nvidia-smi, nccl-tests, NCCL's log), read into facts.
    Artifacts,
}

impl RunKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RunKind::Preflight => "preflight",
            RunKind::BenchCollectives => "bench_collectives",
            RunKind::Explain => "explain",
            RunKind::BenchDdp => "bench_ddp",
            RunKind::Artifacts => "artifacts",
        }
    }
}

/// The figure a run measured: an all-reduce's bus bandwidth or a DDP step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "measure", rename_all = "snake_case")]
pub enum Figure {
    /// Large-message all-reduce busbw of all the run's GPUs, GB/s.
    Busbw { gbps: f64, what: String },
    /// Median optimizer step, seconds.
    StepTime { seconds: f64, what: String },
}

impl Figure {
    /// Speed, higher better (GB/s, or steps per second).
    fn speed(&self) -> f64 {
        match self {
            Figure::Busbw { gbps, .. } => *gbps,
            Figure::StepTime { seconds, .. } => 1.0 / seconds,
        }
    }

    pub fn what(&self) -> &str {
        match self {
            Figure::Busbw { what, .. } | Figure::StepTime { what, .. } => what,
        }
    }

    fn is_bandwidth(&self) -> bool {
        matches!(self, Figure::Busbw { .. })
    }

    pub fn words(&self) -> String {
        match self {
            Figure::Busbw { gbps, .. } => format!("{gbps:.2} GB/s"),
            Figure::StepTime { seconds, .. } => crate::units::fmt_s(*seconds),
        }
    }
}

/// One GPU as the comparison reads it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuFacts {
    pub index: u32,
    pub name: String,
    /// PCIe generation and width that bound its transfers (under load where read, else at rest
    /// at its generation at most: idle links drop their rate).
    pub pcie: Option<(u32, u32)>,
    pub nvlinks_active: Option<u32>,
    pub sm_clock_mhz: Option<u32>,
    /// NVML's active throttle reasons.
    #[serde(default)]
    pub throttle_reasons: Vec<String>,
}

/// One pair of GPUs: its link, P2P status and NCCL's transport.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PairFacts {
    pub a: u32,
    pub b: u32,
    pub link: Option<LinkClass>,
    pub p2p: Option<P2pStatus>,
    /// NCCL's transport from its log (worst of the pair's channels); `None` where not read.
    pub transport: Option<Transport>,
    /// The log's words (`P2P/CUMEM`, `SHM/direct/direct`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport_raw: Option<String>,
}

/// Everything one run says that a difference could come from, and its figure.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunFacts {
    pub kind: RunKind,
    /// Where it comes from (`explain report of node-7, 2026-12-06T03:00:00Z`).
    pub source: String,
    pub figure: Option<Figure>,
    /// How many GPUs ran.
    pub gpu_count: usize,
    /// The GPUs' own facts, where the run recorded them.
    pub gpus: Vec<GpuFacts>,
    pub pairs: Vec<PairFacts>,
    /// The transports of the whole run's channels where no pair's were read (`P2P/CUMEM, SHM`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_transport: Option<String>,
    pub nccl_version: Option<String>,
    pub driver_version: Option<String>,
    pub cuda_version: Option<String>,
    pub nccl_env: BTreeMap<String, String>,
    /// Algorithms and protocols NCCL's log shows (`Ring/Simple`), where read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub algo_proto: Option<String>,
}

/// The kinds of change, in the order the issue names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    NcclVersion,
    Transport,
    AlgoProto,
    PcieLink,
    P2pStatus,
    Driver,
    Cuda,
    NcclEnv,
    Clocks,
    Throttling,
    Topology,
    NvlinkCount,
    GpuModel,
}

impl ChangeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::NcclVersion => "nccl_version",
            ChangeKind::Transport => "transport",
            ChangeKind::AlgoProto => "algo_proto",
            ChangeKind::PcieLink => "pcie_link",
            ChangeKind::P2pStatus => "p2p_status",
            ChangeKind::Driver => "driver",
            ChangeKind::Cuda => "cuda",
            ChangeKind::NcclEnv => "nccl_env",
            ChangeKind::Clocks => "clocks",
            ChangeKind::Throttling => "throttling",
            ChangeKind::Topology => "topology",
            ChangeKind::NvlinkCount => "nvlink_count",
            ChangeKind::GpuModel => "gpu_model",
        }
    }
}

/// One change between the runs, with what it can explain.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Change {
    /// 1 for the change that explains most.
    pub rank: u32,
    pub kind: ChangeKind,
    /// Where: GPU pairs (`GPU0–GPU1`), GPUs, a variable's name, or `node`.
    pub r#where: Vec<String>,
    pub before: String,
    pub after: String,
    /// The ratio (run B's speed ÷ run A's) this change alone accounts for by capacity; `None`
    /// where no capacity arithmetic applies to it.
    pub explains_ratio: Option<f64>,
    /// The arithmetic behind `explains_ratio`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arithmetic: Option<String>,
    /// The change that brought this one about (`NCCL 2.21.5 → 2.23.4`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
    /// The changes this one brought about (their kinds).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub caused: Vec<ChangeKind>,
    /// One line: what changed and what it does.
    pub message: String,
}

/// The answer: both runs, the measured ratio, the ranked changes and what stays unexplained.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Diff {
    pub a: RunSummary,
    pub b: RunSummary,
    /// B's speed ÷ A's (bandwidth B ÷ A; for step times A ÷ B), where both have the figure.
    pub measured_ratio: Option<f64>,
    /// The ratio every change with capacity arithmetic accounts for together (1 where none
    /// changes the path's ceiling); `None` where no arithmetic applies (links or transports
    /// unknown, step times).
    pub explained_ratio: Option<f64>,
    /// measured ÷ explained: the part no capacity arithmetic accounts for.
    pub unexplained_ratio: Option<f64>,
    pub changes: Vec<Change>,
    /// What stays unexplained, in a line.
    pub unexplained: String,
    /// What the runs did not record, and what that leaves undecided.
    pub undecided: Vec<String>,
}

/// One run in the answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    pub kind: RunKind,
    pub source: String,
    pub figure: Option<Figure>,
    pub gpu_count: usize,
    /// What its path could carry at most, where its links and transports are known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ceiling: Option<PathCeiling>,
}

/// Two runs that cannot be compared.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum DiffError {
    #[error("run A is a {a} report and run B a {b} report: they measure different things and cannot be compared (compare check, bench collectives, explain and artifacts with each other, bench ddp with bench ddp)")]
    Kinds { a: &'static str, b: &'static str },
    #[error("run A ran {a} GPUs and run B {b}: a difference between different GPU counts is not a change of the node; compare runs of the same GPUs")]
    GpuCount { a: usize, b: usize },
    #[error("run A measured {a} and run B {b}: compare runs of the same model and GPU count")]
    Figures { a: String, b: String },
}

/// Compares run A (before) with run B (after).
pub fn diff(a: &RunFacts, b: &RunFacts) -> Result<Diff, DiffError> {
    comparable(a, b)?;
    let mut found = changes::between(a, b);
    causes::link(&mut found);
    let measured = measured_ratio(a, b);
    let (explained, mut undecided, [ceil_a, ceil_b]) = ceiling::explain_all(&mut found, a, b);
    undecided.extend(missing(a, "A").into_iter().chain(missing(b, "B")));
    let changes = causes::rank(found);
    let unexplained_ratio = measured.zip(explained).map(|(m, e)| m / e);
    let noun = match &a.figure {
        Some(Figure::StepTime { .. }) => "step rate (1 ÷ step time)",
        _ => "busbw",
    };
    let unexplained = causes::unexplained_words(noun, measured, explained, &changes);
    Ok(Diff {
        a: summary(a, ceil_a),
        b: summary(b, ceil_b),
        measured_ratio: measured,
        explained_ratio: explained,
        unexplained_ratio,
        changes,
        unexplained,
        undecided,
    })
}

fn summary(r: &RunFacts, ceiling: Option<PathCeiling>) -> RunSummary {
    RunSummary {
        kind: r.kind,
        source: r.source.clone(),
        figure: r.figure.clone(),
        gpu_count: r.gpu_count,
        ceiling,
    }
}

fn comparable(a: &RunFacts, b: &RunFacts) -> Result<(), DiffError> {
    let ddp = |r: &RunFacts| r.kind == RunKind::BenchDdp;
    if ddp(a) != ddp(b) {
        return Err(DiffError::Kinds {
            a: a.kind.as_str(),
            b: b.kind.as_str(),
        });
    }
    if a.gpu_count != b.gpu_count {
        return Err(DiffError::GpuCount {
            a: a.gpu_count,
            b: b.gpu_count,
        });
    }
    if let (Some(fa), Some(fb)) = (&a.figure, &b.figure) {
        if fa.is_bandwidth() != fb.is_bandwidth() || (!fa.is_bandwidth() && fa.what() != fb.what())
        {
            return Err(DiffError::Figures {
                a: fa.what().to_string(),
                b: fb.what().to_string(),
            });
        }
    }
    Ok(())
}

fn measured_ratio(a: &RunFacts, b: &RunFacts) -> Option<f64> {
    let (fa, fb) = (a.figure.as_ref()?, b.figure.as_ref()?);
    let (sa, sb) = (fa.speed(), fb.speed());
    (sa.is_finite() && sa > 0.0 && sb.is_finite() && sb >= 0.0).then(|| sb / sa)
}

/// What a run lacks that the comparison would have used.
fn missing(r: &RunFacts, name: &str) -> Vec<String> {
    let mut out = Vec::new();
    if r.figure.is_none() {
        out.push(format!(
            "run {name} has no figure: the difference is not measured"
        ));
    }
    if r.kind == RunKind::BenchDdp || r.gpu_count < 2 {
        return out;
    }
    let topology = r.pairs.iter().any(|p| p.link.is_some());
    if !topology {
        out.push(format!(
            "run {name} recorded no topology: links per pair unknown, so no capacity arithmetic"
        ));
    }
    if r.pairs.iter().all(|p| p.transport.is_none()) && r.node_transport.is_none() {
        out.push(if topology {
            format!("run {name} recorded no NCCL transport: predicted from the topology and NCCL variables")
        } else {
            format!("run {name} recorded no NCCL transport, and no topology to predict it from")
        });
    }
    out
}
