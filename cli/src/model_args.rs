//! `--model` and `--model-config` read once, where clap reads the command line, into core's
//! `ModelSpec`: the commands, the engine, the API and the script's config carry that value,
//! and nothing reads a model's text again. A factory's file and an `hf:` config.json are made
//! absolute here (the launch, and a daemon, run elsewhere) and checked to exist.

use std::path::{Path, PathBuf};

use ddpcheck_core::ddp::{is_file_target, ModelSource, ModelSpec, ModelSpecError};

use crate::read_at_edge::{NotUtf8, ReadAtEdge};

/// Why `--model` names no model to run: its text, or a file it names.
#[derive(Debug, thiserror::Error)]
pub enum ModelArgError {
    #[error(transparent)]
    Spec(#[from] ModelSpecError),
    /// `what`: the factory file or the configuration the model names.
    #[error("--model {arg}: {what} {}: {error}", path.display())]
    File {
        arg: String,
        what: &'static str,
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("--model {arg}: {} is not a file", path.display())]
    NotAFile { arg: String, path: PathBuf },
    #[error("--model {0}: the path is not UTF-8")]
    PathNotUtf8(String),
}

/// `--model`'s parser.
pub fn model() -> ReadAtEdge<ModelSpec> {
    ReadAtEdge(|v| {
        let text = v
            .to_str()
            .ok_or_else(|| NotUtf8(format!("--model {}", v.to_string_lossy())))?;
        Ok(parse_model(text)?)
    })
}

/// `--model-config`'s parser: the file read (bounded, as every file a caller names) and the
/// decoder it describes.
pub fn model_config() -> ReadAtEdge<ModelSpec> {
    ReadAtEdge(|v| {
        Ok(ddpcheck_engine::model_config::read_model_config(
            Path::new(v),
        )?)
    })
}

/// A model argument read as a spec, a factory's file or a Hugging Face `config.json` made
/// absolute and canonical and checked to exist: a missing file is one line before anything
/// starts, and a daemon, which reads only such paths, gets one.
fn parse_model(arg: &str) -> Result<ModelSpec, ModelArgError> {
    let spec = arg.parse::<ModelSpec>()?;
    let Some(source) = spec.source() else {
        return Ok(spec);
    };
    let source = match source {
        ModelSource::Python { target, function } if is_file_target(target) => ModelSource::Python {
            target: canonical_file(arg, "factory file", target)?,
            function: function.clone(),
        },
        ModelSource::HuggingFace {
            model_type,
            config_path: Some(path),
            overrides,
            seq,
        } => ModelSource::HuggingFace {
            model_type: model_type.clone(),
            config_path: Some(canonical_file(arg, "configuration", path)?),
            overrides: overrides.clone(),
            seq: *seq,
        },
        _ => return Ok(spec),
    };
    Ok(ModelSpec::External { source })
}

/// The canonical path of a file a model argument names, as text.
fn canonical_file(arg: &str, what: &'static str, named: &str) -> Result<String, ModelArgError> {
    let path = Path::new(named);
    let absolute = std::fs::canonicalize(path).map_err(|error| ModelArgError::File {
        arg: arg.to_string(),
        what,
        path: path.to_path_buf(),
        error,
    })?;
    if !absolute.is_file() {
        return Err(ModelArgError::NotAFile {
            arg: arg.to_string(),
            path: absolute,
        });
    }
    absolute
        .to_str()
        .map(str::to_string)
        .ok_or_else(|| ModelArgError::PathNotUtf8(arg.to_string()))
}
