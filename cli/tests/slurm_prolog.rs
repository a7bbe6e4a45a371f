//! The Slurm integration, with the real `ddpcheck` on simulated nodes: the prolog
//! (deploy/slurm/ddpcheck-prolog.sh) and the NHC check (deploy/slurm/ddpcheck.nhc) alone, with a
//! stub scontrol that records the drain; then a real single-node Slurm (munged, slurmctld and
//! slurmd started from a temporary folder on free ports) where a failing check drains the node
//! and its job never runs, and a healthy node runs the job.
//!
//! The real-Slurm test needs root and Debian's slurm-wlm and munge (.ci/install-services); it
//! skips without them, and fails instead when DDPCHECK_REQUIRE_SERVICES=1.

// Test code: a failed unwrap is a failed test (clippy.toml allows it in #[test] fns only).
#![allow(clippy::unwrap_used)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{bin, code, repo_root, stderr, stdout, Daemon};

fn prolog_script() -> PathBuf {
    repo_root().join("deploy/slurm/ddpcheck-prolog.sh")
}

fn require_services() -> bool {
    std::env::var("DDPCHECK_REQUIRE_SERVICES").is_ok_and(|v| v == "1")
}

/// What `ddpcheck --sim SPEC check --prolog` itself prints: the line the prolog must pass on.
fn direct_line(spec: &str) -> String {
    let o = common::local(&["--sim", spec, "check", "--prolog"]);
    let line = stdout(&o).lines().next().unwrap_or_default().to_string();
    assert!(
        line.starts_with("ddpcheck: "),
        "{spec}: {}{}",
        stdout(&o),
        stderr(&o)
    );
    line
}

fn write_exec(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// The prolog outside Slurm: a bare environment (as slurmd gives), a stub scontrol.
struct ScriptRun {
    out: Output,
    /// scontrol's arguments, one per element, when the prolog called it.
    scontrol: Option<Vec<String>>,
}

fn run_prolog(dir: &Path, env: &[(&str, &str)]) -> ScriptRun {
    let stub = dir.join("scontrol");
    let record = dir.join("scontrol.args");
    let _ = std::fs::remove_file(&record);
    write_exec(
        &stub,
        &format!(
            "#!/bin/bash\nprintf '%s\\n' \"$@\" > '{}'\n",
            record.display()
        ),
    );
    let mut cmd = Command::new("bash");
    cmd.arg(prolog_script())
        .env_clear()
        .env("DDPCHECK_PROLOG_CONF", dir.join("no-such-prolog.env"))
        .env("DDPCHECK_BIN", bin("ddpcheck"))
        .env("DDPCHECK_SOCKET", dir.join("no-daemon.sock"))
        .env("SCONTROL", &stub)
        .env("SLURMD_NODENAME", "node-a")
        .env("TMPDIR", dir);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run bash");
    let scontrol = std::fs::read_to_string(&record)
        .ok()
        .map(|s| s.lines().map(str::to_string).collect());
    ScriptRun { out, scontrol }
}

fn drain_args(reason: &str) -> Vec<String> {
    vec![
        "update".into(),
        "nodename=node-a".into(),
        "state=drain".into(),
        format!("reason={reason}"),
    ]
}

#[test]
fn prolog_passes_healthy_and_degraded_nodes_and_drains_critical_ones() {
    let d = tempfile::tempdir().unwrap();
    for (spec, extra, want_code) in [
        ("h200x2-nvlink", "", 0),
        ("h200x2-nvlink+degraded-pcie", "", 0),
        ("h200x2-nvlink+degraded-pcie", " --fail-on-warning", 1),
        ("h200x2-nvlink+ecc", "", 1),
        ("a6000x4-phb+wrong-result", "", 1),
        ("h200x2-nvlink+busy", "", 0),
    ] {
        let args = format!("--sim {spec}{extra}");
        let r = run_prolog(d.path(), &[("DDPCHECK_PROLOG_ARGS", &args)]);
        let line = direct_line(spec);
        assert_eq!(
            code(&r.out),
            want_code,
            "{args}: {}{}",
            stdout(&r.out),
            stderr(&r.out)
        );
        // Exactly the one line ddpcheck printed, passed on for slurmd's log.
        assert_eq!(stdout(&r.out).trim_end(), line, "{args}");
        if want_code == 0 {
            assert_eq!(
                r.scontrol, None,
                "{args}: a passing node must not be drained"
            );
        } else {
            assert_eq!(r.scontrol, Some(drain_args(&line)), "{args}");
        }
    }
    // Draining can be left to Slurm alone.
    let r = run_prolog(
        d.path(),
        &[
            ("DDPCHECK_PROLOG_ARGS", "--sim h200x2-nvlink+ecc"),
            ("DDPCHECK_DRAIN", "0"),
        ],
    );
    assert_eq!(code(&r.out), 1);
    assert_eq!(r.scontrol, None);
}

#[test]
fn prolog_reads_its_settings_file_and_turns_failures_into_drain_reasons() {
    let d = tempfile::tempdir().unwrap();
    // Settings from the file slurmd cannot pass through its bare environment.
    let conf = d.path().join("prolog.env");
    std::fs::write(&conf, "DDPCHECK_PROLOG_ARGS='--sim t4x2-pcie+gpu-lost'\n").unwrap();
    let r = run_prolog(
        d.path(),
        &[("DDPCHECK_PROLOG_CONF", conf.to_str().unwrap())],
    );
    let line = direct_line("t4x2-pcie+gpu-lost");
    assert_eq!(code(&r.out), 1, "{}{}", stdout(&r.out), stderr(&r.out));
    assert_eq!(r.scontrol, Some(drain_args(&line)));

    // A check that hangs past the prolog's own limit: TIMEOUT, drained, and promptly.
    let t0 = Instant::now();
    let r = run_prolog(
        d.path(),
        &[
            (
                "DDPCHECK_PROLOG_ARGS",
                "--sim h200x2-nvlink+hang --deadline 60",
            ),
            ("DDPCHECK_TIMEOUT", "2"),
        ],
    );
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
    assert_eq!(code(&r.out), 1);
    let want = "ddpcheck: TIMEOUT: the check ran past 2 s";
    assert_eq!(stdout(&r.out).trim_end(), want);
    assert_eq!(r.scontrol, Some(drain_args(want)));

    // ddpcheck missing or refusing its arguments: UNKNOWN with the reason, never a silent pass.
    let r = run_prolog(d.path(), &[("DDPCHECK_BIN", "/nonexistent/ddpcheck")]);
    assert_eq!(code(&r.out), 1);
    assert!(
        stdout(&r.out).starts_with("ddpcheck: UNKNOWN: ddpcheck exited 127"),
        "{}",
        stdout(&r.out)
    );
    let r = run_prolog(
        d.path(),
        &[("DDPCHECK_PROLOG_ARGS", "--sim no-such-profile")],
    );
    assert_eq!(code(&r.out), 1);
    let out = stdout(&r.out);
    assert!(
        out.starts_with("ddpcheck: UNKNOWN: ddpcheck exited 64: "),
        "{out}"
    );
    assert!(out.contains("no-such-profile"), "{out}");
    assert!(r
        .scontrol
        .is_some_and(|a| a[3] == format!("reason={}", out.trim_end())));
}

#[test]
fn prolog_asks_the_daemon_first_and_falls_back_to_a_local_check() {
    let d = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(Some("h200x2-nvlink+ecc"));
    let sock = daemon.addr();
    // No --sim: only the daemon (a simulated node with ECC errors) can give this verdict here.
    let r = run_prolog(d.path(), &[("DDPCHECK_SOCKET", &sock)]);
    assert_eq!(code(&r.out), 1, "{}{}", stdout(&r.out), stderr(&r.out));
    let line = stdout(&r.out).trim_end().to_string();
    assert!(
        line.starts_with("ddpcheck: CRITICAL: ") && line.contains("ECC"),
        "{line}"
    );
    assert_eq!(r.scontrol, Some(drain_args(&line)));
    assert!(
        !stderr(&r.out).contains("did not answer"),
        "{}",
        stderr(&r.out)
    );
    daemon.stop();

    // A daemon whose check hangs past the prolog's limit: TIMEOUT, and no second (local) check
    // that would outlast Slurm's PrologEpilogTimeout.
    let hung = Daemon::start(Some("h200x2-nvlink+hang"));
    let t0 = Instant::now();
    let r = run_prolog(
        d.path(),
        &[("DDPCHECK_SOCKET", &hung.addr()), ("DDPCHECK_TIMEOUT", "2")],
    );
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
    assert_eq!(code(&r.out), 1);
    assert_eq!(
        stdout(&r.out).trim_end(),
        "ddpcheck: TIMEOUT: the check ran past 2 s"
    );
    assert!(
        !stderr(&r.out).contains("gave no verdict"),
        "{}",
        stderr(&r.out)
    );
    drop(hung); // killed: its simulated hang would outlast a polite stop

    // A socket file nobody answers on (a crashed daemon): the prolog says so and checks
    // locally. Locally here means this machine's real GPUs, whatever they are: any verdict.
    let stale = d.path().join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    let stale = stale.to_str().unwrap();
    let r = run_prolog(d.path(), &[("DDPCHECK_SOCKET", stale)]);
    let err = stderr(&r.out);
    assert!(
        err.contains("gave no verdict") && err.contains("cannot reach ddpcheckd"),
        "{err}"
    );
    let line = stdout(&r.out);
    assert!(
        ["OK", "WARNING", "CRITICAL", "UNKNOWN", "BUSY", "TIMEOUT"]
            .iter()
            .any(|v| line.starts_with(&format!("ddpcheck: {v}: "))),
        "{line}"
    );
    // The same with a simulated node, to see the local verdict pass the job.
    let r = run_prolog(
        d.path(),
        &[
            ("DDPCHECK_SOCKET", stale),
            ("DDPCHECK_PROLOG_ARGS", "--sim h200x2-nvlink"),
        ],
    );
    assert_eq!(code(&r.out), 0, "{}{}", stdout(&r.out), stderr(&r.out));
    assert_eq!(stdout(&r.out).trim_end(), direct_line("h200x2-nvlink"));
    assert!(
        stderr(&r.out).contains("gave no verdict"),
        "{}",
        stderr(&r.out)
    );
}

#[test]
fn nhc_check_passes_healthy_nodes_and_dies_with_the_verdict_line() {
    let nhc = repo_root().join("deploy/slurm/ddpcheck.nhc");
    // NHC's own helpers, stubbed: `die` records what NHC would mark the node offline with.
    let run = |args: &str| -> (i32, String) {
        let script = format!(
            "die() {{ echo \"DIE:$2\"; return 1; }}; dbg() {{ :; }}; . '{}'; check_ddpcheck {args}",
            nhc.display()
        );
        let o = Command::new("bash")
            .args(["-c", &script])
            .env("DDPCHECK_NHC_BIN", bin("ddpcheck"))
            .env("DDPCHECK_NHC_SOCKET", "/nonexistent/ddpcheck.sock")
            .env_remove("DDPCHECK_SIM")
            .env_remove("DDPCHECK_DAEMON")
            .output()
            .unwrap();
        (code(&o), stdout(&o))
    };
    let (rc, out) = run("-x '--sim h200x2-nvlink'");
    assert_eq!((rc, out.as_str()), (0, ""), "healthy node");
    let (rc, out) = run("-x '--sim h200x2-nvlink+degraded-pcie'");
    assert_eq!((rc, out.as_str()), (0, ""), "WARNING passes by default");
    let (rc, out) = run("-w -x '--sim h200x2-nvlink+degraded-pcie'");
    assert_eq!(rc, 1);
    assert_eq!(
        out.trim_end(),
        format!("DIE:{}", direct_line("h200x2-nvlink+degraded-pcie"))
    );
    let (rc, out) = run("-x '--sim a6000x4-phb+ecc'");
    assert_eq!(rc, 1);
    assert_eq!(
        out.trim_end(),
        format!("DIE:{}", direct_line("a6000x4-phb+ecc"))
    );
    let (rc, out) = run("-b /nonexistent/ddpcheck");
    assert_eq!(rc, 1);
    assert!(out.starts_with("DIE:ddpcheck: UNKNOWN: "), "{out}");
    let (rc, out) = run("-q");
    assert_eq!(rc, 1);
    assert!(out.contains("unknown option -q"), "{out}");

    // Through the daemon; and locally when its socket is stale.
    let daemon = Daemon::start(Some("h200x2-nvlink+ecc"));
    let (rc, out) = run(&format!("-s '{}'", daemon.addr()));
    assert_eq!(rc, 1);
    let cached = daemon.cli(&["check", "--prolog", "--max-age", "3600"]);
    assert_eq!(
        out.trim_end(),
        format!("DIE:{}", stdout(&cached).trim_end())
    );
    daemon.stop();
    let d = tempfile::tempdir().unwrap();
    let stale = d.path().join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    let (rc, out) = run(&format!(
        "-s '{}' -x '--sim h200x2-nvlink'",
        stale.display()
    ));
    assert_eq!(
        (rc, out.as_str()),
        (0, ""),
        "stale socket, healthy local check"
    );
}

// ---------------------------------------------------------------------------------------------
// A real single-node Slurm.

const SLURM_PROGRAMS: [&str; 7] = [
    "munged",
    "munge",
    "slurmctld",
    "slurmd",
    "srun",
    "scontrol",
    "sinfo",
];

fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/bin", "/sbin", "/bin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Two distinct free TCP ports (both held until both are known).
fn free_ports() -> (u16, u16) {
    let a = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let b = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    (
        a.local_addr().unwrap().port(),
        b.local_addr().unwrap().port(),
    )
}

fn short_hostname() -> String {
    let o = Command::new("hostname")
        .arg("-s")
        .output()
        .expect("hostname -s");
    let h = String::from_utf8_lossy(&o.stdout).trim().to_string();
    assert!(!h.is_empty(), "hostname -s gave nothing");
    h
}

/// Daemons started from pid files in one folder; stopped (by those pid files) on drop.
struct Cluster {
    dir: tempfile::TempDir,
    conf: PathBuf,
    node: String,
    /// (pid file, expected process name), in the order they are stopped.
    daemons: Vec<(PathBuf, &'static str)>,
}

impl Cluster {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A Slurm client command with our slurm.conf and nothing inherited from a job around us.
    fn cmd(&self, prog: &str) -> Command {
        let mut c = Command::new(prog);
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("SLURM_CONF", &self.conf)
            .current_dir(self.dir.path())
            .stdin(Stdio::null());
        c
    }

    fn run(&self, prog: &str, args: &[&str]) -> Output {
        self.cmd(prog)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("{prog}: {e}"))
    }

    fn node_state(&self) -> String {
        let o = self.run("sinfo", &["-h", "-n", &self.node, "-o", "%T"]);
        stdout(&o).trim().to_string()
    }

    fn drain_reason(&self) -> String {
        let o = self.run("sinfo", &["-R", "-h", "-n", &self.node, "-o", "%E"]);
        stdout(&o).trim().to_string()
    }

    fn wait_for_state(&self, want: &str, within: Duration) {
        let t0 = Instant::now();
        loop {
            let s = self.node_state();
            if s == want {
                return;
            }
            if t0.elapsed() > within {
                panic!(
                    "node {} is {s:?}, not {want:?}, after {within:?}\n{}",
                    self.node,
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Runs a command as a one-node job through srun; bounded, killed past `within`.
    fn srun(&self, name: &str, marker: &Path, within: Duration) -> (Option<i32>, String) {
        let mut child = self
            .cmd("srun")
            .args(["-N1", "-n1", "-t", "1", "-J", name, "touch"])
            .arg(marker)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("srun");
        let t0 = Instant::now();
        loop {
            if let Some(st) = child.try_wait().unwrap() {
                let o = child.wait_with_output().unwrap();
                return (st.code(), format!("{}{}", stdout(&o), stderr(&o)));
            }
            if t0.elapsed() > within {
                let _ = child.kill();
                let o = child.wait_with_output().unwrap();
                panic!(
                    "srun {name} did not finish within {within:?}: {}{}\n{}",
                    stdout(&o),
                    stderr(&o),
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The prolog's settings for the next job (the wrapper reads them through
    /// DDPCHECK_PROLOG_CONF, the way a site configures it).
    fn set_prolog(&self, lines: &[(&str, &str)]) {
        let text: String = lines.iter().map(|(k, v)| format!("{k}='{v}'\n")).collect();
        std::fs::write(self.path("prolog.env"), text).unwrap();
    }

    fn logs(&self) -> String {
        let tail = |name: &str| {
            let t = std::fs::read_to_string(self.path(name)).unwrap_or_default();
            let lines: Vec<&str> = t.lines().collect();
            lines[lines.len().saturating_sub(15)..].join("\n")
        };
        format!(
            "--- slurmctld.log\n{}\n--- slurmd.log\n{}\n--- munged.log\n{}",
            tail("slurmctld.log"),
            tail("slurmd.log"),
            tail("munged.log")
        )
    }

    fn wait_for_file(&self, p: &Path, within: Duration) {
        let t0 = Instant::now();
        while !p.exists() {
            if t0.elapsed() > within {
                panic!(
                    "{} did not appear within {within:?}\n{}",
                    p.display(),
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Starts a daemon that forks into the background and writes `pid_file`.
    fn start_daemon(&mut self, name: &'static str, mut cmd: Command, pid_file: PathBuf) {
        // Registered first: a daemon that started but failed the wait is still stopped.
        self.daemons.insert(0, (pid_file.clone(), name));
        let o = cmd.output().unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            o.status.success(),
            "{name} failed: {}{}\n{}",
            stdout(&o),
            stderr(&o),
            self.logs()
        );
        self.wait_for_file(&pid_file, Duration::from_secs(30));
    }
}

fn pid_from(file: &Path) -> Option<i32> {
    std::fs::read_to_string(file).ok()?.trim().parse().ok()
}

/// True while `pid` runs the program `name` (a pid file can outlive its process).
fn alive_as(pid: i32, name: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == name)
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for (file, name) in &self.daemons {
            let Some(pid) = pid_from(file) else { continue };
            if !alive_as(pid, name) {
                continue;
            }
            // SAFETY: kill(2) on a pid we started, checked to still be that program.
            unsafe { libc::kill(pid, libc::SIGTERM) };
            let t0 = Instant::now();
            while alive_as(pid, name) && t0.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(100));
            }
            if alive_as(pid, name) {
                // SAFETY: as above.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
}

/// slurm.conf: a one-node cluster in `dir`, with the ddpcheck settings taken from
/// deploy/slurm/slurm.conf.snippet (Prolog pointed at our wrapper; NHC is not installed here).
fn slurm_conf(dir: &Path, node: &str, wrapper: &Path) -> String {
    let snippet =
        std::fs::read_to_string(repo_root().join("deploy/slurm/slurm.conf.snippet")).unwrap();
    let mut ours = Vec::new();
    for l in snippet
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let (k, _) = l
            .split_once('=')
            .unwrap_or_else(|| panic!("snippet line {l:?} is not KEY=VALUE"));
        match k {
            "Prolog" => ours.push(format!("Prolog={}", wrapper.display())),
            k if k.starts_with("HealthCheck") => {}
            _ => ours.push(l.to_string()),
        }
    }
    assert!(
        ours.iter()
            .any(|l| l.starts_with("PrologFlags=") && l.contains("Alloc")),
        "{ours:?}"
    );
    assert!(
        ours.iter().any(|l| l.starts_with("PrologEpilogTimeout=")),
        "{ours:?}"
    );
    let d = dir.display();
    let (ctld, slurmd) = free_ports();
    format!(
        "ClusterName=ddpchecktest
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={ctld}
SlurmdPort={slurmd}
AuthType=auth/munge
AuthInfo=socket={d}/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
SwitchType=switch/none
{ddpcheck}
NodeName={node} NodeAddr=127.0.0.1 CPUs=1 RealMemory=100 State=UNKNOWN
PartitionName=ddpcheck Nodes={node} Default=YES MaxTime=5 State=UP
",
        ddpcheck = ours.join("\n"),
    )
}

fn start_cluster() -> Cluster {
    let dir = tempfile::Builder::new()
        .prefix("ddpcheck-slurm-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let node = short_hostname();
    for sub in ["state", "spool"] {
        std::fs::create_dir(dir.path().join(sub)).unwrap();
    }
    // The prolog Slurm runs: our script, configured through its settings file.
    let wrapper = dir.path().join("prolog-wrapper.sh");
    write_exec(
        &wrapper,
        &format!(
            "#!/bin/bash\nexport DDPCHECK_PROLOG_CONF='{}'\nexec /bin/bash '{}'\n",
            dir.path().join("prolog.env").display(),
            prolog_script().display()
        ),
    );
    let conf = dir.path().join("slurm.conf");
    std::fs::write(&conf, slurm_conf(dir.path(), &node, &wrapper)).unwrap();
    // munged of our own, on our own socket, with a fresh key: nothing shared with the host.
    let mut key = vec![0u8; 1024];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom").unwrap(), &mut key).unwrap();
    let key_file = dir.path().join("munge.key");
    std::fs::write(&key_file, key).unwrap();
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o400)).unwrap();

    let mut c = Cluster {
        dir,
        conf: conf.clone(),
        node: node.clone(),
        daemons: Vec::new(),
    };
    let p = |n: &str| c.path(n);
    let mut munged = Command::new("munged");
    munged
        .arg("--force")
        .arg(format!("--socket={}", p("munge.sock").display()))
        .arg(format!("--key-file={}", key_file.display()))
        .arg(format!("--log-file={}", p("munged.log").display()))
        .arg(format!("--pid-file={}", p("munged.pid").display()))
        .arg(format!("--seed-file={}", p("munged.seed").display()))
        .stdin(Stdio::null());
    let mut ctld = c.cmd("slurmctld");
    ctld.args(["-c", "-f"]).arg(&conf);
    let mut slurmd = c.cmd("slurmd");
    slurmd.arg("-f").arg(&conf).args(["-N", &node]);
    let (mp, cp, sp) = (p("munged.pid"), p("slurmctld.pid"), p("slurmd.pid"));
    c.start_daemon("munged", munged, mp);
    c.start_daemon("slurmctld", ctld, cp);
    c.start_daemon("slurmd", slurmd, sp);
    c.wait_for_state("idle", Duration::from_secs(60));
    c
}

/// All real-Slurm scenarios in one test: only one Slurm may run at a time.
#[test]
fn real_slurm_drains_a_bad_node_and_runs_jobs_on_a_good_one() {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let missing: Vec<&str> = SLURM_PROGRAMS
        .iter()
        .copied()
        .filter(|p| find_program(p).is_none())
        .collect();
    if !root || !missing.is_empty() {
        let why = format!("root: {root}, missing programs: {missing:?}");
        if require_services() {
            panic!("DDPCHECK_REQUIRE_SERVICES=1 but a real Slurm cannot run here ({why}); .ci/install-services installs it");
        }
        eprintln!("skipping the real-Slurm test ({why})");
        return;
    }
    let c = start_cluster();
    let within = Duration::from_secs(90);
    let bin = bin("ddpcheck");
    let bin = bin.to_str().unwrap();
    let no_daemon = c.path("no-daemon.sock");
    let no_daemon = no_daemon.to_str().unwrap();

    // 1. A node with uncorrected ECC errors: the prolog fails, the node drains with the
    //    `ddpcheck:` line as its reason, and the job never runs.
    c.set_prolog(&[
        ("DDPCHECK_BIN", bin),
        ("DDPCHECK_SOCKET", no_daemon),
        ("DDPCHECK_PROLOG_ARGS", "--sim h200x2-nvlink+ecc"),
    ]);
    let marker = c.path("ran-on-bad-node");
    let (rc, out) = c.srun("ddpcheck-bad", &marker, within);
    assert_ne!(rc, Some(0), "the job must fail: {out}");
    assert!(
        out.to_lowercase().contains("prolog"),
        "srun should report the prolog failure: {out}"
    );
    assert!(
        !marker.exists(),
        "the job ran on a node that failed its check"
    );
    let reason = c.drain_reason();
    assert!(
        reason.starts_with("ddpcheck: "),
        "sinfo -R: {reason:?}\n{}",
        c.logs()
    );
    assert_eq!(reason, direct_line("h200x2-nvlink+ecc"));
    assert!(c.node_state().starts_with("drain"), "{}", c.node_state());

    // 2. An operator resumes the node; healthy now, it runs the job.
    let o = c.run(
        "scontrol",
        &["update", &format!("nodename={}", c.node), "state=resume"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    c.wait_for_state("idle", Duration::from_secs(30));
    c.set_prolog(&[
        ("DDPCHECK_BIN", bin),
        ("DDPCHECK_SOCKET", no_daemon),
        ("DDPCHECK_PROLOG_ARGS", "--sim h200x2-nvlink"),
    ]);
    let marker = c.path("ran-on-good-node");
    let (rc, out) = c.srun("ddpcheck-good", &marker, within);
    assert_eq!(rc, Some(0), "{out}\n{}", c.logs());
    assert!(marker.exists(), "the job did not run on a healthy node");
    assert_eq!(c.drain_reason(), "");

    // 3. A degraded node (WARNING) still runs jobs under the default policy.
    c.set_prolog(&[
        ("DDPCHECK_BIN", bin),
        ("DDPCHECK_SOCKET", no_daemon),
        ("DDPCHECK_PROLOG_ARGS", "--sim h200x2-nvlink+degraded-pcie"),
    ]);
    c.wait_for_state("idle", Duration::from_secs(30));
    let marker = c.path("ran-on-degraded-node");
    let (rc, out) = c.srun("ddpcheck-warning", &marker, within);
    assert_eq!(rc, Some(0), "{out}\n{}", c.logs());
    assert!(marker.exists());
    assert_eq!(c.drain_reason(), "");

    // 4. Through the node's daemon (no --sim in the prolog: only the daemon knows the node).
    let daemon = Daemon::start(Some("t4x2-pcie+wrong-result"));
    c.set_prolog(&[("DDPCHECK_BIN", bin), ("DDPCHECK_SOCKET", &daemon.addr())]);
    c.wait_for_state("idle", Duration::from_secs(30));
    let marker = c.path("ran-via-daemon");
    let (rc, out) = c.srun("ddpcheck-daemon", &marker, within);
    assert_ne!(rc, Some(0), "{out}");
    assert!(!marker.exists());
    let reason = c.drain_reason();
    assert!(
        reason.starts_with("ddpcheck: CRITICAL: "),
        "{reason:?}\n{}",
        c.logs()
    );
    // The daemon's own latest verdict is the reason, word for word.
    let cached = daemon.cli(&["check", "--prolog", "--max-age", "3600"]);
    assert_eq!(reason, stdout(&cached).trim_end());
    daemon.stop();
}
