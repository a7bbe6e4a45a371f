//! `allow_env` may name a variable that makes the daemon's workers load code or read a file a
//! caller chooses (`NCCL_NET_PLUGIN`, `NCCL_TOPO_FILE`, `CUDA_INJECTION64_PATH`): the daemon
//! starts, and warns at start, once per such name, what it lets callers do. Other names start
//! without a word.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use ddpcheck_testkit::daemon::{ready_lines, sim_daemon};

/// The stderr lines of a `ddpcheckd` started with `--allow-env names` until its ready line.
fn start_lines(names: &str) -> Vec<String> {
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = Path::new(env!("CARGO_BIN_EXE_ddpcheckd"));
    let mut child = sim_daemon(bin, "h200x2-nvlink", dir.path(), dir.path().join("d.sock"))
        .args(["--allow-env", names])
        .env_remove("DDPCHECK_ALLOW_ENV")
        .env("DDPCHECK_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ddpcheckd");
    let lines = ready_lines(&mut child, Duration::from_secs(30));
    let _ = child.kill();
    let _ = child.wait();
    lines.unwrap_or_else(|lines| panic!("not ready: {lines:?}"))
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
