//! What can go wrong reading an artifact: every case is bad input (exit 64), named with the file.

use crate::Format;

/// An artifact that cannot be read as what it claims or seems to be. The CLI prints it in one
/// line, with the file, and exits 64: a guess is never shown as a reading.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ArtifactError {
    #[error("empty file")]
    Empty,
    #[error("not text (binary content)")]
    Binary,
    #[error("not a known artifact (nvidia-smi topo -m / topo -p2p / -q / nvlink -s, nccl-tests, NCCL_DEBUG=INFO log, lspci -vvv)")]
    Foreign,
    #[error("holds more than one artifact ({0} and {1}); give each its own file")]
    Mixed(Format, Format),
    #[error("is {found}, not {wanted}")]
    WrongFormat { wanted: Format, found: Format },
    #[error("{format} looks truncated: {why}")]
    Truncated { format: Format, why: String },
    #[error("{format}: {why}")]
    Malformed { format: Format, why: String },
    #[error("artifacts disagree: {0}")]
    Inconsistent(String),
    #[error("{0}")]
    Io(String),
}

impl ArtifactError {
    pub(crate) fn truncated(format: Format, why: impl Into<String>) -> ArtifactError {
        ArtifactError::Truncated {
            format,
            why: why.into(),
        }
    }

    pub(crate) fn malformed(format: Format, why: impl Into<String>) -> ArtifactError {
        ArtifactError::Malformed {
            format,
            why: why.into(),
        }
    }
}

/// An error with the file it came from: the CLI's one line.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{file}: {error}")]
pub struct FileError {
    pub file: String,
    pub error: ArtifactError,
}
