//! Where a command runs: locally on a backend (real GPUs or `--sim`), or through a daemon's gRPC
//! API. Both give the same reports; errors carry the exit code they stand for.

use std::path::PathBuf;
use std::sync::Arc;

use ddpcheck_core::backend::Progress;
use ddpcheck_core::ddp::DdpRequest;
use ddpcheck_core::report::{BenchCollectivesReport, DdpReport, PreflightReport, TopoReport};
use ddpcheck_core::verdict::EXIT_USAGE;
use ddpcheck_core::{NodeBackend, ProbeError, Verdict};
use ddpcheck_proto::v1 as pb;
use ddpcheckd::engine::{self, CollectiveParams, PreflightParams};
use ddpcheckd::lock::NodeLock;
use tonic::Code;

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Probe(ProbeError),
    #[error("{0}")]
    Busy(String),
    #[error("{0}")]
    Daemon(String),
}

impl CliError {
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Usage(_) => EXIT_USAGE,
            CliError::Probe(e) => e.verdict().map(Verdict::exit_code).unwrap_or(EXIT_USAGE),
            CliError::Busy(_) => Verdict::Busy.exit_code(),
            CliError::Daemon(_) => Verdict::Unknown.exit_code(),
        }
    }
}

impl From<ProbeError> for CliError {
    fn from(e: ProbeError) -> Self {
        match e {
            ProbeError::Invalid(m) => CliError::Usage(m),
            ProbeError::Busy(m) => CliError::Busy(m),
            other => CliError::Probe(other),
        }
    }
}

impl From<engine::UsageError> for CliError {
    fn from(e: engine::UsageError) -> Self {
        CliError::Usage(e.0)
    }
}

fn status_error(s: tonic::Status) -> CliError {
    match s.code() {
        Code::ResourceExhausted => CliError::Busy(s.message().to_string()),
        Code::InvalidArgument => CliError::Usage(s.message().to_string()),
        _ => CliError::Daemon(format!(
            "ddpcheckd: {}",
            ddpcheckd::client::status_reason(&s)
        )),
    }
}

pub enum Target {
    Local {
        backend: Arc<dyn NodeBackend>,
        /// The node lock for real GPUs; simulated nodes take none (they share no hardware).
        lock: Option<PathBuf>,
    },
    Daemon {
        addr: String,
    },
}

impl Target {
    pub fn is_local_sim(&self) -> bool {
        matches!(self, Target::Local { backend, .. } if backend.kind() == ddpcheck_core::BackendKind::Sim)
    }

    fn lock(&self, purpose: &str) -> Result<Option<NodeLock>, CliError> {
        match self {
            Target::Local { lock: Some(p), .. } => NodeLock::try_acquire(p, purpose)
                .map(Some)
                .map_err(|e| CliError::Busy(e.to_string())),
            _ => Ok(None),
        }
    }

    pub fn topo(&self, gpus: &str) -> Result<TopoReport, CliError> {
        match self {
            Target::Local { backend, .. } => Ok(engine::run_topo(backend.as_ref(), gpus)?),
            Target::Daemon { addr } => block_on(async {
                let mut c = connect(addr).await?;
                let r = c
                    .get_topology(pb::GetTopologyRequest {})
                    .await
                    .map_err(status_error)?
                    .into_inner();
                parse(&r.json)
            }),
        }
    }

    pub fn preflight(
        &self,
        params: &PreflightParams,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<PreflightReport, CliError> {
        match self {
            Target::Local { backend, .. } => {
                let _lock = self.lock("preflight")?;
                Ok(engine::run_preflight(
                    backend.as_ref(),
                    params,
                    Vec::new(),
                    progress,
                )?)
            }
            Target::Daemon { addr } => block_on(async {
                let mut c = connect(addr).await?;
                let req = pb::PreflightRequest {
                    gpus: params.gpus.clone(),
                    min_bytes: params.min_bytes,
                    max_bytes: params.max_bytes,
                    iters: params.iters,
                    warmup_iters: params.warmup_iters,
                    deadline_seconds: params.deadline.map(|d| d.as_secs_f64()).unwrap_or(0.0),
                    inject_hang: params.inject_hang,
                };
                let stream = c
                    .run_preflight(req)
                    .await
                    .map_err(status_error)?
                    .into_inner();
                let report = drain(stream, progress).await?;
                parse(&report.json)
            }),
        }
    }

    /// The daemon's stored complete reports of `kind`, oldest first (empty in local mode: local
    /// runs keep no history).
    pub fn history(&self, kind: &str, limit: u32) -> Result<Vec<pb::Report>, CliError> {
        let mut rows = self.history_rows(kind, limit)?;
        rows.retain(|r| r.status == "complete" && !r.json.is_empty());
        rows.reverse();
        Ok(rows)
    }

    /// The daemon's last `limit` runs of `kind` (empty: every kind), newest first, whatever
    /// their status; none in local mode.
    pub fn history_rows(&self, kind: &str, limit: u32) -> Result<Vec<pb::Report>, CliError> {
        match self {
            Target::Local { .. } => Ok(Vec::new()),
            Target::Daemon { addr } => block_on(async {
                let mut c = connect(addr).await?;
                Ok(c.get_history(pb::GetHistoryRequest {
                    kind: kind.into(),
                    limit,
                })
                .await
                .map_err(status_error)?
                .into_inner()
                .reports)
            }),
        }
    }

    /// The daemon's newest stored preflight, for cached prolog verdicts.
    pub fn last_preflight(&self) -> Result<Option<PreflightReport>, CliError> {
        match self {
            Target::Local { .. } => Ok(None),
            Target::Daemon { addr } => block_on(async {
                let mut c = connect(addr).await?;
                match c.get_last_preflight(pb::GetLastPreflightRequest {}).await {
                    Ok(r) => parse(&r.into_inner().json).map(Some),
                    Err(s) if s.code() == Code::NotFound => Ok(None),
                    Err(s) => Err(status_error(s)),
                }
            }),
        }
    }

    /// `ddpcheck explain`: on this node (or a simulated one) only; the daemon does not serve it.
    pub fn explain(
        &self,
        params: &ddpcheckd::explain_run::ExplainParams,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<ddpcheck_core::report::ExplainReport, CliError> {
        match self {
            Target::Local { backend, .. } => {
                let _lock = self.lock("explain")?;
                Ok(ddpcheckd::explain_run::run_explain(
                    backend.as_ref(),
                    params,
                    &[],
                    progress,
                )?)
            }
            Target::Daemon { .. } => Err(CliError::Usage(
                "explain runs on the node itself (or --sim), not through --daemon".into(),
            )),
        }
    }

    pub fn bench_collectives(
        &self,
        params: &CollectiveParams,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<BenchCollectivesReport, CliError> {
        match self {
            Target::Local { backend, .. } => {
                let _lock = self.lock("bench collectives")?;
                Ok(engine::run_bench_collectives(
                    backend.as_ref(),
                    params,
                    progress,
                )?)
            }
            Target::Daemon { addr } => block_on(async {
                let mut c = connect(addr).await?;
                let req = pb::BenchCollectivesRequest {
                    ops: params.ops.iter().map(|o| o.name().to_string()).collect(),
                    gpus: params.gpus.clone(),
                    min_bytes: params.min_bytes,
                    max_bytes: params.max_bytes,
                    step_factor: u32::try_from(params.step_factor).unwrap_or(u32::MAX),
                    iters: params.iters,
                    warmup_iters: params.warmup_iters,
                    in_place: params.in_place,
                    check: params.check,
                    env_ab: params
                        .env_ab
                        .iter()
                        .map(|c| pb::EnvCandidate {
                            env: c.iter().cloned().collect(),
                        })
                        .collect(),
                    deadline_seconds: params.deadline.as_secs_f64(),
                };
                let stream = c
                    .bench_collectives(req)
                    .await
                    .map_err(status_error)?
                    .into_inner();
                let report = drain(stream, progress).await?;
                parse(&report.json)
            }),
        }
    }

    pub fn bench_ddp(
        &self,
        req: &DdpRequest,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<DdpReport, CliError> {
        match self {
            Target::Local { backend, .. } => {
                let _lock = self.lock("bench ddp")?;
                Ok(engine::run_bench_ddp(backend.as_ref(), req, progress)?)
            }
            Target::Daemon { addr } => block_on(async {
                let mut c = connect(addr).await?;
                let r = pb::BenchDdpRequest {
                    models: req.models.iter().map(|m| m.to_arg()).collect(),
                    variants: req.variants.iter().map(|v| v.name.clone()).collect(),
                    world_sizes: req.world_sizes.clone(),
                    micro_batch: req.micro_batch,
                    warmup_steps: req.warmup_steps,
                    steps: req.steps,
                    price_per_gpu_hour: req.price_per_gpu_hour.unwrap_or(0.0),
                    env: req.env.iter().cloned().collect(),
                    deadline_seconds: req.deadline_s,
                    repeats: req.repeats,
                };
                let stream = c.bench_ddp(r).await.map_err(status_error)?.into_inner();
                let report = drain(stream, progress).await?;
                parse(&report.json)
            }),
        }
    }
}

fn block_on<T>(f: impl std::future::Future<Output = Result<T, CliError>>) -> Result<T, CliError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Daemon(format!("cannot start the async runtime: {e}")))?
        .block_on(f)
}

/// The CLI's TLS settings for `--daemon https://...`, set once from the parsed flags.
static CLIENT_TLS: std::sync::OnceLock<ddpcheckd::client::ClientTls> = std::sync::OnceLock::new();

/// Records the `--tls-*` settings (first call wins); unset, connections read DDPCHECK_CLI_TLS_*.
pub fn set_client_tls(tls: ddpcheckd::client::ClientTls) {
    let _ = CLIENT_TLS.set(tls);
}

pub(crate) async fn connect(
    addr: &str,
) -> Result<pb::ddpcheck_client::DdpcheckClient<tonic::transport::Channel>, CliError> {
    ddpcheckd::client::connect_with(addr, CLIENT_TLS.get())
        .await
        .map_err(|e| match e.usage {
            true => CliError::Usage(e.to_string()),
            false => CliError::Daemon(e.to_string()),
        })
}

/// Reads a work stream to its report, forwarding progress.
pub async fn drain(
    mut stream: tonic::Streaming<pb::WorkEvent>,
    progress: &mut dyn FnMut(Progress),
) -> Result<pb::Report, CliError> {
    while let Some(ev) = stream.message().await.map_err(status_error)? {
        match ev.event {
            Some(pb::work_event::Event::Progress(p)) => progress(Progress {
                stage: p.stage,
                done: p.done,
                total: p.total,
                message: p.message,
            }),
            Some(pb::work_event::Event::Report(r)) => return Ok(r),
            None => {}
        }
    }
    Err(CliError::Daemon(
        "ddpcheckd closed the stream without a report".into(),
    ))
}

pub fn parse<T: serde::de::DeserializeOwned>(json: &str) -> Result<T, CliError> {
    serde_json::from_str(json)
        .map_err(|e| CliError::Daemon(format!("unreadable report from ddpcheckd: {e}")))
}
