//! `ddpcheckd --listen PATH` replaces only a socket nobody answers on: a regular file at PATH
//! (the daemon's own history database, say) is refused with one line and exit 64, and kept.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `ddpcheckd` on a simulated node with its state and runtime folders in `dir`.
fn ddpcheckd(dir: &Path, listen: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ddpcheckd"));
    cmd.args(["--sim", "h200x2-nvlink", "--metrics-listen", "none"])
        .arg("--listen")
        .arg(listen)
        .arg("--state-dir")
        .arg(dir.join("state"))
        .arg("--runtime-dir")
        .arg(dir.join("run"))
        .env_remove("DDPCHECK_SIM")
        .env_remove("DDPCHECK_CONFIG")
        .env_remove("DDPCHECK_LISTEN");
    cmd
}

/// Starts `cmd`, waits for its ready line (30 s at most) and stops it again; whether it was
/// ready.
fn became_ready(cmd: &mut Command) -> bool {
    let mut child = cmd.stderr(Stdio::piped()).spawn().expect("spawn ddpcheckd");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.starts_with("ddpcheckd: ready") {
                let _ = tx.send(());
            }
        }
    });
    let ready = rx.recv_timeout(Duration::from_secs(30)).is_ok();
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
