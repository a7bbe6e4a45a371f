//! Per-GPU causes: a downtrained or idle-downclocked PCIe link, MIG, NVLinks down, no NUMA node.

use super::platform::SysfsLink;
use super::{gpu_ref, Action, Cause, CauseKind, ExplainInput};
use crate::expect;
use crate::finding::{Evidence, Severity};
use crate::node_gpus::{GpuInfo, PcieLink};

pub(super) fn causes(input: &ExplainInput<'_>) -> Vec<Cause> {
    let multi = input.gpus.len() >= 2;
    let mut out = Vec::new();
    for g in input.gpus {
        out.extend(link_state(input, g));
        out.extend(mig(g, multi));
        out.extend(nvlink_down(g, multi));
        out.extend(numa_unknown(input, g));
    }
    out
}

fn cause(g: &GpuInfo, kind: CauseKind, severity: Severity, action: Action) -> Cause {
    Cause::new(kind, severity, action, vec![gpu_ref(g)])
}

/// The link at rest (sysfs, else NVML's inventory reading) and, where a pair ran on the GPU,
/// under load (sysfs). sysfs' maximum is the GPU's own; NVML's is what the GPU and the system
/// allow together, so where NVML gives one it caps the maximum (a gen5 GPU in a gen4 slot).
pub(super) fn link_readings(
    input: &ExplainInput<'_>,
    g: &GpuInfo,
) -> (Option<PcieLink>, Option<PcieLink>) {
    let p = input.platform.gpu(&g.pci_bus_id);
    let capped = |l: PcieLink| match g.pcie {
        Some(n) => PcieLink {
            gen_max: l.gen_max.min(n.gen_max),
            width_max: l.width_max.min(n.width_max),
            ..l
        },
        None => l,
    };
    let at_rest = p.and_then(|p| p.link.as_pcie()).map(capped).or(g.pcie);
    let under_load = p
        .and_then(|p| p.link_under_load.as_ref())
        .and_then(SysfsLink::as_pcie)
        .map(capped);
    (at_rest, under_load)
}

fn below_max(l: &PcieLink) -> bool {
    l.gen_current < l.gen_max || l.width_current < l.width_max
}

fn gen_width(gen: u32, width: u32) -> String {
    format!("gen{gen} x{width}")
}

/// The link state of one GPU: below its maximum under load is a fault (`pcie_downtrained`);
/// below at rest but at its maximum under load is power saving (`pcie_idle_downclock`); with no
/// reading under load, the reading at rest is judged as such (narrower: a fault; a lower
/// generation alone: noted).
fn link_state(input: &ExplainInput<'_>, g: &GpuInfo) -> Option<Cause> {
    match link_readings(input, g) {
        (rest, Some(load)) if below_max(&load) => {
            Some(downtrained(input, g, &load, rest.as_ref(), true))
        }
        (Some(rest), Some(load)) if below_max(&rest) => {
            Some(idle_downclock(input, g, &rest, &load))
        }
        (Some(rest), None) if below_max(&rest) => Some(downtrained(input, g, &rest, None, false)),
        _ => None,
    }
}

fn link_evidence(input: &ExplainInput<'_>, what: &str, l: &PcieLink) -> Evidence {
    Evidence::new(what, gen_width(l.gen_current, l.width_current))
        .expected(gen_width(l.gen_max, l.width_max))
        .source(input.platform.cite(SYSFS_SOURCE))
}

const SYSFS_SOURCE: &str = "sysfs current_link_speed/width vs max_link_speed/width, capped by NVML's maximum (NVML's reading at rest where sysfs is unread)";

/// `judged` is the reading under load (`loaded`) or at rest; `rest` accompanies a load reading.
fn downtrained(
    input: &ExplainInput<'_>,
    g: &GpuInfo,
    judged: &PcieLink,
    rest: Option<&PcieLink>,
    loaded: bool,
) -> Cause {
    let p = judged;
    let narrow = p.width_current < p.width_max;
    // At rest a lower generation alone is power saving; under load it is the finding.
    let fault = narrow || loaded;
    let (severity, action) = if fault {
        (Severity::Warning, Action::CheckLink)
    } else {
        (Severity::Info, Action::None)
    };
    let when = if loaded { "under load" } else { "at rest" };
    let mut c = cause(g, CauseKind::PcieDowntrained, severity, action);
    c.message = format!(
        "GPU{} ({}): PCIe link at gen{} x{} {when}, capable of gen{} x{}{}",
        g.index,
        g.pci_bus_id,
        p.gen_current,
        p.width_current,
        p.gen_max,
        p.width_max,
        if fault {
            ""
        } else {
            " (a lower generation at rest is power saving; no reading under load)"
        }
    );
    c.short = format!(
        "GPU{}'s PCIe link runs at gen{} x{} of gen{} x{} {when}",
        g.index, p.gen_current, p.width_current, p.gen_max, p.width_max
    );
    c.fix = if fault {
        format!(
            "reseat GPU{} or check its slot and riser; compare with a sister node",
            g.index
        )
    } else {
        "none at rest".into()
    };
    c.evidence = rest
        .map(|r| link_evidence(input, "PCIe link at rest", r))
        .into_iter()
        .chain([link_evidence(input, &format!("PCIe link {when}"), p)])
        .collect();
    c.source = "PCIe link training: a link that trains narrower or slower than both ends support is a hardware fault (PCI Express Base Specification, Link Status and Link Capabilities registers)".into();
    c
}

fn idle_downclock(
    input: &ExplainInput<'_>,
    g: &GpuInfo,
    rest: &PcieLink,
    load: &PcieLink,
) -> Cause {
    let mut c = cause(
        g,
        CauseKind::PcieIdleDownclock,
        Severity::Info,
        Action::None,
    );
    let loaded = gen_width(load.gen_current, load.width_current);
    c.message = format!(
        "GPU{} ({}): the link idles at a lower speed to save power ({} at rest); under load it ran at {loaded}",
        g.index,
        g.pci_bus_id,
        gen_width(rest.gen_current, rest.width_current),
    );
    c.short = format!("GPU{}'s PCIe link idles below {loaded}", g.index);
    c.fix = "none: the link trains up under load".into();
    c.evidence = vec![
        link_evidence(input, "PCIe link at rest", rest),
        link_evidence(input, "PCIe link under load", load),
    ];
    c.source = "nvidia-smi documentation, PCIe Generation Current: \"These may be reduced when the GPU is not in use\"; Linux sysfs-bus-pci ABI: current_link_speed".into();
    c
}

fn mig(g: &GpuInfo, multi: bool) -> Option<Cause> {
    if g.health.mig_enabled != Some(true) {
        return None;
    }
    let severity = if multi {
        Severity::Warning
    } else {
        Severity::Info
    };
    let mut c = cause(g, CauseKind::Mig, severity, Action::DisableMig);
    c.message = format!(
        "GPU{} ({}): MIG mode is on; MIG instances have no peer-to-peer (NVLink or PCIe) with other GPUs",
        g.index, g.pci_bus_id
    );
    c.short = format!("MIG is on for GPU{}", g.index);
    c.fix = format!(
        "nvidia-smi -i {} -mig 0 (when no job uses it), then reset the GPU",
        g.index
    );
    c.evidence = vec![Evidence::new("MIG mode", "enabled").source("NVML")];
    c.source = "NVIDIA MIG user guide: no GPU-to-GPU P2P (PCIe or NVLink) with MIG".into();
    Some(c)
}

/// What a GPU's NVLinks are judged against: the links it has where known, capped by the SKU's
/// design count (a card with fewer links by design, a bridge of 12, is not missing the SKU's
/// 18; an H100 NVL lists 18 and uses 12), else the SKU's count. A card the SKU table gives no
/// count (a PCIe card whose bridge is optional) with none of its links up has no bridge on
/// them: nothing to judge, as its links go nowhere.
fn nvlinks_expected(g: &GpuInfo, active: u32) -> Option<(u32, &'static str)> {
    const PRESENT: &str = "the NVLinks the GPU has, up or not (NVML's link state answers; nvidia-smi nvlink -s lists them): links present";
    let sku = expect::nvlinks_per_gpu(&g.name);
    match (g.health.nvlinks_present.filter(|n| *n > 0), sku) {
        (Some(_), None) if active == 0 => None,
        (Some(n), Some((d, src))) if d < n => Some((d, src)),
        (Some(n), _) => Some((n, PRESENT)),
        (None, sku) => sku,
    }
}

fn nvlink_down(g: &GpuInfo, multi: bool) -> Option<Cause> {
    let active = g.health.nvlinks_active?;
    let (want, source) = nvlinks_expected(g, active)?;
    if active >= want {
        return None;
    }
    // Alone in its node (a VM given one GPU), a GPU's links to absent peers are down by design.
    let (severity, action, fix) = if multi {
        (
            Severity::Warning,
            Action::ResetGpu,
            format!(
                "reset GPU{} when idle; if links stay down, check the NVLink fabric (drain)",
                g.index
            ),
        )
    } else {
        (
            Severity::Info,
            Action::None,
            "none: no peer GPU in this node".to_string(),
        )
    };
    let mut c = cause(g, CauseKind::NvlinkDown, severity, action);
    c.message = format!(
        "GPU{} ({}): {active} of {want} NVLinks active",
        g.index, g.pci_bus_id
    );
    c.short = format!("GPU{} has {active} of {want} NVLinks up", g.index);
    c.fix = fix;
    c.evidence = vec![Evidence::new("active NVLinks", active.to_string())
        .expected(want.to_string())
        .source(source)];
    c.source = source.to_string();
    Some(c)
}

fn numa_unknown(input: &ExplainInput<'_>, g: &GpuInfo) -> Option<Cause> {
    let p = input.platform.gpu(&g.pci_bus_id)?;
    if p.numa_node != Some(-1) {
        return None;
    }
    let mut c = cause(g, CauseKind::NumaUnknown, Severity::Info, Action::None);
    c.message = format!(
        "GPU{} ({}): the platform gives no NUMA node (numa_node -1); ranks cannot be pinned near it{}",
        g.index,
        g.pci_bus_id,
        if super::node::is_vm(input) {
            " (a VM's virtual tree)"
        } else {
            " (a one-socket board, or firmware that does not say)"
        }
    );
    c.short = format!("GPU{} has no NUMA node", g.index);
    c.fix = "none; where several sockets exist, ask for the VM's NUMA topology".into();
    c.evidence = vec![Evidence::new("numa_node", "-1").source(
        input
            .platform
            .cite("sysfs /sys/bus/pci/devices/*/numa_node"),
    )];
    c.source = "Linux sysfs-bus-pci ABI: numa_node".into();
    Some(c)
}
