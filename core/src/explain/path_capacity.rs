//! What each pair's path and the node's ring can physically carry (PCIe generation × width from
//! the links' own readings, NVLink links × the GPU generation's per-link rate), and what
//! fraction of it was measured. The rates are `crate::capacity`'s.

use serde::{Deserialize, Serialize};

use super::per_gpu::link_readings;
use super::ExplainInput;
use crate::capacity::{self as cap, Network, NvlinkGen, GB};
use crate::node_gpus::GpuInfo;
use crate::topology::{LinkClass, Pair};

const PCIE_SOURCE: &str = "PCI-SIG base specifications: 2.5/5/8/16/32/64 GT/s per lane for gen1-6, 8b/10b (gen1-2), 128b/130b (gen3-5), FLIT (gen6)";

/// What a path can carry: one direction's rate of its slowest link.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PathCapacity {
    /// The limiting link in words (`PCIe gen3 x16`, `NV18: 18 × NVLink 4`).
    pub path: String,
    /// One direction's rate of that link after line encoding, GB/s.
    pub gbps: f64,
    /// How the rate is worked out (`8 GT/s × 16 lanes × 128/130 ÷ 8 = 15.75 GB/s`).
    pub arithmetic: String,
    /// Where the link's generation and width were read.
    pub reading: String,
    /// Measured busbw ÷ `gbps`.
    pub fraction: Option<f64>,
    /// The class reference ÷ `gbps`: what healthy machines of the class reach of it.
    pub reference_fraction: Option<f64>,
    pub source: String,
}

/// One GPU's PCIe link for capacity: under load where it was read there, else at rest with
/// its generation at most (idle links drop their rate; they train back under load).
pub(crate) fn gpu_pcie(input: &ExplainInput<'_>, g: &GpuInfo) -> Option<(u32, u32, &'static str)> {
    match link_readings(input, g) {
        (_, Some(load)) => Some((load.gen_current, load.width_current, "read under load")),
        (Some(rest), None) => Some((
            rest.gen_max,
            rest.width_current,
            "read at rest, its generation at most",
        )),
        (None, None) => None,
    }
}

/// The capacity of one GPU's PCIe link.
pub(super) fn pcie_of(input: &ExplainInput<'_>, g: &GpuInfo) -> Option<PathCapacity> {
    let (gen, width, reading) = gpu_pcie(input, g)?;
    let bytes = cap::pcie_bytes_per_s(gen, width)?;
    let enc = cap::pcie_encoding(gen)?;
    let gts = cap::pcie_lane_gts(gen)?;
    Some(PathCapacity {
        path: format!("PCIe gen{gen} x{width}"),
        gbps: bytes / GB,
        arithmetic: format!(
            "{gts} GT/s × {width} lanes × {} ({}) ÷ 8 = {:.2} GB/s each way",
            efficiency_words(enc),
            enc.name(),
            bytes / GB
        ),
        reading: format!("GPU{} {reading}", g.index),
        fraction: None,
        reference_fraction: None,
        source: PCIE_SOURCE.into(),
    })
}

fn efficiency_words(enc: cap::PcieEncoding) -> &'static str {
    match enc {
        cap::PcieEncoding::B8b10b => "8/10",
        cap::PcieEncoding::B128b130b => "128/130",
        cap::PcieEncoding::Flit => "1",
    }
}

fn nvlink_source(gen: NvlinkGen) -> &'static str {
    match gen {
        NvlinkGen::V1 => "NVIDIA Tesla P100 datasheet: NVLink 160 GB/s bidirectional over 4 links",
        NvlinkGen::V2 => "NVIDIA V100 datasheet: NVLink 300 GB/s bidirectional over 6 links",
        NvlinkGen::V3 => "NVIDIA A100 datasheet: NVLink 600 GB/s bidirectional over 12 links",
        NvlinkGen::V3Ga102 => "NVIDIA RTX A6000 datasheet: NVLink bridge 112.5 GB/s bidirectional, over the 4 links nvidia-smi topo -m shows as NV4",
        NvlinkGen::V4 => "NVIDIA H100 and H200 datasheets: NVLink 900 GB/s bidirectional over 18 links",
        NvlinkGen::V5 => "NVIDIA B200 datasheet: NVLink 1.8 TB/s bidirectional over 18 links",
    }
}

/// A bonded set of `links` NVLinks of the GPU's generation; `None` for a GPU not known here.
fn nvlink_of(links: u32, g: &GpuInfo) -> Option<PathCapacity> {
    let gen = NvlinkGen::for_gpu_name(&g.name)?;
    let per = gen.per_link_bytes_per_s() / GB;
    let total = cap::nvlink_bytes_per_s(links, gen) / GB;
    Some(PathCapacity {
        path: format!("NV{links}: {links} × {}", gen.name()),
        gbps: total,
        arithmetic: format!("{links} links × {per} GB/s = {total} GB/s each way"),
        reading: format!(
            "link count from the topology; generation from the GPU ({})",
            g.name
        ),
        fraction: None,
        reference_fraction: None,
        source: nvlink_source(gen).into(),
    })
}

/// The capacity of a pair's path: its NVLinks, or the slower of the two GPUs' PCIe links (a
/// PCIe path carries each byte up one GPU's link and down the other's).
pub(super) fn pair_capacity(input: &ExplainInput<'_>, p: &Pair<'_>) -> Option<PathCapacity> {
    let info = |uuid: &str| input.gpus.iter().find(|g| g.uuid == uuid);
    let (a, b) = (info(&p.a.uuid)?, info(&p.b.uuid)?);
    match p.link {
        LinkClass::Nv(n) => nvlink_of(n, a),
        LinkClass::X => None,
        _ => {
            let (ca, cb) = (pcie_of(input, a)?, pcie_of(input, b)?);
            Some(if cb.gbps < ca.gbps { cb } else { ca })
        }
    }
}

/// The capacity with the measured and reference fractions filled in.
pub(super) fn with_fractions(
    mut c: PathCapacity,
    busbw: Option<f64>,
    reference: Option<f64>,
) -> PathCapacity {
    c.fraction = busbw.map(|b| b / c.gbps);
    c.reference_fraction = reference.map(|r| r / c.gbps);
    c
}

/// The best ring through every GPU and its slowest hop: a ring all-reduce moves every byte
/// through every hop, so the node's busbw is bounded by that hop's rate. `hops[i][j]` is the
/// capacity between GPUs `i` and `j` (GB/s). Returns the slowest hop `(i, j)` of the ring whose
/// slowest hop is fastest (every ring is tried: nodes have at most a few GPUs per ring here).
pub fn best_ring_bottleneck(hops: &[Vec<f64>]) -> Option<(usize, usize)> {
    let n = hops.len();
    if !(2..=MAX_RING_SEARCH).contains(&n) {
        return None;
    }
    let mut rest: Vec<usize> = (1..n).collect();
    let mut best: Option<(f64, (usize, usize))> = None;
    permute(&mut rest, 0, &mut |order| {
        let ring: Vec<usize> = std::iter::once(0).chain(order.iter().copied()).collect();
        let slowest = (0..n)
            .map(|k| (ring[k], ring[(k + 1) % n]))
            .map(|(i, j)| (hops[i][j], (i.min(j), i.max(j))))
            .min_by(|x, y| x.0.total_cmp(&y.0));
        if let Some(s) = slowest {
            if best.is_none_or(|b| s.0 > b.0) {
                best = Some(s);
            }
        }
    });
    best.map(|(_, hop)| hop)
}

/// Rings searched exhaustively up to this many GPUs (7! orders); larger nodes get no ring.
const MAX_RING_SEARCH: usize = 8;

fn permute(v: &mut Vec<usize>, k: usize, f: &mut dyn FnMut(&[usize])) {
    if k == v.len() {
        f(v);
        return;
    }
    for i in k..v.len() {
        v.swap(k, i);
        permute(v, k + 1, f);
        v.swap(k, i);
    }
}

impl Network {
    /// What `nics` NICs per node carry between nodes, one direction, with the cluster figure's
    /// and the expectation's share of it (the line rates of `crate::capacity`).
    pub fn capacity(self, nics: u32, busbw: Option<f64>, expected: f64) -> PathCapacity {
        let n = nics.max(1);
        let line = cap::network_line_gbit(self);
        let gbps = cap::network_bytes_per_s(self, n) / GB;
        PathCapacity {
            path: format!("{n} × {line} Gb/s ({self})"),
            gbps,
            arithmetic: format!("{n} NICs × {line} Gb/s ÷ 8 = {gbps:.2} GB/s each way per node"),
            reading: "the network and NICs per node the run was given".into(),
            fraction: busbw.map(|b| b / gbps),
            reference_fraction: Some(expected / gbps),
            source: "InfiniBand NDR 400 and HDR 200 Gb/s, Ethernet 100 and 10 Gb/s: the links' signalling rates (IBTA, IEEE 802.3)".into(),
        }
    }
}
