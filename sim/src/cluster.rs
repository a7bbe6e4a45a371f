//! Simulated cluster runs: each node has one inter-node NIC (an NDR 400G rail); the all-reduce
//! across nodes runs at the ring's bottleneck, the slowest participating NIC.
//!
//! Sim assumptions (documented in docs/cluster.md): a healthy NIC reaches
//! [`NIC_EFFICIENCY`] of core's reference figure for its network; `slow-nic` multiplies it by
//! [`crate::fault::SLOW_NIC_FACTOR`]; `hang` sleeps until the deadline in either phase; a
//! per-size latency of [`LATENCY_US_PER_NODE`] per node shapes small messages.

use ddpcheck_core::capacity::Network;
use ddpcheck_core::cluster::{ClusterJob, NodeResult, SimPeer};
use ddpcheck_core::collective::{size_ladder, Collective, Sample, Sweep, Timing};
use ddpcheck_core::num::ToF64;
use ddpcheck_core::NodeBackend;
use ddpcheck_core::ProbeError;

use crate::fault::{Fault, SLOW_NIC_FACTOR};
use crate::profile::Profile;
use crate::timing::jitter;

/// The network of every simulated node.
pub const NETWORK: Network = Network::Ndr400;
/// Share of the reference per-NIC busbw a healthy simulated NIC reaches.
pub const NIC_EFFICIENCY: f64 = 0.96;
/// Ring latency per node of the run, µs (inter-node hops dominate small messages).
pub const LATENCY_US_PER_NODE: f64 = 12.0;

/// This node's simulated NIC busbw, GB/s.
pub fn nic_busbw(faults: &[Fault]) -> f64 {
    let base = NETWORK.per_nic().busbw_gbps * NIC_EFFICIENCY;
    if faults.contains(&Fault::SlowNic) {
        base * SLOW_NIC_FACTOR
    } else {
        base
    }
}

fn hang_if_faulted(faults: &[Fault], job: &ClusterJob, stage: &str) -> Result<(), ProbeError> {
    if faults.contains(&Fault::Hang) {
        return Err(crate::stop::hang(job.deadline.as_secs_f64(), stage));
    }
    Ok(())
}

/// Phase 1: this node's rendezvous entry (its label and NIC). `b` is the simulated node,
/// `faults` its faults.
pub fn prepare(
    b: &dyn NodeBackend,
    faults: &[Fault],
    job: &ClusterJob,
) -> Result<Vec<u8>, ProbeError> {
    job.validate()?;
    hang_if_faulted(faults, job, "cluster rendezvous")?;
    let peer = SimPeer {
        backend_label: b.label(),
        nic_busbw_gbps: nic_busbw(faults),
    };
    serde_json::to_vec(&peer).map_err(|e| ProbeError::Worker(format!("rendezvous: {e}")))
}

/// Phase 2: the sweep every rank of the run sees, at the slowest NIC of the run.
pub fn join(
    b: &dyn NodeBackend,
    faults: &[Fault],
    profile: &Profile,
    job: &ClusterJob,
    rendezvous: &[Vec<u8>],
) -> Result<NodeResult, ProbeError> {
    job.validate_join(rendezvous)?;
    let peers = rendezvous
        .iter()
        .map(|r| serde_json::from_slice::<SimPeer>(r))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ProbeError::Invalid(format!("rendezvous entry is not a sim peer: {e}")))?;
    hang_if_faulted(faults, job, "cluster all-reduce")?;
    let bottleneck = peers
        .iter()
        .map(|p| p.nic_busbw_gbps)
        .filter(|v| v.is_finite() && *v > 0.0)
        .fold(f64::INFINITY, f64::min);
    if !bottleneck.is_finite() {
        return Err(ProbeError::Invalid("rendezvous names no usable NIC".into()));
    }
    let op = Collective::AllReduce;
    let ranks = job.world_nodes * job.gpus_per_node;
    let factor = op.busbw_factor(ranks);
    let samples = size_ladder(job.min_bytes, job.max_bytes, 2)
        .into_iter()
        .map(|bytes| {
            // busbw = algbw × factor, so the bandwidth term of the time is bytes × factor / busbw.
            let wire_us = bytes.to_f64() * factor / (bottleneck * 1e3);
            let lat_us = LATENCY_US_PER_NODE * f64::from(job.world_nodes);
            // Every rank of one run sees the same time: the key has no rank in it.
            let key = format!("cluster|{}|{}|{bytes}", job.run_id, job.world_nodes);
            let t = (wire_us + lat_us) * (1.0 + jitter(&key));
            Sample {
                bytes,
                count: bytes / 4,
                dtype: "float".into(),
                out_of_place: Timing::from_time(op, ranks, bytes, t, None),
                in_place: None,
            }
        })
        .collect();
    let hostname = b
        .inventory()
        .map(|i| i.hostname)
        .unwrap_or_else(|_| format!("sim-{}", profile.name));
    Ok(NodeResult {
        rank: job.rank,
        hostname,
        backend_label: b.label(),
        sweep: Sweep {
            op,
            ranks,
            redop: "sum".into(),
            root: -1,
            samples,
        },
        transport: Some(format!("NET/IB ({} sim)", NETWORK)),
        nccl_version: Some(profile.nccl_version.clone()),
    })
}
