//! A prolog never passes a node unchecked: a `check` whose client was killed mid-call leaves its
//! run going in the daemon, and a `check --prolog` that arrives meanwhile joins that run and
//! answers with its verdict (exit 1 on the TIMEOUT of a simulated hang), where it used to get
//! BUSY, which a prolog passes (exit 0).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed set-up is a failed test

mod common;

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::{code, stderr, stdout, Daemon};
use rusqlite::{Connection, OpenFlags};

/// The statuses of the daemon's stored preflights, oldest first.
fn statuses(d: &Daemon) -> Vec<String> {
    let db = d.dir.path().join("state/history.db");
    let c = Connection::open_with_flags(&db, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let mut q = c
        .prepare("SELECT status FROM reports WHERE kind = 'preflight' ORDER BY id")
        .unwrap();
    let rows = q.query_map([], |r| r.get(0)).unwrap();
    rows.collect::<Result<_, _>>().unwrap()
}

/// A `check` through the daemon with `deadline` seconds, returned once its run is `running`,
/// with the time it was started.
fn check_in_flight(d: &Daemon, deadline: &str) -> (Child, Instant) {
    let client = common::client(&d.socket)
        .args(["check", "--deadline", deadline])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while statuses(d) != ["running"] {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the run never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    (client, t0)
}

#[test]
fn a_prolog_joins_the_run_a_killed_client_left_and_answers_its_verdict() {
    let d = Daemon::start_with(Some("h200x2-nvlink+hang"), &["--work-rate-per-minute", "0"]);
    // The hang fault holds the collective until the run's own 3 s deadline: TIMEOUT.
    let (mut client, t0) = check_in_flight(&d, "3");
    client.kill().unwrap();
    client.wait().unwrap();

    // Its own deadline (10 s) is past the run's: the prolog waits for the run's verdict.
    let o = d.cli(&["check", "--prolog", "--deadline", "10"]);
    let line = format!("{}{}", stdout(&o), stderr(&o));
    assert_eq!(code(&o), 1, "{line}");
    assert!(line.starts_with("ddpcheck: TIMEOUT: "), "{line}");
    assert!(line.contains("3.0 s"), "the joined run's verdict: {line}");
    assert_eq!(line.trim().lines().count(), 1, "{line}");
    // It joined: no run of its own.
    assert_eq!(statuses(&d), ["complete"]);
    assert!(t0.elapsed() < Duration::from_secs(9), "{:?}", t0.elapsed());
}

/// A prolog whose wait runs out before the node is free answers TIMEOUT (exit 1), never BUSY.
#[test]
fn a_prolog_that_cannot_wait_long_enough_is_a_timeout_not_a_pass() {
    let d = Daemon::start_with(Some("h200x2-nvlink+hang"), &["--work-rate-per-minute", "0"]);
    let (mut client, _) = check_in_flight(&d, "4");
    // Another job's GPUs: not the same preflight, so it waits for the node, 1 s at most.
    let o = d.cli(&["check", "--prolog", "--deadline", "1", "--gpus", "0"]);
    let line = format!("{}{}", stdout(&o), stderr(&o));
    assert_eq!(code(&o), 1, "{line}");
    assert!(
        line.starts_with("ddpcheck: TIMEOUT: the wait for the test in progress"),
        "{line}"
    );
    client.kill().unwrap();
    client.wait().unwrap();
}
