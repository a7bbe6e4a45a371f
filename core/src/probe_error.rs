//! Why a probe produced no measurement, and the verdict and exit code each reason stands for.

use serde::{Deserialize, Serialize};

use crate::verdict::Verdict;

/// Why a probe produced no measurement. Each maps to a verdict: a fault is a verdict, not a crash.
#[derive(Clone, Debug, PartialEq, thiserror::Error, Serialize, Deserialize)]
pub enum ProbeError {
    /// No driver, no library, no GPU: we cannot tell.
    #[error("{0}")]
    Unavailable(String),
    /// The GPUs are in use by someone else, or another test holds the node.
    #[error("{0}")]
    Busy(String),
    /// A stage ran past its deadline and was stopped.
    #[error("{stage} did not finish within {seconds:.1} s and was stopped")]
    Timeout { stage: String, seconds: f64 },
    /// A GPU disappeared or failed during the run.
    #[error("{0}")]
    GpuFailed(String),
    /// A worker crashed or spoke garbage; the message says what it printed.
    #[error("{0}")]
    Worker(String),
    /// The request itself is invalid (a usage error, exit 64).
    #[error("{0}")]
    Invalid(String),
    /// The run was stopped by us, not by anything on the node: the daemon's shutdown, a
    /// caller's cancel, our own signal to its worker. It judged nothing: it is no verdict, is
    /// stored `interrupted`, and the caller is told it could not tell (exit 3).
    #[error("interrupted: {0}")]
    Interrupted(String),
}

impl ProbeError {
    /// The verdict this error stands for; `None` for invalid input (a usage error) and for a
    /// run we stopped ourselves (no judgement of the node: a preflight step that returns it
    /// ends the preflight with this error, not with a verdict).
    pub fn verdict(&self) -> Option<Verdict> {
        match self {
            ProbeError::Unavailable(_) | ProbeError::Worker(_) => Some(Verdict::Unknown),
            ProbeError::Busy(_) => Some(Verdict::Busy),
            ProbeError::Timeout { .. } => Some(Verdict::Timeout),
            ProbeError::GpuFailed(_) => Some(Verdict::Critical),
            ProbeError::Invalid(_) | ProbeError::Interrupted(_) => None,
        }
    }

    /// The exit code a caller gets for this error: its verdict's, 64 for invalid input, and
    /// UNKNOWN's for an interrupted run (the caller could not tell).
    pub fn exit_code(&self) -> i32 {
        match self {
            ProbeError::Invalid(_) => crate::verdict::EXIT_USAGE,
            ProbeError::Interrupted(_) => Verdict::Unknown.exit_code(),
            other => other
                .verdict()
                .map_or(crate::verdict::EXIT_USAGE, Verdict::exit_code),
        }
    }
}
