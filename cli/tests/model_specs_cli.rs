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

/// Each `--model` and the script config's `model` it must arrive as, written out by hand: the
/// fields the benchmark script reads (gpu/src/ddp/bench_ddp/config.py), nothing re-derived.
fn models_and_their_config() -> Vec<(&'static str, serde_json::Value)> {
    use serde_json::json;
    vec![
        (
            "decoder:2,64,4,256,1000,llama,ffn=176,kv=2,untied",
            json!({"kind": "decoder", "name": "llama-2x64", "layers": 2, "width": 64, "heads": 4,
                   "seq": 256, "vocab": 1000, "arch": "llama", "ffn": 176, "kv_heads": 2,
                   "untied": true}),
        ),
        (
            "gpt2-124m",
            json!({"kind": "decoder", "name": "gpt2-124m", "layers": 12, "width": 768,
                   "heads": 12, "seq": 1024, "vocab": 50257}),
        ),
        (
            "mlp:784->2048x4->10",
            json!({"kind": "mlp", "width": 2048, "depth": 4, "input": 784, "output": 10}),
        ),
        (
            "hf:llama,hidden_size=64,seq=128",
            json!({"kind": "external", "source": {"kind": "hugging_face", "model_type": "llama",
                   "overrides": [["hidden_size", "64"]], "seq": 128}}),
        ),
        (
            "timm:resnet18",
            json!({"kind": "external", "source": {"kind": "timm", "name": "resnet18"}}),
        ),
    ]
}

/// The models of printed launch commands, as each one's `--config '...'` JSON carries them.
fn config_models(commands: &str) -> Vec<serde_json::Value> {
    let mut models = Vec::new();
    for line in commands.lines() {
        let (_, quoted) = line.split_once("--config '").expect("a --config argument");
        let config: serde_json::Value =
            serde_json::from_str(quoted.strip_suffix('\'').expect("quoted")).unwrap();
        match config["runs"].as_array() {
            Some(runs) => models.extend(runs.iter().map(|r| r["model"].clone())),
            None => models.push(config["model"].clone()),
        }
    }
    models
}

/// `--model` is read once, by the command line's parser, and the script's config carries the
/// model it read, field for field: the decoder's fields as one object, a source's fields, and a
/// factory's file by the absolute path the CLI resolved.
#[test]
fn a_model_read_at_the_edge_reaches_the_scripts_config_unchanged() {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir(d.path().join("sub")).unwrap();
    std::fs::write(d.path().join("factory.py"), "def make():\n    pass\n").unwrap();
    let spelled = format!("py:{}/sub/../factory.py:make", d.path().display());
    let resolved = std::fs::canonicalize(d.path().join("factory.py")).unwrap();
    let mut cases = models_and_their_config();
    cases.push((
        &spelled,
        serde_json::json!({"kind": "external", "source": {"kind": "python",
            "target": resolved.to_str().unwrap(), "function": "make"}}),
    ));
    let mut args = vec!["--sim", "h200x2-nvlink", "bench", "ddp"];
    for (model, _) in &cases {
        args.extend(["--model", model]);
    }
    let script_dir = d.path().join("script");
    let script_dir = script_dir.to_str().unwrap();
    args.extend([
        "--variants",
        "base",
        "--gpus",
        "1",
        "--print-manual",
        script_dir,
    ]);
    let o = local(&args);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let want: Vec<serde_json::Value> = cases.into_iter().map(|(_, config)| config).collect();
    assert_eq!(config_models(&common::stdout(&o)), want);
}

/// Through the API the model travels as a `ModelChoice` message: the daemon's request, read
/// back from it, writes the same script config as the CLI's own request.
#[test]
fn the_api_carries_each_model_to_the_scripts_config_unchanged() {
    use ddpcheck_core::ddp::{DdpRequest, ModelSpec};
    use ddpcheck_gpu::ddp;
    use ddpcheck_proto::v1;
    let cases = models_and_their_config();
    let mut local_req = DdpRequest::try_from(v1::BenchDdpRequest {
        variants: vec![v1::Variant::default()],
        world_sizes: vec![1],
        ..Default::default()
    })
    .unwrap();
    local_req.models = cases
        .iter()
        .map(|(arg, _)| arg.parse::<ModelSpec>().unwrap())
        .collect();
    let through_api = DdpRequest::try_from(v1::BenchDdpRequest::from(&local_req)).unwrap();
    let commands = |req: &DdpRequest| {
        let plan = ddp::plan(req).unwrap();
        let cfg = ddpcheck_gpu::RealConfig::default();
        ddp::launch_groups(req, &plan)
            .into_iter()
            .map(|(world, items)| {
                ddp::manual_command_group(&cfg, req, &items, world, "/s/__main__.py".as_ref())
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(commands(&through_api), commands(&local_req));
    let want: Vec<serde_json::Value> = cases.into_iter().map(|(_, config)| config).collect();
    assert_eq!(config_models(&commands(&through_api)), want);
}

/// A bad `--model` is refused where the command line is read: one line naming the model, exit
/// 64, and nothing started, not even a connection to the daemon the command names.
#[test]
fn a_bad_model_is_refused_at_the_edge_before_anything_starts() {
    let d = tempfile::tempdir().unwrap();
    let socket = format!("unix:{}", d.path().join("no-daemon.sock").display());
    for command in [&["bench", "ddp"][..], &["recommend"][..]] {
        for (model, says) in [
            ("gpt9", "model \"gpt9\": unknown model"),
            ("decoder:2,64,4,256,1000,kv=3", "must divide"),
            (
                "py:/nowhere/factory.py:make",
                "factory file /nowhere/factory.py",
            ),
        ] {
            for target in [&["--sim", "h200x2-nvlink"][..], &["--daemon", &socket][..]] {
                let mut args = target.to_vec();
                args.extend_from_slice(command);
                args.extend(["--model", model]);
                let o = local(&args);
                let err = stderr(&o);
                assert_eq!(code(&o), 64, "{args:?}: {err}");
                assert_eq!(err.trim().lines().count(), 1, "one clear line: {err}");
                assert!(err.starts_with("ddpcheck: "), "{args:?}: {err}");
                assert!(err.contains(says), "{args:?}: {err}");
            }
        }
    }
}
