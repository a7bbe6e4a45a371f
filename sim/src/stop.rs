//! Ending simulated hangs when the process is told to stop: the simulator's counterpart of
//! ending a real worker's process group (`ddpcheck_gpu::children::terminate_all`). Tested
//! through a daemon (`cli/tests/hostile/stop.rs`): an interrupt in this crate's unit tests would
//! end the hangs of the tests running beside it.

use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use ddpcheck_core::ProbeError;

/// How many times hangs were interrupted; a hang ends when this changes under it.
static GENERATION: Mutex<u64> = Mutex::new(0);
static CHANGED: Condvar = Condvar::new();

/// Ends every simulated hang sleeping now; hangs that begin later sleep as usual.
pub fn interrupt_hangs() {
    let mut g = GENERATION.lock().unwrap_or_else(|p| p.into_inner());
    *g = g.wrapping_add(1);
    CHANGED.notify_all();
}

/// Sleeps `d`; returns true when [`interrupt_hangs`] ended the sleep early.
pub fn sleep_unless_interrupted(d: Duration) -> bool {
    let end = Instant::now() + d;
    let mut g = GENERATION.lock().unwrap_or_else(|p| p.into_inner());
    let start = *g;
    while *g == start {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        g = CHANGED
            .wait_timeout(g, left)
            .map(|(g, _)| g)
            .unwrap_or_else(|p| p.into_inner().0);
    }
    true
}

/// `hang`: the run never finishes; sleep until the caller's deadline and report it. A hang
/// ends early, as a real worker's would, when the process is told to stop
/// ([`interrupt_hangs`]).
pub fn hang(deadline_s: f64, stage: &str) -> ProbeError {
    let d = Duration::try_from_secs_f64(deadline_s).unwrap_or(Duration::ZERO);
    if sleep_unless_interrupted(d) {
        return ProbeError::Worker(format!("{stage} was stopped before its deadline"));
    }
    ProbeError::Timeout {
        stage: stage.into(),
        seconds: d.as_secs_f64(),
    }
}
