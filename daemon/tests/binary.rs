//! The `ddpcheckd` binary itself: help and bad flags. (Also makes `cargo test --workspace` build
//! the binary, which the CLI's end-to-end tests start.)

use std::path::Path;
use std::process::Command;

use ddpcheck_testkit::daemon::{ready_lines, sim_daemon};

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ddpcheckd"))
}

fn ddpcheckd(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ddpcheckd"))
        .args(args)
        .env_remove("DDPCHECK_SIM")
        .output()
        .expect("run ddpcheckd")
}

#[test]
fn help_exits_zero_and_names_the_socket() {
    let o = ddpcheckd(&["--help"]);
    assert_eq!(o.status.code(), Some(0));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("--listen"), "{text}");
    assert!(text.contains("--sim"), "{text}");
}

#[test]
fn bad_flags_and_bad_sim_specs_exit_64_with_one_line() {
    for args in [
        vec!["--no-such-flag"],
        vec!["--sim", "nosuch-profile", "--metrics-listen", "none"],
    ] {
        let o = ddpcheckd(&args);
        assert_eq!(o.status.code(), Some(64), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("ddpcheckd")).collect();
        assert_eq!(lines.len(), 1, "{args:?}: {err}");
    }
}

/// The log on a pipe (as under systemd, where stderr is the journal) carries no colour codes.
#[test]
fn log_lines_on_a_pipe_have_no_colour_codes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = sim_daemon(
        bin(),
        "h200x2-nvlink",
        dir.path(),
        dir.path().join("d.sock"),
    )
    .env("DDPCHECK_LOG", "info")
    .stderr(std::process::Stdio::piped())
    .spawn()
    .expect("spawn ddpcheckd");
    let lines = ready_lines(&mut child, std::time::Duration::from_secs(30));
    let _ = child.kill();
    let _ = child.wait();
    let lines = lines.expect("ddpcheckd became ready within 30 s");
    let logged: Vec<&String> = lines.iter().filter(|l| l.contains("INFO")).collect();
    assert!(!logged.is_empty(), "no INFO line before ready: {lines:?}");
    assert!(
        lines.iter().all(|l| !l.contains('\u{1b}')),
        "colour codes on a pipe: {lines:?}"
    );
}

/// `--listen` takes gRPC's `unix:` notation as the socket's path, and refuses another scheme in
/// one line with 64, without making a folder named after it in the working directory.
#[test]
fn listen_takes_unix_notation_and_refuses_other_schemes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("sub").join("d.sock");
    let mut child = sim_daemon(
        bin(),
        "h200x2-nvlink",
        dir.path(),
        format!("unix:{}", sock.display()),
    )
    .current_dir(dir.path())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .expect("spawn ddpcheckd");
    let ready = ready_lines(&mut child, std::time::Duration::from_secs(30));
    let bound = sock.exists();
    let _ = child.kill();
    let _ = child.wait();
    let ready = ready.expect("ddpcheckd became ready within 30 s");
    let ready = ready.last().expect("the ready line");
    assert!(
        ready.contains(&format!("socket={}", sock.display())),
        "{ready}"
    );
    assert!(bound, "no socket at {}", sock.display());
    assert!(!dir.path().join("unix:").exists(), "a folder named unix:");

    for bad in ["http://127.0.0.1:9402", "dns:node:50051", "unix-abstract:d"] {
        let o = sim_daemon(bin(), "h200x2-nvlink", dir.path(), bad)
            .current_dir(dir.path())
            .output()
            .expect("run ddpcheckd");
        assert_eq!(o.status.code(), Some(64), "{bad}");
        let err = String::from_utf8_lossy(&o.stderr);
        let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("ddpcheckd")).collect();
        assert_eq!(lines.len(), 1, "{bad}: {err}");
        assert!(
            lines[0].contains("listen") && lines[0].contains(bad),
            "{err}"
        );
        let scheme = bad.split(':').next().unwrap_or_default();
        assert!(
            !dir.path().join(format!("{scheme}:")).exists(),
            "{bad} made a folder"
        );
    }
}
