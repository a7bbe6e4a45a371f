//! Link classes between GPU pairs and the pair topology matrix, in `nvidia-smi topo -m` vocabulary.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// How a pair of GPUs is connected, closest first (the order of `nvidia-smi topo -m`'s legend).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum LinkClass {
    /// The GPU itself (the matrix diagonal).
    X,
    /// Connected by a bonded set of this many NVLinks.
    Nv(u32),
    /// At most one PCIe bridge between them.
    Pix,
    /// Several PCIe bridges, without crossing the host bridge.
    Pxb,
    /// Through a PCIe host bridge (typically the CPU).
    Phb,
    /// Across host bridges within one NUMA node.
    Node,
    /// Across the SMP interconnect between NUMA nodes (QPI/UPI, Infinity Fabric).
    Sys,
}

impl LinkClass {
    /// Distance rank: lower is closer. NVLink ranks before any PCIe path.
    pub fn rank(self) -> u8 {
        match self {
            LinkClass::X => 0,
            LinkClass::Nv(_) => 1,
            LinkClass::Pix => 2,
            LinkClass::Pxb => 3,
            LinkClass::Phb => 4,
            LinkClass::Node => 5,
            LinkClass::Sys => 6,
        }
    }

    pub fn is_nvlink(self) -> bool {
        matches!(self, LinkClass::Nv(_))
    }

    /// True for PCIe paths that cross a host bridge or CPU socket, where forcing P2P hurts.
    pub fn crosses_host_bridge(self) -> bool {
        matches!(self, LinkClass::Phb | LinkClass::Node | LinkClass::Sys)
    }

    /// The legend line `nvidia-smi topo -m` prints for this class.
    pub fn legend(self) -> &'static str {
        match self {
            LinkClass::X => "Self",
            LinkClass::Nv(_) => "Connection traversing a bonded set of # NVLinks",
            LinkClass::Pix => "Connection traversing at most a single PCIe bridge",
            LinkClass::Pxb => {
                "Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)"
            }
            LinkClass::Phb => {
                "Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)"
            }
            LinkClass::Node => {
                "Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node"
            }
            LinkClass::Sys => {
                "Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)"
            }
        }
    }

    /// Every class in legend order, with a representative NVLink count.
    pub const LEGEND_ORDER: [LinkClass; 7] = [
        LinkClass::X,
        LinkClass::Sys,
        LinkClass::Node,
        LinkClass::Phb,
        LinkClass::Pxb,
        LinkClass::Pix,
        LinkClass::Nv(0),
    ];
}

impl fmt::Display for LinkClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LinkClass::X => f.write_str("X"),
            LinkClass::Nv(n) => write!(f, "NV{n}"),
            LinkClass::Pix => f.write_str("PIX"),
            LinkClass::Pxb => f.write_str("PXB"),
            LinkClass::Phb => f.write_str("PHB"),
            LinkClass::Node => f.write_str("NODE"),
            LinkClass::Sys => f.write_str("SYS"),
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unknown link class {0:?}: expected X, NV<n>, PIX, PXB, PHB, NODE or SYS")]
pub struct ParseLinkClassError(pub String);

impl FromStr for LinkClass {
    type Err = ParseLinkClassError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let up = s.trim().to_ascii_uppercase();
        match up.as_str() {
            "X" => Ok(LinkClass::X),
            "PIX" => Ok(LinkClass::Pix),
            "PXB" => Ok(LinkClass::Pxb),
            "PHB" => Ok(LinkClass::Phb),
            "NODE" => Ok(LinkClass::Node),
            "SYS" => Ok(LinkClass::Sys),
            _ => up
                .strip_prefix("NV")
                .and_then(|n| n.parse::<u32>().ok())
                .filter(|n| *n > 0)
                .map(LinkClass::Nv)
                .ok_or_else(|| ParseLinkClassError(s.to_string())),
        }
    }
}

impl From<LinkClass> for String {
    fn from(c: LinkClass) -> String {
        c.to_string()
    }
}

impl TryFrom<String> for LinkClass {
    type Error = ParseLinkClassError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

/// Peer-to-peer capability of a pair, as NVML's P2P status reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum P2pStatus {
    Ok,
    NotSupported,
    Unknown,
}

/// NVML's answer for one peer-to-peer capability between two GPUs (`nvmlGpuP2PStatus_t`), with
/// the reason where it is not OK; [`P2pReason::summary`] folds it into [`P2pStatus`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum P2pReason {
    Ok,
    /// The chipset (root complex) does not support P2P between the two GPUs.
    ChipsetNotSupported,
    /// The GPU's product does not support P2P (GeForce policy).
    GpuNotSupported,
    /// The host bridge topology between the two GPUs does not support P2P.
    IohTopologyNotSupported,
    /// A driver registry key turns P2P off.
    DisabledByRegkey,
    NotSupported,
    Unknown,
}

impl P2pReason {
    /// Every status, in NVML's numbering.
    pub const ALL: [P2pReason; 7] = [
        P2pReason::Ok,
        P2pReason::ChipsetNotSupported,
        P2pReason::GpuNotSupported,
        P2pReason::IohTopologyNotSupported,
        P2pReason::DisabledByRegkey,
        P2pReason::NotSupported,
        P2pReason::Unknown,
    ];

    /// The three-way status the transport judgement needs.
    pub fn summary(self) -> P2pStatus {
        match self {
            P2pReason::Ok => P2pStatus::Ok,
            P2pReason::Unknown => P2pStatus::Unknown,
            _ => P2pStatus::NotSupported,
        }
    }

    /// The word of `nvidia-smi topo -p2p`'s legend (OK, CNS, GNS, TNS, DR, NS, U).
    pub fn code(self) -> &'static str {
        match self {
            P2pReason::Ok => "OK",
            P2pReason::ChipsetNotSupported => "CNS",
            P2pReason::GpuNotSupported => "GNS",
            P2pReason::IohTopologyNotSupported => "TNS",
            P2pReason::DisabledByRegkey => "DR",
            P2pReason::NotSupported => "NS",
            P2pReason::Unknown => "U",
        }
    }

    /// NVML's name (`NVML_P2P_STATUS_GPU_NOT_SUPPORTED` without its prefix).
    pub fn nvml_name(self) -> &'static str {
        match self {
            P2pReason::Ok => "OK",
            P2pReason::ChipsetNotSupported => "CHIPSET_NOT_SUPPORTED",
            P2pReason::GpuNotSupported => "GPU_NOT_SUPPORTED",
            P2pReason::IohTopologyNotSupported => "IOH_TOPOLOGY_NOT_SUPPORTED",
            P2pReason::DisabledByRegkey => "DISABLED_BY_REGKEY",
            P2pReason::NotSupported => "NOT_SUPPORTED",
            P2pReason::Unknown => "UNKNOWN",
        }
    }
}

/// NVML's peer-to-peer status of one ordered pair for each capability `nvidia-smi topo -p2p`
/// names: read, write, atomics and NVLink.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct P2pCaps {
    pub read: P2pReason,
    pub write: P2pReason,
    pub atomics: P2pReason,
    pub nvlink: P2pReason,
}

impl P2pCaps {
    /// Every capability with the same status (a GPU with itself: all OK).
    pub fn all(r: P2pReason) -> P2pCaps {
        P2pCaps {
            read: r,
            write: r,
            atomics: r,
            nvlink: r,
        }
    }

    /// The capabilities by name, in `nvidia-smi topo -p2p`'s order (r, w, n, a).
    pub fn named(&self) -> [(&'static str, P2pReason); 4] {
        [
            ("read", self.read),
            ("write", self.write),
            ("nvlink", self.nvlink),
            ("atomics", self.atomics),
        ]
    }

    /// The first PCIe capability (read, write, atomics) that is not OK, with its name: the
    /// reason a pair has no P2P over PCIe.
    pub fn pcie_refusal(&self) -> Option<(&'static str, P2pReason)> {
        [
            ("read", self.read),
            ("write", self.write),
            ("atomics", self.atomics),
        ]
        .into_iter()
        .find(|(_, r)| !matches!(r, P2pReason::Ok | P2pReason::Unknown))
    }

    /// `r=OK w=OK a=GNS n=NS`, as a line of evidence.
    pub fn words(&self) -> String {
        format!(
            "read {}, write {}, atomics {}, nvlink {}",
            self.read.code(),
            self.write.code(),
            self.atomics.code(),
            self.nvlink.code()
        )
    }
}

/// A GPU as the topology names it: by UUID and PCI bus id, the index only for display.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuRef {
    pub index: u32,
    pub uuid: String,
    pub pci_bus_id: String,
}

/// The pair topology of one node: `links[i][j]` is the class between GPU i and GPU j.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TopologyMatrix {
    pub gpus: Vec<GpuRef>,
    pub links: Vec<Vec<LinkClass>>,
    /// `p2p[i][j]`: NVML's P2P read status; empty when unknown.
    #[serde(default)]
    pub p2p: Vec<Vec<P2pStatus>>,
    /// `p2p_status[i][j]`: NVML's status for each capability (read, write, atomics, NVLink),
    /// with its reason; empty where it was not read (reports before it, a backend without it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub p2p_status: Vec<Vec<P2pCaps>>,
    /// CPU list each GPU is close to (`0-31`), when known.
    #[serde(default)]
    pub cpu_affinity: Vec<Option<String>>,
    /// NUMA node each GPU is close to, when known.
    #[serde(default)]
    pub numa_affinity: Vec<Option<u32>>,
}

/// One unordered pair of the matrix.
#[derive(Clone, Debug, PartialEq)]
pub struct Pair<'a> {
    pub a: &'a GpuRef,
    pub b: &'a GpuRef,
    pub link: LinkClass,
    pub p2p: Option<P2pStatus>,
    /// NVML's status of each capability from `a` to `b`, where read.
    pub p2p_status: Option<P2pCaps>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TopologyError {
    #[error("topology matrix is {rows}x? for {gpus} GPUs")]
    Shape { rows: usize, gpus: usize },
    #[error("diagonal entry {0} is not X")]
    Diagonal(usize),
    #[error("matrix is not symmetric at ({0},{1})")]
    Asymmetric(usize, usize),
}

impl TopologyMatrix {
    /// Checks shape, diagonal and symmetry: a matrix from a backend must pass before judgement.
    pub fn validate(&self) -> Result<(), TopologyError> {
        let n = self.gpus.len();
        if self.links.len() != n || self.links.iter().any(|r| r.len() != n) {
            return Err(TopologyError::Shape {
                rows: self.links.len(),
                gpus: n,
            });
        }
        for i in 0..n {
            if self.links[i][i] != LinkClass::X {
                return Err(TopologyError::Diagonal(i));
            }
            for j in 0..i {
                if self.links[i][j] != self.links[j][i] {
                    return Err(TopologyError::Asymmetric(i, j));
                }
            }
        }
        Ok(())
    }

    /// Every unordered pair (i < j).
    pub fn pairs(&self) -> Vec<Pair<'_>> {
        let n = self.gpus.len();
        let mut out = Vec::new();
        for i in 0..n {
            for j in (i + 1)..n {
                out.push(Pair {
                    a: &self.gpus[i],
                    b: &self.gpus[j],
                    link: self.links[i][j],
                    p2p: self.p2p.get(i).and_then(|r| r.get(j)).copied(),
                    p2p_status: self.p2p_status.get(i).and_then(|r| r.get(j)).copied(),
                });
            }
        }
        out
    }

    /// The farthest link between any pair: it bounds a ring all-reduce.
    pub fn worst_link(&self) -> Option<LinkClass> {
        self.pairs()
            .into_iter()
            .map(|p| p.link)
            .max_by_key(|l| (l.rank(), std::cmp::Reverse(nv_count(*l))))
    }
}

fn nv_count(l: LinkClass) -> u32 {
    match l {
        LinkClass::Nv(n) => n,
        _ => 0,
    }
}

#[cfg(test)]
mod tests;
