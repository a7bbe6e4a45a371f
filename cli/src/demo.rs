//! `ddpcheck demo`: the main flow on the simulated `a6000x4-phb` node. It starts `ddpcheckd` on a
//! temporary socket and goes through its gRPC API, as a user's tools would; without a
//! `ddpcheckd` binary it runs the same node in this process and says how to see the daemon half.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use ddpcheck_engine::{LocalRunner, PreflightParams, RunError, Runner};

use crate::daemon_runner::DaemonRunner;
use crate::global_args::GlobalArgs;
use crate::{daemon_bin, print_json, render};

pub const DEMO_PROFILE: &str = "a6000x4-phb";

/// What the simulated node is, for the first line.
const DEMO_NODE: &str = "4x RTX A6000, every pair PHB, PCIe gen3";

/// How long the demo daemon may take to say it is ready.
const READY_WITHIN: Duration = Duration::from_secs(30);

pub fn run(cli: &GlobalArgs) -> Result<i32, RunError> {
    let started = Instant::now();
    let dir =
        tempfile::tempdir().map_err(|e| RunError::Daemon(format!("temporary folder: {e}")))?;
    let (runner, _daemon): (Box<dyn Runner>, Option<DemoDaemon>) = match daemon_bin::find() {
        Some(bin) => {
            let d = DemoDaemon::start(&bin, dir.path())?;
            if !cli.json {
                outln!(
                    "ddpcheck demo: ddpcheckd ({}) on {} serving a SIMULATED node ({DEMO_PROFILE}: {DEMO_NODE}).\n",
                    bin.display(),
                    d.socket.display()
                );
            }
            let runner = DaemonRunner {
                addr: d.socket.display().to_string(),
            };
            (Box::new(runner), Some(d))
        }
        None => {
            let note = format!(
                "ddpcheck demo: a SIMULATED node ({DEMO_PROFILE}: {DEMO_NODE}) run in this process: no ddpcheckd beside this ddpcheck or on PATH (`cargo build --release` builds it; the demo then goes through the daemon's API)."
            );
            // stdout stays one JSON document with --json.
            if cli.json {
                errln!("{note}");
            } else {
                outln!("{note}\n");
            }
            (Box::new(LocalRunner::for_node(Some(DEMO_PROFILE))?), None)
        }
    };
    let topo = runner.topo("")?;
    let pre = runner.preflight(&PreflightParams::default(), &mut |_| {})?;
    let rec = crate::recommend_cmd::demo_recommendation(runner.as_ref())?;
    if cli.json {
        print_json(&serde_json::json!({ "topo": topo, "preflight": pre, "recommend": rec }))?;
    } else {
        out!("{}", render::topo(&topo));
        outln!();
        out!("{}", render::preflight(&pre, cli.width()));
        outln!();
        out!("{}", crate::recommend_cmd::render(&rec, cli.width()));
        outln!(
            "\n(demo finished in {:.2} s; every number above is SIMULATED)",
            started.elapsed().as_secs_f64()
        );
    }
    Ok(pre.exit_code)
}

/// A `ddpcheckd --sim` child on a socket in a temporary folder, stopped when dropped.
struct DemoDaemon {
    child: Child,
    socket: PathBuf,
}

impl DemoDaemon {
    /// Starts it with everything in `dir` and none of the caller's DDPCHECK_* settings (the
    /// demo's node is always the same), and waits for its ready line.
    fn start(bin: &Path, dir: &Path) -> Result<DemoDaemon, RunError> {
        let fail = |why: String| RunError::Daemon(format!("demo daemon {}: {why}", bin.display()));
        let config = dir.join("ddpcheck.toml");
        std::fs::write(&config, "").map_err(|e| fail(e.to_string()))?;
        let socket = dir.join("ddpcheck.sock");
        let mut cmd = Command::new(bin);
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("DDPCHECK_") {
                cmd.env_remove(k);
            }
        }
        cmd.arg("--sim")
            .arg(DEMO_PROFILE)
            .arg("--config")
            .arg(&config)
            .arg("--listen")
            .arg(&socket)
            .arg("--runtime-dir")
            .arg(dir.join("run"))
            .arg("--state-dir")
            .arg(dir.join("state"))
            .args(["--metrics-listen", "none"])
            .env("DDPCHECK_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|e| fail(e.to_string()))?;
        let stderr = child.stderr.take();
        let mut daemon = DemoDaemon { child, socket };
        let Some(stderr) = stderr else {
            return Err(fail("no stderr to read".into()));
        };
        let (tx, rx) = mpsc::channel();
        // Reads the ready line, then keeps draining so the daemon never blocks on a full pipe.
        std::thread::spawn(move || {
            let mut last = String::new();
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.starts_with("ddpcheckd: ready") {
                    let _ = tx.send(Ok(()));
                } else if !line.trim().is_empty() {
                    last = line;
                }
            }
            let _ = tx.send(Err(last));
        });
        match rx.recv_timeout(READY_WITHIN) {
            Ok(Ok(())) => Ok(daemon),
            Ok(Err(last)) => {
                let _ = daemon.child.wait();
                Err(fail(format!("exited before it was ready: {last}")))
            }
            Err(_) => Err(fail(format!("not ready within {READY_WITHIN:?}"))),
        }
    }
}

impl Drop for DemoDaemon {
    /// SIGTERM, as systemd stops it, then SIGKILL if it has not gone within a few seconds.
    fn drop(&mut self) {
        // Already gone (and reaped): its pid may be another process's now.
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        if let Ok(pid) = i32::try_from(self.child.id()) {
            // SAFETY: kill has no memory preconditions; the pid is our own unreaped child's.
            unsafe {
                libc::kill(pid, libc::SIGTERM);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
