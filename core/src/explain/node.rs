//! Node-wide causes: a virtual machine, the IOMMU, Fabric Manager on NVSwitch systems.

use super::platform::{GpuFabricState, IommuFacts, IommuMode};
use super::{Action, Cause, CauseKind, ExplainInput};
use crate::finding::{Evidence, Severity};
use crate::topology::P2pStatus;

pub(super) fn causes(input: &ExplainInput<'_>) -> Vec<Cause> {
    let mut out = Vec::new();
    out.extend(virtual_machine(input));
    out.extend(iommu(input));
    out.extend(fabric_manager(input));
    out
}

fn cause(kind: CauseKind, severity: Severity, action: Action, message: String) -> Cause {
    Cause {
        message,
        ..Cause::new(kind, severity, action, Vec::new())
    }
}

/// Whether the node is a VM, from the CPU flag and the PCI tree: every GPU directly on a host
/// bridge's bus is a hypervisor's virtual tree (no physical board wires GPUs that way).
pub(super) fn is_vm(input: &ExplainInput<'_>) -> bool {
    let p = input.platform;
    let all_on_root = !p.gpus.is_empty() && p.gpus.iter().all(|g| g.on_root_bus == Some(true));
    p.hypervisor == Some(true) || all_on_root
}

fn virtual_machine(input: &ExplainInput<'_>) -> Option<Cause> {
    if !is_vm(input) {
        return None;
    }
    let p = input.platform;
    // Offline the flag is not the CPU's: the artifacts say whether the GPUs are passed through.
    let (what, words) = if p.evidence_from.is_some() {
        ("GPUs passed through to a VM", ["yes", "no", "not shown"])
    } else {
        ("hypervisor CPU flag", ["set", "not set", "unread"])
    };
    let mut ev = vec![Evidence::new(
        what,
        match p.hypervisor {
            Some(true) => words[0],
            Some(false) => words[1],
            None => words[2],
        },
    )
    .source(p.cite("/proc/cpuinfo flags"))];
    if let Some(v) = &p.hypervisor_vendor {
        ev.push(Evidence::new("platform vendor", v.clone()));
    }
    for g in &p.gpus {
        if g.on_root_bus == Some(true) {
            ev.push(
                Evidence::new(
                    format!("GPU {}", g.pci_bus_id),
                    "directly on the root bus (no bridge above it)",
                )
                .source(p.cite("sysfs PCI path")),
            );
        }
        if g.numa_node == Some(-1) {
            ev.push(
                Evidence::new(format!("GPU {} numa_node", g.pci_bus_id), "-1")
                    .source(p.cite("sysfs")),
            );
        }
    }
    ev.push(
        Evidence::new("IOMMU", guest_iommu(&p.iommu)).source(p.cite("/sys/kernel/iommu_groups")),
    );
    let no_p2p = input.topology.is_some_and(|t| {
        t.pairs()
            .iter()
            .any(|pr| pr.p2p == Some(P2pStatus::NotSupported))
    });
    let multi = input.gpus.len() >= 2;
    let (severity, action, fix) = if multi && no_p2p {
        (
            Severity::Warning,
            Action::AskProvider,
            "ask the provider for GPU peer-to-peer in this VM (the host's ACS and IOMMU decide it)",
        )
    } else {
        (
            Severity::Info,
            Action::None,
            "none: read the figures as a VM's",
        )
    };
    let mut c = cause(
        CauseKind::VirtualMachine,
        severity,
        action,
        "virtual machine: the PCI tree and NUMA nodes seen are the hypervisor's, not the host's; \
         link classes (PHB) and NUMA affinity say nothing of the physical path, P2P between GPUs \
         works only where the host lets it through (its ACS and IOMMU, unseen from here), and the \
         expected figures for a PCIe class are an upper bound"
            .into(),
    );
    c.short = "the node is a virtual machine".into();
    c.fix = fix.into();
    c.evidence = ev;
    c.source = "CPUID hypervisor bit (Linux /proc/cpuinfo); NCCL troubleshooting: GPU Direct in virtual machines".into();
    Some(c)
}

/// The IOMMU as a guest sees it. No groups in a guest says nothing of the host's IOMMU, which
/// decides P2P there: say what is seen, not "off".
fn guest_iommu(f: &IommuFacts) -> String {
    match f.mode {
        IommuMode::Off => {
            "none visible in the guest (no IOMMU groups); the host's is unseen".into()
        }
        IommuMode::Translated => format!("translated in the guest ({} groups)", f.groups),
        IommuMode::Passthrough => format!("passthrough in the guest ({} groups)", f.groups),
        IommuMode::Unknown => format!("unknown ({} groups of unread type)", f.groups),
    }
}

fn iommu(input: &ExplainInput<'_>) -> Option<Cause> {
    let f = &input.platform.iommu;
    if f.mode != IommuMode::Translated {
        return None;
    }
    // Peer traffic over PCIe goes through the IOMMU; NVLink peers and a lone GPU are not hurt.
    let pcie_pairs = input
        .topology
        .is_some_and(|t| t.pairs().iter().any(|p| !p.link.is_nvlink()));
    let severity = if pcie_pairs {
        Severity::Warning
    } else {
        Severity::Info
    };
    let mut types: Vec<String> = input
        .platform
        .gpus
        .iter()
        .filter_map(|g| {
            g.iommu_group_type
                .as_ref()
                .map(|t| format!("{}: {t}", g.pci_bus_id))
        })
        .collect();
    if types.is_empty() {
        types.push(format!("{} groups", f.groups));
    }
    let mut c = cause(
        CauseKind::IommuTranslated,
        severity,
        Action::IommuPassthrough,
        format!(
            "IOMMU translates DMA ({}): PCIe peer traffic between GPUs is redirected through the \
             root complex's IOMMU, slower or blocked",
            types.join(", ")
        ),
    );
    c.short = "the IOMMU translates DMA".into();
    c.fix = "boot with iommu=pt (passthrough) or the IOMMU off for the GPUs".into();
    c.evidence = vec![Evidence::new("IOMMU group type", types.join(", "))
        .expected("identity (passthrough)")
        .source(input.platform.cite("/sys/kernel/iommu_groups/*/type"))];
    if !f.cmdline.is_empty() {
        c.evidence.push(
            Evidence::new("kernel command line", f.cmdline.join(" "))
                .source(input.platform.cite("/proc/cmdline")),
        );
    }
    c.source = "NCCL troubleshooting: PCI Access Control Services (IO virtualization redirects \
                peer traffic to the root complex); Linux sysfs-kernel-iommu_groups ABI (type)"
        .into();
    Some(c)
}

fn fabric_manager(input: &ExplainInput<'_>) -> Option<Cause> {
    let f = &input.platform.fabric;
    if let Some(g) = f.gpu_state.as_ref() {
        if !g.registered() {
            return Some(fabric_not_registered(g));
        }
        if !g.health.is_empty() {
            return Some(fabric_unhealthy(g));
        }
    }
    if f.nvswitches == 0 || f.manager_running != Some(false) {
        return None;
    }
    let mut c = cause(
        CauseKind::FabricManagerDown,
        Severity::Critical,
        Action::StartFabricManager,
        format!(
            "{} NVSwitches and no Fabric Manager: CUDA cannot use the NVLink fabric until it runs",
            f.nvswitches
        ),
    );
    c.short = "Fabric Manager is not running".into();
    c.fix = FABRIC_FIX.into();
    c.evidence = vec![
        Evidence::new("NVSwitch devices", f.nvswitches.to_string()),
        Evidence::new("nv-fabricmanager process", "not running").expected("running"),
    ];
    c.source = FABRIC_SOURCE.into();
    Some(c)
}

const FABRIC_FIX: &str = "systemctl start nvidia-fabricmanager (and enable it at boot)";
const FABRIC_SOURCE: &str =
    "NVIDIA Fabric Manager user guide (NVSwitch systems need it before CUDA starts)";

/// GPUs of an NVSwitch fabric whose registration has not completed: Fabric Manager has not
/// (or not successfully) brought the fabric up, and CUDA cannot start on them until it does.
fn fabric_not_registered(g: &GpuFabricState) -> Cause {
    let state = g.state.as_smi();
    let shown = match g.status.as_deref() {
        Some(s) if !s.eq_ignore_ascii_case("N/A") => format!("{state}, status {s}"),
        _ => state.to_string(),
    };
    let mut c = cause(
        CauseKind::FabricManagerDown,
        Severity::Critical,
        Action::StartFabricManager,
        format!(
            "{} GPUs' NVLink fabric registration is {shown}, not completed: Fabric Manager has not brought the NVSwitch fabric up, and CUDA cannot use these GPUs until it does",
            g.gpus_not_registered
        ),
    );
    c.short = format!("fabric registration {shown}: Fabric Manager not up");
    c.fix = format!("{FABRIC_FIX}; if it runs, read its log (/var/log/fabricmanager.log)");
    c.evidence = vec![Evidence::new("GPU fabric state", shown)
        .expected("Completed, status Success")
        .source(g.source.clone())];
    c.source = FABRIC_SOURCE.into();
    c
}

/// Registered GPUs whose fabric reports itself unhealthy (NVML's health mask): Fabric Manager
/// brought the fabric up, but at reduced bandwidth, over an unhealthy route or misconfigured.
/// Jobs start, so it warns; Fabric Manager's log says which links or switches.
fn fabric_unhealthy(g: &GpuFabricState) -> Cause {
    let issues = g.health.join(", ");
    let mut c = cause(
        CauseKind::FabricManagerDown,
        Severity::Warning,
        Action::CheckLink,
        format!(
            "{} GPUs' NVLink fabric is registered but reports {issues}: the fabric Fabric Manager \
             brought up is not whole, and traffic over it may be slower or fail",
            g.gpus_unhealthy
        ),
    );
    c.short = format!("NVLink fabric health: {issues}");
    c.fix = "read Fabric Manager's log (/var/log/fabricmanager.log) and nvidia-smi nvlink -s for \
             the links or switches at fault; drain the node while the fabric stays unhealthy"
        .into();
    c.evidence = vec![Evidence::new("GPU fabric health", issues)
        .expected("healthy")
        .source(g.source.clone())];
    c.source = FABRIC_SOURCE.into();
    c
}
