//! Capacity and platform limits: each mechanism's arithmetic, its action, and the A/B's word.

use super::*;

const GEN3_X16: f64 = 8.0 * 128.0 / 130.0 * 16.0 / 8.0;

/// A node of `n` GPUs on PCIe gen3 x16 (the field reports' machines).
fn gen3(n: u32, name: &str, link: LinkClass) -> Node {
    Node::on_pcie(n, name, link, 3)
}

fn ab(before: f64, after: f64, overrides: &[(String, String)]) -> AbFigure {
    AbFigure {
        overrides: overrides.to_vec(),
        before_gbps: before,
        before_error: None,
        after_gbps: Some(after),
        after_transport: None,
        error: None,
    }
}

#[test]
fn a_phb_pair_on_shm_is_a_platform_limit_against_its_pcie_link() {
    let e = gen3(2, "NVIDIA RTX A6000", LinkClass::Phb)
        .measure(3.9, Some("SHM/direct"))
        .explain();
    let chain = &e.pairs[0];
    let cap = chain.capacity.as_ref().unwrap();
    assert_eq!(cap.path, "PCIe gen3 x16");
    assert!((cap.gbps - GEN3_X16).abs() < 1e-9, "{}", cap.gbps);
    assert!((cap.fraction.unwrap() - 3.9 / GEN3_X16).abs() < 1e-9);
    // The class reference is 4.0 GB/s for PHB gen3: healthy machines reach 25% too.
    assert!((cap.reference_fraction.unwrap() - 4.0 / GEN3_X16).abs() < 1e-9);
    let c = find(&e, CauseKind::ShmStaging);
    assert_eq!(
        (c.severity, c.action),
        (Severity::Info, Action::PlatformLimit)
    );
    assert!(
        c.message.contains("3.90 GB/s is 25% of PCIe gen3 x16"),
        "{}",
        c.message
    );
    assert!(c.message.contains("crosses PCIe twice"), "{}", c.message);
    assert!(
        c.message
            .contains("host memory 15.6 GB/s = 2 × 2 GPUs × 3.90"),
        "{}",
        c.message
    );
    assert_eq!(
        chain.alternative,
        vec![("NCCL_P2P_LEVEL".to_string(), "SYS".to_string())]
    );
    // A platform limit is no fault: the verdict stays OK and the chain has nothing to fix.
    assert_eq!(e.verdict(), Verdict::Ok);
    assert!(chain.fix.is_empty(), "{}", chain.fix);
    assert!(chain
        .because
        .contains(&"SHM staging through host memory".to_string()));
    let s = e.platform_limit_summary().unwrap();
    assert!(s.contains("3.90 GB/s is 25% of PCIe gen3 x16"), "{s}");
}

#[test]
fn the_ab_says_whether_the_other_transport_recovers_the_gap() {
    let node = gen3(2, "NVIDIA RTX A6000", LinkClass::Phb).measure(3.9, Some("SHM/direct"));
    let mut e = node.explain();
    let alt = e.pairs[0].alternative.clone();
    attach_ab(&mut e, 0, 1, ab(3.9, 2.1, &alt));
    let c = find(&e, CauseKind::ShmStaging);
    assert!(
        c.message
            .contains("forced P2P (NCCL_P2P_LEVEL=SYS) measured ×0.54"),
        "{}",
        c.message
    );
    assert!(
        c.message.contains("NCCL's default is right here"),
        "{}",
        c.message
    );
    // The field report's figure and the "run --ab" advice give way to this machine's own.
    assert!(!c.message.contains("explain --ab"), "{}", c.message);
    assert_eq!(c.action, Action::PlatformLimit);

    let mut e = node.explain();
    attach_ab(&mut e, 0, 1, ab(3.9, 6.0, &alt));
    let c = find(&e, CauseKind::ShmStaging);
    assert!(
        c.message.contains("recovers part of the gap"),
        "{}",
        c.message
    );
    assert_eq!(c.action, Action::SetEnv);
    assert_eq!(c.fix, "set NCCL_P2P_LEVEL=SYS");
    assert_eq!(e.verdict(), Verdict::Ok);
}

#[test]
fn p2p_chosen_across_a_host_bridge_is_a_platform_limit_with_shm_as_the_alternative() {
    let e = gen3(2, "NVIDIA RTX A6000", LinkClass::Phb)
        .measure(2.1, Some("P2P/CUMEM"))
        .explain();
    let c = find(&e, CauseKind::P2pHostBridge);
    assert_eq!(c.action, Action::PlatformLimit);
    assert!(c.message.contains("root complex forwards"), "{}", c.message);
    assert_eq!(
        e.pairs[0].alternative,
        vec![("NCCL_P2P_DISABLE".to_string(), "1".to_string())]
    );
    // Forced by the environment, it is the environment's cause instead.
    let e = gen3(2, "NVIDIA RTX A6000", LinkClass::Phb)
        .env("NCCL_P2P_LEVEL", "SYS")
        .measure(2.1, Some("P2P/CUMEM"))
        .explain();
    assert!(kinds(&e).contains(&CauseKind::P2pForced), "{:?}", kinds(&e));
    assert!(
        !kinds(&e).contains(&CauseKind::P2pHostBridge),
        "{:?}",
        kinds(&e)
    );
}

#[test]
fn a_vm_without_p2p_stages_through_host_memory_and_nothing_in_it_changes_that() {
    let mut n = gen3(2, "Tesla T4", LinkClass::Phb).measure(4.05, Some("SHM/direct"));
    n.platform.hypervisor = Some(true);
    n.topo.p2p = vec![vec![P2pStatus::NotSupported; 2]; 2];
    let e = n.explain();
    let c = find(&e, CauseKind::VmNoP2p);
    assert_eq!(c.action, Action::PlatformLimit);
    assert!(
        c.message.contains("the driver reports none"),
        "{}",
        c.message
    );
    assert!(c.message.contains("bare-metal node"), "{}", c.message);
    assert!(c.message.contains("26% of PCIe gen3 x16"), "{}", c.message);
    // No P2P to force: no A/B alternative.
    assert!(e.pairs[0].alternative.is_empty());
    assert!(!kinds(&e).contains(&CauseKind::ShmStaging));
}

#[test]
fn nvlink_pairs_are_measured_against_their_links_and_are_no_limit() {
    let e = Node::new(2, "NVIDIA H200", LinkClass::Nv(18))
        .measure(327.0, Some("P2P/CUMEM"))
        .explain();
    let cap = e.pairs[0].capacity.as_ref().unwrap();
    assert_eq!(cap.path, "NV18: 18 × NVLink 4");
    assert!((cap.gbps - 450.0).abs() < 1e-9);
    assert!((cap.fraction.unwrap() - 327.0 / 450.0).abs() < 1e-9);
    assert_eq!(kinds(&e), vec![]);
}

#[test]
fn a_link_trained_narrower_under_load_lowers_the_capacity() {
    let mut n = Node::new(2, "NVIDIA RTX A6000", LinkClass::Phb);
    n.platform.gpus[1].link_under_load = Some(SysfsLink {
        current_gts: Some(16.0),
        max_gts: Some(32.0),
        current_width: Some(8),
        max_width: Some(16),
    });
    let e = n.explain();
    let cap = e.pairs[0].capacity.as_ref().unwrap();
    assert_eq!(cap.path, "PCIe gen4 x8");
    assert!(
        cap.reading.contains("GPU1 read under load"),
        "{}",
        cap.reading
    );
    assert!((cap.gbps - 16.0 * 128.0 / 130.0).abs() < 1e-9);
}

/// Two NVLink-bridged pairs joined by PHB: every ring crosses PHB twice.
fn bridged_pairs() -> Node {
    let mut n = gen3(4, "NVIDIA RTX A6000", LinkClass::Phb);
    for (i, j) in [(0, 1), (2, 3)] {
        n.topo.links[i][j] = LinkClass::Nv(4);
        n.topo.links[j][i] = LinkClass::Nv(4);
    }
    n
}

#[test]
fn the_rings_slowest_hop_bounds_the_node_below_its_fastest_pairs() {
    let n = bridged_pairs();
    let node_m = NodeMeasurement {
        busbw_gbps: Some(4.3),
        bytes: Some(256 << 20),
        transport: Some("P2P/CUMEM, SHM/direct".into()),
        error: None,
    };
    let e = explain(&ExplainInput {
        gpus: &n.gpus,
        topology: Some(&n.topo),
        platform: &n.platform,
        nccl_env: &n.env,
        measurements: &n.measured,
        node_measurement: Some(&node_m),
        history_busbw: &n.history,
    });
    let node = e.node.as_ref().unwrap();
    let cap = node.capacity.as_ref().unwrap();
    assert_eq!(cap.path, "PCIe gen3 x16");
    assert!((cap.fraction.unwrap() - 4.3 / GEN3_X16).abs() < 1e-9);
    let (a, b) = node.slowest_hop.unwrap();
    assert_ne!((a, b), (0, 1));
    assert_ne!((a, b), (2, 3));
    let c = node
        .causes
        .iter()
        .find(|c| c.kind == CauseKind::RingSlowestHop)
        .unwrap();
    assert_eq!(c.action, Action::PlatformLimit);
    assert!(
        c.message.contains("4.30 GB/s is 27% of it"),
        "{}",
        c.message
    );
    // NV4 on GA102: 4 links × 14.0625 GB/s = 56.25 GB/s each way.
    assert!(
        c.message
            .contains("NV4: 4 × NVLink 3 (GA102 bridge), 56.25 GB/s"),
        "{}",
        c.message
    );
    assert_eq!(e.verdict(), Verdict::Ok);
}

#[test]
fn one_link_class_has_no_slowest_hop_cause() {
    let e = gen3(4, "NVIDIA RTX A6000", LinkClass::Phb).explain();
    let node = e.node.as_ref().unwrap();
    assert!(node
        .causes
        .iter()
        .all(|c| c.kind != CauseKind::RingSlowestHop));
    // Unmeasured, the node still carries its capacity and its class reference.
    assert!(node.capacity.as_ref().unwrap().fraction.is_none());
    assert_eq!(node.expected.as_ref().unwrap().busbw_gbps, 4.0);
    assert!(node.causes.iter().any(|c| c.kind == CauseKind::ShmStaging));
}

#[test]
fn the_best_ring_avoids_a_slow_pair_it_can_go_around() {
    // Four GPUs, only 0–2 slow: the ring 0-1-2-3-0 never uses it.
    let mut hops = vec![vec![50.0; 4]; 4];
    hops[0][2] = 5.0;
    hops[2][0] = 5.0;
    hops[1][3] = 20.0;
    hops[3][1] = 20.0;
    let (i, j) = best_ring_bottleneck(&hops).unwrap();
    assert!((hops[i][j] - 50.0).abs() < 1e-9, "({i}, {j})");
    // With every hop to GPU3 slow, any ring takes two of them.
    let mut hops = vec![vec![50.0; 4]; 4];
    for row in hops.iter_mut().take(3) {
        row[3] = 5.0;
    }
    for v in hops[3].iter_mut().take(3) {
        *v = 5.0;
    }
    let (i, j) = best_ring_bottleneck(&hops).unwrap();
    assert_eq!(j, 3, "({i}, {j})");
    assert_eq!(best_ring_bottleneck(&[vec![0.0]]), None);
}
