//! Test harness: starts the real `ddpcheckd` binary on a temporary socket and drives the real
//! `ddpcheck` binary against it. Waits for readiness, takes free ports, stops what it started.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test harness: a failed set-up is a failed test
#![allow(dead_code)]

pub mod fake_gpu;
pub mod slurm;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use std::time::Duration;

pub fn bin(name: &str) -> PathBuf {
    // Integration tests live in the cli crate; ddpcheckd is built in the same target folder.
    let me = PathBuf::from(env!("CARGO_BIN_EXE_ddpcheck"));
    let path = me.with_file_name(name);
    assert!(
        path.exists(),
        "{} is not built: run the tests with `cargo test --workspace` (the README's command)",
        path.display()
    );
    path
}

pub struct Daemon {
    pub child: Child,
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub metrics: Option<String>,
}

impl Daemon {
    /// Starts `ddpcheckd --sim SPEC` (or the real backend with `None`) and waits for its ready line.
    pub fn start(sim: Option<&str>) -> Daemon {
        Self::start_with(sim, &[])
    }

    pub fn start_with(sim: Option<&str>, extra: &[&str]) -> Daemon {
        Self::start_env(sim, extra, &[])
    }

    /// As `start_with`, with extra environment variables for the daemon (and its workers).
    pub fn start_env(sim: Option<&str>, extra: &[&str], env: &[(&str, &str)]) -> Daemon {
        Self::start_in(tempfile::tempdir().expect("tempdir"), sim, extra, env)
    }

    /// As `start_env`, on a directory of an earlier daemon (its socket, runtime and state
    /// directories): a restart.
    pub fn start_in(
        dir: tempfile::TempDir,
        sim: Option<&str>,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Daemon {
        Self::start_configured(dir, sim, extra, env, |_| {})
    }

    /// As `start_with`, with the daemon's own file-descriptor limit (soft and hard) set to
    /// `nofile` in the child before it runs: the test runner keeps its own limit.
    pub fn start_with_nofile(sim: Option<&str>, extra: &[&str], nofile: u64) -> Daemon {
        use std::os::unix::process::CommandExt;
        let dir = tempfile::tempdir().expect("tempdir");
        Self::start_configured(dir, sim, extra, &[], move |cmd| {
            let limit = libc::rlimit {
                rlim_cur: nofile,
                rlim_max: nofile,
            };
            // SAFETY: setrlimit is async-signal-safe; it only changes the child's own limit.
            unsafe {
                cmd.pre_exec(move || {
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                });
            }
        })
    }

    /// As `start_in`, with `configure` applied to the command before it is spawned.
    pub fn start_configured(
        dir: tempfile::TempDir,
        sim: Option<&str>,
        extra: &[&str],
        env: &[(&str, &str)],
        configure: impl FnOnce(&mut Command),
    ) -> Daemon {
        let socket = dir.path().join("d.sock");
        let mut cmd = Command::new(bin("ddpcheckd"));
        without_nccl_env(&mut cmd);
        if let Some(s) = sim {
            cmd.args(["--sim", s]);
        }
        cmd.arg("--listen")
            .arg(&socket)
            .args(["--metrics-listen", "127.0.0.1:0"])
            .arg("--runtime-dir")
            .arg(dir.path().join("run"))
            .arg("--state-dir")
            .arg(dir.path().join("state"))
            .args(extra)
            .env_remove("DDPCHECK_SIM")
            .env("DDPCHECK_LOG", "warn")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        configure(&mut cmd);
        let mut child = cmd.spawn().expect("spawn ddpcheckd");
        let line = ready_line(&mut child, Duration::from_secs(30));
        let metrics = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("metrics="))
            .filter(|m| *m != "none")
            .map(str::to_string);
        Daemon {
            child,
            dir,
            socket,
            metrics,
        }
    }

    pub fn addr(&self) -> String {
        self.socket.display().to_string()
    }

    /// Runs `ddpcheck --daemon SOCKET ARGS...`.
    pub fn cli(&self, args: &[&str]) -> Output {
        client(&self.socket)
            .args(args)
            .output()
            .expect("run ddpcheck")
    }

    pub fn scrape(&self) -> String {
        let addr = self.metrics.as_deref().expect("metrics enabled");
        http_get(addr, "/metrics")
    }

    /// As `stop`, keeping the daemon's directory for a restart (`start_in`).
    pub fn stop_keeping_dir(mut self) -> (std::process::ExitStatus, tempfile::TempDir) {
        let status = self.terminate();
        let dir = std::mem::replace(&mut self.dir, tempfile::tempdir().expect("tempdir"));
        (status, dir)
    }

    /// SIGTERM and wait: the daemon must stop cleanly and promptly.
    pub fn stop(mut self) -> std::process::ExitStatus {
        self.terminate()
    }

    fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = libc::pid_t::try_from(self.child.id()).expect("a pid fits pid_t");
        // SAFETY: plain kill(2) on our own child's pid.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
        for _ in 0..200 {
            if let Ok(Some(st)) = self.child.try_wait() {
                return st;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        panic!("ddpcheckd did not stop within 10 s of SIGTERM");
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Minimal HTTP/1.0 GET over loopback (no client crate needed for one request).
/// `ddpcheck --daemon SOCKET`, without the caller's NCCL and CUDA variables, `DDPCHECK_SIM` and
/// `DDPCHECK_DAEMON`; the caller adds the command, where its output goes, and runs it.
pub fn client(socket: &Path) -> Command {
    let mut cmd = Command::new(bin("ddpcheck"));
    without_nccl_env(&mut cmd)
        .arg("--daemon")
        .arg(socket)
        .env_remove("DDPCHECK_SIM")
        .env_remove("DDPCHECK_DAEMON");
    cmd
}

/// The status of every run a daemon stored in its state folder, oldest first.
pub fn history_statuses(state: &Path) -> Vec<String> {
    let db = rusqlite::Connection::open(state.join("history.db")).unwrap();
    let mut stmt = db
        .prepare("SELECT status FROM reports ORDER BY id")
        .unwrap();
    let rows = stmt.query_map([], |r| r.get::<_, String>(0)).unwrap();
    rows.map(Result::unwrap).collect()
}

/// Waits until a run the daemon stored in `state` is `running` (its row is written as it
/// begins); panics with `what` past 20 s.
pub fn wait_for_running(state: &Path, what: &str) {
    let start = std::time::Instant::now();
    while !history_statuses(state).iter().any(|s| s == "running") {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{what}: no run began"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn http_get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("connect /metrics");
    s.set_read_timeout(Some(Duration::from_secs(10))).ok();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").expect("write");
    let mut buf = String::new();
    s.read_to_string(&mut buf).expect("read");
    match buf.split_once("\r\n\r\n") {
        Some((head, body)) => {
            assert!(
                head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"),
                "{head}"
            );
            body.to_string()
        }
        None => panic!("bad HTTP answer: {buf}"),
    }
}

/// Runs `ddpcheck ARGS...` locally (no daemon).
/// `cmd` without the caller's NCCL_* variables: the simulator, like a real worker, runs under
/// the environment it inherits, and the tests must not depend on the shell they start from.
pub fn without_nccl_env(cmd: &mut Command) -> &mut Command {
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("NCCL_")) {
        cmd.env_remove(k);
    }
    cmd
}

pub fn local(args: &[&str]) -> Output {
    local_env(args, &[])
}

/// `ddpcheck ARGS` run locally with these environment variables (and no NCCL_* of the caller's).
pub fn local_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    without_nccl_env(&mut Command::new(bin("ddpcheck")))
        .args(args)
        .env_remove("DDPCHECK_SIM")
        .env_remove("DDPCHECK_DAEMON")
        .envs(env.iter().copied())
        .output()
        .expect("run ddpcheck")
}

/// A command line's words, as a user types it: `local(&words("--sim h200x2-nvlink check"))`.
/// Split at white space, so no word may hold one (those go in an array).
pub fn words(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

pub fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn repo_root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// One HTTP/1.0 GET over loopback that reports the status instead of asserting it: for servers
/// that answer errors with a body worth reading (Prometheus' API) and for readiness polling.
pub fn http_request(addr: &str, path_and_query: &str) -> std::io::Result<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "GET {path_and_query} HTTP/1.0\r\nHost: {addr}\r\nAccept: application/json, text/plain\r\n\r\n"
    )?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| std::io::Error::other(format!("bad HTTP answer: {text}")))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse::<u16>().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad HTTP status line: {head}")))?;
    Ok((status, body.to_string()))
}

/// Percent-encodes a query-string value (everything but RFC 3986 unreserved characters).
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A free loopback TCP port: bound, read and released. Another process may take it before the
/// caller binds it, so callers retry on "address already in use".
pub fn free_loopback_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("local addr").port()
}

/// The program's path if it is on PATH.
pub fn find_program(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// Whether CI asked service tests to fail instead of skipping (`.ci/run` sets it).
pub fn services_must_run() -> bool {
    std::env::var("DDPCHECK_REQUIRE_SERVICES").is_ok_and(|v| v == "1")
}

/// Runs `cmd` with its output captured and kills it past `limit` (then panics): a refused
/// The ready line of a `ddpcheckd` started with its stderr piped, waited for up to `limit`
/// (killed and a panic past it); stderr is drained after it, so the daemon never blocks on the
/// pipe.
pub fn ready_line(child: &mut Child, limit: Duration) -> String {
    match ddpcheck_testkit::daemon::ready_lines(child, limit) {
        Ok(mut lines) => lines.pop().unwrap_or_default(),
        Err(lines) => {
            let _ = child.kill();
            panic!(
                "ddpcheckd did not become ready within {} s: {lines:?}",
                limit.as_secs()
            );
        }
    }
}

/// The processes whose parent is `pid`, from /proc.
pub fn children_of(pid: u32) -> Vec<u32> {
    // pid (comm) state ppid ...: comm may hold spaces, so read after the last ')'.
    let parent_of = |stat: &str| {
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok())
    };
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<u32>().ok())
        .filter(|child| {
            std::fs::read_to_string(format!("/proc/{child}/stat"))
                .is_ok_and(|s| parent_of(&s) == Some(pid))
        })
        .collect()
}

/// connection must end by itself, not hang.
pub fn output_within(cmd: &mut Command, limit: Duration) -> Output {
    use std::io::Read;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    // Read both pipes while waiting, so a chatty child cannot block on a full pipe.
    let out_t = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = out.read_to_end(&mut b);
        b
    });
    let err_t = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = err.read_to_end(&mut b);
        b
    });
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break st;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: out_t.join().expect("stdout reader"),
        stderr: err_t.join().expect("stderr reader"),
    }
}

/// Every cause of an `explain --json` report (node, GPU and pair ones) as (kind, action, severity).
pub fn explain_causes(v: &serde_json::Value) -> Vec<(String, String, String)> {
    let node = v["causes"].as_array().unwrap().iter();
    let pairs = v["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["causes"].as_array().unwrap().iter());
    node.chain(pairs)
        .map(|c| {
            (
                c["kind"].as_str().unwrap().to_string(),
                c["action"].as_str().unwrap().to_string(),
                c["severity"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}
