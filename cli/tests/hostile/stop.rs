//! Stopping the daemon: SIGTERM during a simulated run that hangs ends the run promptly, leaves
//! no history row `running`, and tells the client why; a control socket path with a control
//! character is refused; folders the daemon made for its socket go when it stops.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{bin, code, output_within, ready_line, stderr, Daemon};

/// Well under systemd's stop timeout (the unit's TimeoutStopSec is 30 s).
const STOP_BOUND: Duration = Duration::from_secs(5);

use crate::common::history_statuses as statuses;

fn sigterm(child: &Child) {
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    // SAFETY: kill(2) on our own child's pid.
    unsafe {
        libc::kill(pid, libc::SIGTERM);
    }
}

/// Waits for `child` to exit within `bound`; how long it took, or `None` past it (then kills it).
fn exit_within(child: &mut Child, bound: Duration) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < bound {
        if child.try_wait().unwrap().is_some() {
            return Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

#[test]
fn sigterm_during_a_hung_simulated_run_stops_promptly_and_leaves_no_running_row() {
    for args in [
        &["bench", "collectives", "--deadline", "600"][..],
        &["check", "--deadline", "600"],
        &["explain", "--deadline", "600"],
    ] {
        let mut d = Daemon::start(Some("h200x2-nvlink+hang"));
        let state = d.dir.path().join("state");
        let client = crate::common::client(&d.socket)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        crate::common::wait_for_running(&state, &format!("{args:?}"));
        sigterm(&d.child);
        let took = exit_within(&mut d.child, Duration::from_secs(30));
        let o = client.wait_with_output().unwrap();
        let took =
            took.unwrap_or_else(|| panic!("{args:?}: ddpcheckd still running 30 s after SIGTERM"));
        assert!(
            took < STOP_BOUND,
            "{args:?}: ddpcheckd took {took:?} to stop"
        );
        let rows = statuses(&state);
        assert_eq!(rows, ["interrupted"], "{args:?}");
        let err = stderr(&o);
        assert_eq!(code(&o), 3, "{args:?}: {err}");
        assert!(!err.contains("h2 protocol error"), "{args:?}: {err}");
        assert!(err.contains("ddpcheckd stopped"), "{args:?}: {err}");
    }
}

/// Starts `ddpcheckd` on a simulated node with exactly these arguments (no socket of the test
/// harness's own); waits for its ready line.
fn start_raw(dir: &Path, args: &[&std::ffi::OsStr]) -> Child {
    let mut child = Command::new(bin("ddpcheckd"))
        .args(["--sim", "h200x2-nvlink", "--metrics-listen", "none"])
        .arg("--runtime-dir")
        .arg(dir.join("run"))
        .arg("--state-dir")
        .arg(dir.join("state"))
        .args(args)
        .env_remove("DDPCHECK_SIM")
        .env("DDPCHECK_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    ready_line(&mut child, Duration::from_secs(30));
    child
}

#[test]
fn a_socket_path_with_a_control_character_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    for bad in ["a\nb.sock", "a\rb.sock", "a\u{1b}[31mb.sock"] {
        let path = dir.path().join(bad);
        let mut cmd = Command::new(bin("ddpcheckd"));
        cmd.args(["--sim", "h200x2-nvlink", "--metrics-listen", "none"])
            .arg("--listen")
            .arg(&path)
            .arg("--state-dir")
            .arg(dir.path().join("state"))
            .env_remove("DDPCHECK_SIM");
        let o = output_within(&mut cmd, Duration::from_secs(10));
        let err = stderr(&o);
        assert_eq!(code(&o), 64, "{bad:?}: {err}");
        assert_eq!(
            err.trim_end().lines().count(),
            1,
            "{bad:?}: one line: {err:?}"
        );
        assert!(err.contains("control character"), "{bad:?}: {err}");
        assert!(!path.exists(), "{bad:?}");
    }
}

#[test]
fn folders_made_for_the_socket_go_when_the_daemon_stops_and_others_stay() {
    let dir = tempfile::tempdir().unwrap();
    let made = dir.path().join("made");
    let socket = made.join("by/daemon/d.sock");
    let mut child = start_raw(dir.path(), &["--listen".as_ref(), socket.as_os_str()]);
    assert!(socket.exists());
    sigterm(&child);
    assert!(exit_within(&mut child, Duration::from_secs(10)).is_some());
    assert!(!made.exists(), "{} left behind", made.display());

    // A folder that was there before stays, with what else it holds.
    let kept = dir.path().join("kept");
    std::fs::create_dir(&kept).unwrap();
    std::fs::write(kept.join("other"), "x").unwrap();
    let socket = kept.join("sub/d.sock");
    let mut child = start_raw(dir.path(), &["--listen".as_ref(), socket.as_os_str()]);
    sigterm(&child);
    assert!(exit_within(&mut child, Duration::from_secs(10)).is_some());
    assert!(!kept.join("sub").exists());
    assert!(kept.join("other").exists());
}
