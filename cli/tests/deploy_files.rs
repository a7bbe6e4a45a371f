//! The operations files against the tools that read them: the systemd unit through
//! `systemd-analyze verify` and `security --offline`, sysusers/tmpfiles through
//! `systemd-sysusers`/`systemd-tmpfiles --root`, the example configuration through
//! `ddpcheck config check` and the real daemon, the Kubernetes manifests through
//! `kubernetes-validate --strict`, and the node-problem-detector plugin run against a daemon.
//!
//! Tests whose tool is missing skip, and fail instead when DDPCHECK_REQUIRE_SERVICES=1.

// Test code: a failed unwrap is a failed test (clippy.toml allows it in #[test] fns only).
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{bin, code, local, repo_root, stderr, stdout, Daemon};
use ddpcheckd::config;

/// The exposure budget of the unit (systemd-analyze's 0–10 scale, lower is safer).
/// docs/operations.md gives the measured figure.
const MAX_EXPOSURE: f64 = 2.0;
/// Deadline of one collection in ddpcheckd (main.rs); the watchdog must outlast interval + it.
const COLLECT_DEADLINE_S: f64 = 20.0;

fn require_services() -> bool {
    std::env::var("DDPCHECK_REQUIRE_SERVICES").is_ok_and(|v| v == "1")
}

/// True when `prog --version` runs; otherwise skips (or fails under DDPCHECK_REQUIRE_SERVICES=1).
fn have(prog: &str, args: &[&str]) -> bool {
    let ok = Command::new(prog)
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            !require_services(),
            "DDPCHECK_REQUIRE_SERVICES=1 but `{prog} {}` does not run; .ci/install-services installs it",
            args.join(" ")
        );
        eprintln!("skipping: `{prog} {}` does not run", args.join(" "));
    }
    ok
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo_root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// `[Service]` (or another section) of a unit file as key → values (keys may repeat).
fn unit_section(text: &str, section: &str) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut inside = false;
    for l in text.lines().map(str::trim) {
        if l.starts_with('[') {
            inside = l == format!("[{section}]");
            continue;
        }
        if !inside || l.is_empty() || l.starts_with('#') {
            continue;
        }
        if let Some((k, v)) = l.split_once('=') {
            out.entry(k.trim().to_string())
                .or_default()
                .push(v.trim().to_string());
        }
    }
    out
}

/// The unit with ExecStart pointing at the binary this build made (verify wants it to exist).
fn unit_for_test(dir: &Path) -> PathBuf {
    let text = read("systemd/ddpcheckd.service");
    let daemon = bin("ddpcheckd");
    let mut replaced = 0;
    let out: Vec<String> = text
        .lines()
        .map(|l| {
            if l.starts_with("ExecStart=") {
                replaced += 1;
                format!("ExecStart={}", daemon.display())
            } else {
                l.to_string()
            }
        })
        .collect();
    assert_eq!(replaced, 1, "the unit must have exactly one ExecStart=");
    let path = dir.join("ddpcheckd.service");
    std::fs::write(&path, out.join("\n") + "\n").unwrap();
    path
}

fn seconds(v: &str) -> f64 {
    let v = v.trim();
    if let Some(m) = v.strip_suffix("min") {
        return m.parse::<f64>().unwrap() * 60.0;
    }
    v.trim_end_matches('s')
        .parse()
        .unwrap_or_else(|_| panic!("not seconds: {v}"))
}

#[test]
fn unit_declares_what_the_daemon_relies_on() {
    let unit = read("systemd/ddpcheckd.service");
    let s = unit_section(&unit, "Service");
    let one = |k: &str| -> &str {
        let v = s.get(k).unwrap_or_else(|| panic!("[Service] has no {k}="));
        v.last().unwrap()
    };
    assert_eq!(one("Type"), "notify");
    assert_eq!(one("User"), "ddpcheck");
    assert_eq!(one("Group"), "ddpcheck");
    assert_eq!(one("RuntimeDirectory"), "ddpcheck");
    assert_eq!(one("StateDirectory"), "ddpcheck");
    assert_eq!(one("ProtectSystem"), "strict");
    assert_eq!(one("NoNewPrivileges"), "yes");
    assert_eq!(one("CapabilityBoundingSet"), "");
    assert_eq!(one("DevicePolicy"), "closed");
    // /dev/nvidia* must stay reachable; CUDA's JIT needs writable+executable pages.
    assert_ne!(one("PrivateDevices"), "yes");
    assert_ne!(one("MemoryDenyWriteExecute"), "yes");
    let allow = &s["DeviceAllow"];
    for dev in [
        "char-nvidia*",
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
    ] {
        assert!(
            allow.iter().any(|a| a == &format!("{dev} rw")),
            "DeviceAllow lacks {dev}: {allow:?}"
        );
    }
    let families = one("RestrictAddressFamilies");
    for f in ["AF_UNIX", "AF_INET", "AF_INET6", "AF_NETLINK"] {
        assert!(families.split_whitespace().any(|x| x == f), "{families}");
    }
    // One missed collection must not get a healthy daemon restarted.
    let watchdog = seconds(one("WatchdogSec"));
    let round = config::DEFAULT_COLLECT_INTERVAL_S + COLLECT_DEADLINE_S;
    assert!(
        watchdog >= 2.0 * round,
        "WatchdogSec={watchdog} < 2 x {round}"
    );
    assert!(
        seconds(one("TimeoutStopSec")) > 10.0,
        "the daemon waits up to 10 s per task on stop"
    );
    // Descriptors enough that both network listeners' caps are theirs in full.
    let nofile: u64 = one("LimitNOFILE").parse().expect("LimitNOFILE is a number");
    let caps = ddpcheckd::limits::METRICS_MAX_CONNECTIONS + ddpcheckd::limits::TCP_MAX_CONNECTIONS;
    assert_eq!(
        ddpcheckd::limits::cap(ddpcheckd::limits::METRICS_MAX_CONNECTIONS, nofile)
            + ddpcheckd::limits::cap(ddpcheckd::limits::TCP_MAX_CONNECTIONS, nofile),
        caps,
        "LimitNOFILE={nofile} cuts the connection caps"
    );
    // The runtime directory's mode is the same in the unit and in tmpfiles.d.
    let tmpfiles = read("systemd/ddpcheck.tmpfiles.conf");
    let run_line = tmpfiles
        .lines()
        .find(|l| !l.starts_with('#') && l.split_whitespace().nth(1) == Some("/run/ddpcheck"))
        .expect("tmpfiles line for /run/ddpcheck");
    assert_eq!(
        run_line.split_whitespace().nth(2),
        Some(one("RuntimeDirectoryMode"))
    );
}

#[test]
fn unit_passes_systemd_analyze_verify_and_security() {
    if !have("systemd-analyze", &["--version"]) {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let unit = unit_for_test(d.path());
    let o = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&unit)
        .current_dir(d.path())
        .output()
        .unwrap();
    // verify warns about units we do not ship (nvidia-persistenced here); ours must be clean.
    let err = stderr(&o);
    let ours: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("ddpcheckd.service"))
        .collect();
    assert!(
        o.status.success() && ours.is_empty(),
        "systemd-analyze verify: {}{}",
        stdout(&o),
        stderr(&o)
    );

    let o = Command::new("systemd-analyze")
        .args(["security", "--offline=yes", "--no-pager"])
        .arg(&unit)
        .current_dir(d.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    let text = stdout(&o);
    let line = text
        .lines()
        .find(|l| l.contains("Overall exposure level for ddpcheckd.service"))
        .unwrap_or_else(|| panic!("no overall exposure in:\n{text}"));
    let exposure: f64 = line
        .split(':')
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("cannot read the exposure from {line:?}"));
    eprintln!("systemd-analyze security --offline=yes: {line}");
    assert!(
        exposure <= MAX_EXPOSURE,
        "exposure {exposure} > {MAX_EXPOSURE}:\n{text}"
    );
}

#[test]
fn sysusers_and_tmpfiles_create_the_user_and_directories() {
    if !have("systemd-sysusers", &["--version"]) || !have("systemd-tmpfiles", &["--version"]) {
        return;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        assert!(
            !require_services(),
            "DDPCHECK_REQUIRE_SERVICES=1: tmpfiles --root needs root to chown"
        );
        eprintln!("skipping: not root");
        return;
    }
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("etc")).unwrap();
    let sysusers = repo_root().join("systemd/ddpcheck.sysusers.conf");
    let o = Command::new("systemd-sysusers")
        .arg("--root")
        .arg(root.path())
        .arg(&sysusers)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let passwd = std::fs::read_to_string(root.path().join("etc/passwd")).unwrap();
    let entry = passwd
        .lines()
        .find(|l| l.starts_with("ddpcheck:"))
        .expect("ddpcheck in passwd");
    let f: Vec<&str> = entry.split(':').collect();
    let uid: u32 = f[2].parse().unwrap();
    assert!(uid > 0 && uid < 1000, "a system uid: {entry}");
    assert_eq!(f[6], "/usr/sbin/nologin");
    let group = std::fs::read_to_string(root.path().join("etc/group")).unwrap();
    let gid: u32 = group
        .lines()
        .find(|l| l.starts_with("ddpcheck:"))
        .and_then(|l| l.split(':').nth(2))
        .and_then(|g| g.parse().ok())
        .expect("group ddpcheck");

    let tmpfiles = repo_root().join("systemd/ddpcheck.tmpfiles.conf");
    let o = Command::new("systemd-tmpfiles")
        .args(["--create", "--root"])
        .arg(root.path())
        .arg(&tmpfiles)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    for (rel, mode, dir) in [
        ("run/ddpcheck", 0o770, true),
        ("run/ddpcheck/test.lock", 0o660, false),
        ("var/lib/ddpcheck", 0o750, true),
    ] {
        let m = std::fs::metadata(root.path().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
        assert_eq!(m.is_dir(), dir, "{rel}");
        assert_eq!(m.permissions().mode() & 0o7777, mode, "{rel}");
        assert_eq!(
            (m.uid(), m.gid()),
            (uid, gid),
            "{rel} owned by ddpcheck:ddpcheck"
        );
    }
}

#[test]
fn example_config_is_valid_and_documents_every_key() {
    let example = repo_root().join("systemd/ddpcheck.toml.example");
    let text = read("systemd/ddpcheck.toml.example");
    for k in config::KEYS {
        assert!(
            text.lines().any(|l| l
                .trim_start_matches(['#', ' '])
                .starts_with(&format!("{} =", k.name))),
            "the example does not mention {}",
            k.name
        );
    }
    let o = local(&["config", "check", "--config", example.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    let shown = stdout(&o);
    let parsed = config::Layer::from_toml(&shown, Path::new("output"))
        .unwrap_or_else(|e| panic!("{e}\n{shown}"));
    let file = config::Layer::from_toml(&text, &example).unwrap();
    // Every key the example sets is shown with its value and the file as its source.
    let file_json = serde_json::to_value(&file).unwrap();
    for (k, v) in file_json.as_object().unwrap() {
        assert_eq!(&serde_json::to_value(&parsed).unwrap()[k], v, "{k}");
        assert!(
            shown.lines().any(|l| l.starts_with(&format!("{k} = "))
                && l.contains(&format!("# file {}", example.display()))),
            "{k} not shown as from the file:\n{shown}"
        );
    }
}

#[test]
fn config_check_applies_precedence_and_rejects_bad_files() {
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("ddpcheck.toml");
    std::fs::write(
        &f,
        "collect_interval = 10\nmetrics_listen = \"127.0.0.1:19402\"\n",
    )
    .unwrap();
    let o = Command::new(bin("ddpcheck"))
        .args(["--json", "config", "check", "--config"])
        .arg(&f)
        .env("DDPCHECK_COLLECT_INTERVAL", "15")
        .env_remove("DDPCHECK_METRICS_LISTEN")
        .env_remove("DDPCHECK_SIM")
        .output()
        .unwrap();
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["values"]["collect_interval"], 15.0);
    assert_eq!(
        v["sources"]["collect_interval"],
        "env DDPCHECK_COLLECT_INTERVAL"
    );
    assert_eq!(v["values"]["metrics_listen"], "127.0.0.1:19402");
    assert_eq!(
        v["sources"]["metrics_listen"],
        format!("file {}", f.display())
    );
    assert_eq!(v["sources"]["listen"], "default");

    // An unknown key, a missing explicit file, a bad value: usage errors naming the problem.
    std::fs::write(&f, "colect_interval = 10\n").unwrap();
    let o = local(&["config", "check", "--config", f.to_str().unwrap()]);
    assert_eq!(code(&o), 64);
    assert!(
        stderr(&o).contains("unknown field `colect_interval`"),
        "{}",
        stderr(&o)
    );
    let o = local(&[
        "config",
        "check",
        "--config",
        d.path().join("nope.toml").to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 64);
    assert!(stderr(&o).contains("does not exist"), "{}", stderr(&o));
    std::fs::write(&f, "collect_interval = 0\n").unwrap();
    let o = local(&["config", "check", "--config", f.to_str().unwrap()]);
    assert_eq!(code(&o), 64);
    assert!(stderr(&o).contains("collect_interval"), "{}", stderr(&o));
}

/// Runs ddpcheckd expecting it to refuse its configuration at once (exit 64).
fn daemon_refuses(args: &[&str], env: &[(&str, &str)]) -> String {
    let mut c = Command::new(bin("ddpcheckd"));
    c.args(args)
        .env_remove("DDPCHECK_SIM")
        .env_remove("DDPCHECK_CONFIG");
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    assert_eq!(
        code(&o),
        64,
        "{args:?} {env:?}: {}{}",
        stdout(&o),
        stderr(&o)
    );
    stderr(&o)
}

#[test]
fn daemon_takes_flags_over_environment_over_file() {
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("ddpcheck.toml");
    let fs = f.to_str().unwrap();
    // A value that is wrong in one layer only shows which layer won.
    std::fs::write(&f, "sim = \"from-file\"\n").unwrap();
    let e = daemon_refuses(&["--config", fs], &[]);
    assert!(
        e.contains("\"from-file\"") && e.contains(&format!("file {fs}")),
        "{e}"
    );
    let e = daemon_refuses(&["--config", fs], &[("DDPCHECK_SIM", "from-env")]);
    assert!(
        e.contains("\"from-env\"") && e.contains("env DDPCHECK_SIM"),
        "{e}"
    );
    let e = daemon_refuses(
        &["--config", fs, "--sim", "from-flag"],
        &[("DDPCHECK_SIM", "from-env")],
    );
    assert!(e.contains("\"from-flag\"") && e.contains("(flag)"), "{e}");
    let e = daemon_refuses(
        &["--config", d.path().join("nope.toml").to_str().unwrap()],
        &[],
    );
    assert!(e.contains("does not exist"), "{e}");
    std::fs::write(&f, "[daemon]\nsim = \"h200x2-nvlink\"\n").unwrap();
    let e = daemon_refuses(&["--config", fs], &[]);
    assert!(e.contains("unknown field `daemon`"), "{e}");

    // And a file that is right: the daemon runs the node it describes.
    std::fs::write(&f, "sim = \"h200x2-nvlink+ecc\"\ncollect_interval = 5\n").unwrap();
    let daemon = Daemon::start_with(None, &["--config", fs]);
    let o = daemon.cli(&["check", "--prolog"]);
    assert_eq!(code(&o), 1, "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).starts_with("ddpcheck: CRITICAL: ") && stdout(&o).contains("ECC"),
        "{}",
        stdout(&o)
    );
    daemon.stop();
}

/// A YAML file's documents as JSON, through the PyYAML that kubernetes-validate depends on.
fn yaml_docs(path: &Path) -> Vec<serde_json::Value> {
    let o = Command::new("python3")
        .args([
            "-c",
            "import sys, json, yaml; json.dump([d for d in yaml.safe_load_all(open(sys.argv[1])) if d], sys.stdout)",
        ])
        .arg(path)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

fn find_kind<'a>(docs: &'a [serde_json::Value], kind: &str) -> &'a serde_json::Value {
    docs.iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind}"))
}

#[test]
fn kubernetes_manifests_validate_and_agree_on_the_socket() {
    if !have("python3", &["-c", "import kubernetes_validate, yaml"]) {
        return;
    }
    let k8s = repo_root().join("deploy/k8s");
    let files = [
        k8s.join("daemonset.yaml"),
        k8s.join("job-with-init-container.yaml"),
    ];
    // The oldest Kubernetes still commonly run, and the newest schemas the validator carries.
    for version in ["1.29.0", "latest"] {
        let mut c = Command::new("python3");
        c.args(["-m", "kubernetes_validate", "--strict"]);
        if version != "latest" {
            c.args(["-k", version]);
        }
        let o = c.args(&files).output().unwrap();
        assert!(
            o.status.success(),
            "kubernetes-validate {version}: {}{}",
            stdout(&o),
            stderr(&o)
        );
        assert!(!stdout(&o).contains("ERROR"), "{}", stdout(&o));
    }

    let docs = yaml_docs(&files[0]);
    let ds = find_kind(&docs, "DaemonSet");
    let pod = &ds["spec"]["template"];
    let ann = &pod["metadata"]["annotations"];
    assert_eq!(ann["prometheus.io/scrape"], "true");
    assert_eq!(ann["prometheus.io/port"], "9402");
    assert_eq!(ann["prometheus.io/path"], "/metrics");
    assert_eq!(pod["spec"]["runtimeClassName"], "nvidia");
    let c = &pod["spec"]["containers"][0];
    assert_eq!(c["ports"][0]["containerPort"], 9402);
    // The daemon must not take GPUs away from the scheduler.
    assert!(c["resources"]["limits"].get("nvidia.com/gpu").is_none());
    let args: Vec<&str> = c["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    let listen = args
        .iter()
        .find_map(|a| a.strip_prefix("--listen="))
        .expect("--listen= in the DaemonSet");
    assert_eq!(listen, ddpcheck_client::DEFAULT_SOCKET);
    assert!(args.contains(&"--metrics-listen=0.0.0.0:9402"), "{args:?}");
    let host_run = pod["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["hostPath"]["path"] == "/run/ddpcheck")
        .expect("hostPath /run/ddpcheck");
    let mounted = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["name"] == host_run["name"] && m["mountPath"] == "/run/ddpcheck");
    assert!(mounted, "the daemon mounts the host's /run/ddpcheck");

    let docs = yaml_docs(&files[1]);
    let job = find_kind(&docs, "Job");
    let spec = &job["spec"]["template"]["spec"];
    let init = &spec["initContainers"][0];
    let script = serde_json::to_string(&init["args"]).unwrap()
        + &serde_json::to_string(&init["command"]).unwrap();
    assert!(script.contains("ddpcheck check --prolog"), "{script}");
    assert!(
        script.contains(&format!("--daemon unix:{listen}")),
        "{script}"
    );
    let vol = spec["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["hostPath"]["path"] == "/run/ddpcheck")
        .expect("the Job mounts the host's /run/ddpcheck");
    assert!(init["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["name"] == vol["name"] && m["mountPath"] == "/run/ddpcheck"));
}

fn duration_s(v: &serde_json::Value) -> f64 {
    let s = v
        .as_str()
        .unwrap_or_else(|| panic!("duration {v} is not a string"));
    let n = s
        .strip_suffix('s')
        .unwrap_or_else(|| panic!("{s}: want seconds like \"30s\""));
    n.parse().unwrap_or_else(|_| panic!("{s}"))
}

#[test]
fn node_problem_detector_plugin_is_complete_and_its_rule_runs() {
    let text = read("deploy/k8s/node-problem-detector/ddpcheck-plugin-monitor.json");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["plugin"], "custom");
    assert!(v["source"].as_str().is_some_and(|s| !s.is_empty()));
    let pc = &v["pluginConfig"];
    let plugin_timeout = duration_s(&pc["timeout"]);
    assert!(duration_s(&pc["invoke_interval"]) > plugin_timeout);
    assert!(
        pc["max_output_length"].as_u64().is_some_and(|n| n >= 120),
        "room for the ddpcheck: line"
    );
    let conditions: Vec<&str> = v["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            for f in ["type", "reason", "message"] {
                assert!(
                    c[f].as_str().is_some_and(|s| !s.is_empty()),
                    "condition {c} lacks {f}"
                );
            }
            c["type"].as_str().unwrap()
        })
        .collect();
    let rules = v["rules"].as_array().unwrap();
    assert!(
        rules.iter().any(|r| r["type"] == "permanent"),
        "a rule must set the condition"
    );
    for r in rules {
        assert!(
            ["temporary", "permanent"].contains(&r["type"].as_str().unwrap()),
            "{r}"
        );
        if r["type"] == "permanent" {
            assert!(
                conditions.contains(&r["condition"].as_str().unwrap()),
                "{r}"
            );
        }
        assert!(r["reason"].as_str().is_some_and(|s| !s.is_empty()));
        assert!(
            r["path"]
                .as_str()
                .is_some_and(|p| p.starts_with('/') && p.ends_with("/ddpcheck")),
            "{r}"
        );
        assert!(duration_s(&r["timeout"]) <= plugin_timeout, "{r}");
        let args: Vec<&str> = r["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert_eq!(&args[..2], &["check", "--prolog"]);

        // NPD's contract: exit 0 OK, 1 problem. The rule's own arguments, against daemons.
        for (spec, want) in [("h200x2-nvlink", 0), ("h200x2-nvlink+ecc", 1)] {
            let daemon = Daemon::start(Some(spec));
            let sock = format!("unix:{}", daemon.addr());
            let real: Vec<&str> = args
                .iter()
                .map(|a| {
                    if a.ends_with("/run/ddpcheck/ddpcheck.sock") {
                        sock.as_str()
                    } else {
                        a
                    }
                })
                .collect();
            assert!(
                real.contains(&sock.as_str()),
                "the rule does not name the daemon's socket: {args:?}"
            );
            let o = Command::new(bin("ddpcheck"))
                .args(&real)
                .env_remove("DDPCHECK_SIM")
                .output()
                .unwrap();
            assert_eq!(code(&o), want, "{spec}: {}{}", stdout(&o), stderr(&o));
            assert!(stdout(&o).starts_with("ddpcheck: "), "{}", stdout(&o));
            daemon.stop();
        }
    }
}

/// Where the Debian package installs a binary: `/` + the destination cli/Cargo.toml's
/// [package.metadata.deb] assets give `target/release/NAME`.
fn packaged_path(name: &str) -> String {
    let manifest: toml::Value = toml::from_str(&read("cli/Cargo.toml")).unwrap();
    let assets = manifest["package"]["metadata"]["deb"]["assets"]
        .as_array()
        .expect("[package.metadata.deb] assets");
    let source = format!("target/release/{name}");
    let dest = assets
        .iter()
        .find(|a| a[0].as_str() == Some(source.as_str()))
        .and_then(|a| a[1].as_str())
        .unwrap_or_else(|| panic!("the package does not install {source}"));
    let dir = dest
        .strip_suffix('/')
        .unwrap_or_else(|| panic!("{dest}: want a folder"));
    format!("/{dir}/{name}")
}

#[test]
fn manifests_run_the_image_the_packaging_builds() {
    // packaging/build-image.sh tags `image_name:VERSION`; the manifests name that image in an
    // operator's registry (any registry prefix), at this version.
    let script = read("packaging/build-image.sh");
    let name = script
        .lines()
        .find_map(|l| l.strip_prefix("image_name="))
        .expect("image_name= in packaging/build-image.sh");
    let want = format!("/{name}:{}", env!("CARGO_PKG_VERSION"));
    let daemon = packaged_path("ddpcheckd");
    let cli = packaged_path("ddpcheck");

    let k8s = repo_root().join("deploy/k8s");
    let docs = yaml_docs(&k8s.join("daemonset.yaml"));
    let c = &find_kind(&docs, "DaemonSet")["spec"]["template"]["spec"]["containers"][0];
    let image = c["image"].as_str().unwrap();
    assert!(
        image.ends_with(&want),
        "DaemonSet image {image}, want *{want}"
    );
    assert_eq!(c["command"][0], daemon.as_str(), "the package's ddpcheckd");

    let docs = yaml_docs(&k8s.join("job-with-init-container.yaml"));
    let init = &find_kind(&docs, "Job")["spec"]["template"]["spec"]["initContainers"][0];
    let image = init["image"].as_str().unwrap();
    assert!(
        image.ends_with(&want),
        "init container image {image}, want *{want}"
    );
    let script = serde_json::to_string(&init["args"]).unwrap();
    assert!(
        script.contains(&format!("exec {cli} check --prolog")),
        "the init container runs the package's ddpcheck: {script}"
    );

    let containerfile = read("packaging/Containerfile");
    assert!(
        containerfile
            .lines()
            .any(|l| l == format!("ENTRYPOINT [\"{daemon}\"]")),
        "the image's entrypoint is the package's ddpcheckd"
    );
}

#[test]
fn the_package_script_refuses_what_it_does_not_know_before_doing_anything() {
    // CI packages its test build with `--no-build --profile dev`; a mistyped flag must stop the
    // script with a usage error (64), not build or package something else.
    let cases: [(&[&str], &str); 2] = [
        (&["--bogus"], "unknown argument --bogus"),
        (
            &["--no-build", "--profile"],
            "--profile needs a Cargo profile",
        ),
    ];
    for (args, words) in cases {
        let o = Command::new("bash")
            .arg(repo_root().join("packaging/build-deb.sh"))
            .args(args)
            .output()
            .unwrap();
        assert_eq!(code(&o), 64, "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(words), "{args:?}: {}", stderr(&o));
        assert!(stdout(&o).is_empty(), "{args:?}: {}", stdout(&o));
    }
}
