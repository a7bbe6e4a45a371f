//! One test per cause, on nodes built here: each asserts the cause, its action and its words.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use super::platform::{
    AcsState, Bridge, FabricFacts, GpuPlatform, IommuFacts, IommuMode, SysfsLink,
};
use super::*;
use crate::node_gpus::{GpuHealth, PcieLink, ProbeState};
use crate::topology::P2pStatus;

fn gpu(i: u32, name: &str) -> GpuInfo {
    GpuInfo {
        index: i,
        uuid: format!("GPU-{i:08x}-0000-4000-8000-000000000000"),
        pci_bus_id: format!("00000000:{:02X}:00.0", 0x18 + i),
        name: name.into(),
        memory_total_bytes: 1,
        pcie: Some(PcieLink {
            gen_current: 5,
            gen_max: 5,
            width_current: 16,
            width_max: 16,
        }),
        health: GpuHealth {
            nvlinks_active: Some(18),
            mig_enabled: Some(false),
            ..GpuHealth::default()
        },
        processes: vec![],
        state: ProbeState::Ok,
    }
}

fn topo(gpus: &[GpuInfo], link: LinkClass) -> TopologyMatrix {
    let n = gpus.len();
    let links = (0..n)
        .map(|i| {
            (0..n)
                .map(|j| if i == j { LinkClass::X } else { link })
                .collect()
        })
        .collect();
    TopologyMatrix {
        gpus: gpus.iter().map(GpuInfo::gpu_ref).collect(),
        links,
        p2p: vec![vec![P2pStatus::Ok; n]; n],
        p2p_status: vec![],
        cpu_affinity: vec![],
        numa_affinity: vec![],
    }
}

fn bare_metal(gpus: &[GpuInfo]) -> PlatformFacts {
    let mut p = PlatformFacts::unknown("test");
    p.hypervisor = Some(false);
    p.iommu = IommuFacts {
        mode: IommuMode::Off,
        groups: 0,
        units: 0,
        cmdline: vec![],
    };
    p.fabric = FabricFacts {
        nvswitches: 0,
        manager_running: None,
        gpu_state: None,
    };
    p.gpus = gpus
        .iter()
        .map(|g| GpuPlatform {
            pci_bus_id: g.pci_bus_id.clone(),
            numa_node: Some(0),
            on_root_bus: Some(false),
            bridges: Some(vec![Bridge {
                bdf: format!("0000:{:02x}:01.0", g.index),
                acs: AcsState::NotPresent,
            }]),
            host_bridge: Some("pci0000:00".into()),
            link: Default::default(),
            link_under_load: None,
            iommu_group_type: None,
        })
        .collect();
    p
}

struct Node {
    gpus: Vec<GpuInfo>,
    topo: TopologyMatrix,
    platform: PlatformFacts,
    env: BTreeMap<String, String>,
    measured: Vec<PairMeasurement>,
    history: Vec<f64>,
}

impl Node {
    fn new(n: u32, name: &str, link: LinkClass) -> Node {
        let gpus: Vec<GpuInfo> = (0..n).map(|i| gpu(i, name)).collect();
        Node {
            topo: topo(&gpus, link),
            platform: bare_metal(&gpus),
            gpus,
            env: BTreeMap::new(),
            measured: vec![],
            history: vec![],
        }
    }
    /// `n` cards of `name` on PCIe gen `gen` x16 and no NVLink, joined by `link`.
    fn on_pcie(n: u32, name: &str, link: LinkClass, gen: u32) -> Node {
        let mut node = Node::new(n, name, link);
        for g in &mut node.gpus {
            g.pcie = Some(PcieLink {
                gen_current: gen,
                gen_max: gen,
                width_current: 16,
                width_max: 16,
            });
            g.health.nvlinks_active = Some(0);
        }
        node
    }
    fn env(mut self, k: &str, v: &str) -> Node {
        self.env.insert(k.into(), v.into());
        self
    }
    fn measure(mut self, busbw: f64, transport: Option<&str>) -> Node {
        self.measured.push(PairMeasurement {
            a: 0,
            b: 1,
            busbw_gbps: Some(busbw),
            bytes: Some(256 << 20),
            transport: transport.map(str::to_string),
            error: None,
            ..PairMeasurement::default()
        });
        self
    }
    fn explain(&self) -> Explanation {
        explain(&ExplainInput {
            gpus: &self.gpus,
            topology: (self.gpus.len() > 1).then_some(&self.topo),
            platform: &self.platform,
            nccl_env: &self.env,
            measurements: &self.measured,
            node_measurement: None,
            history_busbw: &self.history,
        })
    }
}

fn kinds(e: &Explanation) -> Vec<CauseKind> {
    e.all_causes().map(|c| c.kind).collect()
}

/// The causes that are not platform limits.
fn faults(e: &Explanation) -> Vec<CauseKind> {
    kinds(e)
        .into_iter()
        .filter(|k| !k.is_platform_limit())
        .collect()
}

fn find(e: &Explanation, k: CauseKind) -> &Cause {
    e.all_causes()
        .find(|c| c.kind == k)
        .unwrap_or_else(|| panic!("no {k:?} in {:?}", kinds(e)))
}

#[test]
fn healthy_nvlink_pair_has_no_cause() {
    let e = Node::new(2, "NVIDIA H200", LinkClass::Nv(18))
        .measure(327.0, Some("P2P/CUMEM"))
        .explain();
    assert_eq!(kinds(&e), vec![]);
    assert_eq!(e.verdict(), Verdict::Ok);
    let c = &e.pairs[0];
    assert_eq!(
        (c.transport, c.transport_allowed),
        (Transport::P2p, Transport::P2p)
    );
    assert!(c.transport_measured);
    assert!(c.fix.is_empty() && c.because.is_empty());
}

#[test]
fn p2p_and_shm_disabled_give_sockets_and_one_unset() {
    let e = Node::new(2, "NVIDIA H200", LinkClass::Nv(18))
        .env("NCCL_P2P_DISABLE", "1")
        .env("NCCL_SHM_DISABLE", "1")
        .measure(3.9, Some("NET/Socket"))
        .explain();
    let c = &e.pairs[0];
    assert_eq!(c.transport, Transport::NetSocket);
    assert_eq!(
        c.because[0],
        "NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1 are set"
    );
    assert_eq!(c.fix, "unset NCCL_P2P_DISABLE and NCCL_SHM_DISABLE");
    assert_eq!(
        c.env_fix,
        vec![
            ("NCCL_P2P_DISABLE".to_string(), "0".to_string()),
            ("NCCL_SHM_DISABLE".to_string(), "0".to_string())
        ]
    );
    assert_eq!(find(&e, CauseKind::P2pDisabled).action, Action::UnsetEnv);
    assert_eq!(find(&e, CauseKind::ShmDisabled).action, Action::UnsetEnv);
    assert_eq!(
        find(&e, CauseKind::TransportDowngraded).action,
        Action::UnsetEnv
    );
    let below = find(&e, CauseKind::BelowExpected);
    assert_eq!(below.severity, Severity::Critical);
    // Explained by the environment: the action is its fix, not a drain.
    assert_eq!(below.action, Action::UnsetEnv);
    assert!((c.ratio.unwrap() - 3.9 / 300.0).abs() < 1e-9);
    assert_eq!(e.verdict(), Verdict::Critical);
}

#[test]
fn without_a_log_the_transport_is_predicted_from_the_environment() {
    let e = Node::new(2, "NVIDIA H200", LinkClass::Nv(18))
        .env("NCCL_P2P_DISABLE", "1")
        .explain();
    let c = &e.pairs[0];
    assert_eq!(c.transport, Transport::Shm);
    assert!(!c.transport_measured);
    assert_eq!(
        kinds(&e),
        vec![CauseKind::P2pDisabled, CauseKind::TransportDowngraded]
    );
}

#[test]
fn p2p_level_below_the_path_is_set_to_the_link() {
    let e = Node::new(2, "NVIDIA H200", LinkClass::Nv(18))
        .env("NCCL_P2P_LEVEL", "LOC")
        .explain();
    let c = find(&e, CauseKind::P2pLevelTooLow);
    assert_eq!(c.action, Action::SetEnv);
    assert_eq!(c.env_fix, vec![("NCCL_P2P_LEVEL".into(), "NVL".into())]);
    assert_eq!(e.pairs[0].transport, Transport::Shm);
}

#[test]
fn p2p_forced_across_the_host_bridge() {
    let e = Node::new(2, "NVIDIA RTX A6000", LinkClass::Phb)
        .env("NCCL_P2P_LEVEL", "SYS")
        .measure(2.1, Some("P2P/direct"))
        .explain();
    let c = find(&e, CauseKind::P2pForced);
    assert_eq!(c.action, Action::UnsetEnv);
    assert_eq!(c.env_fix, vec![("NCCL_P2P_LEVEL".into(), "PXB".into())]);
    assert!(c.source.contains("Runcrate's field report"), "{}", c.source);
    // P2P is "better" than SHM by rank: no downgrade, the forced level is the cause.
    assert!(!kinds(&e).contains(&CauseKind::TransportDowngraded));
    // The same level on an NVLink pair forces nothing.
    let nv = Node::new(2, "NVIDIA H200", LinkClass::Nv(18))
        .env("NCCL_P2P_LEVEL", "SYS")
        .explain();
    assert_eq!(kinds(&nv), vec![]);
}

#[test]
fn p2p_disabled_where_shm_is_the_default_is_harmless() {
    let e = Node::new(2, "NVIDIA RTX A6000", LinkClass::Phb)
        .env("NCCL_P2P_DISABLE", "1")
        .explain();
    assert_eq!(faults(&e), vec![]);
    // SHM is the platform's transport there; the A/B's alternative lifts the variable too.
    assert_eq!(kinds(&e), vec![CauseKind::ShmStaging]);
    assert_eq!(
        e.pairs[0].alternative,
        vec![
            ("NCCL_P2P_DISABLE".to_string(), "0".to_string()),
            ("NCCL_P2P_LEVEL".to_string(), "SYS".to_string())
        ]
    );
}

fn with_switch_acs(node: &mut Node, acs: AcsState) {
    // Both GPUs below one switch: root port 00:01.0, upstream 01:00.0, downstream 02:0N.0.
    for (i, g) in node.platform.gpus.iter_mut().enumerate() {
        g.bridges = Some(vec![
            Bridge {
                bdf: "0000:00:01.0".into(),
                acs: AcsState::NotPresent,
            },
            Bridge {
                bdf: "0000:01:00.0".into(),
                acs: AcsState::NotPresent,
            },
            Bridge {
                bdf: format!("0000:02:0{i}.0"),
                acs: acs.clone(),
            },
        ]);
    }
}

#[test]
fn acs_on_the_switch_ports_between_two_gpus() {
    let on = AcsState::Read {
        source_validation: true,
        p2p_request_redirect: true,
        p2p_completion_redirect: true,
        upstream_forwarding: true,
    };
    let mut n = Node::new(2, "NVIDIA RTX A6000", LinkClass::Pxb).measure(3.9, Some("P2P/direct"));
    with_switch_acs(&mut n, on.clone());
    let e = n.explain();
    let c = find(&e, CauseKind::Acs);
    assert_eq!(
        (c.severity, c.action),
        (Severity::Warning, Action::DisableAcs)
    );
    assert!(
        c.message
            .contains("0000:02:00.0 (SrcValid ReqRedir CmpltRedir UpstreamFwd)"),
        "{}",
        c.message
    );
    assert!(c.fix.contains("0000:02:01.0"), "{}", c.fix);
    assert!(e.pairs[0]
        .because
        .iter()
        .any(|b| b.starts_with("ACS redirects P2P")));
    // Not read (no root): said so, never "off".
    let mut n = Node::new(2, "NVIDIA RTX A6000", LinkClass::Pxb);
    with_switch_acs(&mut n, AcsState::NeedsRoot);
    let c = n
        .explain()
        .all_causes()
        .find(|c| c.kind == CauseKind::Acs)
        .cloned()
        .unwrap();
    assert_eq!((c.severity, c.action), (Severity::Info, Action::None));
    assert!(c.message.contains("needs root"));
    // An NVLink pair's traffic never crosses the bridges.
    let mut n = Node::new(2, "NVIDIA H200", LinkClass::Nv(18));
    with_switch_acs(&mut n, on);
    assert_eq!(kinds(&n.explain()), vec![]);
}

#[test]
fn iommu_translated_hurts_pcie_pairs_only() {
    let mut n = Node::new(2, "NVIDIA RTX A6000", LinkClass::Pxb);
    n.platform.iommu.mode = IommuMode::Translated;
    n.platform.gpus[0].iommu_group_type = Some("DMA-FQ".into());
    let e = n.explain();
    let c = find(&e, CauseKind::IommuTranslated);
    assert_eq!(
        (c.severity, c.action),
        (Severity::Warning, Action::IommuPassthrough)
    );
    assert!(c.message.contains("DMA-FQ"));
    assert!(e.pairs[0].related.contains(&CauseKind::IommuTranslated));
    let mut one = Node::new(1, "NVIDIA H200", LinkClass::X);
    one.platform.iommu.mode = IommuMode::Translated;
    assert_eq!(
        find(&one.explain(), CauseKind::IommuTranslated).severity,
        Severity::Info
    );
}

#[test]
fn a_vm_like_the_lent_h200() {
    let mut n = Node::new(1, "NVIDIA H200", LinkClass::X);
    n.gpus[0].pci_bus_id = "00000000:00:06.0".into();
    n.gpus[0].health.nvlinks_active = Some(0);
    n.platform.hypervisor = Some(true);
    n.platform.gpus[0] = GpuPlatform {
        pci_bus_id: "0000:00:06.0".into(),
        numa_node: Some(-1),
        on_root_bus: Some(true),
        bridges: Some(vec![]),
        host_bridge: Some("pci0000:00".into()),
        link: Default::default(),
        link_under_load: None,
        iommu_group_type: None,
    };
    let e = n.explain();
    assert_eq!(
        kinds(&e),
        vec![
            CauseKind::VirtualMachine,
            CauseKind::NvlinkDown,
            CauseKind::NumaUnknown
        ]
    );
    let vm = find(&e, CauseKind::VirtualMachine);
    assert_eq!((vm.severity, vm.action), (Severity::Info, Action::None));
    assert!(vm
        .evidence
        .iter()
        .any(|ev| ev.measured.contains("root bus")));
    // As in that guest: no IOMMU groups at all. Said as what is seen, never "translated" or "off".
    let iommu = vm.evidence.iter().find(|ev| ev.what == "IOMMU").unwrap();
    assert!(
        iommu.measured.starts_with("none visible in the guest"),
        "{}",
        iommu.measured
    );
    assert!(!kinds(&e).contains(&CauseKind::IommuTranslated));
    // One GPU: its links to absent peers are down by design.
    assert_eq!(find(&e, CauseKind::NvlinkDown).action, Action::None);
    assert!(find(&e, CauseKind::NumaUnknown).message.contains("VM"));
    assert_eq!(e.verdict(), Verdict::Ok);
    assert!(e.pairs.is_empty());
}

#[test]
fn a_vm_without_p2p_asks_the_provider() {
    let mut n = Node::new(2, "NVIDIA H200", LinkClass::Phb);
    n.platform.hypervisor = Some(true);
    n.topo.p2p[0][1] = P2pStatus::NotSupported;
    n.topo.p2p[1][0] = P2pStatus::NotSupported;
    let c = find(&n.explain(), CauseKind::VirtualMachine).clone();
    assert_eq!(
        (c.severity, c.action),
        (Severity::Warning, Action::AskProvider)
    );
}

#[test]
fn narrow_link_is_a_fault_lower_generation_a_note() {
    let mut n = Node::new(2, "NVIDIA RTX A6000", LinkClass::Phb);
    n.gpus[1].pcie = Some(PcieLink {
        gen_current: 4,
        gen_max: 5,
        width_current: 8,
        width_max: 16,
    });
    n.gpus[0].pcie = Some(PcieLink {
        gen_current: 1,
        gen_max: 5,
        width_current: 16,
        width_max: 16,
    });
    let e = n.explain();
    let down: Vec<&Cause> = e
        .all_causes()
        .filter(|c| c.kind == CauseKind::PcieDowntrained)
        .collect();
    assert_eq!(down.len(), 2);
    assert_eq!(
        (down[0].severity, down[0].action),
        (Severity::Info, Action::None)
    );
    assert_eq!(
        (down[1].severity, down[1].action),
        (Severity::Warning, Action::CheckLink)
    );
    assert!(e.pairs[0]
        .because
        .iter()
        .any(|b| b.contains("GPU1's PCIe link runs at gen4 x8")));
}

/// A sysfs reading: GT/s of a generation, widths as given.
fn sysfs(gen: f64, width: u32) -> SysfsLink {
    SysfsLink {
        current_gts: Some(gen),
        max_gts: Some(32.0),
        current_width: Some(width),
        max_width: Some(16),
    }
}

/// A PCIe pair whose GPU0 reads `rest` at rest and `load` under load.
fn link_node(rest: SysfsLink, load: Option<SysfsLink>) -> Explanation {
    let mut n = Node::new(2, "NVIDIA RTX A6000", LinkClass::Phb);
    n.platform.gpus[0].link = rest;
    n.platform.gpus[0].link_under_load = load;
    n.explain()
}

#[test]
fn a_link_below_its_maximum_under_load_is_downtrained() {
    // gen4 under load on a gen5 link: the generation alone is the fault once loaded.
    let e = link_node(sysfs(2.5, 16), Some(sysfs(16.0, 16)));
    let c = find(&e, CauseKind::PcieDowntrained);
    assert_eq!(
        (c.severity, c.action),
        (Severity::Warning, Action::CheckLink)
    );
    assert!(c.message.contains("gen4 x16 under load"), "{}", c.message);
    let seen: Vec<&str> = c.evidence.iter().map(|v| v.what.as_str()).collect();
    assert_eq!(seen, vec!["PCIe link at rest", "PCIe link under load"]);
    assert!(!kinds(&e).contains(&CauseKind::PcieIdleDownclock));
    assert_eq!(e.verdict(), Verdict::Warning);
}

#[test]
fn a_link_that_idles_low_and_trains_up_under_load_is_only_noted() {
    let e = link_node(sysfs(2.5, 16), Some(sysfs(32.0, 16)));
    let c = find(&e, CauseKind::PcieIdleDownclock);
    assert_eq!((c.severity, c.action), (Severity::Info, Action::None));
    assert!(
        c.message.contains("under load it ran at gen5 x16"),
        "{}",
        c.message
    );
    assert!(!kinds(&e).contains(&CauseKind::PcieDowntrained));
    assert_eq!(e.verdict(), Verdict::Ok);
    assert!(e.pairs[0].fix.is_empty(), "{}", e.pairs[0].fix);
}

#[test]
fn without_a_reading_under_load_the_link_is_judged_at_rest() {
    // Narrower at rest with no load reading: a fault, said to be at rest.
    let e = link_node(sysfs(32.0, 8), None);
    let c = find(&e, CauseKind::PcieDowntrained);
    assert_eq!(
        (c.severity, c.action),
        (Severity::Warning, Action::CheckLink)
    );
    assert!(c.message.contains("x8 at rest"), "{}", c.message);
    // A lower generation alone at rest stays a note.
    let e = link_node(sysfs(2.5, 16), None);
    let c = find(&e, CauseKind::PcieDowntrained);
    assert_eq!((c.severity, c.action), (Severity::Info, Action::None));
    assert!(c.message.contains("at rest"), "{}", c.message);
    // At its maximum at rest and under load: nothing.
    let e = link_node(sysfs(32.0, 16), Some(sysfs(32.0, 16)));
    assert!(faults(&e).is_empty(), "{:?}", kinds(&e));
}

/// A gen5 GPU in a gen4 slot: sysfs' maximum is the GPU's, NVML's the slot's; gen4 under load
/// is then the link's best, not a fault.
#[test]
fn nvmls_maximum_caps_the_gpus_own() {
    let mut n = Node::new(2, "NVIDIA RTX A6000", LinkClass::Phb);
    n.gpus[0].pcie = Some(PcieLink {
        gen_current: 1,
        gen_max: 4,
        width_current: 16,
        width_max: 16,
    });
    n.platform.gpus[0].link = sysfs(2.5, 16);
    n.platform.gpus[0].link_under_load = Some(sysfs(16.0, 16));
    let e = n.explain();
    assert!(
        !kinds(&e).contains(&CauseKind::PcieDowntrained),
        "{:?}",
        kinds(&e)
    );
    let c = find(&e, CauseKind::PcieIdleDownclock);
    assert!(c.message.contains("ran at gen4 x16"), "{}", c.message);
}

#[test]
fn the_faster_reading_is_kept() {
    let slow = sysfs(2.5, 16);
    let fast = sysfs(32.0, 16);
    assert_eq!(slow.clone().faster(fast.clone()), fast);
    assert_eq!(fast.clone().faster(slow), fast);
    assert_eq!(sysfs(32.0, 8).faster(sysfs(32.0, 16)), sysfs(32.0, 16));
}

#[test]
fn cross_numa_pair() {
    let e = Node::new(2, "NVIDIA RTX A6000", LinkClass::Sys).explain();
    let c = find(&e, CauseKind::CrossNuma);
    assert_eq!(c.action, Action::PickGpus);
}

#[test]
fn mig_on_a_multi_gpu_node() {
    let mut n = Node::new(2, "NVIDIA H200", LinkClass::Nv(18));
    n.gpus[0].health.mig_enabled = Some(true);
    let c = find(&n.explain(), CauseKind::Mig).clone();
    assert_eq!(
        (c.severity, c.action),
        (Severity::Warning, Action::DisableMig)
    );
}

#[test]
fn nvlinks_down_on_a_pair() {
    let mut n = Node::new(2, "NVIDIA H200", LinkClass::Nv(12));
    n.gpus[1].health.nvlinks_active = Some(12);
    let e = n.explain();
    let c = find(&e, CauseKind::NvlinkDown);
    assert_eq!(
        (c.severity, c.action),
        (Severity::Warning, Action::ResetGpu)
    );
    assert_eq!(c.evidence[0].expected.as_deref(), Some("18"));
    assert!(e.pairs[0].related.contains(&CauseKind::NvlinkDown));
}

#[test]
fn fabric_manager_down_on_nvswitch() {
    let mut n = Node::new(2, "NVIDIA H200", LinkClass::Nv(18));
    n.platform.fabric = FabricFacts {
        nvswitches: 4,
        manager_running: Some(false),
        gpu_state: None,
    };
    let e = n.explain();
    let c = find(&e, CauseKind::FabricManagerDown);
    assert_eq!(
        (c.severity, c.action),
        (Severity::Critical, Action::StartFabricManager)
    );
    assert_eq!(e.verdict(), Verdict::Critical);
    n.platform.fabric.manager_running = Some(true);
    assert_eq!(kinds(&n.explain()), vec![]);
}

#[test]
fn slow_without_a_known_cause() {
    let e = Node::new(2, "NVIDIA H200", LinkClass::Nv(18))
        .measure(200.0, Some("P2P/CUMEM"))
        .explain();
    let c = find(&e, CauseKind::BelowExpected);
    assert_eq!(
        (c.severity, c.action),
        (Severity::Warning, Action::CheckLink)
    );
    let e = Node::new(2, "NVIDIA H200", LinkClass::Nv(18))
        .measure(30.0, Some("P2P/CUMEM"))
        .explain();
    assert_eq!(find(&e, CauseKind::BelowExpected).action, Action::Drain);
}

#[test]
fn below_the_nodes_own_history() {
    let mut n = Node::new(2, "NVIDIA H200", LinkClass::Nv(18)).measure(240.0, Some("P2P/CUMEM"));
    n.history = vec![320.0, 327.0, 330.0];
    let e = n.explain();
    assert_eq!(e.history_median_gbps, Some(327.0));
    let c = find(&e, CauseKind::BelowHistory);
    assert_eq!(c.action, Action::CheckLink);
    assert!(c.message.contains("73%"), "{}", c.message);
}

#[test]
fn transport_parsing_and_levels() {
    assert_eq!(
        Transport::worst_of("P2P/CUMEM, SHM/direct"),
        Some(Transport::Shm)
    );
    assert_eq!(Transport::worst_of("NET/IB"), Some(Transport::NetIb));
    assert_eq!(Transport::worst_of("nothing"), None);
    let env = |v: &str| BTreeMap::from([("NCCL_P2P_LEVEL".to_string(), v.to_string())]);
    assert_eq!(transport::p2p_level(&env("pxb")), Some(3));
    assert_eq!(transport::p2p_level(&env("7")), Some(5));
    assert_eq!(transport::p2p_level(&env("1")), Some(2));
    assert_eq!(transport::p2p_level(&env("far")), None);
}

#[test]
fn action_and_cause_words_are_unique() {
    let mut a: Vec<&str> = Action::ALL.iter().map(|a| a.as_str()).collect();
    a.sort_unstable();
    a.dedup();
    assert_eq!(a.len(), Action::ALL.len());
    let mut k: Vec<&str> = CauseKind::ALL.iter().map(|k| k.as_str()).collect();
    k.sort_unstable();
    k.dedup();
    assert_eq!(k.len(), CauseKind::ALL.len());
    for kind in CauseKind::ALL {
        let json = serde_json::to_string(&kind).unwrap();
        assert_eq!(json, format!("\"{}\"", kind.as_str()));
    }
}

mod cited;
mod consumer;
mod env_node;
mod limits;
mod network;
mod nvlinks;

/// GPUs whose NVLink fabric registration is not completed (`nvidia-smi -q`'s Fabric State
/// `In Progress`, NVIDIA/NVSentinel#883) are Fabric Manager down even where no process was
/// looked for; `N/A` (no fabric: PCIe, one GPU, a VM) is nothing.
#[test]
fn fabric_registration_not_completed_is_fabric_manager_down() {
    use super::platform::{FabricState, GpuFabricState};
    let mut n = Node::new(8, "NVIDIA H100 80GB HBM3", LinkClass::Nv(18));
    n.platform.fabric.gpu_state = Some(GpuFabricState {
        state: FabricState::InProgress,
        status: None,
        gpus_not_registered: 8,
        health: vec![],
        gpus_unhealthy: 0,
        source: "nvidia-smi -q".into(),
    });
    let e = n.explain();
    let c = find(&e, CauseKind::FabricManagerDown);
    assert_eq!(
        (c.severity, c.action),
        (Severity::Critical, Action::StartFabricManager)
    );
    assert!(c.fix.contains("nvidia-fabricmanager"), "{}", c.fix);
    assert!(
        c.evidence[0].measured.contains("In Progress"),
        "{:?}",
        c.evidence
    );
    let failed = GpuFabricState {
        state: FabricState::Completed,
        status: Some("NVML_ERROR_UNKNOWN".into()),
        gpus_not_registered: 1,
        health: vec![],
        gpus_unhealthy: 0,
        source: "NVML".into(),
    };
    n.platform.fabric.gpu_state = Some(failed);
    assert!(kinds(&n.explain()).contains(&CauseKind::FabricManagerDown));
    n.platform.fabric.gpu_state = Some(GpuFabricState {
        state: FabricState::Completed,
        status: Some("Success".into()),
        gpus_not_registered: 0,
        health: vec![],
        gpus_unhealthy: 0,
        source: "NVML".into(),
    });
    assert_eq!(kinds(&n.explain()), vec![]);
}

/// A registered fabric that reports itself unhealthy (NVML's health mask, live) warns with the
/// issues named; the node's state is the first GPU not registered, else the first unhealthy.
#[test]
fn fabric_health_issues_warn_and_the_worst_gpu_speaks_for_the_node() {
    use super::platform::{FabricState, GpuFabricState};
    let ok = || GpuFabricState::of_gpu(FabricState::Completed, Some("Success".into()), "NVML");
    let mut sick = ok();
    sick.health = vec!["bandwidth degraded".into()];
    let node = GpuFabricState::of_node(vec![ok(), sick.clone(), sick]).unwrap();
    assert_eq!((node.gpus_not_registered, node.gpus_unhealthy), (0, 2));
    let mut n = Node::new(8, "NVIDIA H100 80GB HBM3", LinkClass::Nv(18));
    n.platform.fabric.gpu_state = Some(node);
    let e = n.explain();
    let c = find(&e, CauseKind::FabricManagerDown);
    assert_eq!(
        (c.severity, c.action),
        (Severity::Warning, Action::CheckLink)
    );
    assert_eq!(c.evidence[0].measured, "bandwidth degraded");

    let starting = GpuFabricState::of_gpu(FabricState::NotStarted, None, "NVML");
    let node = GpuFabricState::of_node(vec![ok(), starting]).unwrap();
    assert_eq!(
        (node.state, node.gpus_not_registered),
        (FabricState::NotStarted, 1)
    );
    n.platform.fabric.gpu_state = Some(node);
    assert_eq!(
        find(&n.explain(), CauseKind::FabricManagerDown).severity,
        Severity::Critical
    );
    assert_eq!(GpuFabricState::of_node(vec![]), None);
}
