//! Child-process supervision: each child runs in its own process group (and, by default, its
//! own session) under a hard deadline (SIGTERM to the group, a short grace, SIGKILL, reap),
//! speaks JSON lines on stdout, and keeps the tail of its stderr for error messages. Generic:
//! the NCCL worker and the DDP runner (torchrun) both use it (invariant 1).
//!
//! [`run_json_lines_with`] hands every JSON value to a callback; [`run_lines`] hands every
//! line with its text, and its callback may say [`Next::Done`]: everything expected is in, so
//! the child gets only [`Options::done_grace`] to exit by itself. What a callback collected
//! stays with the caller whatever the call returns (a crash or stop after reporting).
//!
//! Nothing is left running: after the child ends, for whatever reason, the rest of its
//! process group is killed too. A child stuck in the kernel (a GPU driver call after an XID)
//! cannot be reaped by anyone; then the call still returns at the deadline and a background
//! thread reaps it later.

use std::collections::VecDeque;
use std::io::{self, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

mod error;
mod group;
mod pipes;

pub use error::{truncate, SuperviseError};
pub use group::{become_subreaper, group_exists, live_members};

use error::describe_status;
use group::{kill_group, stop_group, sweep_group};
use pipes::{read_lines, read_stderr, Chunk};

/// How to supervise one child.
#[derive(Clone, Debug)]
pub struct Options {
    /// From spawn to SIGTERM.
    pub deadline: Duration,
    /// From SIGTERM to SIGKILL.
    pub grace: Duration,
    /// Bytes of stderr kept for messages.
    pub stderr_tail_bytes: usize,
    /// A stdout line longer than this is an error (a runaway child, not a protocol).
    pub max_line_bytes: usize,
    /// Keep going on stdout lines that are not JSON (recorded in [`Outcome::non_json`] and
    /// handed to a [`run_lines`] callback as text), and cut a line longer than
    /// `max_line_bytes` there (the rest of it is dropped) instead of failing; strict by default.
    pub allow_non_json: bool,
    /// Start the child in a new session (setsid) and have the kernel SIGKILL it if the thread
    /// that started it dies (`PR_SET_PDEATHSIG`); when false, only a new process group
    /// (setpgid). Either way the group id is the child's pid. Default true.
    pub new_session: bool,
    /// After the callback says [`Next::Done`], the time the child has to exit by itself before
    /// its group is stopped as at the deadline ([`SuperviseError::Lingered`]); never later than
    /// the deadline.
    pub done_grace: Duration,
    /// When we stop the child (deadline, done grace), still hand the callback the lines it
    /// wrote until its stdout closes, for up to 2 s after it is reaped. Default false: nothing
    /// after the deadline counts.
    pub read_while_stopping: bool,
}

impl Options {
    pub fn new(deadline: Duration) -> Self {
        Options {
            deadline,
            grace: Duration::from_secs(2),
            stderr_tail_bytes: 16 << 10,
            max_line_bytes: 8 << 20,
            allow_non_json: false,
            new_session: true,
            done_grace: Duration::from_secs(10),
            read_while_stopping: false,
        }
    }

    /// For a test whose child is this test binary again: libtest prints its own header on the
    /// child's stdout, and a short grace keeps the test quick.
    #[cfg(test)]
    pub(crate) fn test_binary_child(deadline: Duration) -> Self {
        Options {
            allow_non_json: true,
            grace: Duration::from_millis(500),
            ..Options::new(deadline)
        }
    }
}

/// One stdout line for a [`run_lines`] callback. Blank lines are not handed on.
#[derive(Debug)]
pub struct Line<'a> {
    /// The line without its newline (lossy UTF-8; cut at `max_line_bytes` when lenient).
    pub text: &'a str,
    /// The line as JSON; `None` only with [`Options::allow_non_json`].
    pub json: Option<serde_json::Value>,
}

/// What a [`run_lines`] callback wants next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Keep reading.
    More,
    /// Everything expected is in: give the child [`Options::done_grace`] to exit.
    Done,
}

/// A child that ran to its end with exit status 0.
#[derive(Debug)]
pub struct Outcome {
    pub pid: u32,
    pub status: ExitStatus,
    /// JSON lines handed to `on_line`.
    pub lines: u64,
    pub elapsed: Duration,
    pub stderr_tail: String,
    /// Non-JSON stdout lines (only with `allow_non_json`), truncated, the first few.
    pub non_json: Vec<String>,
}

/// Runs `cmd` with default [`Options`] for `deadline`; see [`run_json_lines_with`].
pub fn run_json_lines(
    cmd: Command,
    stdin: Option<Vec<u8>>,
    deadline: Duration,
    on_line: impl FnMut(serde_json::Value),
) -> Result<Outcome, SuperviseError> {
    run_json_lines_with(cmd, stdin, &Options::new(deadline), on_line)
}

/// Starts `cmd` in its own process group (and session, see [`Options::new_session`]), writes
/// `stdin` to it, and hands every stdout line, parsed as JSON, to `on_line` until the child
/// exits. Blank lines are skipped. The child's stdio is set here; everything else about `cmd`
/// (args, env, cwd) is the caller's.
///
/// Errors: a non-JSON line (unless allowed), an incomplete last line, a non-zero exit, or
/// the deadline; in each case the whole process group is stopped and reaped before return.
pub fn run_json_lines_with(
    cmd: Command,
    stdin: Option<Vec<u8>>,
    opts: &Options,
    mut on_line: impl FnMut(serde_json::Value),
) -> Result<Outcome, SuperviseError> {
    run_lines(cmd, stdin, opts, |line| {
        if let Some(v) = line.json {
            on_line(v);
        }
        Next::More
    })
}

/// The stdout lines seen so far, and what the caller's callback is handed.
struct Reader<'o> {
    opts: &'o Options,
    program: String,
    /// JSON lines handed on.
    lines: u64,
    /// Newline-terminated lines read, blank ones included.
    line_no: u64,
    non_json: Vec<String>,
}

impl Reader<'_> {
    /// What the stdout reader sent, or its silence: lines go to the callback; a line too long
    /// or a read error is the run's failure; the end of stdout and a quiet moment are neither.
    fn take(
        &mut self,
        got: Result<Chunk, mpsc::RecvTimeoutError>,
        on_line: &mut impl FnMut(Line<'_>) -> Next,
    ) -> Result<Next, SuperviseError> {
        match got {
            Ok(Chunk::Line(bytes)) => self.feed(&bytes, false, on_line),
            Ok(Chunk::Partial(bytes)) => self.feed(&bytes, true, on_line),
            Ok(Chunk::TooLong) => Err(SuperviseError::LineTooLong {
                program: self.program.clone(),
                max: self.opts.max_line_bytes,
                stderr_tail: String::new(),
            }),
            Ok(Chunk::Err(source)) => Err(SuperviseError::Io {
                program: self.program.clone(),
                what: "reading stdout".into(),
                source,
            }),
            Ok(Chunk::Eof) | Err(_) => Ok(Next::More),
        }
    }

    /// One line (`partial`: the bytes after the last newline at EOF) to the callback.
    /// Errors only in strict mode, for text that is not JSON.
    fn feed(
        &mut self,
        bytes: &[u8],
        partial: bool,
        on_line: &mut impl FnMut(Line<'_>) -> Next,
    ) -> Result<Next, SuperviseError> {
        if !partial {
            self.line_no += 1;
        }
        let text = String::from_utf8_lossy(bytes);
        if text.trim().is_empty() {
            return Ok(Next::More);
        }
        match serde_json::from_str::<serde_json::Value>(&text) {
            // A partial line may be a complete value that merely lacks its newline.
            Ok(v) => {
                self.lines += 1;
                Ok(on_line(Line {
                    text: &text,
                    json: Some(v),
                }))
            }
            Err(_) if self.opts.allow_non_json => {
                if self.non_json.len() < 20 {
                    self.non_json.push(truncate(text.trim_end(), 200));
                }
                Ok(on_line(Line {
                    text: &text,
                    json: None,
                }))
            }
            Err(_) if partial => Err(SuperviseError::Partial {
                program: self.program.clone(),
                text: truncate(&text, 200),
                stderr_tail: String::new(),
            }),
            Err(_) => Err(SuperviseError::NotJson {
                program: self.program.clone(),
                line_no: self.line_no,
                line: truncate(text.trim_end(), 200),
                stderr_tail: String::new(),
            }),
        }
    }
}

/// [`run_json_lines_with`] for callers that need every line's text (non-JSON lines too, with
/// `allow_non_json`) or that know when the child has said all it will: `on_line` returns
/// [`Next::Done`] then, and a child that does not exit within [`Options::done_grace`] is
/// stopped ([`SuperviseError::Lingered`]).
pub fn run_lines(
    mut cmd: Command,
    stdin: Option<Vec<u8>>,
    opts: &Options,
    mut on_line: impl FnMut(Line<'_>) -> Next,
) -> Result<Outcome, SuperviseError> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    configure(&mut cmd, stdin.is_some(), opts.new_session);
    let start = Instant::now();
    let mut child = spawn_retrying(&mut cmd).map_err(|source| SuperviseError::Spawn {
        program: program.clone(),
        source,
    })?;
    let pid = child.id();
    // Linux pids stay below pid_max (at most 2^22), so every pid fits pid_t.
    let pgid = libc::pid_t::try_from(pid).unwrap_or(libc::pid_t::MAX);
    // Known to the registry until this function returns (a stop mid-run ends the group).
    let _registered = crate::children::register(pgid);

    let ChildIo {
        stderr_thread,
        tail,
        lines: rx,
    } = start_io(&mut child, stdin, opts);

    let mut deadline_at = start + opts.deadline;
    // The deadline is the done grace's, not the hard one.
    let mut done_deadline = false;
    let mut reader = Reader {
        opts,
        program: program.clone(),
        lines: 0,
        line_no: 0,
        non_json: Vec::new(),
    };
    let mut exited: Option<(ExitStatus, Instant)> = None;
    let mut eof = false;
    let mut failure: Option<SuperviseError> = None;
    let mut timed_out = false;
    loop {
        if eof && exited.is_some() {
            break;
        }
        if exited.is_none() {
            match child.try_wait() {
                Ok(Some(st)) => {
                    exited = Some((st, Instant::now()));
                    // Leftovers of the group (a backgrounded grandchild) go with the leader.
                    kill_group(pgid, libc::SIGKILL);
                }
                Ok(None) => {}
                Err(source) => {
                    failure = Some(SuperviseError::Io {
                        program: program.clone(),
                        what: "waiting for the child".into(),
                        source,
                    });
                    break;
                }
            }
        }
        if let Some((_, at)) = exited {
            // Someone outside the group still holds stdout open: stop listening.
            if at.elapsed() > Duration::from_secs(1) {
                break;
            }
        }
        let now = Instant::now();
        if now >= deadline_at && exited.is_none() {
            timed_out = true;
            break;
        }
        let wait = deadline_at
            .saturating_duration_since(now)
            .min(Duration::from_millis(20));
        let got = rx.recv_timeout(wait);
        eof |= matches!(
            got,
            Ok(Chunk::Eof) | Err(mpsc::RecvTimeoutError::Disconnected)
        );
        let fed = reader.take(got, &mut on_line);
        match fed {
            Ok(Next::More) => {}
            Ok(Next::Done) => {
                let at = Instant::now() + opts.done_grace;
                if at < deadline_at {
                    deadline_at = at;
                    done_deadline = true;
                }
            }
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }

    // Stop whatever still runs (deadline, protocol error), then make sure the group is empty.
    let status = stop_and_reap(child, exited.map(|(st, _)| st), pgid, opts.grace);
    if timed_out && opts.read_while_stopping && !eof {
        // What it wrote while being stopped (an error line at SIGTERM, a late result).
        drain_after_stop(&rx, &mut reader, &mut on_line);
    }
    let stderr_tail = stderr_tail(stderr_thread, &tail);
    let lines = reader.lines;

    if timed_out && done_deadline {
        return Err(SuperviseError::Lingered {
            program,
            pid,
            grace: opts.done_grace,
            lines,
            exit: status,
            stderr_tail,
        });
    }
    if timed_out {
        return Err(SuperviseError::Timeout {
            program,
            pid,
            deadline: opts.deadline,
            lines,
            exit: status,
            stderr_tail,
        });
    }
    if let Some(mut f) = failure {
        match &mut f {
            SuperviseError::NotJson { stderr_tail: t, .. }
            | SuperviseError::Partial { stderr_tail: t, .. }
            | SuperviseError::LineTooLong { stderr_tail: t, .. } => *t = stderr_tail,
            _ => {}
        }
        return Err(f);
    }
    let Some(status) = status else {
        return Err(SuperviseError::Io {
            program,
            what: "reaping the child".into(),
            source: io::Error::other("the child did not exit after SIGKILL"),
        });
    };
    if !status.success() {
        return Err(SuperviseError::Failed {
            program,
            status: describe_status(&status),
            code: status.code(),
            signal: status.signal(),
            exit: status,
            lines,
            stderr_tail,
        });
    }
    Ok(Outcome {
        pid,
        status,
        lines,
        elapsed: start.elapsed(),
        stderr_tail,
        non_json: reader.non_json,
    })
}

/// The threads around a child's pipes and what they collect.
struct ChildIo {
    stderr_thread: Option<JoinHandle<()>>,
    /// The last bytes of stderr.
    tail: Arc<Mutex<VecDeque<u8>>>,
    /// stdout, line by line.
    lines: mpsc::Receiver<Chunk>,
}

/// Starts the threads around the child's pipes: one writes `stdin` (a child that does not
/// read cannot block us), one keeps the tail of stderr, one sends stdout's lines.
fn start_io(child: &mut Child, stdin: Option<Vec<u8>>, opts: &Options) -> ChildIo {
    let pid = child.id();
    if let (Some(data), Some(mut w)) = (stdin, child.stdin.take()) {
        thread::spawn(move || {
            let _ = w.write_all(&data);
            // Dropping `w` closes the pipe: the child sees EOF.
        });
    }
    let tail = Arc::new(Mutex::new(VecDeque::<u8>::new()));
    let stderr_thread = child.stderr.take().map(|e| {
        let tail = tail.clone();
        let cap = opts.stderr_tail_bytes;
        thread::spawn(move || read_stderr(e, pid, cap, &tail))
    });
    let (tx, rx) = mpsc::channel();
    if let Some(out) = child.stdout.take() {
        let max = opts.max_line_bytes;
        let cut = opts.allow_non_json;
        thread::spawn(move || read_lines(out, max, cut, tx));
    } else {
        let _ = tx.send(Chunk::Eof);
    }
    ChildIo {
        stderr_thread,
        tail,
        lines: rx,
    }
}

/// Pipes for the child's stdio, and its own process group (or session, with a parent-death
/// signal) so that stopping it stops everything it started.
fn configure(cmd: &mut Command, has_stdin: bool, new_session: bool) {
    cmd.stdin(if has_stdin {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    if new_session {
        // SAFETY: getpid has no preconditions and cannot fail.
        let parent = unsafe { libc::getpid() };
        // SAFETY: the closure runs in the child between fork and exec and makes only
        // async-signal-safe calls there (setsid, prctl, getppid).
        unsafe {
            cmd.pre_exec(move || {
                if libc::setsid() == -1 {
                    return Err(io::Error::last_os_error());
                }
                // If we die without cleaning up, the kernel kills the direct child.
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
                if libc::getppid() != parent {
                    return Err(io::Error::other("parent exited during spawn"));
                }
                Ok(())
            });
        }
    } else {
        cmd.process_group(0);
    }
}

/// The child's exit status, stopping its group first when it still runs; `None` when it is
/// stuck in the kernel past SIGKILL (then it is reaped in the background).
fn stop_and_reap(
    mut child: Child,
    exited: Option<ExitStatus>,
    pgid: libc::pid_t,
    grace: Duration,
) -> Option<ExitStatus> {
    let pid = child.id();
    let status = match exited {
        Some(st) => Some(st),
        None => stop_group(&mut child, pgid, grace),
    };
    if status.is_some() {
        sweep_group(pgid, Duration::from_secs(2));
    } else {
        // Stuck in the kernel: reap it whenever it can die, without holding the caller.
        tracing::warn!(
            pid,
            "child did not exit after SIGKILL; reaping it in the background"
        );
        thread::spawn(move || {
            let _ = child.wait();
            sweep_group(pgid, Duration::from_secs(2));
        });
    }
    status
}

/// Hands on the lines a stopped child still wrote, for two seconds at most.
fn drain_after_stop(
    rx: &mpsc::Receiver<Chunk>,
    reader: &mut Reader<'_>,
    on_line: &mut impl FnMut(Line<'_>) -> Next,
) {
    let until = Instant::now() + Duration::from_secs(2);
    loop {
        let fed = match rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
            Ok(Chunk::Line(bytes)) => reader.feed(&bytes, false, on_line),
            Ok(Chunk::Partial(bytes)) => reader.feed(&bytes, true, on_line),
            _ => break,
        };
        // The stop is the outcome; a bad line now changes nothing.
        if fed.is_err() {
            break;
        }
    }
}

/// The last bytes of the child's stderr, after giving its reader a moment to take them.
fn stderr_tail(reader: Option<JoinHandle<()>>, tail: &Mutex<VecDeque<u8>>) -> String {
    if let Some(h) = reader {
        let until = Instant::now() + Duration::from_millis(500);
        while !h.is_finished() && Instant::now() < until {
            thread::sleep(Duration::from_millis(5));
        }
    }
    let t = tail.lock().unwrap_or_else(|p| p.into_inner());
    let (a, b) = t.as_slices();
    let mut v = a.to_vec();
    v.extend_from_slice(b);
    String::from_utf8_lossy(&v).into_owned()
}

/// Spawning a program just written (a test's fake interpreter, a script) can fail with
/// ETXTBSY while another thread's fork still holds the file open; that clears within
/// milliseconds.
fn spawn_retrying(cmd: &mut Command) -> io::Result<Child> {
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

/// NVLink multicast stays off in every GPU program we start (shared GPU machines require it),
/// also when the child's environment is fresh: set each variable unless the caller (or our
/// environment) chose a value.
pub const MULTICAST_OFF: [(&str, &str); 3] = [
    ("NCCL_NVLS_ENABLE", "0"),
    ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
    ("NVSHMEM_DISABLE_NVLS", "1"),
];

/// Applies [`MULTICAST_OFF`] to a command that will start GPU work.
pub fn keep_multicast_off(cmd: &mut Command) {
    for (k, v) in MULTICAST_OFF {
        let set_on_cmd = cmd.get_envs().any(|(key, val)| key == k && val.is_some());
        if !set_on_cmd && std::env::var_os(k).is_none() {
            cmd.env(k, v);
        }
    }
}

#[cfg(test)]
mod tests;
