//! Expected all-reduce bus bandwidth by topology class: the reference table, with sources.

use serde::{Deserialize, Serialize};

use crate::topology::LinkClass;

/// One row of the reference table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Expectation {
    /// What the row covers, for humans.
    pub class: String,
    /// Large-message (≥ 64 MiB) all-reduce busbw, GB/s.
    pub busbw_gbps: f64,
    pub source: String,
}

/// Ratios of measured to expected busbw below which the check warns or fails.
pub const WARN_RATIO: f64 = 0.75;
pub const CRITICAL_RATIO: f64 = 0.40;
/// Drift below the node's own recent median that is worth a warning.
pub const HISTORY_DRIFT_RATIO: f64 = 0.85;

/// What a node is: its worst pair link, the PCIe generation of that path, GPU count and model.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeClass<'a> {
    pub worst_link: LinkClass,
    pub pcie_gen: Option<u32>,
    pub gpus: u32,
    pub model: &'a str,
}

/// Looks up the expected large-message all-reduce busbw for a node. `None` for a single GPU or
/// a class the table does not cover (then only the node's history judges it).
pub fn expected_allreduce(node: &NodeClass<'_>) -> Option<Expectation> {
    if node.gpus < 2 {
        return None;
    }
    let model = node.model.to_ascii_uppercase();
    let row = |class: &str, busbw: f64, source: &str| Expectation {
        class: class.to_string(),
        busbw_gbps: busbw,
        source: source.to_string(),
    };
    match node.worst_link {
        LinkClass::Nv(n) if n >= 18 && node.gpus >= 8 => Some(row(
            "8+ GPUs over NVSwitch (NVLink 4, NV18), NCCL NVLS off",
            365.0,
            "NVIDIA nccl-tests results for HGX H100/H200 ring all-reduce, ~365 GB/s; NVLS raises it to ~475",
        )),
        LinkClass::Nv(n) if n >= 18 => Some(row(
            "NVLink 4 pair or group (NV18, H100/H200)",
            300.0,
            "measured 2xH200 NV18, NCCL 2.28.9: 327 GB/s at 1 GiB, ~300 at 256 MiB (docs/results/)",
        )),
        LinkClass::Nv(n) if n >= 12 => Some(row(
            "NVLink 3 (NV12, A100 SXM)",
            230.0,
            "NVIDIA DGX A100 nccl-tests ring all-reduce ~230 GB/s",
        )),
        LinkClass::Nv(_) => Some(row(
            "NVLink bridge (NV1-NV8)",
            40.0,
            "NVLink bridge pairs (A6000/3090 NV4: ~50 GB/s unidirectional); conservative",
        )),
        LinkClass::Pix | LinkClass::Pxb => Some(row(
            "PCIe switch, P2P through the switch",
            pcie_busbw(node.pcie_gen) * 2.0,
            "PCIe P2P below a switch avoids the host bridge; ~2x the host-bridge figure (estimate, unmeasured here)",
        )),
        LinkClass::Phb | LinkClass::Node | LinkClass::Sys
            if model.contains("RTX 5090") && node.gpus >= 8 =>
        {
            Some(row(
                "8+ GeForce RTX 5090 over PCIe, staged through host memory",
                28.0,
                "https://github.com/NVIDIA/nccl/issues/1639: 8x RTX 5090 on dual Xeon 8480+, ACS off, NCCL_MIN_NCHANNELS=8: 28 GB/s at 8 GPUs",
            ))
        }
        LinkClass::Phb | LinkClass::Node | LinkClass::Sys
            if model.contains("RTX 5090") && node.gpus >= 4 =>
        {
            Some(row(
                "4-7 GeForce RTX 5090 over PCIe, staged through host memory",
                35.0,
                "https://github.com/NVIDIA/nccl/issues/1639: 4x RTX 5090 on dual Xeon 8480+, ACS off, NCCL_MIN_NCHANNELS=8: 35 GB/s at 4 GPUs",
            ))
        }
        LinkClass::Phb | LinkClass::Node | LinkClass::Sys if model.contains("T4") => Some(row(
            "2x Tesla T4 over PCIe gen3, no NVLink",
            4.05,
            "field report ddp-crossover, 2x Tesla T4 over PCIe gen3: 4.05 GB/s all-reduce busbw",
        )),
        LinkClass::Phb | LinkClass::Node | LinkClass::Sys => Some(row(
            "PCIe through the host bridge, no NVLink",
            pcie_busbw(node.pcie_gen),
            "Runcrate's field report, 4xA6000 PHB gen3: 4.3 GB/s at 4 GPUs, 3.9 at 2; scaled by PCIe generation",
        )),
        LinkClass::X => None,
    }
}

/// NVLinks a GPU of this SKU has by design (NVML's product name), with the source; `None` for
/// PCIe cards whose bridges are optional and SKUs the table does not know.
pub fn nvlinks_per_gpu(model: &str) -> Option<(u32, &'static str)> {
    let m = model.to_ascii_uppercase();
    // The H100 NVL is sold bridged: NVML lists 18 links, the card uses 12.
    if m.contains("H100 NVL") {
        return Some((
            12,
            "NVIDIA H100 NVL product brief: 600 GB/s bidirectional over three NVLink bridges (12 fourth-generation NVLinks per GPU)",
        ));
    }
    // Other PCIe and NVL cards carry bridges of fewer links, or none.
    if m.contains("PCIE") || m.contains(" NVL") {
        return None;
    }
    if m.contains("H800") {
        Some((
            8,
            "NVIDIA H800 SXM5 datasheet: NVLink 400 GB/s (8 fourth-generation NVLinks per GPU)",
        ))
    } else if m.contains("A800") {
        Some((
            8,
            "NVIDIA A800 SXM4 datasheet: NVLink 400 GB/s (8 third-generation NVLinks per GPU)",
        ))
    } else if m.contains("H100") || m.contains("H200") {
        Some((
            18,
            "NVIDIA H100/H200 SXM datasheets: 18 fourth-generation NVLinks per GPU, 900 GB/s",
        ))
    } else if m.contains("B200") || m.contains("B100") {
        Some((
            18,
            "NVIDIA Blackwell HGX datasheet: 18 fifth-generation NVLinks per GPU, 1.8 TB/s",
        ))
    } else if m.contains("A100") {
        Some((
            12,
            "NVIDIA A100 SXM4 datasheet: 12 third-generation NVLinks per GPU, 600 GB/s",
        ))
    } else if m.contains("V100") && m.contains("SXM") {
        Some((
            6,
            "NVIDIA V100 SXM2 datasheet: 6 second-generation NVLinks per GPU, 300 GB/s",
        ))
    } else {
        None
    }
}

/// Expected all-reduce busbw of one pair: the table's row for two GPUs on the pair's link.
pub fn expected_pair(link: LinkClass, pcie_gen: Option<u32>, model: &str) -> Option<Expectation> {
    expected_allreduce(&NodeClass {
        worst_link: link,
        pcie_gen,
        gpus: 2,
        model,
    })
}

/// Host-bridge PCIe all-reduce busbw by generation: 4.0 GB/s measured at gen3, doubling per
/// generation (an estimate above gen3, labelled so in the source).
fn pcie_busbw(gen: Option<u32>) -> f64 {
    let g = gen.unwrap_or(3).clamp(1, 6);
    4.0 * 2f64.powi(g.cast_signed() - 3)
}

/// Severity band for a measured/expected ratio.
pub fn ratio_band(ratio: f64) -> Option<crate::Severity> {
    if ratio < CRITICAL_RATIO {
        Some(crate::Severity::Critical)
    } else if ratio < WARN_RATIO {
        Some(crate::Severity::Warning)
    } else {
        None
    }
}

/// Median of recent values (the node's own history), if any.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    Some(if v.len().is_multiple_of(2) {
        (v[m - 1] + v[m]) / 2.0
    } else {
        v[m]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_covers_seed_and_device_classes() {
        let phb = expected_allreduce(&NodeClass {
            worst_link: LinkClass::Phb,
            pcie_gen: Some(3),
            gpus: 4,
            model: "NVIDIA RTX A6000",
        })
        .unwrap();
        assert_eq!(phb.busbw_gbps, 4.0);
        let h200 = expected_allreduce(&NodeClass {
            worst_link: LinkClass::Nv(18),
            pcie_gen: Some(5),
            gpus: 2,
            model: "NVIDIA H200",
        })
        .unwrap();
        assert_eq!(h200.busbw_gbps, 300.0);
        assert!(expected_allreduce(&NodeClass {
            worst_link: LinkClass::X,
            pcie_gen: None,
            gpus: 1,
            model: "x"
        })
        .is_none());
    }

    #[test]
    fn rtx_5090_nodes_take_the_published_host_memory_figure() {
        let at = |gpus| {
            expected_allreduce(&NodeClass {
                worst_link: LinkClass::Phb,
                pcie_gen: Some(5),
                gpus,
                model: "NVIDIA GeForce RTX 5090",
            })
            .unwrap()
        };
        assert_eq!(at(8).busbw_gbps, 28.0);
        assert_eq!(at(4).busbw_gbps, 35.0);
        assert!(at(4).source.contains("nccl/issues/1639"));
        // Two GPUs: no published figure, the generation-scaled host-bridge row.
        assert_eq!(at(2).busbw_gbps, 16.0);
    }

    #[test]
    fn nvlinks_by_sku() {
        assert_eq!(nvlinks_per_gpu("NVIDIA H200").map(|n| n.0), Some(18));
        assert_eq!(
            nvlinks_per_gpu("NVIDIA A100-SXM4-80GB").map(|n| n.0),
            Some(12)
        );
        // The export SKUs keep 8 of the links.
        assert_eq!(nvlinks_per_gpu("NVIDIA H800").map(|n| n.0), Some(8));
        assert_eq!(
            nvlinks_per_gpu("NVIDIA A800-SXM4-80GB").map(|n| n.0),
            Some(8)
        );
        assert_eq!(nvlinks_per_gpu("NVIDIA H100 PCIe"), None);
        assert_eq!(nvlinks_per_gpu("NVIDIA H100 NVL").map(|n| n.0), Some(12));
        assert_eq!(nvlinks_per_gpu("NVIDIA H200 NVL"), None);
        assert_eq!(nvlinks_per_gpu("NVIDIA RTX A6000"), None);
    }

    #[test]
    fn bands_and_median() {
        assert_eq!(ratio_band(0.9), None);
        assert_eq!(ratio_band(0.5), Some(crate::Severity::Warning));
        assert_eq!(ratio_band(0.2), Some(crate::Severity::Critical));
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[]), None);
    }
}
