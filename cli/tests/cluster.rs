//! `ddpcheck cluster check` against several simulated daemons on Unix sockets: the protocol
//! (prepare, join), the isolation of an injected slow NIC, and the stage deadline for a node
//! that does not answer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::fake_gpu::FakeGpuLibs;
use common::{bin, code, output_within, stderr, stdout, Daemon};

/// The tests that start daemons run one at a time: the real-backend one judges the fake
/// libraries' all-reduce against a network's expected bandwidth, which the other tests' daemons
/// would slow on a machine of two cores, and the deadline test times its nodes.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn cluster(daemons: &[&Daemon], extra: &[&str]) -> std::process::Output {
    let nodes: Vec<String> = daemons.iter().map(|d| d.addr()).collect();
    let mut cmd = Command::new(bin("ddpcheck"));
    cmd.args(["cluster", "check", "--nodes", &nodes.join(",")])
        .args(extra)
        .env_remove("DDPCHECK_SIM")
        .env_remove("DDPCHECK_DAEMON");
    output_within(&mut cmd, Duration::from_secs(60))
}

fn json(o: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!("not JSON ({e}): {}\n{}", stdout(o), stderr(o));
    })
}

#[test]
fn isolates_the_slow_node_every_time_and_passes_a_healthy_cluster() {
    let _serial = serial();
    let specs = [
        "h200x8-nvswitch",
        "h200x8-nvswitch",
        "h200x8-nvswitch",
        "h200x8-nvswitch+slow-nic",
        "h200x8-nvswitch",
        "h200x8-nvswitch",
    ];
    let daemons: Vec<Daemon> = specs.iter().map(|s| Daemon::start(Some(s))).collect();
    let all: Vec<&Daemon> = daemons.iter().collect();
    let slow = daemons[3].addr();
    for attempt in 0..3 {
        let o = cluster(&all, &["--json", "--stage-deadline", "10"]);
        assert_eq!(
            code(&o),
            2,
            "attempt {attempt}: {}\n{}",
            stdout(&o),
            stderr(&o)
        );
        let r = json(&o);
        assert_eq!(r["kind"], "cluster");
        assert_eq!(r["backend"], "sim");
        assert_eq!(r["verdict"], "CRITICAL");
        let slow_nodes: Vec<&str> = r["isolation"]["slow"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["node"].as_str().unwrap())
            .collect();
        assert_eq!(slow_nodes, vec![slow.as_str()], "attempt {attempt}");
        // Evidence: the pair run with a healthy partner, at the slow NIC's speed.
        let pair = r["isolation"]["slow"][0]["busbw_gbps"].as_f64().unwrap();
        let expected = r["expected"]["busbw_gbps"].as_f64().unwrap();
        assert!(pair < 0.40 * expected, "{pair} vs {expected}");
        let rounds = r["isolation"]["rounds"].as_u64().unwrap();
        assert!(rounds <= 5, "{rounds} rounds");
        let states: Vec<&str> = r["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["state"].as_str().unwrap())
            .collect();
        assert_eq!(states, ["ok", "ok", "ok", "slow", "ok", "ok"]);
        assert!(r["transport"].as_str().unwrap().contains("NET/IB"));
        assert!(r["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["code"] == "cluster_node_slow"
                && f["message"].as_str().unwrap().contains(&slow)));
    }
    // The text report names it too.
    let o = cluster(&all, &["--stage-deadline", "10"]);
    assert_eq!(code(&o), 2);
    let text = stdout(&o);
    assert!(text.contains(&format!("node {slow} is slow")), "{text}");

    // Without the slow node: one run, OK.
    let healthy: Vec<&Daemon> = daemons
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 3)
        .map(|(_, d)| d)
        .collect();
    let o = cluster(&healthy, &["--json", "--stage-deadline", "10"]);
    assert_eq!(code(&o), 0, "{}\n{}", stdout(&o), stderr(&o));
    let r = json(&o);
    assert_eq!(r["verdict"], "OK");
    assert_eq!(r["isolation"]["rounds"], 1);
    let busbw = r["cluster_busbw_gbps"].as_f64().unwrap();
    assert!(busbw >= 0.75 * r["expected"]["busbw_gbps"].as_f64().unwrap());
    // Beside the expectation, the network's line rate: NICs × Gb/s ÷ 8.
    let cap = &r["capacity"];
    let nics = r["nics_per_node"].as_f64().unwrap();
    let line = match r["network"].as_str().unwrap() {
        "ndr400" => 400.0,
        "hdr200" => 200.0,
        "roce100" => 100.0,
        _ => 10.0,
    };
    let gbps = cap["gbps"].as_f64().unwrap();
    assert!((gbps - nics * line / 8.0).abs() < 1e-9, "{cap}");
    assert!((cap["fraction"].as_f64().unwrap() - busbw / gbps).abs() < 1e-9);
}

#[test]
fn a_hung_or_dead_node_is_reported_within_the_deadline() {
    let _serial = serial();
    let a = Daemon::start(Some("h200x8-nvswitch"));
    let b = Daemon::start(Some("h200x8-nvswitch"));
    let hung = Daemon::start(Some("h200x8-nvswitch+hang"));
    let c = Daemon::start(Some("h200x8-nvswitch"));
    let dead = Daemon::start(Some("h200x8-nvswitch"));
    let dead_addr = dead.addr();
    drop(dead); // killed: its socket file stays, nothing answers
    let mut nodes = vec![a.addr(), hung.addr(), b.addr(), c.addr(), dead_addr.clone()];
    nodes.push(String::new()); // a trailing comma is ignored
    let t0 = Instant::now();
    let mut cmd = Command::new(bin("ddpcheck"));
    cmd.args([
        "cluster",
        "check",
        "--json",
        "--stage-deadline",
        "2",
        "--nodes",
        &nodes.join(","),
    ])
    .env_remove("DDPCHECK_SIM")
    .env_remove("DDPCHECK_DAEMON");
    let o = output_within(&mut cmd, Duration::from_secs(30));
    let took = t0.elapsed();
    assert_eq!(code(&o), 2, "{}\n{}", stdout(&o), stderr(&o));
    // One stage deadline (2 s) plus grace, not a hang.
    assert!(took < Duration::from_secs(15), "{took:?}");
    let r = json(&o);
    let state = |addr: &str| {
        r["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["node"] == addr)
            .map(|n| n["state"].as_str().unwrap().to_string())
            .unwrap()
    };
    assert_eq!(state(&hung.addr()), "unresponsive");
    assert_eq!(state(&dead_addr), "unreachable");
    assert_eq!(state(&a.addr()), "ok");
    // The rest were still measured together.
    assert_eq!(r["cluster_run"], serde_json::Value::Null); // not a top-level field
    let (names, busbw) = (
        r["isolation"]["cluster_run"][0].as_array().unwrap().len(),
        r["isolation"]["cluster_run"][1].as_f64().unwrap(),
    );
    assert_eq!(names, 3);
    assert!(busbw > 0.0);
    let msgs: Vec<&str> = r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["code"] == "cluster_node_unresponsive")
        .map(|f| f["message"].as_str().unwrap())
        .collect();
    assert_eq!(msgs.len(), 2, "{msgs:?}");
    assert!(
        msgs.iter()
            .any(|m| m.contains(&hung.addr()) && m.contains("2.0 s")),
        "{msgs:?}"
    );
}

/// Two daemons on the real backend, one fake GPU each: the real join path end to end without
/// GPUs (rank 0's daemon names the rendezvous, both workers set NCCL_COMM_ID and take their
/// global ranks, the fake NCCL meets them in shared memory, the transport comes from NCCL's
/// log), and a node whose all-reduce comes back wrong is the one blamed.
#[test]
fn real_backend_daemons_join_one_communicator_through_fake_gpu_libraries() {
    let _serial = serial();
    let Some(libs) = FakeGpuLibs::build() else {
        return;
    };
    let env = |wrong: bool| {
        let mut e = libs.env(false);
        e.push(("FAKE_GPUS", "1".to_string()));
        // The fake's modelled link: 5 GB/s and 10 us, well above 10 GbE's expectation (1.1 GB/s),
        // whatever else runs on the machine.
        e.push(("FAKE_NCCL_BUSBW_GBPS", "5".to_string()));
        e.push(("FAKE_NCCL_LATENCY_US", "10".to_string()));
        if wrong {
            e.push(("FAKE_NCCL_WRONG", "1".to_string()));
        }
        e
    };
    let start = |wrong: bool| {
        let e = env(wrong);
        let e: Vec<(&str, &str)> = e.iter().map(|(k, v)| (*k, v.as_str())).collect();
        Daemon::start_env(None, &["--cluster-address", "127.0.0.1"], &e)
    };
    let args = common::words("--json --gpus-per-node 1 --network tcp10 --min-bytes 64K --max-bytes 1M --iters 5 --stage-deadline 20");

    let (a, b) = (start(false), start(false));
    let o = cluster(&[&a, &b], &args);
    let r = json(&o);
    assert_eq!(r["backend"], "real", "{}", stdout(&o));
    assert_eq!(r["transport"], "NET/Socket");
    assert!(r["cluster_busbw_gbps"].as_f64().unwrap() > 0.0);
    // Both nodes answered and joined, at the modelled bandwidth: 1 MiB takes 10 + 1048576 / 5000
    // us, 4.77 GB/s of busbw, so the cluster passes and no node is slow.
    assert_eq!(code(&o), 0, "{}\n{}", stdout(&o), stderr(&o));
    let busbw = r["cluster_busbw_gbps"].as_f64().unwrap();
    assert!((busbw - 4.77).abs() < 0.05, "{busbw}: {}", stdout(&o));
    let codes: Vec<&str> = r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["code"].as_str().unwrap())
        .filter(|c| *c != "cluster_busbw_ok")
        .collect();
    assert!(codes.is_empty(), "{codes:?}: {}", stdout(&o));
    for n in r["nodes"].as_array().unwrap() {
        assert_eq!(n["state"], "ok", "{n}: {}", stdout(&o));
        assert_eq!(n["backend_label"], "real");
        assert_eq!(n["transport"], "NET/Socket");
    }

    // Node b's all-reduce results are wrong: it, not a, is named.
    let (c, d) = (start(false), start(true));
    let o = cluster(&[&c, &d], &args);
    assert_eq!(code(&o), 2, "{}\n{}", stdout(&o), stderr(&o));
    let r = json(&o);
    let node = |addr: &str| {
        r["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["node"] == addr)
            .cloned()
            .unwrap()
    };
    let bad = node(&d.addr());
    assert!(
        bad["error"]
            .as_str()
            .unwrap_or("")
            .contains("wrong elements"),
        "{bad}"
    );
    assert!(node(&c.addr())["error"].is_null(), "{}", stdout(&o));
}

#[test]
fn usage_errors_exit_64() {
    let o = common::local(&["cluster", "check", "--nodes", "/only/one.sock"]);
    assert_eq!(code(&o), 64, "{}", stderr(&o));
    let o = common::local(&common::words(
        "cluster check --nodes /a,/b --network token-ring",
    ));
    assert_eq!(code(&o), 64, "{}", stderr(&o));
    assert!(stderr(&o).contains("ndr400"), "{}", stderr(&o));
}
