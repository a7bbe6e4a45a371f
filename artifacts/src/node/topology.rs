//! The pair matrix from `topo -m`, with NVML's P2P status from `topo -p2p` where read: each
//! named capability into its place, an unnamed matrix into the read status alone.

use ddpcheck_core::node_gpus::GpuInfo;
use ddpcheck_core::topology::{P2pCaps, P2pReason, P2pStatus, TopologyMatrix};

use crate::topo_matrix::TopoMatrix;
use crate::topo_p2p::{Capability, TopoP2p};
use crate::ArtifactError;

pub(super) fn matrix(
    topo: Option<&TopoMatrix>,
    p2p: &[&TopoP2p],
    gpus: &[GpuInfo],
    undecided: &mut Vec<String>,
) -> Result<Option<TopologyMatrix>, ArtifactError> {
    let Some(t) = topo else { return Ok(None) };
    let n = t.gpus.len();
    for p in p2p {
        if p.gpus != t.gpus {
            return Err(ArtifactError::Inconsistent(format!(
                "nvidia-smi topo -p2p shows GPUs {:?}, topo -m {:?}",
                p.gpus, t.gpus
            )));
        }
    }
    if p2p.iter().any(|p| p.capability.is_none() && has_bare_ns(p)) {
        undecided.push(
            "a topo -p2p matrix without its command line has NS cells: they could be NVLink's or atomics' and are not taken as \"no P2P\" (save it as `nvidia-smi topo -p2p r` with the command line)"
                .into(),
        );
    }
    let refs = t
        .gpus
        .iter()
        .map(|i| {
            gpus.iter()
                .find(|g| g.index == *i)
                .map(GpuInfo::gpu_ref)
                .ok_or_else(|| {
                    ArtifactError::Inconsistent(format!(
                        "topo -m's GPU{i} is not among the GPUs the others name"
                    ))
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let m = TopologyMatrix {
        gpus: refs,
        links: t.links.clone(),
        p2p: summary(p2p, n),
        p2p_status: caps(p2p, n),
        cpu_affinity: t.cpu_affinity.clone(),
        numa_affinity: t.numa_affinity.clone(),
    };
    m.validate()
        .map_err(|e| ArtifactError::Inconsistent(format!("topo -m: {e}")))?;
    Ok(Some(m))
}

/// The read status each pair has: NotSupported where a read, write or unnamed matrix refuses,
/// Ok where one says OK; empty where no such matrix was read.
fn summary(p2p: &[&TopoP2p], n: usize) -> Vec<Vec<P2pStatus>> {
    let pcie: Vec<&&TopoP2p> = p2p
        .iter()
        .filter(|p| !matches!(p.capability, Some(Capability::Nvlink)))
        .collect();
    if pcie.is_empty() {
        return Vec::new();
    }
    (0..n)
        .map(|i| {
            (0..n)
                .map(|j| {
                    pcie.iter()
                        .map(|p| read_status(p, i, j))
                        .max_by_key(|s| match s {
                            P2pStatus::NotSupported => 2,
                            P2pStatus::Ok => 1,
                            P2pStatus::Unknown => 0,
                        })
                        .unwrap_or(P2pStatus::Unknown)
                })
                .collect()
        })
        .collect()
}

/// Whether an off-diagonal cell says NS (not supported, no reason given).
fn has_bare_ns(p: &TopoP2p) -> bool {
    p.status.iter().enumerate().any(|(i, row)| {
        row.iter()
            .enumerate()
            .any(|(j, r)| i != j && *r == P2pReason::NotSupported)
    })
}

/// A cell as the read status: a bare NS of a matrix whose capability is not named could be
/// NVLink's or atomics' (NS on every PCIe pair), so it says nothing of reads; a reason (CNS,
/// GNS, TNS, DR) is the pair's for every capability.
fn read_status(p: &TopoP2p, i: usize, j: usize) -> P2pStatus {
    match (p.capability, p.status[i][j]) {
        (None, P2pReason::NotSupported) => P2pStatus::Unknown,
        (_, r) => r.summary(),
    }
}

/// Each capability a matrix names, in its place; empty where none is named.
fn caps(p2p: &[&TopoP2p], n: usize) -> Vec<Vec<P2pCaps>> {
    if p2p.iter().all(|p| p.capability.is_none()) {
        return Vec::new();
    }
    let mut out = vec![vec![P2pCaps::all(P2pReason::Unknown); n]; n];
    for p in p2p {
        for (i, row) in out.iter_mut().enumerate() {
            for (j, c) in row.iter_mut().enumerate() {
                let r = p.status[i][j];
                match p.capability {
                    Some(Capability::Read) => c.read = r,
                    Some(Capability::Write) => c.write = r,
                    Some(Capability::Atomics) => c.atomics = r,
                    Some(Capability::Nvlink) => c.nvlink = r,
                    None => {}
                }
            }
        }
    }
    out
}
