//! Model specs on the command line of a simulated 2xH200 node: an MLP with its input and output
//! widths, a decoder from its Hugging Face config.json, and bad specs as usage errors.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed set-up is a failed test

mod common;

use common::{code, local, stderr};

/// A 2-layer LLaMA-style config: 220,480 parameters (counted by hand in core's tests).
const SMALL_LLAMA: &str = r#"{"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
    "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 176,
    "vocab_size": 1000, "max_position_embeddings": 256, "tie_word_embeddings": false}"#;

/// `ddpcheck --sim h200x2-nvlink ARGS --json`, which must succeed: its document.
fn sim_json(args: &[&str]) -> serde_json::Value {
    let mut all = vec!["--sim", "h200x2-nvlink"];
    all.extend_from_slice(args);
    all.push("--json");
    let o = local(&all);
    assert_eq!(code(&o), 0, "{all:?}: {}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn recommend_takes_an_mlp_with_input_and_output_widths() {
    let v = sim_json(&["recommend", "--model", "mlp:784->2048x4->10"]);
    assert_eq!(v["model"], "mlp:784->2048x4->10");
    // 784·2048 + 2048, four times 2048² + 2048, 2048·10 + 10.
    assert_eq!(v["params"], 18_413_578);
    assert_eq!(v["throughput_unit"], "samples/s");
    assert!(!v["rows"].as_array().unwrap().is_empty());
}

#[test]
fn recommend_and_bench_ddp_take_a_decoder_from_its_config() {
    let d = tempfile::tempdir().unwrap();
    let llama = d.path().join("config.json");
    std::fs::write(&llama, SMALL_LLAMA).unwrap();
    let llama = llama.to_str().unwrap();
    let v = sim_json(&["recommend", "--model-config", llama]);
    assert_eq!(
        (v["model"].as_str(), v["params"].as_u64()),
        (Some("llama-2x64"), Some(220_480))
    );
    assert_eq!(v["throughput_unit"], "tokens/s");
    // GPT-2's own config is the preset, by name and count.
    let gpt2 = d.path().join("gpt2.json");
    let text = r#"{"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12,
        "n_positions": 1024, "vocab_size": 50257}"#;
    std::fs::write(&gpt2, text).unwrap();
    let v = sim_json(&["recommend", "--model-config", gpt2.to_str().unwrap()]);
    assert_eq!(
        (v["model"].as_str(), v["params"].as_u64()),
        (Some("gpt2-124m"), Some(124_439_808))
    );
    // bench ddp runs it beside an in/out MLP sweep.
    let v = sim_json(&[
        "bench",
        "ddp",
        "--model-config",
        llama,
        "--sweep",
        "mlp:784->512,1024x2->10",
        "--variants",
        "base",
        "--gpus",
        "2",
    ]);
    let models: Vec<(String, u64)> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["world_size"] == 2)
        .map(|r| {
            (
                r["model"].as_str().unwrap().into(),
                r["params"].as_u64().unwrap(),
            )
        })
        .collect();
    let mlp = |w: u64| 784 * w + w + 2 * (w * w + w) + 10 * w + 10;
    assert_eq!(
        models,
        vec![
            ("llama-2x64".into(), 220_480),
            ("mlp:784->512x2->10".into(), mlp(512)),
            ("mlp:784->1024x2->10".into(), mlp(1024)),
        ]
    );
}

#[test]
fn bad_specs_and_configs_are_usage_errors_that_say_why() {
    let d = tempfile::tempdir().unwrap();
    let qwen = d.path().join("qwen.json");
    std::fs::write(&qwen, r#"{"model_type": "qwen2", "num_hidden_layers": 2}"#).unwrap();
    let missing = d.path().join("missing.json");
    for (args, says) in [
        (
            vec!["recommend", "--model", "mlp:784->2048->10"],
            "mlp:IN->WIDTHxDEPTH->OUT",
        ),
        (
            vec!["recommend", "--model", "decoder:2,64,4,256,1000,kv=3"],
            "must divide",
        ),
        (
            vec!["recommend", "--model-config", qwen.to_str().unwrap()],
            "model_type \"qwen2\"",
        ),
        (
            vec!["recommend", "--model-config", missing.to_str().unwrap()],
            "missing.json",
        ),
        (
            vec!["bench", "ddp", "--model-config", qwen.to_str().unwrap()],
            "qwen2",
        ),
        (vec!["bench", "ddp", "--sweep", "mlp:784->512"], "--sweep"),
    ] {
        let mut all = vec!["--sim", "h200x2-nvlink"];
        all.extend_from_slice(&args);
        let o = local(&all);
        assert_eq!(code(&o), 64, "{args:?}: {}", stderr(&o));
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "one clear line: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}
