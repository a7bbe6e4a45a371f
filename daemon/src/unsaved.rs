//! Finished runs the history could not store yet (a full disk, a lock held by another process):
//! kept in memory in the order they were delivered, retried before every later write and on
//! every collector tick, so that the newest verdict a caller was told is the one `--max-age`
//! serves. Bounded: past [`MAX_UNSAVED`] the oldest is dropped, and a dropped preflight leaves
//! the daemon unable to tell the node's last verdict until a newer one is kept.

use std::collections::VecDeque;

use crate::history::{FinishedRow, History, HistoryError};

/// Finished runs kept in memory at most while the history cannot store them.
pub const MAX_UNSAVED: usize = 32;

/// The finding a report carries when the daemon could not store it.
pub const UNSAVED_FINDING: &str = "history_write_failed";

/// A run the history refused: why, and its report as its caller gets it (with the finding).
#[derive(Debug)]
pub struct Unstored {
    pub why: HistoryError,
    pub json: Option<String>,
}

/// What the history has not stored yet.
#[derive(Debug, Default)]
pub struct Unsaved {
    rows: VecDeque<FinishedRow>,
    /// A preflight was dropped (the queue was full) and none came after it: the node's last
    /// verdict is not known.
    lost_preflight: bool,
    /// Why the last write failed; cleared by the next write that succeeds.
    pub last_error: Option<String>,
}

impl Unsaved {
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Writes what is kept, oldest first, stopping at the first failure (the order of the
    /// history is the order runs were delivered).
    pub fn flush(&mut self, h: &History) -> Result<(), HistoryError> {
        while let Some(row) = self.rows.front() {
            h.store(row)?;
            self.rows.pop_front();
        }
        self.last_error = None;
        Ok(())
    }

    /// Stores `row` after what is kept, or keeps it too, its report then carrying the
    /// [`UNSAVED_FINDING`]; on a failure returns why, and that report.
    pub fn store(&mut self, h: &History, mut row: FinishedRow) -> Result<(), Unstored> {
        let written = self.flush(h).and_then(|()| h.store(&row).map(|_| ()));
        if let Err(e) = written {
            row.json = row.json.map(|j| with_unsaved_finding(&j, &e.to_string()));
            let json = row.json.clone();
            self.keep(row, &e);
            return Err(Unstored { why: e, json });
        }
        if row.kind == "preflight" {
            // Stored, and newer than any dropped: the last verdict is known again.
            self.lost_preflight = false;
        }
        Ok(())
    }

    /// Keeps a row the history refused, dropping the oldest past [`MAX_UNSAVED`].
    pub fn keep(&mut self, row: FinishedRow, why: &HistoryError) {
        self.last_error = Some(why.to_string());
        if row.kind == "preflight" {
            self.lost_preflight = false;
        }
        self.rows.push_back(row);
        while self.rows.len() > MAX_UNSAVED {
            if let Some(dropped) = self.rows.pop_front() {
                tracing::error!(
                    "history: dropped the unsaved {} run started at {} ({}): more than {MAX_UNSAVED} runs wait for the history",
                    dropped.kind,
                    dropped.started_unix,
                    dropped.verdict.as_deref().unwrap_or(dropped.status)
                );
                let newer = self.rows.iter().any(|r| r.kind == "preflight");
                if dropped.kind == "preflight" && !newer {
                    self.lost_preflight = true;
                }
            }
        }
    }

    /// The newest finished preflight of `label` kept here: `Ok(None)` when there is none and the
    /// history's is the newest, `Err` when a dropped one makes the newest unknown.
    pub fn last_preflight(&self, label: &str) -> Result<Option<&FinishedRow>, LostPreflight> {
        if let Some(r) = self.rows.iter().rev().find(|r| is_preflight_of(r, label)) {
            return Ok(Some(r));
        }
        if self.lost_preflight {
            return Err(LostPreflight {
                why: self
                    .last_error
                    .clone()
                    .unwrap_or_else(|| "history writes fail".into()),
            });
        }
        Ok(None)
    }

    /// The rows kept, newest first (the history's reply puts them before the stored ones).
    pub fn newest_first(&self) -> impl Iterator<Item = &FinishedRow> {
        self.rows.iter().rev()
    }
}

/// The newest preflight was dropped unstored: the node's last verdict is not known. `why`: the
/// history's last write error.
#[derive(Debug, thiserror::Error)]
#[error("ddpcheckd could not store its last preflight and no longer holds it ({why}): the node's last verdict is not known")]
pub struct LostPreflight {
    pub why: String,
}

/// A finished preflight of `label`: a verdict, or a failure (`--max-age` reuses no older
/// verdict past either).
fn is_preflight_of(r: &FinishedRow, label: &str) -> bool {
    r.kind == "preflight" && r.backend_label == label && matches!(r.status, "complete" | "failed")
}

/// `json` (a report) with a node finding that says it could not be stored: severity info, so the
/// node's verdict is its own, but the caller sees it. `json` is returned as it is when it is not
/// a report with findings.
pub fn with_unsaved_finding(json: &str, why: &str) -> String {
    let Ok(mut v) = serde_json::from_str::<serde_json::Value>(json) else {
        return json.to_string();
    };
    let Some(findings) = v.get_mut("findings").and_then(|f| f.as_array_mut()) else {
        return json.to_string();
    };
    let f = ddpcheck_core::Finding::new(
        UNSAVED_FINDING,
        ddpcheck_core::Severity::Info,
        ddpcheck_core::finding::Subject::Node,
        format!(
            "ddpcheckd could not store this report in its history ({why}); it keeps it in memory, serves it as the last verdict and retries the write"
        ),
    );
    match serde_json::to_value(f) {
        Ok(f) => findings.push(f),
        Err(_) => return json.to_string(),
    }
    serde_json::to_string(&v).unwrap_or_else(|_| json.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(kind: &str, verdict: &str) -> FinishedRow {
        FinishedRow {
            id: None,
            kind: kind.into(),
            backend: "sim".into(),
            backend_label: "sim:x".into(),
            started_unix: 1.0,
            finished_unix: 2.0,
            status: "complete",
            verdict: Some(verdict.into()),
            exit_code: Some(0),
            busbw_large_gbps: None,
            json: Some(format!("{{\"verdict\":\"{verdict}\",\"findings\":[]}}")),
            error: None,
        }
    }

    fn locked(h: &History) {
        h.conn_for_tests()
            .execute_batch("PRAGMA query_only = 1")
            .unwrap();
    }

    fn unlocked(h: &History) {
        h.conn_for_tests()
            .execute_batch("PRAGMA query_only = 0")
            .unwrap();
    }

    #[test]
    fn a_refused_write_is_kept_served_and_retried_in_order() {
        let h = History::open_in_memory().unwrap();
        let mut u = Unsaved::default();
        u.store(&h, row("preflight", "OK")).unwrap();
        locked(&h);
        assert!(u.store(&h, row("preflight", "CRITICAL")).is_err());
        assert!(u.store(&h, row("bench_ddp", "")).is_err());
        assert_eq!(u.len(), 2);
        assert!(u.last_error.is_some());
        let last = u.last_preflight("sim:x").unwrap().unwrap();
        assert_eq!(last.verdict.as_deref(), Some("CRITICAL"));
        assert_eq!(u.last_preflight("sim:other").unwrap(), None);
        unlocked(&h);
        u.flush(&h).unwrap();
        assert!(u.is_empty() && u.last_error.is_none());
        let stored = h.latest("preflight", "sim:x").unwrap().unwrap();
        assert_eq!(stored.verdict.as_deref(), Some("CRITICAL"));
        assert_eq!(h.count().unwrap(), 3);
    }

    #[test]
    fn a_dropped_preflight_makes_the_last_verdict_unknown_until_a_newer_one() {
        let h = History::open_in_memory().unwrap();
        locked(&h);
        let mut u = Unsaved::default();
        let _ = u.store(&h, row("preflight", "CRITICAL"));
        for _ in 0..MAX_UNSAVED {
            let _ = u.store(&h, row("bench_ddp", ""));
        }
        assert_eq!(u.len(), MAX_UNSAVED);
        assert!(u.last_preflight("sim:x").is_err());
        let _ = u.store(&h, row("preflight", "OK"));
        assert_eq!(
            u.last_preflight("sim:x")
                .unwrap()
                .unwrap()
                .verdict
                .as_deref(),
            Some("OK")
        );
    }

    #[test]
    fn a_preflight_stored_after_one_was_dropped_is_the_known_last_verdict() {
        let h = History::open_in_memory().unwrap();
        let mut u = Unsaved {
            lost_preflight: true,
            ..Unsaved::default()
        };
        assert!(u.last_preflight("sim:x").is_err());
        u.store(&h, row("preflight", "WARNING")).unwrap();
        assert_eq!(u.last_preflight("sim:x").unwrap(), None);
    }

    #[test]
    fn the_finding_is_added_to_a_report_and_nothing_else() {
        let j = with_unsaved_finding("{\"verdict\":\"OK\",\"findings\":[]}", "database is locked");
        let v: serde_json::Value = serde_json::from_str(&j).unwrap();
        assert_eq!(v["findings"][0]["code"], UNSAVED_FINDING);
        assert_eq!(v["findings"][0]["severity"], "info");
        assert!(v["findings"][0]["message"]
            .as_str()
            .unwrap()
            .contains("database is locked"));
        assert_eq!(v["verdict"], "OK");
        assert_eq!(with_unsaved_finding("{\"a\":1}", "x"), "{\"a\":1}");
        assert_eq!(with_unsaved_finding("not json", "x"), "not json");
    }
}
