//! The preflight's judgement of what its steps measured: health, PCIe, topology, NCCL settings
//! and the all-reduce against its reference.

use std::collections::BTreeMap;

use crate::collective::{judged_peak, Sweep};
use crate::expect::{self, Expectation, NodeClass};
use crate::explain::platform::GpuFabricState;
use crate::finding::{Evidence, Finding, Severity, Subject};
use crate::node_gpus::{GpuInfo, ProbeState};
use crate::topology::{LinkClass, P2pStatus, TopologyMatrix};

fn gpu_subject(g: &GpuInfo) -> Subject {
    Subject::Gpu {
        uuid: g.uuid.clone(),
        pci_bus_id: g.pci_bus_id.clone(),
    }
}

/// XIDs that mean the GPU needs a reset or has failed (NVIDIA's XID catalogue).
const FATAL_XIDS: [u64; 9] = [48, 63, 64, 74, 79, 92, 94, 95, 119];

/// The reference for the node's all-reduce: the table's row for its worst link (SYS where the
/// topology is unknown), the slowest PCIe generation of its GPUs, their count and model.
pub fn expected_for(gpus: &[GpuInfo], topology: Option<&TopologyMatrix>) -> Option<Expectation> {
    let worst_link = topology
        .and_then(TopologyMatrix::worst_link)
        .unwrap_or(LinkClass::Sys);
    let pcie_gen = gpus.iter().filter_map(|x| x.pcie.map(|p| p.gen_max)).min();
    expect::expected_allreduce(&NodeClass {
        worst_link,
        pcie_gen,
        gpus: u32::try_from(gpus.len()).unwrap_or(u32::MAX),
        model: gpus.first().map_or("", |g| g.name.as_str()),
    })
}

/// Health: probe state, ECC, row remapping, retired pages, XIDs, throttling, MIG.
pub fn judge_gpus(gpus: &[GpuInfo]) -> Vec<Finding> {
    let mut out = Vec::new();
    for g in gpus {
        let subj = gpu_subject(g);
        match g.state {
            ProbeState::Stuck => out.push(Finding::new(
                "nvml_stuck",
                Severity::Critical,
                subj.clone(),
                format!(
                    "GPU {} ({}): NVML call did not return before its deadline",
                    g.uuid, g.pci_bus_id
                ),
            )),
            ProbeState::Lost => out.push(Finding::new(
                "gpu_lost",
                Severity::Critical,
                subj.clone(),
                format!(
                    "GPU {} ({}) is lost: it fell off the bus or NVML cannot reach it",
                    g.uuid, g.pci_bus_id
                ),
            )),
            ProbeState::Ok => {}
        }
        let h = &g.health;
        if let Some(n) = h.ecc_uncorrected_volatile.filter(|n| *n > 0) {
            out.push(
                Finding::new(
                    "ecc_uncorrected",
                    Severity::Critical,
                    subj.clone(),
                    format!(
                        "GPU {}: {n} uncorrected ECC errors since the last reset",
                        g.uuid
                    ),
                )
                .with(
                    Evidence::new("volatile uncorrected ECC errors", n.to_string()).expected("0"),
                ),
            );
        }
        if h.remapped_rows_failure == Some(true) {
            out.push(Finding::new(
                "row_remap_failure",
                Severity::Critical,
                subj.clone(),
                format!(
                    "GPU {}: row remapping failed; the GPU needs service",
                    g.uuid
                ),
            ));
        }
        if h.remapped_rows_pending == Some(true) {
            out.push(Finding::new(
                "row_remap_pending",
                Severity::Warning,
                subj.clone(),
                format!("GPU {}: a row remap is pending; reset the GPU", g.uuid),
            ));
        }
        if h.retired_pages_pending == Some(true) {
            out.push(Finding::new(
                "retired_pages_pending",
                Severity::Warning,
                subj.clone(),
                format!("GPU {}: page retirement pending; reset the GPU", g.uuid),
            ));
        }
        for x in &h.xid_errors {
            let sev = if FATAL_XIDS.contains(x) {
                Severity::Critical
            } else {
                Severity::Warning
            };
            out.push(
                Finding::new(
                    "xid",
                    sev,
                    subj.clone(),
                    format!("GPU {}: XID {x} reported", g.uuid),
                )
                .with(Evidence::new("XID", x.to_string())),
            );
        }
        let hard: Vec<&String> = h
            .throttle_reasons
            .iter()
            .filter(|r| {
                matches!(
                    r.as_str(),
                    "hw_slowdown"
                        | "hw_thermal_slowdown"
                        | "hw_power_brake_slowdown"
                        | "sw_thermal_slowdown"
                )
            })
            .collect();
        if !hard.is_empty() {
            let list: Vec<&str> = hard.iter().map(|s| s.as_str()).collect();
            out.push(Finding::new(
                "throttled",
                Severity::Warning,
                subj.clone(),
                format!("GPU {}: clocks throttled ({})", g.uuid, list.join(", ")),
            ));
        }
        if h.mig_enabled == Some(true) {
            out.push(Finding::new(
                "mig_enabled",
                Severity::Info,
                subj.clone(),
                format!("GPU {}: MIG mode is on; DDP sees MIG slices", g.uuid),
            ));
        }
        if h.compute_mode.as_deref() == Some("prohibited") {
            out.push(Finding::new(
                "compute_prohibited",
                Severity::Critical,
                subj.clone(),
                format!("GPU {}: compute mode is Prohibited", g.uuid),
            ));
        }
    }
    out
}

/// PCIe: a link narrower than it can be is a finding. A lower generation at idle is normal
/// power saving (the link retrains up under load), so it is only noted.
pub fn judge_pcie(gpus: &[GpuInfo]) -> Vec<Finding> {
    let mut out = Vec::new();
    for g in gpus {
        let Some(p) = g.pcie else { continue };
        let ev = Evidence::new(
            "PCIe link",
            format!("gen{} x{}", p.gen_current, p.width_current),
        )
        .expected(format!("gen{} x{}", p.gen_max, p.width_max))
        .source("NVML current vs max link generation and width");
        if p.width_current < p.width_max {
            out.push(
                Finding::new(
                    "pcie_downtrained",
                    Severity::Warning,
                    gpu_subject(g),
                    format!(
                        "GPU {} ({}): PCIe link runs at gen{} x{}, capable of gen{} x{}",
                        g.uuid,
                        g.pci_bus_id,
                        p.gen_current,
                        p.width_current,
                        p.gen_max,
                        p.width_max
                    ),
                )
                .with(ev),
            );
        } else if p.gen_current < p.gen_max {
            out.push(
                Finding::new(
                    "pcie_gen_below_max",
                    Severity::Info,
                    gpu_subject(g),
                    format!(
                        "GPU {}: PCIe gen{} now, gen{} possible (normal at idle)",
                        g.uuid, p.gen_current, p.gen_max
                    ),
                )
                .with(ev),
            );
        }
    }
    out
}

/// Topology: NVLink pairs without P2P, and a mixed matrix.
pub fn judge_topology(t: &TopologyMatrix) -> Vec<Finding> {
    let mut out = Vec::new();
    for p in t.pairs() {
        if p.link.is_nvlink() && p.p2p == Some(P2pStatus::NotSupported) {
            out.push(Finding::new(
                "nvlink_without_p2p",
                Severity::Warning,
                Subject::Pair {
                    a_uuid: p.a.uuid.clone(),
                    b_uuid: p.b.uuid.clone(),
                    link: p.link.to_string(),
                },
                format!(
                    "GPUs {} and {} are {} but P2P is not supported between them",
                    p.a.uuid, p.b.uuid, p.link
                ),
            ));
        }
    }
    let classes: std::collections::BTreeSet<String> =
        t.pairs().iter().map(|p| p.link.to_string()).collect();
    if classes.len() > 1 {
        out.push(Finding::new(
            "mixed_topology",
            Severity::Info,
            Subject::Node,
            format!(
                "pairs differ: {}; the slowest bounds a ring",
                classes.into_iter().collect::<Vec<_>>().join(", ")
            ),
        ));
    }
    out
}

/// NCCL settings that hurt on this topology (the seeds' lesson: never force P2P across a host bridge).
pub fn judge_nccl_env(env: &BTreeMap<String, String>, t: &TopologyMatrix) -> Vec<Finding> {
    let mut out = Vec::new();
    let pairs = t.pairs();
    let any_nvlink = pairs.iter().any(|p| p.link.is_nvlink());
    let pcie_bridge = pairs
        .iter()
        .any(|p| !p.link.is_nvlink() && p.link.crosses_host_bridge());
    if let Some(level) = env.get("NCCL_P2P_LEVEL") {
        let lvl = level.to_ascii_uppercase();
        if pcie_bridge && matches!(lvl.as_str(), "SYS" | "NODE" | "PHB" | "5" | "4" | "3") {
            out.push(
                Finding::new("nccl_p2p_forced", Severity::Warning, Subject::Node, format!("NCCL_P2P_LEVEL={level} forces P2P across the host bridge; it halved all-reduce bandwidth on a PHB machine (4.3 → 2.3 GB/s): unset it"))
                    .with(Evidence::new("NCCL_P2P_LEVEL", level.clone()).source("Runcrate's field report (4xA6000 PHB)")),
            );
        }
    }
    for var in ["NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE"] {
        if any_nvlink && env.get(var).map(|v| v.trim() == "1").unwrap_or(false) {
            out.push(Finding::new(
                "nccl_nvlink_disabled",
                Severity::Warning,
                Subject::Node,
                format!("{var}=1 on an NVLink node sends traffic through the host (327 → 27 GB/s or less on 2xH200): unset it"),
            ));
        }
    }
    out
}

/// All-reduce: wrong elements, the reference table, and the node's own history.
pub fn judge_allreduce(s: &Sweep, expected: Option<&Expectation>, history: &[f64]) -> Vec<Finding> {
    let mut out = Vec::new();
    if let Some(w) = s.wrong_total().filter(|w| *w > 0) {
        out.push(
            Finding::new(
                "allreduce_wrong",
                Severity::Critical,
                Subject::Node,
                format!("all-reduce returned {w} wrong elements: data corruption on the path"),
            )
            .with(Evidence::new("#wrong", w.to_string()).expected("0")),
        );
    }
    let peak = judged_peak(s);
    let Some((bytes, busbw)) = peak else {
        return out;
    };
    if let Some(e) = expected {
        let ratio = busbw / e.busbw_gbps;
        let ev = Evidence::new(
            format!("all-reduce busbw at {} MiB", bytes >> 20),
            format!("{busbw:.2} GB/s"),
        )
        .expected(format!(
            "≥ {:.0}% of {:.2} GB/s ({})",
            expect::WARN_RATIO * 100.0,
            e.busbw_gbps,
            e.class
        ))
        .source(e.source.clone());
        match expect::ratio_band(ratio) {
            Some(sev) => out.push(
                Finding::new("busbw_below_expected", sev, Subject::Node, format!("all-reduce busbw {busbw:.2} GB/s is {:.0}% of the {:.2} GB/s expected for {}", ratio * 100.0, e.busbw_gbps, e.class))
                    .with(ev),
            ),
            None => out.push(Finding::new("busbw_ok", Severity::Info, Subject::Node, format!("all-reduce busbw {busbw:.2} GB/s ({:.0}% of expected)", ratio * 100.0)).with(ev)),
        }
    }
    if let Some(m) = expect::median(history) {
        if busbw < expect::HISTORY_DRIFT_RATIO * m {
            out.push(
                Finding::new("busbw_drift", Severity::Warning, Subject::Node, format!("all-reduce busbw {busbw:.2} GB/s is {:.0}% of this node's recent median {m:.2} GB/s", busbw / m * 100.0))
                    .with(Evidence::new("busbw", format!("{busbw:.2} GB/s")).expected(format!("≥ {:.0}% of {m:.2} GB/s", expect::HISTORY_DRIFT_RATIO * 100.0)).source(format!("node history, {} runs", history.len()))),
            );
        }
    }
    out
}

/// The GPUs' NVLink fabric registration before any CUDA work: not completed is critical (Fabric
/// Manager has not brought the NVSwitch fabric up, and CUDA cannot start on these GPUs, one or
/// many); registered with a health issue warns. The id is explain's `fabric_manager_down`.
pub fn judge_fabric(f: &GpuFabricState) -> Option<Finding> {
    let (severity, message, measured, expected) = if !f.registered() {
        let shown = match f.status.as_deref() {
            Some(s) if !s.eq_ignore_ascii_case("N/A") => {
                format!("{}, status {s}", f.state.as_smi())
            }
            _ => f.state.as_smi().to_string(),
        };
        (
            Severity::Critical,
            format!(
                "the NVLink fabric registration of {} is {shown}, not completed: Fabric Manager \
                 has not brought the NVSwitch fabric up, and CUDA cannot use them \
                 (systemctl start nvidia-fabricmanager)",
                gpus(f.gpus_not_registered)
            ),
            shown,
            "Completed, status Success",
        )
    } else if !f.health.is_empty() {
        let issues = f.health.join(", ");
        (
            Severity::Warning,
            format!(
                "the NVLink fabric of {} is registered but reports {issues}; Fabric Manager's \
                 log says which links or switches",
                gpus(f.gpus_unhealthy)
            ),
            issues,
            "healthy",
        )
    } else {
        return None;
    };
    let mut finding = Finding::new("fabric_manager_down", severity, Subject::Node, message);
    finding.evidence = vec![Evidence::new("GPU fabric state", measured)
        .expected(expected)
        .source(f.source.clone())];
    Some(finding)
}

/// `1 GPU`, `8 GPUs`.
fn gpus(n: u32) -> String {
    format!("{n} GPU{}", if n == 1 { "" } else { "s" })
}
