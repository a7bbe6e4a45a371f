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
use crate::SimBackend;

/// The network of every simulated node.
pub const NETWORK: Network = Network::Ndr400;
/// Share of the reference per-NIC busbw a healthy simulated NIC reaches.
pub const NIC_EFFICIENCY: f64 = 0.96;
/// Ring latency per node of the run, µs (inter-node hops dominate small messages).
pub const LATENCY_US_PER_NODE: f64 = 12.0;

/// This node's simulated NIC busbw, GB/s.
pub fn nic_busbw(b: &SimBackend) -> f64 {
    let base = NETWORK.per_nic().busbw_gbps * NIC_EFFICIENCY;
    if b.faults().contains(&Fault::SlowNic) {
        base * SLOW_NIC_FACTOR
    } else {
        base
    }
}

fn hang_if_faulted(b: &SimBackend, job: &ClusterJob, stage: &str) -> Result<(), ProbeError> {
    if b.faults().contains(&Fault::Hang) {
        return Err(crate::ddp::hang(job.deadline.as_secs_f64(), stage));
    }
    Ok(())
}

/// Phase 1: this node's rendezvous entry (its label and NIC).
pub fn prepare(b: &SimBackend, job: &ClusterJob) -> Result<Vec<u8>, ProbeError> {
    job.validate()?;
    hang_if_faulted(b, job, "cluster rendezvous")?;
    let peer = SimPeer {
        backend_label: b.label(),
        nic_busbw_gbps: nic_busbw(b),
    };
    serde_json::to_vec(&peer).map_err(|e| ProbeError::Worker(format!("rendezvous: {e}")))
}

/// Phase 2: the sweep every rank of the run sees, at the slowest NIC of the run.
pub fn join(
    b: &SimBackend,
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
    hang_if_faulted(b, job, "cluster all-reduce")?;
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use ddpcheck_core::cluster::ClusterMember;
    use std::time::Duration;

    fn job(rank: u32, n: u32) -> ClusterJob {
        ClusterJob {
            run_id: "t".into(),
            rank,
            world_nodes: n,
            gpus_per_node: 8,
            min_bytes: 1 << 20,
            max_bytes: 256 << 20,
            iters: 20,
            deadline: Duration::from_secs(5),
        }
    }

    #[test]
    fn bottleneck_is_the_slowest_nic() {
        let good = SimBackend::parse("h200x8-nvswitch").unwrap();
        let slow = SimBackend::parse("h200x8-nvswitch+slow-nic").unwrap();
        let rdv = vec![
            good.cluster_prepare(&job(0, 3)).unwrap(),
            slow.cluster_prepare(&job(1, 3)).unwrap(),
            good.cluster_prepare(&job(2, 3)).unwrap(),
        ];
        let r = good.cluster_join(&job(0, 3), &rdv).unwrap();
        let big = r.busbw_large().unwrap();
        assert!(
            (big - nic_busbw(&slow)).abs() / nic_busbw(&slow) < 0.05,
            "{big}"
        );
        let r2 = slow.cluster_join(&job(1, 3), &rdv).unwrap();
        assert_eq!(
            r.busbw_large(),
            r2.busbw_large(),
            "every rank sees one collective"
        );
        let healthy = vec![rdv[0].clone(), rdv[2].clone()];
        let h = good.cluster_join(&job(0, 2), &healthy).unwrap();
        assert!(h.busbw_large().unwrap() > 0.9 * nic_busbw(&good));
    }

    #[test]
    fn hang_sleeps_to_the_deadline_then_times_out() {
        let b = SimBackend::parse("h200x8-nvswitch+hang").unwrap();
        let mut j = job(0, 2);
        j.deadline = Duration::from_millis(50);
        let t0 = std::time::Instant::now();
        assert!(matches!(
            b.cluster_prepare(&j),
            Err(ProbeError::Timeout { .. })
        ));
        assert!(t0.elapsed() >= Duration::from_millis(50));
    }

    #[test]
    fn bad_rendezvous_is_invalid() {
        let b = SimBackend::parse("h200x8-nvswitch").unwrap();
        assert!(matches!(
            b.cluster_join(&job(0, 2), &[b"x".to_vec()]),
            Err(ProbeError::Invalid(_))
        ));
        assert!(matches!(
            b.cluster_join(&job(0, 2), &[b"x".to_vec(), b"y".to_vec()]),
            Err(ProbeError::Invalid(_))
        ));
    }
}
