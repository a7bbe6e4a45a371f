//! The runner over a daemon's gRPC API (`--daemon`): the engine's `Runner`, each call one
//! request to the daemon, its progress forwarded and its report read from JSON.

use ddpcheck_core::backend::Progress;
use ddpcheck_core::ddp::DdpRequest;
use ddpcheck_core::report::{
    BenchCollectivesReport, DdpReport, ExplainReport, PreflightReport, TopoReport,
};
use ddpcheck_engine::{CollectiveParams, ExplainParams, PreflightParams, RunError, Runner};
use ddpcheck_proto::v1 as pb;
use tonic::Code;

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
            Ok(c.get_history(pb::GetHistoryRequest {
                kind: kind.into(),
                limit,
            })
            .await
            .map_err(status_error)?
            .into_inner()
            .reports)
        })
    }
}

impl Runner for DaemonRunner {
    fn topo(&self, _gpus: &str) -> Result<TopoReport, RunError> {
        block_on(async {
            let mut c = connect(&self.addr).await?;
            let r = c
                .get_topology(pb::GetTopologyRequest {})
                .await
                .map_err(status_error)?
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
            let stream = c
                .run_preflight(req)
                .await
                .map_err(status_error)?
                .into_inner();
            let report = drain(stream, progress).await?;
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
            let stream = c
                .bench_collectives(req)
                .await
                .map_err(status_error)?
                .into_inner();
            let report = drain(stream, progress).await?;
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
            let stream = c.bench_ddp(r).await.map_err(status_error)?.into_inner();
            let report = drain(stream, progress).await?;
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
            let stream = c.explain(req).await.map_err(status_error)?.into_inner();
            let report = drain(stream, progress).await?;
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
            match c.get_last_preflight(pb::GetLastPreflightRequest {}).await {
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
