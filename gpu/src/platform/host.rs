//! Host-wide facts from /proc and /sys: the hypervisor flag, the IOMMU, NVSwitches and Fabric
//! Manager. Every reader takes the root of the tree (`/` on a node, a fixture in tests).

use ddpcheck_core::num::len_u32;
use std::path::Path;

use ddpcheck_core::explain::platform::{FabricFacts, IommuFacts, IommuMode};

fn read(root: &Path, rel: &str) -> Option<String> {
    std::fs::read_to_string(root.join(rel)).ok()
}

fn entries(root: &Path, rel: &str) -> Vec<String> {
    std::fs::read_dir(root.join(rel))
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The `hypervisor` flag of the first CPU in /proc/cpuinfo (CPUID leaf 1, ECX bit 31).
pub fn hypervisor_flag(root: &Path) -> Option<bool> {
    let text = read(root, "proc/cpuinfo")?;
    let flags = text.lines().find(|l| l.starts_with("flags"))?;
    let (_, list) = flags.split_once(':')?;
    Some(list.split_whitespace().any(|f| f == "hypervisor"))
}

/// What names the platform: DMI's system vendor, else /sys/hypervisor/type (Xen).
pub fn platform_vendor(root: &Path) -> Option<String> {
    ["sys/class/dmi/id/sys_vendor", "sys/hypervisor/type"]
        .iter()
        .find_map(|rel| read(root, rel))
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// The IOMMU: group types decide the mode (DMA, DMA-FQ: translated; identity: passthrough);
/// no groups: no IOMMU translates this kernel's DMA.
pub fn iommu(root: &Path) -> IommuFacts {
    let groups = entries(root, "sys/kernel/iommu_groups");
    let types: Vec<String> = groups
        .iter()
        .filter_map(|g| read(root, &format!("sys/kernel/iommu_groups/{g}/type")))
        .map(|t| t.trim().to_string())
        .collect();
    let mode = if groups.is_empty() {
        IommuMode::Off
    } else if types.iter().any(|t| t.starts_with("DMA")) {
        IommuMode::Translated
    } else if types.iter().any(|t| t == "identity") {
        IommuMode::Passthrough
    } else {
        IommuMode::Unknown
    };
    let cmdline = read(root, "proc/cmdline")
        .map(|c| {
            c.split_whitespace()
                .filter(|w| w.contains("iommu"))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    IommuFacts {
        mode,
        groups: len_u32(groups.len()),
        units: len_u32(entries(root, "sys/class/iommu").len()),
        cmdline,
    }
}

/// The IOMMU group type of one PCI device (its `iommu_group` link), where it has a group.
pub fn group_type(device_dir: &Path) -> Option<String> {
    std::fs::read_to_string(device_dir.join("iommu_group/type"))
        .ok()
        .map(|t| t.trim().to_string())
}

/// NVSwitches (the driver's /proc entries or device nodes) and a running `nv-fabricmanager`.
pub fn fabric(root: &Path) -> FabricFacts {
    let mut nvswitches = len_u32(entries(root, "proc/driver/nvidia-nvswitch/devices").len());
    if nvswitches == 0 {
        nvswitches = len_u32(
            entries(root, "dev")
                .iter()
                .filter(|n| {
                    n.strip_prefix("nvidia-nvswitch").is_some_and(|rest| {
                        !rest.is_empty() && rest.chars().all(|c| c.is_ascii_digit())
                    })
                })
                .count(),
        );
    }
    let manager_running = (nvswitches > 0).then(|| {
        entries(root, "proc").iter().any(|pid| {
            pid.chars().all(|c| c.is_ascii_digit())
                && read(root, &format!("proc/{pid}/comm"))
                    .is_some_and(|c| c.trim() == "nv-fabricmanager")
        })
    });
    FabricFacts {
        nvswitches,
        manager_running,
        gpu_state: None,
    }
}
