//! Why is this node slow: every common cause of low GPU bandwidth, each with its evidence and a
//! recommended action, chained per GPU pair (measured busbw, share of expected, the transport
//! NCCL chose against the one the topology allows, the causes, the fix, an optional A/B).
//!
//! Pure judgement over what backends read and measured: no I/O, no text layout.

pub mod action;
pub mod consumer;
pub mod gpu_count;
mod limit;
pub mod network;
mod node;
mod node_env;
mod pair;
pub(crate) mod path_capacity;
mod per_gpu;
pub mod platform;
#[cfg(test)]
mod tests;
pub mod transport;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use action::Action;
pub use limit::RECOVERY_RATIO;
pub use path_capacity::{best_ring_bottleneck, PathCapacity};
pub use platform::PlatformFacts;
pub use transport::Transport;

use crate::expect::Expectation;
use crate::finding::{Evidence, Severity};
use crate::node_gpus::GpuInfo;
use crate::topology::{GpuRef, LinkClass, TopologyMatrix};
use crate::verdict::Verdict;

/// The causes ddpcheck knows, each documented in docs/explain.md with its source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CauseKind {
    /// NCCL's transport for a pair is slower than the topology allows.
    TransportDowngraded,
    /// `NCCL_P2P_DISABLE=1` where P2P would be used.
    P2pDisabled,
    /// `NCCL_P2P_LEVEL` below the pair's path: P2P off where it would be used.
    P2pLevelTooLow,
    /// `NCCL_P2P_LEVEL` forcing P2P across a host bridge or CPU sockets.
    P2pForced,
    /// `NCCL_SHM_DISABLE=1` where shared memory is the pair's transport.
    ShmDisabled,
    /// ACS redirects peer traffic on a bridge between two GPUs.
    Acs,
    /// The IOMMU translates DMA addresses (peer traffic through the root complex's IOMMU).
    IommuTranslated,
    /// The node is a virtual machine: the PCI tree and NUMA nodes seen are the hypervisor's.
    VirtualMachine,
    /// The platform gives no NUMA node for a GPU (sysfs `numa_node` −1).
    NumaUnknown,
    /// A PCIe link runs below its generation or width (under load, or at rest where no load
    /// reading exists).
    PcieDowntrained,
    /// A PCIe link below its maximum at rest that reached it under load (power saving).
    PcieIdleDownclock,
    /// A pair crosses NUMA nodes over PCIe (SYS).
    CrossNuma,
    /// MIG mode is on: no P2P between MIG instances.
    Mig,
    /// Fewer NVLinks active than the SKU has.
    NvlinkDown,
    /// NVSwitches present, Fabric Manager not running.
    FabricManagerDown,
    /// Measured busbw below the reference for the SKU and link.
    BelowExpected,
    /// Measured busbw below the node's own history.
    BelowHistory,
    /// A platform limit: SHM stages every byte through host memory (PCIe pairs across a host
    /// bridge, NCCL's default there).
    ShmStaging,
    /// A platform limit: P2P across a host bridge, where the root complex forwards peer writes.
    P2pHostBridge,
    /// A platform limit: a virtual machine without GPU peer-to-peer, so every pair stages through
    /// host memory.
    VmNoP2p,
    /// A platform limit: the node's ring all-reduce is bounded by its slowest hop, slower than
    /// its fastest pairs.
    RingSlowestHop,
    /// NVML reports no P2P over PCIe between the pair, with its reason (product policy,
    /// registry key, chipset or host bridge topology): every byte stages through host memory.
    P2pNotSupported,
    /// The pair's all-reduce hung or returned wrong values over P2P on PCIe that is forced, or
    /// on a card whose product has none (a patched driver).
    P2pBroken,
    /// `NCCL_TOPO_FILE` is set: NCCL reads the node's topology from a file instead of detecting
    /// it; the first suspect where the figure is below expected or the transport worse than the
    /// topology allows.
    NcclTopoFile,
    /// Channels between nodes over TCP sockets (`NET/Socket`) where the log shows an RDMA
    /// network (InfiniBand, RoCE) was there or asked for.
    NetSocketInsteadOfRdma,
    /// Fewer GPUs on the node than the operator expects of its machine type (a GPU off the bus or
    /// failing the driver's probe).
    GpuMissing,
}

impl CauseKind {
    pub const ALL: [CauseKind; 26] = [
        CauseKind::TransportDowngraded,
        CauseKind::P2pDisabled,
        CauseKind::P2pLevelTooLow,
        CauseKind::P2pForced,
        CauseKind::ShmDisabled,
        CauseKind::Acs,
        CauseKind::IommuTranslated,
        CauseKind::VirtualMachine,
        CauseKind::NumaUnknown,
        CauseKind::PcieDowntrained,
        CauseKind::PcieIdleDownclock,
        CauseKind::CrossNuma,
        CauseKind::Mig,
        CauseKind::NvlinkDown,
        CauseKind::FabricManagerDown,
        CauseKind::BelowExpected,
        CauseKind::BelowHistory,
        CauseKind::ShmStaging,
        CauseKind::P2pHostBridge,
        CauseKind::VmNoP2p,
        CauseKind::RingSlowestHop,
        CauseKind::P2pNotSupported,
        CauseKind::P2pBroken,
        CauseKind::NcclTopoFile,
        CauseKind::NetSocketInsteadOfRdma,
        CauseKind::GpuMissing,
    ];

    /// The causes that are the platform's nature, not faults (action `platform_limit`).
    pub fn is_platform_limit(self) -> bool {
        matches!(
            self,
            CauseKind::ShmStaging
                | CauseKind::P2pHostBridge
                | CauseKind::VmNoP2p
                | CauseKind::RingSlowestHop
                | CauseKind::P2pNotSupported
        )
    }

    /// The JSON and metric label word.
    pub fn as_str(self) -> &'static str {
        match self {
            CauseKind::TransportDowngraded => "transport_downgraded",
            CauseKind::P2pDisabled => "p2p_disabled",
            CauseKind::P2pLevelTooLow => "p2p_level_too_low",
            CauseKind::P2pForced => "p2p_forced",
            CauseKind::ShmDisabled => "shm_disabled",
            CauseKind::Acs => "acs",
            CauseKind::IommuTranslated => "iommu_translated",
            CauseKind::VirtualMachine => "virtual_machine",
            CauseKind::NumaUnknown => "numa_unknown",
            CauseKind::PcieDowntrained => "pcie_downtrained",
            CauseKind::PcieIdleDownclock => "pcie_idle_downclock",
            CauseKind::CrossNuma => "cross_numa",
            CauseKind::Mig => "mig",
            CauseKind::NvlinkDown => "nvlink_down",
            CauseKind::FabricManagerDown => "fabric_manager_down",
            CauseKind::BelowExpected => "below_expected",
            CauseKind::BelowHistory => "below_history",
            CauseKind::ShmStaging => "shm_staging",
            CauseKind::P2pHostBridge => "p2p_host_bridge",
            CauseKind::VmNoP2p => "vm_no_p2p",
            CauseKind::RingSlowestHop => "ring_slowest_hop",
            CauseKind::P2pNotSupported => "p2p_not_supported",
            CauseKind::P2pBroken => "p2p_broken",
            CauseKind::NcclTopoFile => "nccl_topo_file",
            CauseKind::NetSocketInsteadOfRdma => "net_socket_instead_of_rdma",
            CauseKind::GpuMissing => "gpu_missing",
        }
    }
}

/// One cause: what it is, where, the evidence, and what to do.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Cause {
    pub kind: CauseKind,
    pub severity: Severity,
    pub action: Action,
    /// One line: what is wrong.
    pub message: String,
    /// A few words for a chain's "because …" (`NCCL_P2P_DISABLE=1 is set`).
    pub short: String,
    /// The action in words (`unset NCCL_P2P_DISABLE`).
    pub fix: String,
    pub evidence: Vec<Evidence>,
    /// The GPUs it concerns, by UUID and bus id; empty for the whole node.
    pub gpus: Vec<GpuRef>,
    /// NCCL overrides that try the fix (the A/B's candidate); empty where the fix is no env change.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env_fix: Vec<(String, String)>,
    /// Where the judgement comes from (a document, a measurement).
    pub source: String,
}

impl Cause {
    /// A cause of `kind` on `gpus` (empty for the whole node), its words, evidence and source
    /// still to be filled in by the judgement that found it.
    pub fn new(kind: CauseKind, severity: Severity, action: Action, gpus: Vec<GpuRef>) -> Cause {
        Cause {
            kind,
            severity,
            action,
            message: String::new(),
            short: String::new(),
            fix: String::new(),
            evidence: Vec::new(),
            gpus,
            env_fix: Vec::new(),
            source: String::new(),
        }
    }
}

/// What was measured on one pair: a short all-reduce sweep of its two GPUs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PairMeasurement {
    /// GPU indices, as in the inventory.
    pub a: u32,
    pub b: u32,
    /// Large-message all-reduce busbw, GB/s.
    pub busbw_gbps: Option<f64>,
    pub bytes: Option<u64>,
    /// NCCL's transports from its log (`P2P/CUMEM, SHM/direct`), where read.
    pub transport: Option<String>,
    /// Why there is no figure (a timeout, a worker error).
    pub error: Option<String>,
    /// Wrong elements the correctness check found, where it found any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wrong: Option<u64>,
    /// The run timed out (its error says after how long).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub timed_out: bool,
}

/// What was measured on all the GPUs together: the node's all-reduce.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeMeasurement {
    /// Large-message all-reduce busbw, GB/s.
    pub busbw_gbps: Option<f64>,
    pub bytes: Option<u64>,
    /// NCCL's transports from its log, where read.
    pub transport: Option<String>,
    pub error: Option<String>,
}

/// The node's all-reduce (three or more GPUs) against both references: the class's and the
/// physical capacity of its best ring's slowest hop.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeChain {
    pub gpus: Vec<GpuRef>,
    pub busbw_gbps: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measure_error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport_raw: Option<String>,
    /// The class reference for the node (`expect::expected_allreduce`).
    pub expected: Option<Expectation>,
    /// busbw ÷ expected.
    pub ratio: Option<f64>,
    /// The slowest hop of the best ring through every GPU.
    pub capacity: Option<PathCapacity>,
    /// That hop's GPU indices.
    pub slowest_hop: Option<(u32, u32)>,
    /// Platform limits of the node's all-reduce (the ring's slowest hop, SHM staging).
    pub causes: Vec<Cause>,
}

/// The measured effect of a fix: the pair again under the fix's NCCL overrides.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AbFigure {
    pub overrides: Vec<(String, String)>,
    /// The pair's own figure; 0 where its own run failed (`before_error` says why).
    pub before_gbps: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before_error: Option<String>,
    pub after_gbps: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_transport: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The chain for one pair.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PairChain {
    pub a: GpuRef,
    pub b: GpuRef,
    pub link: LinkClass,
    pub busbw_gbps: Option<f64>,
    pub expected: Option<Expectation>,
    /// busbw ÷ expected.
    pub ratio: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measure_error: Option<String>,
    /// The transport NCCL used (`measured`) or the environment leaves (predicted).
    pub transport: Transport,
    pub transport_measured: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport_raw: Option<String>,
    /// The best transport the topology allows.
    pub transport_allowed: Transport,
    /// The physical capacity of the pair's path, and the fractions of it measured and expected.
    #[serde(default)]
    pub capacity: Option<PathCapacity>,
    /// Causes of this pair (environment, ACS, NUMA, transport, expected, history).
    pub causes: Vec<Cause>,
    /// Node and GPU causes that bear on this pair (in `Explanation::causes`).
    pub related: Vec<CauseKind>,
    /// Every cause's "because" words, this pair's first.
    pub because: Vec<String>,
    /// The fix in words, or empty when nothing is wrong.
    pub fix: String,
    /// The NCCL overrides that try the fix, for an A/B.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env_fix: Vec<(String, String)>,
    /// Where the gap is a platform limit: the NCCL overrides that try the other transport, for
    /// an A/B that shows whether anything on this machine recovers it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alternative: Vec<(String, String)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ab: Option<AbFigure>,
}

/// The answer: node and GPU causes and the pair chains ([`Explanation::verdict`] judges them).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Explanation {
    pub causes: Vec<Cause>,
    pub pairs: Vec<PairChain>,
    /// The node's all-reduce, on three or more GPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<NodeChain>,
    /// The node's own recent all-reduce busbw median, shown next to the reference.
    pub history_median_gbps: Option<f64>,
}

impl Explanation {
    /// Every cause, node and GPU ones first, then each pair's, then the node all-reduce's.
    pub fn all_causes(&self) -> impl Iterator<Item = &Cause> {
        self.causes
            .iter()
            .chain(self.pairs.iter().flat_map(|p| p.causes.iter()))
            .chain(self.node.iter().flat_map(|n| n.causes.iter()))
    }
}

/// What `explain` judges.
pub struct ExplainInput<'a> {
    pub gpus: &'a [GpuInfo],
    pub topology: Option<&'a TopologyMatrix>,
    pub platform: &'a PlatformFacts,
    pub nccl_env: &'a BTreeMap<String, String>,
    pub measurements: &'a [PairMeasurement],
    /// The all-reduce of every GPU together, where one ran (three or more GPUs).
    pub node_measurement: Option<&'a NodeMeasurement>,
    /// The node's recent large-message all-reduce busbw, GB/s.
    pub history_busbw: &'a [f64],
}

/// Judges the node: node and GPU causes, then one chain per pair of the topology.
pub fn explain(input: &ExplainInput<'_>) -> Explanation {
    let mut causes = node::causes(input);
    causes.extend(node_env::causes(input));
    causes.extend(per_gpu::causes(input));
    let pairs: Vec<PairChain> = match input.topology {
        Some(t) => t
            .pairs()
            .iter()
            .map(|p| pair::chain(input, p, &causes))
            .collect(),
        None => Vec::new(),
    };
    let node = limit::node_chain(input, &pairs);
    if let Some(c) = node_env::topo_file(input, &pairs, node.as_ref()) {
        // Where it is a warning it is the first suspect: it comes first.
        let at = if c.severity >= Severity::Warning {
            0
        } else {
            causes.len()
        };
        causes.insert(at, c);
    }
    Explanation {
        causes,
        pairs,
        node,
        history_median_gbps: crate::expect::median(input.history_busbw),
    }
}

/// Attaches an A/B figure to the chain of pair (a, b); a platform limit's words then say what
/// the alternative measured.
pub fn attach_ab(explanation: &mut Explanation, a: u32, b: u32, ab: AbFigure) {
    if let Some(chain) = explanation
        .pairs
        .iter_mut()
        .find(|c| c.a.index == a && c.b.index == b)
    {
        chain.ab = Some(ab);
        limit::after_ab(chain);
        consumer::after_ab(chain);
    }
    if let Some(node) = explanation.node.as_mut() {
        limit::node_after_ab(node, &explanation.pairs);
    }
}

/// Whether an A/B runs on a chain: it has overrides to try, and a figure to set them against,
/// or a run that hung or corrupted over P2P (a hang in the pair's own run never stops its A/B).
pub fn ab_wanted(chain: &PairChain) -> bool {
    !ab_overrides(chain).is_empty()
        && (chain.busbw_gbps.is_some()
            || chain.causes.iter().any(|c| c.kind == CauseKind::P2pBroken))
}

/// The overrides an A/B runs on a chain: its fix's, else the platform limit's alternative.
pub fn ab_overrides(chain: &PairChain) -> &[(String, String)] {
    if chain.env_fix.is_empty() {
        &chain.alternative
    } else {
        &chain.env_fix
    }
}

/// NCCL overrides in words (`NCCL_P2P_LEVEL=SYS`).
fn action_env_words(env: &[(String, String)]) -> String {
    env.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

impl Explanation {
    /// OK, WARNING or CRITICAL from the worst cause.
    pub fn verdict(&self) -> Verdict {
        match self.all_causes().map(|c| c.severity).max() {
            Some(Severity::Critical) => Verdict::Critical,
            Some(Severity::Warning) => Verdict::Warning,
            _ => Verdict::Ok,
        }
    }

    /// Where no fault was found but a platform limit bounds the figures, that in a line (the
    /// node's all-reduce where there is one, else the first pair's): "all 4 GPUs: 4.33 GB/s is
    /// 27% of PCIe gen3 x16, a platform limit (SHM staging through host memory)".
    pub fn platform_limit_summary(&self) -> Option<String> {
        let limit = |cs: &[Cause]| cs.iter().find(|c| c.kind.is_platform_limit()).cloned();
        let node = self.node.as_ref().and_then(|n| {
            let c = limit(&n.causes)?;
            Some((
                format!("all {} GPUs", n.gpus.len()),
                n.busbw_gbps,
                n.capacity.clone(),
                c,
            ))
        });
        let (who, busbw, cap, c) = node.or_else(|| {
            self.pairs.iter().find_map(|p| {
                let c = limit(&p.causes)?;
                let who = format!("GPU{}–GPU{}", p.a.index, p.b.index);
                Some((who, p.busbw_gbps, p.capacity.clone(), c))
            })
        })?;
        Some(match (busbw, cap) {
            (Some(b), Some(k)) => format!(
                "no fault found; {who}: {b:.2} GB/s is {:.0}% of {}, a platform limit ({})",
                b / k.gbps * 100.0,
                k.path,
                c.short
            ),
            _ => format!("no fault found; {who}: a platform limit ({})", c.short),
        })
    }

    /// The worst cause at warning or above, for a one-line reason.
    pub fn worst(&self) -> Option<&Cause> {
        self.all_causes()
            .filter(|c| c.severity > Severity::Info)
            .max_by_key(|c| c.severity)
    }
}

/// A GPU's reference for causes.
fn gpu_ref(g: &GpuInfo) -> GpuRef {
    g.gpu_ref()
}
