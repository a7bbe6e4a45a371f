//! A simulated `ddpcheckd` on a temporary folder, and its stderr read up to its ready line.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The line `ddpcheckd` prints once it serves.
pub const READY: &str = "ddpcheckd: ready";

/// `BIN --sim SIM --metrics-listen none --listen LISTEN --state-dir DIR/state --runtime-dir
/// DIR/run`, without the caller's `DDPCHECK_SIM`, `DDPCHECK_CONFIG` and `DDPCHECK_LISTEN`: a
/// daemon whose every folder is the test's own. Callers add arguments, variables and where its
/// output goes.
pub fn sim_daemon(bin: &Path, sim: &str, dir: &Path, listen: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new(bin);
    cmd.args(["--sim", sim, "--metrics-listen", "none"])
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

/// The stderr lines of a daemon started with its stderr piped, up to and including its ready
/// line, once that comes within `limit`; `Err` with the lines seen so far when it does not (the
/// daemon exited, or the time ran out; the caller stops it). Stderr is drained after the ready
/// line, so the daemon never blocks on a full pipe.
pub fn ready_lines(child: &mut Child, limit: Duration) -> Result<Vec<String>, Vec<String>> {
    let Some(stderr) = child.stderr.take() else {
        return Err(vec!["the daemon's stderr is not piped".into()]);
    };
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = mpsc::channel();
    let lines = Arc::clone(&seen);
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let ready = line.starts_with(READY);
            let mut lines = lines.lock().unwrap_or_else(|e| e.into_inner());
            lines.push(line);
            if ready {
                let _ = tx.send(lines.clone());
            }
        }
    });
    rx.recv_timeout(limit)
        .map_err(|_| seen.lock().unwrap_or_else(|e| e.into_inner()).clone())
}
