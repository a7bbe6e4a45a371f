//! `ddpcheck explain --from-artifacts` and the file flags through the real binary: the JSON
//! contract the field-case replay reads, the text, the exit codes of each verdict, and bad input
//! as one line naming the file and exit 64.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed set-up is a failed test

mod common;

use common::{code, local, repo_root, stderr, stdout};
use serde_json::Value;

fn fixture(rel: &str) -> String {
    repo_root()
        .join("artifacts/tests/fixtures")
        .join(rel)
        .display()
        .to_string()
}

fn json(args: &[&str]) -> (i32, Value) {
    let mut all = vec!["explain", "--json"];
    all.extend_from_slice(args);
    let o = local(&all);
    let v = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {} {}", stdout(&o), stderr(&o)));
    (code(&o), v)
}

#[test]
fn a_folder_gives_the_contracts_json_and_the_verdicts_exit_code() {
    let (rc, v) = json(&["--from-artifacts", &fixture("nodes/a6000x2-phb-p2p-forced")]);
    assert_eq!(rc, 1);
    assert_eq!(v["kind"], "explain_artifacts");
    assert_eq!(v["verdict"], "warning");
    assert_eq!(v["exit_code"], 1);
    let c = v["causes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["kind"] == "p2p_forced")
        .expect("p2p_forced");
    for field in ["severity", "action", "message", "fix"] {
        assert!(c[field].is_string(), "{field}: {c}");
    }
    let prov = v["provenance"].as_array().unwrap();
    assert!(prov
        .iter()
        .all(|p| p["file"].is_string() && p["format"].is_string()));
    assert!(prov.iter().any(|p| p["format"] == "nccl_log"));
    assert!(v["undecided"]
        .as_array()
        .unwrap()
        .iter()
        .any(|u| u.as_str().unwrap().starts_with("no lspci -vvv")));
    let (rc, v) = json(&[
        "--from-artifacts",
        &fixture("nodes/hgx-h100-slice-nvlinks-down"),
    ]);
    assert_eq!((rc, v["verdict"].as_str()), (2, Some("critical")));
    let (rc, v) = json(&["--from-artifacts", &fixture("nodes/h100pcie-nvbridge-x2")]);
    assert_eq!((rc, v["verdict"].as_str()), (0, Some("ok")));
}

#[test]
fn file_flags_and_the_text_say_what_was_read_and_not_judged() {
    let o = local(&[
        "explain",
        "--smi-q",
        &fixture("nodes/h100pcie-nvbridge-x2/smi-q.txt"),
        "--topo-m",
        &fixture("nodes/h100pcie-nvbridge-x2/topo-m.txt"),
    ]);
    let t = stdout(&o);
    assert_eq!(code(&o), 0, "{t}{}", stderr(&o));
    assert!(t.contains("from 2 artifact readings"), "{t}");
    assert!(t.contains("(nvidia-smi -q): 2 GPUs"), "{t}");
    assert!(t.contains("GPU0–GPU1 (NV12)"), "{t}");
    assert!(
        t.contains("no nccl-tests output: bandwidth not judged"),
        "{t}"
    );
}

/// A file named by its flag and also in the folder is read once, as its flag says.
#[test]
fn a_file_both_flagged_and_in_the_folder_is_read_once() {
    let dir = fixture("nodes/h100pcie-nvbridge-x2");
    let smi = format!("{dir}/smi-q.txt");
    let (rc, v) = json(&["--from-artifacts", &dir, "--smi-q", &smi]);
    assert_eq!(rc, 0, "{v}");
    let n = v["provenance"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["format"] == "smi_query")
        .count();
    assert_eq!(n, 1);
}

/// A figure read is always shown, judged or not: without a topo matrix the node's all-reduce
/// has no reference, yet its busbw is printed.
#[test]
fn a_figure_without_a_topology_is_shown_and_said_unjudged() {
    let o = local(&[
        "explain",
        "--nccl-tests",
        &fixture("formats/nccl_tests/h100x8-2.13.txt"),
    ]);
    let t = stdout(&o);
    assert_eq!(code(&o), 0, "{t}{}", stderr(&o));
    assert!(t.contains("all 8 GPUs: 432.0 GB/s at 256 MiB"), "{t}");
    assert!(t.contains("no topo matrix, so no pair is known"), "{t}");
    assert!(!t.contains("for one GPU"), "{t}");
}

#[test]
fn bad_input_is_one_line_naming_the_file_and_exit_64() {
    let cases = [
        vec![
            "--smi-q".to_string(),
            fixture("bad/h200-smi-q-grep-excerpt.txt"),
        ],
        vec![
            "--topo-m".to_string(),
            fixture("nodes/h100pcie-nvbridge-x2/all-reduce.txt"),
        ],
        vec!["--lspci".to_string(), fixture("bad/binary.bin")],
        vec!["--from-artifacts".to_string(), fixture("bad")],
        vec![
            "--nccl-tests".to_string(),
            fixture("bad/nccl-tests-cut.txt"),
        ],
    ];
    for args in cases {
        let mut all = vec!["explain"];
        all.extend(args.iter().map(String::as_str));
        let o = local(&all);
        let err = stderr(&o);
        assert_eq!(code(&o), 64, "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.contains(args[1].rsplit('/').next().unwrap()),
            "{args:?}: {err}"
        );
        assert!(
            stdout(&o).is_empty(),
            "{args:?}: nothing is shown as a reading"
        );
    }
    let o = local(&[
        "--sim",
        "h200x2-nvlink",
        "explain",
        "--from-artifacts",
        &fixture("nodes/h100pcie-nvbridge-x2"),
    ]);
    assert_eq!(code(&o), 64, "{}", stderr(&o));
}

/// `--expect-gpus N`: the operator's count for the machine type. A node whose `nvidia-smi -q` or
/// `topo -m` lists fewer GPUs is `gpu_missing` (critical); as many is no cause; a count read only
/// from a job's files (nccl-tests device lines) is not the node's, so it is left undecided.
#[test]
fn expect_gpus_names_a_gpu_missing_from_the_nodes_inventory() {
    let two = fixture("nodes/h100pcie-nvbridge-x2");
    let (rc, v) = json(&["--from-artifacts", &two, "--expect-gpus", "3"]);
    assert_eq!((rc, v["verdict"].as_str()), (2, Some("critical")), "{v}");
    let c = v["causes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["kind"] == "gpu_missing")
        .unwrap_or_else(|| panic!("no gpu_missing: {v}"));
    assert_eq!(
        (c["severity"].as_str(), c["action"].as_str()),
        (Some("critical"), Some("drain"))
    );
    let m = c["message"].as_str().unwrap();
    assert!(m.contains("2 GPUs") && m.contains('3'), "{m}");
    let (rc, v) = json(&["--from-artifacts", &two, "--expect-gpus", "2"]);
    assert_eq!((rc, v["verdict"].as_str()), (0, Some("ok")), "{v}");
    let o = local(&["explain", "--expect-gpus", "8"]);
    assert_eq!(code(&o), 64, "{}", stderr(&o));
    assert!(stderr(&o).contains("--expect-gpus"), "{}", stderr(&o));
}
