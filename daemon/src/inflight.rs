//! The preflight in progress and its outcome, for a caller that meets it: a prolog whose node
//! is busy with a run of the same preflight (its client killed, another prolog's) joins it and
//! answers with its verdict, instead of a BUSY that would let a job start unchecked.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use ddpcheck_proto::v1::Report;
use tokio::sync::watch;
use tonic::Status;

/// What the run told (or would have told) its own caller.
pub type Outcome = Result<Report, Status>;

/// The outcome of a run, once it is there.
pub type Watch = watch::Receiver<Option<Outcome>>;

struct InFlight {
    seq: u64,
    call: &'static str,
    key: String,
    outcome: Watch,
}

/// The node's run in progress that others may join (none, or the one single flight admits).
#[derive(Default)]
pub struct Slot {
    run: Mutex<Option<InFlight>>,
    seq: AtomicU64,
}

/// Held by the run: delivers its outcome to whoever joined it.
pub struct Publisher {
    seq: u64,
    tx: watch::Sender<Option<Outcome>>,
}

impl Slot {
    /// The run `call` with parameters `key` started: joinable from now on.
    pub fn open(&self, call: &'static str, key: String) -> Publisher {
        let (tx, outcome) = watch::channel(None);
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        *self.lock() = Some(InFlight {
            seq,
            call,
            key,
            outcome,
        });
        Publisher { seq, tx }
    }

    /// The outcome of the run in progress, when it is a `call` with the same `key`.
    pub fn join(&self, call: &str, key: &str) -> Option<Watch> {
        self.lock()
            .as_ref()
            .filter(|f| f.call == call && f.key == key)
            .map(|f| f.outcome.clone())
    }

    /// Delivers the run's outcome to those who joined and closes the slot (unless the next
    /// run, started once the node was free, holds it already).
    pub fn deliver(&self, p: Publisher, outcome: &Outcome) {
        let _ = p.tx.send(Some(outcome.clone()));
        let mut run = self.lock();
        if run.as_ref().is_some_and(|f| f.seq == p.seq) {
            *run = None;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<InFlight>> {
        match self.run.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_same_call_and_key_joins_and_hears_the_outcome() {
        let slot = Slot::default();
        assert!(slot.join("preflight", "a").is_none());
        let p = slot.open("preflight", "a".into());
        assert!(slot.join("preflight", "b").is_none());
        assert!(slot.join("explain", "a").is_none());
        let w = slot.join("preflight", "a").unwrap();
        assert!(w.borrow().is_none());
        let report = Report {
            verdict: "CRITICAL".into(),
            ..Report::default()
        };
        slot.deliver(p, &Ok(report));
        assert_eq!(
            w.borrow().as_ref().unwrap().as_ref().unwrap().verdict,
            "CRITICAL"
        );
        assert!(slot.join("preflight", "a").is_none());
    }

    #[test]
    fn a_late_delivery_leaves_the_next_run_joinable() {
        let slot = Slot::default();
        let first = slot.open("preflight", "a".into());
        let _second = slot.open("preflight", "b".into());
        slot.deliver(first, &Err(Status::unknown("x")));
        assert!(slot.join("preflight", "b").is_some());
    }
}
