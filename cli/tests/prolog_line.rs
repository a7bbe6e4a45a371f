//! `check --prolog` answers with one line, always (Slurm and NHC read one): a worker that dies
//! with a screenful of stderr, and a second check while one runs, each give a single
//! `ddpcheck: VERDICT: reason` line that says its verdict once.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed set-up is a failed test

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::fake_gpu::FakeGpuLibs;
use common::{bin, children_of, code, stderr, stdout, Daemon};

/// `child`'s output once it exits (its pipes hold a few lines at most), killing it past `limit`.
fn wait_within(mut child: std::process::Child, limit: Duration) -> std::process::Output {
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("ddpcheck did not end within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// A library that writes eight lines to stderr as it is loaded: preloaded, every process
/// (the NCCL worker too) starts with them in its stderr.
fn noisy_library(dir: &std::path::Path) -> Option<std::path::PathBuf> {
    let src = dir.join("noisy.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\n__attribute__((constructor)) static void noise(void) {\n  for (int i = 1; i <= 8; i++) fprintf(stderr, \"noise line %d\\n\", i);\n}\n",
    )
    .unwrap();
    let lib = dir.join("libnoisy.so");
    let built = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(&src)
        .status()
        .is_ok_and(|s| s.success());
    built.then_some(lib)
}

#[test]
fn a_worker_that_dies_with_lines_on_stderr_gives_one_prolog_line() {
    let Some(libs) = FakeGpuLibs::build() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let noisy = noisy_library(dir.path()).expect("cc builds the fake libraries, so this too");
    let mut child = Command::new(bin("ddpcheck"))
        .args(["check", "--prolog", "--inject-hang", "--no-host-copies"])
        .args(["--deadline", "120"])
        .env_remove("DDPCHECK_SIM")
        .env_remove("DDPCHECK_DAEMON")
        .env("DDPCHECK_RUNTIME_DIR", dir.path())
        .envs(libs.env(true))
        .env("LD_PRELOAD", &noisy)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let worker = loop {
        if let Some(&w) = children_of(child.id()).first() {
            break w;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "no worker");
        assert!(child.try_wait().unwrap().is_none(), "check ended early");
        std::thread::sleep(Duration::from_millis(100));
    };
    // Its stderr has its lines by now (they are written as it loads).
    std::thread::sleep(Duration::from_millis(500));
    let worker = libc::pid_t::try_from(worker).unwrap();
    // SAFETY: kill(2) on the worker the check started.
    unsafe {
        libc::kill(worker, libc::SIGKILL);
    }
    let o = wait_within(child, Duration::from_secs(30));
    let out = stdout(&o);
    assert_eq!(code(&o), 1, "{out}\n{}", stderr(&o));
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(out.starts_with("ddpcheck: UNKNOWN: "), "{out}");
    assert!(out.contains("noise line 1 noise line 2"), "{out}");
}

#[test]
fn a_second_check_says_busy_once() {
    let d = Daemon::start(Some("h200x2-nvlink+hang"));
    // The first check holds the daemon for its 8 s deadline.
    let mut first = common::client(&d.socket)
        .args(["check", "--deadline", "8"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        let h = d.cli(&["--json", "history", "--kind", "preflight"]);
        let rows: serde_json::Value = serde_json::from_slice(&h.stdout).unwrap_or_default();
        if rows[0]["status"] == "running" {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(6), "no run started");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Not a prolog: BUSY (exit 4) at once. (A prolog waits for the run instead:
    // prolog_joins.rs.)
    let o = d.cli(&["check"]);
    let out = stderr(&o);
    assert_eq!(code(&o), 4, "{out}\n{}", stdout(&o));
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(out.starts_with("ddpcheck: BUSY: "), "{out}");
    assert!(!out.contains("BUSY: BUSY"), "{out}");
    // The first ends at its deadline before the daemon is stopped.
    let _ = first.wait();
    d.stop();
}
