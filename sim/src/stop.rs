//! Ending simulated hangs when the process is told to stop: the simulator's counterpart of
//! ending a real worker's process group (`ddpcheck_gpu::children::terminate_all`). Tested
//! through a daemon (`cli/tests/hostile/stop.rs`, `signals.rs`): a stop in this crate's unit
//! tests would end the hangs of the tests running beside it, and every one after.

use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use ddpcheck_core::ProbeError;

/// Whether the process is stopping; every hang ends once it is.
static STOPPING: Mutex<bool> = Mutex::new(false);
static CHANGED: Condvar = Condvar::new();

/// Ends every simulated hang sleeping now, and every one that begins later at once: the process
/// is stopping, and a run still on its way to its hang (a step before it taking its time) must
/// not start a sleep that nothing would end.
pub fn stop_hangs() {
    let mut stopping = STOPPING.lock().unwrap_or_else(|p| p.into_inner());
    *stopping = true;
    CHANGED.notify_all();
}

/// Sleeps `d`; returns true when [`stop_hangs`] ended the sleep early (or had already been
/// called).
pub fn sleep_unless_stopped(d: Duration) -> bool {
    let end = Instant::now() + d;
    let mut stopping = STOPPING.lock().unwrap_or_else(|p| p.into_inner());
    while !*stopping {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        stopping = CHANGED
            .wait_timeout(stopping, left)
            .map(|(g, _)| g)
            .unwrap_or_else(|p| p.into_inner().0);
    }
    true
}

/// `hang`: the run never finishes; sleep until the caller's deadline and report it. A hang
/// ends early, as a real worker's would, when the process is told to stop ([`stop_hangs`]).
pub fn hang(deadline_s: f64, stage: &str) -> ProbeError {
    let d = Duration::try_from_secs_f64(deadline_s).unwrap_or(Duration::ZERO);
    if sleep_unless_stopped(d) {
        return ProbeError::Worker(format!("{stage} was stopped before its deadline"));
    }
    ProbeError::Timeout {
        stage: stage.into(),
        seconds: d.as_secs_f64(),
    }
}
