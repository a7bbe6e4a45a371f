//! The dedicated NVML thread (invariant 2): jobs over a channel, a deadline per NVML step, and
//! callers that never queue behind a hung call.
//!
//! Every job runs on one thread that owns the NVML session. A job announces each step it takes
//! (`Tracker::step`, with the GPUs the step touches); each step gets the full deadline, so a
//! slow but progressing read of many GPUs is not "stuck", while one NVML call that hangs is. A
//! caller waits for its answer until the running step passes its deadline, then gets `Stuck`
//! and leaves; while that step stays past its deadline every new call gets `Stuck` at once,
//! without queueing. Jobs whose caller gave up are skipped when the thread comes back.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use ddpcheck_core::explain::platform::GpuFabricState;
use ddpcheck_core::node_gpus::{GpuInfo, NodeInventory};
use ddpcheck_core::ProbeError;

use super::snapshot::{Involved, Partial};
use super::TopologyDetail;

/// A caller gives up after this many deadlines even if the job keeps making progress (it only
/// guards against a job that never ends; a real inventory is a few NVML calls per GPU).
const OVERALL_DEADLINES: u32 = 8;

/// What the NVML thread can be asked. The real one talks to NVML; tests use fakes.
pub(crate) trait Reader {
    fn inventory(&mut self, t: &Tracker) -> Result<NodeInventory, ProbeError>;
    fn topology(&mut self, t: &Tracker, gpus: &[GpuInfo]) -> Result<TopologyDetail, ProbeError>;
    /// Each GPU's fabric registration, those with a fabric only. Default: none read.
    fn fabric(&mut self, t: &Tracker, gpus: &[GpuInfo]) -> Result<Vec<GpuFabricState>, ProbeError> {
        let _ = (t, gpus);
        Ok(Vec::new())
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Busy {
    pub label: String,
    pub involved: Involved,
    pub since: Instant,
    pub step_deadline: Instant,
}

#[derive(Default)]
pub(crate) struct State {
    /// Set once NVML is known to be unusable: the one line every call answers with.
    pub unavailable: Option<String>,
    /// The job (or initialisation) running on the thread now.
    pub busy: Option<Busy>,
    /// The last complete inventory and when it was read.
    pub snapshot: Option<(NodeInventory, Instant)>,
    /// The inventory being read now.
    pub partial: Option<Partial>,
}

pub(crate) struct Shared {
    state: Mutex<State>,
    deadline: Duration,
}

impl Shared {
    /// The state; a poisoned lock still holds usable data (we never panic while holding it).
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The running job's handle for announcing steps and publishing readings.
pub(crate) struct Tracker {
    shared: Arc<Shared>,
}

impl Tracker {
    /// Starts a new NVML step touching `involved`, with a fresh deadline.
    pub fn step(&self, involved: Involved) {
        let deadline = self.shared.deadline;
        if let Some(b) = self.shared.lock().busy.as_mut() {
            b.involved = involved;
            b.step_deadline = Instant::now() + deadline;
        }
    }

    pub fn begin_inventory(&self, driver: Option<String>, cuda: Option<String>, count: u32) {
        self.shared.lock().partial = Some(Partial {
            driver_version: driver,
            cuda_driver_version: cuda,
            device_count: Some(count),
            gpus: vec![],
        });
    }

    pub fn gpu_read(&self, g: &GpuInfo) {
        if let Some(p) = self.shared.lock().partial.as_mut() {
            p.gpus.push(g.clone());
        }
    }

    /// Stores a complete inventory as the snapshot (also when its caller has given up).
    pub fn finish_inventory(&self, inv: &NodeInventory) {
        let mut st = self.shared.lock();
        st.snapshot = Some((inv.clone(), Instant::now()));
        st.partial = None;
    }

    fn start(&self, label: &str, involved: Involved) {
        let now = Instant::now();
        self.shared.lock().busy = Some(Busy {
            label: label.to_string(),
            involved,
            since: now,
            step_deadline: now + self.shared.deadline,
        });
    }

    fn idle(&self) {
        let mut st = self.shared.lock();
        st.busy = None;
        st.partial = None;
    }
}

type JobFn = Box<dyn FnOnce(&mut dyn Reader, &Tracker) + Send>;

struct Job {
    label: String,
    involved: Involved,
    cancelled: Arc<AtomicBool>,
    run: JobFn,
}

/// Handed to the thread's body: serve jobs with a reader, or declare NVML unusable.
pub(crate) struct Serve {
    rx: Receiver<Job>,
    tracker: Tracker,
}

impl Serve {
    /// Runs jobs until every sender is gone.
    pub fn serve(self, reader: &mut dyn Reader) {
        self.tracker.idle();
        while let Ok(job) = self.rx.recv() {
            if job.cancelled.load(Ordering::SeqCst) {
                continue;
            }
            self.tracker.start(&job.label, job.involved);
            let run = job.run;
            let tracker = &self.tracker;
            // A panic inside a job (a bug, or a library assert) must not end the thread: its
            // caller sees its answer channel close and reports that, later calls still work.
            if catch_unwind(AssertUnwindSafe(|| run(&mut *reader, tracker))).is_err() {
                tracing::error!(job = %job.label, "NVML job panicked");
            }
            self.tracker.idle();
        }
    }

    /// Records the one-line reason and ends the thread; queued callers then read the reason.
    pub fn unavailable(self, line: String) {
        let mut st = self.tracker.shared.lock();
        st.unavailable = Some(line);
        st.busy = None;
    }
}

/// Why a call returned without an answer from the thread.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Outcome<R> {
    Done(R),
    Unavailable(String),
    Stuck(StuckInfo),
}

/// The step the thread hangs in.
#[derive(Clone, Debug, PartialEq)]
pub struct StuckInfo {
    /// The job that hangs (`NVML inventory`, `NVML topology`, `NVML init`).
    pub label: String,
    /// The GPUs its current step touches.
    pub involved: Involved,
    /// Time since the job started.
    pub running_for: Duration,
}

pub(crate) struct Worker {
    tx: Option<Sender<Job>>,
    shared: Arc<Shared>,
}

impl Worker {
    /// Spawns the thread. `body` runs on it: it opens NVML (marked as the busy step `NVML init`,
    /// so a hanging init is seen as stuck) and then calls `Serve::serve` or `Serve::unavailable`.
    pub fn spawn(deadline: Duration, body: impl FnOnce(Serve) + Send + 'static) -> Worker {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            deadline,
        });
        let (tx, rx) = mpsc::channel::<Job>();
        let tracker = Tracker {
            shared: shared.clone(),
        };
        tracker.start("NVML init", Involved::All);
        let serve = Serve { rx, tracker };
        let spawned = std::thread::Builder::new()
            .name("nvml".into())
            .spawn(move || body(serve));
        match spawned {
            Ok(_) => Worker {
                tx: Some(tx),
                shared,
            },
            Err(e) => {
                {
                    let mut st = shared.lock();
                    st.busy = None;
                    st.unavailable = Some(format!(
                        "NVML unavailable: cannot start the NVML thread: {e}"
                    ));
                }
                Worker { tx: None, shared }
            }
        }
    }

    pub fn shared(&self) -> &Shared {
        &self.shared
    }

    pub fn deadline(&self) -> Duration {
        self.shared.deadline
    }

    /// The step the thread hangs in now, if it is past its deadline.
    pub fn stuck_now(&self) -> Option<StuckInfo> {
        let st = self.shared.lock();
        let b = st.busy.as_ref()?;
        let now = Instant::now();
        (now >= b.step_deadline).then(|| StuckInfo {
            label: b.label.clone(),
            involved: b.involved.clone(),
            running_for: now.saturating_duration_since(b.since),
        })
    }

    fn unavailable_line(&self) -> Option<String> {
        self.shared.lock().unavailable.clone()
    }

    fn gone(&self) -> String {
        self.unavailable_line().unwrap_or_else(|| {
            "NVML unavailable: the NVML thread ended the call without an answer (see the log)"
                .into()
        })
    }

    /// Runs `f` on the NVML thread and waits for its answer within the step deadlines.
    pub fn call<R: Send + 'static>(
        &self,
        label: &str,
        involved: Involved,
        f: impl FnOnce(&mut dyn Reader, &Tracker) -> R + Send + 'static,
    ) -> Outcome<R> {
        if let Some(line) = self.unavailable_line() {
            return Outcome::Unavailable(line);
        }
        if let Some(s) = self.stuck_now() {
            return Outcome::Stuck(s);
        }
        let (rtx, rrx) = mpsc::sync_channel::<R>(1);
        let cancelled = Arc::new(AtomicBool::new(false));
        let job = Job {
            label: label.to_string(),
            involved: involved.clone(),
            cancelled: cancelled.clone(),
            run: Box::new(move |r, t| {
                let _ = rtx.send(f(r, t));
            }),
        };
        let sent = match &self.tx {
            Some(tx) => tx.send(job).is_ok(),
            None => false,
        };
        if !sent {
            return Outcome::Unavailable(self.gone());
        }
        let deadline = self.shared.deadline;
        let overall = Instant::now() + deadline * OVERALL_DEADLINES;
        loop {
            let now = Instant::now();
            // Wake when the running step would pass its deadline (or a deadline from now if
            // the thread is between jobs), never past the overall cap.
            let wake = {
                let st = self.shared.lock();
                st.busy
                    .as_ref()
                    .map(|b| b.step_deadline)
                    .unwrap_or(now + deadline)
            }
            .min(overall);
            match rrx.recv_timeout(wake.saturating_duration_since(now)) {
                Ok(r) => return Outcome::Done(r),
                Err(RecvTimeoutError::Disconnected) => return Outcome::Unavailable(self.gone()),
                Err(RecvTimeoutError::Timeout) => {
                    let stuck = self.stuck_now().or_else(|| {
                        (Instant::now() >= overall).then(|| StuckInfo {
                            label: label.to_string(),
                            involved: involved.clone(),
                            running_for: deadline * OVERALL_DEADLINES,
                        })
                    });
                    if let Some(s) = stuck {
                        // One last look: the answer may have landed just now.
                        if let Ok(r) = rrx.try_recv() {
                            return Outcome::Done(r);
                        }
                        cancelled.store(true, Ordering::SeqCst);
                        return Outcome::Stuck(s);
                    }
                }
            }
        }
    }
}
