//! Signals and limits an operator or the system may send a daemon: HUP, USR1, USR2 and ALRM are
//! logged and ignored, QUIT stops it in order as TERM does (a hung run ended and stored
//! `interrupted`), and a file-size limit (`ulimit -f`) fails the history's writes as a full disk
//! would instead of killing the daemon with SIGXFSZ.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;

use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::{bin, code, stderr, stdout};

/// A `ddpcheckd` on a simulated node whose stderr lines are kept for the test to read.
struct Logged {
    child: Child,
    dir: tempfile::TempDir,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Logged {
    /// Starts it with `sim`, its file-size limit (`ulimit -f`, bytes) set to `fsize` when given.
    fn start(sim: &str, fsize: Option<u64>) -> Logged {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new(bin("ddpcheckd"));
        cmd.args(["--sim", sim, "--metrics-listen", "none", "--listen"])
            .arg(dir.path().join("d.sock"))
            .arg("--runtime-dir")
            .arg(dir.path().join("run"))
            .arg("--state-dir")
            .arg(dir.path().join("state"))
            .env_remove("DDPCHECK_SIM")
            .env("DDPCHECK_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(bytes) = fsize {
            let limit = libc::rlimit {
                rlim_cur: bytes,
                rlim_max: bytes,
            };
            // SAFETY: setrlimit is async-signal-safe; it only changes the child's own limit.
            unsafe {
                cmd.pre_exec(move || {
                    if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                });
            }
        }
        let mut child = cmd.spawn().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let kept = lines.clone();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                kept.lock().unwrap().push(line);
            }
        });
        let d = Logged { child, dir, lines };
        d.wait_for_line("ddpcheckd: ready");
        d
    }

    fn socket(&self) -> std::path::PathBuf {
        self.dir.path().join("d.sock")
    }

    fn cli(&self, args: &[&str]) -> std::process::Output {
        crate::common::client(&self.socket())
            .args(args)
            .output()
            .unwrap()
    }

    /// Waits up to 10 s for a stderr line containing `text`; panics past it.
    fn wait_for_line(&self, text: &str) -> String {
        let start = Instant::now();
        loop {
            let found = self
                .lines
                .lock()
                .unwrap()
                .iter()
                .find(|l| l.contains(text))
                .cloned();
            if let Some(line) = found {
                return line;
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "no line with {text:?}: {:?}",
                self.lines.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn signal(&self, sig: libc::c_int) {
        let pid = libc::pid_t::try_from(self.child.id()).unwrap();
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(pid, sig);
        }
    }

    /// Waits up to `bound` for it to exit: its status and how long it took.
    fn exit_within(&mut self, bound: Duration) -> (std::process::ExitStatus, Duration) {
        let start = Instant::now();
        while start.elapsed() < bound {
            if let Some(st) = self.child.try_wait().unwrap() {
                return (st, start.elapsed());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        panic!("ddpcheckd still running {bound:?} after the signal");
    }
}

impl Drop for Logged {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

use crate::common::history_statuses as statuses;

#[test]
fn hup_usr1_usr2_and_alrm_are_logged_and_ignored() {
    let mut d = Logged::start("h200x2-nvlink", None);
    for (sig, name) in [
        (libc::SIGHUP, "SIGHUP"),
        (libc::SIGUSR1, "SIGUSR1"),
        (libc::SIGUSR2, "SIGUSR2"),
        (libc::SIGALRM, "SIGALRM"),
    ] {
        d.signal(sig);
        let line = d.wait_for_line(name);
        assert!(line.contains("ignored"), "{line}");
        assert!(d.child.try_wait().unwrap().is_none(), "{name} ended it");
    }
    let hup = d.wait_for_line("SIGHUP");
    assert!(hup.contains("read at start"), "{hup}");
    let o = d.cli(&["topo"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    d.signal(libc::SIGTERM);
    let (status, _) = d.exit_within(Duration::from_secs(10));
    assert!(status.success(), "{status:?}");
}

#[test]
fn quit_during_a_hung_explain_stops_in_order_within_5_s() {
    let mut d = Logged::start("h200x2-nvlink+hang", None);
    let state = d.dir.path().join("state");
    let client = crate::common::client(&d.socket())
        .args(["explain", "--deadline", "600"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    crate::common::wait_for_running(&state, "explain");
    d.signal(libc::SIGQUIT);
    let (status, took) = d.exit_within(Duration::from_secs(30));
    assert!(status.success(), "{status:?}");
    assert!(took < Duration::from_secs(5), "took {took:?} to stop");
    assert_eq!(statuses(&state), ["interrupted"]);
    let o = client.wait_with_output().unwrap();
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    assert!(stderr(&o).contains("ddpcheckd stopped"), "{}", stderr(&o));
}

#[test]
fn a_file_size_limit_fails_the_write_as_a_full_disk_and_kills_nothing() {
    // Enough for the history's first pages, not for a stored report.
    let mut d = Logged::start("h200x2-nvlink", Some(40 * 1024));
    for _ in 0..3 {
        let o = d.cli(&["check", "--json"]);
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        assert!(stdout(&o).contains("\"verdict\""), "{}", stdout(&o));
        assert!(d.child.try_wait().unwrap().is_none(), "the daemon died");
    }
    d.wait_for_line("history");
    d.signal(libc::SIGTERM);
    let (status, _) = d.exit_within(Duration::from_secs(10));
    assert!(status.success(), "{status:?}");
}
