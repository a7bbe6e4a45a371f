//! Per-GPU causes: a downtrained PCIe link, MIG, NVLinks down, no NUMA node.

use super::{gpu_ref, Action, Cause, CauseKind, ExplainInput};
use crate::expect;
use crate::finding::{Evidence, Severity};
use crate::gpu::GpuInfo;

pub(super) fn causes(input: &ExplainInput<'_>) -> Vec<Cause> {
    let multi = input.gpus.len() >= 2;
    let mut out = Vec::new();
    for g in input.gpus {
        out.extend(downtrained(g));
        out.extend(mig(g, multi));
        out.extend(nvlink_down(g, multi));
        out.extend(numa_unknown(input, g));
    }
    out
}

fn cause(g: &GpuInfo, kind: CauseKind, severity: Severity, action: Action) -> Cause {
    Cause {
        kind,
        severity,
        action,
        message: String::new(),
        short: String::new(),
        fix: String::new(),
        evidence: Vec::new(),
        gpus: vec![gpu_ref(g)],
        env_fix: Vec::new(),
        source: String::new(),
    }
}

/// A narrower link than the GPU and slot support is a fault; a lower generation alone is normal
/// power saving at rest (the link retrains up under load), so it is only noted.
fn downtrained(g: &GpuInfo) -> Option<Cause> {
    let p = g.pcie?;
    let narrow = p.width_current < p.width_max;
    if !narrow && p.gen_current >= p.gen_max {
        return None;
    }
    let (severity, action) = if narrow {
        (Severity::Warning, Action::CheckLink)
    } else {
        (Severity::Info, Action::None)
    };
    let mut c = cause(g, CauseKind::PcieDowntrained, severity, action);
    c.message = format!(
        "GPU{} ({}): PCIe link at gen{} x{}, capable of gen{} x{}{}",
        g.index,
        g.pci_bus_id,
        p.gen_current,
        p.width_current,
        p.gen_max,
        p.width_max,
        if narrow {
            ""
        } else {
            " (a lower generation at rest is power saving; re-check under load)"
        }
    );
    c.short = format!(
        "GPU{}'s PCIe link runs at gen{} x{} of gen{} x{}",
        g.index, p.gen_current, p.width_current, p.gen_max, p.width_max
    );
    c.fix = if narrow {
        format!(
            "reseat GPU{} or check its slot and riser; compare with a sister node",
            g.index
        )
    } else {
        "none at rest".into()
    };
    c.evidence = vec![Evidence::new(
        "PCIe link",
        format!("gen{} x{}", p.gen_current, p.width_current),
    )
    .expected(format!("gen{} x{}", p.gen_max, p.width_max))
    .source("NVML current vs max link generation and width")];
    c.source = "PCIe link training: a link that trains narrower than both ends support is a hardware fault (PCIe Base Specification, Link Status register)".into();
    Some(c)
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

fn nvlink_down(g: &GpuInfo, multi: bool) -> Option<Cause> {
    let active = g.health.nvlinks_active?;
    let (want, source) = expect::nvlinks_per_gpu(&g.name)?;
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
    c.evidence =
        vec![Evidence::new("numa_node", "-1").source("sysfs /sys/bus/pci/devices/*/numa_node")];
    c.source = "Linux sysfs-bus-pci ABI: numa_node".into();
    Some(c)
}
