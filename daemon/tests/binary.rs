//! The `ddpcheckd` binary itself: help and bad flags. (Also makes `cargo test --workspace` build
//! the binary, which the CLI's end-to-end tests start.)

use std::process::Command;

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
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_ddpcheckd"))
        .args(["--sim", "h200x2-nvlink", "--metrics-listen", "none"])
        .arg("--listen")
        .arg(dir.path().join("d.sock"))
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .arg("--runtime-dir")
        .arg(dir.path().join("run"))
        .env_remove("DDPCHECK_SIM")
        .env_remove("DDPCHECK_CONFIG")
        .env("DDPCHECK_LOG", "info")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn ddpcheckd");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut seen = Vec::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let ready = line.starts_with("ddpcheckd: ready");
            seen.push(line);
            if ready {
                let _ = tx.send(seen.clone());
            }
        }
    });
    let lines = rx.recv_timeout(std::time::Duration::from_secs(30));
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
