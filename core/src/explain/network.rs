//! Inter-node channels: TCP sockets (`NET/Socket`) where the log shows RDMA was there or asked for.
//!
//! NCCL takes its InfiniBand/RoCE transport (`NET/IB`, or an IB net plugin) whenever it finds a
//! usable verbs device, and falls back to sockets only where it finds none. So `NET/Socket`
//! channels beside a sign that RDMA was expected (an IB net plugin loaded, `NET/IB : No device
//! found`, `NCCL_IB_HCA` or `NCCL_NET=IB` set) are a network that did not come up, not a choice.
//! Sockets with no such sign are an Ethernet cluster's network, and no cause.

use std::collections::BTreeMap;

use super::transport::env_on;
use super::{Action, Cause, CauseKind};
use crate::finding::{Evidence, Severity};

/// The cause where a channel runs over `NET/Socket` and the log shows an RDMA network was
/// expected; `None` otherwise. `via`: each channel's transport word (`NET/Socket/0`);
/// `network`: the log's network and plugin lines; `env`: the NCCL variables set.
pub fn net_socket(
    via: &[String],
    network: &[String],
    env: &BTreeMap<String, String>,
) -> Option<Cause> {
    let sockets = via
        .iter()
        .filter(|v| v.to_ascii_uppercase().starts_with("NET/SOCKET"))
        .count();
    let net_var = env.get("NCCL_NET").map(|v| v.trim().to_ascii_uppercase());
    let sockets_asked = env_on(env, "NCCL_IB_DISABLE") || net_var.as_deref() == Some("SOCKET");
    if sockets == 0 || sockets_asked {
        return None;
    }
    let mut signs: Vec<Evidence> = network
        .iter()
        .filter(|l| rdma_line(l))
        .map(|l| Evidence::new("NCCL log", l.clone()))
        .collect();
    for var in ["NCCL_IB_HCA", "NCCL_NET"] {
        if let Some(v) = env.get(var).filter(|v| rdma_var(var, v)) {
            signs.push(Evidence::new(var, v.clone()).source("set by environment"));
        }
    }
    if signs.is_empty() {
        return None;
    }
    let mut c = Cause::new(
        CauseKind::NetSocketInsteadOfRdma,
        Severity::Warning,
        Action::CheckLink,
        Vec::new(),
    );
    c.message = format!(
        "{sockets} channel connection(s) run over TCP sockets (NET/Socket) although the log \
         shows an RDMA network was expected: NCCL found no usable InfiniBand/RoCE device"
    );
    c.short = "inter-node channels over NET/Socket, not RDMA".into();
    c.fix = "check the RDMA stack (ibstat, ibv_devices; the HCA's driver and the net plugin's \
             libraries) so that NCCL finds the device and uses NET/IB"
        .into();
    c.evidence =
        vec![Evidence::new("channels over NET/Socket", sockets.to_string()).expected("NET/IB")];
    c.evidence.extend(signs);
    c.source = "NCCL documentation, Environment Variables (NCCL_IB_HCA, NCCL_NET, \
                NCCL_IB_DISABLE) and troubleshooting (networking: NET/IB, NET/Socket)"
        .into();
    Some(c)
}

/// A log line that says an RDMA network was there or looked for.
fn rdma_line(line: &str) -> bool {
    let l = line.to_ascii_lowercase();
    let no_ib = l.contains("net/ib") && l.contains("no device found");
    let ib_plugin =
        l.contains("plugin") && (l.contains(" ib") || l.contains("rdma") || l.contains("sharp"));
    no_ib || ib_plugin
}

/// A variable that asks for InfiniBand.
fn rdma_var(var: &str, value: &str) -> bool {
    match var {
        "NCCL_IB_HCA" => !value.trim().is_empty(),
        _ => value.trim().eq_ignore_ascii_case("IB"),
    }
}
