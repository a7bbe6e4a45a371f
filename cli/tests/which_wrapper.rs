//! Which wrapper, end to end on simulated nodes: where DDP does not fit, the sharded answer's
//! step comes from FSDP2's step-time model on the all-gather and reduce-scatter curves
//! recommend sweeps on the node, and is said as times sooner and money per million tokens.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed set-up is a failed test

mod common;

use common::{code, local, stderr, stdout};

const EIGHT_B: &str = "decoder:32,4096,32,2048,32000,llama";

fn json(args: &[&str]) -> serde_json::Value {
    let o = local(args);
    assert_eq!(code(&o), 0, "{args:?}: {}", stderr(&o));
    serde_json::from_str(&stdout(&o)).unwrap()
}

fn recommend(profile: &str, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["--sim", profile, "--json", "recommend", "--model", EIGHT_B];
    args.extend_from_slice(extra);
    json(&args)
}

#[test]
fn the_sharded_answer_gets_its_step_from_the_nodes_gather_curves() {
    let v = recommend(
        "a6000x4-phb",
        &["--estimate-tflops", "150", "--price-per-hour", "4"],
    );
    assert_eq!(v["chosen"], "fsdp", "{}", v["summary"]);
    let step = &v["wrapper_step"];
    let p = &step["prediction"];
    assert_eq!(step["wrapper"], "fsdp");
    let (plain, total) = (
        p["plain_step_s"].as_f64().unwrap(),
        p["step_s"].as_f64().unwrap(),
    );
    let (gather, reduce) = (
        p["gather_s"].as_f64().unwrap(),
        p["reduce_s"].as_f64().unwrap(),
    );
    let exposed = p["exposed_s"].as_f64().unwrap();
    // The step is the compute plus what of the collectives it does not hide; fsdp gathers
    // every block twice, each bf16 byte once per gather, and reduces each fp32 gradient once.
    assert!((total - plain - exposed).abs() < 1e-9, "{p}");
    assert!(exposed > 0.0 && exposed <= gather + reduce, "{p}");
    assert!(gather > 0.0 && reduce > 0.0);
    // The curves were swept on the node, within the budget, and said so.
    assert!(step["curves_how"].as_str().unwrap().contains("swept here"));
    let sweeps = v["own_measurements"]["sweeps"].as_array().unwrap();
    assert!(
        sweeps.iter().any(|s| s["purpose"] == "FSDP2's collectives"),
        "{sweeps:?}"
    );
    // The answer in the user's terms, at the predicted step.
    let a = &v["answer"];
    assert_eq!(
        (a["variant"].as_str(), a["measured"].as_bool()),
        (Some("fsdp"), Some(false))
    );
    // Where the fit checkpoints every block, the plain step holds its recompute (a second
    // forward, a third of a forward and backward); the one-GPU reference has none.
    let checkpointed = v["memory"]["fit"]["checkpointing"] == true;
    let one_gpu_plain = if checkpointed {
        plain / (2.0 - 2.0 / 3.0)
    } else {
        plain
    };
    let sooner = 4.0 * one_gpu_plain / total;
    assert!(
        (a["times_sooner"].as_f64().unwrap() - sooner).abs() < 1e-6,
        "{a}"
    );
    assert!(a["cost_per_million"].as_f64().unwrap() > 0.0);
    assert!(v["summary"]
        .as_str()
        .unwrap()
        .contains("fsdp's step predicted"));
}

#[test]
fn a_faster_network_predicts_a_shorter_sharded_step() {
    let slow = recommend("a6000x4-phb", &["--estimate-tflops", "150"]);
    let fast = recommend(
        "h200x8-nvswitch",
        &["--gpus", "4", "--estimate-tflops", "150"],
    );
    let exposed = |v: &serde_json::Value| v["wrapper_step"]["prediction"]["exposed_s"].as_f64();
    let (s, f) = (exposed(&slow).unwrap(), exposed(&fast).unwrap());
    assert!(
        f < s / 4.0,
        "NVLink {f} s against PCIe through the host {s} s"
    );
}

#[test]
fn without_a_plain_step_the_answer_says_what_it_needs_and_sweeps_nothing() {
    let v = recommend("a6000x4-phb", &[]);
    assert!(v.get("wrapper_step").is_none());
    assert!(v.get("own_measurements").is_none(), "nothing was measured");
    let reasons = v["reasons"].to_string();
    assert!(reasons.contains("--estimate-tflops"), "{reasons}");
    let line = format!("--sim a6000x4-phb recommend --model {EIGHT_B}");
    let text = stdout(&local(&common::words(&line)));
    assert!(text.contains("Its step time is not predicted"), "{text}");
}

/// `--from` a node's collectives (all-reduce, all-gather, reduce-scatter), its topology and a
/// one-GPU launch of `fsdp-noreshard` beside DDP.
fn ddp_fits_with_wrappers_measured() -> (tempfile::TempDir, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let sim = ["--sim", "h200x2-nvlink", "--json"];
    let runs: [(&str, &[&str]); 3] = [
        (
            "c.json",
            &[
                "bench",
                "collectives",
                "--ops",
                "all_reduce,all_gather,reduce_scatter",
            ],
        ),
        ("t.json", &["topo"]),
        (
            "one.json",
            &[
                "bench",
                "ddp",
                "--model",
                "gpt2-124m",
                "--gpus",
                "1",
                "--variants",
                "base,fsdp-noreshard",
            ],
        ),
    ];
    let mut from = Vec::new();
    for (file, args) in runs {
        let o = local(&[&sim[..], args].concat());
        assert_eq!(code(&o), 0, "{args:?}: {}", stderr(&o));
        let path = dir.path().join(file);
        std::fs::write(&path, stdout(&o)).unwrap();
        from.extend(["--from".to_string(), path.display().to_string()]);
    }
    (dir, from)
}

/// `--sim h200x2-nvlink --json recommend --model gpt2-124m` with the `--from` flags given.
fn gpt2_recommend_from(from: &[String]) -> Vec<&str> {
    let mut args = vec![
        "--sim",
        "h200x2-nvlink",
        "--json",
        "recommend",
        "--model",
        "gpt2-124m",
    ];
    args.extend(from.iter().map(String::as_str));
    args
}

#[test]
fn where_ddp_fits_the_wrappers_stand_beside_it_with_their_own_work() {
    let (_dir, from) = ddp_fits_with_wrappers_measured();
    let mut args = gpt2_recommend_from(&from);
    let v = json(&args);
    let rows = v["wrapper_rows"].as_array().unwrap();
    let of = |w: &str| rows.iter().find(|r| r["wrapper"] == w).unwrap();
    // fsdp-noreshard's own work was measured at one GPU; replicate gathers as often and takes it.
    assert_eq!(of("fsdp-noreshard")["own_known"], true);
    assert!(of("replicate")["own_how"]
        .as_str()
        .unwrap()
        .starts_with("fsdp-noreshard's"));
    // Nothing measured at two GPUs, so no wrapper replaces DDP's answer.
    assert!(rows.iter().all(|r| r["measured"] == false));
    assert_ne!(v["chosen"], "replicate");
    args.retain(|a| *a != "--json");
    let text = stdout(&local(&args));
    assert!(text.contains("FSDP2's wrappers at 2 GPUs"), "{text}");
}

#[test]
fn bench_ddp_predicts_each_wrapper_from_another_that_gathers_as_often() {
    let report = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/results/2026-12-06-h100-fsdp2-variants/llama8b-4layers.json"
    );
    let text = stdout(&local(&["bench", "ddp", "--from", report]));
    let line = |w: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("llama-4x4096 {w} at 1 GPU: FSDP2's step model")))
            .map(str::to_string)
    };
    let rep = line("replicate").unwrap_or_else(|| panic!("{text}"));
    assert!(
        rep.contains("from fsdp-noreshard's") && rep.contains("measured 51.58 ms"),
        "{rep}"
    );
    assert!(line("fsdp-noreshard").unwrap().contains("from replicate's"));
    // fsdp gathers twice: without the GPU's copy curve nothing here predicts it.
    assert!(line("fsdp").is_none(), "{text}");
}

/// `bench collectives` on one GPU (nccl-tests' `-g 1`): its out-of-place all-gather is a copy
/// on the GPU, the curve that prices fsdp's second gather at world size one when only
/// fsdp-noreshard's own work was measured.
#[test]
fn a_one_gpu_all_gather_sweep_prices_the_second_gather() {
    let (dir, mut from) = ddp_fits_with_wrappers_measured();
    let o = local(&[
        "--sim",
        "h200x2-nvlink",
        "--json",
        "bench",
        "collectives",
        "--gpus",
        "0",
        "--ops",
        "all_gather",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let sweep: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let s = &sweep["runs"][0]["run"]["sweeps"][0];
    assert_eq!(
        (s["op"].as_str(), s["ranks"].as_u64()),
        (Some("all_gather"), Some(1))
    );
    // One rank moves nothing between GPUs: nccl-tests' bus factor (n-1)/n is 0.
    assert_eq!(s["samples"][0]["out_of_place"]["busbw_gbps"], 0.0);
    let fsdp_row = |from: &[String]| {
        let v = json(&gpt2_recommend_from(from));
        let rows = v["wrapper_rows"].as_array().unwrap().clone();
        rows.into_iter().find(|r| r["wrapper"] == "fsdp").unwrap()
    };
    let without = fsdp_row(&from);
    assert_eq!(without["own_known"], false, "{without}");
    let path = dir.path().join("one-gpu.json");
    std::fs::write(&path, stdout(&o)).unwrap();
    from.extend(["--from".to_string(), path.display().to_string()]);
    let with = fsdp_row(&from);
    assert_eq!(with["own_known"], true, "{with}");
    let how = with["own_how"].as_str().unwrap();
    assert!(
        how.starts_with("fsdp-noreshard's") && how.contains("on the one-GPU all-gather curve"),
        "{how}"
    );
}
