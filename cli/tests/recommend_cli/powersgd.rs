//! recommend's PowerSGD offer: priced from a measured 1-GPU compression compute, measured where the
//! link is slow.

use super::*;

/// PowerSGD's compression compute from the simulated node's 1-GPU launch (the simulator pays it
/// at world size one): priced, the slow PHB box offers a rank against bf16; without a 1-GPU
/// PowerSGD run, no rank is offered and the answer names the launch that would measure it.
#[test]
fn powersgd_is_offered_from_a_measured_1_gpu_compression_compute() {
    let d = tempfile::tempdir().unwrap();
    let with = save_a6000_gpt2(d.path(), "psgd.json", "base,bf16,powersgd4", "1,4", &[]);
    let w = recommend_json(&[&with], &[]);
    let o = &w["powersgd"];
    assert_eq!(o["against"], "bf16", "{o}");
    let row4 = o["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["rank"] == 4)
        .unwrap();
    let compute = row4["compute_s"].as_f64().unwrap();
    assert!(compute > 0.0, "{o}");
    let step = row4["step_s"].as_f64().unwrap();
    let against = o["against_step_s"].as_f64().unwrap();
    assert!(step < against, "{o}");
    assert_eq!(o["rank"], 4, "{o}");
    assert!(o["snippet"]
        .as_str()
        .unwrap()
        .contains("matrix_approximation_rank=4,"));
    assert!(o["rests_on"].as_str().unwrap().contains("powersgd4"), "{o}");
    // The text says it, with its costs.
    let text = local(&[
        "recommend",
        "--model",
        "gpt2-124m",
        "--from",
        with.to_str().unwrap(),
    ]);
    assert_eq!(code(&text), 0, "{}", stderr(&text));
    let text = stdout(&text);
    assert!(text.contains("rank 4 beats bf16:"), "{text}");
    assert!(
        text.contains("numerics: PowerSGD is a biased compressor"),
        "{text}"
    );
    // No 1-GPU PowerSGD run: unmeasured, not offered, and what to run.
    let without = save_a6000_gpt2(d.path(), "plain.json", "base,bf16", "1,4", &[]);
    let w = recommend_json(&[&without], &[]);
    assert!(w["powersgd"]["rank"].is_null(), "{}", w["powersgd"]);
    assert_eq!(
        w["powersgd"]["why_not"],
        "compression compute unmeasured: run bench ddp --gpus 1 --variants base,powersgd4"
    );
}

/// A curve given by --from that is slow at DDP's bucket size (two H200s over a host network)
/// makes the 1-GPU launch measure powersgd4 even where this node's own GPUs have NVLink: the
/// link the prediction is for is the given one.
#[test]
fn a_slow_curve_given_by_from_makes_the_one_gpu_launch_measure_powersgd() {
    let curve = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../bench/accuracy/fixtures/2026-11-30-h200x2-1817/mlprep8/mlprep8-curve-hostnet.json"
    );
    let o = recommend_h200(&[
        "--from",
        curve,
        "--model",
        "gpt2-124m",
        "--gpus",
        "2",
        "--json",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let variants = v["own_measurements"]["launches"][0]["variants"].to_string();
    assert!(variants.contains("powersgd4"), "{variants}");
    assert!(
        v["powersgd"]["rows"][2]["compute_s"].as_f64().is_some(),
        "{}",
        v["powersgd"]
    );
}

/// On a fresh node without NVLink (the simulated 4xA6000 box over the host bridge) the 1-GPU
/// launch also runs powersgd4, so the offer is priced with measured compute, and `--verify` runs
/// the offered rank beside bf16; on NVLink (2xH200) it does not.
#[test]
fn a_fresh_node_without_nvlink_measures_powersgd_and_verify_runs_the_offered_rank() {
    let one_gpu_variants = |v: &serde_json::Value| -> Vec<String> {
        v["own_measurements"]["launches"][0]["variants"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap().to_string())
            .collect()
    };
    let o = local(&common::words(
        "--sim a6000x4-phb recommend --model gpt2-124m --verify --json",
    ));
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        one_gpu_variants(&v).contains(&"powersgd4".to_string()),
        "{v}"
    );
    assert_eq!(v["powersgd"]["rank"], 4, "{}", v["powersgd"]);
    let verified = &v["verify_powersgd"];
    assert_eq!(verified["variant"], "powersgd4", "{v}");
    assert_eq!(verified["against"], "bf16");
    assert!(verified["measured_step_s"].as_f64().unwrap() > 0.0);
    assert!(verified["against_measured_step_s"].as_f64().unwrap() > 0.0);

    let o = recommend_h200(&["--model", "gpt2-124m", "--json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        !one_gpu_variants(&v).contains(&"powersgd4".to_string()),
        "{v}"
    );
    assert!(v["powersgd"]["rank"].is_null());
}
