//! A reader that goes away (`ddpcheck ... | head`) ends ddpcheck quietly, never with a panic;
//! a signal ends it even when its stderr is a pipe nobody reads any more (`… 2>&1 | tee log`
//! with `tee` gone).

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn a_closed_stdout_ends_the_command_with_141_and_no_panic() {
    // Thousands of lines of JSON into a pipe whose reader is gone before the first write.
    let mut child = Command::new(common::bin("ddpcheck"))
        .args(common::words(
            "--sim h200x8-nvswitch bench collectives --ops all -b 1K -e 1G --json",
        ))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ddpcheck starts");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("ddpcheck ends");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(141), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn a_signal_ends_the_command_when_its_stderr_is_a_closed_pipe() {
    for (sig, name) in [(libc::SIGINT, "SIGINT"), (libc::SIGTERM, "SIGTERM")] {
        // A run that would last ten minutes: the simulated all-reduce hangs to its deadline.
        let mut child = Command::new(common::bin("ddpcheck"))
            .args(["--sim", "h200x2-nvlink+hang", "check", "--deadline", "600"])
            .env_remove("DDPCHECK_DAEMON")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("ddpcheck starts");
        drop(child.stderr.take());
        // Past start-up (the signal handlers are set first thing), into the hang.
        std::thread::sleep(Duration::from_millis(1500));
        assert!(child.try_wait().unwrap().is_none(), "ended before {name}");
        let pid = libc::pid_t::try_from(child.id()).unwrap();
        // SAFETY: kill(2) on our own child.
        unsafe {
            libc::kill(pid, sig);
        }
        let sent = Instant::now();
        let status = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            if sent.elapsed() > Duration::from_secs(15) {
                let _ = child.kill();
                let _ = child.wait();
                panic!("ddpcheck still running 15 s after {name} with its stderr closed");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        assert_eq!(status.code(), Some(128 + sig), "{name}: {status:?}");
    }
}
