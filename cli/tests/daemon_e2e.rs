//! End to end: the real `ddpcheckd` on a temporary socket with simulated nodes, driven through the
//! real `ddpcheck` binary, for every exit code; single flight; JSON against the documented schema.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed set-up is a failed test

mod common;

use common::{code, local, stderr, stdout, Daemon};

fn json(o: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", stdout(o)))
}

fn schema() -> jsonschema::Validator {
    let text = std::fs::read_to_string(common::repo_root().join("docs/report.schema.json"))
        .expect("schema file");
    let v: serde_json::Value = serde_json::from_str(&text).expect("schema is JSON");
    jsonschema::validator_for(&v).expect("schema compiles")
}

fn assert_valid(v: &serde_json::Value) {
    let s = schema();
    let errors: Vec<String> = s
        .iter_errors(v)
        .map(|e| format!("{} at {}", e, e.instance_path))
        .collect();
    assert!(
        errors.is_empty(),
        "report does not match docs/report.schema.json: {errors:#?}"
    );
}

#[test]
fn healthy_node_is_ok_through_the_daemon() {
    let d = Daemon::start(Some("h200x2-nvlink"));
    let o = d.cli(&["check", "--json"]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    let v = json(&o);
    assert_eq!(v["verdict"], "OK");
    assert_eq!(v["backend"], "sim");
    assert_valid(&v);
    // Text output labels the simulation.
    let t = d.cli(&["check"]);
    assert!(stdout(&t).contains("SIMULATED NODE"), "{}", stdout(&t));
    d.stop();
}

#[test]
fn degraded_pcie_warns_naming_the_gpu_and_its_link() {
    let d = Daemon::start(Some("h200x2-nvlink+degraded-pcie"));
    let o = d.cli(&["check", "--json"]);
    assert_eq!(code(&o), 1, "{}{}", stdout(&o), stderr(&o));
    let v = json(&o);
    assert_valid(&v);
    let f = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["code"] == "pcie_downtrained")
        .expect("pcie finding");
    let uuid = f["subject"]["uuid"].as_str().unwrap();
    assert!(uuid.starts_with("GPU-"), "{uuid}");
    assert!(f["message"].as_str().unwrap().contains(uuid));
    assert!(f["message"].as_str().unwrap().contains("x16"), "{f}");
}

#[test]
fn critical_busy_timeout_and_unknown_exit_codes() {
    for (spec, want, verdict) in [
        ("a6000x4-phb+ecc", 2, "CRITICAL"),
        ("t4x2-pcie+wrong-result", 2, "CRITICAL"),
        ("h200x2-nvlink+busy", 4, "BUSY"),
    ] {
        let d = Daemon::start(Some(spec));
        let o = d.cli(&["check", "--json"]);
        assert_eq!(code(&o), want, "{spec}: {}{}", stdout(&o), stderr(&o));
        let v = json(&o);
        assert_eq!(v["verdict"], verdict, "{spec}");
        assert_valid(&v);
    }
    // Benchmarks on a busy node do not start: another job's kernels would be in the timings.
    let d = Daemon::start(Some("h200x2-nvlink+busy"));
    for args in [
        &["bench", "ddp", "--sweep", "mlp:1024", "--variants", "base"][..],
        &["bench", "collectives", "-b", "1M", "-e", "4M"][..],
    ] {
        let o = d.cli(args);
        assert_eq!(code(&o), 4, "{args:?}: {}{}", stdout(&o), stderr(&o));
        assert!(
            stderr(&o).contains("in use by other processes"),
            "{}",
            stderr(&o)
        );
    }
    let d = Daemon::start(Some("h200x2-nvlink+hang"));
    let o = d.cli(&["check", "--json", "--deadline", "1"]);
    assert_eq!(code(&o), 5, "{}{}", stdout(&o), stderr(&o));
    assert_eq!(json(&o)["verdict"], "TIMEOUT");
    // The real backend on a machine without an NVIDIA driver: UNKNOWN with one clear line.
    let d = Daemon::start(None);
    let o = d.cli(&["check"]);
    assert_eq!(code(&o), 3, "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("UNKNOWN"), "{}", stdout(&o));
}

#[test]
fn usage_errors_exit_64_with_one_clear_line() {
    let o = local(&["check", "--sim", "nosuch-profile"]);
    assert_eq!(code(&o), 64);
    let e = stderr(&o);
    assert!(
        e.contains("a6000x4-phb") && e.contains("h200x2-nvlink"),
        "must list valid profiles: {e}"
    );
    let o = local(&["check", "--sim", "h200x2-nvlink+bogus"]);
    assert_eq!(code(&o), 64);
    assert!(
        stderr(&o).contains("degraded-pcie"),
        "must list valid faults: {}",
        stderr(&o)
    );
    let o = local(&["check", "--no-such-flag"]);
    assert_eq!(code(&o), 64);
    let o = local(&common::words(
        "bench collectives --sim h200x2-nvlink --min-bytes lots",
    ));
    assert_eq!(code(&o), 64);
}

#[test]
fn two_concurrent_preflights_give_one_run_and_one_busy() {
    let d = Daemon::start(Some("h200x2-nvlink+hang"));
    let addr = d.addr();
    let first = std::thread::spawn(move || {
        std::process::Command::new(common::bin("ddpcheck"))
            .args(["--daemon", &addr, "check", "--deadline", "3"])
            .output()
            .unwrap()
    });
    // Wait until the first run holds the node (its history row exists), then try a second.
    std::thread::sleep(std::time::Duration::from_millis(800));
    let second = d.cli(&["check"]);
    let first = first.join().unwrap();
    assert_eq!(
        code(&second),
        4,
        "second: {}{}",
        stdout(&second),
        stderr(&second)
    );
    assert!(stderr(&second).contains("BUSY"), "{}", stderr(&second));
    assert_eq!(
        code(&first),
        5,
        "first ran to its deadline: {}",
        stdout(&first)
    );
    let m = d.scrape();
    assert!(
        m.contains("ddpcheck_work_rejected_total{call=\"preflight\",backend=\"sim\"} 1"),
        "{m}"
    );
}

#[test]
fn topo_prints_nv18_and_bench_has_nccl_tests_footer() {
    let o = local(&["--sim", "h200x2-nvlink", "topo"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let t = stdout(&o);
    assert!(t.contains("NV18"), "{t}");
    assert!(t.contains("SIMULATED"), "{t}");
    let d = Daemon::start(Some("a6000x4-phb"));
    let o = d.cli(&["bench", "collectives", "--env-ab", "NCCL_P2P_LEVEL=SYS"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let t = stdout(&o);
    assert!(t.contains("# Avg bus bandwidth"), "{t}");
    assert!(t.contains("NCCL_P2P_LEVEL=SYS"), "{t}");
    let o = d.cli(&["bench", "collectives", "--json"]);
    assert_valid(&json(&o));
    let o = d.cli(&["topo", "--json"]);
    assert_valid(&json(&o));
    // A DDP report, its 4-GPU row with the all-reduce probe its run timed.
    let o = d.cli(&common::words(
        "bench ddp --model mlp:256,2 --variants base --gpus 1,4 --json",
    ));
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v = json(&o);
    assert_valid(&v);
    let four = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["world_size"] == 4)
        .unwrap();
    assert_eq!(four["all_reduce_probe"]["ranks"], 4, "{four}");
}

#[test]
fn topo_text_names_every_gpu_and_every_sweep_has_its_footer() {
    for p in [
        "a6000x4-phb",
        "t4x2-pcie",
        "h200x2-nvlink",
        "h200x8-nvswitch",
    ] {
        let v = json(&local(&["--sim", p, "topo", "--json"]));
        let text = stdout(&local(&["--sim", p, "topo"]));
        let gpus = v["topology"]["gpus"].as_array().unwrap();
        assert!(gpus.len() >= 2, "{p}: {v}");
        for g in gpus {
            let uuid = g["uuid"].as_str().unwrap();
            assert!(text.contains(uuid), "{p}: {uuid} missing from\n{text}");
        }
    }
    let o = local(&["--sim", "t4x2-pcie", "bench", "collectives", "--ops", "all"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let t = stdout(&o);
    let tables = t.matches(" ranks\n").count();
    assert!(tables >= 5, "{t}");
    assert_eq!(t.matches("# Avg bus bandwidth").count(), tables, "{t}");
    assert_eq!(
        t.matches("# Out of bounds values : 0 OK").count(),
        tables,
        "{t}"
    );
}

#[test]
fn sigterm_stops_the_daemon_cleanly() {
    let d = Daemon::start(Some("t4x2-pcie"));
    let socket = d.socket.clone();
    let st = d.stop();
    assert!(st.success(), "{st:?}");
    assert!(!socket.exists(), "socket removed on shutdown");
}

fn preflight_runs(d: &Daemon) -> u64 {
    d.scrape()
        .lines()
        .filter(|l| l.starts_with("ddpcheck_preflight_runs_total{"))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<u64>().ok()))
        .sum()
}

#[test]
fn prolog_reuses_a_fresh_verdict_only_for_the_same_gpus() {
    let d = Daemon::start(Some("h200x2-nvlink"));
    assert_eq!(code(&d.cli(&["check"])), 0);
    assert_eq!(preflight_runs(&d), 1);
    // Fresh and for every GPU: reused, no new run.
    let o = d.cli(&["check", "--prolog", "--max-age", "600", "--gpus", ""]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).starts_with("ddpcheck: OK"), "{}", stdout(&o));
    assert_eq!(preflight_runs(&d), 1, "a fresh verdict must be reused");
    // The job has only GPU 0: the cached verdict covered other GPUs too, so it runs again.
    let o = d.cli(&["check", "--prolog", "--max-age", "600", "--gpus", "0"]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert_eq!(preflight_runs(&d), 2);
    // Too old: runs again.
    let o = d.cli(&["check", "--prolog", "--max-age", "0", "--gpus", ""]);
    assert_eq!(code(&o), 0);
    assert_eq!(preflight_runs(&d), 3);
    // No daemon at all: the prolog still answers with one `ddpcheck:` line and drains (exit 1).
    let socket = d.socket.clone();
    d.stop();
    let o = std::process::Command::new(common::bin("ddpcheck"))
        .arg("--daemon")
        .arg(&socket)
        .args(["check", "--prolog", "--max-age", "600"])
        .env_remove("DDPCHECK_SIM")
        .output()
        .unwrap();
    assert_eq!(code(&o), 1, "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).starts_with("ddpcheck: UNKNOWN:"),
        "{}",
        stdout(&o)
    );
}

/// A job given one GPU of the node (as Slurm does): healthy with no collective to run, and a
/// hang injected into that collective is refused rather than passed as tested.
#[test]
fn a_one_gpu_job_is_checked_without_a_collective() {
    let d = Daemon::start(Some("h200x2-nvlink"));
    let o = d.cli(&["check", "--gpus", "0", "--json"]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    let v = json(&o);
    assert_valid(&v);
    assert_eq!(v["verdict"], "OK");
    let steps = v["steps"].as_array().expect("steps");
    let all_reduce = steps
        .iter()
        .find(|s| s["name"] == "all_reduce")
        .expect("all_reduce step");
    assert_eq!(all_reduce["status"], "skipped", "{all_reduce}");
    let o = d.cli(&["check", "--gpus", "0", "--inject-hang", "--deadline", "5"]);
    assert_eq!(code(&o), 64, "{}{}", stdout(&o), stderr(&o));
    assert!(
        stderr(&o).contains("cannot be tested on one GPU"),
        "{}",
        stderr(&o)
    );
    d.stop();
}

/// `ddpcheck history` lists the daemon's runs newest first with their outcome, failed ones with
/// their error; `--kind`, `--limit` and `--json` (the stored reports, valid against the schema).
#[test]
fn history_lists_the_daemons_runs_newest_first() {
    let d = Daemon::start(Some("h200x2-nvlink+degraded-pcie"));
    assert_eq!(code(&d.cli(&["check"])), 1);
    assert_eq!(
        code(&d.cli(&["bench", "collectives", "-b", "1M", "-e", "64M"])),
        0
    );
    let o = d.cli(&common::words(
        "bench ddp --sweep mlp:1024 --variants base --steps 5",
    ));
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(
        code(&d.cli(&["bench", "ddp", "--gpus", "1,5", "--sweep", "mlp:1024"])),
        64
    );

    // Wide enough that the table's cells stay whole (tests/fits_terminal.rs holds tables to 100).
    let o = d.cli(&["history", "--width", "250"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("SIMULATED NODE"), "{text}");
    let kinds: Vec<&str> = text
        .lines()
        .filter_map(|l| {
            ["preflight", "bench_collectives", "bench_ddp"]
                .into_iter()
                .find(|k| l.split_whitespace().any(|w| w == *k))
        })
        .collect();
    assert_eq!(
        kinds,
        ["bench_ddp", "bench_ddp", "bench_collectives", "preflight"],
        "{text}"
    );
    assert!(
        text.contains("outside 1..=2"),
        "the failed run's error: {text}"
    );
    assert!(text.contains("PCIe link runs at gen4 x8"), "{text}");

    let o = d.cli(&["history", "--kind", "preflight", "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v = json(&o);
    let rows = v.as_array().expect("a list");
    assert_eq!(rows.len(), 1, "{v}");
    assert_eq!(rows[0]["verdict"], "WARNING");
    assert_eq!(rows[0]["exit_code"], 1);
    assert_eq!(rows[0]["status"], "complete");
    assert_valid(&rows[0]["report"]);

    let v = json(&d.cli(&["history", "--json", "--limit", "2"]));
    let rows = v.as_array().expect("a list");
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["status"], "failed");
    assert!(
        rows[0]["error"].as_str().unwrap().contains("outside 1..=2"),
        "{v}"
    );
    assert!(rows[0]["id"].as_i64() > rows[1]["id"].as_i64());
    assert_eq!(rows[1]["kind"], "bench_ddp");
    assert!(rows[1]["summary"].as_str().unwrap().contains("best"), "{v}");

    let o = local(&["history"]);
    assert_eq!(code(&o), 64);
    assert!(stderr(&o).contains("--daemon"), "{}", stderr(&o));
    d.stop();
}

/// `--history-max-runs N` keeps the newest N runs: a node checked before every job does not
/// fill its disk.
#[test]
fn history_keeps_the_newest_runs_it_is_told_to() {
    let d = Daemon::start_with(Some("h200x2-nvlink"), &["--history-max-runs", "3"]);
    for _ in 0..5 {
        assert_eq!(code(&d.cli(&["check"])), 0);
    }
    let v = json(&d.cli(&["history", "--json"]));
    let ids: Vec<i64> = v
        .as_array()
        .expect("a list")
        .iter()
        .map(|e| e["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, vec![5, 4, 3], "{v}");
    d.stop();
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("ddpcheck.toml");
    std::fs::write(&empty, "").unwrap();
    let o = common::local_env(
        &["config", "check", "--config", empty.to_str().unwrap()],
        &[("DDPCHECK_HISTORY_MAX_RUNS", "-2")],
    );
    assert_eq!(code(&o), 64, "{}{}", stdout(&o), stderr(&o));
    assert!(stderr(&o).contains("history_max_runs"), "{}", stderr(&o));
}
