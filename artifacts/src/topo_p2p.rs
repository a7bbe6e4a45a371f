//! `nvidia-smi topo -p2p r|w|n|a`: NVML's peer-to-peer status of each GPU pair for one
//! capability (OK, CNS, GNS, TNS, NS, DR, U). The output does not name the capability; where
//! the file keeps the command line (`nvidia-smi topo -p2p r`) it is read from there.

use ddpcheck_core::topology::P2pReason;
use serde::{Deserialize, Serialize};

use crate::text::clean;
use crate::topo_matrix::gpu_index;
use crate::{ArtifactError, Format};

/// Which capability a `-p2p` matrix is of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Capability {
    Read,
    Write,
    Nvlink,
    Atomics,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TopoP2p {
    /// The capability, where the file's command line names it.
    pub capability: Option<Capability>,
    pub gpus: Vec<u32>,
    /// `status[i][j]` from the i-th GPU to the j-th; the diagonal `Ok`.
    pub status: Vec<Vec<P2pReason>>,
}

const F: Format = Format::TopoP2p;

fn reason(word: &str) -> Option<P2pReason> {
    match word {
        "X" | "OK" => Some(P2pReason::Ok),
        "CNS" => Some(P2pReason::ChipsetNotSupported),
        "GNS" => Some(P2pReason::GpuNotSupported),
        "TNS" => Some(P2pReason::IohTopologyNotSupported),
        "DR" => Some(P2pReason::DisabledByRegkey),
        "NS" => Some(P2pReason::NotSupported),
        "U" => Some(P2pReason::Unknown),
        _ => None,
    }
}

fn capability(text: &str) -> Option<Capability> {
    let (_, after) = text.split_once("-p2p")?;
    match after.split_whitespace().next()? {
        "r" => Some(Capability::Read),
        "w" => Some(Capability::Write),
        "n" => Some(Capability::Nvlink),
        "a" => Some(Capability::Atomics),
        _ => None,
    }
}

pub fn parse(text: &str) -> Result<TopoP2p, ArtifactError> {
    let text = clean(text);
    let mut lines = text.lines();
    let head: Vec<u32> = lines
        .by_ref()
        .find_map(|l| {
            let toks: Vec<&str> = l.split_whitespace().collect();
            (toks.first() == Some(&"GPU0") && toks.iter().all(|t| gpu_index(t).is_some()))
                .then(|| toks.iter().filter_map(|t| gpu_index(t)).collect())
        })
        .ok_or_else(|| ArtifactError::malformed(F, "no header row of GPU columns"))?;
    let n = head.len();
    let mut status = Vec::new();
    for l in lines {
        let toks: Vec<&str> = l.split_whitespace().collect();
        let Some(first) = toks.first() else { continue };
        if *first == "Legend:" {
            break;
        }
        if gpu_index(first).is_none() {
            continue;
        }
        if toks.len() < n + 1 {
            return Err(ArtifactError::truncated(
                F,
                format!("row {first} has {} of its {n} cells", toks.len() - 1),
            ));
        }
        let row: Option<Vec<P2pReason>> = toks[1..=n].iter().map(|t| reason(t)).collect();
        let row = row.ok_or_else(|| {
            ArtifactError::malformed(
                F,
                format!("row {first}: a cell is not OK/CNS/GNS/TNS/NS/DR/U/X"),
            )
        })?;
        if toks[1 + status.len()] != "X" {
            return Err(ArtifactError::malformed(
                F,
                format!("row {first}: its own cell is not X"),
            ));
        }
        status.push(row);
    }
    if status.len() != n {
        return Err(ArtifactError::truncated(
            F,
            format!("{n} GPU columns, {} GPU rows", status.len()),
        ));
    }
    Ok(TopoP2p {
        capability: capability(&text),
        gpus: head,
        status,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn reads_reasons_and_the_capability_where_named() {
        let t = "$ nvidia-smi topo -p2p r\n \tGPU0\tGPU1\t\n GPU0\tX\tGNS\t\n GPU1\tGNS\tX\t\n\nLegend:\n\n  X    = Self\n";
        let p = parse(t).unwrap();
        assert_eq!(p.capability, Some(Capability::Read));
        assert_eq!(p.status[0][1], P2pReason::GpuNotSupported);
        let cut = " \tGPU0\tGPU1\t\n GPU0\tX\tOK\t\n";
        assert!(matches!(parse(cut), Err(ArtifactError::Truncated { .. })));
        let bad = " \tGPU0\tGPU1\t\n GPU0\tX\tNV4\t\n GPU1\tNV4\tX\n";
        assert!(matches!(parse(bad), Err(ArtifactError::Malformed { .. })));
    }
}
