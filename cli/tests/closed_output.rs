//! A reader that goes away (`ddpcheck ... | head`) ends ddpcheck quietly, never with a panic.

mod common;

use std::process::{Command, Stdio};

#[test]
fn a_closed_stdout_ends_the_command_with_141_and_no_panic() {
    // Thousands of lines of JSON into a pipe whose reader is gone before the first write.
    let mut child = Command::new(common::bin("ddpcheck"))
        .args([
            "--sim",
            "h200x8-nvswitch",
            "bench",
            "collectives",
            "--ops",
            "all",
            "-b",
            "1K",
            "-e",
            "1G",
            "--json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ddpcheck starts");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("ddpcheck ends");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(141), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
