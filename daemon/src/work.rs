//! Work calls on the node: single flight (and the rate limit), the run on a blocking thread
//! with its progress streamed, the finished run stored (or kept in memory, [`crate::unsaved`])
//! and its one outcome sent. A preflight that asks to wait when the node is busy joins the same
//! preflight in progress ([`crate::inflight`]) or waits for the node, within its own bound.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use ddpcheck_core::backend::Progress as CoreProgress;
use ddpcheck_core::ProbeError;
use ddpcheck_proto::v1::{work_event, Progress, Report, WorkEvent};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::Stream;
use tonic::Status;

use crate::history::FinishedRow;
use crate::inflight::{Outcome, Publisher, Watch};
use crate::node::{Node, WorkGuard};
use ddpcheck_engine as engine;

pub(crate) type EventStream = Pin<Box<dyn Stream<Item = Result<WorkEvent, Status>> + Send>>;

type Sender = mpsc::Sender<Result<WorkEvent, Status>>;

/// How often a caller that waits for the node tries it again.
const WAIT_POLL: Duration = Duration::from_millis(100);

/// A work call refused because the daemon is stopping.
const NO_NEW_RUN: &str = "ddpcheckd is stopping: no new run starts";

/// A failed run's status, the error itself beside it: the client gives the same exit code as a
/// local run (BUSY 4 as a second test on the node, TIMEOUT 5, a failed GPU 2).
pub(crate) fn probe_status(e: &ProbeError) -> Status {
    ddpcheck_proto::status::status_of(e)
}

/// What a finished run shows on `/metrics`, once it is known to be the node's verdict.
type Publish = Box<dyn FnOnce(&Node) + Send>;

/// Outcome of a finished work call, ready for the history, the metrics and the stream.
pub(crate) struct Finished {
    pub(crate) report: Report,
    pub(crate) busbw_large: Option<f64>,
    /// Its gauges; never shown for a run the daemon's own stop interrupted.
    publish: Option<Publish>,
}

impl Finished {
    /// A report with a verdict and an exit code (preflight, explain), which the history keeps.
    pub(crate) fn judged<T: serde::Serialize>(
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
    pub(crate) fn plain<T: serde::Serialize>(
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

    pub(crate) fn publishing(mut self, publish: impl FnOnce(&Node) + Send + 'static) -> Finished {
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

/// Takes the node for a preflight or benchmark: within the rate limit (a token is taken only
/// when the work starts) and single flight. Both refusals are RESOURCE_EXHAUSTED, told apart by
/// the message ("rate limited: ..." or "BUSY: ...") and counted in their own metric.
pub(crate) fn start_work(node: &Node, call: &'static str) -> Result<WorkGuard, Status> {
    if node.stopping() {
        return Err(Status::unavailable(NO_NEW_RUN));
    }
    match node.work_limiter.admit(|| node.try_start_work(call)) {
        Ok(Ok(guard)) => Ok(guard),
        Ok(Err(busy)) => {
            node.metrics.work_rejected(call);
            Err(Status::resource_exhausted(busy.to_string()))
        }
        Err(limited) => {
            node.metrics.work_rate_limited(call);
            Err(Status::resource_exhausted(limited.message(call)))
        }
    }
}

/// How a work call meets a node that is busy.
pub(crate) struct Meet {
    /// What others must ask to join this run (a preflight's parameters); none: not joinable.
    pub key: Option<String>,
    /// How long to wait (joining the same run, or for the node) instead of BUSY; none: BUSY.
    pub wait: Option<Duration>,
}

impl Meet {
    pub(crate) const BUSY: Meet = Meet {
        key: None,
        wait: None,
    };
}

/// What a work closure is: the run itself, on a blocking thread.
pub(crate) trait Work:
    FnOnce(&Node, &mut dyn FnMut(CoreProgress)) -> Result<Finished, ProbeError> + Send + 'static
{
}
impl<F> Work for F where
    F: FnOnce(&Node, &mut dyn FnMut(CoreProgress)) -> Result<Finished, ProbeError> + Send + 'static
{
}

/// Runs `work` under the single-flight guard, streaming its progress; a busy node is BUSY, or,
/// with `meet.wait`, joined or waited for.
pub(crate) fn spawn_work(
    node: &Arc<Node>,
    call: &'static str,
    meet: Meet,
    work: impl Work,
) -> Result<EventStream, Status> {
    let (tx, rx) = mpsc::channel::<Result<WorkEvent, Status>>(64);
    let Some(wait) = meet.wait else {
        let guard = start_work(node, call)?;
        run(node.clone(), call, meet.key, guard, tx, work);
        return Ok(Box::pin(ReceiverStream::new(rx)));
    };
    if node.stopping() {
        return Err(Status::unavailable(NO_NEW_RUN));
    }
    // A caller that waits is counted refused only if its wait runs out.
    match node.work_limiter.admit(|| node.try_start_work(call)) {
        Ok(Ok(guard)) => run(node.clone(), call, meet.key, guard, tx, work),
        _ => {
            tokio::spawn(wait_then_run(node.clone(), call, meet.key, wait, tx, work));
        }
    }
    Ok(Box::pin(ReceiverStream::new(rx)))
}

/// The caller waits: joins the same run in progress, or takes the node once it is free; past
/// `wait`, TIMEOUT (a prolog never passes a node it could not check).
async fn wait_then_run(
    node: Arc<Node>,
    call: &'static str,
    key: Option<String>,
    wait: Duration,
    tx: Sender,
    work: impl Work,
) {
    let deadline = Instant::now() + wait;
    loop {
        if let Some(w) = key.as_deref().and_then(|k| node.inflight.join(call, k)) {
            tracing::info!("{call}: the node is busy with the same {call}: joined it");
            let outcome = tokio::select! {
                o = outcome_of(w) => o,
                () = tokio::time::sleep_until(deadline) => Err(timed_out(wait)),
                () = tx.closed() => return,
            };
            let _ = tx.send(outcome.map(report_event)).await;
            return;
        }
        if node.stopping() {
            let _ = tx.send(Err(Status::unavailable(NO_NEW_RUN))).await;
            return;
        }
        if let Ok(Ok(guard)) = node.work_limiter.admit(|| node.try_start_work(call)) {
            run(node, call, key, guard, tx, work);
            return;
        }
        if Instant::now() >= deadline {
            node.metrics.work_rejected(call);
            let _ = tx.send(Err(timed_out(wait))).await;
            return;
        }
        tokio::select! {
            () = tokio::time::sleep(WAIT_POLL) => {}
            () = tx.closed() => return,
        }
    }
}

/// The joined run's outcome, once it is there.
async fn outcome_of(mut w: Watch) -> Outcome {
    match w.wait_for(Option::is_some).await {
        Ok(o) => o
            .clone()
            .unwrap_or_else(|| Err(Status::internal("no outcome"))),
        Err(_) => Err(Status::internal(
            "the run in progress ended without an outcome",
        )),
    }
}

/// The wait for a busy node ran out: TIMEOUT, nothing judged.
fn timed_out(wait: Duration) -> Status {
    probe_status(&ProbeError::Timeout {
        stage: "the wait for the test in progress on this node".into(),
        seconds: wait.as_secs_f64(),
    })
}

fn report_event(r: Report) -> WorkEvent {
    WorkEvent {
        event: Some(work_event::Event::Report(r)),
    }
}

/// Runs `work` on a blocking thread; the guard is held until it returns.
fn run(
    node: Arc<Node>,
    call: &'static str,
    key: Option<String>,
    guard: WorkGuard,
    tx: Sender,
    work: impl Work,
) {
    let publisher = key.map(|k| node.inflight.open(call, k));
    tokio::task::spawn_blocking(move || {
        let started = engine::unix_now();
        let label = node.backend.label();
        let backend_kind = node.backend.kind().as_str();
        node.flush_unsaved();
        let id = node.with_history(|h| h.begin(call, backend_kind, &label, started));
        if let Err(e) = &id {
            tracing::warn!("history: {e}: the run is stored when it ends, or kept in memory");
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
        let row = FinishedRow {
            id: id.ok(),
            kind: call.into(),
            backend: backend_kind.into(),
            backend_label: label,
            started_unix: started,
            finished_unix: engine::unix_now(),
            status: "complete",
            verdict: None,
            exit_code: None,
            busbw_large_gbps: None,
            json: None,
            error: None,
        };
        let delivered = finish(&node, call, outcome, row);
        deliver(&node, publisher, &tx, delivered);
        node.prune_history();
    });
}

/// Stores a finished run (or keeps it in memory) and makes its outcome for the caller.
fn finish(
    node: &Node,
    call: &'static str,
    outcome: Result<Finished, ProbeError>,
    mut row: FinishedRow,
) -> Outcome {
    let interrupted = interrupted_by_us(node, &outcome);
    node.metrics
        .work_ran(call, outcome.is_ok() && interrupted.is_none());
    if let Some(why) = interrupted {
        // Not the node's verdict: stored `interrupted`, never the last verdict, no gauge.
        row.status = "interrupted";
        row.error = Some(why.clone());
        let _ = node.store_finished(row);
        return Err(probe_status(&ProbeError::Interrupted(why)));
    }
    match outcome {
        Ok(mut f) => {
            if let Some(publish) = f.publish.take() {
                publish(node);
            }
            let verdict = (!f.report.verdict.is_empty()).then(|| f.report.verdict.clone());
            // Only a judged report (one with a verdict) has an exit code to keep.
            row.exit_code = verdict.is_some().then_some(f.report.exit_code);
            row.verdict = verdict;
            row.busbw_large_gbps = f.busbw_large;
            row.json = Some(f.report.json.clone());
            if let Err(unstored) = node.store_finished(row) {
                // The caller is told, in the report itself, that it is held in memory only.
                f.report.json = unstored.json.unwrap_or(f.report.json);
            }
            Ok(f.report)
        }
        Err(e) => {
            row.status = "failed";
            row.error = Some(e.to_string());
            let _ = node.store_finished(row);
            Err(probe_status(&e))
        }
    }
}

/// The outcome to whoever joined the run, then to its own caller.
fn deliver(node: &Node, publisher: Option<Publisher>, tx: &Sender, outcome: Outcome) {
    if let Some(p) = publisher {
        node.inflight.deliver(p, &outcome);
    }
    let _ = tx.blocking_send(outcome.map(report_event));
}

pub(crate) fn to_json<T: serde::Serialize>(v: &T) -> Result<String, ProbeError> {
    serde_json::to_string(v).map_err(|e| ProbeError::Worker(format!("report serialisation: {e}")))
}
