//! Fallbacks from /sys for what NVML may not answer: a GPU's NUMA node and its local CPU list.

use std::path::{Path, PathBuf};

use super::convert::sysfs_pci_name;

/// `/sys/bus/pci/devices/<domain:bus:dev.fn>` of a GPU, from NVML's bus id.
pub fn pci_dir(root: &Path, bus_id: &str) -> Option<PathBuf> {
    Some(root.join(sysfs_pci_name(bus_id)?))
}

/// The text of sysfs `numa_node`: `-1` means the platform did not say.
pub fn parse_numa_node(s: &str) -> Option<u32> {
    s.trim()
        .parse::<i64>()
        .ok()
        .and_then(|n| u32::try_from(n).ok())
}

/// The text of sysfs `local_cpulist` (already a list like `0-31,64-95`).
pub fn parse_cpulist(s: &str) -> Option<String> {
    let t = s.trim();
    let ok = !t.is_empty()
        && t.chars()
            .all(|c| c.is_ascii_digit() || c == ',' || c == '-');
    ok.then(|| t.to_string())
}

pub const PCI_DEVICES: &str = "/sys/bus/pci/devices";

pub fn numa_node(root: &Path, bus_id: &str) -> Option<u32> {
    let dir = pci_dir(root, bus_id)?;
    parse_numa_node(&std::fs::read_to_string(dir.join("numa_node")).ok()?)
}

pub fn local_cpulist(root: &Path, bus_id: &str) -> Option<String> {
    let dir = pci_dir(root, bus_id)?;
    parse_cpulist(&std::fs::read_to_string(dir.join("local_cpulist")).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sysfs_values() {
        assert_eq!(parse_numa_node("1\n"), Some(1));
        assert_eq!(parse_numa_node("-1\n"), None);
        assert_eq!(parse_numa_node(""), None);
        assert_eq!(parse_cpulist("0-31,64-95\n").as_deref(), Some("0-31,64-95"));
        assert_eq!(parse_cpulist("\n"), None);
        assert_eq!(parse_cpulist("ffff"), None);
    }

    #[test]
    fn reads_a_fake_sysfs_tree() {
        let root = tempfile::tempdir().unwrap();
        let dev = root.path().join("0000:9a:00.0");
        std::fs::create_dir_all(&dev).unwrap();
        std::fs::write(dev.join("numa_node"), "1\n").unwrap();
        std::fs::write(dev.join("local_cpulist"), "48-95,144-191\n").unwrap();
        // NVML's 8-digit, upper-case form finds the sysfs directory.
        assert_eq!(numa_node(root.path(), "00000000:9A:00.0"), Some(1));
        assert_eq!(
            local_cpulist(root.path(), "00000000:9A:00.0").as_deref(),
            Some("48-95,144-191")
        );
        assert_eq!(numa_node(root.path(), "00000000:18:00.0"), None);
    }
}
