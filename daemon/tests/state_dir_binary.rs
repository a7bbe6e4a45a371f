//! The `ddpcheckd` binary on its state folder: a second daemon on a folder a live one uses exits
//! 1 with one line naming the folder and the holder; a corrupted history is moved aside with one
//! log line that names where it went, and the daemon starts.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed set-up is a failed test

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use ddpcheck_testkit::daemon::{ready_lines, sim_daemon};

fn ddpcheckd(dir: &Path, socket: &str) -> Command {
    let mut cmd = sim_daemon(
        Path::new(env!("CARGO_BIN_EXE_ddpcheckd")),
        "h200x2-nvlink",
        dir,
        dir.join(socket),
    );
    cmd.env("DDPCHECK_LOG", "warn");
    cmd
}

/// Starts it and returns it with its stderr lines up to the ready line.
fn start(mut cmd: Command) -> (Child, Vec<String>) {
    let mut child = cmd.stderr(Stdio::piped()).spawn().unwrap();
    match ready_lines(&mut child, Duration::from_secs(20)) {
        Ok(lines) => (child, lines),
        Err(lines) => {
            let _ = child.kill();
            panic!("ddpcheckd did not become ready: {lines:?}");
        }
    }
}

#[test]
fn a_second_daemon_on_the_same_state_folder_exits_1_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let (mut first, _) = start(ddpcheckd(dir.path(), "a.sock"));
    let o = ddpcheckd(dir.path(), "b.sock").output().unwrap();
    let _ = first.kill();
    let _ = first.wait();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("ddpcheckd")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    let want = format!(
        "another ddpcheckd (pid {}) uses the state folder {}",
        first.id(),
        dir.path().join("state").display()
    );
    assert!(lines[0].contains(&want), "{err}");
}

#[test]
fn a_corrupted_history_is_moved_aside_with_its_name_logged() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("state")).unwrap();
    std::fs::write(dir.path().join("state/history.db"), vec![0xA5_u8; 10_000]).unwrap();
    let (mut d, lines) = start(ddpcheckd(dir.path(), "d.sock"));
    let _ = d.kill();
    let _ = d.wait();
    let moved: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("moved aside to"))
        .collect();
    assert_eq!(moved.len(), 1, "{lines:?}");
    let aside = moved[0]
        .split("moved aside to ")
        .nth(1)
        .and_then(|rest| rest.split(';').next())
        .unwrap();
    assert!(aside.contains("history.db.corrupt-"), "{aside}");
    assert_eq!(std::fs::read(aside).unwrap(), vec![0xA5_u8; 10_000]);
}
