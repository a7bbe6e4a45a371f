//! Tests of model specs: the text forms, parameter counts against known ones, Hugging Face
//! configs, and reports written before the newer fields.

use super::*;
use crate::num::ToF64;
use crate::step_time::GradLayout;

/// A 2-layer LLaMA-style config small enough to count by hand (see `small_llama_counts`).
const SMALL_LLAMA: &str = r#"{"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
    "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 176,
    "vocab_size": 1000, "max_position_embeddings": 256, "tie_word_embeddings": false,
    "hidden_act": "silu", "attention_bias": false, "rms_norm_eps": 1e-6}"#;

fn parse(s: &str) -> ModelSpec {
    s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
}

#[test]
fn an_mlp_with_input_and_output_counts_every_linear_layer() {
    let spec = parse("mlp:784->2048x4->10");
    // 784->2048, four 2048->2048, 2048->10: weights and biases.
    let want = (784 * 2048 + 2048) + 4 * (2048 * 2048 + 2048) + (2048 * 10 + 10);
    assert_eq!(spec.params(), want);
    assert_eq!(spec.params(), 18_413_578);
    assert_eq!(spec.name(), "mlp:784->2048x4->10");
    assert_eq!(
        spec.mlp_layers(),
        vec![
            (784, 2048),
            (2048, 2048),
            (2048, 2048),
            (2048, 2048),
            (2048, 2048),
            (2048, 10)
        ]
    );
    // The square forms are unchanged: D layers of W x W.
    assert_eq!(parse("mlp:1024x4"), ModelSpec::square_mlp(1024, 4));
    assert_eq!(parse("mlp:1024,4").params(), 4 * (1024 * 1024 + 1024));
}

#[test]
fn every_form_reads_back_from_its_arg_and_its_name() {
    for arg in [
        "gpt2-124m",
        "mlp:2048,3",
        "mlp:784->2048x4->10",
        "mlp: 3 -> 64x2 -> 1",
        "decoder:4,256,8,512,1000",
        "decoder:2,64,4,256,1000,llama,ffn=176,kv=2,untied",
        "decoder:2,64,4,256,1000,ffn=100",
    ] {
        let spec = parse(arg);
        assert_eq!(parse(&spec.to_arg()), spec, "{arg}");
    }
    for name in ["mlp:1024x4", "mlp:784->2048x4->10", "gpt2-355m"] {
        assert_eq!(parse(name).name(), name);
    }
    // Options that state a default are not stored, so equal shapes are equal specs.
    assert_eq!(
        parse("decoder:2,64,4,256,1000,ffn=256,kv=4,gpt2"),
        parse("decoder:2,64,4,256,1000")
    );
}

#[test]
fn bad_model_specs_say_what_is_wrong_and_what_is_accepted() {
    for (arg, says) in [
        ("mlp:784->2048->10", "not WIDTHxDEPTH"),
        ("mlp:784->2048x4", "IN->WIDTHxDEPTH->OUT"),
        ("mlp:784->2048x4->0", "outside 1..=1048576"),
        ("mlp:1,2,3", "one or two numbers"),
        ("decoder:2,64", "three to five numbers"),
        ("decoder:2,64,4,256,1000,turbo", "unknown decoder option"),
        ("decoder:2,64,4,256,1000,kv=3", "must divide"),
        ("decoder:2,60,4,256,1000,llama", "must be even"),
        ("resnet", "unknown model"),
    ] {
        let err = arg.parse::<ModelSpec>().unwrap_err().to_string();
        assert!(err.contains(says), "{arg}: {err}");
        assert!(err.contains(arg.trim()), "{arg}: {err}");
    }
    let err = "mlp:x".parse::<ModelSpec>().unwrap_err().to_string();
    assert!(err.contains(MODEL_FORMS), "{err}");
}

#[test]
fn gpt2_configs_give_the_published_counts_and_the_presets() {
    let small = r#"{"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12,
        "n_positions": 1024, "n_ctx": 1024, "vocab_size": 50257, "n_inner": null}"#;
    let spec = from_hf_config(small).unwrap();
    assert_eq!(spec.params(), 124_439_808);
    assert_eq!(spec, ModelSpec::gpt2_124m());
    let medium = r#"{"model_type": "gpt2", "n_layer": 24, "n_embd": 1024, "n_head": 16,
        "n_positions": 1024, "vocab_size": 50257}"#;
    let spec = from_hf_config(medium).unwrap();
    assert_eq!(spec.params(), 354_823_168);
    assert_eq!(spec, ModelSpec::gpt2_355m());
    // Another shape is a decoder spec of its own, which travels as its arg.
    let tiny =
        r#"{"n_layer": 2, "n_embd": 64, "n_head": 4, "n_positions": 128, "vocab_size": 500}"#;
    let spec = from_hf_config(tiny).unwrap();
    assert_eq!(spec.to_arg(), "decoder:2,64,4,128,500");
    // Per layer 12·64² + 13·64; embeddings 500·64 + 128·64; final norm 2·64.
    assert_eq!(
        spec.params(),
        2 * (12 * 64 * 64 + 13 * 64) + 500 * 64 + 128 * 64 + 2 * 64
    );
}

#[test]
fn small_llama_counts() {
    let spec = from_hf_config(SMALL_LLAMA).unwrap();
    // Head width 64/4 = 16. Per layer: q 64·64 + k, v 2·(64·2·16) + o 64·64 = 12,288;
    // gate, up, down 3·64·176 = 33,792; two RMSNorms 128: 46,208. Two layers 92,416;
    // embedding and untied head 2·1000·64 = 128,000; final norm 64.
    assert_eq!(spec.params(), 220_480);
    assert_eq!(spec.name(), "llama-2x64");
    assert_eq!(
        spec.to_arg(),
        "decoder:2,64,4,256,1000,llama,ffn=176,kv=2,untied"
    );
    assert_eq!(parse(&spec.to_arg()), spec);
    // Tied, the head is the embedding: 64,000 fewer.
    let tied = SMALL_LLAMA.replace(
        r#""tie_word_embeddings": false"#,
        r#""tie_word_embeddings": true"#,
    );
    assert_eq!(from_hf_config(&tied).unwrap().params(), 220_480 - 64_000);
    // TinyLlama-1.1B's config and its published count.
    let tinyllama = r#"{"model_type": "llama", "num_hidden_layers": 22, "hidden_size": 2048,
        "num_attention_heads": 32, "num_key_value_heads": 4, "intermediate_size": 5632,
        "vocab_size": 32000, "max_position_embeddings": 2048, "tie_word_embeddings": false}"#;
    assert_eq!(from_hf_config(tinyllama).unwrap().params(), 1_100_048_384);
}

#[test]
fn configs_the_benchmark_cannot_build_are_refused() {
    for (text, says) in [
        ("[1]", "not a JSON object"),
        ("{", "not JSON"),
        (
            r#"{"model_type": "qwen2", "num_hidden_layers": 2}"#,
            "model_type \"qwen2\"",
        ),
        (
            r#"{"model_type": "gpt2", "n_layer": 2, "n_head": 4}"#,
            "n_embd is missing",
        ),
        (
            r#"{"n_layer": 2, "n_embd": -64, "n_head": 4}"#,
            "n_embd must be a positive integer",
        ),
    ] {
        let err = from_hf_config(text).unwrap_err().to_string();
        assert!(err.contains(says), "{text}: {err}");
    }
    for (key, value) in [
        ("attention_bias", "true"),
        ("hidden_act", "\"gelu\""),
        ("head_dim", "32"),
        ("tie_word_embeddings", "\"no\""),
    ] {
        let mut config: serde_json::Value = serde_json::from_str(SMALL_LLAMA).unwrap();
        config[key] = serde_json::from_str(value).unwrap();
        let err = from_hf_config(&config.to_string()).unwrap_err().to_string();
        assert!(err.contains(key), "{key}: {err}");
    }
}

#[test]
fn reports_written_before_the_newer_fields_still_read() {
    let old = r#"{"kind": "decoder", "name": "gpt2-124m", "layers": 12, "width": 768,
        "heads": 12, "seq": 1024, "vocab": 50257}"#;
    assert_eq!(
        serde_json::from_str::<ModelSpec>(old).unwrap(),
        ModelSpec::gpt2_124m()
    );
    let old = r#"{"kind": "mlp", "width": 1024, "depth": 4}"#;
    let mlp = serde_json::from_str::<ModelSpec>(old).unwrap();
    assert_eq!(mlp, ModelSpec::square_mlp(1024, 4));
    // And what is written for those models has no new keys.
    assert_eq!(
        serde_json::to_string(&mlp).unwrap(),
        r#"{"kind":"mlp","width":1024,"depth":4}"#
    );
    let llama = from_hf_config(SMALL_LLAMA).unwrap();
    let json = serde_json::to_string(&llama).unwrap();
    assert!(
        json.contains(r#""arch":"llama","ffn":176,"kv_heads":2,"untied":true"#),
        "{json}"
    );
    assert_eq!(serde_json::from_str::<ModelSpec>(&json).unwrap(), llama);
}

#[test]
fn gradient_layouts_hold_every_parameter_of_the_new_specs() {
    for spec in [
        parse("mlp:784->2048x4->10"),
        from_hf_config(SMALL_LLAMA).unwrap(),
        parse("decoder:2,64,4,256,1000,llama,ffn=176"),
        parse("decoder:2,64,4,256,1000,untied,ffn=100"),
    ] {
        let l = GradLayout::for_model(&spec);
        assert_eq!(l.params(), spec.params(), "{}", spec.to_arg());
        assert!(l.tensors.windows(2).all(|w| w[0].ready <= w[1].ready));
        assert!(l.tensors.iter().all(|t| (0.0..=1.0).contains(&t.ready)));
    }
    // The MLP's output layer is computed first, its bias before its weight (the reverse of
    // registration): each is ready at the share of the parameters done by then.
    let spec = parse("mlp:784->2048x4->10");
    let l = GradLayout::for_model(&spec);
    let all = spec.params().to_f64();
    assert_eq!((l.tensors[0].params, l.tensors[1].params), (10, 20480));
    assert!((l.tensors[0].ready - 10.0 / all).abs() < 1e-12);
    assert!((l.tensors[1].ready - 20490.0 / all).abs() < 1e-12);
}

/// Each refusal is the variant of its failure, with the text given, and reads as before.
#[test]
fn a_refused_model_says_which_failure_it_is() {
    let err = |arg: &str| arg.parse::<ModelSpec>().unwrap_err();
    assert_eq!(
        err("mlp:4096xq"),
        ModelSpecError::Form {
            arg: "mlp:4096xq".into(),
            cause: FormError::NotANumber("q".into()),
            expected: MODEL_FORMS,
        }
    );
    assert_eq!(
        err(" decoder:2,60,4,256,1000,llama "),
        ModelSpecError::Shape {
            arg: "decoder:2,60,4,256,1000,llama".into(),
            cause: ShapeError::OddHeadWidth {
                width: 60,
                heads: 4
            },
        }
    );
    assert_eq!(
        err("mlp:784->2048x4->0").to_string(),
        "model \"mlp:784->2048x4->0\": MLP input 784 or output 0 outside 1..=1048576"
    );
    assert!(matches!(
        err("hf:llama,seq=2"),
        ModelSpecError::Source { cause: SourceError::Seq(s), .. } if s == "2"
    ));
    assert_eq!(
        from_hf_config(r#"{"n_layer": 2, "n_head": 4}"#),
        Err(HfConfigError::Missing("n_embd".into()))
    );
}
