//! The daemon's own stop is never the node's verdict: a preflight whose worker the daemon's
//! SIGTERM ended is stored `interrupted`; after the restart no health gauge shows it and
//! `check --max-age … --prolog` (the Kubernetes init container's form) does not fail the node
//! for it, it checks the node afresh.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::common::fake_gpu::FakeGpuLibs;
use crate::common::{children_of, code, stderr, stdout, Daemon};

/// Sizes that keep the fake all-reduce to a second or two on two busy cores.
const SWEEP: [&str; 4] = ["--min-bytes", "8M", "--max-bytes", "16M"];

/// Lines of `/metrics` that set a preflight verdict.
fn verdicts_set(metrics: &str) -> Vec<&str> {
    metrics
        .lines()
        .filter(|l| l.starts_with("ddpcheck_preflight_verdict{") && l.ends_with(" 1"))
        .collect()
}

#[test]
fn a_preflight_the_daemon_stops_is_interrupted_not_the_nodes_verdict() {
    let Some(libs) = FakeGpuLibs::build() else {
        return;
    };
    let env = libs.env(true);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let d = Daemon::start_env(None, &[], &env);

    // A preflight whose NCCL worker hangs (by request) until the daemon is stopped.
    let mut check = crate::common::client(&d.socket)
        .args(["check", "--inject-hang", "--deadline", "120"])
        .args(SWEEP)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let daemon_pid = d.child.id();
    let start = Instant::now();
    while children_of(daemon_pid).is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no worker started"
        );
        assert!(check.try_wait().unwrap().is_none(), "check ended early");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(300));
    let (status, dir) = d.stop_keeping_dir();
    assert!(status.success(), "{status:?}");

    // The caller hears that the run was interrupted, not a verdict about the node.
    let until = Instant::now() + Duration::from_secs(20);
    while check.try_wait().unwrap().is_none() {
        assert!(Instant::now() < until, "check did not end with the daemon");
        std::thread::sleep(Duration::from_millis(50));
    }
    let o = check.wait_with_output().unwrap();
    assert_eq!(code(&o), 3, "{}\n{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).is_empty(), "{}", stdout(&o));
    assert!(stderr(&o).contains("interrupted"), "{}", stderr(&o));

    // Restarted on the same state: the run is stored interrupted, and no gauge shows it.
    let d = Daemon::start_in(dir, None, &[], &env);
    assert_eq!(verdicts_set(&d.scrape()), Vec::<&str>::new());
    let h = d.cli(&["--json", "history", "--kind", "preflight"]);
    assert_eq!(code(&h), 0, "{}", stderr(&h));
    let rows: serde_json::Value = serde_json::from_slice(&h.stdout).unwrap();
    assert_eq!(rows[0]["status"], "interrupted", "{rows}");
    assert!(rows[0].get("verdict").is_none(), "{rows}");

    // The prolog with a cached verdict runs a fresh check instead: the node is healthy.
    let mut args = vec!["check", "--max-age", "3600", "--prolog"];
    args.extend(SWEEP);
    let o = d.cli(&args);
    let line = stdout(&o);
    assert_eq!(code(&o), 0, "{line}\n{}", stderr(&o));
    assert_eq!(line.lines().count(), 1, "{line}");
    assert!(
        line.starts_with("ddpcheck: OK: ") || line.starts_with("ddpcheck: WARNING: "),
        "{line}"
    );
    // Its verdict, not the stopped run's, is the node's.
    assert_eq!(verdicts_set(&d.scrape()).len(), 1);
}
