//! Persistence under kill -9: the real `ddpcheckd` is killed with SIGKILL at varied moments (idle
//! after 1..N completed checks, with a check in flight, in the middle of a stream of checks, right
//! after start) and restarted on the same state directory. Afterwards the SQLite history, opened
//! read-only, must pass `PRAGMA integrity_check`, hold every check whose verdict reached a client
//! as `complete`, and show every run that was in flight at a kill as `interrupted`.

// The kill rounds run as one test: each round restarts on the state directory the previous
// rounds left, and the final checks read all of them.
#![allow(clippy::too_many_lines)]
// Pids and history ids pass between u32, i32, i64 and usize here; all are small.
#![allow(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_possible_wrap
)]
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed set-up is a failed test

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use common::bin;
use ddpcheck_testkit::daemon::{ready_lines, sim_daemon};
use rusqlite::{Connection, OpenFlags};

/// A daemon on a fixed directory: socket, runtime dir and state dir survive its restarts.
struct Daemon {
    child: Child,
    socket: PathBuf,
}

impl Daemon {
    fn start(root: &Path, sim: &str) -> Daemon {
        let socket = root.join("d.sock");
        let mut child = sim_daemon(&bin("ddpcheckd"), sim, root, &socket)
            // Clients here run checks back to back on purpose: no rate limit.
            .args(["--work-rate-per-minute", "0"])
            .env("DDPCHECK_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn ddpcheckd");
        if let Err(lines) = ready_lines(&mut child, Duration::from_secs(20)) {
            let _ = child.kill();
            panic!("ddpcheckd ({sim}) did not become ready within 20 s: {lines:?}");
        }
        Daemon { child, socket }
    }

    /// SIGKILL: no handler runs, nothing is flushed or closed by the daemon.
    fn kill9(mut self) {
        self.child.kill().expect("SIGKILL ddpcheckd");
        self.child.wait().expect("reap ddpcheckd");
    }

    fn stop(mut self) -> std::process::ExitStatus {
        // SAFETY: plain kill(2) on our own child's pid.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(st)) = self.child.try_wait() {
                return st;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("ddpcheckd did not stop within 10 s of SIGTERM");
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What a `ddpcheck check --json` call gave its caller.
#[derive(Debug, Clone)]
enum Outcome {
    Verdict(Seen),
    NoVerdict { exit: i32, stderr: String },
}

/// A verdict the client received, with what identifies its report in the history.
#[derive(Debug, Clone)]
struct Seen {
    verdict: String,
    exit: i32,
    time: String,
    wall_seconds: f64,
}

fn spawn_check(socket: &Path, args: &[&str]) -> Child {
    common::client(socket)
        .args(["check", "--json"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ddpcheck")
}

/// Waits (bounded) for a client and reads what it got.
fn outcome(child: Child) -> Outcome {
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(o) => o.expect("wait for ddpcheck"),
        Err(_) => {
            // SAFETY: kill(2) on our own child's pid; it is not reaped yet (the thread waits on it).
            unsafe {
                libc::kill(pid as i32, libc::SIGKILL);
            }
            panic!("ddpcheck did not finish within 20 s");
        }
    };
    let exit = out.status.code().unwrap_or(-1);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    match serde_json::from_slice::<serde_json::Value>(&out.stdout) {
        Ok(v) if v["verdict"].is_string() => {
            let seen = Seen {
                verdict: v["verdict"].as_str().unwrap().to_string(),
                exit: v["exit_code"].as_i64().expect("exit_code") as i32,
                time: v["provenance"]["time"].as_str().expect("time").to_string(),
                wall_seconds: v["wall_seconds"].as_f64().expect("wall_seconds"),
            };
            assert_eq!(seen.exit, exit, "exit status and report disagree: {v}");
            Outcome::Verdict(seen)
        }
        _ => {
            // No report: the daemon went away mid-call, or was not there.
            assert_eq!(
                exit, 3,
                "a call without a report must be UNKNOWN (3): {stderr}"
            );
            Outcome::NoVerdict { exit, stderr }
        }
    }
}

fn check(socket: &Path, args: &[&str]) -> Outcome {
    outcome(spawn_check(socket, args))
}

#[derive(Debug)]
struct Row {
    id: i64,
    status: String,
    verdict: Option<String>,
    exit_code: Option<i32>,
    json: Option<String>,
    backend_label: String,
}

fn open_ro(db: &Path) -> Connection {
    Connection::open_with_flags(
        db,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .expect("open history read-only")
}

fn rows(db: &Path) -> Vec<Row> {
    let c = open_ro(db);
    let mut s = c
        .prepare(
            "SELECT id, status, verdict, exit_code, json, backend_label FROM reports ORDER BY id",
        )
        .unwrap();
    s.query_map([], |r| {
        Ok(Row {
            id: r.get(0)?,
            status: r.get(1)?,
            verdict: r.get(2)?,
            exit_code: r.get(3)?,
            json: r.get(4)?,
            backend_label: r.get(5)?,
        })
    })
    .unwrap()
    .collect::<Result<Vec<_>, _>>()
    .unwrap()
}

fn integrity(db: &Path) -> String {
    open_ro(db)
        .query_row("PRAGMA integrity_check", [], |r| r.get::<_, String>(0))
        .unwrap()
}

/// Waits until the history shows a run in flight; returns its id.
fn wait_running(db: &Path) -> i64 {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(10) {
        if db.exists() {
            if let Some(r) = rows(db).into_iter().find(|r| r.status == "running") {
                return r.id;
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("no run became `running` within 10 s");
}

/// How a round ends.
#[derive(Clone, Copy, Debug)]
enum End {
    /// kill -9 with the daemon idle, right after the last check returned.
    Idle,
    /// kill -9 while a hanging check (deadline 30 s) is in flight.
    InFlight,
    /// kill -9 this long after a client started running checks back to back.
    Racing(Duration),
}

struct Round {
    sim: &'static str,
    checks: usize,
    end: End,
}

#[test]
fn repeated_kill9_loses_no_reported_check_and_marks_in_flight_runs_interrupted() {
    let t_start = Instant::now();
    let root = tempfile::tempdir().unwrap();
    let db = root.path().join("state/history.db");
    let plain = "h200x2-nvlink";
    let hang = "h200x2-nvlink+hang";
    let rounds = [
        Round {
            sim: plain,
            checks: 1,
            end: End::Idle,
        },
        Round {
            sim: plain,
            checks: 2,
            end: End::InFlight,
        },
        Round {
            sim: hang,
            checks: 1,
            end: End::InFlight,
        },
        Round {
            sim: plain,
            checks: 3,
            end: End::Racing(Duration::from_millis(40)),
        },
        Round {
            sim: plain,
            checks: 4,
            end: End::Racing(Duration::from_millis(150)),
        },
        Round {
            sim: plain,
            checks: 5,
            end: End::InFlight,
        },
        Round {
            sim: plain,
            checks: 0,
            end: End::Racing(Duration::from_millis(5)),
        },
        Round {
            sim: plain,
            checks: 1,
            end: End::Racing(Duration::from_millis(23)),
        },
        Round {
            sim: plain,
            checks: 1,
            end: End::Racing(Duration::from_millis(67)),
        },
        Round {
            sim: plain,
            checks: 1,
            end: End::Racing(Duration::from_millis(95)),
        },
        Round {
            sim: plain,
            checks: 2,
            end: End::Idle,
        },
    ];

    let mut seen: Vec<Seen> = Vec::new();
    let mut in_flight_ids: Vec<i64> = Vec::new();
    // Calls that got no report while a kill raced them: each may have left a row or none.
    let mut raced_without_verdict = 0usize;

    for (n, round) in rounds.iter().enumerate() {
        let d = Daemon::start(root.path(), round.sim);
        // The restart closed every run the previous daemon left open.
        if db.exists() {
            let rs = rows(&db);
            assert!(
                rs.iter().all(|r| r.status != "running"),
                "round {n}: a `running` row survived the restart: {rs:?}"
            );
            for id in &in_flight_ids {
                let r = rs.iter().find(|r| r.id == *id).expect("in-flight row kept");
                assert_eq!(r.status, "interrupted", "round {n}: run {id}");
            }
        }
        for _ in 0..round.checks {
            // On the hanging profile a completed check is a TIMEOUT verdict after 1 s.
            let o = check(&d.socket, &["--deadline", "1"]);
            match o {
                Outcome::Verdict(s) => {
                    let want = if round.sim == hang { "TIMEOUT" } else { "OK" };
                    assert_eq!(s.verdict, want, "round {n}");
                    seen.push(s);
                }
                Outcome::NoVerdict { stderr, .. } => {
                    panic!("round {n}: a check against a live daemon got no verdict: {stderr}")
                }
            }
        }
        match round.end {
            End::Idle => d.kill9(),
            End::InFlight => {
                let args: &[&str] = if round.sim == hang {
                    &["--deadline", "30"]
                } else {
                    &["--deadline", "30", "--inject-hang"]
                };
                let client = spawn_check(&d.socket, args);
                let id = wait_running(&db);
                d.kill9();
                match outcome(client) {
                    Outcome::NoVerdict { exit, .. } => assert_eq!(exit, 3),
                    Outcome::Verdict(s) => panic!("round {n}: hung check got a verdict {s:?}"),
                }
                in_flight_ids.push(id);
            }
            End::Racing(delay) => {
                let stop = Arc::new(AtomicBool::new(false));
                let socket = d.socket.clone();
                let stop2 = stop.clone();
                let client = std::thread::spawn(move || {
                    let mut got = Vec::new();
                    while !stop2.load(Ordering::SeqCst) {
                        got.push(check(&socket, &[]));
                    }
                    got
                });
                std::thread::sleep(delay);
                stop.store(true, Ordering::SeqCst);
                d.kill9();
                for o in client.join().unwrap() {
                    match o {
                        Outcome::Verdict(s) => seen.push(s),
                        Outcome::NoVerdict { .. } => raced_without_verdict += 1,
                    }
                }
            }
        }
        // The file the dead daemon left is consistent before anyone recovers it.
        assert_eq!(integrity(&db), "ok", "round {n}: after kill -9");
    }

    // A last start recovers the last kill; a check still works; a clean stop closes the file.
    let d = Daemon::start(root.path(), plain);
    match check(&d.socket, &[]) {
        Outcome::Verdict(s) => seen.push(s),
        Outcome::NoVerdict { stderr, .. } => panic!("check after recovery failed: {stderr}"),
    }
    // `ddpcheck history` shows the same runs as the file, interrupted ones included (those of
    // this daemon's backend: the `+hang` rounds ran on another).
    let listed = common::client(&d.socket)
        .args(["history", "--json", "--limit", "1000"])
        .output()
        .expect("run ddpcheck history");
    assert!(listed.status.success(), "{listed:?}");
    let listed: Vec<serde_json::Value> =
        serde_json::from_slice(&listed.stdout).expect("history --json is JSON");
    assert!(d.stop().success());

    assert_eq!(integrity(&db), "ok");
    let rs = rows(&db);
    // Rows are deleted only beyond history_max_runs (10,000 by default, far above this test's
    // runs) and a rolled-back insert takes no id: ids 1..=N means none vanished.
    for (i, r) in rs.iter().enumerate() {
        assert_eq!(r.id, i as i64 + 1, "history ids have a gap: {rs:?}");
    }
    for r in &rs {
        assert!(
            r.status == "complete" || r.status == "interrupted",
            "row {} is {} (only complete and interrupted expected): {rs:?}",
            r.id,
            r.status
        );
        if r.status == "complete" {
            let v: serde_json::Value =
                serde_json::from_str(r.json.as_deref().expect("complete row has its report"))
                    .expect("stored report is JSON");
            assert_eq!(v["verdict"].as_str(), r.verdict.as_deref(), "row {}", r.id);
            assert_eq!(
                v["exit_code"].as_i64(),
                r.exit_code.map(i64::from),
                "row {}",
                r.id
            );
        }
    }
    for id in &in_flight_ids {
        assert_eq!(rs[(*id - 1) as usize].status, "interrupted", "run {id}");
    }
    let by_history: Vec<(i64, String)> = listed
        .iter()
        .rev()
        .map(|e| {
            (
                e["id"].as_i64().unwrap(),
                e["status"].as_str().unwrap().into(),
            )
        })
        .collect();
    let by_file: Vec<(i64, String)> = rs
        .iter()
        .filter(|r| r.backend_label == format!("sim:{plain}"))
        .map(|r| (r.id, r.status.clone()))
        .collect();
    assert_eq!(by_history, by_file);

    // Every verdict a client saw is stored as complete (matched one to one).
    let mut complete: Vec<(Row, serde_json::Value)> = rs
        .into_iter()
        .filter(|r| r.status == "complete")
        .map(|r| {
            let v = serde_json::from_str(r.json.as_deref().unwrap()).unwrap();
            (r, v)
        })
        .collect();
    let n_complete = complete.len();
    for s in &seen {
        let pos = complete.iter().position(|(_, v)| {
            v["verdict"] == s.verdict.as_str()
                && v["exit_code"].as_i64() == Some(i64::from(s.exit))
                && v["provenance"]["time"] == s.time.as_str()
                && v["wall_seconds"]
                    .as_f64()
                    .is_some_and(|w| (w - s.wall_seconds).abs() <= 1e-12 * w.abs().max(1.0))
        });
        match pos {
            Some(i) => {
                complete.swap_remove(i);
            }
            None => panic!("a verdict the client received is not in the history: {s:?}"),
        }
    }
    // Nothing else: complete rows beyond the seen verdicts can only be raced calls whose report
    // was stored but not delivered before the kill; interrupted rows beyond the known in-flight
    // runs likewise.
    let n_interrupted = rows(&db)
        .iter()
        .filter(|r| r.status == "interrupted")
        .count();
    assert!(n_interrupted >= in_flight_ids.len());
    let extra = complete.len() + (n_interrupted - in_flight_ids.len());
    assert!(
        extra <= raced_without_verdict,
        "{extra} stored runs that no client call accounts for ({raced_without_verdict} raced calls got no verdict)"
    );

    let elapsed = t_start.elapsed();
    eprintln!(
        "kill9: {} rounds, {} verdicts seen, all matched, of {} complete rows, {} interrupted ({} known in flight, {} raced calls without verdict), {:.1} s",
        rounds.len(),
        seen.len(),
        n_complete,
        n_interrupted,
        in_flight_ids.len(),
        raced_without_verdict,
        elapsed.as_secs_f64()
    );
    assert!(elapsed < Duration::from_secs(30), "took {elapsed:?}");
}
