//! NCCL_DEBUG=INFO logs: the NCCL version, the transport of each channel's connection
//! (`via P2P/IPC`, `P2P/CUMEM`, `P2P/CUMEM/read`, `SHM`, `NET/Socket`, `NET/IB`), rings and
//! trees, the variables "set by environment", the network and plugin lines, each rank's bus id,
//! the tuning lines (algorithm and protocol per collective), and warnings. Only lines with `NCCL INFO` or `NCCL WARN` are read, so a log interleaved with
//! nccl-tests' or a training script's output reads as well.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::text::{clean, strip_launcher};
use crate::{ArtifactError, Format};

const F: Format = Format::NcclLog;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NcclLog {
    /// `NCCL version 2.21.5+cuda12.4` → `2.21.5`.
    pub nccl_version: Option<String>,
    /// The CUDA build of that NCCL (`cuda12.4`), where printed.
    pub nccl_cuda: Option<String>,
    /// `cudaDriverVersion 12020`.
    pub cuda_driver_version: Option<String>,
    /// `NCCL_xxx set by environment to yyy`.
    pub env: BTreeMap<String, String>,
    pub channels: Vec<Connection>,
    /// Ring orders (`Channel 00/02 :    0   1`, or `Ring 00 : 0 1` in older versions).
    pub rings: Vec<String>,
    /// `Trees [0] 1/-1/-1->0->-1 …` lines.
    pub trees: Vec<String>,
    /// Network and plugin lines (`NET/Plugin …`, `Using network IB`, `NET/IB : Using …`).
    pub network: Vec<String>,
    /// Each rank's bus id (`busId 18000`), from the communicator's init line.
    pub rank_bus: BTreeMap<u32, String>,
    /// Each rank's host, from the line's prefix (`host:pid:tid`).
    pub rank_host: BTreeMap<u32, String>,
    pub warnings: Vec<String>,
    /// Tuning lines (`AllReduce: N Bytes -> Algo RING proto SIMPLE …`), with
    /// `NCCL_DEBUG_SUBSYS=TUNING`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tuning: Vec<crate::nccl_tuning::Tuning>,
}

/// `Channel 00/0 : 0[0] -> 1[1] via P2P/IPC`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Connection {
    pub channel: u32,
    pub from: u32,
    pub to: u32,
    /// The whole word after `via` (`P2P/CUMEM/read`, `NET/IB/3/GDRDMA`).
    pub via: String,
}

impl Connection {
    /// The first two parts (`P2P/CUMEM`, `NET/IB`, `SHM/direct`), as the live reader shortens them.
    pub fn short(&self) -> String {
        self.via
            .split('/')
            .filter(|p| !p.is_empty())
            .take(2)
            .collect::<Vec<_>>()
            .join("/")
    }
}

impl NcclLog {
    /// The transports between two ranks (either way), shortened and joined as the live
    /// measurement records them (`P2P/CUMEM, SHM/direct`); `None` where no channel joins them.
    pub fn transport_between(&self, a: u32, b: u32) -> Option<String> {
        let set: BTreeSet<String> = self
            .channels
            .iter()
            .filter(|c| (c.from == a && c.to == b) || (c.from == b && c.to == a))
            .map(Connection::short)
            .collect();
        (!set.is_empty()).then(|| set.into_iter().collect::<Vec<_>>().join(", "))
    }

    /// Every transport of the log.
    pub fn transports(&self) -> Option<String> {
        let set: BTreeSet<String> = self.channels.iter().map(Connection::short).collect();
        (!set.is_empty()).then(|| set.into_iter().collect::<Vec<_>>().join(", "))
    }
}

/// `host:pid:tid [dev] NCCL INFO message` → (host, message, is a warning).
fn split(line: &str) -> Option<(&str, &str, bool)> {
    let (head, msg, warn) = match line.split_once(" NCCL INFO ") {
        Some((h, m)) => (h, m, false),
        None => {
            let (h, m) = line.split_once(" NCCL WARN ")?;
            (h, m, true)
        }
    };
    Some((host_of(head), msg.trim(), warn))
}

/// The host of a line's `host:pid:tid` word, past whatever a launcher or collector put before
/// it (a timestamp, `[rank1]:`).
fn host_of(head: &str) -> &str {
    head.split_whitespace()
        .rev()
        .find_map(|w| {
            let parts: Vec<&str> = w.split(':').collect();
            let numeric = |p: &str| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit());
            (parts.len() >= 3 && numeric(parts[parts.len() - 1]) && numeric(parts[parts.len() - 2]))
                .then(|| {
                    &w[..w.len() - parts[parts.len() - 1].len() - parts[parts.len() - 2].len() - 2]
                })
        })
        .unwrap_or("")
}

/// `0[0] -> 1[1]` → (0, 1).
fn ends(s: &str) -> Option<(u32, u32)> {
    let (a, b) = s.split_once("->")?;
    let rank = |x: &str| x.trim().split('[').next()?.trim().parse().ok();
    Some((rank(a)?, rank(b)?))
}

/// A connection line: `Channel 00/0 : …` (or `Ring 00 : …` before NCCL 2.5) with `via`.
fn connection(msg: &str) -> Option<Connection> {
    let rest = msg
        .strip_prefix("Channel ")
        .or_else(|| msg.strip_prefix("Ring "))?;
    let (head, via) = rest.split_once(" via ")?;
    let (ch, pair) = head.split_once(':')?;
    let channel = ch.trim().split('/').next()?.parse().ok()?;
    let pair = pair.replace("[send]", "").replace("[receive]", "");
    let (from, to) = ends(&pair)?;
    Some(Connection {
        channel,
        from,
        to,
        via: via.split_whitespace().next()?.to_string(),
    })
}

/// A ring order line: `Channel 00/02 :    0   1` (no arrow, no via) or `Ring 00 : 0 1`.
fn ring(msg: &str) -> Option<String> {
    let rest = msg
        .strip_prefix("Ring ")
        .or_else(|| msg.strip_prefix("Channel "))?;
    let (_, order) = rest.split_once(':')?;
    (!order.trim().is_empty() && order.split_whitespace().all(|w| w.parse::<u32>().is_ok()))
        .then(|| msg.to_string())
}

fn comm_init(log: &mut NcclLog, msg: &str, host: &str) {
    let toks: Vec<&str> = msg.split_whitespace().collect();
    let after = |k: &str| {
        toks.iter()
            .position(|w| *w == k)
            .and_then(|i| toks.get(i + 1))
    };
    if let Some(rank) = after("rank").and_then(|r| r.parse().ok()) {
        if let Some(bus) = after("busId") {
            log.rank_bus.insert(rank, (*bus).to_string());
        }
        log.rank_host.insert(rank, host.to_string());
    }
}

fn read_line(log: &mut NcclLog, host: &str, msg: &str) {
    if let Some(v) = msg.strip_prefix("NCCL version ") {
        let v = v.split_whitespace().next().unwrap_or(v);
        let (ver, cuda) = v.split_once('+').map_or((v, None), |(a, b)| (a, Some(b)));
        log.nccl_version.get_or_insert_with(|| ver.to_string());
        if let Some(c) = cuda {
            log.nccl_cuda.get_or_insert_with(|| c.to_string());
        }
    } else if let Some(v) = msg.strip_prefix("cudaDriverVersion ") {
        log.cuda_driver_version
            .get_or_insert_with(|| v.trim().to_string());
    } else if let Some((var, val)) = msg.split_once(" set by environment to ") {
        if var.starts_with("NCCL_") && !var.contains(' ') {
            log.env.insert(
                var.to_string(),
                val.trim().trim_end_matches('.').to_string(),
            );
        }
    } else if let Some(c) = connection(msg) {
        log.channels.push(c);
    } else if let Some(t) = crate::nccl_tuning::parse(msg) {
        log.tuning.push(t);
    } else if let Some(r) = ring(msg) {
        if !log.rings.contains(&r) {
            log.rings.push(r);
        }
    } else if msg.starts_with("Trees") {
        log.trees.push(msg.to_string());
    } else if msg.starts_with("NET/") || msg.contains("Plugin") || msg.starts_with("Using network")
    {
        if !log.network.iter().any(|n| n == msg) {
            log.network.push(msg.to_string());
        }
    } else if msg.starts_with("comm 0x") {
        comm_init(log, msg, host);
    }
}

pub fn parse(text: &str) -> Result<NcclLog, ArtifactError> {
    let text = clean(text);
    let mut log = NcclLog::default();
    let mut any = false;
    for line in text.lines().map(strip_launcher) {
        let Some((host, msg, warn)) = split(line) else {
            continue;
        };
        any = true;
        if warn {
            log.warnings.push(msg.to_string());
        } else {
            read_line(&mut log, host, msg);
        }
    }
    if !any {
        return Err(ArtifactError::malformed(F, "no `NCCL INFO` line"));
    }
    Ok(log)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn reads_versions_transports_env_and_rings() {
        let t = "\
h:1:1 [0] NCCL INFO NCCL version 2.23.4+cuda12.6\n\
h:1:1 [0] NCCL INFO cudaDriverVersion 12040\n\
h:1:2 [0] NCCL INFO NCCL_P2P_LEVEL set by environment to SYS\n\
h:1:2 [0] NCCL INFO comm 0x55 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 18000 commId 0x1 - Init START\n\
h:1:2 [0] NCCL INFO Channel 00/02 :    0   1\n\
h:1:2 [0] NCCL INFO Trees [0] 1/-1/-1->0->-1 [1] 1/-1/-1->0->-1\n\
h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n\
h:1:3 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via SHM/direct/direct\n\
h:1:2 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.\n\
#  Rank  0 Group  0 Pid 1 on h device  0 [0x18] NVIDIA H100\n";
        let l = parse(t).unwrap();
        assert_eq!(l.nccl_version.as_deref(), Some("2.23.4"));
        assert_eq!(l.nccl_cuda.as_deref(), Some("cuda12.6"));
        assert_eq!(l.env.get("NCCL_P2P_LEVEL").map(String::as_str), Some("SYS"));
        assert_eq!(
            l.transport_between(0, 1).as_deref(),
            Some("P2P/CUMEM, SHM/direct")
        );
        assert_eq!(l.rings.len(), 1);
        assert_eq!(l.trees.len(), 1);
        assert_eq!(l.rank_bus.get(&0).map(String::as_str), Some("18000"));
        assert_eq!(l.network.len(), 1);
        assert!(parse("# nThread 1\n").is_err());
    }

    #[test]
    fn the_host_is_read_past_timestamps_and_rank_prefixes() {
        let t = "[2024-01-01 10:59:59] n1:7:8 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 17000 - Init START\n\
[2024-01-01 11:00:00] n1:7:9 [1] NCCL INFO comm 0x1 rank 1 nranks 2 cudaDev 1 busId 65000 - Init START\n\
[rank1]: n1:7:9 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via SHM/direct/direct\n";
        let l = parse(t).unwrap();
        let hosts: Vec<&str> = l.rank_host.values().map(String::as_str).collect();
        assert_eq!(hosts, vec!["n1", "n1"]);
        assert_eq!(l.channels.len(), 1);
    }

    #[test]
    fn older_and_network_channel_forms() {
        let c = connection("Channel 00 : 0[18000] -> 1[2a000] via P2P/IPC").unwrap();
        assert_eq!((c.from, c.to, c.short()), (0, 1, "P2P/IPC".to_string()));
        let n = connection("Channel 07/0 : 0[0] -> 2[0] [receive] via NET/IB/3/GDRDMA").unwrap();
        assert_eq!((n.from, n.to, n.short()), (0, 2, "NET/IB".to_string()));
    }
}
