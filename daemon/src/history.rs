//! The node's history: every report in a SQLite file (WAL) under the state directory.
//! A run is inserted as `running` before it starts and completed after; a daemon that starts and
//! finds `running` rows marks them `interrupted`, so a crash mid-run is visible, never silent.
//! A run the daemon stopped itself (its shutdown, [`History::interrupt`]) is `interrupted` too:
//! no verdict of the node, so never the latest report, the busbw baseline or a gauge.

use std::path::Path;

use rusqlite::{params, Connection, OptionalExtension};

/// Version of the table layout; `migrate` brings older files forward.
pub const SCHEMA_VERSION: i64 = 2;

/// How many recent preflights make the node's busbw baseline (its median judges drift).
pub const RECENT_BUSBW: u32 = 10;

#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("history database: {0}")]
    Sql(#[from] rusqlite::Error),
    #[error("history database is corrupted: {0}")]
    Corrupt(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("history database {path} has schema version {found}, newer than this ddpcheck ({SCHEMA_VERSION}); upgrade ddpcheck")]
    TooNew { path: String, found: i64 },
}

#[derive(Clone, Debug, PartialEq)]
pub struct StoredReport {
    pub id: i64,
    pub kind: String,
    pub backend: String,
    pub backend_label: String,
    pub started_unix: f64,
    pub status: String,
    pub verdict: Option<String>,
    pub exit_code: Option<i32>,
    pub json: Option<String>,
    /// Why a `failed` run failed (schema 2; runs stored before have none).
    pub error: Option<String>,
}

/// A finished run as the history keeps it; `id` is its `running` row, none where even that
/// insert failed.
#[derive(Clone, Debug, PartialEq)]
pub struct FinishedRow {
    pub id: Option<i64>,
    pub kind: String,
    pub backend: String,
    pub backend_label: String,
    pub started_unix: f64,
    pub finished_unix: f64,
    /// `complete`, `failed` or `interrupted`.
    pub status: &'static str,
    pub verdict: Option<String>,
    pub exit_code: Option<i32>,
    pub busbw_large_gbps: Option<f64>,
    pub json: Option<String>,
    pub error: Option<String>,
}

impl FinishedRow {
    /// As the history would read it back (an unsaved row has no id yet: 0).
    pub fn as_stored(&self) -> StoredReport {
        StoredReport {
            id: self.id.unwrap_or(0),
            kind: self.kind.clone(),
            backend: self.backend.clone(),
            backend_label: self.backend_label.clone(),
            started_unix: self.started_unix,
            status: self.status.into(),
            verdict: self.verdict.clone(),
            exit_code: self.exit_code,
            json: self.json.clone(),
            error: self.error.clone(),
        }
    }
}

pub struct History {
    conn: Connection,
}

/// How long a write waits for a lock another process holds on the file before it fails (and
/// the run is kept in memory, [`crate::unsaved`]): 5 s, or `DDPCHECK_HISTORY_BUSY_MS`.
pub fn busy_timeout() -> std::time::Duration {
    std::env::var("DDPCHECK_HISTORY_BUSY_MS")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(
            std::time::Duration::from_secs(5),
            std::time::Duration::from_millis,
        )
}

impl History {
    pub fn open(path: &Path) -> Result<History, HistoryError> {
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let conn = Connection::open(path)?;
        // WAL survives kill -9 of the writer; FULL sync makes a commit durable before we report it.
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.busy_timeout(busy_timeout())?;
        // A 512 KiB page cache, not SQLite's 2 MB: the history is read a few rows at a time
        // (the last runs, a prune), and the idle daemon should not keep 2 MB of it resident.
        conn.pragma_update(None, "cache_size", -512)?;
        let h = History { conn };
        h.migrate(&path.display().to_string())?;
        Ok(h)
    }

    pub fn open_in_memory() -> Result<History, HistoryError> {
        let h = History {
            conn: Connection::open_in_memory()?,
        };
        h.migrate(":memory:")?;
        Ok(h)
    }

    fn migrate(&self, path: &str) -> Result<(), HistoryError> {
        let v: i64 = self
            .conn
            .pragma_query_value(None, "user_version", |r| r.get(0))?;
        if v > SCHEMA_VERSION {
            return Err(HistoryError::TooNew {
                path: path.to_string(),
                found: v,
            });
        }
        if v < 1 {
            self.conn.execute_batch(
                "BEGIN;
                 CREATE TABLE IF NOT EXISTS reports (
                    id INTEGER PRIMARY KEY,
                    kind TEXT NOT NULL,
                    backend TEXT NOT NULL,
                    backend_label TEXT NOT NULL,
                    started_unix REAL NOT NULL,
                    finished_unix REAL,
                    status TEXT NOT NULL CHECK (status IN ('running','complete','interrupted','failed')),
                    verdict TEXT,
                    exit_code INTEGER,
                    busbw_large_gbps REAL,
                    json TEXT
                 );
                 CREATE INDEX IF NOT EXISTS reports_by_kind ON reports(kind, backend_label, id);
                 PRAGMA user_version = 1;
                 COMMIT;",
            )?;
        }
        if v < 2 {
            // 2: a failed run keeps its error line (before, only that it failed).
            self.conn.execute_batch(
                "BEGIN;
                 ALTER TABLE reports ADD COLUMN error TEXT;
                 PRAGMA user_version = 2;
                 COMMIT;",
            )?;
        }
        Ok(())
    }

    /// SQLite's quick check of the whole file (at start: a truncated file opens, and fails
    /// only when a missing page is read).
    pub fn quick_check(&self) -> Result<(), HistoryError> {
        let first: String = self
            .conn
            .query_row("PRAGMA quick_check(1)", [], |r| r.get(0))?;
        if first == "ok" {
            Ok(())
        } else {
            Err(HistoryError::Corrupt(first))
        }
    }

    /// Marks runs left `running` by a previous process as `interrupted`; returns how many.
    pub fn mark_interrupted(&self) -> Result<usize, HistoryError> {
        Ok(self.conn.execute(
            "UPDATE reports SET status = 'interrupted' WHERE status = 'running'",
            [],
        )?)
    }

    /// Records that a run started; returns its id.
    pub fn begin(
        &self,
        kind: &str,
        backend: &str,
        backend_label: &str,
        now_unix: f64,
    ) -> Result<i64, HistoryError> {
        self.conn.execute(
            "INSERT INTO reports (kind, backend, backend_label, started_unix, status) VALUES (?1, ?2, ?3, ?4, 'running')",
            params![kind, backend, backend_label, now_unix],
        )?;
        Ok(self.conn.last_insert_rowid())
    }

    /// Deletes finished runs older than the newest `keep` (a run still `running` stays);
    /// returns how many. SQLite reuses the freed pages, so the file stops growing.
    pub fn prune(&self, keep: u64) -> Result<usize, HistoryError> {
        let keep = i64::try_from(keep).unwrap_or(i64::MAX);
        Ok(self.conn.execute(
            "DELETE FROM reports WHERE status != 'running' AND id <= (
                SELECT id FROM reports ORDER BY id DESC LIMIT 1 OFFSET ?1)",
            params![keep],
        )?)
    }

    /// Records that a run failed, and why (one line, as the caller was told).
    pub fn fail(&self, id: i64, error: &str, now_unix: f64) -> Result<(), HistoryError> {
        self.conn.execute(
            "UPDATE reports SET status = 'failed', error = ?2, finished_unix = ?3 WHERE id = ?1",
            params![id, error, now_unix],
        )?;
        Ok(())
    }

    /// Records that we stopped a run before it judged anything (the daemon's shutdown, a
    /// caller's cancel, our own signal to its worker), and why. What it returned then is not
    /// kept: it describes our stop, not the node.
    pub fn interrupt(&self, id: i64, why: &str, now_unix: f64) -> Result<(), HistoryError> {
        self.conn.execute(
            "UPDATE reports SET status = 'interrupted', error = ?2, finished_unix = ?3 WHERE id = ?1",
            params![id, why, now_unix],
        )?;
        Ok(())
    }

    /// Stores the finished report of a run.
    #[allow(clippy::too_many_arguments)]
    pub fn complete(
        &self,
        id: i64,
        status: &str,
        verdict: Option<&str>,
        exit_code: Option<i32>,
        busbw_large_gbps: Option<f64>,
        json: Option<&str>,
        now_unix: f64,
    ) -> Result<(), HistoryError> {
        self.conn.execute(
            "UPDATE reports SET status = ?2, verdict = ?3, exit_code = ?4, busbw_large_gbps = ?5, json = ?6, finished_unix = ?7 WHERE id = ?1",
            params![id, status, verdict, exit_code, busbw_large_gbps, json, now_unix],
        )?;
        Ok(())
    }

    /// Stores a finished run whole: over its `running` row where it has one (and that row is
    /// still there), as a new row otherwise. Returns its id.
    pub fn store(&self, r: &FinishedRow) -> Result<i64, HistoryError> {
        if let Some(id) = r.id {
            let n = self.conn.execute(
                "UPDATE reports SET status = ?2, verdict = ?3, exit_code = ?4, busbw_large_gbps = ?5, json = ?6, error = ?7, finished_unix = ?8 WHERE id = ?1",
                params![id, r.status, r.verdict, r.exit_code, r.busbw_large_gbps, r.json, r.error, r.finished_unix],
            )?;
            if n == 1 {
                return Ok(id);
            }
        }
        self.conn.execute(
            "INSERT INTO reports (kind, backend, backend_label, started_unix, finished_unix, status, verdict, exit_code, busbw_large_gbps, json, error)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            params![r.kind, r.backend, r.backend_label, r.started_unix, r.finished_unix, r.status, r.verdict, r.exit_code, r.busbw_large_gbps, r.json, r.error],
        )?;
        Ok(self.conn.last_insert_rowid())
    }

    /// The newest finished run of a kind for this backend that told its caller something about
    /// the node: `complete`, or `failed` (a TIMEOUT, a worker that died). Interrupted and running
    /// rows are passed over.
    pub fn last_finished(
        &self,
        kind: &str,
        backend_label: &str,
    ) -> Result<Option<StoredReport>, HistoryError> {
        self.newest(kind, backend_label, |status| {
            status == "complete" || status == "failed"
        })
    }

    /// The newest of the last 50 reports of a kind for this backend whose status `wanted` takes.
    fn newest(
        &self,
        kind: &str,
        backend_label: &str,
        wanted: impl Fn(&str) -> bool,
    ) -> Result<Option<StoredReport>, HistoryError> {
        Ok(self
            .recent(kind, Some(backend_label), 50)?
            .into_iter()
            .find(|r| wanted(&r.status)))
    }

    #[cfg(test)]
    pub(crate) fn conn_for_tests(&self) -> &Connection {
        &self.conn
    }

    /// Newest reports first; `kind` empty for all kinds.
    pub fn recent(
        &self,
        kind: &str,
        backend_label: Option<&str>,
        limit: u32,
    ) -> Result<Vec<StoredReport>, HistoryError> {
        let mut stmt = self.conn.prepare(
            "SELECT id, kind, backend, backend_label, started_unix, status, verdict, exit_code, json, error
             FROM reports
             WHERE (?1 = '' OR kind = ?1) AND (?2 IS NULL OR backend_label = ?2)
             ORDER BY id DESC LIMIT ?3",
        )?;
        let rows = stmt.query_map(params![kind, backend_label, limit], |r| {
            Ok(StoredReport {
                id: r.get(0)?,
                kind: r.get(1)?,
                backend: r.get(2)?,
                backend_label: r.get(3)?,
                started_unix: r.get(4)?,
                status: r.get(5)?,
                verdict: r.get(6)?,
                exit_code: r.get(7)?,
                json: r.get(8)?,
                error: r.get(9)?,
            })
        })?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    /// The newest complete report of a kind for this backend.
    pub fn latest(
        &self,
        kind: &str,
        backend_label: &str,
    ) -> Result<Option<StoredReport>, HistoryError> {
        self.newest(kind, backend_label, |status| status == "complete")
    }

    /// Large-message all-reduce busbw of the last `n` complete preflights (oldest first): the
    /// node's own baseline for drift.
    pub fn recent_busbw(&self, backend_label: &str, n: u32) -> Result<Vec<f64>, HistoryError> {
        let mut stmt = self.conn.prepare(
            "SELECT busbw_large_gbps FROM reports
             WHERE kind = 'preflight' AND status = 'complete' AND backend_label = ?1 AND busbw_large_gbps IS NOT NULL
             ORDER BY id DESC LIMIT ?2",
        )?;
        let mut v: Vec<f64> = stmt
            .query_map(params![backend_label, n], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        v.reverse();
        Ok(v)
    }

    pub fn count(&self) -> Result<i64, HistoryError> {
        Ok(self
            .conn
            .query_row("SELECT COUNT(*) FROM reports", [], |r| r.get(0))
            .optional()?
            .unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Stores run `id` as a complete OK preflight whose all-reduce reached 300 GB/s, at time 2.
    fn ok_at_300_gbps(h: &History, id: i64) {
        h.complete(
            id,
            "complete",
            Some("OK"),
            Some(0),
            Some(300.0),
            Some("{}"),
            2.0,
        )
        .unwrap();
    }

    #[test]
    fn run_lifecycle_and_interrupted_marking() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("history.db");
        {
            let h = History::open(&path).unwrap();
            let a = h.begin("preflight", "sim", "sim:x", 1.0).unwrap();
            ok_at_300_gbps(&h, a);
            let _b = h.begin("preflight", "sim", "sim:x", 3.0).unwrap();
            // process "dies" here with b running
        }
        let h = History::open(&path).unwrap();
        assert_eq!(h.mark_interrupted().unwrap(), 1);
        let rows = h.recent("preflight", Some("sim:x"), 10).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].status, "interrupted");
        assert_eq!(rows[1].verdict.as_deref(), Some("OK"));
        assert_eq!(h.recent_busbw("sim:x", 5).unwrap(), vec![300.0]);
        assert_eq!(
            h.latest("preflight", "sim:x").unwrap().unwrap().id,
            rows[1].id
        );
        assert!(h.latest("preflight", "sim:other").unwrap().is_none());
    }

    /// A database written by schema 1 (before failed runs kept their error) opens, keeps its
    /// rows and takes errors from then on.
    #[test]
    fn schema_1_is_migrated_in_place() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("h.db");
        {
            let c = Connection::open(&path).unwrap();
            c.execute_batch(
                "CREATE TABLE reports (
                    id INTEGER PRIMARY KEY, kind TEXT NOT NULL, backend TEXT NOT NULL,
                    backend_label TEXT NOT NULL, started_unix REAL NOT NULL, finished_unix REAL,
                    status TEXT NOT NULL CHECK (status IN ('running','complete','interrupted','failed')),
                    verdict TEXT, exit_code INTEGER, busbw_large_gbps REAL, json TEXT);
                 INSERT INTO reports (kind, backend, backend_label, started_unix, status, verdict, exit_code, json)
                    VALUES ('preflight', 'sim', 'sim:x', 1.0, 'complete', 'OK', 0, '{}');
                 PRAGMA user_version = 1;",
            )
            .unwrap();
        }
        let h = History::open(&path).unwrap();
        let v: i64 = h
            .conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(v, SCHEMA_VERSION);
        let b = h.begin("bench_ddp", "sim", "sim:x", 2.0).unwrap();
        h.fail(b, "torch is not installed", 3.0).unwrap();
        let rows = h.recent("", Some("sim:x"), 10).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].status, "failed");
        assert_eq!(rows[0].error.as_deref(), Some("torch is not installed"));
        assert_eq!(rows[1].verdict.as_deref(), Some("OK"));
        assert_eq!(rows[1].error, None);
    }

    /// A run the daemon stopped itself keeps why, and is never taken for the node's verdict:
    /// the complete one before it stays the latest and the only busbw of the baseline.
    #[test]
    fn an_interrupted_run_is_no_verdict() {
        let h = History::open_in_memory().unwrap();
        let a = h.begin("preflight", "real", "real", 1.0).unwrap();
        ok_at_300_gbps(&h, a);
        let b = h.begin("preflight", "real", "real", 3.0).unwrap();
        h.interrupt(b, "ddpcheckd was stopped during the run", 4.0)
            .unwrap();
        let rows = h.recent("preflight", Some("real"), 10).unwrap();
        assert_eq!(rows[0].status, "interrupted");
        assert_eq!(
            rows[0].error.as_deref(),
            Some("ddpcheckd was stopped during the run")
        );
        assert_eq!(rows[0].verdict, None);
        assert_eq!(h.latest("preflight", "real").unwrap().unwrap().id, a);
        assert_eq!(h.recent_busbw("real", 5).unwrap(), vec![300.0]);
        // Not running any more: a restart has nothing to mark.
        assert_eq!(h.mark_interrupted().unwrap(), 0);
    }

    /// `--max-age` reuses no verdict older than a run that failed: the failed one is the last.
    #[test]
    fn the_last_finished_run_is_a_failed_one_after_a_verdict() {
        let h = History::open_in_memory().unwrap();
        let a = h.begin("preflight", "real", "real", 1.0).unwrap();
        h.complete(a, "complete", Some("OK"), Some(0), None, Some("{}"), 2.0)
            .unwrap();
        assert_eq!(h.last_finished("preflight", "real").unwrap().unwrap().id, a);
        let b = h.begin("preflight", "real", "real", 3.0).unwrap();
        h.fail(b, "all_reduce did not finish within 30.0 s", 4.0)
            .unwrap();
        let c = h.begin("preflight", "real", "real", 5.0).unwrap();
        h.interrupt(c, "ddpcheckd stopped", 6.0).unwrap();
        let last = h.last_finished("preflight", "real").unwrap().unwrap();
        assert_eq!((last.id, last.status.as_str()), (b, "failed"));
        assert_eq!(h.latest("preflight", "real").unwrap().unwrap().id, a);
    }

    #[test]
    fn prune_keeps_the_newest_runs_and_any_running_one() {
        let h = History::open_in_memory().unwrap();
        let running = h.begin("preflight", "sim", "sim:x", 0.0).unwrap();
        for i in 1..=5 {
            let id = h.begin("preflight", "sim", "sim:x", f64::from(i)).unwrap();
            h.complete(id, "complete", Some("OK"), Some(0), None, Some("{}"), 9.0)
                .unwrap();
        }
        assert_eq!(h.prune(10).unwrap(), 0);
        assert_eq!(h.prune(3).unwrap(), 2);
        let ids: Vec<i64> = h
            .recent("", None, 100)
            .unwrap()
            .iter()
            .map(|r| r.id)
            .collect();
        assert_eq!(ids, vec![6, 5, 4, running]);
        assert_eq!(h.prune(1).unwrap(), 2);
        assert_eq!(h.recent("", None, 100).unwrap().len(), 2);
    }

    #[test]
    fn refuses_newer_schema() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("h.db");
        History::open(&path)
            .unwrap()
            .conn
            .pragma_update(None, "user_version", 99)
            .unwrap();
        let err = History::open(&path).err().unwrap().to_string();
        assert!(err.contains("newer than this ddpcheck"), "{err}");
    }
}
