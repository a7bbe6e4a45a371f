//! The CLI does not link the server: `config check` and `demo` run the `ddpcheckd` binary. A
//! `ddpcheck` with no `ddpcheckd` beside it or on PATH says so for `config check`, and runs the
//! demo's simulated node in process.
#![allow(clippy::unwrap_used)]

mod common;

use std::process::Command;

use common::{bin, code, stderr, stdout};

/// A copy of `ddpcheck` alone in a folder, run with a PATH that has no `ddpcheckd`.
fn lone_ddpcheck(args: &[&str]) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let lone = dir.path().join("ddpcheck");
    std::fs::copy(bin("ddpcheck"), &lone).unwrap();
    Command::new(&lone)
        .args(args)
        .env("PATH", dir.path())
        .env_remove("DDPCHECK_SIM")
        .env_remove("DDPCHECK_DAEMON")
        .env_remove("DDPCHECK_CONFIG")
        .output()
        .unwrap()
}

#[test]
fn config_check_without_ddpcheckd_is_one_clear_line() {
    let o = lone_ddpcheck(&["config", "check"]);
    assert_eq!(code(&o), 3, "{}{}", stdout(&o), stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("needs the ddpcheckd binary") && e.contains("cargo build --release"),
        "{e}"
    );
    assert_eq!(e.trim().lines().count(), 1, "{e}");
}

#[test]
fn demo_without_ddpcheckd_runs_the_simulated_node_in_process() {
    let o = lone_ddpcheck(&["demo"]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    let first = out.lines().next().unwrap();
    assert!(
        first.contains("SIMULATED") && first.contains("cargo build --release"),
        "{first}"
    );
    assert!(out.contains("every number above is SIMULATED"), "{out}");
    // With --json stdout stays one document; the note goes to stderr.
    let o = lone_ddpcheck(&["--json", "demo"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["recommend"].is_object(), "{v}");
    assert!(stderr(&o).contains("run in this process"), "{}", stderr(&o));
}

#[test]
fn demo_goes_through_the_ddpcheckd_beside_it() {
    let o = Command::new(bin("ddpcheck"))
        .arg("demo")
        .env_remove("DDPCHECK_SIM")
        .env_remove("DDPCHECK_DAEMON")
        .output()
        .unwrap();
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    let first = stdout(&o).lines().next().unwrap().to_string();
    assert!(
        first.contains(bin("ddpcheckd").to_str().unwrap()) && first.contains("SIMULATED"),
        "{first}"
    );
}
