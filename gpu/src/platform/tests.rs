//! The readers on the fixture trees of `testdata/` (see `make_fixtures.py` there).
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use ddpcheck_core::explain::platform::{bridges_between, AcsState, IommuMode};

use super::*;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/platform/testdata")
        .join(name)
}

fn ids(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[test]
fn bare_metal_box_with_a_switch_and_acs_on() {
    let root = fixture("baremetal-switch");
    let f = read(
        &root,
        &ids(&["00000000:03:00.0", "00000000:04:00.0", "00000000:81:00.0"]),
    );
    assert_eq!(f.hypervisor, Some(false));
    assert_eq!(f.hypervisor_vendor.as_deref(), Some("Supermicro"));
    assert_eq!(f.iommu.mode, IommuMode::Translated);
    assert_eq!((f.iommu.groups, f.iommu.units), (6, 1));
    assert_eq!(f.iommu.cmdline, vec!["intel_iommu=on"]);
    assert_eq!(f.fabric.nvswitches, 0);
    let g0 = &f.gpus[0];
    assert_eq!(g0.on_root_bus, Some(false));
    assert_eq!(g0.host_bridge.as_deref(), Some("pci0000:00"));
    assert_eq!(g0.numa_node, Some(0));
    assert_eq!(g0.iommu_group_type.as_deref(), Some("DMA-FQ"));
    let path: Vec<&str> = g0
        .bridges
        .as_ref()
        .unwrap()
        .iter()
        .map(|b| b.bdf.as_str())
        .collect();
    assert_eq!(path, vec!["0000:00:01.0", "0000:01:00.0", "0000:02:08.0"]);
    let bridges = g0.bridges.as_ref().unwrap();
    assert!(
        bridges[0].acs.redirects_p2p(),
        "root port: {:?}",
        bridges[0].acs
    );
    assert_eq!(
        bridges[1].acs,
        AcsState::NotPresent,
        "the upstream port has no ACS"
    );
    assert_eq!(
        bridges[2].acs.set_bits(),
        vec!["SrcValid", "ReqRedir", "CmpltRedir", "UpstreamFwd"]
    );
    // Between GPU0 and GPU1: the switch's upstream port and both downstream ports.
    let between: Vec<&str> = bridges_between(&f.gpus[0], &f.gpus[1])
        .unwrap()
        .iter()
        .map(|b| b.bdf.as_str())
        .collect();
    assert_eq!(
        between,
        vec!["0000:01:00.0", "0000:02:08.0", "0000:02:10.0"]
    );
    let g2 = &f.gpus[2];
    assert_eq!(g2.numa_node, Some(1));
    assert_eq!(g2.host_bridge.as_deref(), Some("pci0000:80"));
    assert_eq!(
        (g2.link.current_width, g2.link.max_width),
        (Some(8), Some(16))
    );
    assert_eq!(g2.link.current_gts, Some(16.0));
    assert!(!g2.bridges.as_ref().unwrap()[0].acs.redirects_p2p());
}

/// The link-only reader (polled under load) reads what the full reader reads, by NVML bus id.
#[test]
fn links_alone_match_the_full_read() {
    let root = fixture("baremetal-switch");
    let wanted = ids(&["00000000:03:00.0", "00000000:81:00.0"]);
    let full = read(&root, &wanted);
    let links = links(&root, &wanted);
    assert_eq!(links.len(), 2);
    for (l, g) in links.iter().zip(&full.gpus) {
        assert_eq!(l.pci_bus_id, g.pci_bus_id);
        assert_eq!(l.link, g.link);
    }
    assert_eq!(links[1].link.current_width, Some(8));
    // A GPU not in the tree reads as nothing, not an error.
    let gone = super::links(&root, &ids(&["00000000:99:00.0"]));
    assert_eq!(gone[0].link, SysfsLink::default());
}

/// The lent H200 guest's own tree (`testdata/vm-h200/PROVENANCE.md`).
#[test]
fn the_lent_h200_guest() {
    let root = fixture("vm-h200");
    let f = read(&root, &ids(&["00000000:00:06.0"]));
    assert_eq!(f.hypervisor, Some(true));
    // The guest sees no IOMMU at all: no groups, no units, no IOMMU word on its command line.
    assert_eq!(f.iommu.mode, IommuMode::Off);
    assert_eq!((f.iommu.groups, f.iommu.units), (0, 0));
    assert!(f.iommu.cmdline.is_empty(), "{:?}", f.iommu.cmdline);
    assert_eq!(f.fabric.nvswitches, 0);
    let g = &f.gpus[0];
    assert_eq!(g.on_root_bus, Some(true));
    assert_eq!(g.bridges.as_deref(), Some(&[][..]));
    assert_eq!(g.host_bridge.as_deref(), Some("pci0000:00"));
    assert_eq!(g.numa_node, Some(-1));
    assert_eq!(
        (g.link.current_gts, g.link.max_gts),
        (Some(32.0), Some(32.0))
    );
    assert_eq!(
        (g.link.current_width, g.link.max_width),
        (Some(16), Some(16))
    );
    assert_eq!(g.iommu_group_type, None);
}

/// Config space as root reads it in that guest: 4096 bytes with an empty extended space on
/// the host bridge, 256 bytes (conventional PCI, no extended space) on the virtio devices.
#[test]
fn the_guest_config_space_is_read_for_what_it_holds() {
    let devs = fixture("vm-h200").join("sys/bus/pci/devices");
    let cfg = |bdf: &str| std::fs::read(devs.join(bdf).join("config")).unwrap();
    assert_eq!(cfg("0000:00:00.0").len(), 4096);
    assert_eq!(
        config::acs_from_config(&cfg("0000:00:00.0")),
        AcsState::NotPresent
    );
    assert_eq!(cfg("0000:00:01.0").len(), 256);
    match config::acs_from_config(&cfg("0000:00:01.0")) {
        AcsState::Unknown { why } => assert!(why.contains("no PCIe extended space"), "{why}"),
        other => panic!("a 256-byte space read as {other:?}"),
    }
}

#[test]
fn a_gpu_not_in_the_tree_is_unread_not_healthy() {
    let f = read(&fixture("vm-h200"), &ids(&["00000000:9A:00.0"]));
    let g = &f.gpus[0];
    assert_eq!(
        (g.on_root_bus, g.bridges.clone(), g.numa_node),
        (None, None, None)
    );
}

/// A copy of the bare-metal tree whose config files read as a non-root reader gets them.
#[test]
fn without_root_acs_is_unknown_never_off() {
    let tmp = tempfile::tempdir().unwrap();
    let src = fixture("baremetal-switch");
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(&src)
        .arg(tmp.path())
        .status()
        .unwrap();
    assert!(status.success());
    let root = tmp.path().join("baremetal-switch");
    let devs = root.join("sys/bus/pci/devices");
    for e in std::fs::read_dir(&devs).unwrap() {
        let cfg = e.unwrap().path().join("config");
        let head = std::fs::read(&cfg).unwrap()[..64].to_vec();
        std::fs::write(&cfg, head).unwrap();
    }
    let f = read(&root, &ids(&["00000000:03:00.0"]));
    for b in f.gpus[0].bridges.as_ref().unwrap() {
        assert_eq!(b.acs, AcsState::NeedsRoot, "{}", b.bdf);
    }
}

#[test]
fn fabric_manager_is_looked_for_where_nvswitches_are() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    std::fs::create_dir_all(root.join("dev")).unwrap();
    for n in [
        "nvidia-nvswitch0",
        "nvidia-nvswitch1",
        "nvidia-nvswitchctl",
        "nvidia0",
    ] {
        std::fs::write(root.join("dev").join(n), "").unwrap();
    }
    std::fs::create_dir_all(root.join("proc/42")).unwrap();
    std::fs::write(root.join("proc/42/comm"), "python3\n").unwrap();
    let f = host::fabric(root);
    assert_eq!((f.nvswitches, f.manager_running), (2, Some(false)));
    std::fs::create_dir_all(root.join("proc/77")).unwrap();
    std::fs::write(root.join("proc/77/comm"), "nv-fabricmanager\n").unwrap();
    assert_eq!(host::fabric(root).manager_running, Some(true));
}
