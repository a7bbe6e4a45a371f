//! A real Slurm on this machine for the tests: munged, slurmctld and one slurmd per node
//! started from a temporary folder on free ports (every slurmd on 127.0.0.1 with its own port,
//! so one machine holds a multi-node cluster), stopped by their pid files when dropped.
//!
//! It needs root and Debian's slurm-wlm and munge (.ci/install-services): [`available`] says
//! whether a test can run, and fails instead of skipping when DDPCHECK_REQUIRE_SERVICES=1.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::{services_must_run, stderr, stdout};

const SLURM_PROGRAMS: [&str; 7] = [
    "munged",
    "munge",
    "slurmctld",
    "slurmd",
    "srun",
    "scontrol",
    "sinfo",
];

/// A program on PATH or in the sbin folders (root's daemons live there).
fn find_sbin_program(name: &str) -> Option<PathBuf> {
    super::find_program(name).or_else(|| {
        ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]
            .map(PathBuf::from)
            .into_iter()
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

/// Whether a real Slurm can run here; `test` names the test in the skip line. Panics instead
/// of skipping when DDPCHECK_REQUIRE_SERVICES=1 (CI).
pub fn available(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let missing: Vec<&str> = SLURM_PROGRAMS
        .iter()
        .copied()
        .filter(|p| find_sbin_program(p).is_none())
        .collect();
    if root && missing.is_empty() {
        return true;
    }
    let why = format!("root: {root}, missing programs: {missing:?}");
    if services_must_run() {
        panic!("DDPCHECK_REQUIRE_SERVICES=1 but a real Slurm cannot run here ({why}); .ci/install-services installs it");
    }
    eprintln!("skipping {test}: no real Slurm here ({why})");
    false
}

/// `n` distinct free TCP ports (all held until all are known).
fn free_ports(n: usize) -> Vec<u16> {
    let held: Vec<std::net::TcpListener> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    held.iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect()
}

pub fn short_hostname() -> String {
    let o = Command::new("hostname")
        .arg("-s")
        .output()
        .expect("hostname -s");
    let h = String::from_utf8_lossy(&o.stdout).trim().to_string();
    assert!(!h.is_empty(), "hostname -s gave nothing");
    h
}

pub fn write_exec(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// What a cluster is made of.
pub struct Spec {
    /// Node count: one node is named as this machine; more are `HOST-1`, `HOST-2`, ...
    pub nodes: usize,
    /// Extra slurm.conf lines, given the cluster's folder (to write scripts into).
    pub extra_conf: fn(&Path) -> Vec<String>,
}

/// Daemons started from pid files in one folder; stopped (by those pid files) on drop.
pub struct Cluster {
    dir: tempfile::TempDir,
    conf: PathBuf,
    pub nodes: Vec<String>,
    /// (pid file, expected process name), in the order they are stopped.
    daemons: Vec<(PathBuf, &'static str)>,
}

impl Cluster {
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The first (or only) node.
    pub fn node(&self) -> &str {
        &self.nodes[0]
    }

    /// A Slurm client command with our slurm.conf and nothing inherited from a job around us.
    pub fn cmd(&self, prog: &str) -> Command {
        let mut c = Command::new(prog);
        c.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("SLURM_CONF", &self.conf)
            .current_dir(self.dir.path())
            .stdin(Stdio::null());
        c
    }

    pub fn run(&self, prog: &str, args: &[&str]) -> Output {
        self.cmd(prog)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("{prog}: {e}"))
    }

    pub fn node_state(&self, node: &str) -> String {
        let o = self.run("sinfo", &["-h", "-n", node, "-o", "%T"]);
        stdout(&o).trim().to_string()
    }

    pub fn drain_reason(&self, node: &str) -> String {
        let o = self.run("sinfo", &["-R", "-h", "-n", node, "-o", "%E"]);
        stdout(&o).trim().to_string()
    }

    /// Waits until every node is in state `want`.
    pub fn wait_for_state(&self, want: &str, within: Duration) {
        let t0 = Instant::now();
        for node in &self.nodes {
            loop {
                let s = self.node_state(node);
                if s == want {
                    break;
                }
                if t0.elapsed() > within {
                    panic!(
                        "node {node} is {s:?}, not {want:?}, after {within:?}\n{}",
                        self.logs()
                    );
                }
                std::thread::sleep(Duration::from_millis(250));
            }
        }
    }

    /// `srun ARGS...`: its exit code (None when killed by a signal), stdout and stderr; killed
    /// and failed past `within`.
    pub fn srun(&self, args: &[&str], within: Duration) -> (Option<i32>, String, String) {
        use std::io::Read;
        let mut child = self
            .cmd("srun")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("srun");
        // Read both pipes while waiting, so chatty tasks cannot block on a full pipe.
        let mut out = child.stdout.take().unwrap();
        let mut err = child.stderr.take().unwrap();
        let out_t = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = out.read_to_string(&mut s);
            s
        });
        let err_t = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        });
        let t0 = Instant::now();
        loop {
            if let Some(st) = child.try_wait().unwrap() {
                return (st.code(), out_t.join().unwrap(), err_t.join().unwrap());
            }
            if t0.elapsed() > within {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "srun {args:?} did not finish within {within:?}: {}{}\n{}",
                    out_t.join().unwrap(),
                    err_t.join().unwrap(),
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn logs(&self) -> String {
        let tail = |name: &str| {
            let t = std::fs::read_to_string(self.path(name)).unwrap_or_default();
            let lines: Vec<&str> = t.lines().collect();
            format!(
                "--- {name}\n{}",
                lines[lines.len().saturating_sub(15)..].join("\n")
            )
        };
        let mut parts = vec![tail("slurmctld.log")];
        parts.extend(self.nodes.iter().map(|n| tail(&format!("slurmd-{n}.log"))));
        parts.push(tail("munged.log"));
        parts.join("\n")
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

/// slurm.conf: the nodes on 127.0.0.1, each slurmd on its own port, in `dir`.
fn slurm_conf(dir: &Path, host: &str, nodes: &[String], extra: &[String]) -> String {
    let d = dir.display();
    let ports = free_ports(2 + nodes.len());
    let (ctld, slurmd) = (ports[0], ports[1]);
    let node_lines: Vec<String> = nodes
        .iter()
        .zip(&ports[2..])
        .map(|(n, p)| {
            format!("NodeName={n} NodeHostname={host} NodeAddr=127.0.0.1 Port={p} CPUs=1 RealMemory=100 State=UNKNOWN")
        })
        .collect();
    format!(
        "ClusterName=ddpchecktest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld}
SlurmdPort={slurmd}
AuthType=auth/munge
AuthInfo=socket={d}/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool-%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd-%n.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd-%n.log
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
{extra}
{node_lines}
PartitionName=ddpcheck Nodes={list} Default=YES MaxTime=5 State=UP
",
        extra = extra.join("\n"),
        node_lines = node_lines.join("\n"),
        list = nodes.join(","),
    )
}

/// Starts munged, slurmctld and one slurmd per node; returns once every node is idle.
pub fn start_cluster(spec: Spec) -> Cluster {
    let dir = tempfile::Builder::new()
        .prefix("ddpcheck-slurm-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let host = short_hostname();
    let nodes: Vec<String> = match spec.nodes {
        1 => vec![host.clone()],
        n => (1..=n).map(|i| format!("{host}-{i}")).collect(),
    };
    std::fs::create_dir(dir.path().join("state")).unwrap();
    for n in &nodes {
        std::fs::create_dir(dir.path().join(format!("spool-{n}"))).unwrap();
    }
    let extra = (spec.extra_conf)(dir.path());
    let conf = dir.path().join("slurm.conf");
    std::fs::write(&conf, slurm_conf(dir.path(), &host, &nodes, &extra)).unwrap();
    // munged of our own, on our own socket, with a fresh key: nothing shared with the host.
    let mut key = vec![0u8; 1024];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom").unwrap(), &mut key).unwrap();
    let key_file = dir.path().join("munge.key");
    std::fs::write(&key_file, key).unwrap();
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o400)).unwrap();

    let mut c = Cluster {
        dir,
        conf: conf.clone(),
        nodes: nodes.clone(),
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
    let (mp, cp) = (p("munged.pid"), p("slurmctld.pid"));
    c.start_daemon("munged", munged, mp);
    c.start_daemon("slurmctld", ctld, cp);
    for n in &nodes {
        let mut slurmd = c.cmd("slurmd");
        slurmd.arg("-f").arg(&conf).args(["-N", n]);
        let pid = c.path(&format!("slurmd-{n}.pid"));
        c.start_daemon("slurmd", slurmd, pid);
    }
    c.wait_for_state("idle", Duration::from_secs(60));
    c
}
