//! The runner over a daemon's gRPC API (`--daemon`): the engine's `Runner`, each call one
//! request to the daemon, its progress forwarded and its report read from JSON. Every call has
//! a deadline: a read [`READ_TIMEOUT`]; a work call its opening within [`READ_TIMEOUT`] (the
//! daemon answers at once and runs the work beside) and its report within the bound its own
//! deadlines put on the run, plus [`WORK_MARGIN`]. A daemon that stops answering fails the call
//! with one line (UNKNOWN), never hangs the CLI.

use ddpcheck_core::backend::Progress;
use ddpcheck_core::ddp::DdpRequest;
use ddpcheck_core::report::{
    BenchCollectivesReport, DdpReport, ExplainReport, PreflightReport, TopoReport,
};
use ddpcheck_engine::{CollectiveParams, ExplainParams, PreflightParams, RunError, Runner};
use ddpcheck_proto::v1 as pb;
use std::future::Future;
use std::time::Duration;
use tonic::Code;

/// A read of the snapshot or the history: the daemon answers in milliseconds, a history read
/// waits at most its SQLite busy timeout (5 s).
pub const READ_TIMEOUT: Duration = Duration::from_secs(15);

/// Beyond a run's own deadlines: the worker's start, NVML reads, storing the report.
pub const WORK_MARGIN: Duration = Duration::from_secs(60);

/// `fut` within `limit`, or a one-line error naming what did not come.
async fn within<T>(
    limit: Duration,
    what: &str,
    fut: impl Future<Output = Result<T, RunError>>,
) -> Result<T, RunError> {
    tokio::time::timeout(limit, fut).await.unwrap_or_else(|_| {
        Err(RunError::Daemon(format!(
            "ddpcheckd did not answer within {} s ({what})",
            limit.as_secs()
        )))
    })
}

/// A step deadline `d` taken `steps` times, plus [`WORK_MARGIN`].
fn steps_bound(d: Duration, steps: usize) -> Duration {
    d.saturating_mul(u32::try_from(steps).unwrap_or(u32::MAX))
        .saturating_add(WORK_MARGIN)
}

/// A preflight: the collective sweep and the host copies, each bounded by the deadline, and the
/// NVML reads (bounded by their own, shorter deadlines) counted as a third; after the wait for
/// a busy node where it asks for one.
fn preflight_bound(p: &PreflightParams) -> Duration {
    let d = p
        .deadline
        .unwrap_or_else(|| ddpcheck_core::preflight::PreflightOptions::default().deadline);
    steps_bound(d, 3).saturating_add(p.wait_if_busy.unwrap_or_default())
}

/// One sweep per environment: the current one and each `--env-ab` candidate.
fn collectives_bound(p: &CollectiveParams) -> Duration {
    steps_bound(p.deadline, 1 + p.env_ab.len())
}

/// One launch per GPU count (and the 1-GPU reference), per repeat; each bounded by the deadline.
fn ddp_bound(r: &DdpRequest) -> Duration {
    let d = Duration::try_from_secs_f64(r.deadline_s).unwrap_or(Duration::MAX);
    let launches = (r.world_sizes.len() + 1) * usize::try_from(r.repeats.max(1)).unwrap_or(1);
    steps_bound(d, launches)
}

/// The host copies, each pair's sweep (and its A/B sweep), and the node's sweep under load.
fn explain_bound(p: &ExplainParams, gpus: usize) -> Duration {
    let pairs = gpus * gpus.saturating_sub(1) / 2;
    let per_pair = if p.ab { 2 } else { 1 };
    steps_bound(p.deadline, 3 + pairs * per_pair)
}

/// The number of GPUs the daemon's snapshot holds (explain's bound); 8 when it cannot tell.
async fn daemon_gpus(c: &mut Client) -> usize {
    let read = c.get_node(pb::GetNodeRequest {});
    match tokio::time::timeout(READ_TIMEOUT, read).await {
        Ok(Ok(r)) => serde_json::from_str::<ddpcheck_core::node_gpus::NodeInventory>(
            &r.into_inner().inventory_json,
        )
        .map(|inv| inv.gpus.len())
        .unwrap_or(8),
        _ => 8,
    }
}

type Client = pb::ddpcheck_client::DdpcheckClient<tonic::transport::Channel>;

/// Opens a work call (within [`READ_TIMEOUT`]) and reads its stream to the report within
/// `bound`.
async fn run_work<F>(
    open: F,
    bound: Duration,
    progress: &mut dyn FnMut(Progress),
) -> Result<pb::Report, RunError>
where
    F: Future<Output = Result<tonic::Response<tonic::Streaming<pb::WorkEvent>>, tonic::Status>>,
{
    let stream = within(READ_TIMEOUT, "the start of the run", async {
        open.await.map_err(status_error)
    })
    .await?
    .into_inner();
    within(bound, "the run's report", drain(stream, progress)).await
}

fn status_error(s: tonic::Status) -> RunError {
    // A failed run's own error: the same words and exit code as the run gives locally.
    if let Some(e) = ddpcheck_proto::status::probe_error_of(&s) {
        return RunError::from(e);
    }
    match s.code() {
        Code::ResourceExhausted => RunError::Busy(s.message().to_string()),
        // Refused by the daemon's policy (a factory outside its factory_dirs): the caller's
        // request, not the node, is what is wrong.
        Code::InvalidArgument | Code::PermissionDenied => RunError::Usage(s.message().to_string()),
        _ => RunError::Daemon(format!("ddpcheckd: {}", ddpcheck_client::status_reason(&s))),
    }
}

/// A daemon at `addr`: a socket path, `unix:PATH`, or `https://HOST:PORT` (mutual TLS).
pub struct DaemonRunner {
    pub addr: String,
}

impl DaemonRunner {
    /// The daemon's last `limit` runs of `kind` (empty: every kind), newest first, whatever
    /// their status.
    pub fn history_rows(&self, kind: &str, limit: u32) -> Result<Vec<pb::Report>, RunError> {
        block_on(async {
            let mut c = connect(&self.addr).await?;
            let read = c.get_history(pb::GetHistoryRequest {
                kind: kind.into(),
                limit,
            });
            within(READ_TIMEOUT, "history", async {
                Ok(read.await.map_err(status_error)?.into_inner().reports)
            })
            .await
        })
    }
}

impl Runner for DaemonRunner {
    fn topo(&self, _gpus: &str) -> Result<TopoReport, RunError> {
        block_on(async {
            let mut c = connect(&self.addr).await?;
            let read = c.get_topology(pb::GetTopologyRequest {});
            let r = within(READ_TIMEOUT, "topology", async {
                read.await.map_err(status_error)
            })
            .await?
            .into_inner();
            parse(&r.json)
        })
    }

    fn preflight(
        &self,
        params: &PreflightParams,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<PreflightReport, RunError> {
        block_on(async {
            let mut c = connect(&self.addr).await?;
            let req = pb::PreflightRequest::from(params);
            let report = run_work(c.run_preflight(req), preflight_bound(params), progress).await?;
            parse(&report.json)
        })
    }

    fn bench_collectives(
        &self,
        params: &CollectiveParams,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<BenchCollectivesReport, RunError> {
        block_on(async {
            let mut c = connect(&self.addr).await?;
            let req = pb::BenchCollectivesRequest::from(params);
            let bound = collectives_bound(params);
            let report = run_work(c.bench_collectives(req), bound, progress).await?;
            parse(&report.json)
        })
    }

    fn bench_ddp(
        &self,
        req: &DdpRequest,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<DdpReport, RunError> {
        block_on(async {
            let mut c = connect(&self.addr).await?;
            let r = pb::BenchDdpRequest::from(req);
            let report = run_work(c.bench_ddp(r), ddp_bound(req), progress).await?;
            parse(&report.json)
        })
    }

    fn explain(
        &self,
        params: &ExplainParams,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<ExplainReport, RunError> {
        block_on(async {
            let mut c = connect(&self.addr).await?;
            let req = pb::ExplainRequest::from(params);
            let bound = explain_bound(params, daemon_gpus(&mut c).await);
            let report = run_work(c.explain(req), bound, progress).await?;
            parse(&report.json)
        })
    }

    fn history(&self, kind: &str, limit: u32) -> Result<Vec<String>, RunError> {
        let mut rows = self.history_rows(kind, limit)?;
        rows.retain(|r| r.status == "complete" && !r.json.is_empty());
        rows.reverse();
        Ok(rows.into_iter().map(|r| r.json).collect())
    }

    fn last_preflight(&self) -> Result<Option<PreflightReport>, RunError> {
        block_on(async {
            let mut c = connect(&self.addr).await?;
            let read = c.get_last_preflight(pb::GetLastPreflightRequest {});
            let last = within(READ_TIMEOUT, "the last preflight", async { Ok(read.await) }).await?;
            match last {
                Ok(r) => parse(&r.into_inner().json).map(Some),
                Err(s) if s.code() == Code::NotFound => Ok(None),
                Err(s) => Err(status_error(s)),
            }
        })
    }
}

fn block_on<T>(f: impl std::future::Future<Output = Result<T, RunError>>) -> Result<T, RunError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| RunError::Daemon(format!("cannot start the async runtime: {e}")))?
        .block_on(f)
}

/// The CLI's TLS settings for `--daemon https://...`, set once from the parsed flags.
static CLIENT_TLS: std::sync::OnceLock<ddpcheck_client::ClientTls> = std::sync::OnceLock::new();

/// Records the `--tls-*` settings (first call wins); unset, connections read DDPCHECK_CLI_TLS_*.
pub fn set_client_tls(tls: ddpcheck_client::ClientTls) {
    let _ = CLIENT_TLS.set(tls);
}

pub(crate) async fn connect(
    addr: &str,
) -> Result<pb::ddpcheck_client::DdpcheckClient<tonic::transport::Channel>, RunError> {
    ddpcheck_client::connect_with(addr, CLIENT_TLS.get())
        .await
        .map_err(|e| match e.usage {
            true => RunError::Usage(e.to_string()),
            false => RunError::Daemon(e.to_string()),
        })
}

/// Reads a work stream to its report, forwarding progress.
pub async fn drain(
    mut stream: tonic::Streaming<pb::WorkEvent>,
    progress: &mut dyn FnMut(Progress),
) -> Result<pb::Report, RunError> {
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
    Err(RunError::Daemon(
        "ddpcheckd closed the stream without a report".into(),
    ))
}

pub fn parse<T: serde::de::DeserializeOwned>(json: &str) -> Result<T, RunError> {
    serde_json::from_str(json)
        .map_err(|e| RunError::Daemon(format!("unreadable report from ddpcheckd: {e}")))
}
