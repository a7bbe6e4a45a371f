//! A verdict is never lost: on the real backend (the fake GPU libraries), a node checked OK and
//! then, after a restart with a wrong-result NCCL, CRITICAL while its history cannot be written
//! (another process holds `history.db`'s write lock) must answer CRITICAL to `check --max-age`
//! too, never the older stored OK; the failed write is a finding and a metric, and the kept
//! verdict is written once the lock is gone.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed set-up is a failed test

mod common;

use common::fake_gpu::FakeGpuLibs;
use common::{code, stderr, stdout, Daemon};

const SWEEP: [&str; 4] = ["--min-bytes", "8M", "--max-bytes", "16M"];

fn check(d: &Daemon, extra: &[&str]) -> (i32, String) {
    let args = [&["check"][..], extra, &SWEEP[..]].concat();
    let o = d.cli(&args);
    let text = format!("{}{}", stdout(&o), stderr(&o));
    (code(&o), text)
}

/// The daemon's `GetNode`: what it says about its own history.
fn get_node(d: &Daemon) -> ddpcheck_proto::v1::NodeSnapshot {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let mut c = ddpcheck_client::connect(&d.addr()).await.unwrap();
            c.get_node(ddpcheck_proto::v1::GetNodeRequest {})
                .await
                .unwrap()
                .into_inner()
        })
}

fn metric(scrape: &str, name: &str) -> f64 {
    scrape
        .lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit_once(' '))
        .map_or(f64::NAN, |(_, v)| v.parse().unwrap())
}

#[test]
fn a_verdict_the_history_could_not_store_is_the_one_max_age_serves() {
    let Some(libs) = FakeGpuLibs::build() else {
        return;
    };
    let mut good: Vec<(&'static str, String)> = libs.env(true);
    // A history write waits 200 ms for the lock, not 5 s.
    good.push(("DDPCHECK_HISTORY_BUSY_MS", "200".into()));
    let mut wrong = good.clone();
    wrong.push(("FAKE_NCCL_WRONG", "1".into()));
    let refs = |e: &[(&'static str, String)]| -> Vec<(&'static str, String)> { e.to_vec() };
    let (good, wrong) = (refs(&good), refs(&wrong));
    let good: Vec<(&str, &str)> = good.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let wrong: Vec<(&str, &str)> = wrong.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let flags = ["--work-rate-per-minute", "0"];
    let d = Daemon::start_env(None, &flags, &good);
    let (c, line) = check(&d, &["--prolog"]);
    assert_eq!(c, 0, "{line}");
    assert!(line.starts_with("ddpcheck: OK"), "{line}");

    let (_, dir) = d.stop_keeping_dir();
    let d = Daemon::start_in(dir, None, &flags, &wrong);
    let db = d.dir.path().join("state/history.db");
    let lock = rusqlite::Connection::open(&db).unwrap();
    lock.execute_batch("BEGIN EXCLUSIVE").unwrap();

    let (c, line) = check(&d, &["--prolog"]);
    assert_eq!(c, 1, "{line}");
    assert!(line.starts_with("ddpcheck: CRITICAL"), "{line}");
    // The cached answer is the verdict just delivered, not the stored OK before it.
    let (c, line) = check(&d, &["--max-age", "3600", "--prolog"]);
    assert_eq!(c, 1, "{line}");
    assert!(line.starts_with("ddpcheck: CRITICAL"), "{line}");
    let (c, json) = check(&d, &["--max-age", "3600", "--json"]);
    assert_eq!(c, 2, "{json}");
    assert!(json.contains("\"history_write_failed\""), "{json}");
    let m = d.scrape();
    assert_eq!(
        metric(
            &m,
            "ddpcheck_work_runs_total{call=\"preflight\",outcome=\"ok\""
        ),
        1.0,
        "the cached answers started no run"
    );
    assert!(
        metric(&m, "ddpcheck_history_write_failures_total") >= 1.0,
        "{m}"
    );
    assert_eq!(metric(&m, "ddpcheck_history_unsaved_reports"), 1.0, "{m}");
    // `history` lists the kept run first, before the stored OK.
    let h = d.cli(&["--json", "history", "--kind", "preflight"]);
    let rows: serde_json::Value = serde_json::from_slice(&h.stdout).unwrap();
    let verdicts: Vec<&str> = rows
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["verdict"].as_str())
        .collect();
    assert_eq!(verdicts, ["CRITICAL", "OK"], "{rows}");
    let node = get_node(&d);
    assert_eq!(node.unsaved_reports, 1);
    assert!(
        node.history_error.contains("locked"),
        "{}",
        node.history_error
    );

    // The lock is gone: the next run writes the kept verdict first, then its own.
    lock.execute_batch("ROLLBACK").unwrap();
    let (c, line) = check(&d, &["--prolog"]);
    assert_eq!(c, 1, "{line}");
    assert_eq!(metric(&d.scrape(), "ddpcheck_history_unsaved_reports"), 0.0);
    let node = get_node(&d);
    assert_eq!((node.unsaved_reports, node.history_error.as_str()), (0, ""));
    let verdicts: Vec<String> = lock
        .prepare("SELECT verdict FROM reports WHERE status = 'complete' ORDER BY id")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(verdicts, ["OK", "CRITICAL", "CRITICAL"]);
}

/// Preflights the daemon ran since it started.
fn preflight_runs(d: &Daemon) -> f64 {
    d.scrape()
        .lines()
        .filter(|l| l.starts_with("ddpcheck_preflight_runs_total{"))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum()
}

/// After the clock stepped back, the stored verdict is dated in the future: how old it is cannot
/// be told, so `--max-age` does not reuse it, however large.
#[test]
fn a_verdict_dated_in_the_future_is_not_fresh() {
    let flags = ["--work-rate-per-minute", "0"];
    let d = Daemon::start_with(Some("h200x2-nvlink"), &flags);
    assert_eq!(code(&d.cli(&["check"])), 0);
    let (_, dir) = d.stop_keeping_dir();
    let c = rusqlite::Connection::open(dir.path().join("state/history.db")).unwrap();
    let json: String = c
        .query_row(
            "SELECT json FROM reports WHERE status = 'complete'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let ahead = std::time::SystemTime::now() + std::time::Duration::from_secs(3600);
    v["provenance"]["time"] = humantime::format_rfc3339_seconds(ahead).to_string().into();
    c.execute("UPDATE reports SET json = ?1", [v.to_string()])
        .unwrap();
    drop(c);
    let d = Daemon::start_in(dir, Some("h200x2-nvlink"), &flags, &[]);
    let o = d.cli(&["check", "--prolog", "--max-age", "86400"]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert_eq!(
        preflight_runs(&d),
        1.0,
        "a verdict from the future was reused"
    );
}
