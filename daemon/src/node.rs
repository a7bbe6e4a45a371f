//! The daemon's shared state: backend, snapshot, metrics, history and the single-flight guard.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use ddpcheck_core::collective::LARGE_MESSAGE;
use ddpcheck_core::node_gpus::{NodeInventory, ProbeState};
use ddpcheck_core::report::{DdpReport, PreflightReport};
use ddpcheck_core::topology::TopologyMatrix;
use ddpcheck_core::FullBackend;
use tokio::sync::OwnedMutexGuard;

use crate::history::{FinishedRow, History, StoredReport, RECENT_BUSBW};
use crate::metrics::Metrics;
use crate::ratelimit::WorkLimiter;
use crate::unsaved::{Unsaved, Unstored};
use ddpcheck_engine as engine;
use ddpcheck_engine::lock::{LockError, NodeLock};

/// What readers see: the latest inventory and topology, never a live GPU call.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub taken: Instant,
    pub taken_unix: f64,
    pub inventory: Result<NodeInventory, SnapshotError>,
    pub topology: Option<TopologyMatrix>,
}

/// Why a snapshot holds no inventory: none taken yet, or the backend's error.
#[derive(Clone, Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("no snapshot yet")]
    NotYet,
    #[error(transparent)]
    Probe(#[from] ddpcheck_core::ProbeError),
}

/// Why the node takes no new work: a test already runs on it, in this daemon or beside it.
/// Said as BUSY (RESOURCE_EXHAUSTED) to the caller.
#[derive(Debug, thiserror::Error)]
pub enum NodeBusy {
    #[error("BUSY: another test is already running in this daemon; {0} not started")]
    InDaemon(String),
    /// Another process holds the node lock (its words name it).
    #[error(transparent)]
    Locked(LockError),
    #[error("BUSY: cannot take the node lock: {0}")]
    Lock(LockError),
}

/// Why the daemon cannot tell its last preflight (`--max-age` then reuses none).
#[derive(Debug, thiserror::Error)]
pub enum LastPreflightError {
    #[error(transparent)]
    Lost(#[from] crate::unsaved::LostPreflight),
    #[error("{0}")]
    History(#[from] crate::history::HistoryError),
}

impl Snapshot {
    pub fn empty() -> Snapshot {
        Snapshot {
            taken: Instant::now(),
            taken_unix: 0.0,
            inventory: Err(SnapshotError::NotYet),
            topology: None,
        }
    }
}

pub struct Node {
    pub backend: Arc<dyn FullBackend>,
    pub snapshot: RwLock<Snapshot>,
    pub metrics: Metrics,
    pub history: Mutex<History>,
    pub lock_path: PathBuf,
    work: Arc<tokio::sync::Mutex<()>>,
    /// Rate limit of work-starting calls (off unless the daemon sets one).
    pub work_limiter: WorkLimiter,
    /// Runs the history keeps (`None`: all); see [`Node::prune_history`].
    pub history_max_runs: Option<u64>,
    /// Folders whose model factories a caller may name ([`crate::factories`]).
    pub factory_dirs: Vec<std::path::PathBuf>,
    /// Set once the daemon was told to stop: a run that ends after it was ended by the stop.
    stopping: AtomicBool,
    /// Variables a caller may set beyond the transport and algorithm settings
    /// (`core::caller_env`).
    pub allow_env: Vec<String>,
    /// Finished runs the history has not stored yet (always locked after `history`).
    unsaved: Mutex<Unsaved>,
    /// The preflight in progress, for a prolog that meets it to join ([`crate::inflight`]).
    pub inflight: crate::inflight::Slot,
}

/// Held while a work-starting call runs: the in-process guard and the node-wide file lock.
pub struct WorkGuard {
    _inproc: OwnedMutexGuard<()>,
    _file: NodeLock,
}

impl Node {
    pub fn new(backend: Arc<dyn FullBackend>, history: History, lock_path: PathBuf) -> Node {
        let metrics = Metrics::new(backend.kind().as_str(), &backend.label());
        let node = Node {
            backend,
            snapshot: RwLock::new(Snapshot::empty()),
            metrics,
            history: Mutex::new(history),
            lock_path,
            work: Arc::new(tokio::sync::Mutex::new(())),
            work_limiter: WorkLimiter::off(),
            history_max_runs: None,
            factory_dirs: Vec::new(),
            stopping: AtomicBool::new(false),
            allow_env: Vec::new(),
            unsaved: Mutex::new(Unsaved::default()),
            inflight: crate::inflight::Slot::default(),
        };
        node.restore_metrics();
        node
    }

    /// Shows the last stored preflight and DDP benchmark of this backend again, so that a
    /// restart (an upgrade, a reboot) does not clear the verdict an alert or a dashboard reads;
    /// `ddpcheck_preflight_last_run_timestamp_seconds` still says how old it is. Counters start
    /// from zero, as Prometheus expects of a restarted process. A stored report that cannot be
    /// read is left out: the history keeps it, the metrics show nothing for it.
    fn restore_metrics(&self) {
        let label = self.backend.label();
        let latest = |kind: &str| {
            self.with_history(|h| h.latest(kind, &label))
                .ok()
                .flatten()
                .and_then(|s| Some((s.started_unix, s.json?)))
        };
        if let Some((started, json)) = latest("preflight") {
            if let Ok(r) = serde_json::from_str::<PreflightReport>(&json) {
                self.metrics.show_preflight(&r, started + r.wall_seconds);
                self.show_causes(&r, &self.history_before(&r));
            }
        }
        if let Some((_, json)) = latest("bench_ddp") {
            if let Ok(r) = serde_json::from_str::<DdpReport>(&json) {
                self.metrics.set_ddp(&r.results);
            }
        }
    }

    /// The node's recent large-message busbw before the stored preflight `r` (which the
    /// history holds as its newest entry where it measured one).
    fn history_before(&self, r: &PreflightReport) -> Vec<f64> {
        let mut h = self.recent_busbw(RECENT_BUSBW + 1);
        let measured = r
            .all_reduce
            .as_ref()
            .and_then(|s| s.peak_busbw(LARGE_MESSAGE))
            .is_some();
        if measured {
            h.pop();
        }
        let skip = h.len().saturating_sub(RECENT_BUSBW as usize);
        h.split_off(skip)
    }

    /// The node's last `n` all-reduce bus bandwidths from the history (none without one).
    pub fn recent_busbw(&self, n: u32) -> Vec<f64> {
        let label = self.backend.label();
        self.with_history(|h| h.recent_busbw(&label, n))
            .unwrap_or_default()
    }

    /// The causes of low bandwidth after preflight `r` (the platform read now, the preflight's
    /// figures, `history` before it) as the cause metric.
    pub fn show_causes(&self, r: &PreflightReport, history: &[f64]) {
        let e = engine::explain::causes_after_preflight(self.backend.as_ref(), r, history);
        self.metrics.set_causes(&r.header.provenance.hostname, &e);
    }

    /// The daemon is stopping: from now on a run that ends, ends because its children were
    /// stopped by us, and is stored `interrupted` (no verdict of the node). Call it before
    /// ending the children.
    pub fn begin_stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }

    /// Whether [`Node::begin_stop`] was called.
    pub fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// Single flight: succeeds only if no other test runs on this node (daemon or local CLI).
    pub fn try_start_work(&self, call: &str) -> Result<WorkGuard, NodeBusy> {
        let inproc = self
            .work
            .clone()
            .try_lock_owned()
            .map_err(|_| NodeBusy::InDaemon(call.to_string()))?;
        let file = NodeLock::try_acquire(&self.lock_path, call).map_err(|e| match e {
            LockError::Busy { .. } => NodeBusy::Locked(e),
            other => NodeBusy::Lock(other),
        })?;
        Ok(WorkGuard {
            _inproc: inproc,
            _file: file,
        })
    }

    pub fn read_snapshot(&self) -> Snapshot {
        match self.snapshot.read() {
            Ok(s) => s.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// Refreshes the snapshot from the backend (blocking; run on a blocking thread).
    pub fn collect(&self) {
        let t0 = Instant::now();
        let inv = self.backend.inventory();
        self.metrics
            .collector_ran("inventory", inv.is_ok(), t0.elapsed().as_secs_f64());
        let mut topology = None;
        if let Ok(inv) = &inv {
            self.metrics.set_inventory(inv);
            let t1 = Instant::now();
            let topo = self.backend.topology(&inv.gpus);
            self.metrics
                .collector_ran("topology", topo.is_ok(), t1.elapsed().as_secs_f64());
            if let Ok(t) = &topo {
                self.metrics.set_topology(t);
            }
            topology = topo.ok();
        }
        let snap = Snapshot {
            taken: Instant::now(),
            taken_unix: engine::unix_now(),
            inventory: inv.map_err(SnapshotError::from),
            topology,
        };
        match self.snapshot.write() {
            Ok(mut s) => *s = snap,
            Err(p) => *p.into_inner() = snap,
        }
    }

    /// A collection ran past its deadline: every GPU of the last snapshot is marked stuck (its
    /// readings are old), the collector counts as failed. The snapshot keeps its time, so its age
    /// keeps growing for readers.
    pub fn mark_collection_stuck(&self, after: Duration) {
        self.metrics
            .collector_ran("inventory", false, after.as_secs_f64());
        let mut snap = match self.snapshot.write() {
            Ok(s) => s,
            Err(p) => p.into_inner(),
        };
        if let Ok(inv) = snap.inventory.as_mut() {
            for g in &mut inv.gpus {
                if g.state == ProbeState::Ok {
                    g.state = ProbeState::Stuck;
                }
            }
            self.metrics.set_inventory(inv);
        }
    }

    pub fn snapshot_age(&self) -> Duration {
        self.read_snapshot().taken.elapsed()
    }

    /// Deletes the oldest finished runs beyond `history_max_runs`, so that a node checked
    /// before every job does not fill its disk; a failure is logged, never fatal.
    pub fn prune_history(&self) {
        let Some(keep) = self.history_max_runs else {
            return;
        };
        match self.with_history(|h| h.prune(keep)) {
            Ok(0) => {}
            Ok(n) => tracing::info!("history: deleted the {n} oldest run(s), keeping {keep}"),
            Err(e) => tracing::warn!("history: pruning to {keep} runs: {e}"),
        }
    }

    /// Stores a finished run, after any kept before it; where the history refuses, keeps it in
    /// memory (counted in the metrics) and returns why.
    pub fn store_finished(&self, row: FinishedRow) -> Result<(), Unstored> {
        self.with_history(|h| {
            let mut u = lock(&self.unsaved);
            let stored = u.store(h, row);
            match &stored {
                Ok(()) => self.metrics.set_unsaved(u.len()),
                Err(e) => {
                    tracing::error!(
                        "history: {}: the run is kept in memory and the write retried",
                        e.why
                    );
                    self.metrics.history_write_failed(u.len());
                }
            }
            stored
        })
    }

    /// Retries the writes kept in memory (each run's end, each collector tick).
    pub fn flush_unsaved(&self) {
        self.with_history(|h| {
            let mut u = lock(&self.unsaved);
            if u.is_empty() {
                return;
            }
            match u.flush(h) {
                Ok(()) => {
                    tracing::info!("history: the runs kept in memory are stored");
                    self.metrics.set_unsaved(0);
                }
                Err(e) => {
                    tracing::warn!("history: still cannot store {} run(s): {e}", u.len());
                    self.metrics.history_write_failed(u.len());
                }
            }
        });
    }

    /// The node's last preflight as its callers were told it: the newest kept in memory, else
    /// the history's newest finished one (a `failed` one included: no older verdict is reused
    /// past it). `Err` when the daemon cannot tell.
    pub fn last_preflight(&self) -> Result<Option<StoredReport>, LastPreflightError> {
        let label = self.backend.label();
        self.with_history(|h| {
            let u = lock(&self.unsaved);
            if let Some(r) = u.last_preflight(&label)? {
                return Ok(Some(r.as_stored()));
            }
            Ok(h.last_finished("preflight", &label)?)
        })
    }

    /// The runs kept in memory of `kind` (empty: all) for this backend, newest first.
    pub fn unsaved_rows(&self, kind: &str) -> Vec<StoredReport> {
        let label = self.backend.label();
        let u = lock(&self.unsaved);
        u.newest_first()
            .filter(|r| (kind.is_empty() || r.kind == kind) && r.backend_label == label)
            .map(FinishedRow::as_stored)
            .collect()
    }

    /// How many runs wait in memory for the history, and why the last write failed (none once
    /// one succeeded): `GetNode`'s words about the history.
    pub fn unsaved_summary(&self) -> (usize, Option<String>) {
        let u = lock(&self.unsaved);
        (u.len(), u.last_error.clone())
    }

    /// Runs `f` with the history, recovering from a poisoned lock (a panic elsewhere must not
    /// make the history unreachable).
    pub fn with_history<T>(&self, f: impl FnOnce(&History) -> T) -> T {
        match self.history.lock() {
            Ok(h) => f(&h),
            Err(p) => f(&p.into_inner()),
        }
    }
}

/// `m` locked, a poisoned lock recovered (a panic elsewhere must not lose the kept runs).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}
