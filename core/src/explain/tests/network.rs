//! Inter-node channels over TCP sockets where the log shows RDMA was there or asked for.

use super::*;
use crate::explain::network::net_socket;

fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn sockets_with_an_ib_plugin_loaded_are_a_warning() {
    let via = ["P2P/IPC/read".to_string(), "NET/Socket/0".to_string()];
    let net = [
        "Plugin Path : /opt/hpcx/nccl_rdma_sharp_plugin/lib/libnccl-net.so".to_string(),
        "P2P plugin IBext".to_string(),
    ];
    let c = net_socket(&via, &net, &env(&[])).unwrap();
    assert_eq!(c.kind, CauseKind::NetSocketInsteadOfRdma);
    assert_eq!(c.severity, Severity::Warning);
    assert!(
        c.evidence.iter().any(|e| e.measured.contains("IBext")),
        "{:?}",
        c.evidence
    );
}

#[test]
fn sockets_where_ib_was_asked_for_or_not_found_are_a_warning() {
    let via = ["NET/Socket/1".to_string()];
    let hca = net_socket(&via, &[], &env(&[("NCCL_IB_HCA", "mlx5_0")])).unwrap();
    assert_eq!(hca.kind, CauseKind::NetSocketInsteadOfRdma);
    let missing = net_socket(&via, &["NET/IB : No device found.".to_string()], &env(&[]));
    assert!(missing.is_some());
}

#[test]
fn sockets_alone_or_rdma_in_use_are_no_cause() {
    // A cluster on Ethernet without RDMA: sockets are its network, not a fault.
    assert!(net_socket(&["NET/Socket/0".to_string()], &[], &env(&[])).is_none());
    // IB in use: nothing to say.
    let net = ["P2P plugin IBext".to_string()];
    assert!(net_socket(&["NET/IB/0/GDRDMA".to_string()], &net, &env(&[])).is_none());
    // Sockets asked for outright: the operator's choice.
    let off = env(&[("NCCL_IB_DISABLE", "1"), ("NCCL_IB_HCA", "mlx5_0")]);
    assert!(net_socket(&["NET/Socket/0".to_string()], &net, &off).is_none());
}
