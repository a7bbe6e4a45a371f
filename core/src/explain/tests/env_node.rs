//! NCCL variables judged on the node where no topology matrix gives a pair to set them against.

use super::*;

fn explain_without_topology(n: &Node) -> Explanation {
    explain(&ExplainInput {
        gpus: &n.gpus,
        topology: None,
        platform: &n.platform,
        nccl_env: &n.env,
        measurements: &n.measured,
        node_measurement: None,
        history_busbw: &n.history,
    })
}

#[test]
fn p2p_level_loc_without_a_topology_is_too_low_on_the_node() {
    for value in ["LOC", "0"] {
        let n =
            Node::new(2, "NVIDIA A100-SXM4-80GB", LinkClass::Nv(12)).env("NCCL_P2P_LEVEL", value);
        let e = explain_without_topology(&n);
        let c = find(&e, CauseKind::P2pLevelTooLow);
        assert_eq!(c.severity, Severity::Warning);
        assert_eq!(c.action, Action::UnsetEnv);
        assert!(c.gpus.is_empty(), "a node cause: {:?}", c.gpus);
        assert!(c.fix.contains("unset NCCL_P2P_LEVEL"), "{}", c.fix);
        assert_eq!(e.verdict(), Verdict::Warning);
    }
}

#[test]
fn p2p_level_loc_is_not_judged_on_one_gpu_or_for_other_levels() {
    let one = Node::new(1, "NVIDIA A100-SXM4-80GB", LinkClass::Nv(12)).env("NCCL_P2P_LEVEL", "LOC");
    assert_eq!(kinds(&explain_without_topology(&one)), vec![]);
    let nvl = Node::new(2, "NVIDIA A100-SXM4-80GB", LinkClass::Nv(12)).env("NCCL_P2P_LEVEL", "NVL");
    assert_eq!(kinds(&explain_without_topology(&nvl)), vec![]);
}

#[test]
fn p2p_level_loc_with_a_topology_is_judged_per_pair_only() {
    let e = Node::new(2, "NVIDIA H200", LinkClass::Nv(18))
        .env("NCCL_P2P_LEVEL", "LOC")
        .explain();
    assert!(e.causes.iter().all(|c| c.kind != CauseKind::P2pLevelTooLow));
    assert!(e.pairs[0]
        .causes
        .iter()
        .any(|c| c.kind == CauseKind::P2pLevelTooLow));
}

const TOPO: &str = "/opt/topo/ndv5-topo.xml";

#[test]
fn a_topology_file_on_a_healthy_node_is_info_only() {
    let e = Node::new(2, "NVIDIA H200", LinkClass::Nv(18))
        .env("NCCL_TOPO_FILE", TOPO)
        .measure(327.0, Some("P2P/CUMEM"))
        .explain();
    let c = find(&e, CauseKind::NcclTopoFile);
    assert_eq!(c.severity, Severity::Info);
    assert!(
        c.evidence.iter().any(|ev| ev.measured == TOPO),
        "{:?}",
        c.evidence
    );
    assert_eq!(e.verdict(), Verdict::Ok);
    let none = Node::new(2, "NVIDIA H200", LinkClass::Nv(18))
        .measure(327.0, Some("P2P/CUMEM"))
        .explain();
    assert_eq!(kinds(&none), vec![]);
}

#[test]
fn a_topology_file_is_the_first_suspect_where_the_figure_is_low() {
    let e = Node::new(2, "NVIDIA H200", LinkClass::Nv(18))
        .env("NCCL_TOPO_FILE", TOPO)
        .measure(15.1, Some("P2P/CUMEM"))
        .explain();
    let c = &e.causes[0];
    assert_eq!(c.kind, CauseKind::NcclTopoFile);
    assert_eq!(c.severity, Severity::Warning);
    assert!(c.message.contains(TOPO), "{}", c.message);
    assert!(c.fix.contains("NCCL_TOPO_FILE"), "{}", c.fix);
}

#[test]
fn a_topology_file_is_the_first_suspect_where_the_transport_is_worse() {
    let e = Node::new(2, "NVIDIA H200", LinkClass::Nv(18))
        .env("NCCL_TOPO_FILE", TOPO)
        .measure(300.0, Some("SHM/direct"))
        .explain();
    assert_eq!(e.causes[0].kind, CauseKind::NcclTopoFile);
    assert_eq!(e.causes[0].severity, Severity::Warning);
}
