//! `--model` and `--model-config` read once, where clap reads the command line, into core's
//! `ModelSpec`: the commands, the engine, the API and the script's config carry that value,
//! and nothing reads a model's text again. A factory's file is made absolute here (the launch,
//! and a daemon, run elsewhere) and checked to exist.

use std::ffi::OsStr;
use std::path::Path;

use clap::builder::TypedValueParser;
use clap::error::ErrorKind;
use ddpcheck_core::ddp::{is_file_target, ModelSource, ModelSpec};

/// A clap value parser whose refusal is the reader's own line (`ddpcheck: model "x": ...`,
/// exit 64), not clap's "invalid value" wrapped around it.
#[derive(Clone)]
pub struct ReadAtEdge(fn(&OsStr) -> Result<ModelSpec, String>);

/// `--model`'s parser.
pub fn model() -> ReadAtEdge {
    ReadAtEdge(|v| {
        let text = v
            .to_str()
            .ok_or_else(|| format!("--model {}: not UTF-8", v.to_string_lossy()))?;
        parse_model(text)
    })
}

/// `--model-config`'s parser: the file read (bounded, as every file a caller names) and the
/// decoder it describes.
pub fn model_config() -> ReadAtEdge {
    ReadAtEdge(|v| {
        ddpcheck_engine::model_config::read_model_config(Path::new(v)).map_err(|e| e.to_string())
    })
}

impl TypedValueParser for ReadAtEdge {
    type Value = ModelSpec;

    fn parse_ref(
        &self,
        _cmd: &clap::Command,
        _arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<ModelSpec, clap::Error> {
        self.0(value).map_err(|e| clap::Error::raw(ErrorKind::ValueValidation, format!("{e}\n")))
    }
}

/// A model argument read as a spec, a factory's file made absolute and checked to exist: a
/// missing file is one line before anything starts.
fn parse_model(arg: &str) -> Result<ModelSpec, String> {
    let spec = arg.parse::<ModelSpec>()?;
    let Some(ModelSource::Python { target, function }) = spec.source() else {
        return Ok(spec);
    };
    if !is_file_target(target) {
        return Ok(spec);
    }
    let path = Path::new(target);
    let absolute = std::fs::canonicalize(path)
        .map_err(|e| format!("--model {arg}: factory file {}: {e}", path.display()))?;
    if !absolute.is_file() {
        return Err(format!(
            "--model {arg}: {} is not a file",
            absolute.display()
        ));
    }
    let target = absolute
        .to_str()
        .ok_or_else(|| format!("--model {arg}: the path is not UTF-8"))?
        .to_string();
    Ok(ModelSpec::External {
        source: ModelSource::Python {
            target,
            function: function.clone(),
        },
    })
}
