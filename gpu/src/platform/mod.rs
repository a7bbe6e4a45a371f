//! The platform under the GPUs, read from sysfs and procfs: each GPU's PCI path up to its host
//! bridge with the ACS control of every bridge on it, NUMA node, link state and IOMMU group;
//! the hypervisor flag, the IOMMU mode, NVSwitches and Fabric Manager. No `lspci` (the GPU
//! machines have none): config space comes from `/sys/bus/pci/devices/*/config`.
//!
//! Every reader takes a root (`/` on a node), so the tests run on fixture trees in `testdata/`.

pub mod config;
pub mod host;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

use ddpcheck_core::explain::platform::{
    normalise_bdf, AcsState, Bridge, GpuPlatform, LinkReading, PlatformFacts, SysfsLink,
};

/// Everything about the platform of these GPUs (NVML bus ids) under `root`.
pub fn read(root: &Path, bus_ids: &[String]) -> PlatformFacts {
    PlatformFacts {
        hypervisor: host::hypervisor_flag(root),
        hypervisor_vendor: host::platform_vendor(root),
        iommu: host::iommu(root),
        fabric: host::fabric(root),
        gpus: bus_ids.iter().map(|id| gpu(root, id)).collect(),
        source: format!("sysfs {}", root.display()),
        evidence_from: None,
    }
}

/// Only the PCIe links of these GPUs (cheap enough to poll while a measurement runs).
pub fn links(root: &Path, bus_ids: &[String]) -> Vec<LinkReading> {
    bus_ids
        .iter()
        .map(|id| {
            let dev = root.join("sys/bus/pci/devices").join(normalise_bdf(id));
            LinkReading {
                pci_bus_id: id.clone(),
                link: sysfs_link(&dev),
            }
        })
        .collect()
}

fn gpu(root: &Path, bus_id: &str) -> GpuPlatform {
    let bdf = normalise_bdf(bus_id);
    let link = root.join("sys/bus/pci/devices").join(&bdf);
    let real = std::fs::canonicalize(&link).ok();
    let path = real.as_deref().and_then(|r| pci_path(root, r));
    let bridges = path.as_ref().map(|(_, chain)| {
        chain
            .iter()
            .map(|b| Bridge {
                bdf: b.clone(),
                acs: bridge_acs(root, b),
            })
            .collect::<Vec<_>>()
    });
    let dir = real.unwrap_or(link);
    GpuPlatform {
        pci_bus_id: bus_id.to_string(),
        numa_node: read_trim(&dir, "numa_node").and_then(|s| s.parse().ok()),
        on_root_bus: bridges.as_ref().map(Vec::is_empty),
        bridges,
        host_bridge: path.map(|(host, _)| host),
        link: sysfs_link(&dir),
        link_under_load: None,
        iommu_group_type: host::group_type(&dir),
    }
}

fn read_trim(dir: &Path, name: &str) -> Option<String> {
    std::fs::read_to_string(dir.join(name))
        .ok()
        .map(|s| s.trim().to_string())
}

/// From a device's real sysfs directory (`…/devices/pci0000:00/0000:00:01.0/0000:01:00.0`): its
/// host bridge and the bridges above it, host side first.
pub fn pci_path(root: &Path, real: &Path) -> Option<(String, Vec<String>)> {
    let base: PathBuf = std::fs::canonicalize(root.join("sys/devices")).ok()?;
    let rel = real.strip_prefix(&base).ok()?;
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let host = parts.first().filter(|p| p.starts_with("pci"))?.clone();
    parts.remove(0);
    // The last part is the device itself.
    parts.pop()?;
    // Only PCI functions count as bridges (a path may hold other nodes, e.g. on some SoCs).
    parts.retain(|p| p.len() == 12 && p.as_bytes().get(4) == Some(&b':'));
    Some((host, parts))
}

fn bridge_acs(root: &Path, bdf: &str) -> AcsState {
    let file = root.join("sys/bus/pci/devices").join(bdf).join("config");
    match std::fs::read(&file) {
        Ok(bytes) => config::acs_from_config(&bytes),
        Err(e) => AcsState::Unknown {
            why: format!("{}: {e}", file.display()),
        },
    }
}

/// `32.0 GT/s PCIe` → 32.0.
fn gts(s: &str) -> Option<f64> {
    s.split_whitespace().next()?.parse().ok()
}

fn sysfs_link(dir: &Path) -> SysfsLink {
    SysfsLink {
        current_gts: read_trim(dir, "current_link_speed").and_then(|s| gts(&s)),
        max_gts: read_trim(dir, "max_link_speed").and_then(|s| gts(&s)),
        current_width: read_trim(dir, "current_link_width").and_then(|s| s.parse().ok()),
        max_width: read_trim(dir, "max_link_width").and_then(|s| s.parse().ok()),
    }
}
