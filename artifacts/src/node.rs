//! The readings assembled into what core's judge takes, as a live run builds it: the GPUs
//! (`GpuInfo`), the pair matrix, the platform (bridges, ACS, NUMA), the NCCL variables in force
//! and the measurements; with what no artifact showed and what that leaves undecided. Artifacts
//! that disagree on the GPUs (two nodes' files in one folder) are refused, never merged.

use std::collections::BTreeMap;

use ddpcheck_core::collective::Sweep;
use ddpcheck_core::explain::platform::PlatformFacts;
use ddpcheck_core::explain::{ExplainInput, NodeMeasurement, PairMeasurement};
use ddpcheck_core::node_gpus::GpuInfo;
use ddpcheck_core::topology::TopologyMatrix;

use crate::folder::Read;
use crate::nccl_log::NcclLog;
use crate::nccl_tests::NcclTests;
use crate::{ArtifactError, Format, Reading};

pub mod gpus;
mod measure;
mod platform;
mod topology;

/// Everything the judge takes, from the artifacts.
#[derive(Clone, Debug, PartialEq)]
pub struct Assembled {
    pub gpus: Vec<GpuInfo>,
    pub topology: Option<TopologyMatrix>,
    pub platform: PlatformFacts,
    pub nccl_env: BTreeMap<String, String>,
    pub measurements: Vec<PairMeasurement>,
    pub node_measurement: Option<NodeMeasurement>,
    /// The all-reduce sweep `check`'s judgement reads, where nccl-tests ran one on this node.
    pub sweep: Option<Sweep>,
    pub driver_version: Option<String>,
    pub cuda_version: Option<String>,
    pub nccl_version: Option<String>,
    /// The algorithm and protocol of the largest all-reduce NCCL's log shows (`Ring/Simple`).
    pub algo_proto: Option<String>,
    /// Every transport the channel lines of NCCL's logs show (`P2P/CUMEM, SHM/direct`): a run's
    /// transports where its log names no GPU (a training job's log given alone).
    pub log_transport: Option<String>,
    /// What a missing artifact would have decided, one line each.
    pub undecided: Vec<String>,
}

impl Assembled {
    /// What core's `explain` takes, as a live run gives it (no history from artifacts).
    pub fn explain_input(&self) -> ExplainInput<'_> {
        ExplainInput {
            gpus: &self.gpus,
            topology: self.topology.as_ref(),
            platform: &self.platform,
            nccl_env: &self.nccl_env,
            measurements: &self.measurements,
            node_measurement: self.node_measurement.as_ref(),
            history_busbw: &[],
        }
    }
}

/// The readings of each format, in file order.
#[derive(Default)]
pub(crate) struct ByFormat<'a> {
    pub topo: Vec<&'a crate::topo_matrix::TopoMatrix>,
    pub p2p: Vec<&'a crate::topo_p2p::TopoP2p>,
    pub smi: Vec<&'a crate::smi_query::SmiQuery>,
    pub nvlink: Vec<&'a crate::nvlink_status::NvlinkStatus>,
    /// Each nccl-tests output with the NCCL log of its own file, if any.
    pub tests: Vec<(&'a NcclTests, Option<&'a NcclLog>)>,
    pub logs: Vec<&'a NcclLog>,
    pub lspci: Vec<&'a crate::lspci::Lspci>,
}

fn by_format(reads: &[Read]) -> ByFormat<'_> {
    let mut b = ByFormat::default();
    for (i, r) in reads.iter().enumerate() {
        match &r.reading {
            Reading::TopoMatrix(x) => b.topo.push(x),
            Reading::TopoP2p(x) => b.p2p.push(x),
            Reading::SmiQuery(x) => b.smi.push(x),
            Reading::NvlinkStatus(x) => b.nvlink.push(x),
            Reading::NcclTests(x) => {
                let same_file = reads
                    .iter()
                    .enumerate()
                    .find_map(|(j, o)| match &o.reading {
                        Reading::NcclLog(l) if j != i && o.provenance.file == r.provenance.file => {
                            Some(l)
                        }
                        _ => None,
                    });
                b.tests.push((x, same_file));
            }
            Reading::NcclLog(x) => b.logs.push(x),
            Reading::Lspci(x) => b.lspci.push(x),
        }
    }
    b
}

/// One reading at most of a format that describes the whole node.
fn one<'a, T>(v: &[&'a T], f: Format) -> Result<Option<&'a T>, ArtifactError> {
    match v {
        [] => Ok(None),
        [x] => Ok(Some(x)),
        _ => Err(ArtifactError::Inconsistent(format!(
            "{} files of {f}; give one per node",
            v.len()
        ))),
    }
}

/// Assembles the readings; artifacts of different nodes are an error.
pub fn assemble(reads: &[Read]) -> Result<Assembled, ArtifactError> {
    let b = by_format(reads);
    let topo = one(&b.topo, Format::TopoMatrix)?;
    let smi = one(&b.smi, Format::SmiQuery)?;
    let nvlink = one(&b.nvlink, Format::NvlinkStatus)?;
    let lspci = one(&b.lspci, Format::Lspci)?;
    let mut undecided = Vec::new();
    let gpus = gpus::gpus(smi, nvlink, topo, &b.tests, lspci, &mut undecided)?;
    let topology = topology::matrix(topo, &b.p2p, &gpus, &mut undecided)?;
    let mut platform = platform::facts(lspci, smi, &gpus);
    undecided.extend(platform::unplaced_acs(lspci));
    platform.evidence_from = Some(cited(reads));
    let log = measure::log_for_env(&b);
    let nccl_env = log.map(|l| l.env.clone()).unwrap_or_default();
    let m = measure::measurements(&b, &gpus, &mut undecided)?;
    missing(&b, &mut undecided);
    Ok(Assembled {
        driver_version: smi.and_then(|s| s.driver_version.clone()),
        cuda_version: smi.and_then(|s| s.cuda_version.clone()),
        nccl_version: b
            .logs
            .iter()
            .find_map(|l| l.nccl_version.clone())
            .or_else(|| b.tests.iter().find_map(|(t, _)| t.nccl_version.clone())),
        algo_proto: algo_proto(&b),
        log_transport: b.logs.iter().find_map(|l| l.transports()),
        gpus,
        topology,
        platform,
        nccl_env,
        measurements: m.pairs,
        node_measurement: m.node,
        sweep: m.sweep,
        undecided,
    })
}

/// The algorithm and protocol of the largest all-reduce: from the log of an nccl-tests
/// all-reduce run's own file first (its numeric tuning lines are that run's), else from any log's
/// lines that name the all-reduce.
fn algo_proto(b: &ByFormat<'_>) -> Option<String> {
    use crate::nccl_tuning::largest_all_reduce;
    let run = b.tests.iter().find_map(|(t, own)| {
        let own = own.filter(|_| t.op == Some(ddpcheck_core::collective::Collective::AllReduce))?;
        largest_all_reduce(&own.tuning, true)
    });
    run.or_else(|| {
        b.logs
            .iter()
            .find_map(|l| largest_all_reduce(&l.tuning, false))
    })
}

/// The files platform evidence cites (`artifacts: lspci -vvv (dir/lspci.txt), nvidia-smi -q
/// (dir/smi.txt)`), in place of a live node's sysfs and /proc.
fn cited(reads: &[Read]) -> String {
    let files: Vec<String> = reads
        .iter()
        .filter(|r| matches!(r.provenance.format, Format::Lspci | Format::SmiQuery))
        .map(|r| format!("{} ({})", r.provenance.command, r.provenance.file))
        .collect();
    if files.is_empty() {
        "artifacts: neither lspci -vvv nor nvidia-smi -q".into()
    } else {
        format!("artifacts: {}", files.join(", "))
    }
}

/// What each absent artifact would have decided.
fn missing(b: &ByFormat<'_>, out: &mut Vec<String>) {
    let lines: [(bool, &str); 7] = [
        (b.topo.is_empty(), "no topo matrix (nvidia-smi topo -m): P2P path unknown, pairs not judged"),
        (b.p2p.is_empty(), "no P2P matrix (nvidia-smi topo -p2p r): NVML's P2P status unknown (product, chipset or host-bridge refusals not seen)"),
        (b.smi.is_empty(), "no nvidia-smi -q: PCIe link generation and width, ECC, row remapping, clocks and their throttle reasons, MIG not judged"),
        (b.nvlink.is_empty(), "no nvidia-smi nvlink -s: NVLink states not judged"),
        (b.tests.is_empty(), "no nccl-tests output: bandwidth not judged"),
        (b.logs.is_empty(), "no NCCL_DEBUG=INFO log: the transport NCCL chose is predicted from the topology, and the NCCL variables in force are unknown (taken as none set)"),
        (b.lspci.is_empty(), "no lspci -vvv: ACS on the bridges between GPUs, each GPU's NUMA node and the PCI tree (VM) not judged"),
    ];
    out.extend(
        lines
            .iter()
            .filter(|(m, _)| *m)
            .map(|(_, l)| (*l).to_string()),
    );
    out.push(
        "IOMMU mode, the Fabric Manager process, and XID events are in none of these artifacts: not judged (the GPUs' fabric registration is, in nvidia-smi -q)"
            .into(),
    );
}
