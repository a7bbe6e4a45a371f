//! `ddpcheck diff A B` and `history --compare` end to end on reports the simulator writes: a
//! transport change under a new NCCL, a link that trained down, bad input (one line, exit 64),
//! and the daemon's own stored runs.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed set-up is a failed test

mod common;

use std::path::{Path, PathBuf};

use common::{code, local, local_env, stderr, stdout, Daemon};
use serde_json::Value;

fn json(o: &std::process::Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", stdout(o)))
}

/// `ddpcheck --sim SPEC ARGS --json` with these NCCL variables, as JSON.
fn sim_report(spec: &str, args: &[&str], env: &[(&str, &str)]) -> Value {
    let mut all = vec!["--sim", spec];
    all.extend_from_slice(args);
    all.push("--json");
    let o = local_env(&all, env);
    assert!(matches!(code(&o), 0..=2), "{}", stderr(&o));
    json(&o)
}

fn save(dir: &Path, name: &str, v: &Value) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, serde_json::to_string(v).unwrap()).unwrap();
    p
}

/// Two reports saved as `a.json` and `b.json` in `dir`.
fn save_pair(dir: &Path, a: &Value, b: &Value) -> (PathBuf, PathBuf) {
    (save(dir, "a.json", a), save(dir, "b.json", b))
}

/// `diff A B --json`, which must succeed, as JSON.
fn diff_json(a: &Path, b: &Path) -> Value {
    let o = diff(a, b, true);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    json(&o)
}

fn diff(a: &Path, b: &Path, json_out: bool) -> std::process::Output {
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    if json_out {
        local(&["diff", a, b, "--json"])
    } else {
        local(&["diff", a, b])
    }
}

/// NVIDIA/nccl#1829's shape on a simulated pair of A6000s below one PCIe switch: run B's NCCL
/// (2.23.4) chose SHM where run A's (2.21.5) used P2P, nothing else changed. The simulator
/// stages B's pair because it ran under NCCL_P2P_DISABLE=1; the variable is taken out of B's
/// record, so that what the reports differ in is NCCL's version and its transport, as in the
/// thread.
#[test]
fn a_transport_change_under_a_new_nccl_ranks_first_with_the_version_as_its_cause() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = sim_report("a6000x2-pxb", &["explain"], &[]);
    let mut b = sim_report("a6000x2-pxb", &["explain"], &[("NCCL_P2P_DISABLE", "1")]);
    a["provenance"]["nccl_version"] = "2.21.5".into();
    b["provenance"]["nccl_version"] = "2.23.4".into();
    b["provenance"]["nccl_env"] = serde_json::json!({});
    let (pa, pb) = save_pair(dir.path(), &a, &b);
    let v = diff_json(&pa, &pb);
    assert_eq!(v["kind"], "diff");
    let changes = v["changes"].as_array().unwrap();
    assert_eq!(changes[0]["kind"], "transport", "{v:#}");
    assert_eq!(changes[0]["rank"], 1);
    assert_eq!(changes[0]["cause"], "NCCL 2.21.5 → 2.23.4");
    assert!(
        changes[0]["explains_ratio"].as_f64().unwrap() < 0.7,
        "{v:#}"
    );
    assert_eq!(changes[1]["kind"], "nccl_version");
    assert_eq!(changes[1]["caused"], serde_json::json!(["transport"]));
    assert!(v["measured_ratio"].as_f64().unwrap() < 0.6, "{v:#}");

    let text = stdout(&diff(&pa, &pb, false));
    assert!(
        text.contains(" 1. transport on GPU0–GPU1: P2P (P2P/CUMEM) → SHM"),
        "{text}"
    );
    assert!(text.contains("because of NCCL 2.21.5 → 2.23.4"), "{text}");
    assert!(text.contains("SIMULATED"), "{text}");
}

/// GPU 1 of a simulated 4xA6000 trained down (the `degraded-pcie` fault): the link change is
/// named, with its capacity arithmetic.
#[test]
fn a_link_that_trained_down_is_named_with_its_arithmetic() {
    let dir = tempfile::tempdir().unwrap();
    let a = sim_report("a6000x4-phb", &["explain"], &[]);
    let b = sim_report("a6000x4-phb+degraded-pcie", &["explain"], &[]);
    let (pa, pb) = save_pair(dir.path(), &a, &b);
    let v = diff_json(&pa, &pb);
    let link = change(&v, "pcie_link");
    assert_eq!(link["where"], serde_json::json!(["GPU1"]));
    assert_eq!(link["before"], "PCIe gen3 x16");
    assert!(link["explains_ratio"].as_f64().unwrap() < 1.0, "{v:#}");
    assert!(
        link["arithmetic"].as_str().unwrap().contains("ceiling"),
        "{v:#}"
    );
}

fn change<'a>(v: &'a Value, kind: &str) -> &'a Value {
    v["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} change: {v:#}"))
}

/// Each kind of saved report is read: a check's links, a collectives run's variables, a DDP
/// run's step; a check and an explain of the same GPUs compare.
#[test]
fn each_kind_of_saved_report_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let p2p_off = [("NCCL_P2P_DISABLE", "1")];
    let run = |name: &str, spec: &str, args: &[&str], env: &[(&str, &str)]| {
        save(dir.path(), name, &sim_report(spec, args, env))
    };
    let compare = |a: &Path, b: &Path| {
        let o = diff(a, b, true);
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        json(&o)
    };

    let a = run("c1.json", "a6000x4-phb", &["check"], &[]);
    let b = run("c2.json", "a6000x4-phb+degraded-pcie", &["check"], &[]);
    let v = compare(&a, &b);
    let link = change(&v, "pcie_link");
    assert_eq!(link["where"], serde_json::json!(["GPU1"]));
    assert!(
        link["message"].as_str().unwrap().contains("trained down"),
        "{v:#}"
    );

    let coll = ["bench", "collectives", "-b", "1M", "-e", "64M"];
    let a = run("b1.json", "a6000x2-pxb", &coll, &[]);
    let b = run("b2.json", "a6000x2-pxb", &coll, &p2p_off);
    let v = compare(&a, &b);
    assert_eq!(change(&v, "nccl_env")["after"], "NCCL_P2P_DISABLE=1");
    assert!(v["measured_ratio"].as_f64().unwrap() < 0.6, "{v:#}");
    assert!(
        v["explained_ratio"].is_null(),
        "no topology in the reports: {v:#}"
    );

    let ddp = common::words("bench ddp --sweep mlp:1024 --variants base --steps 5");
    let a = run("d1.json", "a6000x2-pxb", &ddp, &[]);
    let b = run("d2.json", "a6000x2-pxb", &ddp, &p2p_off);
    let v = compare(&a, &b);
    assert_eq!(v["a"]["figure"]["measure"], "step_time", "{v:#}");
    assert!(v["measured_ratio"].as_f64().unwrap() < 1.0, "{v:#}");
    assert_eq!(
        change(&v, "nccl_env")["where"],
        serde_json::json!(["NCCL_P2P_DISABLE"])
    );

    let a = run("e1.json", "a6000x2-pxb", &["check"], &[]);
    let b = run("e2.json", "a6000x2-pxb", &["explain"], &[]);
    let v = compare(&a, &b);
    assert_eq!(
        (&v["a"]["kind"], &v["b"]["kind"]),
        (&"preflight".into(), &"explain".into())
    );
}

fn refused(o: &std::process::Output, says: &str) {
    assert_eq!(code(o), 64, "{}", stderr(o));
    let err = stderr(o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("ddpcheck: ") && err.contains(says), "{err}");
    assert!(stdout(o).is_empty());
}

#[test]
fn bad_input_gets_one_line_and_exit_64() {
    let dir = tempfile::tempdir().unwrap();
    let pair = save(
        dir.path(),
        "pair.json",
        &sim_report("a6000x2-pxb", &["explain"], &[]),
    );
    let four = save(
        dir.path(),
        "four.json",
        &sim_report("a6000x4-phb", &["explain"], &[]),
    );
    let topo = save(
        dir.path(),
        "topo.json",
        &sim_report("a6000x2-pxb", &["topo"], &[]),
    );
    let ddp = sim_report(
        "a6000x2-pxb",
        &common::words("bench ddp --sweep mlp:1024 --variants base --steps 5"),
        &[],
    );
    let ddp = save(dir.path(), "ddp.json", &ddp);
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "all-reduce was slow on Tuesday").unwrap();

    refused(
        &diff(&dir.path().join("missing.json"), &pair, false),
        "missing.json",
    );
    refused(&diff(&pair, &text, false), "not a ddpcheck JSON report");
    refused(&diff(&topo, &pair, false), "records no run to compare");
    refused(&diff(&pair, &four, true), "run A ran 2 GPUs and run B 4");
    refused(&diff(&pair, &ddp, false), "cannot be compared");
    refused(&diff(dir.path(), &pair, false), "not a known artifact");
    refused(
        &diff(Path::new("/dev/zero"), &pair, false),
        "the limit for a saved report",
    );
}

/// Two folders of artifacts, read by the artifact reader: a pair forced to P2P across the host
/// bridge against one whose NCCL log shows SHM under NCCL_P2P_DISABLE=1. The transport change is
/// named first, with the variable as its cause.
#[test]
fn artifact_folders_are_compared_through_the_artifact_reader() {
    let nodes = Path::new(env!("CARGO_MANIFEST_DIR")).join("../artifacts/tests/fixtures/nodes");
    let o = diff(
        &nodes.join("a6000x2-phb-p2p-forced"),
        &nodes.join("pcie-pair-log-only-shm"),
        true,
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v = json(&o);
    let first = &v["changes"][0];
    assert_eq!(first["kind"], "transport", "{v:#}");
    assert!(
        first["cause"]
            .as_str()
            .unwrap_or("")
            .contains("NCCL_P2P_DISABLE"),
        "{first:#}"
    );
}

/// The algorithm and protocol NCCL's log shows for the largest all-reduce
/// (`NCCL_DEBUG_SUBSYS=TUNING`: `AllReduce: N Bytes -> Algo RING proto SIMPLE …`) are read from
/// each folder, and a change between the runs is named (`algo_proto`).
#[test]
fn the_algorithm_a_log_shows_is_compared_between_artifact_folders() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../artifacts/tests/fixtures/nodes/a6000x2-phb-p2p-forced");
    let dir = tempfile::tempdir().unwrap();
    let folder = |name: &str, algo: &str| {
        let d = dir.path().join(name);
        std::fs::create_dir(&d).unwrap();
        for f in ["smi-q.txt", "topo-m.txt"] {
            std::fs::copy(src.join(f), d.join(f)).unwrap();
        }
        let run = std::fs::read_to_string(src.join("all-reduce.txt")).unwrap();
        let tuning = format!(
            "ws:31337:31337 [0] NCCL INFO AllReduce: 1024 Bytes -> Algo TREE proto LL channel{{Lo..Hi}}={{0..0}}\n\
             ws:31337:31337 [0] NCCL INFO AllReduce: 268435456 Bytes -> Algo {algo} proto SIMPLE channel{{Lo..Hi}}={{0..1}}\n"
        );
        let run = run.replacen(
            "ws:31337:31337 [0] NCCL INFO Connected all rings\n",
            &format!("ws:31337:31337 [0] NCCL INFO Connected all rings\n{tuning}"),
            1,
        );
        std::fs::write(d.join("all-reduce.txt"), run).unwrap();
        d
    };
    let (a, b) = (folder("a", "RING"), folder("b", "TREE"));
    let o = diff(&a, &b, true);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v = json(&o);
    let c = change(&v, "algo_proto");
    assert_eq!(
        (c["before"].as_str(), c["after"].as_str()),
        (Some("Ring/Simple"), Some("Tree/Simple")),
        "{c:#}"
    );
    let o = diff(&a, &a, true);
    let v = json(&o);
    assert!(
        !v["changes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["kind"] == "algo_proto"),
        "{v:#}"
    );
}

/// `history --compare`: the node's last two runs of a kind, or two ids; bad ids are refused.
#[test]
fn history_compares_the_nodes_own_runs() {
    let d = Daemon::start(Some("a6000x2-pxb"));
    for _ in 0..2 {
        assert!(matches!(code(&d.cli(&["explain"])), 0..=2));
    }
    let o = d.cli(&["history", "--compare", "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v = json(&o);
    assert_eq!(v["kind"], "diff");
    assert_eq!(v["a"]["kind"], "explain");
    assert!(
        (v["measured_ratio"].as_f64().unwrap() - 1.0).abs() < 0.05,
        "{v:#}"
    );
    assert_eq!(v["changes"], serde_json::json!([]));

    let rows = json(&d.cli(&["history", "--json"]));
    let ids: Vec<String> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].to_string())
        .collect();
    let o = d.cli(&["history", "--compare", &ids[1], &ids[0]]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).contains("nothing to explain"), "{}", stdout(&o));
    refused(
        &d.cli(&["history", "--compare", &ids[0]]),
        "takes two run ids",
    );
    refused(
        &d.cli(&["history", "--compare", "999999", &ids[0]]),
        "no stored run 999999",
    );
    refused(
        &d.cli(&["history", "--compare", "--kind", "bench_ddp"]),
        "fewer than two complete bench_ddp runs",
    );
    d.stop();
}
