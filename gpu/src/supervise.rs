//! Child-process supervision: each child runs in its own session and process group under a
//! hard deadline (SIGTERM to the group, a short grace, SIGKILL, reap), speaks JSON lines on
//! stdout, and keeps the tail of its stderr for error messages. Generic: the NCCL worker and
//! the DDP runner (torchrun) both use it (invariant 1).
//!
//! Nothing is left running: after the child ends, for whatever reason, the rest of its
//! process group is killed too. A child stuck in the kernel (a GPU driver call after an XID)
//! cannot be reaped by anyone; then the call still returns at the deadline and a background
//! thread reaps it later.

use std::collections::VecDeque;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

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
    /// Keep going on stdout lines that are not JSON (recorded in [`Outcome::non_json`]);
    /// strict by default.
    pub allow_non_json: bool,
}

impl Options {
    pub fn new(deadline: Duration) -> Self {
        Options {
            deadline,
            grace: Duration::from_secs(2),
            stderr_tail_bytes: 16 << 10,
            max_line_bytes: 8 << 20,
            allow_non_json: false,
        }
    }
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

#[derive(Debug, thiserror::Error)]
pub enum SuperviseError {
    #[error("could not start {program}: {source}")]
    Spawn {
        program: String,
        #[source]
        source: io::Error,
    },
    #[error("{program} did not finish within {:.1} s; its process group was stopped{}", .deadline.as_secs_f64(), tail_suffix(.stderr_tail))]
    Timeout {
        program: String,
        pid: u32,
        deadline: Duration,
        lines: u64,
        stderr_tail: String,
    },
    #[error("{program} printed a line that is not JSON (stdout line {line_no}): {line:?}{}", tail_suffix(.stderr_tail))]
    NotJson {
        program: String,
        line_no: u64,
        line: String,
        stderr_tail: String,
    },
    #[error("{program}'s output ended inside a line (incomplete JSON): {text:?}{}", tail_suffix(.stderr_tail))]
    Partial {
        program: String,
        text: String,
        stderr_tail: String,
    },
    #[error("{program} printed a stdout line longer than {max} bytes{}", tail_suffix(.stderr_tail))]
    LineTooLong {
        program: String,
        max: usize,
        stderr_tail: String,
    },
    #[error("{program} {status}{}", tail_suffix(.stderr_tail))]
    Failed {
        program: String,
        /// "exited with code 3", "was killed by signal 11".
        status: String,
        code: Option<i32>,
        signal: Option<i32>,
        lines: u64,
        stderr_tail: String,
    },
    #[error("supervising {program}: {what}: {source}")]
    Io {
        program: String,
        what: String,
        #[source]
        source: io::Error,
    },
}

impl SuperviseError {
    /// The child's last stderr bytes, where there were any.
    pub fn stderr_tail(&self) -> &str {
        match self {
            SuperviseError::Timeout { stderr_tail, .. }
            | SuperviseError::NotJson { stderr_tail, .. }
            | SuperviseError::Partial { stderr_tail, .. }
            | SuperviseError::LineTooLong { stderr_tail, .. }
            | SuperviseError::Failed { stderr_tail, .. } => stderr_tail,
            SuperviseError::Spawn { .. } | SuperviseError::Io { .. } => "",
        }
    }

    pub fn is_timeout(&self) -> bool {
        matches!(self, SuperviseError::Timeout { .. })
    }
}

/// The last `max` characters of the stderr tail, for a one-message summary.
fn tail_suffix(t: &str) -> String {
    let t = t.trim();
    if t.is_empty() {
        return String::new();
    }
    format!("; stderr ends with: {}", last_chars(t, 2000))
}

fn last_chars(s: &str, max: usize) -> &str {
    let n = s.chars().count();
    if n <= max {
        return s;
    }
    let skip = s.char_indices().nth(n - max).map(|(i, _)| i).unwrap_or(0);
    &s[skip..]
}

/// At most `max` characters, marked when cut.
pub fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(max).collect();
        t.push('…');
        t
    }
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

enum Chunk {
    Line(Vec<u8>),
    /// Bytes after the last newline at EOF.
    Partial(Vec<u8>),
    TooLong,
    Eof,
    Err(io::Error),
}

/// Starts `cmd` in a new session (its own process group), writes `stdin` to it, and hands
/// every stdout line, parsed as JSON, to `on_line` until the child exits. Blank lines are
/// skipped. The child's stdio is set here; everything else about `cmd` (args, env, cwd) is the
/// caller's.
///
/// Errors: a non-JSON line (unless allowed), an incomplete last line, a non-zero exit, or
/// the deadline; in each case the whole process group is stopped and reaped before return.
pub fn run_json_lines_with(
    mut cmd: Command,
    stdin: Option<Vec<u8>>,
    opts: &Options,
    mut on_line: impl FnMut(serde_json::Value),
) -> Result<Outcome, SuperviseError> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    // SAFETY: only async-signal-safe calls (getppid, setsid, prctl) between fork and exec.
    let parent = unsafe { libc::getpid() };
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
    let start = Instant::now();
    let mut child = cmd.spawn().map_err(|source| SuperviseError::Spawn {
        program: program.clone(),
        source,
    })?;
    let pid = child.id();
    let pgid = pid as libc::pid_t;
    // Known to the registry until this function returns (a stop mid-run ends the group).
    let _registered = crate::children::register(pgid);

    // stdin: written from a thread so a child that does not read cannot block us.
    if let (Some(data), Some(mut w)) = (stdin, child.stdin.take()) {
        thread::spawn(move || {
            let _ = w.write_all(&data);
            // Dropping `w` closes the pipe: the child sees EOF.
        });
    }
    let tail = Arc::new(Mutex::new(VecDeque::<u8>::new()));
    let stderr_thread = child.stderr.take().map(|mut e| {
        let tail = tail.clone();
        let cap = opts.stderr_tail_bytes;
        thread::spawn(move || {
            let mut buf = [0u8; 8192];
            loop {
                match e.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        let mut t = tail.lock().unwrap_or_else(|p| p.into_inner());
                        t.extend(&buf[..n]);
                        let excess = t.len().saturating_sub(cap);
                        t.drain(..excess);
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                }
            }
        })
    });
    let (tx, rx) = mpsc::channel();
    if let Some(out) = child.stdout.take() {
        let max = opts.max_line_bytes;
        thread::spawn(move || read_lines(out, max, tx));
    } else {
        let _ = tx.send(Chunk::Eof);
    }

    let deadline_at = start + opts.deadline;
    let mut lines = 0u64;
    let mut line_no = 0u64;
    let mut non_json = Vec::new();
    let mut exited: Option<(ExitStatus, Instant)> = None;
    let mut eof = false;
    let mut failure: Option<SuperviseError> = None;
    let mut timed_out = false;
    let snapshot = |tail: &Arc<Mutex<VecDeque<u8>>>| {
        let t = tail.lock().unwrap_or_else(|p| p.into_inner());
        let (a, b) = t.as_slices();
        let mut v = a.to_vec();
        v.extend_from_slice(b);
        String::from_utf8_lossy(&v).into_owned()
    };

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
        match rx.recv_timeout(wait) {
            Ok(Chunk::Line(bytes)) => {
                line_no += 1;
                let text = String::from_utf8_lossy(&bytes);
                if text.trim().is_empty() {
                    continue;
                }
                match serde_json::from_str::<serde_json::Value>(&text) {
                    Ok(v) => {
                        lines += 1;
                        on_line(v);
                    }
                    Err(_) if opts.allow_non_json => {
                        if non_json.len() < 20 {
                            non_json.push(truncate(text.trim_end(), 200));
                        }
                    }
                    Err(_) => {
                        failure = Some(SuperviseError::NotJson {
                            program: program.clone(),
                            line_no,
                            line: truncate(text.trim_end(), 200),
                            stderr_tail: String::new(),
                        });
                        break;
                    }
                }
            }
            Ok(Chunk::Partial(bytes)) => {
                let text = String::from_utf8_lossy(&bytes);
                match serde_json::from_str::<serde_json::Value>(&text) {
                    // A complete value that merely lacks its newline.
                    Ok(v) => {
                        lines += 1;
                        on_line(v);
                    }
                    Err(_) if text.trim().is_empty() => {}
                    Err(_) if opts.allow_non_json => {
                        if non_json.len() < 20 {
                            non_json.push(truncate(text.trim_end(), 200));
                        }
                    }
                    Err(_) => {
                        failure = Some(SuperviseError::Partial {
                            program: program.clone(),
                            text: truncate(&text, 200),
                            stderr_tail: String::new(),
                        });
                        break;
                    }
                }
            }
            Ok(Chunk::TooLong) => {
                failure = Some(SuperviseError::LineTooLong {
                    program: program.clone(),
                    max: opts.max_line_bytes,
                    stderr_tail: String::new(),
                });
                break;
            }
            Ok(Chunk::Err(source)) => {
                failure = Some(SuperviseError::Io {
                    program: program.clone(),
                    what: "reading stdout".into(),
                    source,
                });
                break;
            }
            Ok(Chunk::Eof) | Err(mpsc::RecvTimeoutError::Disconnected) => eof = true,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
    }

    // Stop whatever still runs (deadline, protocol error), then make sure the group is empty.
    let status = match exited {
        Some((st, _)) => Some(st),
        None => stop_group(&mut child, pgid, opts.grace),
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
    // Give the stderr reader a moment to take the last bytes.
    if let Some(h) = stderr_thread {
        let until = Instant::now() + Duration::from_millis(500);
        while !h.is_finished() && Instant::now() < until {
            thread::sleep(Duration::from_millis(5));
        }
    }
    let stderr_tail = snapshot(&tail);

    if timed_out {
        return Err(SuperviseError::Timeout {
            program,
            pid,
            deadline: opts.deadline,
            lines,
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
        non_json,
    })
}

fn describe_status(st: &ExitStatus) -> String {
    match (st.code(), st.signal()) {
        (Some(c), _) => format!("exited with code {c}"),
        (None, Some(s)) => format!("was killed by signal {s}{}", signal_name(s)),
        _ => format!("ended with status {st}"),
    }
}

fn signal_name(s: i32) -> &'static str {
    match s {
        libc::SIGSEGV => " (SIGSEGV)",
        libc::SIGABRT => " (SIGABRT)",
        libc::SIGKILL => " (SIGKILL)",
        libc::SIGTERM => " (SIGTERM)",
        libc::SIGBUS => " (SIGBUS)",
        libc::SIGILL => " (SIGILL)",
        libc::SIGFPE => " (SIGFPE)",
        _ => "",
    }
}

fn read_lines(out: ChildStdout, max: usize, tx: mpsc::Sender<Chunk>) {
    let mut r = BufReader::with_capacity(64 << 10, out);
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let avail = match r.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                let _ = tx.send(Chunk::Err(e));
                return;
            }
        };
        if avail.is_empty() {
            if !buf.is_empty() {
                let _ = tx.send(Chunk::Partial(std::mem::take(&mut buf)));
            }
            let _ = tx.send(Chunk::Eof);
            return;
        }
        match avail.iter().position(|&b| b == b'\n') {
            Some(i) => {
                buf.extend_from_slice(&avail[..i]);
                r.consume(i + 1);
                if tx.send(Chunk::Line(std::mem::take(&mut buf))).is_err() {
                    return;
                }
            }
            None => {
                let n = avail.len();
                buf.extend_from_slice(avail);
                r.consume(n);
            }
        }
        if buf.len() > max {
            let _ = tx.send(Chunk::TooLong);
            return;
        }
    }
}

/// Signals a whole process group. Never group 0 or 1 (that would be us or everyone).
fn kill_group(pgid: libc::pid_t, sig: libc::c_int) -> bool {
    if pgid <= 1 {
        return false;
    }
    // SAFETY: plain syscall on a group we created with setsid.
    unsafe { libc::kill(-pgid, sig) == 0 }
}

/// Whether any process (zombies included) is still in the group.
pub fn group_exists(pgid: i32) -> bool {
    if pgid <= 1 {
        return false;
    }
    // SAFETY: signal 0 only checks for existence.
    let r = unsafe { libc::kill(-pgid, 0) };
    !(r == -1 && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH))
}

/// SIGTERM to the group, up to `grace` for the leader to exit, SIGKILL to the group, then up
/// to 5 s to reap the leader. `None` if it could not be reaped (stuck in the kernel).
fn stop_group(child: &mut Child, pgid: libc::pid_t, grace: Duration) -> Option<ExitStatus> {
    kill_group(pgid, libc::SIGTERM);
    let mut status = None;
    let t = Instant::now();
    while t.elapsed() < grace {
        if let Ok(Some(st)) = child.try_wait() {
            status = Some(st);
            break;
        }
        thread::sleep(Duration::from_millis(10));
    }
    // Grandchildren that ignore SIGTERM, or a leader that does.
    kill_group(pgid, libc::SIGKILL);
    let t = Instant::now();
    while status.is_none() && t.elapsed() < Duration::from_secs(5) {
        match child.try_wait() {
            Ok(Some(st)) => status = Some(st),
            Ok(None) => thread::sleep(Duration::from_millis(10)),
            Err(_) => break,
        }
    }
    status
}

/// Live (not zombie) processes of a group, from /proc.
pub fn live_members(pgid: i32) -> Vec<i32> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            // "pid (comm) state ppid pgrp ...": comm may contain anything, so split at the last ')'.
            let Some((_, rest)) = stat.rsplit_once(')') else {
                return false;
            };
            let f: Vec<&str> = rest.split_whitespace().collect();
            f.len() > 3 && f[2].parse::<i32>() == Ok(pgid) && f[0] != "Z" && f[0] != "X"
        })
        .collect()
}

/// After the leader is reaped: SIGKILL what is left of the group and reap those of them that
/// are our children (they are, when we are a subreaper), until nothing of the group runs or
/// `bound`. Zombies whose reaper is someone else (PID 1) are dead and not waited for.
fn sweep_group(pgid: libc::pid_t, bound: Duration) -> bool {
    let t = Instant::now();
    loop {
        // SAFETY: reaps only our own children in this group, without blocking.
        while unsafe { libc::waitpid(-pgid, std::ptr::null_mut(), libc::WNOHANG) } > 0 {}
        if !group_exists(pgid) || live_members(pgid).is_empty() {
            return true;
        }
        if t.elapsed() >= bound {
            return false;
        }
        kill_group(pgid, libc::SIGKILL);
        thread::sleep(Duration::from_millis(10));
    }
}

/// Makes this process the reaper of orphaned descendants (`PR_SET_CHILD_SUBREAPER`), so that
/// grandchildren of a supervised child are reaped here rather than by PID 1. Worth calling
/// once at daemon start where PID 1 does not reap (some containers), since a zombie keeps its
/// process group alive.
pub fn become_subreaper() -> io::Result<()> {
    // SAFETY: plain prctl on this process.
    let r = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// NVLink multicast stays off in every GPU program we start (shared/DEVICE.md), also when the
/// child's environment is fresh: set each variable unless the caller (or our environment)
/// chose a value.
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
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.arg("-c").arg(script);
        c
    }

    fn opts(deadline_ms: u64) -> Options {
        Options {
            grace: Duration::from_millis(200),
            ..Options::new(Duration::from_millis(deadline_ms))
        }
    }

    fn pgid_from(values: &[serde_json::Value]) -> i32 {
        values
            .iter()
            .find_map(|v| v.get("pgid").and_then(|p| p.as_i64()))
            .expect("child printed its pgid") as i32
    }

    #[test]
    fn good_json_lines_are_parsed() {
        let mut got = Vec::new();
        let out = run_json_lines_with(
            sh(r#"echo '{"event":"a","n":1}'; echo; echo '[2,3]'; read x; echo "{\"in\":\"$x\"}""#),
            Some(b"hello\n".to_vec()),
            &opts(5000),
            |v| got.push(v),
        )
        .unwrap();
        assert!(out.status.success());
        assert_eq!(out.lines, 3);
        assert_eq!(got[0]["n"], 1);
        assert_eq!(got[1], serde_json::json!([2, 3]));
        assert_eq!(got[2]["in"], "hello");
    }

    #[test]
    fn crash_is_an_error_with_stderr() {
        let err = run_json_lines_with(
            sh(r#"echo '{"ok":true}'; echo 'segfault-ish trouble' >&2; exit 3"#),
            None,
            &opts(5000),
            |_| {},
        )
        .unwrap_err();
        match &err {
            SuperviseError::Failed { code, lines, .. } => {
                assert_eq!((*code, *lines), (Some(3), 1));
            }
            other => panic!("{other}"),
        }
        let msg = err.to_string();
        assert!(msg.contains("exited with code 3"), "{msg}");
        assert!(msg.contains("segfault-ish trouble"), "{msg}");
    }

    #[test]
    fn garbage_line_is_reported_and_the_child_stopped() {
        let t = Instant::now();
        let mut got = Vec::new();
        let err = run_json_lines_with(
            sh(r#"echo "{\"pgid\":$$}"; echo 'NCCL INFO this is not json'; sleep 30"#),
            None,
            &opts(10_000),
            |v| got.push(v),
        )
        .unwrap_err();
        match &err {
            SuperviseError::NotJson { line_no, line, .. } => {
                assert_eq!(*line_no, 2);
                assert_eq!(line, "NCCL INFO this is not json");
            }
            other => panic!("{other}"),
        }
        assert!(err.to_string().contains("NCCL INFO this is not json"));
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        assert!(live_members(pgid_from(&got)).is_empty());
    }

    #[test]
    fn long_garbage_is_truncated() {
        let err = run_json_lines_with(
            sh("head -c 5000 /dev/zero | tr '\\0' x; echo"),
            None,
            &opts(5000),
            |_| {},
        )
        .unwrap_err();
        let SuperviseError::NotJson { line, .. } = &err else {
            panic!("{err}")
        };
        assert_eq!(line.chars().count(), 201);
    }

    #[test]
    fn partial_json_at_eof_is_an_error() {
        let err = run_json_lines_with(sh(r#"printf '{"event":"do'"#), None, &opts(5000), |_| {})
            .unwrap_err();
        assert!(matches!(err, SuperviseError::Partial { .. }), "{err}");
        assert!(err.to_string().contains(r#"{\"event\":\"do"#), "{err}");
        // A complete value without its newline is accepted.
        let mut got = Vec::new();
        run_json_lines_with(sh(r#"printf '{"a":1}'"#), None, &opts(5000), |v| {
            got.push(v)
        })
        .unwrap();
        assert_eq!(got.len(), 1);
    }

    #[test]
    fn hang_past_deadline_is_a_timeout_and_nothing_is_left() {
        for script in [
            // Plain: SIGTERM ends both.
            r#"sleep 1000 & echo "{\"pgid\":$$}"; wait"#,
            // Both ignore SIGTERM: only SIGKILL after the grace ends them.
            r#"trap '' TERM; sleep 1000 & echo "{\"pgid\":$$}"; wait; sleep 1000"#,
        ] {
            let t = Instant::now();
            let mut got = Vec::new();
            let err =
                run_json_lines_with(sh(script), None, &opts(1000), |v| got.push(v)).unwrap_err();
            let took = t.elapsed();
            assert!(err.is_timeout(), "{err}");
            assert!(
                err.to_string().contains("did not finish within 1.0 s"),
                "{err}"
            );
            assert!(took >= Duration::from_millis(1000), "{took:?}");
            assert!(took < Duration::from_secs(4), "{took:?}");
            let pgid = pgid_from(&got);
            assert_eq!(live_members(pgid), Vec::<i32>::new(), "{script}");
            // Killed grandchildren are zombies until their reaper (PID 1 here) collects them;
            // then the group is gone: kill(-pgid, 0) fails with ESRCH.
            let t = Instant::now();
            while group_exists(pgid) && t.elapsed() < Duration::from_secs(10) {
                thread::sleep(Duration::from_millis(50));
            }
            assert!(
                !group_exists(pgid),
                "process group {pgid} still exists: {script}"
            );
        }
    }

    #[test]
    fn live_members_sees_a_running_group() {
        // Guards the checks above against a scan that never finds anything.
        let mut c = Command::new("sleep");
        c.arg("5").process_group(0);
        let mut child = c.spawn().unwrap();
        let pgid = child.id() as i32;
        assert_eq!(live_members(pgid), vec![pgid]);
        assert!(group_exists(pgid));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(live_members(pgid).is_empty());
    }

    #[test]
    fn leftover_grandchild_is_killed_when_the_leader_exits() {
        let t = Instant::now();
        let mut got = Vec::new();
        // The backgrounded sleep keeps stdout open; the leader exits at once.
        run_json_lines_with(
            sh(r#"sleep 1000 & echo "{\"pgid\":$$}"; exit 0"#),
            None,
            &opts(10_000),
            |v| got.push(v),
        )
        .unwrap();
        assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
        assert!(live_members(pgid_from(&got)).is_empty());
    }

    #[test]
    fn lenient_mode_records_non_json() {
        let mut opts = opts(5000);
        opts.allow_non_json = true;
        let mut got = Vec::new();
        let out = run_json_lines_with(
            sh(r#"echo 'running 1 test'; echo '{"a":1}'"#),
            None,
            &opts,
            |v| got.push(v),
        )
        .unwrap();
        assert_eq!(out.non_json, vec!["running 1 test".to_string()]);
        assert_eq!(got.len(), 1);
    }

    #[test]
    fn missing_program_is_a_spawn_error() {
        let err = run_json_lines(
            Command::new("/nonexistent/ddpcheck-worker"),
            None,
            Duration::from_secs(1),
            |_| {},
        )
        .unwrap_err();
        assert!(matches!(err, SuperviseError::Spawn { .. }), "{err}");
        assert!(err.to_string().contains("/nonexistent/ddpcheck-worker"));
    }

    #[test]
    fn multicast_stays_off_unless_chosen() {
        let mut c = Command::new("true");
        c.env("NCCL_NVLS_ENABLE", "1");
        keep_multicast_off(&mut c);
        let envs: Vec<(String, Option<String>)> = c
            .get_envs()
            .map(|(k, v)| {
                (
                    k.to_string_lossy().into_owned(),
                    v.map(|v| v.to_string_lossy().into_owned()),
                )
            })
            .collect();
        assert!(envs.contains(&("NCCL_NVLS_ENABLE".into(), Some("1".into()))));
        if std::env::var_os("NVSHMEM_DISABLE_NVLS").is_none() {
            assert!(envs.contains(&("NVSHMEM_DISABLE_NVLS".into(), Some("1".into()))));
        }
    }
}
