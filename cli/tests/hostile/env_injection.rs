//! Environment injection: a caller names NCCL_* or CUDA_* variables that load code or write
//! files (`NCCL_NET_PLUGIN`, `CUDA_INJECTION64_PATH`, `NCCL_DEBUG_FILE`) through `--env-ab` or
//! `--env`. The daemon refuses them with one line and exit 64 before any work, so no worker runs
//! under them; the transport and algorithm settings still pass, and an operator may allow more
//! by name.

use crate::common::{code, stderr, stdout, Daemon};

const SIM: &str = "h200x2-nvlink";

/// `bench collectives` on the simulated node, small and quick, under these `--env-ab` candidates.
fn collectives(d: &Daemon, env_ab: &str) -> std::process::Output {
    d.cli(&[
        "bench",
        "collectives",
        "-b",
        "1M",
        "-e",
        "4M",
        "--env-ab",
        env_ab,
        "--json",
    ])
}

fn ddp(d: &Daemon, env: &str) -> std::process::Output {
    let mut args = crate::common::words("bench ddp --model gpt2-124m --gpus 1,2 --variants base");
    args.extend_from_slice(&["--env", env, "--json"]);
    d.cli(&args)
}

/// The runs the daemon stored: a refused call stores none (no worker ran).
fn stored_runs(d: &Daemon) -> usize {
    let o = d.cli(&["--json", "history"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    v.as_array().expect("a list").len()
}

fn assert_refused(o: &std::process::Output, name: &str) {
    let err = stderr(o);
    assert_eq!(code(o), 64, "{name}: {err}{}", stdout(o));
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(err.contains(name), "{err}");
    assert!(stdout(o).trim().is_empty(), "no report: {}", stdout(o));
}

/// The environment each collective run of a `bench collectives --json` report recorded.
fn recorded_envs(o: &std::process::Output) -> Vec<serde_json::Value> {
    let v: serde_json::Value = serde_json::from_str(&stdout(o)).unwrap();
    v["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|r| r["run"]["env"].clone())
        .collect()
}

#[test]
fn variables_that_load_code_or_name_files_are_refused_before_any_work() {
    let d = Daemon::start(Some(SIM));
    for var in [
        "NCCL_NET_PLUGIN=/dev/shm/x.so",
        "NCCL_TUNER_PLUGIN=/dev/shm/x.so",
        "CUDA_INJECTION64_PATH=/dev/shm/x.so",
        "NCCL_DEBUG_FILE=/var/lib/ddpcheck/history.db",
        // Hidden behind an allowed one in the same candidate.
        "NCCL_ALGO=Ring+NCCL_PROFILER_PLUGIN=/dev/shm/x.so",
    ] {
        let name = var.rsplit('+').next().unwrap().split('=').next().unwrap();
        assert_refused(&collectives(&d, var), name);
    }
    for var in [
        "NCCL_NET_PLUGIN=/dev/shm/x.so",
        "NCCL_TOPO_FILE=/dev/shm/t.xml",
    ] {
        let name = var.split('=').next().unwrap();
        assert_refused(&ddp(&d, var), name);
    }
    assert_eq!(stored_runs(&d), 0, "a refused call ran a worker");
    d.stop();
}

#[test]
fn transport_settings_pass_and_the_operator_may_allow_more_by_name() {
    let d = Daemon::start_with(Some(SIM), &["--allow-env", "NCCL_TOPO_FILE"]);
    let o = collectives(&d, "NCCL_P2P_DISABLE=1,NCCL_TOPO_FILE=/etc/nccl/topo.xml");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let envs = recorded_envs(&o);
    assert_eq!(envs.len(), 3, "{envs:?}");
    assert_eq!(envs[1], serde_json::json!([["NCCL_P2P_DISABLE", "1"]]));
    assert_eq!(
        envs[2],
        serde_json::json!([["NCCL_TOPO_FILE", "/etc/nccl/topo.xml"]])
    );
    // Allowing one variable by name allows no other.
    assert_refused(
        &collectives(&d, "NCCL_GRAPH_FILE=/dev/shm/g.xml"),
        "NCCL_GRAPH_FILE",
    );
    let o = ddp(&d, "NCCL_ALGO=Ring");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["provenance"]["nccl_env"]["NCCL_ALGO"], "Ring", "{v}");
    assert_eq!(stored_runs(&d), 2);
    d.stop();
}
