//! `ddpcheckd --listen PATH` replaces only a socket nobody answers on: a regular file at PATH
//! (the daemon's own history database, say) is refused with one line and exit 64, and kept.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ddpcheck_testkit::daemon::{ready_lines, sim_daemon};

/// `ddpcheckd` on a simulated node with its state and runtime folders in `dir`.
fn ddpcheckd(dir: &Path, listen: &Path) -> Command {
    sim_daemon(
        Path::new(env!("CARGO_BIN_EXE_ddpcheckd")),
        "h200x2-nvlink",
        dir,
        listen,
    )
}

/// Starts `cmd`, waits for its ready line (30 s at most) and stops it again; whether it was
/// ready.
fn became_ready(cmd: &mut Command) -> bool {
    let mut child = cmd.stderr(Stdio::piped()).spawn().expect("spawn ddpcheckd");
    let ready = ready_lines(&mut child, Duration::from_secs(30)).is_ok();
    stop(&mut child);
    ready
}

fn stop(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn a_file_at_the_listen_path_is_refused_and_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A first daemon makes its history database.
    assert!(became_ready(&mut ddpcheckd(
        dir.path(),
        &dir.path().join("d.sock")
    )));
    let db = dir.path().join("state").join("history.db");
    let before = std::fs::read(&db).expect("the history database");

    let mut child = ddpcheckd(dir.path(), &db)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ddpcheckd");
    let started = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break Some(s);
        }
        if started.elapsed() > Duration::from_secs(30) {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    if status.is_none() {
        stop(&mut child);
    }
    let mut err = String::new();
    let _ = std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut err);
    let after = std::fs::read(&db);
    assert!(
        after.as_ref().is_ok_and(|a| *a == before),
        "the history database was replaced: {err}"
    );
    let status = status.expect("ddpcheckd ended by itself");
    assert_eq!(status.code(), Some(64), "{err}");
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("ddpcheckd")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].contains("is a regular file, not a socket"),
        "{err}"
    );
}

/// A socket left by a daemon that died (nobody answers on it) is replaced, as before.
#[test]
fn a_stale_socket_at_the_listen_path_is_replaced() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("d.sock");
    drop(std::os::unix::net::UnixListener::bind(&sock).expect("bind"));
    assert!(became_ready(&mut ddpcheckd(dir.path(), &sock)));
}

/// `ddpcheckd` on `listen` that must end by itself within 10 s: its exit code and the lines of
/// stderr that are its own (not the log's).
fn refused(dir: &Path, listen: &Path) -> (Option<i32>, Vec<String>) {
    let mut cmd = ddpcheckd(dir, listen);
    cmd.env("DDPCHECK_LOG", "warn");
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ddpcheckd");
    let started = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if started.elapsed() > Duration::from_secs(10) {
            stop(&mut child);
            panic!("ddpcheckd on {} did not end", listen.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = child.wait_with_output().expect("output");
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    (o.status.code(), err.lines().map(str::to_string).collect())
}

#[test]
fn a_fifo_at_the_listen_path_is_named_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("d.sock");
    let c = std::ffi::CString::new(fifo.to_str().expect("utf-8")).expect("no NUL");
    // SAFETY: mkfifo(3) on a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let (code, lines) = refused(dir.path(), &fifo);
    assert_eq!(code, Some(64), "{lines:?}");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("is a named pipe (FIFO), not a socket"),
        "{lines:?}"
    );
    assert_eq!(lines[0].matches("socket").count(), 1, "{lines:?}");
}

#[test]
fn a_listen_path_longer_than_a_unix_socket_takes_is_a_usage_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let long = dir.path().join(format!("{}.sock", "a".repeat(120)));
    let (code, lines) = refused(dir.path(), &long);
    assert_eq!(code, Some(64), "{lines:?}");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("107 bytes") && lines[0].contains(&long.display().to_string()),
        "{lines:?}"
    );
    // 107 bytes is the longest that binds.
    let base = dir.path().display().to_string().len() + 1;
    let longest = dir.path().join("b".repeat(107 - base));
    assert!(became_ready(&mut ddpcheckd(dir.path(), &longest)));
}
