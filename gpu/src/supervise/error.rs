//! How a supervised child failed (`SuperviseError`), with its stderr's tail and exit status in one
//! message.

use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

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
        /// How it ended once stopped; `None` if it could not be reaped (stuck in the kernel).
        exit: Option<ExitStatus>,
        stderr_tail: String,
    },
    /// The callback said [`Next::Done`] and the child did not exit within the done grace.
    #[error("{program} did not exit within {:.1} s of its last expected output; its process group was stopped{}", .grace.as_secs_f64(), tail_suffix(.stderr_tail))]
    Lingered {
        program: String,
        pid: u32,
        grace: Duration,
        lines: u64,
        exit: Option<ExitStatus>,
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
        exit: ExitStatus,
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
            | SuperviseError::Lingered { stderr_tail, .. }
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

    /// How the child ended where it was reaped: a non-zero exit, or the status after we
    /// stopped it (deadline, done grace).
    pub fn exit_status(&self) -> Option<ExitStatus> {
        match self {
            SuperviseError::Failed { exit, .. } => Some(*exit),
            SuperviseError::Timeout { exit, .. } | SuperviseError::Lingered { exit, .. } => *exit,
            _ => None,
        }
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

pub(super) fn describe_status(st: &ExitStatus) -> String {
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
