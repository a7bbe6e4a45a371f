//! The simulated nodes of the field's cases (`--sim h100pcie-nvbridge`, `a10gx8-vm`,
//! `h100pcie-x2`, `l40s-gen4`, `hgx-h100-slice2`) through `check`, `explain` and `recommend`:
//! each is judged by the links it shows (12 bridged NVLinks by design, a PCIe pair as a PCIe
//! pair, a VM without P2P as a platform limit, an HGX slice on NVLink).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed set-up is a failed test

mod common;

use common::{code, explain_causes, local, stderr, stdout};
use serde_json::Value;

/// `ddpcheck --sim PROFILE ARGS --json`: the exit code and the JSON.
fn run(profile: &str, args: &[&str]) -> (i32, Value) {
    let mut all = vec!["--sim", profile];
    all.extend_from_slice(args);
    all.push("--json");
    let o = local(&all);
    let v: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{all:?}: not JSON ({e}): {} {}", stdout(&o), stderr(&o)));
    (code(&o), v)
}

fn check(profile: &str) -> (i32, Value) {
    run(profile, &["check"])
}

fn explain(profile: &str) -> (i32, Value) {
    run(profile, &["explain"])
}

fn recommend(profile: &str) -> (i32, Value) {
    run(profile, &["recommend", "--model", "gpt2-124m"])
}

fn finding_codes(v: &Value) -> Vec<(String, String)> {
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["code"].as_str().unwrap().to_string(),
                f["severity"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// The largest all-reduce busbw of a check's sweep.
fn peak(v: &Value) -> f64 {
    v["all_reduce"]["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| f(&s["out_of_place"]["busbw_gbps"]))
        .fold(0.0, f64::max)
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// The bridged H100 PCIe pair shows NV12 and 12 active links on each GPU: NVLink by design,
/// never "6 of 18 down"; its path's capacity is 12 NVLink 4 links. Its all-reduce is the
/// published 116 GB/s of NVIDIA/nccl#1161, which the NV12 row (A100 SXM's ~230 GB/s) reads as
/// half of expected: a warning naming no NVLink cause, the one judgement of these profiles that
/// rests on a reference row rather than on the links (docs/explain.md, "Simulated field cases").
#[test]
fn h100_pcie_bridged_pair_is_nvlink_with_twelve_links_by_design() {
    let (rc, v) = check("h100pcie-nvbridge");
    assert_eq!(v["topology"]["links"][0][1], "NV12");
    for g in v["gpus"].as_array().unwrap() {
        assert_eq!(g["name"], "NVIDIA H100 PCIe");
        assert_eq!(g["health"]["nvlinks_active"], 12);
    }
    let codes = finding_codes(&v);
    assert!(
        codes.iter().all(|(c, _)| !c.contains("nvlink")),
        "{codes:?}"
    );
    assert!(rc < 2, "never critical: {codes:?}");
    assert!((100.0..120.0).contains(&peak(&v)), "{}", peak(&v));

    let (rc, v) = explain("h100pcie-nvbridge");
    let all = explain_causes(&v);
    assert!(all.iter().all(|(k, _, _)| k != "nvlink_down"), "{all:?}");
    assert!(all.iter().all(|(_, _, s)| s != "critical"), "{all:?}");
    assert!(rc < 2);
    let pair = &v["pairs"][0];
    assert_eq!(pair["link"], "NV12");
    assert_eq!(pair["transport"], "p2p");
    assert_eq!(pair["capacity"]["path"], "NV12: 12 × NVLink 4");
    assert_eq!(f(&pair["capacity"]["gbps"]), 300.0);
    let busbw = f(&pair["busbw_gbps"]);
    assert!((110.0..120.0).contains(&busbw), "{busbw}");

    let (rc, v) = recommend("h100pcie-nvbridge");
    assert_eq!(rc, 0);
    assert_eq!(v["curve"]["ranks"], 2);
    assert!((100.0..120.0).contains(&f(&v["curve"]["busbw_gbps"])));
    assert_eq!(v["chosen"], "base", "NVLink carries gpt2-124m's gradients");
}

/// The same two cards without bridges: a PCIe pair judged as one (the host-bridge row, PCIe gen5
/// capacity, SHM staging as a platform limit), and recommend reaches for a smaller gradient
/// where the bridged pair needed none.
#[test]
fn h100_pcie_pair_without_bridges_is_judged_as_a_pcie_pair() {
    let (rc, v) = check("h100pcie-x2");
    assert_eq!(rc, 0, "{:?}", finding_codes(&v));
    assert_eq!(v["topology"]["links"][0][1], "PHB");
    assert_eq!(
        v["expected"]["class"],
        "PCIe through the host bridge, no NVLink"
    );
    assert!(finding_codes(&v).contains(&("busbw_ok".into(), "info".into())));

    let (rc, v) = explain("h100pcie-x2");
    assert_eq!(rc, 0);
    assert_eq!(
        explain_causes(&v),
        vec![(
            "shm_staging".to_string(),
            "platform_limit".to_string(),
            "info".to_string()
        )]
    );
    assert_eq!(v["pairs"][0]["capacity"]["path"], "PCIe gen5 x16");
    assert_eq!(v["pairs"][0]["transport"], "shm");

    let (rc, v) = recommend("h100pcie-x2");
    assert_eq!(rc, 0);
    let pcie = f(&v["curve"]["busbw_gbps"]);
    let (_, bridged) = recommend("h100pcie-nvbridge");
    assert!(f(&bridged["curve"]["busbw_gbps"]) > 4.0 * pcie, "{pcie}");
    assert_ne!(
        v["chosen"], "base",
        "over PCIe the gradient is made smaller"
    );
    assert_eq!(v["reaches_target"], true);
}

/// Eight A10Gs in a VM without P2P: every pair staged through host memory is a platform limit
/// (`vm_no_p2p`, info), `check` passes against the gen4 host-bridge row, and nothing is
/// critical. The node's own `virtual_machine` cause asks the provider for P2P (a warning, as
/// docs/explain.md documents for a VM where NVML reports none).
#[test]
fn a10g_vm_without_p2p_is_a_platform_limit_not_a_fault() {
    let (rc, v) = check("a10gx8-vm");
    assert_eq!(rc, 0, "{:?}", finding_codes(&v));
    assert_eq!(v["gpus"].as_array().unwrap().len(), 8);
    assert_eq!(v["topology"]["p2p"][0][1], "not_supported");
    assert_eq!(f(&v["expected"]["busbw_gbps"]), 8.0);

    let (rc, v) = explain("a10gx8-vm");
    assert!(rc < 2);
    assert_eq!(v["platform"]["hypervisor"], true);
    let pairs = v["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), 28);
    for p in pairs {
        assert_eq!(p["transport"], "shm");
        assert_eq!(p["capacity"]["path"], "PCIe gen4 x16");
        let kinds: Vec<&str> = p["causes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["kind"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["vm_no_p2p"], "{p}");
        assert_eq!(p["causes"][0]["action"], "platform_limit");
        assert_eq!(p["causes"][0]["severity"], "info");
    }
    let all = explain_causes(&v);
    assert!(all.iter().all(|(_, _, s)| s != "critical"), "{all:?}");
    assert!(all.contains(&(
        "virtual_machine".into(),
        "ask_provider".into(),
        "warning".into()
    )));

    let (rc, v) = recommend("a10gx8-vm");
    assert_eq!(rc, 0);
    assert_eq!(v["curve"]["ranks"], 8);
    let busbw = f(&v["curve"]["busbw_gbps"]);
    assert!((6.0..8.0).contains(&busbw), "{busbw}");
}

/// Four L40S on gen4 without NVLink: the gen4 host-bridge row and gen4 capacity.
#[test]
fn l40s_on_gen4_is_judged_on_its_gen4_links() {
    let (rc, v) = check("l40s-gen4");
    assert_eq!(rc, 0, "{:?}", finding_codes(&v));
    assert_eq!(f(&v["expected"]["busbw_gbps"]), 8.0);
    for g in v["gpus"].as_array().unwrap() {
        assert_eq!(g["pcie"]["gen_max"], 4);
        assert_eq!(g["name"], "NVIDIA L40S");
    }

    let (rc, v) = explain("l40s-gen4");
    assert_eq!(rc, 0);
    let pairs = v["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), 6);
    assert!(pairs
        .iter()
        .all(|p| p["capacity"]["path"] == "PCIe gen4 x16"));
    assert!(explain_causes(&v)
        .iter()
        .all(|c| c == &("shm_staging".into(), "platform_limit".into(), "info".into())));

    let (rc, v) = recommend("l40s-gen4");
    assert_eq!(rc, 0);
    assert_eq!(v["curve"]["ranks"], 4);
}

/// Two GPUs of an HGX H100 in a VM: NV18 through the NVSwitches, expected and measured at NVLink
/// bandwidth; the VM is an info cause only (its pair has P2P over NVLink), and no Fabric
/// Manager cause (the guest sees no NVSwitch).
#[test]
fn hgx_slice_expects_nvlink_bandwidth() {
    let (rc, v) = check("hgx-h100-slice2");
    assert_eq!(rc, 0, "{:?}", finding_codes(&v));
    assert_eq!(v["topology"]["links"][0][1], "NV18");
    assert_eq!(f(&v["expected"]["busbw_gbps"]), 300.0);
    assert!(peak(&v) > 250.0, "{}", peak(&v));

    let (rc, v) = explain("hgx-h100-slice2");
    assert_eq!(rc, 0);
    assert_eq!(v["platform"]["hypervisor"], true);
    let pair = &v["pairs"][0];
    assert_eq!(pair["transport"], "p2p");
    assert_eq!(pair["capacity"]["path"], "NV18: 18 × NVLink 4");
    let mut kinds: Vec<String> = explain_causes(&v).into_iter().map(|c| c.0).collect();
    kinds.sort();
    kinds.dedup();
    assert_eq!(kinds, ["numa_unknown", "virtual_machine"]);
    assert!(explain_causes(&v).iter().all(|c| c.2 == "info"));

    let (rc, v) = recommend("hgx-h100-slice2");
    assert_eq!(rc, 0);
    assert!(f(&v["curve"]["busbw_gbps"]) > 200.0);
    assert_eq!(v["chosen"], "base");
}

/// `nvlink-down` on the bridged pair leaves GPU 1 two thirds of its links (8 of 12), as on an
/// NV18 node it leaves 12 of 18: the pair shows NV8 and its all-reduce falls with the links.
/// The verdict is not asserted here: core's table judges an NV8 pair against the NVLink bridge
/// row (40 GB/s), so today `check` passes it (docs/explain.md, "Known limits").
#[test]
fn nvlink_down_narrows_the_bridged_pair_to_eight_links() {
    let (_, v) = check("h100pcie-nvbridge+nvlink-down");
    assert_eq!(v["topology"]["links"][0][1], "NV8");
    assert_eq!(v["gpus"][0]["health"]["nvlinks_active"], 12);
    assert_eq!(v["gpus"][1]["health"]["nvlinks_active"], 8);
    let (_, healthy) = check("h100pcie-nvbridge");
    let ratio = peak(&v) / peak(&healthy);
    assert!((ratio - 8.0 / 12.0).abs() < 0.02, "{ratio}");
}
