//! The Slurm integration, with the real `ddpcheck` on simulated nodes: the prolog
//! (deploy/slurm/ddpcheck-prolog.sh) and the NHC check (deploy/slurm/ddpcheck.nhc) alone, with a
//! stub scontrol that records the drain; then a real single-node Slurm (common/slurm.rs:
//! munged, slurmctld and slurmd started from a temporary folder on free ports) where a failing
//! check drains the node and its job never runs, and a healthy node runs the job.
//!
//! The real-Slurm test needs root and Debian's slurm-wlm and munge (.ci/install-services); it
//! skips without them, and fails instead when DDPCHECK_REQUIRE_SERVICES=1.

// Test code: a failed unwrap is a failed test (clippy.toml allows it in #[test] fns only).
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::slurm::{self, write_exec, Cluster};
use common::{bin, code, repo_root, stderr, stdout, Daemon};

fn prolog_script() -> PathBuf {
    repo_root().join("deploy/slurm/ddpcheck-prolog.sh")
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
// A real single-node Slurm (common/slurm.rs), with the prolog configured as a site would.

/// The ddpcheck lines of deploy/slurm/slurm.conf.snippet for a cluster in `dir`: Prolog pointed
/// at a wrapper that reads `dir/prolog.env` (NHC is not installed here).
fn prolog_conf(dir: &Path) -> Vec<String> {
    let wrapper = dir.join("prolog-wrapper.sh");
    write_exec(
        &wrapper,
        &format!(
            "#!/bin/bash\nexport DDPCHECK_PROLOG_CONF='{}'\nexec /bin/bash '{}'\n",
            dir.join("prolog.env").display(),
            prolog_script().display()
        ),
    );
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
    ours
}

/// The prolog's settings for the next job (the wrapper reads them through
/// DDPCHECK_PROLOG_CONF, the way a site configures it).
fn set_prolog(c: &Cluster, lines: &[(&str, &str)]) {
    let text: String = lines.iter().map(|(k, v)| format!("{k}='{v}'\n")).collect();
    std::fs::write(c.path("prolog.env"), text).unwrap();
}

/// Runs `touch MARKER` as a one-node job through srun; bounded. Exit code and all output.
fn srun_touch(c: &Cluster, name: &str, marker: &Path, within: Duration) -> (Option<i32>, String) {
    let marker = marker.to_str().unwrap();
    let (rc, out, err) = c.srun(
        &["-N1", "-n1", "-t", "1", "-J", name, "touch", marker],
        within,
    );
    (rc, format!("{out}{err}"))
}

/// All real-Slurm scenarios in one test: only one Slurm may run at a time.
#[test]
fn real_slurm_drains_a_bad_node_and_runs_jobs_on_a_good_one() {
    if !slurm::available("the real-Slurm prolog test") {
        return;
    }
    let c = slurm::start_cluster(slurm::Spec {
        nodes: 1,
        extra_conf: prolog_conf,
    });
    let within = Duration::from_secs(90);
    let bin = bin("ddpcheck");
    let bin = bin.to_str().unwrap();
    let no_daemon = c.path("no-daemon.sock");
    let no_daemon = no_daemon.to_str().unwrap();

    // 1. A node with uncorrected ECC errors: the prolog fails, the node drains with the
    //    `ddpcheck:` line as its reason, and the job never runs.
    set_prolog(
        &c,
        &[
            ("DDPCHECK_BIN", bin),
            ("DDPCHECK_SOCKET", no_daemon),
            ("DDPCHECK_PROLOG_ARGS", "--sim h200x2-nvlink+ecc"),
        ],
    );
    let marker = c.path("ran-on-bad-node");
    let (rc, out) = srun_touch(&c, "ddpcheck-bad", &marker, within);
    assert_ne!(rc, Some(0), "the job must fail: {out}");
    assert!(
        out.to_lowercase().contains("prolog"),
        "srun should report the prolog failure: {out}"
    );
    assert!(
        !marker.exists(),
        "the job ran on a node that failed its check"
    );
    let reason = c.drain_reason(c.node());
    assert!(
        reason.starts_with("ddpcheck: "),
        "sinfo -R: {reason:?}\n{}",
        c.logs()
    );
    assert_eq!(reason, direct_line("h200x2-nvlink+ecc"));
    assert!(
        c.node_state(c.node()).starts_with("drain"),
        "{}",
        c.node_state(c.node())
    );

    // 2. An operator resumes the node; healthy now, it runs the job.
    let o = c.run(
        "scontrol",
        &["update", &format!("nodename={}", c.node()), "state=resume"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    c.wait_for_state("idle", Duration::from_secs(30));
    set_prolog(
        &c,
        &[
            ("DDPCHECK_BIN", bin),
            ("DDPCHECK_SOCKET", no_daemon),
            ("DDPCHECK_PROLOG_ARGS", "--sim h200x2-nvlink"),
        ],
    );
    let marker = c.path("ran-on-good-node");
    let (rc, out) = srun_touch(&c, "ddpcheck-good", &marker, within);
    assert_eq!(rc, Some(0), "{out}\n{}", c.logs());
    assert!(marker.exists(), "the job did not run on a healthy node");
    assert_eq!(c.drain_reason(c.node()), "");

    // 3. A degraded node (WARNING) still runs jobs under the default policy.
    set_prolog(
        &c,
        &[
            ("DDPCHECK_BIN", bin),
            ("DDPCHECK_SOCKET", no_daemon),
            ("DDPCHECK_PROLOG_ARGS", "--sim h200x2-nvlink+degraded-pcie"),
        ],
    );
    c.wait_for_state("idle", Duration::from_secs(30));
    let marker = c.path("ran-on-degraded-node");
    let (rc, out) = srun_touch(&c, "ddpcheck-warning", &marker, within);
    assert_eq!(rc, Some(0), "{out}\n{}", c.logs());
    assert!(marker.exists());
    assert_eq!(c.drain_reason(c.node()), "");

    // 4. Through the node's daemon (no --sim in the prolog: only the daemon knows the node).
    let daemon = Daemon::start(Some("t4x2-pcie+wrong-result"));
    set_prolog(
        &c,
        &[("DDPCHECK_BIN", bin), ("DDPCHECK_SOCKET", &daemon.addr())],
    );
    c.wait_for_state("idle", Duration::from_secs(30));
    let marker = c.path("ran-via-daemon");
    let (rc, out) = srun_touch(&c, "ddpcheck-daemon", &marker, within);
    assert_ne!(rc, Some(0), "{out}");
    assert!(!marker.exists());
    let reason = c.drain_reason(c.node());
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
