//! `ddpcheck recommend` on a user's own model, measured for real: a factory from
//! tests/fixtures/factories.py on two CPU ranks of Debian's torch (gloo). The measure-first path
//! with repeated launches, --verify and --save-runs, then --from the saved runs offline giving
//! the same answer. CPU figures say so. Offline, a factory that declares its tokens per sample is
//! recommended per token. Skipped where /usr/bin/python3 has no torch; failing
//! instead under DDPCHECK_REQUIRE_SERVICES=1 (CI).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed set-up is a failed test

mod common;

use std::process::Command;

use common::{code, local_env, repo_root, services_must_run, stderr, stdout};

const PYTHON: &str = "/usr/bin/python3";

fn torch_here() -> bool {
    let ok = Command::new(PYTHON)
        .args(["-c", "import torch"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok || !services_must_run(),
        "DDPCHECK_REQUIRE_SERVICES=1 but {PYTHON} has no torch"
    );
    if !ok {
        eprintln!("skipping: {PYTHON} cannot import torch");
    }
    ok
}

fn json(o: &std::process::Output) -> serde_json::Value {
    serde_json::from_str(&stdout(o)).unwrap_or_else(|e| panic!("{e}: {}", stderr(o)))
}

/// `recommend --from CURVE --from REPORT --model MODEL --micro-batch MB --gpus 2`.
fn recommend_from<'a>(
    curve: &'a str,
    report: &'a str,
    model: &'a str,
    mb: &'a str,
) -> Vec<&'a str> {
    let mut args = vec!["recommend", "--from", curve, "--from", report];
    args.extend(["--model", model, "--micro-batch", mb, "--gpus", "2"]);
    args
}
#[test]
fn recommend_measures_verifies_and_replays_a_users_factory() {
    if !torch_here() {
        return;
    }
    let factory =
        std::fs::canonicalize(repo_root().join("cli/tests/fixtures/factories.py")).unwrap();
    let model = format!("py:{}:small", factory.display());
    let saved = tempfile::tempdir().unwrap();
    let dir = saved.path().display().to_string();
    let common = ["--model", &model, "--gpus", "2", "--micro-batch", "32"];
    let mut args = vec!["--json", "recommend", "--device", "cpu", "--budget", "600"];
    args.extend(common);
    args.extend(["--repeats", "2", "--verify", "--save-runs", &dir]);
    let o = local_env(&args, &[("DDPCHECK_PYTHON", PYTHON)]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let r = json(&o);
    assert_eq!(r["cpu_ranks"], true, "CPU figures are labelled");
    // The layout is the factory's own: a frozen stem of 32x256 and four trainable layers.
    assert_eq!(r["params"], 32 * 256 + 256 * 512 + 512 * 512 * 2 + 512 * 10);
    assert_eq!(r["trainable_params"], 256 * 512 + 512 * 512 * 2 + 512 * 10);
    assert_eq!(r["layout"]["tensors"], 5);
    assert_eq!(r["layout"]["trainable_tensors"], 4);
    // Its own launches: the 1-rank and the 2-rank one, each launched twice.
    let own = &r["own_measurements"];
    assert!(own["launches"].as_array().unwrap().len() >= 2, "{own}");
    let base = r["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["variant"] == "base")
        .unwrap();
    assert!(base["measured"].is_object(), "plain DDP measured: {base}");
    assert!(!r["verify"].as_array().unwrap().is_empty(), "--verify ran");
    // Offline from what it saved: the same recommendation.
    let mut args = vec!["--json", "recommend"];
    args.extend(common);
    let files = ["ddp-1gpu.json", "ddp-2gpu.json"];
    for f in &files {
        assert!(saved.path().join(f).exists(), "{f} saved");
    }
    let paths: Vec<String> = files.iter().map(|f| format!("{dir}/{f}")).collect();
    for p in &paths {
        args.extend(["--from", p]);
    }
    let o = local_env(&args, &[("DDPCHECK_PYTHON", PYTHON)]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let offline = json(&o);
    assert_eq!(offline["chosen"], r["chosen"]);
    assert_eq!(offline["trainable_params"], r["trainable_params"]);
    let speedups = |v: &serde_json::Value| -> Vec<(String, f64)> {
        v["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| {
                (
                    x["variant"].as_str().unwrap().to_string(),
                    x["prediction"]["speedup"].as_f64().unwrap(),
                )
            })
            .collect()
    };
    assert_eq!(speedups(&offline), speedups(&r));
}

#[test]
fn a_model_built_by_code_needs_a_launch_or_a_report() {
    let o = local_env(
        &common::words(
            "--sim h200x2-nvlink recommend --model torchvision:resnet50 --step-time-ms 30",
        ),
        &[],
    );
    assert_eq!(code(&o), 64, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("no launch reported its parameters"),
        "{}",
        stderr(&o)
    );
}

/// Offline, as a colleague would: the H200's own 1-GPU reports of resnet50 and the 200.8M LLaMA
/// from its config (docs/results/2026-12-01-h200-own-models/) with a committed 2xH200 curve over
/// host sockets. The gradients come from the parameters torch reported there.
#[test]
fn recommend_from_the_h200_reports_of_library_models() {
    let root = repo_root();
    let curve = root
        .join("bench/accuracy/fixtures/2026-11-30-h200x2-1817/mlprep8/mlprep8-curve-hostnet.json");
    let dir = root.join("docs/results/2026-12-01-h200-own-models");
    let llama = "hf:llama,hidden_size=1024,num_hidden_layers=12,intermediate_size=2304,num_attention_heads=16,num_key_value_heads=16";
    for (model, report, mb, params, tensors, buckets, unit) in [
        (
            "torchvision:resnet50",
            "resnet50.json",
            "64",
            25_557_032u64,
            161,
            5,
            "samples/s",
        ),
        (llama, "llama.json", "8", 200_827_904, 111, 22, "tokens/s"),
    ] {
        let (c, r) = (
            curve.display().to_string(),
            dir.join(report).display().to_string(),
        );
        let args = [&["--json"][..], &recommend_from(&c, &r, model, mb)].concat();
        let o = local_env(&args, &[]);
        assert_eq!(code(&o), 0, "{model}: {}", stderr(&o));
        let v = json(&o);
        assert_eq!(v["params"], params, "{model}");
        assert_eq!(v["layout"]["tensors"], tensors, "{model}");
        assert_eq!(v["layout"]["buckets"], buckets, "{model}");
        assert_eq!(v["throughput_unit"], unit, "{model}");
        assert_eq!(v["compute"]["kind"], "measured", "{model}");
    }
}

/// Offline from the H200's own 1-GPU report of a factory that declares `tokens_per_sample`
/// (bench/experiments/frozen_llama.py, docs/results/2026-12-02-h200-ddp-own-work/): its rates
/// and costs are per token, as its launch reported them, not per sample.
#[test]
fn a_factorys_declared_tokens_per_sample_make_recommend_speak_in_tokens() {
    let root = repo_root();
    let factory = std::fs::canonicalize(root.join("bench/experiments/frozen_llama.py")).unwrap();
    let curve = root
        .join("bench/accuracy/fixtures/2026-11-30-h200x2-1817/mlprep8/mlprep8-curve-hostnet.json");
    let report = std::fs::read_to_string(
        root.join("docs/results/2026-12-02-h200-ddp-own-work/call1/llama_frozen-r1.json"),
    )
    .unwrap()
    // The report names the factory where it ran; here it is this checkout's copy.
    .replace(
        "/work/main/bench/validate/frozen_llama.py",
        &factory.display().to_string(),
    );
    let dir = tempfile::tempdir().unwrap();
    let saved = dir.path().join("llama_frozen.json");
    std::fs::write(&saved, report).unwrap();
    let model = format!("py:{}:make", factory.display());
    let (c, r) = (curve.display().to_string(), saved.display().to_string());
    let mut args = recommend_from(&c, &r, &model, "8");
    args.extend(["--price-per-hour", "10"]);
    let o = local_env(&[&["--json"], &args[..]].concat(), &[]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v = json(&o);
    assert_eq!(v["throughput_unit"], "tokens/s", "{v}");
    // frozen_llama.py declares 1024 tokens a sample: 8 of them per micro-batch.
    assert_eq!(v["units_per_micro_batch"], 8.0 * 1024.0, "{v}");
    let o = local_env(&args, &[]);
    let text = stdout(&o);
    assert!(text.contains("$/M tokens"), "{text}");
    assert!(text.contains("per million tokens"), "{text}");
}

/// CPU ranks by default: one per core, at least two, so two on a 2-core machine (more would
/// measure the machine's oversubscription and overrun the budget); fp16 where GPUs would run
/// bf16 (gloo has no bf16 hook); and text, table and snippet that speak of CPU ranks and gloo,
/// never of GPUs or CUDA. One bounded launch pair of a small MLP.
#[test]
fn cpu_ranks_default_to_the_cores_run_fp16_and_say_what_they_are() {
    if !torch_here() {
        return;
    }
    let cores = std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get);
    let args =
        common::words("recommend --device cpu --model mlp:256,2 --micro-batch 32 --budget 150");
    let o = local_env(&args, &[("DDPCHECK_PYTHON", PYTHON)]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let t = stdout(&o);
    let heading = t
        .lines()
        .find(|l| l.starts_with("ddpcheck recommend: "))
        .unwrap_or_else(|| panic!("{t}"));
    let ranks: usize = heading
        .rsplit(", ")
        .next()
        .and_then(|x| x.strip_suffix(" CPU ranks"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{heading}"));
    assert!(
        (2..=cores.max(2)).contains(&ranks),
        "{ranks} ranks on {cores} cores"
    );
    let measured = t.lines().find(|l| l.starts_with("measured here:")).unwrap();
    assert!(
        measured.contains("fp16") && !measured.contains("bf16"),
        "{measured}"
    );
    // DDP over gloo, or one rank where DDP does not pay on this machine.
    assert!(
        t.contains("backend=\"gloo\"") || t.contains("# one CPU rank: no DDP needed"),
        "{t}"
    );
    // Every line but the CPU figures' own label.
    for l in t.lines().filter(|l| !l.starts_with("CPU RANKS (gloo)")) {
        assert!(
            !l.contains("GPU") && !l.to_lowercase().contains("cuda"),
            "{l}"
        );
    }
}
