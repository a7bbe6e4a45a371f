//! Models the benchmark script builds from code on the node rather than from a spec: the user's
//! own factory (`py:FILE_OR_MODULE:FUNCTION`) and library models from random weights
//! (`torchvision:NAME`, `timm:NAME`, `hf:MODEL_TYPE[,key=value...]` or `hf:PATH/config.json`).
//! Their tensors are known only once a launch reports them (`DdpResult::param_layout`).

use std::fmt;

use serde::{Deserialize, Serialize};

/// The forms of a model built by code, for error messages and `--help`.
pub const SOURCE_FORMS: &str = "py:FILE.py:FUNCTION, py:MODULE:FUNCTION, torchvision:NAME, timm:NAME, hf:MODEL_TYPE[,KEY=VALUE...] or hf:PATH/config.json[,KEY=VALUE...]";

/// The sequence length of a Hugging Face model's random batches when `seq=` is not given.
pub const HF_DEFAULT_SEQ: u32 = 1024;

/// Where a model built by code comes from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ModelSource {
    /// The user's factory: a function in a Python file or an importable module that returns the
    /// module and a way to make one micro-batch (docs/recommend.md, "Your own model").
    Python {
        /// A path to a `.py` file (absolute once the CLI has resolved it) or a dotted module.
        target: String,
        function: String,
    },
    /// `torchvision.models.get_model(NAME, weights=None)`.
    Torchvision { name: String },
    /// `timm.create_model(NAME, pretrained=False)`.
    Timm { name: String },
    /// A causal language model from a Hugging Face configuration, from random weights:
    /// `AutoConfig.for_model(model_type, **overrides)` or a local `config.json` with the
    /// overrides applied; random token batches of `seq` tokens.
    HuggingFace {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model_type: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        config_path: Option<String>,
        /// Configuration fields to set, as text (`hidden_size=1024`); the script reads numbers
        /// and `true`/`false` as such.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        overrides: Vec<(String, String)>,
        seq: u32,
    },
}

impl ModelSource {
    /// Reads `py:...`, `torchvision:...`, `timm:...` or `hf:...`; `None` when `s` is none of
    /// these forms (a preset or spec), `Some(Err)` when it is one of them and malformed.
    pub fn parse(s: &str) -> Option<Result<Self, SourceError>> {
        let s = s.trim();
        let (scheme, rest) = s.split_once(':')?;
        let parsed = match scheme.to_ascii_lowercase().as_str() {
            "py" | "python" => parse_python(rest),
            "torchvision" => library_name(rest).map(|name| ModelSource::Torchvision { name }),
            "timm" => library_name(rest).map(|name| ModelSource::Timm { name }),
            "hf" => parse_hf(rest),
            _ => return None,
        };
        Some(parsed)
    }

    /// The text form `parse` reads back: how the model travels in the API and in results.
    pub fn to_arg(&self) -> String {
        match self {
            ModelSource::Python { target, function } => format!("py:{target}:{function}"),
            ModelSource::Torchvision { name } => format!("torchvision:{name}"),
            ModelSource::Timm { name } => format!("timm:{name}"),
            ModelSource::HuggingFace {
                model_type,
                config_path,
                overrides,
                seq,
            } => {
                let mut arg = format!(
                    "hf:{}",
                    config_path
                        .as_deref()
                        .or(model_type.as_deref())
                        .unwrap_or("")
                );
                for (k, v) in overrides {
                    arg.push_str(&format!(",{k}={v}"));
                }
                if *seq != HF_DEFAULT_SEQ {
                    arg.push_str(&format!(",seq={seq}"));
                }
                arg
            }
        }
    }

    /// The bounds `parse` reads by, for a source that arrives already split into its fields
    /// (the API's `ModelChoice`): what a daemon checks before anything runs.
    pub fn validate(&self) -> Result<(), SourceError> {
        match self {
            ModelSource::Python { target, function } => check_factory(target, function),
            ModelSource::Torchvision { name } | ModelSource::Timm { name } => {
                check_library_name(name)
            }
            ModelSource::HuggingFace {
                model_type,
                config_path,
                overrides,
                seq,
            } => check_hf(
                model_type.as_deref(),
                config_path.as_deref(),
                overrides,
                *seq,
            ),
        }
    }

    /// The user's own code (a factory), as opposed to a library's constructor: what a daemon
    /// runs only from the paths its configuration allows.
    pub fn is_user_code(&self) -> bool {
        matches!(self, ModelSource::Python { .. })
    }

    /// The factory's file when it is one (not a module name).
    pub fn factory_file(&self) -> Option<&str> {
        match self {
            ModelSource::Python { target, .. } if is_file_target(target) => Some(target),
            _ => None,
        }
    }

    /// Tokens in one sample: the sequence for language models, 1 (samples) otherwise.
    pub fn tokens_per_sample(&self) -> u32 {
        match self {
            ModelSource::HuggingFace { seq, .. } => *seq,
            _ => 1,
        }
    }
}

impl fmt::Display for ModelSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_arg())
    }
}

/// What is wrong with a model built by code, read from text or from the API's fields.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    #[error("a factory is py:FILE.py:FUNCTION or py:MODULE:FUNCTION")]
    FactoryForm,
    #[error("{0:?} is not a Python function name")]
    Function(String),
    #[error("{0:?} is neither a .py file nor a dotted module name")]
    FactoryTarget(String),
    #[error("the factory's path holds control characters")]
    FactoryControl,
    #[error("{0:?} is not a model name")]
    ModelName(String),
    /// An `hf:` part or override that is not `KEY=VALUE` with a key Python names.
    #[error("{0:?} is not KEY=VALUE")]
    NotKeyValue(String),
    #[error("seq={0}: a sequence length in 8..=131072")]
    Seq(String),
    #[error("{0:?}: a key or value is at most {HF_MAX_TEXT} bytes")]
    OverrideLength(String),
    #[error("{0}: outside -{HF_MAX_INT}..={HF_MAX_INT}")]
    IntRange(String),
    #[error("{0}: outside -1e9..=1e9")]
    DecimalRange(String),
    #[error("{0:?} is not KEY=VALUE (a number, true, false or a word)")]
    OverrideValue(String),
    #[error("{0} overrides: at most {HF_MAX_OVERRIDES} overrides")]
    Overrides(usize),
    #[error("a config.json's path is at most {HF_MAX_PATH} bytes, without control characters")]
    ConfigPath,
    #[error("{0:?} is neither a model type (llama, gpt2, ...) nor a config.json")]
    HfTarget(String),
}

/// A factory target names a file when it has a path separator or ends in `.py`.
pub fn is_file_target(target: &str) -> bool {
    target.contains('/') || target.ends_with(".py")
}

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `FILE.py:FUNCTION` or `MODULE:FUNCTION` (the last `:` splits, so a path may hold one).
fn parse_python(rest: &str) -> Result<ModelSource, SourceError> {
    let (target, function) = rest.rsplit_once(':').ok_or(SourceError::FactoryForm)?;
    check_factory(target, function)?;
    Ok(ModelSource::Python {
        target: target.to_string(),
        function: function.to_string(),
    })
}

fn check_factory(target: &str, function: &str) -> Result<(), SourceError> {
    if !is_identifier(function) {
        return Err(SourceError::Function(function.to_string()));
    }
    let module_ok = || target.split('.').all(is_identifier);
    if target.is_empty() || !(is_file_target(target) || module_ok()) {
        return Err(SourceError::FactoryTarget(target.to_string()));
    }
    if target.chars().any(char::is_control) {
        return Err(SourceError::FactoryControl);
    }
    Ok(())
}

/// A library's model name: letters, digits, `_`, `.` and `-` (timm's tags), at most 128.
fn library_name(rest: &str) -> Result<String, SourceError> {
    check_library_name(rest).map(|()| rest.to_string())
}

fn check_library_name(name: &str) -> Result<(), SourceError> {
    let ok = !name.is_empty()
        && name.len() <= 128
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
    if ok {
        Ok(())
    } else {
        Err(SourceError::ModelName(name.to_string()))
    }
}

/// `MODEL_TYPE[,KEY=VALUE...]` or `PATH/config.json[,KEY=VALUE...]`; `seq=N` sets the batch's
/// sequence length rather than a configuration field.
fn parse_hf(rest: &str) -> Result<ModelSource, SourceError> {
    let mut parts = rest.split(',').map(str::trim);
    let what = parts.next().unwrap_or("");
    let (mut overrides, mut seq) = (Vec::new(), HF_DEFAULT_SEQ);
    for part in parts {
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| SourceError::NotKeyValue(part.to_string()))?;
        if k == "seq" {
            seq = v.parse().map_err(|_| SourceError::Seq(v.to_string()))?;
        } else {
            overrides.push((k.to_string(), v.to_string()));
        }
    }
    let is_config = is_config_path(what);
    let source = ModelSource::HuggingFace {
        model_type: (!is_config).then(|| what.to_string()),
        config_path: is_config.then(|| what.to_string()),
        overrides,
        seq,
    };
    source.validate()?;
    Ok(source)
}

/// An `hf:` target names a `config.json` rather than a model type.
fn is_config_path(what: &str) -> bool {
    what.ends_with(".json") || what.contains('/')
}

/// At most this many `KEY=VALUE` overrides, each key and value at most [`HF_MAX_TEXT`] bytes.
pub const HF_MAX_OVERRIDES: usize = 32;
/// The longest key or value of an override.
pub const HF_MAX_TEXT: usize = 64;
/// The longest path of a `config.json` (Linux's `PATH_MAX`).
pub const HF_MAX_PATH: usize = 4096;
/// An integer override's magnitude at most 2^24: wide enough for any real model's sizes
/// (vocabularies of 262,144, contexts of 131,072), narrow enough that no one field asks for
/// more memory than a node has.
pub const HF_MAX_INT: i64 = 1 << 24;
/// A decimal override is finite and its magnitude at most 10^9 (rope_theta reaches 10^7).
pub const HF_MAX_DECIMAL: f64 = 1e9;

/// One override as the script reads it (`typed`: `true`/`false`, an int, a float, else text):
/// a number within its bounds, or a word of letters, digits, `_`, `.` and `-` that starts with a
/// letter and that Python does not read as a number (`nan`, `inf`).
fn check_override(k: &str, v: &str) -> Result<(), SourceError> {
    let pair = || format!("{k}={v}");
    if k.len() > HF_MAX_TEXT || v.len() > HF_MAX_TEXT {
        return Err(SourceError::OverrideLength(pair()));
    }
    if !is_identifier(k) || k == "seq" {
        return Err(SourceError::NotKeyValue(pair()));
    }
    if let Ok(n) = v.parse::<i64>() {
        return if n.abs() <= HF_MAX_INT {
            Ok(())
        } else {
            Err(SourceError::IntRange(pair()))
        };
    }
    if let Ok(x) = v.parse::<f64>() {
        return if x.is_finite() && x.abs() <= HF_MAX_DECIMAL {
            Ok(())
        } else {
            Err(SourceError::DecimalRange(pair()))
        };
    }
    let word = v.starts_with(|c: char| c.is_ascii_alphabetic())
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
    if word {
        Ok(())
    } else {
        Err(SourceError::OverrideValue(pair()))
    }
}

/// The rules `parse_hf` reads by, for a source that arrives already split (the API's).
fn check_hf(
    model_type: Option<&str>,
    config_path: Option<&str>,
    overrides: &[(String, String)],
    seq: u32,
) -> Result<(), SourceError> {
    if overrides.len() > HF_MAX_OVERRIDES {
        return Err(SourceError::Overrides(overrides.len()));
    }
    for (k, v) in overrides {
        check_override(k, v)?;
    }
    if config_path.is_some_and(|p| p.len() > HF_MAX_PATH || p.chars().any(char::is_control)) {
        return Err(SourceError::ConfigPath);
    }
    if !(8..=131_072).contains(&seq) {
        return Err(SourceError::Seq(seq.to_string()));
    }
    let target_ok = match (model_type, config_path) {
        (Some(t), None) => !is_config_path(t) && library_name(t).is_ok(),
        (None, Some(p)) => is_config_path(p) && !p.contains(','),
        _ => false,
    };
    if !target_ok {
        return Err(SourceError::HfTarget(
            config_path.or(model_type).unwrap_or("").to_string(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_form_and_writes_it_back() {
        for arg in [
            "py:/home/me/model.py:make",
            "py:models.vision:build_model",
            "torchvision:resnet50",
            "timm:vit_base_patch16_224.augreg_in21k",
            "hf:llama,hidden_size=1024,num_hidden_layers=12,seq=512",
            "hf:/data/cfg/config.json",
        ] {
            let s = ModelSource::parse(arg).expect("a source form").expect(arg);
            assert_eq!(s.to_arg(), arg);
        }
    }

    #[test]
    fn presets_are_not_sources() {
        assert!(ModelSource::parse("gpt2-124m").is_none());
        assert!(ModelSource::parse("mlp:1024x4").is_none());
        assert!(ModelSource::parse("decoder:12,768,12").is_none());
    }

    #[test]
    fn malformed_sources_say_what_is_wrong() {
        let err = |a: &str| {
            ModelSource::parse(a)
                .expect("source")
                .unwrap_err()
                .to_string()
        };
        assert!(err("py:model.py").contains("py:FILE.py:FUNCTION"));
        assert!(err("py:model.py:2make").contains("not a Python function name"));
        assert!(err("py:my-module:make").contains("neither a .py file"));
        assert!(err("torchvision:").contains("not a model name"));
        assert!(err("hf:llama,seq=2").contains("sequence length"));
        assert!(err("hf:llama,hidden").contains("KEY=VALUE"));
    }

    #[test]
    fn hf_overrides_are_bounded() {
        let err = |a: &str| {
            ModelSource::parse(a)
                .expect("source")
                .unwrap_err()
                .to_string()
        };
        for ok in [
            "hf:llama,hidden_size=16384,rms_norm_eps=1e-06,rope_theta=500000.0,tie_word_embeddings=false,hidden_act=silu",
            "hf:llama,pad_token_id=-1,vocab_size=262144",
        ] {
            assert!(ModelSource::parse(ok).unwrap().is_ok(), "{ok}");
        }
        assert!(err("hf:llama,hidden_size=99999999999").contains("outside"));
        assert!(err("hf:llama,num_hidden_layers=40960000").contains("outside"));
        assert!(err("hf:llama,rope_theta=1e300").contains("outside"));
        assert!(err("hf:llama,rms_norm_eps=nan").contains("outside"));
        assert!(err(&format!("hf:llama,hidden_act={}", "a".repeat(65))).contains("at most 64"));
        assert!(err("hf:llama,hidden_act=$(id)").contains("KEY=VALUE"));
        assert!(err(&format!("hf:llama,{}=1", "k".repeat(65))).contains("at most 64"));
        let many: String = (0..33).map(|i| format!(",k{i}=1")).collect();
        assert!(err(&format!("hf:llama{many}")).contains("at most 32 overrides"));
        assert!(err(&format!("hf:/{}/config.json", "d".repeat(4096))).contains("at most 4096"));
    }

    #[test]
    fn hf_splits_type_config_overrides_and_seq() {
        let s = ModelSource::parse("hf:llama,hidden_size=1024,seq=256")
            .unwrap()
            .unwrap();
        let ModelSource::HuggingFace {
            model_type,
            config_path,
            overrides,
            seq,
        } = s
        else {
            panic!("not hf");
        };
        assert_eq!(model_type.as_deref(), Some("llama"));
        assert_eq!(config_path, None);
        assert_eq!(overrides, vec![("hidden_size".into(), "1024".into())]);
        assert_eq!(seq, 256);
    }

    #[test]
    fn only_factories_are_user_code() {
        let user = ModelSource::parse("py:./m.py:make").unwrap().unwrap();
        assert!(user.is_user_code());
        assert_eq!(user.factory_file(), Some("./m.py"));
        let module = ModelSource::parse("py:pkg.m:make").unwrap().unwrap();
        assert!(module.is_user_code());
        assert_eq!(module.factory_file(), None);
        assert!(!ModelSource::parse("timm:vit_base_patch16_224")
            .unwrap()
            .unwrap()
            .is_user_code());
    }
}
