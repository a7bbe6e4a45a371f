//! Pure conversions from raw NVML readings to core's vocabulary (no NVML calls, unit-tested).

use ddpcheck_core::num::len_u32;
use ddpcheck_core::topology::{LinkClass, P2pReason};
use nvml_wrapper::enum_wrappers::device::{ComputeMode, P2pStatus as NvmlP2p, TopologyLevel};
use nvml_wrapper::error::NvmlError;

/// NVML's clock throttle ("clock event") reason bits, as in nvml.h, with our snake_case names.
/// Kept as raw bits so the mapping is testable without the library.
pub const THROTTLE_REASONS: [(u64, &str); 9] = [
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
];

/// Names of the reasons set in NVML's throttle bitmask, in bit order; unknown bits are named
/// `unknown_0x...` so that a newer driver's reason is still visible.
pub fn throttle_reason_names(mask: u64) -> Vec<String> {
    let mut out = Vec::new();
    let mut known = 0u64;
    for (bit, name) in THROTTLE_REASONS {
        known |= bit;
        if mask & bit != 0 {
            out.push(name.to_string());
        }
    }
    let rest = mask & !known;
    if rest != 0 {
        out.push(format!("unknown_{rest:#x}"));
    }
    out
}

/// A CPU bitmask (NVML's `cpu_affinity` words, bit k of word w = CPU 64w+k) as a Linux CPU list
/// (`0-31,64-95`). `None` for an empty mask.
pub fn cpu_mask_to_list(words: &[u64]) -> Option<String> {
    let mut ranges: Vec<(u64, u64)> = Vec::new();
    for (w, word) in words.iter().enumerate() {
        for bit in 0..64u64 {
            if word & (1u64 << bit) == 0 {
                continue;
            }
            let cpu = w as u64 * 64 + bit;
            match ranges.last_mut() {
                Some((_, end)) if *end + 1 == cpu => *end = cpu,
                _ => ranges.push((cpu, cpu)),
            }
        }
    }
    if ranges.is_empty() {
        return None;
    }
    let parts: Vec<String> = ranges
        .iter()
        .map(|(a, b)| {
            if a == b {
                a.to_string()
            } else {
                format!("{a}-{b}")
            }
        })
        .collect();
    Some(parts.join(","))
}

/// The only set bit of a mask (NVML's NUMA-node affinity), `None` when zero or several are set.
pub fn single_bit(words: &[u64]) -> Option<u32> {
    let mut found = None;
    for (w, word) in words.iter().enumerate() {
        if *word == 0 {
            continue;
        }
        if found.is_some() || word.count_ones() != 1 {
            return None;
        }
        found = Some(len_u32(w) * 64 + word.trailing_zeros());
    }
    found
}

/// NVML's PCIe common ancestor of two distinct GPUs as a `nvidia-smi topo -m` class.
/// `Internal` (both GPUs on one board, e.g. a K80) is at most one bridge apart, so PIX; the
/// diagonal X is never asked of NVML.
pub fn topology_level_class(level: TopologyLevel) -> LinkClass {
    match level {
        TopologyLevel::Internal | TopologyLevel::Single => LinkClass::Pix,
        TopologyLevel::Multiple => LinkClass::Pxb,
        TopologyLevel::HostBridge => LinkClass::Phb,
        TopologyLevel::Node => LinkClass::Node,
        TopologyLevel::System => LinkClass::Sys,
    }
}

/// NVML's P2P status of one capability, with its reason.
pub fn p2p_reason(s: NvmlP2p) -> P2pReason {
    match s {
        NvmlP2p::Ok => P2pReason::Ok,
        NvmlP2p::ChipsetNotSupported => P2pReason::ChipsetNotSupported,
        NvmlP2p::GpuNotSupported => P2pReason::GpuNotSupported,
        NvmlP2p::IohTopologyNotSupported => P2pReason::IohTopologyNotSupported,
        NvmlP2p::DisabledByRegkey => P2pReason::DisabledByRegkey,
        NvmlP2p::NotSupported => P2pReason::NotSupported,
        NvmlP2p::Unknown => P2pReason::Unknown,
    }
}

/// Compute mode as `default | exclusive_process | prohibited` (`exclusive_thread` on old GPUs).
pub fn compute_mode_name(m: ComputeMode) -> &'static str {
    match m {
        ComputeMode::Default => "default",
        ComputeMode::ExclusiveThread => "exclusive_thread",
        ComputeMode::Prohibited => "prohibited",
        ComputeMode::ExclusiveProcess => "exclusive_process",
    }
}

/// NVML's CUDA driver version integer (13000) as `13.0`.
pub fn cuda_version_string(v: i32) -> String {
    format!(
        "{}.{}",
        nvml_wrapper::cuda_driver_version_major(v),
        nvml_wrapper::cuda_driver_version_minor(v)
    )
}

/// A PCI address as numbers (domain, bus, device, function), so that NVML's 8-digit-domain form
/// (`00000000:18:00.0`), the legacy and sysfs 4-digit form and any letter case compare equal.
pub type BusKey = (u32, u32, u32, u32);

pub fn parse_bus_id(s: &str) -> Option<BusKey> {
    let s = s.trim();
    let (rest, func) = s.rsplit_once('.')?;
    let mut parts = rest.split(':').collect::<Vec<_>>();
    if parts.len() == 2 {
        parts.insert(0, "0");
    }
    if parts.len() != 3 {
        return None;
    }
    let hex = |p: &str| u32::from_str_radix(p, 16).ok();
    Some((hex(parts[0])?, hex(parts[1])?, hex(parts[2])?, hex(func)?))
}

/// The sysfs device name of a PCI address (`0000:18:00.0`, lower case, 4-digit domain).
pub fn sysfs_pci_name(bus_id: &str) -> Option<String> {
    let (d, b, dev, f) = parse_bus_id(bus_id)?;
    Some(format!("{d:04x}:{b:02x}:{dev:02x}.{f:x}"))
}

/// The one line a node without a usable NVML answers with (invariant 7).
pub fn unavailable_line(e: &NvmlError) -> String {
    let line = match e {
        NvmlError::LibloadingError(le) => load_failure_line(&le.to_string()),
        NvmlError::DriverNotLoaded => {
            "NVML unavailable: the NVIDIA kernel driver is not loaded".to_string()
        }
        NvmlError::NoPermission => {
            "NVML unavailable: no permission to talk to the NVIDIA driver".to_string()
        }
        NvmlError::LibRmVersionMismatch => "NVML unavailable: libnvidia-ml and the loaded kernel driver have different versions (driver updated without reloading the module?)".to_string(),
        NvmlError::FailedToLoadSymbol(s) => {
            format!("NVML unavailable: libnvidia-ml.so.1 lacks {s} (driver too old)")
        }
        other => format!("NVML unavailable: nvmlInit failed: {other}"),
    };
    one_line(&line)
}

/// The line for a failed dlopen of libnvidia-ml.so.1, given the loader's message.
pub fn load_failure_line(loader_msg: &str) -> String {
    if loader_msg.contains("No such file") || loader_msg.contains("cannot open shared object") {
        "NVML unavailable: libnvidia-ml.so.1 not found (no NVIDIA driver on this node)".to_string()
    } else {
        one_line(&format!(
            "NVML unavailable: cannot load libnvidia-ml.so.1: {loader_msg}"
        ))
    }
}

/// Collapses whitespace runs (newlines included) to single spaces.
pub fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use ddpcheck_core::topology::P2pStatus;

    #[test]
    fn throttle_bits_map_to_names_in_bit_order() {
        assert_eq!(throttle_reason_names(0), Vec::<String>::new());
        assert_eq!(
            throttle_reason_names(0x8 | 0x1 | 0x80),
            vec!["gpu_idle", "hw_slowdown", "hw_power_brake_slowdown"]
        );
        assert_eq!(
            throttle_reason_names(0x4 | 0x20 | 0x40 | 0x2),
            vec![
                "applications_clocks_setting",
                "sw_power_cap",
                "sw_thermal_slowdown",
                "hw_thermal_slowdown"
            ]
        );
        // A bit this table does not know stays visible.
        assert_eq!(
            throttle_reason_names(0x1 | 0x1000),
            vec!["gpu_idle", "unknown_0x1000"]
        );
    }

    #[test]
    fn throttle_bits_match_nvml_wrapper_flags() {
        use nvml_wrapper::bitmasks::device::ThrottleReasons as T;
        let pairs = [
            (T::GPU_IDLE, "gpu_idle"),
            (
                T::APPLICATIONS_CLOCKS_SETTING,
                "applications_clocks_setting",
            ),
            (T::SW_POWER_CAP, "sw_power_cap"),
            (T::HW_SLOWDOWN, "hw_slowdown"),
            (T::SYNC_BOOST, "sync_boost"),
            (T::SW_THERMAL_SLOWDOWN, "sw_thermal_slowdown"),
            (T::HW_THERMAL_SLOWDOWN, "hw_thermal_slowdown"),
            (T::HW_POWER_BRAKE_SLOWDOWN, "hw_power_brake_slowdown"),
            (T::DISPLAY_CLOCK_SETTING, "display_clock_setting"),
        ];
        for (flag, name) in pairs {
            assert_eq!(throttle_reason_names(flag.bits()), vec![name]);
        }
    }

    #[test]
    fn cpu_masks_become_lists() {
        assert_eq!(cpu_mask_to_list(&[]), None);
        assert_eq!(cpu_mask_to_list(&[0, 0]), None);
        // CPUs 0-31 and 64-95: two sockets' first halves.
        assert_eq!(
            cpu_mask_to_list(&[0xffff_ffff, 0xffff_ffff]).as_deref(),
            Some("0-31,64-95")
        );
        assert_eq!(cpu_mask_to_list(&[0b1011]).as_deref(), Some("0-1,3"));
        // A range crossing a word boundary stays one range.
        assert_eq!(
            cpu_mask_to_list(&[1u64 << 63, 0b11]).as_deref(),
            Some("63-65")
        );
        assert_eq!(cpu_mask_to_list(&[u64::MAX]).as_deref(), Some("0-63"));
    }

    #[test]
    fn single_bit_finds_one_numa_node() {
        assert_eq!(single_bit(&[0b10]), Some(1));
        assert_eq!(single_bit(&[0, 1 << 3]), Some(67));
        assert_eq!(single_bit(&[0b11]), None);
        assert_eq!(single_bit(&[1, 1]), None);
        assert_eq!(single_bit(&[0]), None);
    }

    #[test]
    fn topology_levels_use_topo_m_vocabulary() {
        let cases = [
            (TopologyLevel::Internal, "PIX"),
            (TopologyLevel::Single, "PIX"),
            (TopologyLevel::Multiple, "PXB"),
            (TopologyLevel::HostBridge, "PHB"),
            (TopologyLevel::Node, "NODE"),
            (TopologyLevel::System, "SYS"),
        ];
        for (level, want) in cases {
            assert_eq!(topology_level_class(level).to_string(), want, "{level:?}");
        }
    }

    #[test]
    fn p2p_and_compute_mode_names() {
        let p2p_status = |s| p2p_reason(s).summary();
        assert_eq!(p2p_status(NvmlP2p::Ok), P2pStatus::Ok);
        assert_eq!(
            p2p_status(NvmlP2p::IohTopologyNotSupported),
            P2pStatus::NotSupported
        );
        assert_eq!(
            p2p_status(NvmlP2p::DisabledByRegkey),
            P2pStatus::NotSupported
        );
        assert_eq!(p2p_status(NvmlP2p::Unknown), P2pStatus::Unknown);
        assert_eq!(
            p2p_reason(NvmlP2p::GpuNotSupported),
            P2pReason::GpuNotSupported
        );
        assert_eq!(
            p2p_reason(NvmlP2p::ChipsetNotSupported),
            P2pReason::ChipsetNotSupported
        );
        assert_eq!(compute_mode_name(ComputeMode::Default), "default");
        assert_eq!(
            compute_mode_name(ComputeMode::ExclusiveProcess),
            "exclusive_process"
        );
        assert_eq!(compute_mode_name(ComputeMode::Prohibited), "prohibited");
    }

    #[test]
    fn cuda_version_from_nvml_integer() {
        assert_eq!(cuda_version_string(13000), "13.0");
        assert_eq!(cuda_version_string(12040), "12.4");
    }

    #[test]
    fn bus_ids_compare_across_formats() {
        let nvml = parse_bus_id("00000000:18:00.0");
        assert_eq!(nvml, Some((0, 0x18, 0, 0)));
        assert_eq!(parse_bus_id("0000:18:00.0"), nvml);
        assert_eq!(parse_bus_id("18:00.0"), nvml);
        assert_eq!(parse_bus_id("00000001:9A:1f.7"), Some((1, 0x9a, 0x1f, 7)));
        assert_eq!(parse_bus_id("garbage"), None);
        assert_eq!(parse_bus_id("0000:zz:00.0"), None);
        assert_eq!(
            sysfs_pci_name("00000000:9A:00.0").as_deref(),
            Some("0000:9a:00.0")
        );
    }

    #[test]
    fn unavailable_lines_are_single_lines() {
        let msg = "libnvidia-ml.so.1: cannot open shared object file: No such file or directory";
        assert_eq!(
            load_failure_line(msg),
            "NVML unavailable: libnvidia-ml.so.1 not found (no NVIDIA driver on this node)"
        );
        let odd = load_failure_line("bad ELF\nheader");
        assert!(
            !odd.contains('\n') && odd.contains("bad ELF header"),
            "{odd}"
        );
        for e in [
            NvmlError::DriverNotLoaded,
            NvmlError::NoPermission,
            NvmlError::LibRmVersionMismatch,
            NvmlError::FailedToLoadSymbol("nvmlInit_v2".into()),
            NvmlError::Unknown,
        ] {
            let line = unavailable_line(&e);
            assert!(line.starts_with("NVML unavailable: "), "{line}");
            assert!(!line.contains('\n'), "{line}");
        }
        assert!(unavailable_line(&NvmlError::DriverNotLoaded).contains("driver is not loaded"));
    }
}
