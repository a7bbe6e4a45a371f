//! Reading artifacts from files: a folder (every regular file in it that is not hidden, sniffed
//! by content) or files named with their format; each bounded by core's limit and kept with its
//! provenance (path, format, versions seen).

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use ddpcheck_core::bounded::{read_bytes, FileKind};
use serde::{Deserialize, Serialize};

use crate::error::FileError;
use crate::{sniff, ArtifactError, Format, Reading};

/// A file to read, and the format its flag names (`None`: sniffed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    pub path: PathBuf,
    pub wanted: Option<Format>,
}

/// Where a reading came from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    pub file: String,
    pub format: Format,
    /// The command that makes such a file (`nvidia-smi topo -m`).
    pub command: String,
    /// Versions the file names (`driver`, `cuda`, `nccl`, `nccl_tests`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub versions: BTreeMap<String, String>,
    /// What was read, in a few words (`8 GPUs`, `2 ranks, 13 sizes`).
    pub summary: String,
}

/// A file's reading with its provenance.
#[derive(Clone, Debug, PartialEq)]
pub struct Read {
    pub reading: Reading,
    pub provenance: Provenance,
}

fn err(path: &Path, error: ArtifactError) -> FileError {
    FileError {
        file: path.display().to_string(),
        error,
    }
}

/// Reads one file's text, bounded; not UTF-8 is binary.
fn text(path: &Path) -> Result<String, FileError> {
    let f = File::open(path).map_err(|e| err(path, ArtifactError::Io(e.to_string())))?;
    let bytes = read_bytes(f, FileKind::Artifact)
        .map_err(|e| err(path, ArtifactError::Io(e.to_string())))?;
    String::from_utf8(bytes).map_err(|_| err(path, ArtifactError::Binary))
}

/// The files of a folder, by name; hidden files and folders are passed over.
pub fn folder_sources(dir: &Path) -> Result<Vec<Source>, FileError> {
    let entries = std::fs::read_dir(dir).map_err(|e| err(dir, ArtifactError::Io(e.to_string())))?;
    let mut paths: Vec<PathBuf> = Vec::new();
    for e in entries {
        let e = e.map_err(|e| err(dir, ArtifactError::Io(e.to_string())))?;
        let hidden = e.file_name().to_string_lossy().starts_with('.');
        // A link to a file is that file (metadata follows links).
        let file = std::fs::metadata(e.path()).is_ok_and(|m| m.is_file());
        if file && !hidden {
            paths.push(e.path());
        }
    }
    paths.sort();
    if paths.is_empty() {
        return Err(err(dir, ArtifactError::Io("no file in the folder".into())));
    }
    Ok(paths
        .into_iter()
        .map(|path| Source { path, wanted: None })
        .collect())
}

/// Reads every source; the first bad one is the error (with its file).
pub fn read_all(sources: &[Source]) -> Result<Vec<Read>, FileError> {
    let mut out = Vec::new();
    for s in sources {
        let t = text(&s.path)?;
        let readings = sniff::read(&t, s.wanted).map_err(|e| err(&s.path, e))?;
        for reading in readings {
            let provenance = provenance(&s.path, &reading);
            out.push(Read {
                reading,
                provenance,
            });
        }
    }
    Ok(out)
}

fn provenance(path: &Path, r: &Reading) -> Provenance {
    Provenance {
        file: path.display().to_string(),
        format: r.format(),
        command: r.format().command().to_string(),
        versions: r.versions().into_iter().collect(),
        summary: summary(r),
    }
}

fn summary(r: &Reading) -> String {
    match r {
        Reading::TopoMatrix(m) => format!("{} GPUs, {} NICs", m.gpus.len(), m.nics.len()),
        Reading::TopoP2p(p) => format!(
            "{} GPUs, capability {}",
            p.gpus.len(),
            p.capability
                .map_or("not named in the file".to_string(), |c| format!("{c:?}")
                    .to_lowercase())
        ),
        Reading::SmiQuery(q) => format!("{} GPUs", q.gpus.len()),
        Reading::NvlinkStatus(s) => format!("{} GPUs", s.gpus.len()),
        Reading::NcclTests(t) => format!(
            "{} on {} ranks, {} sizes, avg busbw {:.2} GB/s",
            t.op.map_or("collective not named", |o| o.name()),
            t.devices.len(),
            t.sweep.samples.len(),
            t.avg_busbw_gbps
        ),
        Reading::NcclLog(l) => log_summary(l),
        Reading::Lspci(l) => format!(
            "{} devices, {} NVIDIA GPUs",
            l.devices.len(),
            l.nvidia_gpus().count()
        ),
    }
}

/// An NCCL log in a line: its transports, rings and trees, variables, network and warnings.
fn log_summary(l: &crate::nccl_log::NcclLog) -> String {
    let mut parts = vec![format!(
        "transports {}",
        l.transports().unwrap_or_else(|| "none logged".into())
    )];
    parts.push(format!(
        "{} rings, {} tree lines",
        l.rings.len(),
        l.trees.len()
    ));
    if !l.env.is_empty() {
        let env: Vec<String> = l.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        parts.push(format!("set by environment: {}", env.join(" ")));
    }
    if let Some(n) = l
        .network
        .iter()
        .find(|n| n.contains("Plugin") || n.starts_with("Using network"))
    {
        parts.push(n.clone());
    }
    if !l.warnings.is_empty() {
        parts.push(format!(
            "{} warnings, the first: {}",
            l.warnings.len(),
            l.warnings[0]
        ));
    }
    parts.join("; ")
}
