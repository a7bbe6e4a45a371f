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
