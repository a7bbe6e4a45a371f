//! The `ddpcheck.v1` gRPC service: cheap reads from the snapshot and history, and single-flight
//! work-starting calls that stream progress and end with one report.

use std::sync::Arc;
use std::time::Duration;

use ddpcheck_core::caller_env;
use ddpcheck_core::cluster::{Phase, PhaseCall};
use ddpcheck_core::collective::LARGE_MESSAGE;
use ddpcheck_core::ddp::DdpRequest;
use ddpcheck_core::ProbeError;
use ddpcheck_proto::convert;
use ddpcheck_proto::v1::ddpcheck_server::Ddpcheck;
use ddpcheck_proto::v1::{
    BenchCollectivesRequest, BenchDdpRequest, ClusterCollectiveReply, ClusterCollectiveRequest,
    ExplainRequest, GetHistoryRequest, GetLastPreflightRequest, GetNodeRequest, GetTopologyRequest,
    HistoryReply, NodeSnapshot, PreflightRequest, Report,
};
use tonic::{Request, Response, Status};

use crate::history::{StoredReport, RECENT_BUSBW};
use crate::node::{LastPreflightError, Node};
use crate::work::{probe_status, to_json, EventStream, Finished, Meet, Work};
use ddpcheck_engine::{self as engine, CollectiveParams, ExplainParams, PreflightParams};

pub struct Service {
    pub node: Arc<Node>,
}

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

impl Service {
    /// Before any work: a caller sets only the variables that tune transports and algorithms,
    /// and those the configuration allows by name; never one that names code or a file.
    fn caller_env<'a>(
        &self,
        vars: impl IntoIterator<Item = &'a (String, String)>,
    ) -> Result<(), Status> {
        caller_env::check(vars, &self.node.allow_env)
            .map_err(|e| Status::permission_denied(e.to_string()))
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

    /// Runs `work` under single flight ([`crate::work`]).
    fn spawn_work(
        &self,
        call: &'static str,
        meet: Meet,
        work: impl Work,
    ) -> Result<EventStream, Status> {
        crate::work::spawn_work(&self.node, call, meet, work)
    }
}

/// What a preflight must share with the one in progress to join it: everything it measures
/// (its GPUs, sizes, counts, steps), not its deadline or how long it may wait.
fn preflight_key(p: &PreflightParams) -> String {
    format!(
        "{:?}",
        PreflightParams {
            deadline: None,
            wait_if_busy: None,
            ..p.clone()
        }
    )
}

/// A preflight that asked to wait: its key, to join the same preflight in progress; one that
/// did not is joinable, never waits.
fn preflight_meet(p: &PreflightParams) -> Meet {
    Meet {
        key: Some(preflight_key(p)),
        wait: p.wait_if_busy,
    }
}

/// The node's last preflight as `--max-age` may reuse it: a verdict; a failed run is none to
/// reuse (and no older one is reused past it); a daemon that cannot tell says so.
fn last_preflight_reply(
    last: Result<Option<StoredReport>, LastPreflightError>,
) -> Result<Report, Status> {
    match last {
        Err(why) => Err(Status::unavailable(why.to_string())),
        Ok(None) => Err(Status::not_found("no preflight has run on this node yet")),
        Ok(Some(r)) if r.status == "failed" => Err(Status::not_found(format!(
            "the last preflight failed ({}): no verdict to reuse",
            r.error.as_deref().unwrap_or("no reason kept")
        ))),
        Ok(Some(r)) => Ok(stored_to_proto(r)),
    }
}

#[tonic::async_trait]
impl Ddpcheck for Service {
    async fn get_node(
        &self,
        _req: Request<GetNodeRequest>,
    ) -> Result<Response<NodeSnapshot>, Status> {
        let snap = self.node.read_snapshot();
        // The history's trouble is the node daemon's finding: runs it could not store yet.
        let (unsaved, history_error) = self.node.unsaved_summary();
        let history_error = history_error.unwrap_or_default();
        let (inventory_json, error, hostname) = match &snap.inventory {
            Ok(inv) => (
                serde_json::to_string(inv).map_err(|e| Status::internal(e.to_string()))?,
                String::new(),
                inv.hostname.clone(),
            ),
            Err(e) => (String::new(), e.to_string(), engine::local_hostname()),
        };
        Ok(Response::new(NodeSnapshot {
            backend: self.node.backend.kind().as_str().into(),
            backend_label: self.node.backend.label(),
            hostname,
            age_seconds: snap.taken.elapsed().as_secs_f64(),
            inventory_json,
            error,
            daemon_version: engine::TOOL_VERSION.into(),
            history_error,
            unsaved_reports: u32::try_from(unsaved).unwrap_or(u32::MAX),
        }))
    }

    async fn get_topology(
        &self,
        _req: Request<GetTopologyRequest>,
    ) -> Result<Response<Report>, Status> {
        let snap = self.node.read_snapshot();
        let inv = snap
            .inventory
            .map_err(|e| Status::unavailable(e.to_string()))?;
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
        let node = self.node.clone();
        let last = tokio::task::spawn_blocking(move || node.last_preflight())
            .await
            .map_err(|e| Status::internal(format!("history read: {e}")))?;
        last_preflight_reply(last).map(Response::new)
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
        // Runs kept in memory (the history refused them) are the newest: they come first.
        let mut rows = self.node.unsaved_rows(&req.kind);
        let kind = req.kind;
        let stored = self
            .read_history(move |h| h.recent(&kind, Some(&label), limit))
            .await?
            .map_err(|e| Status::internal(e.to_string()))?;
        rows.extend(stored);
        rows.truncate(limit as usize);
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
        let meet = preflight_meet(&params);
        let stream = self.spawn_work("preflight", meet, move |node, progress| {
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
        let stream = self.spawn_work("bench_collectives", Meet::BUSY, move |node, progress| {
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
            .map_err(|e| Status::permission_denied(e.to_string()))?;
        let stream = self.spawn_work("bench_ddp", Meet::BUSY, move |node, progress| {
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
        let stream = self.spawn_work("explain", Meet::BUSY, move |node, progress| {
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
        let guard = self.node.try_start_work("cluster").map_err(|busy| {
            self.node.metrics.work_rejected("cluster");
            Status::resource_exhausted(busy.to_string())
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

/// Slack past a cluster phase's deadline before the daemon answers for a backend that overran.
const CLUSTER_GRACE: Duration = Duration::from_secs(2);

#[cfg(test)]
mod tests {
    use super::*;

    fn row(status: &str, error: Option<&str>) -> StoredReport {
        StoredReport {
            id: 7,
            kind: "preflight".into(),
            backend: "real".into(),
            backend_label: "real".into(),
            started_unix: 1.0,
            status: status.into(),
            verdict: (status == "complete").then(|| "OK".into()),
            exit_code: Some(0),
            json: Some("{}".into()),
            error: error.map(Into::into),
        }
    }

    #[test]
    fn only_a_verdict_is_reused_and_a_daemon_that_cannot_tell_says_so() {
        assert_eq!(
            last_preflight_reply(Ok(Some(row("complete", None))))
                .unwrap()
                .verdict,
            "OK"
        );
        let failed =
            last_preflight_reply(Ok(Some(row("failed", Some("worker died"))))).unwrap_err();
        assert_eq!(failed.code(), tonic::Code::NotFound);
        assert!(failed.message().contains("worker died"), "{failed:?}");
        let none = last_preflight_reply(Ok(None)).unwrap_err();
        assert_eq!(none.code(), tonic::Code::NotFound);
        let lost = crate::unsaved::LostPreflight {
            why: "dropped".into(),
        };
        let unknown = last_preflight_reply(Err(lost.into())).unwrap_err();
        assert!(unknown.message().contains("dropped"), "{unknown:?}");
        assert_eq!(unknown.code(), tonic::Code::Unavailable);
    }

    #[test]
    fn a_preflight_joins_another_of_the_same_measurement_whatever_its_deadline() {
        let a = PreflightParams {
            gpus: "0,1".into(),
            deadline: Some(Duration::from_secs(3)),
            ..PreflightParams::default()
        };
        let b = PreflightParams {
            deadline: Some(Duration::from_secs(30)),
            wait_if_busy: Some(Duration::from_secs(30)),
            ..a.clone()
        };
        assert_eq!(preflight_key(&a), preflight_key(&b));
        let c = PreflightParams {
            gpus: "0".into(),
            ..b.clone()
        };
        assert_ne!(preflight_key(&b), preflight_key(&c));
        assert_eq!(preflight_meet(&a).wait, None);
        assert_eq!(preflight_meet(&b).wait, Some(Duration::from_secs(30)));
    }
}
