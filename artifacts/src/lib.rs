//! Readers of the artifacts users already have (`nvidia-smi topo -m`, `topo -p2p`, `-q`,
//! `nvlink -s`, nccl-tests output, NCCL_DEBUG=INFO logs, `lspci -vvv`), each a pure parser of
//! text, a sniffer that says which one a file is, and the assembly of their readings into what
//! core's judge takes (`node`), so that offline and live go through the same rules.

pub mod error;
pub mod folder;
pub mod judge;
pub mod lspci;
pub mod nccl_log;
pub mod nccl_tests;
pub mod nccl_tuning;
pub mod node;
pub mod nvlink_status;
pub mod smi_query;
pub mod sniff;
mod text;
pub mod topo_matrix;
pub mod topo_p2p;

use std::fmt;

use serde::{Deserialize, Serialize};

pub use error::{ArtifactError, FileError};

/// The artifact formats read, by their JSON word.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    TopoMatrix,
    TopoP2p,
    SmiQuery,
    NvlinkStatus,
    NcclTests,
    NcclLog,
    Lspci,
}

impl Format {
    pub const ALL: [Format; 7] = [
        Format::TopoMatrix,
        Format::TopoP2p,
        Format::SmiQuery,
        Format::NvlinkStatus,
        Format::NcclTests,
        Format::NcclLog,
        Format::Lspci,
    ];

    /// The JSON word (`topo_matrix`).
    pub fn as_str(self) -> &'static str {
        match self {
            Format::TopoMatrix => "topo_matrix",
            Format::TopoP2p => "topo_p2p",
            Format::SmiQuery => "smi_query",
            Format::NvlinkStatus => "nvlink_status",
            Format::NcclTests => "nccl_tests",
            Format::NcclLog => "nccl_log",
            Format::Lspci => "lspci",
        }
    }

    /// The command that makes it, for messages.
    pub fn command(self) -> &'static str {
        match self {
            Format::TopoMatrix => "nvidia-smi topo -m",
            Format::TopoP2p => "nvidia-smi topo -p2p",
            Format::SmiQuery => "nvidia-smi -q",
            Format::NvlinkStatus => "nvidia-smi nvlink -s",
            Format::NcclTests => "nccl-tests output",
            Format::NcclLog => "an NCCL_DEBUG=INFO log",
            Format::Lspci => "lspci -vvv",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.command())
    }
}

/// One format's reading of a file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "format", rename_all = "snake_case")]
pub enum Reading {
    TopoMatrix(topo_matrix::TopoMatrix),
    TopoP2p(topo_p2p::TopoP2p),
    SmiQuery(smi_query::SmiQuery),
    NvlinkStatus(nvlink_status::NvlinkStatus),
    NcclTests(nccl_tests::NcclTests),
    NcclLog(nccl_log::NcclLog),
    Lspci(lspci::Lspci),
}

impl Reading {
    pub fn format(&self) -> Format {
        match self {
            Reading::TopoMatrix(_) => Format::TopoMatrix,
            Reading::TopoP2p(_) => Format::TopoP2p,
            Reading::SmiQuery(_) => Format::SmiQuery,
            Reading::NvlinkStatus(_) => Format::NvlinkStatus,
            Reading::NcclTests(_) => Format::NcclTests,
            Reading::NcclLog(_) => Format::NcclLog,
            Reading::Lspci(_) => Format::Lspci,
        }
    }

    /// The versions the reading names (driver, CUDA, NCCL, nccl-tests), for provenance.
    pub fn versions(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let mut put = |k: &str, v: &Option<String>| {
            if let Some(v) = v {
                out.push((k.to_string(), v.clone()));
            }
        };
        match self {
            Reading::SmiQuery(q) => {
                put("driver", &q.driver_version);
                put("cuda", &q.cuda_version);
            }
            Reading::NcclTests(t) => {
                put("nccl_tests", &t.version);
                put("nccl", &t.nccl_version);
            }
            Reading::NcclLog(l) => {
                put("nccl", &l.nccl_version);
                put("cuda_driver", &l.cuda_driver_version);
            }
            _ => {}
        }
        out
    }
}

/// Parses `text` as `format`.
pub fn parse(format: Format, text: &str) -> Result<Reading, ArtifactError> {
    Ok(match format {
        Format::TopoMatrix => Reading::TopoMatrix(topo_matrix::parse(text)?),
        Format::TopoP2p => Reading::TopoP2p(topo_p2p::parse(text)?),
        Format::SmiQuery => Reading::SmiQuery(smi_query::parse(text)?),
        Format::NvlinkStatus => Reading::NvlinkStatus(nvlink_status::parse(text)?),
        Format::NcclTests => Reading::NcclTests(nccl_tests::parse(text)?),
        Format::NcclLog => Reading::NcclLog(nccl_log::parse(text)?),
        Format::Lspci => Reading::Lspci(lspci::parse(text)?),
    })
}
