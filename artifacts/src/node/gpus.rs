//! The GPUs, from the most complete artifact that names them (`nvidia-smi -q`, else
//! `nvlink -s`, `topo -m`, nccl-tests' device lines, lspci), checked against the others and
//! given their NVLink counts.

use ddpcheck_core::explain::platform::normalise_bdf;
use ddpcheck_core::node_gpus::{GpuHealth, GpuInfo, PcieLink, ProbeState};

use crate::lspci::Lspci;
use crate::nccl_log::NcclLog;
use crate::nccl_tests::NcclTests;
use crate::nvlink_status::NvlinkStatus;
use crate::smi_query::{SmiGpu, SmiQuery};
use crate::topo_matrix::TopoMatrix;
use crate::ArtifactError;

fn info(index: u32, uuid: Option<String>, bus: String, name: String) -> GpuInfo {
    GpuInfo {
        index,
        // Where no artifact gives the UUID, the index stands in (never shaped like a UUID).
        uuid: uuid.unwrap_or_else(|| placeholder(index)),
        pci_bus_id: bus,
        name,
        memory_total_bytes: 0,
        pcie: None,
        health: GpuHealth::default(),
        processes: Vec::new(),
        state: ProbeState::Ok,
    }
}

/// The UUID that stands in where no artifact gives one.
fn placeholder(index: u32) -> String {
    format!("GPU{index}")
}

fn from_smi(i: u32, g: &SmiGpu) -> GpuInfo {
    let mut out = info(
        i,
        g.uuid.clone(),
        g.bus_id.clone(),
        g.product_name.clone().unwrap_or_default(),
    );
    out.memory_total_bytes = g.memory_total_mib.unwrap_or(0).saturating_mul(1 << 20);
    out.pcie = match (
        g.pcie_gen_current,
        g.pcie_gen_max,
        g.pcie_width_current,
        g.pcie_width_max,
    ) {
        (Some(gc), Some(gm), Some(wc), Some(wm)) => Some(PcieLink {
            gen_current: gc,
            gen_max: gm,
            width_current: wc,
            width_max: wm,
        }),
        _ => None,
    };
    out.health = GpuHealth {
        ecc_enabled: g.ecc_enabled,
        ecc_uncorrected_volatile: g.ecc_uncorrected_volatile,
        ecc_corrected_volatile: g.ecc_corrected_volatile,
        remapped_rows_pending: g.remapped_rows_pending,
        remapped_rows_failure: g.remapped_rows_failure,
        retired_pages_pending: g.retired_pages_pending,
        throttle_reasons: g.clock_event_reasons.clone(),
        temperature_c: g.temperature_c,
        power_w: g.power_w,
        sm_clock_mhz: g.sm_clock_mhz,
        persistence_mode: g.persistence_mode,
        compute_mode: g.compute_mode.as_ref().map(|m| m.to_ascii_lowercase()),
        mig_enabled: g.mig_current,
        ..GpuHealth::default()
    };
    out
}

fn base(
    smi: Option<&SmiQuery>,
    nvlink: Option<&NvlinkStatus>,
    topo: Option<&TopoMatrix>,
    tests: &[(&NcclTests, Option<&NcclLog>)],
    lspci: Option<&Lspci>,
) -> Option<Vec<GpuInfo>> {
    if let Some(q) = smi {
        return Some((0u32..).zip(&q.gpus).map(|(i, g)| from_smi(i, g)).collect());
    }
    // A cut `nvlink -s` naming some of the GPUs a topo matrix shows: the matrix names the node.
    if let Some(s) = nvlink.filter(|s| topo.is_none_or(|t| t.gpus.len() <= s.gpus.len())) {
        return Some(
            s.gpus
                .iter()
                .map(|g| info(g.index, g.uuid.clone(), String::new(), g.name.clone()))
                .collect(),
        );
    }
    if let Some(t) = topo {
        return Some(
            t.gpus
                .iter()
                .map(|i| info(*i, None, String::new(), String::new()))
                .collect(),
        );
    }
    if let Some((t, _)) = tests.iter().find(|(t, _)| t.hosts().len() == 1) {
        let mut v: Vec<GpuInfo> = t
            .devices
            .iter()
            .map(|d| info(d.device, None, String::new(), d.name.clone()))
            .collect();
        v.sort_by_key(|g| g.index);
        v.dedup_by_key(|g| g.index);
        return Some(v);
    }
    let l = lspci?;
    Some(
        (0u32..)
            .zip(l.nvidia_gpus())
            .map(|(i, d)| info(i, None, d.bdf.clone(), d.description.clone()))
            .collect(),
    )
}

/// What the report says where no artifact names this node's GPUs (the verdict is UNKNOWN).
pub const NO_GPUS: &str = "no artifact names this node's GPUs (nvidia-smi -q, nvlink -s, topo -m, nccl-tests on one host, lspci -vvv): nothing judged";

fn inconsistent(why: String) -> ArtifactError {
    ArtifactError::Inconsistent(why)
}

/// NVLink counts from `nvlink -s`, matched by UUID (by index where it or the GPU has none); it
/// may list some of the GPUs (a cut listing), but a GPU it names that the others do not is
/// another node's.
fn with_nvlinks(gpus: &mut [GpuInfo], s: &NvlinkStatus) -> Result<(), ArtifactError> {
    if s.gpus.len() > gpus.len() {
        return Err(inconsistent(format!(
            "nvidia-smi nvlink -s lists {} GPUs, the others {}",
            s.gpus.len(),
            gpus.len()
        )));
    }
    for n in &s.gpus {
        let by_uuid = n
            .uuid
            .as_ref()
            .and_then(|u| gpus.iter().position(|g| &g.uuid == u));
        // A GPU named by index alone (topo -m) takes the listing's UUID and name.
        let by_index = || {
            gpus.iter().position(|g| {
                g.index == n.index && (n.uuid.is_none() || g.uuid == placeholder(g.index))
            })
        };
        let i = by_uuid.or_else(by_index).ok_or_else(|| {
            inconsistent(format!(
                "nvidia-smi nvlink -s names GPU {} ({}), which the others do not",
                n.index,
                n.uuid.as_deref().unwrap_or("no UUID")
            ))
        })?;
        let g = &mut gpus[i];
        if g.uuid == placeholder(g.index) {
            if let Some(u) = &n.uuid {
                g.uuid.clone_from(u);
            }
        }
        if g.name.is_empty() {
            g.name.clone_from(&n.name);
        }
        if n.present() > 0 {
            g.health.nvlinks_active = Some(n.active());
            g.health.nvlinks_present = Some(n.present());
        } else if n.none_active {
            // "All links are inActive": none up, and how many the GPU has is the SKU's to say
            // (a card without NVLink has no count; an SXM board's 18 are all down).
            g.health.nvlinks_active = Some(0);
        }
    }
    Ok(())
}

/// Every GPU `nvidia-smi -q` names is in `lspci`'s output.
fn check_lspci(gpus: &[GpuInfo], l: &Lspci) -> Result<(), ArtifactError> {
    for g in gpus.iter().filter(|g| !g.pci_bus_id.is_empty()) {
        let want = normalise_bdf(&g.pci_bus_id);
        if !l.devices.iter().any(|d| normalise_bdf(&d.bdf) == want) {
            return Err(inconsistent(format!(
                "lspci -vvv has no device {} (GPU{})",
                g.pci_bus_id, g.index
            )));
        }
    }
    Ok(())
}

pub(super) fn gpus(
    smi: Option<&SmiQuery>,
    nvlink: Option<&NvlinkStatus>,
    topo: Option<&TopoMatrix>,
    tests: &[(&NcclTests, Option<&NcclLog>)],
    lspci: Option<&Lspci>,
    undecided: &mut Vec<String>,
) -> Result<Vec<GpuInfo>, ArtifactError> {
    let Some(mut gpus) = base(smi, nvlink, topo, tests, lspci) else {
        undecided.push(NO_GPUS.into());
        return Ok(Vec::new());
    };
    if let Some(t) = topo {
        if t.gpus.len() != gpus.len() {
            return Err(inconsistent(format!(
                "nvidia-smi topo -m shows {} GPUs, the others {}",
                t.gpus.len(),
                gpus.len()
            )));
        }
    }
    if let Some(s) = nvlink {
        with_nvlinks(&mut gpus, s)?;
        if s.gpus.len() < gpus.len() {
            undecided.push(format!(
                "nvidia-smi nvlink -s lists {} of the {} GPUs: the others' NVLinks not judged",
                s.gpus.len(),
                gpus.len()
            ));
        }
    }
    match (lspci, smi) {
        (Some(l), Some(_)) => check_lspci(&gpus, l)?,
        (Some(l), None) => bus_ids_from_lspci(&mut gpus, l, undecided),
        _ => {}
    }
    Ok(gpus)
}

/// Where no artifact gave the GPUs' bus ids, lspci's NVIDIA GPUs in bus order, one for one
/// (nvidia-smi numbers GPUs by PCI bus id); said, as it is read across two files.
fn bus_ids_from_lspci(gpus: &mut [GpuInfo], l: &Lspci, undecided: &mut Vec<String>) {
    let mut found: Vec<&crate::lspci::PciDevice> = l.nvidia_gpus().collect();
    found.sort_by(|a, b| a.bdf.cmp(&b.bdf));
    if found.len() != gpus.len() || gpus.iter().any(|g| !g.pci_bus_id.is_empty()) {
        return;
    }
    let mut order: Vec<&mut GpuInfo> = gpus.iter_mut().collect();
    order.sort_by_key(|g| g.index);
    for (g, d) in order.into_iter().zip(found) {
        g.pci_bus_id = d.bdf.clone();
        if g.name.is_empty() {
            g.name = d
                .description
                .split(" (rev")
                .next()
                .unwrap_or(&d.description)
                .to_string();
        }
    }
    undecided.push(
        "the GPUs' bus ids are lspci's NVIDIA GPUs in bus order (nvidia-smi numbers GPUs by bus id); nvidia-smi -q would name them"
            .into(),
    );
}
