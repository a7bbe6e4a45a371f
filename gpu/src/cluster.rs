//! Cluster runs on real GPUs: the first node's rendezvous address, and this node's share of one
//! NCCL communicator across nodes (the all-reduce sweep run by the ordinary worker, with its
//! ranks placed in the larger communicator).
//!
//! The rendezvous is NCCL's own: rank 0's node names `HOST:PORT`, every worker sets
//! `NCCL_COMM_ID` to it, and NCCL's global rank 0 opens the bootstrap root there during
//! `ncclCommInitRank` (see [`ddpcheck_core::backend::RankGroup`]). So no process outlives a
//! phase of the cluster protocol, and a phase that fails leaves nothing behind.

use std::net::{TcpListener, ToSocketAddrs};

use ddpcheck_core::backend::{CollectiveRequest, RankGroup};
use ddpcheck_core::cluster::{ClusterJob, NodeResult};
use ddpcheck_core::collective::Collective;
use ddpcheck_core::ProbeError;
use serde::{Deserialize, Serialize};

use crate::RealConfig;

/// One node's answer to the prepare phase.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rendezvous {
    pub hostname: String,
    /// Rank 0 only: `HOST:PORT` of the NCCL bootstrap root.
    pub comm_id: Option<String>,
}

/// The name this node goes by in cluster answers (the inventory's reading of it).
fn hostname() -> String {
    Some(crate::nvml::hostname())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

/// The address other nodes reach this one at: `DDPCHECK_CLUSTER_ADDRESS` (the daemon's
/// configuration), else the first non-loopback IPv4 address the host name resolves to, else
/// loopback (a single machine).
pub fn advertised_host(configured: Option<&str>) -> String {
    if let Some(h) = configured.map(str::trim).filter(|h| !h.is_empty()) {
        return h.to_string();
    }
    let resolved = (hostname().as_str(), 0u16)
        .to_socket_addrs()
        .map(|a| a.collect::<Vec<_>>())
        .unwrap_or_default();
    resolved
        .iter()
        .find(|a| a.is_ipv4() && !a.ip().is_loopback())
        .map(|a| a.ip().to_string())
        .unwrap_or_else(|| "127.0.0.1".into())
}

/// `HOST:PORT` for the bootstrap root: a port the kernel gives us free now. Another process
/// could take it before rank 0 binds it; NCCL then fails the init with an error, never a hang.
pub fn root_comm_id(host: &str) -> Result<String, ProbeError> {
    let v6 = host.contains(':');
    let any = if v6 { "[::]:0" } else { "0.0.0.0:0" };
    let port = TcpListener::bind(any)
        .and_then(|l| l.local_addr())
        .map_err(|e| ProbeError::Worker(format!("no free port for the NCCL rendezvous: {e}")))?
        .port();
    Ok(if v6 && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    })
}

/// Phase 1: rank 0 names the rendezvous address; every node names itself.
pub fn prepare(config: &RealConfig, job: &ClusterJob) -> Result<Vec<u8>, ProbeError> {
    job.validate()?;
    let comm_id = if job.rank == 0 {
        Some(root_comm_id(&advertised_host(
            config.cluster_address.as_deref(),
        ))?)
    } else {
        None
    };
    serde_json::to_vec(&Rendezvous {
        hostname: hostname(),
        comm_id,
    })
    .map_err(|e| ProbeError::Worker(format!("encoding the rendezvous: {e}")))
}

/// The rendezvous entries of a run whose root is fixed in advance (`ddpcheck cluster srun`:
/// the first node of a Slurm step and a port derived from the job), built locally on every
/// node without any exchange: entry 0 names `root` as the bootstrap address, the others only
/// their rank. What [`join_request`] reads from them is exactly what [`prepare`] gives, so the
/// join itself is the daemons' one. `root` is checked there (`HOST:PORT`).
pub fn fixed_rendezvous(root: &str, nodes: u32) -> Result<Vec<Vec<u8>>, ProbeError> {
    let host = root.rsplit_once(':').map_or(root, |(h, _)| h);
    (0..nodes)
        .map(|rank| {
            let entry = if rank == 0 {
                Rendezvous {
                    hostname: host.to_string(),
                    comm_id: Some(root.to_string()),
                }
            } else {
                Rendezvous {
                    hostname: format!("rank {rank}"),
                    comm_id: None,
                }
            };
            serde_json::to_vec(&entry)
                .map_err(|e| ProbeError::Worker(format!("encoding the rendezvous: {e}")))
        })
        .collect()
}

/// The collective request of this node's part: its GPUs as consecutive global ranks.
pub fn join_request(
    job: &ClusterJob,
    rendezvous: &[Vec<u8>],
) -> Result<CollectiveRequest, ProbeError> {
    job.validate_join(rendezvous)?;
    let root: Rendezvous = serde_json::from_slice(&rendezvous[0]).map_err(|e| {
        ProbeError::Invalid(format!(
            "the first node's rendezvous is not a real-GPU one ({e}); are all nodes on real GPUs?"
        ))
    })?;
    let comm_id = root.comm_id.ok_or_else(|| {
        ProbeError::Invalid(format!(
            "the first node ({}) gave no rendezvous address",
            root.hostname
        ))
    })?;
    let req = CollectiveRequest {
        ops: vec![Collective::AllReduce],
        gpus: Vec::new(),
        min_bytes: job.min_bytes,
        max_bytes: job.max_bytes,
        step_factor: 2,
        warmup_iters: 5,
        iters: job.iters,
        in_place: false,
        check: true,
        env: Vec::new(),
        deadline: job.deadline,
        inject_hang: false,
        group: Some(RankGroup {
            first_rank: job.rank * job.gpus_per_node,
            local_ranks: job.gpus_per_node,
            world_ranks: job.world_nodes * job.gpus_per_node,
            comm_id,
        }),
        record_transport: true,
    };
    req.validate()?;
    Ok(req)
}

/// Phase 2: this node's GPUs join the communicator and run the all-reduce sweep.
pub fn join(
    config: &RealConfig,
    job: &ClusterJob,
    rendezvous: &[Vec<u8>],
) -> Result<NodeResult, ProbeError> {
    let req = join_request(job, rendezvous)?;
    let run = crate::nccl::run_collectives(
        config,
        &req,
        &mut |p| tracing::info!(stage = %p.stage, done = p.done, total = p.total, "{}", p.message),
    )?;
    let sweep = run
        .sweeps
        .into_iter()
        .find(|s| s.op == Collective::AllReduce)
        .ok_or_else(|| ProbeError::Worker("the worker returned no all-reduce sweep".into()))?;
    Ok(NodeResult {
        rank: job.rank,
        hostname: hostname(),
        backend_label: "real".into(),
        sweep,
        transport: run.transport,
        nccl_version: run.nccl_version,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn job(rank: u32) -> ClusterJob {
        ClusterJob {
            run_id: "r1".into(),
            rank,
            world_nodes: 3,
            gpus_per_node: 2,
            min_bytes: 1 << 20,
            max_bytes: 8 << 20,
            iters: 10,
            deadline: Duration::from_secs(30),
        }
    }

    fn config() -> RealConfig {
        RealConfig {
            cluster_address: Some("10.1.2.3".into()),
            ..RealConfig::default()
        }
    }

    #[test]
    fn rank_zero_names_the_root_and_the_others_only_themselves() {
        let r0: Rendezvous = serde_json::from_slice(&prepare(&config(), &job(0)).unwrap()).unwrap();
        let id = r0.comm_id.unwrap();
        let (host, port) = id.rsplit_once(':').unwrap();
        assert_eq!(host, "10.1.2.3");
        assert!(port.parse::<u16>().unwrap() > 0);
        let r1: Rendezvous = serde_json::from_slice(&prepare(&config(), &job(1)).unwrap()).unwrap();
        assert_eq!(r1.comm_id, None);
        assert_eq!(
            root_comm_id("fe80::1").unwrap().split(']').next(),
            Some("[fe80::1")
        );
    }

    #[test]
    fn join_places_each_node_at_its_ranks() {
        let parts: Vec<Vec<u8>> = (0..3)
            .map(|r| prepare(&config(), &job(r)).unwrap())
            .collect();
        for rank in 0..3 {
            let req = join_request(&job(rank), &parts).unwrap();
            let g = req.group.unwrap();
            assert_eq!(
                (g.first_rank, g.local_ranks, g.world_ranks),
                (rank * 2, 2, 6)
            );
            assert!(g.comm_id.starts_with("10.1.2.3:"));
            assert_eq!(req.ops, vec![Collective::AllReduce]);
            assert!(req.check);
        }
    }

    #[test]
    fn fixed_rendezvous_is_what_the_join_reads() {
        let parts = fixed_rendezvous("node-a:20101", 3).unwrap();
        assert_eq!(parts.len(), 3);
        for rank in 0..3 {
            let g = join_request(&job(rank), &parts).unwrap().group.unwrap();
            assert_eq!(g.comm_id, "node-a:20101");
            assert_eq!(
                (g.first_rank, g.local_ranks, g.world_ranks),
                (rank * 2, 2, 6)
            );
        }
        let r0: Rendezvous = serde_json::from_slice(&parts[0]).unwrap();
        assert_eq!(r0.hostname, "node-a");
        let r2: Rendezvous = serde_json::from_slice(&parts[2]).unwrap();
        assert_eq!(r2.comm_id, None);
        // The same entries on every node: nothing in them depends on where they are built.
        assert_eq!(parts, fixed_rendezvous("node-a:20101", 3).unwrap());
        // An IPv6 root keeps its brackets; a root that is not HOST:PORT is refused at the join.
        let v6 = fixed_rendezvous("[fe80::1]:20101", 2).unwrap();
        let r0: Rendezvous = serde_json::from_slice(&v6[0]).unwrap();
        assert_eq!(r0.hostname, "[fe80::1]");
        let j = ClusterJob {
            world_nodes: 2,
            ..job(1)
        };
        assert_eq!(
            join_request(&j, &v6).unwrap().group.unwrap().comm_id,
            "[fe80::1]:20101"
        );
        let e = join_request(&j, &fixed_rendezvous("node-a", 2).unwrap()).unwrap_err();
        assert!(e.to_string().contains("not HOST:PORT"), "{e}");
        // Entry count must match the job's nodes, as for the daemons' rendezvous.
        let e = join_request(&job(0), &fixed_rendezvous("node-a:1", 2).unwrap()).unwrap_err();
        assert!(e.to_string().contains("2 entries for 3 nodes"), "{e}");
    }

    #[test]
    fn bad_rendezvous_is_refused_before_any_work() {
        let parts: Vec<Vec<u8>> = (0..3)
            .map(|r| prepare(&config(), &job(r)).unwrap())
            .collect();
        let e = join_request(&job(1), &parts[..2]).unwrap_err();
        assert!(e.to_string().contains("2 entries for 3 nodes"), "{e}");
        // A simulated node's entry where a real one belongs.
        let mut sim = parts.clone();
        sim[0] = br#"{"backend_label":"sim:x","nic_busbw_gbps":44.0}"#.to_vec();
        let e = join_request(&job(1), &sim).unwrap_err();
        assert!(e.to_string().contains("not a real-GPU one"), "{e}");
        // Rank 0 without an address (it was not rank 0 when it prepared).
        let mut none = parts.clone();
        none[0] = parts[1].clone();
        let e = join_request(&job(2), &none).unwrap_err();
        assert!(e.to_string().contains("gave no rendezvous address"), "{e}");
        // An address NCCL could not parse.
        let mut bad = parts;
        bad[0] = br#"{"hostname":"a","comm_id":"a b:1"}"#.to_vec();
        let e = join_request(&job(2), &bad).unwrap_err();
        assert!(e.to_string().contains("not HOST:PORT"), "{e}");
    }
}
