//! The physical capacity of a path, from its parts: PCIe generation × width, NVLink links × the
//! per-link rate of the GPU's generation, a NIC's line rate. One direction's data rate after
//! line encoding, in bytes/s; the figures and their sources are in docs/explain.md. Also the
//! inter-node networks (`Network`) and the all-reduce busbw one NIC of each is expected to carry.
//!
//! Pure arithmetic, no I/O: backends read the links, this says what they can carry.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::expect::Expectation;

/// Bytes per gigabyte as the rest of ddpcheck counts GB/s (decimal, as nccl-tests).
pub const GB: f64 = 1e9;

/// A PCIe generation's line encoding: payload bits per bits on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PcieEncoding {
    /// Gen 1–2: 8b/10b, 80% efficient.
    B8b10b,
    /// Gen 3–5: 128b/130b, 98.46% efficient.
    B128b130b,
    /// Gen 6: FLIT mode over PAM4, no line encoding (1b/1b). The flit's own CRC and FEC (14 of
    /// every 256 bytes) are framing like gen 3–5's TLP/DLLP headers, which no generation counts.
    Flit,
}

impl PcieEncoding {
    /// Payload bits per transferred bit.
    pub fn efficiency(self) -> f64 {
        match self {
            PcieEncoding::B8b10b => 8.0 / 10.0,
            PcieEncoding::B128b130b => 128.0 / 130.0,
            PcieEncoding::Flit => 1.0,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            PcieEncoding::B8b10b => "8b/10b",
            PcieEncoding::B128b130b => "128b/130b",
            PcieEncoding::Flit => "FLIT (1b/1b)",
        }
    }
}

/// Transfers per second per lane, in GT/s (PCI-SIG's base specifications 1.0–6.0).
pub fn pcie_lane_gts(gen: u32) -> Option<f64> {
    match gen {
        1 => Some(2.5),
        2 => Some(5.0),
        3 => Some(8.0),
        4 => Some(16.0),
        5 => Some(32.0),
        6 => Some(64.0),
        _ => None,
    }
}

/// The line encoding of a PCIe generation.
pub fn pcie_encoding(gen: u32) -> Option<PcieEncoding> {
    match gen {
        1 | 2 => Some(PcieEncoding::B8b10b),
        3..=5 => Some(PcieEncoding::B128b130b),
        6 => Some(PcieEncoding::Flit),
        _ => None,
    }
}

/// One direction's data rate of a PCIe link after line encoding, bytes/s: GT/s × encoding ×
/// lanes / 8 (gen3 x16 = 15.75 GB/s, gen4 x16 = 31.5 GB/s, gen5 x16 = 63.0 GB/s).
pub fn pcie_bytes_per_s(gen: u32, width: u32) -> Option<f64> {
    if width == 0 {
        return None;
    }
    let gts = pcie_lane_gts(gen)?;
    let enc = pcie_encoding(gen)?;
    Some(gts * GB * enc.efficiency() * f64::from(width) / 8.0)
}

/// NVLink generations, with each one's per-link rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NvlinkGen {
    /// NVLink 1 (Pascal P100): 20 GB/s per direction per link, 4 links.
    V1,
    /// NVLink 2 (Volta V100): 25 GB/s per direction per link, 6 links.
    V2,
    /// NVLink 3 (Ampere A100): 25 GB/s per direction per link, 12 links.
    V3,
    /// NVLink 3 on GA102 boards (RTX A6000, RTX 3090) through a bridge: 4 links, 112.5 GB/s
    /// both directions together, so 14.0625 GB/s per direction per link.
    V3Ga102,
    /// NVLink 4 (Hopper H100, H200): 25 GB/s per direction per link, 18 links on SXM.
    V4,
    /// NVLink 5 (Blackwell B200): 50 GB/s per direction per link, 18 links.
    V5,
}

impl NvlinkGen {
    /// One direction of one link, bytes/s.
    pub fn per_link_bytes_per_s(self) -> f64 {
        let gbps = match self {
            NvlinkGen::V1 => 20.0,
            NvlinkGen::V2 | NvlinkGen::V3 | NvlinkGen::V4 => 25.0,
            NvlinkGen::V3Ga102 => 112.5 / 2.0 / 4.0,
            NvlinkGen::V5 => 50.0,
        };
        gbps * GB
    }

    pub fn name(self) -> &'static str {
        match self {
            NvlinkGen::V1 => "NVLink 1",
            NvlinkGen::V2 => "NVLink 2",
            NvlinkGen::V3 => "NVLink 3",
            NvlinkGen::V3Ga102 => "NVLink 3 (GA102 bridge)",
            NvlinkGen::V4 => "NVLink 4",
            NvlinkGen::V5 => "NVLink 5",
        }
    }

    /// The generation of a GPU from its NVML name ("NVIDIA H200", "Tesla V100-SXM2-32GB"),
    /// `None` for GPUs without NVLink or not known here.
    pub fn for_gpu_name(name: &str) -> Option<NvlinkGen> {
        let n = name.to_ascii_uppercase();
        let has = |s: &str| n.contains(s);
        if has("B200") || has("B100") || has("GB200") || has("B300") {
            Some(NvlinkGen::V5)
        } else if has("H100") || has("H200") || has("H800") || has("GH200") {
            Some(NvlinkGen::V4)
        } else if has("A100") || has("A800") {
            Some(NvlinkGen::V3)
        } else if has("A6000") || has("RTX 3090") || has("A40") {
            Some(NvlinkGen::V3Ga102)
        } else if has("V100") {
            Some(NvlinkGen::V2)
        } else if has("P100") {
            Some(NvlinkGen::V1)
        } else {
            None
        }
    }
}

/// One direction's rate of a bonded set of `links` NVLinks of generation `gen`, bytes/s
/// (Hopper, 18 links: 450 GB/s).
pub fn nvlink_bytes_per_s(links: u32, gen: NvlinkGen) -> f64 {
    f64::from(links) * gen.per_link_bytes_per_s()
}

/// As [`nvlink_bytes_per_s`], the generation from the GPU's name; `None` where it is not known.
pub fn nvlink_bytes_per_s_for_gpu(links: u32, gpu_name: &str) -> Option<f64> {
    NvlinkGen::for_gpu_name(gpu_name).map(|g| nvlink_bytes_per_s(links, g))
}

/// A NIC's line rate in Gb/s to bytes/s (one direction).
pub fn nic_bytes_per_s(gbit_per_s: f64) -> f64 {
    gbit_per_s * GB / 8.0
}

/// The line rate of one NIC of a network, Gb/s.
pub fn network_line_gbit(network: Network) -> f64 {
    match network {
        Network::Ndr400 => 400.0,
        Network::Hdr200 => 200.0,
        Network::Roce100 => 100.0,
        Network::Tcp10 => 10.0,
    }
}

/// One direction's line rate of `nics` NICs of a network, bytes/s.
pub fn network_bytes_per_s(network: Network, nics: u32) -> f64 {
    nic_bytes_per_s(network_line_gbit(network)) * f64::from(nics.max(1))
}

/// The inter-node network, for the expectation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Network {
    /// InfiniBand NDR, 400 Gb/s per NIC.
    Ndr400,
    /// InfiniBand HDR, 200 Gb/s per NIC.
    Hdr200,
    /// 100 GbE with RoCE v2.
    Roce100,
    /// Plain TCP sockets over 10 GbE.
    Tcp10,
}

pub const NETWORKS: [(Network, &str); 4] = [
    (Network::Ndr400, "ndr400"),
    (Network::Hdr200, "hdr200"),
    (Network::Roce100, "roce100"),
    (Network::Tcp10, "tcp10"),
];

impl Network {
    pub fn name(self) -> &'static str {
        NETWORKS
            .iter()
            .find(|(n, _)| *n == self)
            .map(|(_, s)| *s)
            .unwrap_or("?")
    }

    /// Large-message all-reduce busbw one NIC (one rail) carries between nodes, with its source.
    pub fn per_nic(self) -> Expectation {
        let row = |class: &str, busbw: f64, source: &str| Expectation {
            class: class.into(),
            busbw_gbps: busbw,
            source: source.into(),
        };
        match self {
            Network::Ndr400 => row(
                "InfiniBand NDR 400 Gb/s per NIC",
                46.0,
                "400 Gb/s = 50 GB/s line rate; NVIDIA nccl-tests multi-node all-reduce reaches ~92% of it per rail (~46 GB/s)",
            ),
            Network::Hdr200 => row(
                "InfiniBand HDR 200 Gb/s per NIC",
                23.0,
                "200 Gb/s = 25 GB/s line rate; ~92% per rail as NDR (~23 GB/s)",
            ),
            Network::Roce100 => row(
                "100 GbE RoCE v2 per NIC",
                11.0,
                "100 Gb/s = 12.5 GB/s line rate; RoCE with PFC/ECN reaches ~88% (~11 GB/s)",
            ),
            Network::Tcp10 => row(
                "TCP sockets over 10 GbE per NIC",
                1.1,
                "10 Gb/s = 1.25 GB/s line rate; NCCL's socket transport reaches ~90% (~1.1 GB/s)",
            ),
        }
    }

    /// The cluster's expected busbw: one rail's figure times the rails per node (NCCL runs one
    /// ring per rail; a rail-optimised fabric scales with them).
    pub fn expected(self, nics_per_node: u32) -> Expectation {
        let nic = self.per_nic();
        let n = nics_per_node.max(1);
        Expectation {
            class: format!("{n} × {}", nic.class),
            busbw_gbps: nic.busbw_gbps * f64::from(n),
            source: nic.source,
        }
    }
}

impl fmt::Display for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A network name that is none of [`NETWORKS`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown network {name:?}; networks: {}", network_names())]
pub struct UnknownNetwork {
    pub name: String,
}

fn network_names() -> String {
    let names: Vec<&str> = NETWORKS.iter().map(|(_, n)| *n).collect();
    names.join(", ")
}

impl FromStr for Network {
    type Err = UnknownNetwork;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        NETWORKS
            .iter()
            .find(|(_, n)| n.eq_ignore_ascii_case(s.trim()))
            .map(|(n, _)| *n)
            .ok_or_else(|| UnknownNetwork {
                name: s.to_string(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn pcie_rates_per_generation_at_x16() {
        let gb = |g| pcie_bytes_per_s(g, 16).unwrap() / GB;
        assert!(close(gb(1), 4.0));
        assert!(close(gb(2), 8.0));
        assert!((gb(3) - 15.754).abs() < 1e-3);
        assert!((gb(4) - 31.508).abs() < 1e-3);
        assert!((gb(5) - 63.015).abs() < 1e-3);
        assert!(close(gb(6), 128.0));
    }

    #[test]
    fn pcie_scales_with_width_and_refuses_unknowns() {
        let x16 = pcie_bytes_per_s(3, 16).unwrap();
        let x8 = pcie_bytes_per_s(3, 8).unwrap();
        assert!(close(x16, 2.0 * x8));
        assert_eq!(pcie_bytes_per_s(0, 16), None);
        assert_eq!(pcie_bytes_per_s(7, 16), None);
        assert_eq!(pcie_bytes_per_s(3, 0), None);
        assert_eq!(pcie_encoding(2), Some(PcieEncoding::B8b10b));
        assert_eq!(pcie_encoding(5), Some(PcieEncoding::B128b130b));
        assert_eq!(pcie_encoding(6), Some(PcieEncoding::Flit));
    }

    #[test]
    fn nvlink_totals_match_the_datasheets() {
        let gb = |links, g| nvlink_bytes_per_s(links, g) / GB;
        // Bidirectional datasheet figures are twice these.
        assert!(close(gb(18, NvlinkGen::V4), 450.0));
        assert!(close(gb(12, NvlinkGen::V3), 300.0));
        assert!(close(gb(6, NvlinkGen::V2), 150.0));
        assert!(close(gb(4, NvlinkGen::V1), 80.0));
        assert!(close(gb(18, NvlinkGen::V5), 900.0));
        assert!(close(gb(4, NvlinkGen::V3Ga102) * 2.0, 112.5));
    }

    #[test]
    fn nvlink_generation_from_gpu_names() {
        assert_eq!(NvlinkGen::for_gpu_name("NVIDIA H200"), Some(NvlinkGen::V4));
        assert_eq!(
            NvlinkGen::for_gpu_name("NVIDIA A100-SXM4-80GB"),
            Some(NvlinkGen::V3)
        );
        assert_eq!(
            NvlinkGen::for_gpu_name("Tesla V100-SXM2-32GB"),
            Some(NvlinkGen::V2)
        );
        assert_eq!(
            NvlinkGen::for_gpu_name("NVIDIA RTX A6000"),
            Some(NvlinkGen::V3Ga102)
        );
        assert_eq!(NvlinkGen::for_gpu_name("Tesla T4"), None);
        let h = nvlink_bytes_per_s_for_gpu(18, "NVIDIA H100 80GB HBM3").unwrap();
        assert!(close(h, 450.0 * GB));
        assert_eq!(nvlink_bytes_per_s_for_gpu(4, "Tesla T4"), None);
    }

    #[test]
    fn nic_line_rates() {
        assert!(close(nic_bytes_per_s(400.0), 50.0 * GB));
        assert!(close(network_bytes_per_s(Network::Hdr200, 1), 25.0 * GB));
        assert!(close(network_bytes_per_s(Network::Ndr400, 8), 400.0 * GB));
        assert!(close(network_bytes_per_s(Network::Tcp10, 0), 1.25 * GB));
    }
}
