//! Memory first, end to end on simulated nodes: a model DDP cannot hold gets the least sharding
//! that fits from `recommend`, without a launch; the simulated GPU runs out of memory where a
//! real one would; `ddpcheck memory` sets each wrapper's bytes beside torch's peaks.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed set-up is a failed test

mod common;

use common::{code, local, stderr, stdout};

const EIGHT_B: &str = "decoder:32,4096,32,2048,32000,llama";

/// `GLOBAL bench ddp --model MODEL` of plain DDP on one GPU at micro-batch 1.
fn one_gpu_base<'a>(global: &[&'a str], model: &'a str) -> Vec<&'a str> {
    let mut args = global.to_vec();
    args.extend(["bench", "ddp", "--model", model]);
    args.extend(["--variants", "base", "--gpus", "1", "--micro-batch", "1"]);
    args
}

/// `memory` of gpt2-124m on a 48 GiB GPU, beside the peaks of the report at `report`.
fn memory_beside(report: &str) -> [&str; 7] {
    [
        "memory",
        "--model",
        "gpt2-124m",
        "--gpu-memory-gib",
        "48",
        "--from",
        report,
    ]
}

fn json(args: &[&str]) -> serde_json::Value {
    let o = local(args);
    assert_eq!(code(&o), 0, "{args:?}: {}", stderr(&o));
    serde_json::from_str(&stdout(&o)).unwrap()
}

#[test]
fn an_8b_decoder_on_4x48gb_gets_fully_shard_without_a_launch() {
    let v = json(&[
        "--sim",
        "a6000x4-phb",
        "--json",
        "recommend",
        "--model",
        EIGHT_B,
    ]);
    assert_eq!(v["chosen"], "fsdp", "{}", v["summary"]);
    assert_eq!(
        v["rows"].as_array().unwrap().len(),
        0,
        "no DDP variant offered"
    );
    assert_eq!(v["memory"]["ddp_fits"], false);
    assert_eq!(v["memory"]["fit"]["row"]["wrapper"], "fsdp");
    // 8 sequences as 8 accumulation steps of 1: one sequence's activations under FSDP2's bf16
    // parameters fit beside 3 B of state per parameter, two do not (docs/recommend.md).
    assert_eq!(
        (v["micro_batch"].as_u64(), v["chosen_accum"].as_u64()),
        (Some(1), Some(8))
    );
    assert!(v["memory"]["fit"].get("checkpointing").is_none());
    assert!(v.get("own_measurements").is_none(), "nothing was launched");
    assert!(v["python"].as_str().unwrap().contains("fully_shard(model"));
    let line = format!("--sim a6000x4-phb recommend --model {EIGHT_B}");
    let text = stdout(&local(&common::words(&line)));
    assert!(text.contains("Recommendation: DDP does not fit"), "{text}");
    assert!(text.contains("Memory per GPU at micro-batch 8"), "{text}");
}

#[test]
fn the_simulated_gpu_runs_out_of_memory_where_ddp_does_not_fit() {
    let o = local(&one_gpu_base(&["--sim", "a6000x4-phb"], EIGHT_B));
    assert_ne!(code(&o), 0);
    assert!(
        stderr(&o).contains("micro-batch 1 does not fit on GPU0 (NVIDIA RTX A6000"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn memory_sets_each_wrappers_prediction_beside_the_peaks_of_a_report() {
    let dir = tempfile::tempdir().unwrap();
    let o = local(&common::words("--sim a6000x4-phb --json bench ddp --model gpt2-124m --variants base,replicate,fsdp,fsdp-noreshard --gpus 1"));
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let report = dir.path().join("r.json");
    std::fs::write(&report, &o.stdout).unwrap();
    let r = report.to_str().unwrap();
    let v = json(&[&["--json"][..], &memory_beside(r)].concat());
    let checks = v["checks"].as_array().unwrap();
    assert_eq!(checks.len(), 4);
    // The simulator's peak is ddpcheck's own prediction: no error; each run's own step read at
    // its phases gives it back.
    for c in checks {
        assert_eq!(c["error"].as_f64().unwrap(), 0.0, "{c}");
        assert_eq!(c["from_measured_bytes"], c["peak_bytes"], "{c}");
    }
    assert_eq!(checks[2]["wrapper"], "fsdp");
    let text = stdout(&local(&memory_beside(r)));
    assert!(text.contains("Against torch's peaks"), "{text}");
    // The text names each wrapper's own work and its peak.
    let text = stdout(&local(&common::words(
        "--sim a6000x4-phb bench ddp --model gpt2-124m --variants fsdp --gpus 1",
    )));
    assert!(text.contains("a step under fsdp"), "{text}");
    assert!(text.contains("fsdp's own work +5.0%"), "{text}");
    assert!(text.contains("; peak memory "), "{text}");
    let bad = local(&["memory", "--model", "gpt2-124m", "--gpu-memory-gib", "-1"]);
    assert_eq!(code(&bad), 64, "{}", stderr(&bad));
}

#[test]
fn a_6_7b_hf_llama_on_one_80gb_gpu_gets_an_answer_without_building_it() {
    // On one H100 this launch used to stop after 72 s: "importing transformers did not finish
    // within 60 s", building 6.7B parameters on the CPU. Memory first answers before any launch
    // (and the simulated node could not build it at all).
    let model = "hf:llama,hidden_size=4096,intermediate_size=11008,num_hidden_layers=32,num_attention_heads=32,num_key_value_heads=32";
    let started = std::time::Instant::now();
    let line =
        format!("--sim hgx-h100-slice2 --json recommend --gpus 1 --micro-batch 1 --model {model}");
    let v = json(&common::words(&line));
    assert!(started.elapsed().as_secs() < 10);
    assert_eq!(v["params"], 6_738_415_616u64);
    assert_eq!(v["memory"]["ddp_fits"], false);
    assert_eq!(v["chosen"], "fsdp", "{}", v["summary"]);
    assert!(v["gpus"].as_u64().unwrap() >= 2, "{}", v["summary"]);
}

/// `bench ddp --json` on the simulated H100 of `layers` layers of the 8B decoder, written to `dir`.
fn slice_report(dir: &std::path::Path, layers: u32, variants: &str) -> String {
    let o = local(&[
        "--sim",
        "hgx-h100-slice2",
        "--json",
        "bench",
        "ddp",
        "--model",
        &format!("decoder:{layers},4096,32,2048,32000,llama"),
        "--variants",
        variants,
        "--gpus",
        "1",
        "--micro-batch",
        "1",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let p = dir.join(format!("slice{layers}.json"));
    std::fs::write(&p, &o.stdout).unwrap();
    p.display().to_string()
}

fn memory_json(model: &str, from: &[String]) -> serde_json::Value {
    let mut args = vec![
        "--json",
        "memory",
        "--model",
        model,
        "--micro-batch",
        "1",
        "--gpu-memory-gib",
        "80",
    ];
    for f in from {
        args.extend(["--from", f.as_str()]);
    }
    json(&args)
}

#[test]
fn slices_of_a_model_too_big_to_launch_extrapolate_its_activations() {
    let dir = tempfile::tempdir().unwrap();
    let from: Vec<String> = [2, 4]
        .iter()
        .map(|&l| slice_report(dir.path(), l, "base"))
        .collect();
    let v = memory_json(EIGHT_B, &from);
    // The simulator's peaks are the model's own predictions, linear in the layers: the line
    // through two slices lands on the estimate for 32 layers, to the byte's rounding.
    let slices = &v["slices"][0];
    assert_eq!(
        (slices["layers"].as_u64(), &slices["wrapper"]),
        (Some(32), &"ddp".into())
    );
    let extrapolated = slices["extrapolated_bytes"].as_u64().unwrap();
    let estimated = memory_json(EIGHT_B, &[])["plan"]["model"]["activations"]["bytes"]
        .as_u64()
        .unwrap();
    assert!(
        extrapolated.abs_diff(estimated) < 64,
        "{extrapolated} {estimated}"
    );
    assert_eq!(v["plan"]["model"]["activations"]["kind"], "measured");
    assert!(
        v.get("checks").is_none(),
        "the slices are not the model's own runs"
    );
}

#[test]
fn a_run_is_checked_against_the_activations_a_slice_measured_under_its_wrapper() {
    let dir = tempfile::tempdir().unwrap();
    let two = slice_report(dir.path(), 2, "base,replicate");
    let four = slice_report(dir.path(), 4, "base,replicate");
    // The model's own runs without their phases (as older reports): the slice speaks.
    let mut r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&four).unwrap()).unwrap();
    for row in r["results"].as_array_mut().unwrap() {
        row.as_object_mut().unwrap().remove("memory_phases");
    }
    std::fs::write(&four, r.to_string()).unwrap();
    let v = memory_json("decoder:4,4096,32,2048,32000,llama", &[two, four]);
    let checks = v["checks"].as_array().unwrap();
    assert_eq!(checks.len(), 2, "the 4-layer runs are the model's own");
    // DDP's activations read from the 2-layer slice, scaled to 4 layers, give the simulator's
    // peak back; replicate's peak is the backward's end, which says nothing of activations.
    let base = &checks[0];
    assert!(
        base["from_measured_error"].as_f64().unwrap().abs() < 1e-6,
        "{base}"
    );
    assert_eq!(checks[1]["peak_at"], "backward_end");
    assert!(checks[1].get("from_measured_bytes").is_none());
}

#[test]
fn the_8b_llama_on_one_80gb_gpu_gets_fully_shard_on_two_without_a_launch() {
    // The 8.7B decoder asked about one H100: DDP needs 301 GiB; fully_shard fits from 2
    // GPUs at micro-batch 1 (8 B of state per parameter when backward ends, 66.7 GiB of the
    // 71.7 GiB usable), answered from memory alone, never by running out of it.
    let started = std::time::Instant::now();
    let line = format!("--sim hgx-h100-slice2 --json recommend --gpus 1 --model {EIGHT_B}");
    let v = json(&common::words(&line));
    assert!(started.elapsed().as_secs() < 10);
    assert_eq!(v["memory"]["ddp_fits"], false);
    assert_eq!(v["chosen"], "fsdp", "{}", v["summary"]);
    assert_eq!(v["gpus"], 2, "{}", v["summary"]);
    let at = &v["memory"]["fsdp_fits_at"]["row"];
    assert_eq!(
        (at["wrapper"].as_str(), at["fits"].as_bool()),
        (Some("fsdp"), Some(true))
    );
    assert!(v.get("own_measurements").is_none(), "nothing was launched");
}

#[test]
fn a_run_read_at_its_phases_shows_what_its_forward_kept() {
    // A report whose DDP run read one step at its phases, as the benchmark does on a GPU.
    let dir = tempfile::tempdir().unwrap();
    let path = slice_report(dir.path(), 2, "base");
    let mut report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let gib = 1u64 << 30;
    let phases = serde_json::json!({
        "wrapped": {"before_forward": 10 * gib, "after_forward": 13 * gib, "peak_forward": 14 * gib,
                    "after_backward": 11 * gib, "peak_backward": 15 * gib,
                    "after_step": 10 * gib, "peak_step": 10 * gib},
    });
    report["results"][0]["memory_phases"] = phases;
    std::fs::write(&path, report.to_string()).unwrap();
    let text = stdout(&local(&[
        "memory",
        "--model",
        "decoder:2,4096,32,2048,32000,llama",
        "--micro-batch",
        "1",
        "--gpu-memory-gib",
        "80",
        "--from",
        &path,
    ]));
    let phases_at = text.find("One step after the timed ones").expect(&text);
    let row = text[phases_at..]
        .lines()
        .find(|l| l.trim_start().starts_with("base "))
        .unwrap();
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells[1..4], ["10.00", "13.00", "3.00"], "{row}");
}
