//! `allow_env` may name a variable that makes the daemon's workers load code or read a file a
//! caller chooses (`NCCL_NET_PLUGIN`, `NCCL_TOPO_FILE`, `CUDA_INJECTION64_PATH`): the daemon
//! starts, and warns at start, once per such name, what it lets callers do. Other names start
//! without a word.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

/// The stderr lines of a `ddpcheckd` started with `--allow-env names` until its ready line.
fn start_lines(names: &str) -> Vec<String> {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_ddpcheckd"))
        .args(["--sim", "h200x2-nvlink", "--metrics-listen", "none"])
        .arg("--listen")
        .arg(dir.path().join("d.sock"))
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .arg("--runtime-dir")
        .arg(dir.path().join("run"))
        .args(["--allow-env", names])
        .env_remove("DDPCHECK_SIM")
        .env_remove("DDPCHECK_CONFIG")
        .env_remove("DDPCHECK_ALLOW_ENV")
        .env("DDPCHECK_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ddpcheckd");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = Vec::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let ready = line.starts_with("ddpcheckd: ready");
            lines.push(line);
            if ready {
                let _ = tx.send(lines);
                return;
            }
        }
        let _ = tx.send(lines);
    });
    let lines = rx.recv_timeout(Duration::from_secs(30)).expect("lines");
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        lines.iter().any(|l| l.starts_with("ddpcheckd: ready")),
        "not ready: {lines:?}"
    );
    lines
}

#[test]
fn allow_env_naming_code_or_a_file_warns_at_start_what_it_allows() {
    let lines = start_lines("NCCL_NET_PLUGIN,NCCL_IB_TIMEOUT,NCCL_TOPO_FILE");
    let warned: Vec<&String> = lines.iter().filter(|l| l.contains("allow_env")).collect();
    assert_eq!(warned.len(), 2, "{lines:?}");
    assert!(
        warned[0].contains("NCCL_NET_PLUGIN") && warned[0].contains("load"),
        "{warned:?}"
    );
    assert!(warned[1].contains("NCCL_TOPO_FILE"), "{warned:?}");
    assert!(
        !lines.iter().any(|l| l.contains("NCCL_IB_TIMEOUT")),
        "{lines:?}"
    );
    let quiet = start_lines("NCCL_IB_TIMEOUT");
    assert!(!quiet.iter().any(|l| l.contains("allow_env")), "{quiet:?}");
}
