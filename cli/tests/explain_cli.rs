//! `ddpcheck explain` through the real binary on simulated nodes: one fault (or NCCL setting)
//! per cause, each giving its cause, action and exit code; the JSON against the schema; and the
//! same answers through a real `ddpcheckd` (`--daemon`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed set-up is a failed test

mod common;

use common::{code, explain_causes, local_env, stderr, stdout, Daemon};
use serde_json::Value;

fn explain(sim: &str, env: &[(&str, &str)], extra: &[&str]) -> (i32, Value, String) {
    let mut args = vec!["--sim", sim, "explain", "--json"];
    args.extend_from_slice(extra);
    let o = local_env(&args, env);
    let v: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {} {}", stdout(&o), stderr(&o)));
    assert_valid(&v);
    let mut text_args = vec!["--sim", sim, "explain"];
    text_args.extend_from_slice(extra);
    let t = local_env(&text_args, env);
    assert_eq!(code(&t), code(&o), "text and JSON give one exit code");
    (code(&o), v, stdout(&t))
}

fn assert_valid(v: &Value) {
    let text = std::fs::read_to_string(common::repo_root().join("docs/report.schema.json"))
        .expect("schema file");
    let schema: Value = serde_json::from_str(&text).expect("schema is JSON");
    let validator = jsonschema::validator_for(&schema).expect("schema compiles");
    let errors: Vec<String> = validator
        .iter_errors(v)
        .map(|e| format!("{} at {}", e, e.instance_path))
        .collect();
    assert!(
        errors.is_empty(),
        "report does not match the schema: {errors:#?}"
    );
}

fn has(v: &Value, kind: &str, action: &str, severity: &str) {
    let all = explain_causes(v);
    assert!(
        all.iter()
            .any(|(k, a, s)| k == kind && a == action && s == severity),
        "no {kind}/{action}/{severity} in {all:?}"
    );
}

#[test]
fn healthy_nvlink_pair_is_ok_with_its_transport() {
    let (rc, v, text) = explain("h200x2-nvlink", &[], &[]);
    assert_eq!(rc, 0, "{text}");
    assert_eq!(v["kind"], "explain");
    assert!(explain_causes(&v).is_empty(), "{:?}", explain_causes(&v));
    assert_eq!(v["pairs"][0]["transport"], "p2p");
    assert_eq!(v["pairs"][0]["transport_measured"], true);
    assert!(
        text.contains("GPU0–GPU1 (NV18): 299 GB/s, 100% of expected"),
        "{text}"
    );
}

#[test]
fn p2p_and_shm_disabled_chain_with_ab() {
    let env = [("NCCL_P2P_DISABLE", "1"), ("NCCL_SHM_DISABLE", "1")];
    let (rc, v, text) = explain("h200x2-nvlink", &env, &["--ab"]);
    assert_eq!(rc, 2, "{text}");
    has(&v, "p2p_disabled", "unset_env", "warning");
    has(&v, "shm_disabled", "unset_env", "warning");
    has(&v, "transport_downgraded", "unset_env", "warning");
    has(&v, "below_expected", "unset_env", "critical");
    let ab = &v["pairs"][0]["ab"];
    assert!(ab["after_gbps"].as_f64().unwrap() > 50.0 * ab["before_gbps"].as_f64().unwrap());
    assert!(
        text.contains("transport NET/Socket, the topology allows P2P because NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1 are set; fix: unset NCCL_P2P_DISABLE and NCCL_SHM_DISABLE (A/B: 3.9 → "),
        "{text}"
    );
}

#[test]
fn p2p_level_too_low_and_forced() {
    let (rc, v, _) = explain("a6000x2-pxb", &[("NCCL_P2P_LEVEL", "LOC")], &[]);
    assert_eq!(rc, 1);
    has(&v, "p2p_level_too_low", "set_env", "warning");
    has(&v, "below_expected", "set_env", "warning");
    let (rc, v, _) = explain("a6000x4-phb", &[("NCCL_P2P_LEVEL", "SYS")], &[]);
    assert_eq!(rc, 1);
    has(&v, "p2p_forced", "unset_env", "warning");
}

#[test]
fn acs_on_the_switch() {
    let (rc, v, text) = explain("a6000x2-pxb+acs", &[], &[]);
    assert_eq!(rc, 2, "{text}");
    has(&v, "acs", "disable_acs", "warning");
    assert!(text.contains("ACS redirects P2P on 0000:01:00.0"), "{text}");
    // The same switch without the fault: no cause.
    let (rc, v, _) = explain("a6000x2-pxb", &[], &[]);
    assert_eq!((rc, explain_causes(&v).len()), (0, 0));
}

#[test]
fn iommu_translated() {
    let (rc, v, _) = explain("a6000x2-pxb+iommu-translated", &[], &[]);
    assert_eq!(rc, 1);
    has(&v, "iommu_translated", "iommu_passthrough", "warning");
}

#[test]
fn virtual_machine_reports_per_gpu_causes() {
    let (rc, v, text) = explain("h200x2-nvlink+vm", &[], &["--gpus", "0"]);
    assert_eq!(rc, 0, "{text}");
    has(&v, "virtual_machine", "none", "info");
    has(&v, "numa_unknown", "none", "info");
    assert!(v["pairs"].as_array().unwrap().is_empty());
    assert_eq!(v["platform"]["gpus"][0]["on_root_bus"], true);
    assert!(text.contains("1 GPU: no pair to measure"), "{text}");
}

#[test]
fn link_state_causes() {
    let (rc, v, _) = explain("a6000x4-phb+degraded-pcie", &[], &[]);
    assert_eq!(rc, 1);
    has(&v, "pcie_downtrained", "check_link", "warning");
    let (_, v, _) = explain("a6000x4-phb+cross-numa", &[], &[]);
    has(&v, "cross_numa", "pick_gpus", "info");
    let (rc, v, _) = explain("h200x2-nvlink+mig", &[], &[]);
    assert_eq!(rc, 1);
    has(&v, "mig", "disable_mig", "warning");
    let (rc, v, _) = explain("h200x2-nvlink+nvlink-down", &[], &[]);
    assert_eq!(rc, 1);
    has(&v, "nvlink_down", "reset_gpu", "warning");
    assert_eq!(v["pairs"][0]["link"], "NV12");
}

/// A link that idles low and trains up under load is a note; one below its maximum under load
/// is the fault. Both readings are in the report.
#[test]
fn link_read_at_rest_and_under_load() {
    let (rc, v, text) = explain("a6000x4-phb+idle-downclock", &[], &[]);
    has(&v, "pcie_idle_downclock", "none", "info");
    assert!(
        !explain_causes(&v).iter().any(|c| c.0 == "pcie_downtrained"),
        "{:?}",
        explain_causes(&v)
    );
    let g = &v["platform"]["gpus"][0];
    assert_eq!(g["link"]["current_gts"], 2.5);
    assert_eq!(g["link_under_load"]["current_gts"], 8.0);
    assert!(text.contains("under load it ran at gen3 x16"), "{text}");
    let (rc_healthy, _, _) = explain("a6000x4-phb", &[], &[]);
    assert_eq!(rc, rc_healthy, "a note does not change the exit code");

    let (rc, v, _) = explain("a6000x4-phb+degraded-pcie+idle-downclock", &[], &[]);
    assert_eq!(rc, 1);
    has(&v, "pcie_downtrained", "check_link", "warning");
    let g = &v["platform"]["gpus"][1];
    assert_eq!(g["link_under_load"]["current_width"], 8);
    let down = v["causes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["kind"] == "pcie_downtrained")
        .unwrap();
    assert!(
        down["message"].as_str().unwrap().contains("under load"),
        "{down}"
    );
}

#[test]
fn fabric_manager_down_fails_the_node() {
    let (rc, v, text) = explain("h200x8-nvswitch+no-fabric-manager", &[], &["--gpus", "0,1"]);
    assert_eq!(rc, 2, "{text}");
    has(
        &v,
        "fabric_manager_down",
        "start_fabric_manager",
        "critical",
    );
    assert!(v["pairs"][0]["measure_error"]
        .as_str()
        .unwrap()
        .contains("802"));
}

#[test]
fn slow_link_without_a_known_cause_says_check_link() {
    let (rc, v, _) = explain("h200x2-nvlink+slow-link", &[], &[]);
    assert_eq!(rc, 2);
    has(&v, "below_expected", "drain", "critical");
}

#[test]
fn busy_and_usage_errors() {
    let o = local_env(&["--sim", "h200x2-nvlink+busy", "explain"], &[]);
    assert_eq!(code(&o), 4, "{}", stderr(&o));
    let o = local_env(&["--sim", "h200x2-nvlink", "explain", "--gpus", "7"], &[]);
    assert_eq!(code(&o), 64, "{}", stderr(&o));
    let o = local_env(
        &["--sim", "h200x2-nvlink", "explain", "--max-bytes", "0"],
        &[],
    );
    assert_eq!(code(&o), 64, "{}", stderr(&o));
    assert!(stderr(&o).contains("--max-bytes"), "{}", stderr(&o));
}

/// Through a daemon on a faulty simulated node, `explain` finds the causes and actions it finds
/// on the node and prints the same report. The NCCL variables are the daemon's (its service
/// environment), and `--ab` travels with the request.
#[test]
fn through_the_daemon_the_same_causes_and_report_as_on_the_node() {
    // (node, the daemon's and the local run's environment, explain's flags)
    type Case = (
        &'static str,
        &'static [(&'static str, &'static str)],
        &'static [&'static str],
    );
    let cases: [Case; 3] = [
        ("a6000x4-phb+degraded-pcie", &[], &[]),
        ("h200x2-nvlink+slow-link", &[], &[]),
        (
            "h200x2-nvlink",
            &[("NCCL_P2P_DISABLE", "1"), ("NCCL_SHM_DISABLE", "1")],
            &["--ab"],
        ),
    ];
    for (spec, env, extra) in cases {
        let (rc, local, local_text) = explain(spec, env, extra);
        assert!(
            !explain_causes(&local).is_empty(),
            "{spec}: a fault with no cause"
        );
        let d = Daemon::start_env(Some(spec), &[], env);
        let mut args = vec!["explain", "--json"];
        args.extend_from_slice(extra);
        let o = d.cli(&args);
        let v: Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("{spec}: not JSON ({e}): {} {}", stdout(&o), stderr(&o)));
        assert_valid(&v);
        assert_eq!(code(&o), rc, "{spec}: {}", stderr(&o));
        assert_eq!(explain_causes(&v), explain_causes(&local), "{spec}");
        assert_eq!(v["pairs"], local["pairs"], "{spec}");
        let mut text_args = vec!["explain"];
        text_args.extend_from_slice(extra);
        let t = d.cli(&text_args);
        assert_eq!(code(&t), rc, "{spec}: {}", stderr(&t));
        assert_eq!(stdout(&t), local_text, "{spec}");
        d.stop();
    }
}

#[test]
fn through_the_daemon_busy_and_usage_errors_keep_their_exit_codes() {
    let d = Daemon::start(Some("h200x2-nvlink+busy"));
    let o = d.cli(&["explain"]);
    assert_eq!(code(&o), 4, "{}", stderr(&o));
    d.stop();
    let d = Daemon::start(Some("h200x2-nvlink"));
    let o = d.cli(&["explain", "--gpus", "7"]);
    assert_eq!(code(&o), 64, "{}", stderr(&o));
    assert!(stderr(&o).contains("GPU \"7\""), "{}", stderr(&o));
    // 0 would read as "unset" (the default) in the request: refused before it is sent.
    let o = d.cli(&["explain", "--max-bytes", "0"]);
    assert_eq!(code(&o), 64, "{}", stderr(&o));
    d.stop();
}

/// PCIe gen3 x16, one direction after 128b/130b: 15.75 GB/s.
const GEN3_X16: f64 = 8.0 * 128.0 / 130.0 * 16.0 / 8.0;

/// The first field report's question, answered from its machine's profile: 4.3 GB/s is about a
/// quarter of PCIe gen3 x16 because SHM stages it through host memory, and forcing P2P halves it.
#[test]
fn field_report_a6000x4_phb_against_its_pcie_links() {
    let (rc, v, text) = explain("a6000x4-phb", &[], &["--ab"]);
    assert_eq!(rc, 0, "{text}");
    // Both references for every pair and for the node's all-reduce.
    for p in v["pairs"].as_array().unwrap() {
        let cap = &p["capacity"];
        assert_eq!(cap["path"], "PCIe gen3 x16");
        let busbw = p["busbw_gbps"].as_f64().unwrap();
        let f = cap["fraction"].as_f64().unwrap();
        assert!((f - busbw / GEN3_X16).abs() < 1e-9, "{f}");
        assert!(p["ratio"].as_f64().unwrap() > 0.9);
        let ab = &p["ab"];
        assert_eq!(
            ab["overrides"][0],
            serde_json::json!(["NCCL_P2P_LEVEL", "SYS"])
        );
        let x = ab["after_gbps"].as_f64().unwrap() / ab["before_gbps"].as_f64().unwrap();
        assert!((0.45..0.6).contains(&x), "forced P2P ×{x}");
    }
    has(&v, "shm_staging", "platform_limit", "info");
    let node = &v["node"];
    let f = node["capacity"]["fraction"].as_f64().unwrap();
    assert!((f - node["busbw_gbps"].as_f64().unwrap() / GEN3_X16).abs() < 1e-9);
    assert!((0.25..0.30).contains(&f), "{f}");
    assert_eq!(node["causes"][0]["kind"], "shm_staging");
    assert!(
        text.contains("ddpcheck: OK: no fault found; all 4 GPUs: 4.33 GB/s is 27% of PCIe gen3 x16, a platform limit (SHM staging through host memory)"),
        "{text}"
    );
    assert!(
        text.contains("GPU0–GPU1 (PHB): 3.9 GB/s, 98% of expected (4.0 GB/s), 25% of capacity (PCIe gen3 x16, 15.75 GB/s); transport SHM"),
        "{text}"
    );
    assert!(
        text.contains("forced P2P (NCCL_P2P_LEVEL=SYS) measured ×0.54 on 6 pairs, so NCCL's default is right here"),
        "{text}"
    );
    assert!(text.contains("capacity PCIe gen3 x16: 8 GT/s × 16 lanes × 128/130 (128b/130b) ÷ 8 = 15.75 GB/s each way"), "{text}");
}

/// The second field report's 4.05 GB/s on 2xT4: the same mechanism, a quarter of gen3 x16.
#[test]
fn field_report_t4x2_against_its_pcie_link() {
    let (rc, v, text) = explain("t4x2-pcie", &[], &["--ab"]);
    assert_eq!(rc, 0, "{text}");
    let p = &v["pairs"][0];
    let f = p["capacity"]["fraction"].as_f64().unwrap();
    assert!((f - p["busbw_gbps"].as_f64().unwrap() / GEN3_X16).abs() < 1e-9);
    assert!((0.24..0.28).contains(&f), "{f}");
    has(&v, "shm_staging", "platform_limit", "info");
    assert!(v.get("node").is_none());
    assert!(
        text.contains("no fault found; GPU0–GPU1: 4.09 GB/s is 26% of PCIe gen3 x16, a platform limit (SHM staging through host memory)"),
        "{text}"
    );
    assert!(text.contains("measured ×0.53"), "{text}");
}

/// A consumer node: the driver's reason for no P2P is a cause with its action; P2P forced over
/// PCIe where it hangs (p2p-hang) gives each pair `p2p_broken`, and `--ab` measures
/// NCCL_P2P_DISABLE=1 in runs of their own, with their own deadline: every A/B has a figure
/// although every pair's own run hung. The JSON matches the schema.
#[test]
fn consumer_p2p_causes_and_the_ab_after_a_hang() {
    let (rc, v, text) = explain("rtx5090x2-pcie", &[], &[]);
    assert_eq!(rc, 0, "{text}");
    has(&v, "p2p_not_supported", "platform_limit", "info");
    assert_eq!(
        v["topology"]["p2p_status"][0][1]["read"],
        "gpu_not_supported"
    );
    assert!(text.contains("GPU_NOT_SUPPORTED"), "{text}");

    let forced = [("NCCL_P2P_LEVEL", "SYS")];
    let (rc, v, text) = explain(
        "rtx5090x2-pcie+p2p-hang",
        &forced,
        &["--ab", "--deadline", "1"],
    );
    assert_eq!(rc, 2, "{text}");
    has(&v, "p2p_broken", "set_env", "critical");
    let pair = &v["pairs"][0];
    assert!(pair["busbw_gbps"].is_null(), "{pair}");
    assert_eq!(pair["ab"]["overrides"][0][0], "NCCL_P2P_DISABLE");
    assert!(pair["ab"]["after_gbps"].as_f64().unwrap() > 10.0, "{pair}");
    assert!(pair["ab"]["before_error"]
        .as_str()
        .unwrap()
        .contains("did not finish"));
    assert!(text.contains("try NCCL_P2P_DISABLE=1"), "{text}");
}

/// A consumer node: each GPU's host copies are read against its class's published figures, and
/// both the text and the JSON say where each number comes from (the host copies' and the
/// all-reduce reference's sources).
#[test]
fn consumer_host_copies_print_their_published_reference_and_source() {
    // Wide enough that the table's cells stay whole (tests/fits_terminal.rs holds them to 100).
    let (rc, v, text) = explain("rtx4090x4-phb", &[], &["--width", "200"]);
    assert_eq!(rc, 0, "{text}");
    let findings = v["host_copy_findings"].as_array().unwrap();
    assert_eq!(findings.len(), 4, "{findings:?}");
    for f in findings {
        let ev = f["evidence"].as_array().unwrap();
        let published: Vec<&Value> = ev
            .iter()
            .filter(|e| e["what"].as_str().unwrap().starts_with("published"))
            .collect();
        assert_eq!(published.len(), 2, "{f}");
        assert_eq!(published[0]["measured"], "23.90–26.38 GB/s", "{f}");
        assert_eq!(published[1]["measured"], "26.25–27.11 GB/s", "{f}");
        assert!(published[0]["source"]
            .as_str()
            .unwrap()
            .contains("nvbandwidth/issues/15"));
    }
    assert!(v["pairs"][0]["expected"]["source"].as_str().is_some());
    assert!(
        text.contains("published 23.9–26.4 GB/s (GeForce RTX 4090 on PCIe gen4 x16)"),
        "{text}"
    );
    assert!(
        text.contains("host copies published for GeForce RTX 4090 on PCIe gen4 x16: host-to-device 23.90–26.38 GB/s, device-to-host 26.25–27.11 GB/s"),
        "{text}"
    );
    assert!(
        text.contains("https://github.com/NVIDIA/nvbandwidth/issues/15"),
        "{text}"
    );
}
