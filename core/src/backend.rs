//! The measuring side's interface: what a node backend (real or simulated) must answer.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::collective::{Collective, Sweep};
use crate::ddp::{DdpRequest, DdpResult};
use crate::node_gpus::{GpuInfo, NodeInventory};
use crate::probe_error::ProbeError;
use crate::topology::{GpuRef, TopologyMatrix};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackendKind {
    Real,
    Sim,
}

impl BackendKind {
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Real => "real",
            BackendKind::Sim => "sim",
        }
    }
}

/// What a DDP benchmark gave: its results, and, where a deadline stopped it after some of
/// them, that timeout (a TIMEOUT verdict that keeps what finished before it).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DdpOutcome {
    pub results: Vec<DdpResult>,
    /// Always a [`ProbeError::Timeout`] where set.
    pub stopped: Option<ProbeError>,
}

/// A progress note for long work; shown on a TTY and streamed by the daemon.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    pub stage: String,
    pub done: u32,
    pub total: u32,
    pub message: String,
}

/// A collective sweep to run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CollectiveRequest {
    pub ops: Vec<Collective>,
    pub gpus: Vec<GpuRef>,
    pub min_bytes: u64,
    pub max_bytes: u64,
    pub step_factor: u64,
    pub warmup_iters: u32,
    pub iters: u32,
    /// Run the in-place variant too (nccl-tests does both).
    pub in_place: bool,
    /// Count wrong elements after each size (nccl-tests' -c 1).
    pub check: bool,
    /// NCCL_* variables set for this run on top of the current environment.
    pub env: Vec<(String, String)>,
    pub deadline: Duration,
    /// Test hook: make the worker hang after init, to prove the deadline.
    #[serde(default)]
    pub inject_hang: bool,
    /// Set when this process's GPUs are some ranks of a larger communicator (a cluster run
    /// across nodes); unset: one communicator over this request's GPUs.
    #[serde(default)]
    pub group: Option<RankGroup>,
    /// Read NCCL's log for the transports its channels use (`CollectiveRun::transport`); runs
    /// across processes record them anyway.
    #[serde(default)]
    pub record_transport: bool,
}

/// This process's share of a communicator that spans processes (one per node).
///
/// The ranks meet through NCCL's own bootstrap: every process sets `NCCL_COMM_ID` to
/// `comm_id` (`host:port` of the first node), so all derive the same unique id, and global
/// rank 0 opens the bootstrap root there inside `ncclCommInitRank`. No process has to live
/// from one phase of the cluster protocol to the next to hold the id.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RankGroup {
    /// Global rank of this process's first GPU; its GPUs take consecutive ranks.
    pub first_rank: u32,
    /// GPUs this process drives (its ranks).
    pub local_ranks: u32,
    /// Ranks of the whole communicator.
    pub world_ranks: u32,
    /// `host:port` of the bootstrap root (rank 0's node).
    pub comm_id: String,
}

impl RankGroup {
    /// Largest communicator a cluster run may ask for (4096 nodes of 64 GPUs is beyond it; the
    /// bound only keeps buffers and loops finite).
    pub const MAX_WORLD_RANKS: u32 = 1 << 16;

    pub fn validate(&self) -> Result<(), ProbeError> {
        let bad = |m: String| Err(ProbeError::Invalid(m));
        if self.world_ranks < 2 || self.world_ranks > Self::MAX_WORLD_RANKS {
            return bad(format!(
                "{} ranks in the communicator, outside 2..={}",
                self.world_ranks,
                Self::MAX_WORLD_RANKS
            ));
        }
        if self.local_ranks == 0
            || u64::from(self.first_rank) + u64::from(self.local_ranks)
                > u64::from(self.world_ranks)
        {
            return bad(format!(
                "ranks {}..{} (of this process) do not fit in {} ranks",
                self.first_rank,
                u64::from(self.first_rank) + u64::from(self.local_ranks),
                self.world_ranks
            ));
        }
        let id = self.comm_id.as_str();
        let port_ok = id.rsplit_once(':').is_some_and(|(host, port)| {
            !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0)
        });
        if id.len() > 256 || id.chars().any(|c| c.is_whitespace() || c.is_control()) || !port_ok {
            return bad(format!(
                "rendezvous address {id:?} is not HOST:PORT (an IPv4 address, a name, or [IPv6])"
            ));
        }
        Ok(())
    }
}

impl CollectiveRequest {
    /// Largest message a sweep may ask for.
    pub const MAX_BYTES: u64 = 16 << 30;

    /// Bounds every field: a request from the outside world is checked before any work.
    pub fn validate(&self) -> Result<(), ProbeError> {
        let bad = |m: String| Err(ProbeError::Invalid(m));
        if self.ops.is_empty() {
            return bad("no collective given".into());
        }
        if self.min_bytes == 0 || self.min_bytes > self.max_bytes {
            return bad(format!(
                "size range {}..{} bytes is empty; the minimum must be ≥ 1 and ≤ the maximum",
                self.min_bytes, self.max_bytes
            ));
        }
        if self.max_bytes > Self::MAX_BYTES {
            return bad(format!(
                "maximum size {} bytes is above the 16 GiB bound",
                self.max_bytes
            ));
        }
        if self.step_factor < 2 || self.step_factor > 1024 {
            return bad(format!(
                "step factor {} is outside 2..=1024",
                self.step_factor
            ));
        }
        if self.iters == 0 || self.iters > 10_000 || self.warmup_iters > 10_000 {
            return bad(format!(
                "iterations {} (warm-up {}) outside 1..=10000",
                self.iters, self.warmup_iters
            ));
        }
        if self.deadline.is_zero() || self.deadline > Duration::from_secs(3600) {
            return bad(format!("deadline {:?} outside (0, 1 h]", self.deadline));
        }
        for (k, _) in &self.env {
            if !(k.starts_with("NCCL_") || k.starts_with("CUDA_")) {
                return bad(format!(
                    "environment override {k:?} is not an NCCL_* or CUDA_* variable"
                ));
            }
        }
        if let Some(g) = &self.group {
            g.validate()?;
            if !self.gpus.is_empty() && self.gpus.len() != g.local_ranks as usize {
                return bad(format!(
                    "{} GPUs named for {} local ranks",
                    self.gpus.len(),
                    g.local_ranks
                ));
            }
            if self.env.iter().any(|(k, _)| k == "NCCL_COMM_ID") {
                return bad("NCCL_COMM_ID is set by the rank group; do not override it".into());
            }
        }
        Ok(())
    }
}

/// What a collective run measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CollectiveRun {
    pub sweeps: Vec<Sweep>,
    /// The loaded library's version, from `ncclGetVersion` (not the NCCL_VERSION variable).
    pub nccl_version: Option<String>,
    /// The file the library was loaded from (several NCCLs on one node are common).
    #[serde(default)]
    pub nccl_library: Option<String>,
    pub cuda_runtime_version: Option<String>,
    /// Communicator creation, seconds.
    pub init_seconds: f64,
    /// Effective NCCL_* environment of the run.
    pub env: Vec<(String, String)>,
    /// The transports NCCL's channels use (`NET/Socket`, `P2P/CUMEM`, ...), from its INFO
    /// log; recorded for runs across processes (cluster runs), where it is the finding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<String>,
}

/// A node to measure: real GPUs or a simulated profile. Implementations block; callers that are
/// async run them on blocking threads. What only some backends do is in capability traits beside
/// the types they speak (`HostCopier`, `PlatformReader`, `ClusterMember`), gathered into
/// `crate::full_backend::FullBackend`.
pub trait NodeBackend: Send + Sync {
    fn kind(&self) -> BackendKind;
    /// A short label: `sim:h200x2-nvlink+degraded-pcie`, `real`.
    fn label(&self) -> String;
    fn inventory(&self) -> Result<NodeInventory, ProbeError>;
    fn topology(&self, gpus: &[GpuInfo]) -> Result<TopologyMatrix, ProbeError>;
    fn collectives(
        &self,
        req: &CollectiveRequest,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<CollectiveRun, ProbeError>;
    fn ddp(
        &self,
        req: &DdpRequest,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<Vec<DdpResult>, ProbeError>;

    /// [`NodeBackend::ddp`], keeping what finished before a deadline struck: the results of
    /// the runs that finished, and the timeout that stopped the rest. Default: `ddp`, which
    /// stops nothing midway or keeps nothing of what it stopped.
    fn ddp_outcome(
        &self,
        req: &DdpRequest,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<DdpOutcome, ProbeError> {
        self.ddp(req, progress).map(|results| DdpOutcome {
            results,
            stopped: None,
        })
    }
}
