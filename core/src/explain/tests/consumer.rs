//! Consumer cards: NVML's reason for no P2P turned into a cause with its action, and a hang or
//! wrong values over P2P on PCIe named with NCCL_P2P_DISABLE=1 to try.

use super::*;
use crate::topology::{P2pCaps, P2pReason};

/// Two cards of `name` through the host bridge on PCIe gen4 x16, NVML giving `caps` between them.
fn pair(name: &str, caps: P2pCaps) -> Node {
    let mut n = Node::on_pcie(2, name, LinkClass::Phb, 4);
    let read = caps.read.summary();
    n.topo.p2p = vec![vec![P2pStatus::Ok, read], vec![read, P2pStatus::Ok]];
    let own = P2pCaps::all(P2pReason::Ok);
    n.topo.p2p_status = vec![vec![own, caps], vec![caps, own]];
    n
}

fn refused(r: P2pReason) -> P2pCaps {
    P2pCaps {
        read: r,
        write: r,
        atomics: r,
        nvlink: P2pReason::NotSupported,
    }
}

#[test]
fn geforce_policy_is_a_platform_limit_staged_through_host_memory() {
    let e = pair(
        "NVIDIA GeForce RTX 4090",
        refused(P2pReason::GpuNotSupported),
    )
    .measure(7.8, Some("SHM/direct"))
    .explain();
    let c = find(&e, CauseKind::P2pNotSupported);
    assert_eq!(c.action, Action::PlatformLimit);
    assert_eq!(c.severity, Severity::Info);
    for words in [
        "NVML reports P2P read GPU_NOT_SUPPORTED",
        "product policy",
        "stages every byte through host memory",
        "25% of PCIe gen4 x16",
        "nothing supported on this node changes it",
        "NVLink bridge (RTX 3090), would do better",
    ] {
        assert!(c.message.contains(words), "{words}: {}", c.message);
    }
    assert!(c.source.contains("233202"), "{}", c.source);
    assert!(!kinds(&e).contains(&CauseKind::ShmStaging));
    // Nothing to force: no A/B alternative.
    assert!(e.pairs[0].alternative.is_empty());
}

#[test]
fn each_nvml_reason_gets_its_own_cause_and_action() {
    let cause = |r| {
        let e = pair("NVIDIA RTX A6000", refused(r))
            .measure(7.8, Some("SHM/direct"))
            .explain();
        find(&e, CauseKind::P2pNotSupported).clone()
    };
    let key = cause(P2pReason::DisabledByRegkey);
    assert_eq!(key.action, Action::DriverSetting);
    assert_eq!(key.severity, Severity::Warning);
    assert!(key.message.contains("registry key"), "{}", key.message);
    let chipset = cause(P2pReason::ChipsetNotSupported);
    assert_eq!(chipset.action, Action::PlatformLimit);
    assert!(chipset.message.contains("chipset"), "{}", chipset.message);
    assert!(
        chipset.message.contains("share a PCIe switch"),
        "{}",
        chipset.message
    );
    let topo = cause(P2pReason::IohTopologyNotSupported);
    assert!(
        topo.message.contains("host bridge topology"),
        "{}",
        topo.message
    );
    // In a VM the VM's own limit speaks (ask the provider), not the NVML reason.
    let mut vm = pair(
        "NVIDIA GeForce RTX 4090",
        refused(P2pReason::GpuNotSupported),
    )
    .measure(7.8, Some("SHM/direct"));
    vm.platform.hypervisor = Some(true);
    let e = vm.explain();
    assert!(kinds(&e).contains(&CauseKind::VmNoP2p), "{:?}", kinds(&e));
    assert!(!kinds(&e).contains(&CauseKind::P2pNotSupported));
}

fn failed(mut n: Node, timed_out: bool, wrong: Option<u64>) -> Node {
    n.measured.push(PairMeasurement {
        a: 0,
        b: 1,
        busbw_gbps: wrong.map(|_| 7.0),
        error: timed_out.then(|| "collective sweep did not finish within 60.0 s".into()),
        wrong,
        timed_out,
        ..PairMeasurement::default()
    });
    n
}

#[test]
fn a_hang_over_forced_p2p_names_it_and_tries_p2p_disable() {
    let n = pair(
        "NVIDIA GeForce RTX 4090",
        refused(P2pReason::GpuNotSupported),
    )
    .env("NCCL_P2P_LEVEL", "SYS");
    let e = failed(n, true, None).explain();
    let c = find(&e, CauseKind::P2pBroken);
    assert_eq!(c.severity, Severity::Critical);
    assert!(c.message.contains("did not finish"), "{}", c.message);
    assert!(
        c.message.contains("NCCL_P2P_LEVEL=SYS forces P2P"),
        "{}",
        c.message
    );
    assert!(
        c.message.contains("try NCCL_P2P_DISABLE=1"),
        "{}",
        c.message
    );
    let chain = &e.pairs[0];
    assert_eq!(chain.env_fix, vec![("NCCL_P2P_DISABLE".into(), "1".into())]);
    // The A/B runs although the pair's own run has no figure.
    assert!(ab_wanted(chain));
    let mut e = e.clone();
    attach_ab(
        &mut e,
        0,
        1,
        AbFigure {
            overrides: chain.env_fix.clone(),
            before_gbps: 0.0,
            before_error: chain.measure_error.clone(),
            after_gbps: Some(7.8),
            after_transport: Some("SHM/direct".into()),
            error: None,
        },
    );
    let c = find(&e, CauseKind::P2pBroken);
    assert!(
        c.message.contains(
            "with NCCL_P2P_DISABLE=1 the pair's all-reduce ran: 7.80 GB/s over SHM/direct"
        ),
        "{}",
        c.message
    );
}

#[test]
fn wrong_values_over_patched_p2p_name_the_patched_driver() {
    let n =
        pair("NVIDIA GeForce RTX 5090", P2pCaps::all(P2pReason::Ok)).env("NCCL_P2P_LEVEL", "SYS");
    let e = failed(n, false, Some(4)).explain();
    let c = find(&e, CauseKind::P2pBroken);
    assert!(
        c.message.contains("returned 4 wrong elements"),
        "{}",
        c.message
    );
    assert!(c.message.contains("a patched driver"), "{}", c.message);
    // The same failure on a data-centre card over NCCL's own P2P is no P2P suspicion.
    let mut dc = pair("NVIDIA H100 PCIe", P2pCaps::all(P2pReason::Ok));
    dc.topo.links = vec![
        vec![LinkClass::X, LinkClass::Pxb],
        vec![LinkClass::Pxb, LinkClass::X],
    ];
    let e = failed(dc, false, Some(4)).explain();
    assert!(
        !kinds(&e).contains(&CauseKind::P2pBroken),
        "{:?}",
        kinds(&e)
    );
}
