//! Transports NCCL picks between two GPUs, best first, and the best one a topology allows.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::topology::{LinkClass, P2pStatus};

/// NCCL's intra-node transports and its network ones, from fastest to slowest on one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Transport {
    /// Direct peer access (NVLink, or PCIe below a switch or host bridge).
    P2p,
    /// Through shared host memory.
    Shm,
    /// NCCL's InfiniBand/RoCE plugin.
    NetIb,
    /// TCP sockets: the slowest path.
    NetSocket,
}

impl Transport {
    /// `P2P/CUMEM` → P2P, `SHM/direct` → SHM, `NET/IB` → NET/IB, `NET/Socket` → NET/Socket.
    pub fn parse(word: &str) -> Option<Transport> {
        let up = word.trim().to_ascii_uppercase();
        if up.starts_with("P2P") {
            Some(Transport::P2p)
        } else if up.starts_with("SHM") {
            Some(Transport::Shm)
        } else if up.starts_with("NET/IB") {
            Some(Transport::NetIb)
        } else if up.starts_with("NET") {
            Some(Transport::NetSocket)
        } else {
            None
        }
    }

    /// The slowest transport of a list as `CollectiveRun::transport` holds it (`P2P/CUMEM, SHM/direct`).
    pub fn worst_of(list: &str) -> Option<Transport> {
        list.split(',').filter_map(Transport::parse).max()
    }

    pub fn label(self) -> &'static str {
        match self {
            Transport::P2p => "P2P",
            Transport::Shm => "SHM",
            Transport::NetIb => "NET/IB",
            Transport::NetSocket => "NET/Socket",
        }
    }
}

/// The best transport NCCL uses by default on a pair's link: P2P over NVLink and below PCIe
/// switches (NCCL's default P2P level is PXB); through shared memory across a host bridge or
/// where the driver reports no P2P.
pub fn allowed(link: LinkClass, p2p: Option<P2pStatus>) -> Transport {
    if p2p == Some(P2pStatus::NotSupported) {
        return Transport::Shm;
    }
    match link {
        LinkClass::X | LinkClass::Nv(_) | LinkClass::Pix | LinkClass::Pxb => Transport::P2p,
        LinkClass::Phb | LinkClass::Node | LinkClass::Sys => Transport::Shm,
    }
}

/// True where `NCCL_<var>` is set to 1.
pub fn env_on(env: &BTreeMap<String, String>, var: &str) -> bool {
    env.get(var).is_some_and(|v| v.trim() == "1")
}

/// The transport the environment alone leaves on a link (what NCCL would pick when its log was
/// not read): P2P and SHM off leave the network.
pub fn predicted(
    link: LinkClass,
    p2p: Option<P2pStatus>,
    env: &BTreeMap<String, String>,
) -> Transport {
    let best = allowed(link, p2p);
    let p2p_off =
        env_on(env, "NCCL_P2P_DISABLE") || p2p_level(env).is_some_and(|lvl| lvl < path_rank(link));
    let shm_off = env_on(env, "NCCL_SHM_DISABLE");
    let forced = p2p_level(env).is_some_and(|lvl| lvl >= path_rank(link));
    match best {
        Transport::P2p if !p2p_off => Transport::P2p,
        Transport::Shm if forced && !p2p_off => Transport::P2p,
        _ if !shm_off => Transport::Shm,
        _ => Transport::NetSocket,
    }
}

/// NCCL_P2P_LEVEL as a path rank (LOC 0, NVL 1, PIX 2, PXB 3, PHB 4, SYS 5); the legacy
/// integers 0..4 mean LOC, PIX, PXB, PHB, SYS. `None` when unset or not understood.
pub fn p2p_level(env: &BTreeMap<String, String>) -> Option<u8> {
    let v = env.get("NCCL_P2P_LEVEL")?.trim().to_ascii_uppercase();
    Some(match v.as_str() {
        "LOC" | "0" => 0,
        "NVL" => 1,
        "PIX" | "1" => 2,
        "PXB" | "2" => 3,
        "PHB" | "3" => 4,
        "SYS" => 5,
        // "Values greater than 4 will be interpreted as SYS" (NCCL's environment docs).
        n => match n.parse::<u32>() {
            Ok(k) if k >= 4 => 5,
            _ => return None,
        },
    })
}

/// A link's place on NCCL_P2P_LEVEL's scale (NODE counts as PHB: it crosses host bridges).
pub fn path_rank(link: LinkClass) -> u8 {
    match link {
        LinkClass::X => 0,
        LinkClass::Nv(_) => 1,
        LinkClass::Pix => 2,
        LinkClass::Pxb => 3,
        LinkClass::Phb | LinkClass::Node => 4,
        LinkClass::Sys => 5,
    }
}
