//! Minimal child supervision for the DDP runner: own process group, hard deadline, SIGTERM then
//! SIGKILL to the whole group, stdout lines to a callback, a bounded stderr tail.
//!
//! Deliberately small and self-contained so it can be swapped for `crate::supervise` once that
//! lands; the DDP code only uses [`run`] and [`Finished`].

use std::collections::VecDeque;
use std::io::{self, BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// Time between SIGTERM and SIGKILL: torchrun forwards SIGTERM to its workers.
pub(crate) const TERM_GRACE: Duration = Duration::from_secs(3);
/// Longest stdout/stderr line kept; the rest of a longer line is dropped.
const MAX_LINE: usize = 1 << 20;
const TAIL_LINES: usize = 60;
const TAIL_LINE_BYTES: usize = 1000;
const POLL: Duration = Duration::from_millis(50);

/// How a supervised child ended.
#[derive(Debug)]
pub(crate) struct Finished {
    pub status: ExitStatus,
    /// We stopped it at the deadline.
    pub timed_out: bool,
    pub elapsed: Duration,
    /// The last lines of stderr, oldest first.
    pub stderr_tail: Vec<String>,
}

/// Runs `cmd` in its own process group until it exits or `deadline` passes. Every stdout line
/// goes to `on_line`, which may return an earlier deadline. When the leader exits, anything left
/// in its group is killed, so no process outlives the call.
pub(crate) fn run(
    mut cmd: Command,
    deadline: Instant,
    on_line: &mut dyn FnMut(&str) -> Option<Instant>,
) -> io::Result<Finished> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let start = Instant::now();
    let mut child = spawn_retrying(&mut cmd)?;
    let pgid = child.id() as libc::pid_t;
    // Known to the registry until this function returns (a stop mid-run ends the group).
    let _registered = crate::children::register(pgid);

    let (tx, rx) = mpsc::channel::<String>();
    if let Some(out) = child.stdout.take() {
        thread::spawn(move || read_lines(out, |l| tx.send(l).is_ok()));
    } else {
        drop(tx);
    }
    let tail = Arc::new(Mutex::new(VecDeque::<String>::new()));
    let err_reader = child.stderr.take().map(|err| {
        let tail = Arc::clone(&tail);
        thread::spawn(move || {
            read_lines(err, |mut l| {
                tracing::trace!(target: "ddpcheck::ddp::child", "{l}");
                truncate_utf8(&mut l, TAIL_LINE_BYTES);
                if let Ok(mut t) = tail.lock() {
                    if t.len() == TAIL_LINES {
                        t.pop_front();
                    }
                    t.push_back(l);
                }
                true
            })
        })
    });

    let mut deadline = deadline;
    let mut timed_out = false;
    let mut stdout_open = true;
    loop {
        match leader_exited(pgid) {
            Ok(true) => break,
            Ok(false) => {}
            Err(e) => {
                tracing::warn!("waitid on DDP child {pgid}: {e}");
                break;
            }
        }
        let now = Instant::now();
        if now >= deadline {
            timed_out = true;
            terminate_group(pgid);
            break;
        }
        let wait = (deadline - now).min(POLL);
        if stdout_open {
            match rx.recv_timeout(wait) {
                Ok(line) => {
                    if let Some(d) = on_line(&line) {
                        deadline = deadline.min(d);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => stdout_open = false,
            }
        } else {
            thread::sleep(wait);
        }
    }
    // The unreaped leader keeps the group id reserved, so this cannot hit a stranger's group.
    signal_group(pgid, libc::SIGKILL);
    let status = child.wait()?;

    // Lines still in the pipe; it closes once the whole group is gone.
    let drain_until = Instant::now() + Duration::from_secs(2);
    if stdout_open {
        while let Ok(line) = rx.recv_timeout(drain_until.saturating_duration_since(Instant::now()))
        {
            on_line(&line);
        }
    }
    if let Some(h) = err_reader {
        let until = Instant::now() + Duration::from_secs(1);
        while !h.is_finished() && Instant::now() < until {
            thread::sleep(Duration::from_millis(10));
        }
    }
    let stderr_tail = tail
        .lock()
        .map(|t| t.iter().cloned().collect())
        .unwrap_or_default();
    Ok(Finished {
        status,
        timed_out,
        elapsed: start.elapsed(),
        stderr_tail,
    })
}

/// Spawning a script just written can fail with ETXTBSY while another thread's fork still holds
/// the file open; that clears within milliseconds.
fn spawn_retrying(cmd: &mut Command) -> io::Result<std::process::Child> {
    let mut tries = 0;
    loop {
        match cmd.spawn() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < 10 => {
                tries += 1;
                thread::sleep(Duration::from_millis(20));
            }
            other => return other,
        }
    }
}

/// Whether the leader has exited, without reaping it (WNOWAIT).
fn leader_exited(pid: libc::pid_t) -> io::Result<bool> {
    // SAFETY: siginfo_t is plain data; zeroed is a valid value and waitid only writes into it.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our own unreaped child; `info` is a valid, writable siginfo_t.
    let rc = unsafe {
        libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    if rc != 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok(false)
        } else {
            Err(e)
        };
    }
    // SAFETY: waitid succeeded, so si_pid is initialised (0 when no child changed state).
    Ok(unsafe { info.si_pid() } != 0)
}

/// SIGTERM to the group, up to [`TERM_GRACE`] for the leader to go; the caller sends SIGKILL.
fn terminate_group(pgid: libc::pid_t) {
    signal_group(pgid, libc::SIGTERM);
    let until = Instant::now() + TERM_GRACE;
    while Instant::now() < until {
        if !matches!(leader_exited(pgid), Ok(false)) {
            return;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

fn signal_group(pgid: libc::pid_t, sig: libc::c_int) {
    if pgid > 1 {
        // SAFETY: plain syscall; a negative pid addresses the process group we created.
        unsafe {
            libc::kill(-pgid, sig);
        }
    }
}

/// Reads `\n`-separated lines (lossy UTF-8, at most [`MAX_LINE`] bytes kept per line) until EOF
/// or until `f` returns false.
fn read_lines(r: impl Read, mut f: impl FnMut(String) -> bool) {
    let mut r = BufReader::new(r);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match (&mut r).take(MAX_LINE as u64).read_until(b'\n', &mut buf) {
            Ok(0) => return,
            Ok(_) => {
                if buf.last() != Some(&b'\n') && buf.len() >= MAX_LINE {
                    skip_rest_of_line(&mut r);
                }
                let line = String::from_utf8_lossy(&buf);
                if !f(line.trim_end_matches(['\n', '\r']).to_string()) {
                    return;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

fn skip_rest_of_line(r: &mut impl BufRead) {
    let mut sink = Vec::new();
    loop {
        sink.clear();
        match r.take(MAX_LINE as u64).read_until(b'\n', &mut sink) {
            Ok(0) => return,
            Ok(_) if sink.last() == Some(&b'\n') => return,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

fn truncate_utf8(s: &mut String, max: usize) {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push('…');
    }
}
