//! The platform under the GPUs as the artifacts show it: from `lspci -vvv` each GPU's bridges
//! with their ACS control, its NUMA node and its link (as sysfs would state it, at rest), and
//! NVSwitches; from `nvidia-smi -q` whether the GPUs are passed through to a VM and their NVLink
//! fabric registration.

use ddpcheck_core::explain::platform::{
    normalise_bdf, AcsState, Bridge, FabricFacts, FabricState, GpuFabricState, GpuPlatform,
    PlatformFacts, SysfsLink,
};
use ddpcheck_core::node_gpus::GpuInfo;

use crate::lspci::{Lspci, PciDevice};
use crate::smi_query::SmiQuery;

fn link(d: &PciDevice) -> SysfsLink {
    SysfsLink {
        current_gts: d.lnk_sta.map(|l| l.gts),
        max_gts: d.lnk_cap.map(|l| l.gts),
        current_width: d.lnk_sta.map(|l| l.width),
        max_width: d.lnk_cap.map(|l| l.width),
    }
}

fn gpu(l: &Lspci, g: &GpuInfo) -> Option<GpuPlatform> {
    let want = normalise_bdf(&g.pci_bus_id);
    let d = l
        .nvidia_gpus()
        .find(|d| !want.is_empty() && normalise_bdf(&d.bdf) == want)?;
    let bridges = l.bridges_above(d).map(|up| {
        up.iter()
            .map(|b| Bridge {
                bdf: b.bdf.clone(),
                acs: b.acs.clone().unwrap_or(AcsState::NotPresent),
            })
            .collect::<Vec<_>>()
    });
    // On bus 00 with no bridge above: a hypervisor's flat tree (as the sysfs reader says).
    let on_root_bus = match &bridges {
        Some(b) if b.is_empty() && d.bus() == Some(0) => Some(true),
        Some(b) if !b.is_empty() => Some(false),
        _ => None,
    };
    Some(GpuPlatform {
        pci_bus_id: g.pci_bus_id.clone(),
        numa_node: d.numa_node,
        on_root_bus,
        bridges,
        host_bridge: None,
        link: link(d),
        link_under_load: None,
        iommu_group_type: None,
    })
}

/// Where bridges that redirect peer traffic (ACS) give no bus range, so that none can be placed
/// above a GPU: the line that says ACS is not judged, naming them.
pub(super) fn unplaced_acs(lspci: Option<&Lspci>) -> Option<String> {
    let l = lspci?;
    let mut domains: Vec<&str> = l.nvidia_gpus().map(PciDevice::domain).collect();
    domains.dedup();
    let redirecting: Vec<&str> = domains
        .iter()
        .flat_map(|d| l.unplaced_bridges(d))
        .filter(|b| b.acs.as_ref().is_some_and(AcsState::redirects_p2p))
        .map(|b| b.bdf.as_str())
        .collect();
    let shown = redirecting
        .iter()
        .take(4)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    let more = if redirecting.len() > 4 { ", …" } else { "" };
    (!redirecting.is_empty()).then(|| {
        format!(
            "lspci -vvv: ACS redirects peer traffic on {} PCI bridges ({shown}{more}) whose bus \
             ranges (Bus: primary=, secondary=, subordinate=) it does not give: whether any is \
             above a GPU is not known, so ACS is not judged (a whole lspci -vvv places them)",
            redirecting.len()
        )
    })
}

/// `Pass-Through` or `VGPU` from `nvidia-smi -q`'s GPU Virtualization Mode: a VM.
fn virtualization(smi: Option<&SmiQuery>) -> Option<(bool, String)> {
    let modes: Vec<&str> = smi?
        .gpus
        .iter()
        .filter_map(|g| g.virtualization_mode.as_deref())
        .collect();
    let first = *modes.first()?;
    let vm = !first.eq_ignore_ascii_case("None");
    Some((
        vm,
        format!("nvidia-smi -q: GPU Virtualization Mode {first}"),
    ))
}

pub(super) fn facts(
    lspci: Option<&Lspci>,
    smi: Option<&SmiQuery>,
    gpus: &[GpuInfo],
) -> PlatformFacts {
    let mut p = PlatformFacts::unknown("artifacts (lspci -vvv, nvidia-smi -q)");
    if let Some((vm, words)) = virtualization(smi) {
        p.hypervisor = Some(vm);
        if vm {
            p.hypervisor_vendor = Some(words);
        }
    }
    if let Some(l) = lspci {
        p.gpus = gpus.iter().filter_map(|g| gpu(l, g)).collect();
        p.fabric = FabricFacts {
            nvswitches: ddpcheck_core::num::len_u32(
                l.devices.iter().filter(|d| d.is_nvswitch()).count(),
            ),
            manager_running: None,
            gpu_state: None,
        };
    }
    if let Some(s) = smi {
        p.fabric.gpu_state = fabric_registration(s);
    }
    p
}

/// The GPUs' fabric registration (`Fabric > State` and `Status`), judged for the node as NVML's
/// live reading is (`GpuFabricState::of_node`); `None` where no GPU gives a state (`N/A`: no
/// NVSwitch fabric, a PCIe card, a VM).
fn fabric_registration(smi: &SmiQuery) -> Option<GpuFabricState> {
    let states: Vec<GpuFabricState> = smi
        .gpus
        .iter()
        .filter_map(|g| {
            let state = match g.fabric_state.as_deref()?.trim() {
                s if s.eq_ignore_ascii_case("Completed") => FabricState::Completed,
                s if s.eq_ignore_ascii_case("In Progress") => FabricState::InProgress,
                s if s.eq_ignore_ascii_case("Not Started") => FabricState::NotStarted,
                _ => return None,
            };
            Some(GpuFabricState::of_gpu(
                state,
                g.fabric_status.clone(),
                "nvidia-smi -q: Fabric State",
            ))
        })
        .collect();
    GpuFabricState::of_node(states)
}
