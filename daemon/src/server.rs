//! The `ddpcheck.v1` gRPC service: cheap reads from the snapshot and history, and single-flight
//! work-starting calls that stream progress and end with one report.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use ddpcheck_core::backend::Progress as CoreProgress;
use ddpcheck_core::caller_env;
use ddpcheck_core::cluster::{Phase, PhaseCall};
use ddpcheck_core::collective::LARGE_MESSAGE;
use ddpcheck_core::ddp::DdpRequest;
use ddpcheck_core::ProbeError;
use ddpcheck_proto::convert;
use ddpcheck_proto::v1::ddpcheck_server::Ddpcheck;
use ddpcheck_proto::v1::{
    work_event, BenchCollectivesRequest, BenchDdpRequest, ClusterCollectiveReply,
    ClusterCollectiveRequest, ExplainRequest, GetHistoryRequest, GetLastPreflightRequest,
    GetNodeRequest, GetTopologyRequest, HistoryReply, NodeSnapshot, PreflightRequest, Progress,
    Report, WorkEvent,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use crate::history::{StoredReport, RECENT_BUSBW};
use crate::node::{Node, WorkGuard};
use ddpcheck_engine::{self as engine, CollectiveParams, ExplainParams, PreflightParams};

pub struct Service {
    pub node: Arc<Node>,
}

type EventStream = Pin<Box<dyn Stream<Item = Result<WorkEvent, Status>> + Send>>;

fn invalid(e: convert::Invalid) -> Status {
    Status::invalid_argument(e.0)
}

fn stored_to_proto(r: StoredReport) -> Report {
    Report {
        kind: r.kind,
        backend: r.backend,
        verdict: r.verdict.unwrap_or_default(),
        exit_code: r.exit_code.unwrap_or(-1),
        json: r.json.unwrap_or_default(),
        status: r.status,
        id: r.id,
        started_unix: r.started_unix,
        error: r.error.unwrap_or_default(),
    }
}

/// A failed run's status, the error itself beside it: the client gives the same exit code as a
/// local run (BUSY 4 as a second test on the node, TIMEOUT 5, a failed GPU 2).
fn probe_status(e: &ProbeError) -> Status {
    ddpcheck_proto::status::status_of(e)
}

/// What a finished run shows on `/metrics`, once it is known to be the node's verdict.
type Publish = Box<dyn FnOnce(&Node) + Send>;

/// Outcome of a finished work call, ready for the history, the metrics and the stream.
struct Finished {
    report: Report,
    busbw_large: Option<f64>,
    /// Its gauges; never shown for a run the daemon's own stop interrupted.
    publish: Option<Publish>,
}

impl Finished {
    /// A report with a verdict and an exit code (preflight, explain), which the history keeps.
    fn judged<T: serde::Serialize>(
        kind: &str,
        backend: ddpcheck_core::BackendKind,
        verdict: ddpcheck_core::Verdict,
        exit_code: i32,
        r: &T,
    ) -> Result<Finished, ProbeError> {
        let mut f = Finished::plain(kind, backend, r)?;
        f.report.verdict = verdict.as_str().into();
        f.report.exit_code = exit_code;
        Ok(f)
    }

    /// A report without a verdict (benchmarks).
    fn plain<T: serde::Serialize>(
        kind: &str,
        backend: ddpcheck_core::BackendKind,
        r: &T,
    ) -> Result<Finished, ProbeError> {
        Ok(Finished {
            report: Report {
                kind: kind.into(),
                backend: backend.as_str().into(),
                verdict: String::new(),
                exit_code: 0,
                json: to_json(r)?,
                status: "complete".into(),
                ..Report::default()
            },
            busbw_large: None,
            publish: None,
        })
    }

    fn publishing(mut self, publish: impl FnOnce(&Node) + Send + 'static) -> Finished {
        self.publish = Some(Box::new(publish));
        self
    }
}

/// Why a run is no verdict of the node: we stopped it. A run still going when the daemon is
/// told to stop (its children were ended by that stop, whatever they returned then), or one
/// that says so itself.
fn interrupted_by_us(node: &Node, outcome: &Result<Finished, ProbeError>) -> Option<String> {
    match outcome {
        Err(ProbeError::Interrupted(why)) => Some(why.clone()),
        _ if node.stopping() => Some(STOPPING.into()),
        _ => None,
    }
}

/// The reason stored for a run the daemon's stop interrupted.
const STOPPING: &str =
    "ddpcheckd stopped during the run: nothing was judged (stored as interrupted)";

impl Service {
    /// Before any work: a caller sets only the variables that tune transports and algorithms,
    /// and those the configuration allows by name; never one that names code or a file.
    fn caller_env<'a>(
        &self,
        vars: impl IntoIterator<Item = &'a (String, String)>,
    ) -> Result<(), Status> {
        caller_env::check(vars, &self.node.allow_env).map_err(Status::permission_denied)
    }

    /// Takes the node for a preflight or benchmark: within the rate limit (a token is taken
    /// only when the work starts) and single flight. Both refusals are RESOURCE_EXHAUSTED, told
    /// apart by the message ("rate limited: ..." or "BUSY: ...") and counted in their own metric.
    fn start_work(&self, call: &'static str) -> Result<WorkGuard, Status> {
        if self.node.stopping() {
            return Err(Status::unavailable(NO_NEW_RUN));
        }
        match self
            .node
            .work_limiter
            .admit(|| self.node.try_start_work(call))
        {
            Ok(Ok(guard)) => Ok(guard),
            Ok(Err(busy)) => {
                self.node.metrics.work_rejected(call);
                Err(Status::resource_exhausted(busy))
            }
            Err(limited) => {
                self.node.metrics.work_rate_limited(call);
                Err(Status::resource_exhausted(limited.message(call)))
            }
        }
    }

    /// Reads the history on a blocking thread: SQLite, and a lock a run's write may hold through
    /// its fsync, must not take one of the runtime's two workers from `/metrics`.
    async fn read_history<T: Send + 'static>(
        &self,
        f: impl FnOnce(&crate::history::History) -> T + Send + 'static,
    ) -> Result<T, Status> {
        let node = self.node.clone();
        tokio::task::spawn_blocking(move || node.with_history(f))
            .await
            .map_err(|e| Status::internal(format!("history read: {e}")))
    }

    /// Runs `work` on a blocking thread under the single-flight guard, streaming its progress.
    fn spawn_work<F>(&self, call: &'static str, work: F) -> Result<EventStream, Status>
    where
        F: FnOnce(&Node, &mut dyn FnMut(CoreProgress)) -> Result<Finished, ProbeError>
            + Send
            + 'static,
    {
        let guard = self.start_work(call)?;
        let (tx, rx) = mpsc::channel::<Result<WorkEvent, Status>>(64);
        let node = self.node.clone();
        tokio::task::spawn_blocking(move || {
            let backend_kind = node.backend.kind().as_str();
            let label = node.backend.label();
            let id = node.with_history(|h| h.begin(call, backend_kind, &label, engine::unix_now()));
            if let Err(e) = &id {
                tracing::warn!("history: {e}");
            }
            let ptx = tx.clone();
            let mut progress = |p: CoreProgress| {
                let ev = WorkEvent {
                    event: Some(work_event::Event::Progress(Progress {
                        stage: p.stage,
                        done: p.done,
                        total: p.total,
                        message: p.message,
                    })),
                };
                // A slow or gone client must not stall the run: drop progress it cannot take.
                let _ = ptx.try_send(Ok(ev));
            };
            let outcome = work(&node, &mut progress);
            // The node is free again before the caller hears the outcome: a client that starts
            // its next call on the report must not find the previous run still holding the lock.
            drop(guard);
            let interrupted = interrupted_by_us(&node, &outcome);
            node.metrics
                .work_ran(call, outcome.is_ok() && interrupted.is_none());
            let now = engine::unix_now();
            if let Some(why) = interrupted {
                // Not the node's verdict: stored `interrupted`, never the last verdict, no gauge.
                if let Ok(id) = id {
                    if let Err(e) = node.with_history(|h| h.interrupt(id, &why, now)) {
                        tracing::warn!("history: {e}");
                    }
                }
                let _ = tx.blocking_send(Err(probe_status(&ProbeError::Interrupted(why))));
                return;
            }
            match outcome {
                Ok(mut f) => {
                    if let Some(publish) = f.publish.take() {
                        publish(&node);
                    }
                    if let Ok(id) = id {
                        let verdict =
                            (!f.report.verdict.is_empty()).then_some(f.report.verdict.as_str());
                        // Only a judged report (one with a verdict) has an exit code to keep.
                        let exit = verdict.is_some().then_some(f.report.exit_code);
                        let stored = node.with_history(|h| {
                            h.complete(
                                id,
                                "complete",
                                verdict,
                                exit,
                                f.busbw_large,
                                Some(&f.report.json),
                                now,
                            )
                        });
                        if let Err(e) = stored {
                            tracing::warn!("history: {e}");
                        }
                    }
                    let _ = tx.blocking_send(Ok(WorkEvent {
                        event: Some(work_event::Event::Report(f.report)),
                    }));
                }
                Err(e) => {
                    if let Ok(id) = id {
                        let _ = node.with_history(|h| h.fail(id, &e.to_string(), now));
                    }
                    let _ = tx.blocking_send(Err(probe_status(&e)));
                }
            }
            node.prune_history();
        });
        Ok(Box::pin(ReceiverStream::new(rx)))
    }
}

fn to_json<T: serde::Serialize>(v: &T) -> Result<String, ProbeError> {
    serde_json::to_string(v).map_err(|e| ProbeError::Worker(format!("report serialisation: {e}")))
}

#[tonic::async_trait]
impl Ddpcheck for Service {
    async fn get_node(
        &self,
        _req: Request<GetNodeRequest>,
    ) -> Result<Response<NodeSnapshot>, Status> {
        let snap = self.node.read_snapshot();
        let (inventory_json, error, hostname) = match &snap.inventory {
            Ok(inv) => (
                serde_json::to_string(inv).map_err(|e| Status::internal(e.to_string()))?,
                String::new(),
                inv.hostname.clone(),
            ),
            Err(e) => (String::new(), e.clone(), engine::local_hostname()),
        };
        Ok(Response::new(NodeSnapshot {
            backend: self.node.backend.kind().as_str().into(),
            backend_label: self.node.backend.label(),
            hostname,
            age_seconds: snap.taken.elapsed().as_secs_f64(),
            inventory_json,
            error,
            daemon_version: engine::TOOL_VERSION.into(),
        }))
    }

    async fn get_topology(
        &self,
        _req: Request<GetTopologyRequest>,
    ) -> Result<Response<Report>, Status> {
        let snap = self.node.read_snapshot();
        let inv = snap.inventory.map_err(Status::unavailable)?;
        let topology = snap
            .topology
            .ok_or_else(|| Status::unavailable("topology not read yet"))?;
        let mut prov = ddpcheck_core::report::Provenance {
            hostname: inv.hostname.clone(),
            time: humantime::format_rfc3339_seconds(
                std::time::UNIX_EPOCH + Duration::from_secs_f64(snap.taken_unix.max(0.0)),
            )
            .to_string(),
            tool_version: engine::TOOL_VERSION.into(),
            driver_version: inv.driver_version.clone(),
            cuda_version: inv.cuda_driver_version.clone(),
            ..Default::default()
        };
        prov.gpus = topology.gpus.clone();
        let report = ddpcheck_core::report::TopoReport {
            header: ddpcheck_core::report::Header::new(
                ddpcheck_core::report::ReportKind::Topo,
                self.node.backend.kind(),
                self.node.backend.label(),
                prov,
            ),
            gpus: inv.gpus,
            topology,
        };
        Ok(Response::new(Report {
            kind: "topo".into(),
            backend: self.node.backend.kind().as_str().into(),
            verdict: String::new(),
            exit_code: 0,
            json: serde_json::to_string(&report).map_err(|e| Status::internal(e.to_string()))?,
            status: "complete".into(),
            ..Report::default()
        }))
    }

    async fn get_last_preflight(
        &self,
        _req: Request<GetLastPreflightRequest>,
    ) -> Result<Response<Report>, Status> {
        let label = self.node.backend.label();
        let r = self
            .read_history(move |h| h.latest("preflight", &label))
            .await?
            .map_err(|e| Status::internal(e.to_string()))?;
        r.map(|r| Response::new(stored_to_proto(r)))
            .ok_or_else(|| Status::not_found("no preflight has run on this node yet"))
    }

    async fn get_history(
        &self,
        req: Request<GetHistoryRequest>,
    ) -> Result<Response<HistoryReply>, Status> {
        let req = req.into_inner();
        if !matches!(
            req.kind.as_str(),
            "" | "preflight" | "bench_collectives" | "bench_ddp" | "explain"
        ) {
            return Err(Status::invalid_argument(format!(
                "kind {:?}: expected preflight, bench_collectives, bench_ddp, explain or empty",
                req.kind
            )));
        }
        let limit = match req.limit {
            0 => 20,
            n @ 1..=1000 => n,
            n => {
                return Err(Status::invalid_argument(format!(
                    "limit {n} outside 1..=1000"
                )))
            }
        };
        let label = self.node.backend.label();
        let kind = req.kind;
        let rows = self
            .read_history(move |h| h.recent(&kind, Some(&label), limit))
            .await?
            .map_err(|e| Status::internal(e.to_string()))?;
        Ok(Response::new(HistoryReply {
            reports: rows.into_iter().map(stored_to_proto).collect(),
        }))
    }

    type RunPreflightStream = EventStream;

    async fn run_preflight(
        &self,
        req: Request<PreflightRequest>,
    ) -> Result<Response<EventStream>, Status> {
        let params = PreflightParams::try_from(req.into_inner()).map_err(invalid)?;
        let stream = self.spawn_work("preflight", move |node, progress| {
            let history = node.recent_busbw(RECENT_BUSBW);
            let r =
                engine::run_preflight(node.backend.as_ref(), &params, history.clone(), progress)?;
            let mut f =
                Finished::judged("preflight", r.header.backend, r.verdict, r.exit_code, &r)?;
            f.busbw_large = r
                .all_reduce
                .as_ref()
                .and_then(|s| s.peak_busbw(LARGE_MESSAGE))
                .map(|(_, b)| b);
            Ok(f.publishing(move |node| {
                node.metrics.set_preflight(&r, engine::unix_now());
                node.show_causes(&r, &history);
            }))
        })?;
        Ok(Response::new(stream))
    }

    type BenchCollectivesStream = EventStream;

    async fn bench_collectives(
        &self,
        req: Request<BenchCollectivesRequest>,
    ) -> Result<Response<EventStream>, Status> {
        let params = CollectiveParams::try_from(req.into_inner()).map_err(invalid)?;
        self.caller_env(params.env_ab.iter().flatten())?;
        let stream = self.spawn_work("bench_collectives", move |node, progress| {
            let r = engine::run_bench_collectives(node.backend.as_ref(), &params, progress)?;
            Finished::plain("bench_collectives", r.header.backend, &r)
        })?;
        Ok(Response::new(stream))
    }

    type BenchDdpStream = EventStream;

    async fn bench_ddp(
        &self,
        req: Request<BenchDdpRequest>,
    ) -> Result<Response<EventStream>, Status> {
        let ddp = DdpRequest::try_from(req.into_inner()).map_err(invalid)?;
        self.caller_env(
            ddp.env
                .iter()
                .chain(ddp.variants.iter().flat_map(|v| &v.env)),
        )?;
        // Before any work: a caller never has the daemon import code it did not allow, and
        // the run imports each factory by the canonical path that was checked.
        let ddp = crate::factories::admit(ddp, &self.node.factory_dirs)
            .map_err(Status::permission_denied)?;
        let stream = self.spawn_work("bench_ddp", move |node, progress| {
            let r = engine::run_bench_ddp(node.backend.as_ref(), &ddp, progress)?;
            let f = Finished::plain("bench_ddp", r.header.backend, &r)?;
            Ok(f.publishing(move |node| node.metrics.set_ddp(&r.results)))
        })?;
        Ok(Response::new(stream))
    }

    type ExplainStream = EventStream;

    /// As `ddpcheck explain` on the node, with the node's own history for the drift cause.
    async fn explain(&self, req: Request<ExplainRequest>) -> Result<Response<EventStream>, Status> {
        let params = ExplainParams::try_from(req.into_inner()).map_err(invalid)?;
        let stream = self.spawn_work("explain", move |node, progress| {
            let history = node.recent_busbw(RECENT_BUSBW);
            let r =
                engine::explain::run_explain(node.backend.as_ref(), &params, &history, progress)?;
            let f = Finished::judged("explain", r.header.backend, r.verdict, r.exit_code, &r)?;
            // The newest judgement of the node's links, measured pair by pair: it replaces the
            // causes the last preflight left in the metric.
            Ok(f.publishing(move |node| {
                node.metrics
                    .set_causes(&r.header.provenance.hostname, &r.explanation);
            }))
        })?;
        Ok(Response::new(stream))
    }

    async fn cluster_collective(
        &self,
        req: Request<ClusterCollectiveRequest>,
    ) -> Result<Response<ClusterCollectiveReply>, Status> {
        let PhaseCall {
            phase,
            job,
            rendezvous,
        } = PhaseCall::try_from(req.into_inner()).map_err(invalid)?;
        let dl = job.deadline;
        // Single flight only, not the rate limit: a cluster check's isolation rounds make two
        // phase calls per node per round, up to 2 log2(nodes) + 4 rounds, within seconds, and a
        // phase refused midway is taken for a failed node (docs/reliability.md).
        let guard = self.node.try_start_work("cluster").map_err(|msg| {
            self.node.metrics.work_rejected("cluster");
            Status::resource_exhausted(msg)
        })?;
        let node = self.node.clone();
        let work = tokio::task::spawn_blocking(move || {
            let _guard = guard;
            let inv_host = node.backend.inventory().map(|i| i.hostname).ok();
            let out = match phase {
                Phase::Prepare => node
                    .backend
                    .cluster_prepare(&job)
                    .map(|r| (r, String::new())),
                Phase::Join => node
                    .backend
                    .cluster_join(&job, &rendezvous)
                    .and_then(|r| Ok((Vec::new(), to_json(&r)?))),
            };
            (inv_host, node.backend.label(), out)
        });
        // The backend bounds its own work; this bound covers a backend that does not.
        let (host, label, out) = tokio::time::timeout(dl + CLUSTER_GRACE, work)
            .await
            .map_err(|_| {
                Status::deadline_exceeded(format!(
                    "cluster {} did not finish within {:.1} s",
                    phase.as_str(),
                    dl.as_secs_f64()
                ))
            })?
            .map_err(|e| Status::internal(format!("cluster work: {e}")))?;
        let (rendezvous, node_result_json) = out.map_err(|e| match e {
            ProbeError::Timeout { .. } => Status::deadline_exceeded(e.to_string()),
            ProbeError::Busy(m) => Status::resource_exhausted(format!("BUSY: {m}")),
            ProbeError::Unavailable(m) if m == ddpcheck_core::cluster::REAL_JOIN_UNAVAILABLE => {
                Status::unimplemented(m)
            }
            // No driver, GPU or NCCL on this node: it cannot take part.
            ProbeError::Unavailable(m) => Status::failed_precondition(m),
            other => probe_status(&other),
        })?;
        Ok(Response::new(ClusterCollectiveReply {
            hostname: host.unwrap_or_else(engine::local_hostname),
            backend_label: label,
            rendezvous,
            node_result_json,
        }))
    }
}

/// A work call refused because the daemon is stopping.
const NO_NEW_RUN: &str = "ddpcheckd is stopping: no new run starts";

/// Slack past a cluster phase's deadline before the daemon answers for a backend that overran.
const CLUSTER_GRACE: Duration = Duration::from_secs(2);
