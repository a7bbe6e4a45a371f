//! Where a command runs: the `Runner` trait, with its local implementation on this node's
//! backend (real GPUs or `--sim`); the CLI implements it over a daemon's gRPC API. Both give the
//! same reports; errors carry the exit code they stand for.

use std::path::PathBuf;
use std::sync::Arc;

use ddpcheck_core::backend::Progress;
use ddpcheck_core::ddp::{DdpRequest, RunDevice};
use ddpcheck_core::params::{CollectiveParams, ExplainParams, PreflightParams};
use ddpcheck_core::report::{
    BenchCollectivesReport, DdpReport, ExplainReport, PreflightReport, TopoReport,
};
use ddpcheck_core::verdict::{EXIT_BROKEN_PIPE, EXIT_IOERR, EXIT_USAGE};
use ddpcheck_core::{FullBackend, ProbeError, Verdict};
use ddpcheck_gpu::RealConfig;

use crate::lock::{default_runtime_dir, lock_path, NodeLock};
use crate::runs::{self, UsageError};

/// Why a command gave no report; each kind stands for an exit code, and [`RunError::exit_code`]
/// is the one place that says which (docs/exit-codes.md). The layers below give their own typed
/// errors; a command turns each into one of these where it knows which kind it is.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Bad input: exit 64.
    #[error("{0}")]
    Usage(String),
    /// The backend's failure: its verdict's exit code.
    #[error("{0}")]
    Probe(ProbeError),
    /// Another test holds the node: BUSY.
    #[error("{0}")]
    Busy(String),
    /// The daemon could not be reached or answered nonsense, or the output failed: UNKNOWN.
    #[error("{0}")]
    Daemon(String),
    /// The command's output could not be written: 141 where its reader went away (a closed
    /// pipe, as a shell reports SIGPIPE), else 74 (EX_IOERR: a full disk behind a redirect).
    #[error("writing the output: {0}")]
    Output(std::io::Error),
}

impl RunError {
    /// Bad input, in the words of the layer's error that refused it (exit 64).
    pub fn usage(e: impl std::fmt::Display) -> RunError {
        RunError::Usage(e.to_string())
    }

    /// The exit code this error stands for: 64 for bad input, a failed probe's verdict's code
    /// (UNKNOWN's for an interrupted run), BUSY's, UNKNOWN's for a daemon that cannot be
    /// reached or answers nonsense, 141 or 74 for output that cannot be written.
    pub fn exit_code(&self) -> i32 {
        match self {
            RunError::Usage(_) => EXIT_USAGE,
            RunError::Probe(e) => e.exit_code(),
            RunError::Busy(_) => Verdict::Busy.exit_code(),
            RunError::Daemon(_) => Verdict::Unknown.exit_code(),
            RunError::Output(e) if e.kind() == std::io::ErrorKind::BrokenPipe => EXIT_BROKEN_PIPE,
            RunError::Output(_) => EXIT_IOERR,
        }
    }
}

impl From<ProbeError> for RunError {
    fn from(e: ProbeError) -> Self {
        match e {
            ProbeError::Invalid(m) => RunError::Usage(m),
            ProbeError::Busy(m) => RunError::Busy(m),
            other => RunError::Probe(other),
        }
    }
}

impl From<UsageError> for RunError {
    fn from(e: UsageError) -> Self {
        RunError::Usage(e.0)
    }
}

/// What a command can ask of a node, wherever it runs.
pub trait Runner {
    fn topo(&self, gpus: &str) -> Result<TopoReport, RunError>;

    fn preflight(
        &self,
        params: &PreflightParams,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<PreflightReport, RunError>;

    fn bench_collectives(
        &self,
        params: &CollectiveParams,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<BenchCollectivesReport, RunError>;

    fn bench_ddp(
        &self,
        req: &DdpRequest,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<DdpReport, RunError>;

    /// `ddpcheck explain`: each pair's chain and every cause of low bandwidth.
    fn explain(
        &self,
        params: &ExplainParams,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<ExplainReport, RunError>;

    /// The node's stored complete reports of `kind` as JSON, oldest first; none where no
    /// history is kept (local runs keep none).
    fn history(&self, kind: &str, limit: u32) -> Result<Vec<String>, RunError>;

    /// The node's newest stored preflight, for cached prolog verdicts; none without history.
    fn last_preflight(&self) -> Result<Option<PreflightReport>, RunError>;
}

/// This node's backend, in this process.
pub struct LocalRunner {
    backend: Arc<dyn FullBackend>,
    /// The node lock for real GPUs; simulated nodes take none (they share no hardware).
    lock: Option<PathBuf>,
}

impl LocalRunner {
    pub fn new(backend: Arc<dyn FullBackend>, lock: Option<PathBuf>) -> LocalRunner {
        LocalRunner { backend, lock }
    }

    /// The real GPUs under the node lock of the default runtime directory, or the simulated
    /// node `sim` names (`PROFILE[+FAULT...]`), without a lock.
    pub fn for_node(sim: Option<&str>) -> Result<LocalRunner, RunError> {
        let backend = runs::make_backend(sim, RealConfig::default())?;
        let lock = sim.is_none().then(|| lock_path(&default_runtime_dir()));
        Ok(LocalRunner::new(backend, lock))
    }

    fn lock(&self, purpose: &str) -> Result<Option<NodeLock>, RunError> {
        match &self.lock {
            Some(p) => NodeLock::try_acquire(p, purpose)
                .map(Some)
                .map_err(|e| RunError::from(ProbeError::from(e))),
            None => Ok(None),
        }
    }
}

impl Runner for LocalRunner {
    fn topo(&self, gpus: &str) -> Result<TopoReport, RunError> {
        Ok(runs::run_topo(self.backend.as_ref(), gpus)?)
    }

    fn preflight(
        &self,
        params: &PreflightParams,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<PreflightReport, RunError> {
        let _lock = self.lock("preflight")?;
        Ok(runs::run_preflight(
            self.backend.as_ref(),
            params,
            Vec::new(),
            progress,
        )?)
    }

    fn bench_collectives(
        &self,
        params: &CollectiveParams,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<BenchCollectivesReport, RunError> {
        let _lock = self.lock("bench collectives")?;
        Ok(runs::run_bench_collectives(
            self.backend.as_ref(),
            params,
            progress,
        )?)
    }

    fn bench_ddp(
        &self,
        req: &DdpRequest,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<DdpReport, RunError> {
        // CPU ranks share no GPU with another test: no node lock.
        let _lock = match req.device {
            RunDevice::Cuda => self.lock("bench ddp")?,
            RunDevice::Cpu => None,
        };
        Ok(runs::run_bench_ddp(self.backend.as_ref(), req, progress)?)
    }

    fn explain(
        &self,
        params: &ExplainParams,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<ExplainReport, RunError> {
        let _lock = self.lock("explain")?;
        Ok(crate::explain::run_explain(
            self.backend.as_ref(),
            params,
            &[],
            progress,
        )?)
    }

    fn history(&self, _kind: &str, _limit: u32) -> Result<Vec<String>, RunError> {
        Ok(Vec::new())
    }

    fn last_preflight(&self) -> Result<Option<PreflightReport>, RunError> {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_simulated_node_runs_without_a_lock_and_keeps_no_history() {
        let r = LocalRunner::for_node(Some("h200x2-nvlink")).unwrap();
        assert!(r.lock.is_none());
        assert_eq!(r.topo("").unwrap().gpus.len(), 2);
        assert!(r.history("preflight", 5).unwrap().is_empty());
        assert!(r.last_preflight().unwrap().is_none());
    }

    #[test]
    fn errors_keep_their_exit_codes() {
        let usage = LocalRunner::for_node(Some("no-such-profile"))
            .err()
            .unwrap();
        assert_eq!(usage.exit_code(), EXIT_USAGE);
        assert_eq!(
            RunError::from(ProbeError::Busy("held".into())).exit_code(),
            Verdict::Busy.exit_code()
        );
        assert_eq!(
            RunError::Daemon("gone".into()).exit_code(),
            Verdict::Unknown.exit_code()
        );
    }

    /// docs/exit-codes.md's table, class by class: each error kind's code, by number.
    #[test]
    fn each_class_of_error_has_the_documented_code() {
        let io = |kind| RunError::Output(std::io::Error::from(kind));
        let probe = |e: ProbeError| RunError::from(e).exit_code();
        let timeout = ProbeError::Timeout {
            stage: "sweep".into(),
            seconds: 1.0,
        };
        let cases = [
            (RunError::Usage("--seq 0".into()).exit_code(), 64),
            (probe(ProbeError::Invalid("bad".into())), 64),
            (probe(ProbeError::Unavailable("no driver".into())), 3),
            (probe(ProbeError::Worker("died".into())), 3),
            (probe(ProbeError::Interrupted("stopped".into())), 3),
            (probe(ProbeError::GpuFailed("fell off".into())), 2),
            (probe(ProbeError::Busy("held".into())), 4),
            (RunError::Busy("held".into()).exit_code(), 4),
            (probe(timeout), 5),
            (RunError::Daemon("gone".into()).exit_code(), 3),
            (io(std::io::ErrorKind::StorageFull).exit_code(), 74),
            (io(std::io::ErrorKind::BrokenPipe).exit_code(), 141),
        ];
        for (i, (got, want)) in cases.into_iter().enumerate() {
            assert_eq!(got, want, "case {i}");
        }
    }
}
