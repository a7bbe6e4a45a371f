//! A decoder spec from a Hugging Face `config.json`: GPT-2 (`n_layer`, `n_embd`, `n_head`,
//! `n_positions`, `vocab_size`) or LLaMA style (`model_type` llama or mistral:
//! `num_hidden_layers`, `hidden_size`, `num_attention_heads`, `num_key_value_heads`,
//! `intermediate_size`, `vocab_size`, `max_position_embeddings`, `tie_word_embeddings`).
//! What the benchmark script cannot build the same way is refused rather than miscounted.

use serde_json::{Map, Value};

use super::decoder::{Decoder, DecoderArch, GPT2_VOCAB};
use super::model_error::HfConfigError;
use super::spec::ModelSpec;

/// The `model_type`s read as LLaMA-style decoders.
const LLAMA_TYPES: [&str; 2] = ["llama", "mistral"];

/// The decoder a config describes; a GPT-2 preset's shape comes back as that preset.
pub fn from_hf_config(text: &str) -> Result<ModelSpec, HfConfigError> {
    let value: Value =
        serde_json::from_str(text).map_err(|e| HfConfigError::NotJson(e.to_string()))?;
    let c = value.as_object().ok_or(HfConfigError::NotAnObject)?;
    let model_type = c.get("model_type").and_then(Value::as_str);
    let decoder =
        if model_type == Some("gpt2") || (model_type.is_none() && c.contains_key("n_layer")) {
            gpt2(c)?
        } else if model_type.is_none_or(|t| LLAMA_TYPES.contains(&t))
            && c.contains_key("num_hidden_layers")
        {
            llama(c)?
        } else {
            return Err(HfConfigError::ModelType {
                model_type: model_type.unwrap_or("(none)").to_string(),
                llama_types: LLAMA_TYPES.join(" or "),
            });
        };
    decoder.validate()?;
    Ok(ModelSpec::Decoder(decoder.as_preset()))
}

/// Hugging Face's `LlamaConfig` defaults (transformers' configuration_llama.py): what
/// `AutoConfig.for_model("llama", **overrides)` starts from.
const LLAMA_DEFAULTS: [(&str, u32); 6] = [
    ("vocab_size", 32000),
    ("hidden_size", 4096),
    ("intermediate_size", 11008),
    ("num_hidden_layers", 32),
    ("num_attention_heads", 32),
    ("max_position_embeddings", 2048),
];

/// The decoder an `hf:llama[,KEY=VALUE...]` source builds, counted without building it:
/// `LlamaConfig`'s defaults with the overrides on top, the batch's `seq` tokens. `None` for
/// another model type, a `config.json` (core reads no file) or an override it cannot read.
pub fn hf_llama_decoder(
    model_type: &str,
    overrides: &[(String, String)],
    seq: u32,
) -> Option<Decoder> {
    if model_type != "llama" {
        return None;
    }
    let mut c: Map<String, Value> = LLAMA_DEFAULTS
        .iter()
        .map(|(k, v)| ((*k).to_string(), Value::from(*v)))
        .collect();
    for (k, v) in overrides {
        let value = serde_json::from_str(v).unwrap_or_else(|_| Value::from(v.as_str()));
        c.insert(k.clone(), value);
    }
    let mut d = llama(&c).ok()?;
    d.seq = seq;
    d.validate().ok()?;
    Some(d)
}

fn gpt2(c: &Map<String, Value>) -> Result<Decoder, HfConfigError> {
    let (layers, width) = (count(c, "n_layer")?, count(c, "n_embd")?);
    let seq = match c.get("n_positions") {
        Some(_) => count(c, "n_positions")?,
        None => count_or(c, "n_ctx", 1024)?,
    };
    Ok(Decoder {
        name: Decoder::shape_name(DecoderArch::Gpt2, layers, width),
        layers,
        width,
        heads: count(c, "n_head")?,
        seq,
        vocab: count_or(c, "vocab_size", GPT2_VOCAB)?,
        arch: DecoderArch::Gpt2,
        ffn: optional_count(c, "n_inner")?.filter(|f| u64::from(*f) != 4 * u64::from(width)),
        kv_heads: None,
        untied: !flag(c, "tie_word_embeddings", true)?,
    })
}

fn llama(c: &Map<String, Value>) -> Result<Decoder, HfConfigError> {
    let (layers, width) = (count(c, "num_hidden_layers")?, count(c, "hidden_size")?);
    let heads = count(c, "num_attention_heads")?;
    for key in ["attention_bias", "mlp_bias"] {
        if flag(c, key, false)? {
            return Err(HfConfigError::Bias(key));
        }
    }
    if let Some(act) = c.get("hidden_act").filter(|a| a.as_str() != Some("silu")) {
        return Err(HfConfigError::Activation(act.to_string()));
    }
    if let Some(hd) = optional_count(c, "head_dim")?.filter(|hd| heads == 0 || *hd != width / heads)
    {
        return Err(HfConfigError::HeadDim(hd));
    }
    let kv = optional_count(c, "num_key_value_heads")?.filter(|kv| *kv != heads);
    Ok(Decoder {
        name: Decoder::shape_name(DecoderArch::Llama, layers, width),
        layers,
        width,
        heads,
        // HF's LlamaConfig defaults, for keys a config leaves out.
        seq: count_or(c, "max_position_embeddings", 2048)?,
        vocab: count(c, "vocab_size")?,
        arch: DecoderArch::Llama,
        ffn: Some(count(c, "intermediate_size")?),
        kv_heads: kv,
        untied: !flag(c, "tie_word_embeddings", false)?,
    })
}

fn optional_count(c: &Map<String, Value>, key: &str) -> Result<Option<u32>, HfConfigError> {
    match c.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .filter(|n| *n > 0)
            .map(Some)
            .ok_or_else(|| HfConfigError::NotACount {
                key: key.to_string(),
                value: v.to_string(),
            }),
    }
}

fn count(c: &Map<String, Value>, key: &str) -> Result<u32, HfConfigError> {
    optional_count(c, key)?.ok_or_else(|| HfConfigError::Missing(key.to_string()))
}

fn count_or(c: &Map<String, Value>, key: &str, default: u32) -> Result<u32, HfConfigError> {
    Ok(optional_count(c, key)?.unwrap_or(default))
}

fn flag(c: &Map<String, Value>, key: &str, default: bool) -> Result<bool, HfConfigError> {
    match c.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(v) => Err(HfConfigError::NotAFlag {
            key: key.to_string(),
            value: v.to_string(),
        }),
    }
}
