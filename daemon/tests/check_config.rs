//! `ddpcheckd check-config` refuses what the daemon could not start with, or should not: TLS files
//! that cannot be read, a `state_dir` that cannot hold the history, an address in use, and
//! `factory_dirs` that anyone but root or the daemon's user could write to. Each is one line and
//! exit 64. A daemon that fails at start says why once.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

fn ddpcheckd(args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ddpcheckd"));
    c.args(args);
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("DDPCHECK_")) {
        c.env_remove(k);
    }
    c.env("DDPCHECK_LOG", "warn")
        .output()
        .expect("run ddpcheckd")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `check-config` on a file of these lines (plus a private control socket and no /metrics
/// unless the lines set one).
fn check_config(dir: &Path, lines: &str) -> Output {
    let file = dir.join("ddpcheck.toml");
    let mut text = format!("listen = \"{}\"\n", dir.join("d.sock").display());
    if !lines.contains("metrics_listen") {
        text.push_str("metrics_listen = \"none\"\n");
    }
    text.push_str(lines);
    std::fs::write(&file, text).expect("write config");
    ddpcheckd(&["check-config", "--config", file.to_str().expect("utf-8")])
}

fn assert_refused(o: &Output, key: &str, why: &str) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(64), "{key}: {err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(
        err.contains(key) && err.contains(why),
        "{key}, {why}: {err}"
    );
}

#[test]
fn missing_tls_files_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pem = dir.path().join("cert.pem");
    std::fs::write(&pem, "not checked here").expect("write");
    let tls = |cert: &str| {
        format!(
            "tcp = \"127.0.0.1:0\"\ntls_cert = \"{cert}\"\ntls_key = \"{}\"\ntls_client_ca = \"{}\"\n",
            pem.display(),
            pem.display()
        )
    };
    let o = check_config(dir.path(), &tls("/nope"));
    assert_refused(&o, "tls_cert", "No such file");
    let o = check_config(dir.path(), &tls(&dir.path().display().to_string()));
    assert_refused(&o, "tls_cert", "not a regular file");
    let o = check_config(dir.path(), &tls(&pem.display().to_string()));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn a_state_dir_that_cannot_hold_the_history_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("a-file");
    std::fs::write(&file, "").expect("write");
    let o = check_config(dir.path(), &format!("state_dir = \"{}\"\n", file.display()));
    assert_refused(&o, "state_dir", "is not a folder");
    let under_file = file.join("state");
    let o = check_config(
        dir.path(),
        &format!("state_dir = \"{}\"\n", under_file.display()),
    );
    assert_refused(&o, "state_dir", "cannot be used: Not a directory");
    // procfs takes no new folders, not even root's.
    let o = check_config(dir.path(), "state_dir = \"/proc/ddpcheck-state\"\n");
    assert_refused(&o, "state_dir", "cannot be created");
    // A folder the daemon would create passes, and the check leaves nothing behind.
    let fresh = dir.path().join("new/state");
    let o = check_config(
        dir.path(),
        &format!("state_dir = \"{}\"\n", fresh.display()),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(!dir.path().join("new").exists());
}

#[test]
fn a_metrics_address_in_use_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let busy = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = busy.local_addr().expect("addr");
    let o = check_config(dir.path(), &format!("metrics_listen = \"{addr}\"\n"));
    assert_refused(&o, "metrics_listen", "in use");
    drop(busy);
    let o = check_config(dir.path(), &format!("metrics_listen = \"{addr}\"\n"));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn factory_dirs_are_held_to_strict_modes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let factories = dir.path().join("factories");
    std::fs::create_dir(&factories).expect("mkdir");
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&factories, &link).expect("symlink");
    let set = |p: &Path| format!("factory_dirs = \"{}\"\n", p.display());
    assert_refused(
        &check_config(dir.path(), &set(Path::new("/"))),
        "factory_dirs",
        "whole file system",
    );
    assert_refused(
        &check_config(dir.path(), &set(&link)),
        "factory_dirs",
        "symbolic link",
    );
    std::fs::set_permissions(&factories, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    assert_refused(
        &check_config(dir.path(), &set(&factories)),
        "factory_dirs",
        "writable by group or others",
    );
    std::fs::set_permissions(&factories, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let o = check_config(dir.path(), &set(&factories));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // The daemon refuses them at start the same way.
    std::fs::set_permissions(&factories, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let sock = dir.path().join("d2.sock");
    let o = ddpcheckd(&[
        "--sim",
        "h200x2-nvlink",
        "--listen",
        sock.to_str().expect("utf-8"),
        "--metrics-listen",
        "none",
        "--factory-dirs",
        factories.to_str().expect("utf-8"),
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(64), "{err}");
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("ddpcheckd:"))
        .collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains("writable by group or others"), "{err}");
}

#[test]
fn a_failed_start_says_why_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("a-file");
    std::fs::write(&file, "").expect("write");
    let o = ddpcheckd(&[
        "--sim",
        "h200x2-nvlink",
        "--listen",
        dir.path().join("d.sock").to_str().expect("utf-8"),
        "--metrics-listen",
        "none",
        "--runtime-dir",
        dir.path().join("run").to_str().expect("utf-8"),
        "--state-dir",
        file.join("state").to_str().expect("utf-8"),
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("ddpcheckd:"))
        .unwrap_or_else(|| panic!("no ddpcheckd: line in {err}"));
    assert_eq!(line.matches("Not a directory").count(), 1, "{line}");
}
