//! Each parser on the fixtures of real outputs (tests/fixtures/formats, sources in
//! tests/fixtures/SOURCES.md): the figures each one shows, read back.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use ddpcheck_artifacts::{sniff, Format, Reading};
use ddpcheck_core::collective::Collective;
use ddpcheck_core::topology::{LinkClass, P2pReason};

fn fixture(path: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/formats")
        .join(path);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The file's single reading, as sniffed: every fixture is recognised by content alone.
fn read(path: &str, want: Format) -> Reading {
    let text = fixture(path);
    let found = sniff::sniff(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    assert_eq!(found, vec![want], "{path}");
    let mut r = sniff::read(&text, Some(want)).unwrap_or_else(|e| panic!("{path}: {e}"));
    r.remove(0)
}

#[test]
fn topo_matrices_of_four_driver_generations() {
    let Reading::TopoMatrix(m) = read("topo_matrix/h200-vm-1gpu.txt", Format::TopoMatrix) else {
        panic!()
    };
    assert_eq!(
        (
            m.gpus.clone(),
            m.cpu_affinity[0].as_deref(),
            m.numa_affinity[0]
        ),
        (vec![0], Some("0-15"), Some(0))
    );
    let Reading::TopoMatrix(m) = read("topo_matrix/h100x4-nv6-nics.txt", Format::TopoMatrix) else {
        panic!()
    };
    assert_eq!(m.links[1][3], LinkClass::Nv(6));
    assert_eq!(m.nics.len(), 4);
    assert_eq!(m.nics[2].device.as_deref(), Some("mlx5_2"));
    assert_eq!(m.numa_affinity, vec![Some(3), Some(1), Some(7), Some(5)]);
    let Reading::TopoMatrix(m) = read("topo_matrix/rtx5090x2-phb.txt", Format::TopoMatrix) else {
        panic!()
    };
    assert_eq!(m.links[0][1], LinkClass::Phb);
    let Reading::TopoMatrix(m) = read("topo_matrix/gpu8-mlx4-driver2017.txt", Format::TopoMatrix)
    else {
        panic!()
    };
    assert_eq!(
        (m.links[0][1], m.links[0][4], m.links[6][7]),
        (LinkClass::Pix, LinkClass::Sys, LinkClass::Pix)
    );
    assert_eq!(m.nics[0].name, "mlx4_0");
    assert_eq!(
        m.numa_affinity[0], None,
        "a matrix without the NUMA column says nothing of NUMA"
    );
}

#[test]
fn topo_p2p_of_a_geforce_pair() {
    let Reading::TopoP2p(p) = read("topo_p2p/rtx5090x2-gns.txt", Format::TopoP2p) else {
        panic!()
    };
    assert_eq!(p.status[0][1], P2pReason::GpuNotSupported);
    assert_eq!(
        p.capability, None,
        "the output does not name its capability"
    );
}

#[test]
fn smi_query_of_driver_550_and_470() {
    let Reading::SmiQuery(q) = read("smi_query/h100pcie-x2-driver550.txt", Format::SmiQuery) else {
        panic!()
    };
    assert_eq!(
        (q.driver_version.as_deref(), q.cuda_version.as_deref()),
        (Some("550.127.05"), Some("12.4"))
    );
    let g = &q.gpus[1];
    assert_eq!(g.bus_id, "00000000:65:00.0");
    assert_eq!(
        (
            g.pcie_gen_current,
            g.pcie_gen_max,
            g.pcie_width_current,
            g.pcie_width_max
        ),
        (Some(4), Some(5), Some(8), Some(16))
    );
    assert_eq!(
        g.clock_event_reasons,
        vec!["hw_slowdown", "hw_power_brake_slowdown"]
    );
    assert_eq!(
        (g.mig_current, g.ecc_enabled, g.ecc_uncorrected_volatile),
        (Some(false), Some(true), Some(0))
    );
    assert_eq!(
        (g.virtualization_mode.as_deref(), g.memory_total_mib),
        (Some("None"), Some(81559))
    );
    let Reading::SmiQuery(q) = read(
        "smi_query/v100-driver470-throttled-ecc.txt",
        Format::SmiQuery,
    ) else {
        panic!()
    };
    let g = &q.gpus[0];
    assert_eq!(g.clock_event_reasons, vec!["sw_thermal_slowdown"]);
    assert_eq!(
        (g.ecc_uncorrected_volatile, g.ecc_corrected_volatile),
        (Some(2), Some(3))
    );
    assert_eq!(
        (g.retired_pages_pending, g.power_w),
        (Some(false), Some(249.75))
    );
}

#[test]
fn nvlink_status_links_listed_inactive_and_none() {
    let Reading::NvlinkStatus(s) =
        read("nvlink_status/v100-two-inactive.txt", Format::NvlinkStatus)
    else {
        panic!()
    };
    assert_eq!(
        (s.gpus[0].index, s.gpus[0].present(), s.gpus[0].active()),
        (3, 6, 4)
    );
    let Reading::NvlinkStatus(s) = read(
        "nvlink_status/a6000-bridge-and-none.txt",
        Format::NvlinkStatus,
    ) else {
        panic!()
    };
    assert_eq!(
        (
            s.gpus[0].active(),
            s.gpus[2].present(),
            s.gpus[2].none_active
        ),
        (4, 0, true)
    );
    let Reading::NvlinkStatus(s) = read("nvlink_status/gb200-18-links.txt", Format::NvlinkStatus)
    else {
        panic!()
    };
    assert_eq!(
        (s.gpus[1].present(), s.gpus[1].links[17].1),
        (18, Some(53.125))
    );
    let Reading::NvlinkStatus(s) = read(
        "nvlink_status/h100pcie-12-links-one-inactive.txt",
        Format::NvlinkStatus,
    ) else {
        panic!()
    };
    assert_eq!((s.gpus[0].present(), s.gpus[0].active()), (12, 11));
}

#[test]
fn nccl_tests_of_five_layouts() {
    let Reading::NcclTests(t) = read("nccl_tests/h100x8-2.13.txt", Format::NcclTests) else {
        panic!()
    };
    assert_eq!(
        (t.version.as_deref(), t.nccl_version.as_deref(), t.op),
        (Some("2.13.9"), Some("2.21.5"), Some(Collective::AllReduce))
    );
    assert_eq!(
        (
            t.devices.len(),
            t.devices[3].bus.as_str(),
            t.sweep.samples.len()
        ),
        (8, "0x5d", 6)
    );
    assert_eq!(t.sweep.samples[5].out_of_place.busbw_gbps, 432.01);
    assert_eq!(
        (t.sweep.wrong_total(), t.avg_busbw_gbps),
        (Some(0), 368.919)
    );
    let Reading::NcclTests(t) = read("nccl_tests/h100x16-two-nodes-mpirun.txt", Format::NcclTests)
    else {
        panic!()
    };
    assert_eq!(
        (t.devices.len(), t.hosts(), t.op),
        (16, vec!["worker-0", "worker-1"], None)
    );
    let Reading::NcclTests(t) = read(
        "nccl_tests/rtx4090-all-gather-2.13.6.txt",
        Format::NcclTests,
    ) else {
        panic!()
    };
    assert_eq!(t.op, Some(Collective::AllGather));
    let Reading::NcclTests(t) = read("nccl_tests/old-layout-error-column.txt", Format::NcclTests)
    else {
        panic!()
    };
    assert_eq!(
        (t.op, t.sweep.samples.len(), t.sweep.wrong_total()),
        (Some(Collective::AllReduce), 5, None)
    );
    assert_eq!(t.sweep.samples[3].in_place.unwrap().busbw_gbps, 21.50);
    let Reading::NcclTests(t) = read("nccl_tests/a100x8-domain-bus.txt", Format::NcclTests) else {
        panic!()
    };
    assert_eq!(
        (t.devices[2].bus.as_str(), t.avg_busbw_gbps),
        ("0000:48:00", 208.617)
    );
}

#[test]
fn nccl_logs_of_four_versions() {
    let Reading::NcclLog(l) = read("nccl_log/h100x8-p2p-cumem-2.22.txt", Format::NcclLog) else {
        panic!()
    };
    assert_eq!(l.nccl_version.as_deref(), Some("2.22.3"));
    assert_eq!(
        l.env.get("NCCL_SOCKET_IFNAME").map(String::as_str),
        Some("eth0")
    );
    assert_eq!(
        (
            l.transport_between(0, 1).as_deref(),
            l.rank_bus.get(&3).map(String::as_str)
        ),
        (Some("P2P/CUMEM"), Some("5d000"))
    );
    assert!(
        l.network.iter().any(|n| n.contains("NET/Plugin")),
        "{:?}",
        l.network
    );
    assert_eq!((l.rings.len(), l.trees.len()), (2, 1));
    let Reading::NcclLog(l) = read("nccl_log/cumem-read-timestamped.txt", Format::NcclLog) else {
        panic!()
    };
    assert_eq!(l.transports().as_deref(), Some("P2P/CUMEM"));
    let Reading::NcclLog(l) = read("nccl_log/h20-net-ib-gdrdma.txt", Format::NcclLog) else {
        panic!()
    };
    assert_eq!(l.transports().as_deref(), Some("NET/IB, P2P/CUMEM"));
    let Reading::NcclLog(l) = read("nccl_log/nccl-2.7-ring-ipc-shm.txt", Format::NcclLog) else {
        panic!()
    };
    assert_eq!(l.env.get("NCCL_P2P_LEVEL").map(String::as_str), Some("SYS"));
    assert_eq!(
        (l.transport_between(0, 1).as_deref(), l.warnings.len()),
        (Some("P2P/IPC, SHM"), 1)
    );
}

#[test]
fn lspci_bridges_acs_and_a_flat_vm_tree() {
    let Reading::Lspci(l) = read("lspci/plx-switch-acs-on.txt", Format::Lspci) else {
        panic!()
    };
    let g = l.nvidia_gpus().nth(1).unwrap();
    let up: Vec<&str> = l
        .bridges_above(g)
        .unwrap()
        .iter()
        .map(|b| b.bdf.as_str())
        .collect();
    assert_eq!(up, vec!["0000:00:02.0", "0000:02:00.0", "0000:03:10.0"]);
    assert!(l.bridges_above(g).unwrap()[2]
        .acs
        .as_ref()
        .unwrap()
        .redirects_p2p());
    assert_eq!(g.lnk_sta.map(|s| (s.gts, s.width)), Some((2.5, 16)));
    let Reading::Lspci(l) = read("lspci/vm-gpu-on-root-bus.txt", Format::Lspci) else {
        panic!()
    };
    let g = l.nvidia_gpus().next().unwrap();
    assert_eq!((l.bridges_above(g).unwrap().len(), g.numa_node), (0, None));
}
